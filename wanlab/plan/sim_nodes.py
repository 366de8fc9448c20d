"""Simulated nodes of a plan: the engine's hosts and routers.

A simulated node with one interface is a **host** (ARP, ICMP echo, and the endpoint of
simulated traffic agents); its gateway is the next hop of its default route. A node with
more interfaces is a **router** with the plan's static routes. Neither has a namespace.

Traffic agents on a simulated node with several interfaces (or none) live on an
*endpoint* host ``<node>-ep`` joined to it by an unshaped, zero-delay link
``<node>-ep``: the node stays a router, and its agents' traffic enters and leaves
through it (:func:`with_endpoints`, applied before planning).
"""

from __future__ import annotations

from dataclasses import replace

from wanlab.errors import SpecError
from wanlab.model.ir import Experiment, Link, Node
from wanlab.plan.types import NodePlan


def with_endpoints(exp: Experiment, simulated: set[str]) -> Experiment:
    """``exp`` with an endpoint host for every simulated node that carries transport
    agents but does not have exactly one interface."""
    degree = {n.name: 0 for n in exp.nodes}
    for l in exp.links:
        degree[l.a] += 1
        degree[l.b] += 1
    for lan in exp.lans:
        for m in lan.members:
            degree[m.node] += 1
    carriers = sorted({a.node for a in exp.agents if a.node in simulated
                       and a.role != "application" and degree[a.node] != 1})
    if not carriers:
        return exp
    taken = {n.name for n in exp.nodes} | {l.name for l in exp.links} | \
        {l.name for l in exp.lans} | {a.name for a in exp.agents}
    moved: dict[str, str] = {}
    nodes, links = list(exp.nodes), list(exp.links)
    for n in carriers:
        ep = f"{n}-ep"
        while ep in taken:
            ep += "x"
        taken.add(ep)
        moved[n] = ep
        src = next(x.source for x in exp.nodes if x.name == n)
        nodes.append(Node(ep, kind="simulated", source=src))
        links.append(Link(ep, n, ep, source=src))
    agents = tuple(replace(a, node=moved[a.node]) if a.node in moved and
                   a.role != "application" else a for a in exp.agents)
    return replace(exp, nodes=tuple(nodes), links=tuple(links), agents=agents)


def is_host(np_: "NodePlan") -> bool:
    return len(np_.interfaces) == 1


def gateway(np_: "NodePlan", v6: bool = False) -> str | None:
    """The next hop of a single-interface node's default route (or of its only route),
    of IPv4 or (``v6``) IPv6."""
    routes = [r for r in np_.routes if r.v6 == v6]
    for r in routes:
        if r.dst in ("default", "0.0.0.0/0", "::/0"):
            return r.via
    vias = {r.via for r in routes}
    if len(vias) == 1:
        return vias.pop()
    if vias:
        raise SpecError(f"simulated host {np_.name!r} has routes through several next hops "
                        f"and no default route; a simulated host has one gateway")
    return None
