"""Simulated nodes of a plan as the engine's hosts and routers.

A simulated node with one interface is a **host** (ARP, ICMP echo, and the endpoint of
simulated traffic agents); its gateway is the next hop of its default route. A node with
more interfaces is a **router** with the plan's static routes. Neither has a namespace.
"""

from __future__ import annotations

from typing import Any

from wanlab.errors import SpecError
from wanlab.plan.plan import NodePlan


def is_host(np_: NodePlan) -> bool:
    return len(np_.interfaces) == 1


def gateway(np_: NodePlan) -> str | None:
    """The next hop of a single-interface node's default route (or of its only route)."""
    for r in np_.routes:
        if r.dst in ("default", "0.0.0.0/0"):
            return r.via
    vias = {r.via for r in np_.routes}
    if len(vias) == 1:
        return vias.pop()
    if vias:
        raise SpecError(f"simulated host {np_.name!r} has routes through several next hops "
                        f"and no default route; a simulated host has one gateway")
    return None


def engine_nodes(nodes: list[NodePlan]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(routers, hosts) for the engine's ``apply``."""
    routers, hosts = [], []
    for np_ in nodes:
        if not np_.interfaces:
            continue                   # an isolated node: nothing to simulate
        if is_host(np_):
            i = np_.interfaces[0]
            h: dict[str, Any] = {"host": np_.name, "port": i.port, "mac": i.mac,
                                 "ip": f"{i.ip}/{i.prefixlen}"}
            gw = gateway(np_)
            if gw:
                h["gateway"] = gw
            hosts.append(h)
        else:
            routers.append({
                "router": np_.name,
                "interfaces": [{"port": i.port, "mac": i.mac, "ip": f"{i.ip}/{i.prefixlen}"}
                               for i in np_.interfaces],
                "routes": [{"dst": "0.0.0.0/0" if r.dst == "default" else r.dst, "via": r.via}
                           for r in np_.routes]})
    return routers, hosts
