"""IP address assignment: every link and LAN its own subnet, deterministic.

Networks are numbered in declaration order (links, then LANs). A network
whose interfaces were given addresses (``tb-set-ip-link``, ``tb-set-ip-lan``,
YAML ``ip:``) takes the subnet of those addresses with its netmask
(``tb-set-netmask``, default /24); the others get the next free block of
10.0.0.0/8 starting at 10.1.0.0, a /24 unless the network has more than 253
members. Hosts take the lowest free host numbers, in member order, after the
addresses given explicitly. The same IR always yields the same addresses.
"""

from __future__ import annotations

import ipaddress
import math
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


def assign(networks: list[NetworkSpec]) -> dict[str, tuple[ipaddress.IPv4Network, list[str]]]:
    """Map each network name to (subnet, member addresses in member order)."""
    out: dict[str, tuple[ipaddress.IPv4Network, list[str]]] = {}
    taken: list[ipaddress.IPv4Network] = []
    # Fixed networks first: they constrain the automatic ones.
    for net in networks:
        fixed = [ip for ip in net.fixed if ip]
        if not fixed:
            continue
        prefix = net.netmask or "24"
        subnet = ipaddress.IPv4Network(f"{fixed[0]}/{prefix}", strict=False)
        for ip in fixed:
            if ipaddress.IPv4Address(ip) not in subnet:
                raise SpecError(f"addresses {fixed[0]} and {ip} of {net.name!r} are not in "
                                f"one subnet /{subnet.prefixlen}", field=net.name)
        for other in taken:
            if subnet.overlaps(other):
                raise SpecError(f"subnet {subnet} of {net.name!r} overlaps {other} of another "
                                f"link or LAN", field=net.name)
        taken.append(subnet)
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
        a = ipaddress.IPv4Address(ip)
        if a in (subnet.network_address, subnet.broadcast_address):
            raise SpecError(f"{ip} is not a host address of {subnet}", field=net.name)
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
