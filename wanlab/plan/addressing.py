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
