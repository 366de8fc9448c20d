"""IP address assignment: every link and LAN its own subnet, deterministic.

Networks are numbered in declaration order (links, then LANs). A network
whose interfaces were given addresses (``tb-set-ip-link``, ``tb-set-ip-lan``,
YAML ``ip:``) takes the subnet of those addresses with its netmask
(``tb-set-netmask``, default /24); the others get the next free block of
10.0.0.0/8 starting at 10.1.0.0, a /24 unless the network has more than 253
members. Hosts take the lowest free host numbers, in member order, after the
addresses given explicitly. The same IR always yields the same addresses.

Addresses given on one network that do not share a subnet (``10.1.1.2`` and
``10.1.2.3`` with /24) are configured as given, as Emulab does, with a warning:
each interface has its address with the network's netmask, the network's subnet
is that of its first given address (members without an address take theirs from
it), and every interface's subnet is kept clear of the other networks'.
:func:`interface_groups` says which interfaces of such a network reach each other.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable
from dataclasses import dataclass

from wanlab.errors import SpecError

POOL = ipaddress.IPv4Network("10.0.0.0/8")
POOL_START = int(ipaddress.IPv4Address("10.1.0.0"))


@dataclass(frozen=True)
class NetworkSpec:
    """A network to address: its members (node names) and any fixed addresses."""

    name: str
    members: tuple[str, ...]
    fixed: tuple[str | None, ...]     # per member: explicit address or None
    netmask: str | None


def _prefix_for(n_hosts: int) -> int:
    return min(24, 32 - math.ceil(math.log2(n_hosts + 2)))


def interface_groups(ips: list[str], prefixlen: int) -> dict[ipaddress.IPv4Network,
                                                                list[int]]:
    """The indexes of a network's addresses by the subnet each is in (one group unless
    the addresses were given in several subnets), in order of first appearance."""
    out: dict[ipaddress.IPv4Network, list[int]] = {}
    for k, ip in enumerate(ips):
        out.setdefault(ipaddress.IPv4Interface(f"{ip}/{prefixlen}").network, []).append(k)
    return out


def assign(networks: list[NetworkSpec], warn: Callable[[str, str], None] | None = None
           ) -> dict[str, tuple[ipaddress.IPv4Network, list[str]]]:
    """Map each network name to (subnet, member addresses in member order).

    ``warn(message, network)`` is told of a network whose given addresses are in several
    subnets (configured as given); without it, such a network is an error."""
    out: dict[str, tuple[ipaddress.IPv4Network, list[str]]] = {}
    taken: list[ipaddress.IPv4Network] = []
    # Fixed networks first: they constrain the automatic ones.
    for net in networks:
        fixed = [ip for ip in net.fixed if ip]
        if not fixed:
            continue
        prefix = net.netmask or "24"
        subnet = ipaddress.IPv4Network(f"{fixed[0]}/{prefix}", strict=False)
        own = list(interface_groups(fixed, subnet.prefixlen))
        if len(own) > 1:
            stray = next(ip for ip in fixed if ipaddress.IPv4Address(ip) not in subnet)
            if warn is None:
                raise SpecError(f"addresses {fixed[0]} and {stray} of {net.name!r} are not in "
                                f"one subnet /{subnet.prefixlen}", field=net.name)
            warn(f"addresses {fixed[0]} and {stray} of {net.name!r} are not in one subnet "
                 f"/{subnet.prefixlen}: configured as given (as Emulab does), so its members "
                 f"in different subnets ({', '.join(map(str, own))}) do not reach each "
                 f"other over it", net.name)
        for mine in own:
            for other in taken:
                if mine.overlaps(other):
                    raise SpecError(f"subnet {mine} of {net.name!r} overlaps {other} of "
                                    f"another link or LAN", field=net.name)
        taken.extend(own)
        out[net.name] = (subnet, _hosts(net, subnet))
    cursor = POOL_START
    for net in networks:
        if net.name in out:
            continue
        prefix = _prefix_for(len(net.members))
        if net.netmask:
            prefix = ipaddress.IPv4Network(f"0.0.0.0/{net.netmask}").prefixlen
        size = 1 << (32 - prefix)
        cursor = (cursor + size - 1) // size * size
        while True:
            subnet = ipaddress.IPv4Network((cursor, prefix))
            if subnet.broadcast_address not in POOL:
                raise SpecError("ran out of addresses in 10.0.0.0/8", field=net.name)
            # automatic subnets are handed out at an increasing cursor and never overlap
            # each other: only the fixed ones can be in the way
            clash = next((t for t in taken if t.overlaps(subnet)), None)
            if clash is None:
                break
            cursor = max(cursor + size, int(clash.broadcast_address) + 1)
            cursor = (cursor + size - 1) // size * size
        cursor += size
        out[net.name] = (subnet, _hosts(net, subnet))
    return out


def _hosts(net: NetworkSpec, subnet: ipaddress.IPv4Network) -> list[str]:
    used = {ip for ip in net.fixed if ip}
    if len(used) != len([ip for ip in net.fixed if ip]):
        raise SpecError(f"{net.name!r} gives the same address to two interfaces", field=net.name)
    for ip in used:
        a = ipaddress.IPv4Interface(f"{ip}/{subnet.prefixlen}")
        if a.ip in (a.network.network_address, a.network.broadcast_address):
            raise SpecError(f"{ip} is not a host address of {a.network}", field=net.name)
    free = (str(h) for h in subnet.hosts() if str(h) not in used)
    result = []
    for ip in net.fixed:
        if ip:
            result.append(ip)
        else:
            try:
                result.append(next(free))
            except StopIteration:
                raise SpecError(f"subnet {subnet} is too small for the {len(net.members)} "
                                f"members of {net.name!r}", field=net.name) from None
    return result


# -- IPv6 -------------------------------------------------------------------------------
# Every link and LAN gets a /64 of the experiment's prefix: a unique-local /48 derived from
# the experiment's name (RFC 4193's form: fd00::/8 and 40 bits, here of a hash rather than
# random, so the same experiment always gets the same addresses), or the one the spec gives.
# Its first /64 holds the nodes' loopbacks; the networks take the next ones in declaration
# order, skipping any a network with given addresses has. Hosts are ::1, ::2... in member
# order, after the addresses given.

SUBNET6 = 64


def ula_prefix(name: str) -> ipaddress.IPv6Network:
    """The experiment's unique-local /48, derived from its name."""
    import hashlib
    global_id = int.from_bytes(hashlib.sha256(name.encode()).digest()[:5], "big")
    return ipaddress.IPv6Network(((0xFD << 120) | (global_id << 80), 48))


def experiment_prefix(name: str, given: str | None) -> ipaddress.IPv6Network:
    """The prefix an experiment's IPv6 networks are numbered in."""
    return ipaddress.IPv6Network(given) if given else ula_prefix(name)


def loopback6(prefix: ipaddress.IPv6Network, k: int) -> str:
    """The ``k``-th node's IPv6 loopback (k from 1): in the prefix's first /64."""
    return str(prefix.network_address + k)


def assign6(networks: list[NetworkSpec], prefix: ipaddress.IPv6Network
            ) -> dict[str, tuple[ipaddress.IPv6Network, list[str]]]:
    """Map each network name to (its /64, member IPv6 addresses in member order); the
    ``fixed`` of each :class:`NetworkSpec` are its given IPv6 addresses."""
    out: dict[str, tuple[ipaddress.IPv6Network, list[str]]] = {}
    loopbacks = ipaddress.IPv6Network((prefix.network_address, SUBNET6))
    taken: dict[ipaddress.IPv6Network, str] = {loopbacks: "the nodes' loopbacks"}
    for net in networks:
        fixed = [ip for ip in net.fixed if ip]
        if not fixed:
            continue
        subnet = ipaddress.IPv6Network(f"{fixed[0]}/{SUBNET6}", strict=False)
        stray = next((ip for ip in fixed if ipaddress.IPv6Address(ip) not in subnet), None)
        if stray is not None:
            raise SpecError(f"IPv6 addresses {fixed[0]} and {stray} of {net.name!r} are not in "
                            f"one /{SUBNET6}", field=net.name)
        # as IPv4's network address: the subnet-router anycast address, every router's
        anycast = next((ip for ip in fixed if ipaddress.IPv6Address(ip) == subnet[0]), None)
        if anycast is not None:
            raise SpecError(f"{anycast} is not a host address of {subnet} (it is the "
                            f"subnet-router anycast address)", field=net.name)
        if subnet in taken:
            raise SpecError(f"IPv6 subnet {subnet} of {net.name!r} is also that of "
                            f"{taken[subnet]}", field=net.name)
        taken[subnet] = repr(net.name)
        out[net.name] = (subnet, _hosts6(net, subnet))
    auto = [net for net in networks if net.name not in out]
    room = 1 << (SUBNET6 - prefix.prefixlen)
    if auto and len(auto) + 1 > room:
        raise SpecError(f"IPv6 prefix {prefix} does not fit: it holds {room} /{SUBNET6}s, "
                        f"and the loopbacks and {len(auto)} links and LANs need "
                        f"{len(auto) + 1}", field="ipv6_prefix")
    base = int(prefix.network_address)
    k = 1                 # /64 number 0: the loopbacks
    for net in auto:
        while True:
            if k >= room:
                raise SpecError(f"IPv6 prefix {prefix} does not fit the experiment's links "
                                f"and LANs", field="ipv6_prefix")
            subnet = ipaddress.IPv6Network((base + (k << (128 - SUBNET6)), SUBNET6))
            k += 1
            if subnet not in taken:
                break
        out[net.name] = (subnet, _hosts6(net, subnet))
    return out


def _hosts6(net: NetworkSpec, subnet: ipaddress.IPv6Network) -> list[str]:
    used = {ipaddress.IPv6Address(ip) for ip in net.fixed if ip}
    base = int(subnet.network_address)
    result, h = [], 1
    for ip in net.fixed:
        if ip:
            result.append(str(ipaddress.IPv6Address(ip)))
            continue
        while ipaddress.IPv6Address(base + h) in used:
            h += 1
        result.append(str(ipaddress.IPv6Address(base + h)))
        h += 1
    return result
