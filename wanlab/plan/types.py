"""The plan's data: a node's interfaces and routes, and the whole plan.

Kept apart from :mod:`wanlab.plan.plan` (which computes them) so the parts of a plan
that build on it (:mod:`wanlab.plan.sim_nodes`, :mod:`wanlab.plan.sim_flows`) import
these types and not the planner that calls them.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from wanlab.model.ir import Experiment
from wanlab.plan.routes import RouteEntry


@dataclass(frozen=True)
class Interface:
    node: str
    ifname: str
    network: str
    ip: str
    prefixlen: int
    mac: str
    port: str


@dataclass
class NodePlan:
    name: str
    netns: str
    interfaces: list[Interface] = field(default_factory=list)
    routes: list[RouteEntry] = field(default_factory=list)
    loopback: str | None = None      # a /32 on lo, with dynamic routing (the router id)
    simulated: bool = False          # a router inside the engine: no namespace
    remote: bool = False             # a cluster neighbour's stub: a namespace for a tunnel


@dataclass
class Plan:
    short: str
    nodes: dict[str, NodePlan]
    subnets: dict[str, ipaddress.IPv4Network]
    hosts: str
    engine: dict[str, Any]
    warnings: list[str]
    exp: Experiment | None = None    # what was planned (with simulated endpoint hosts)
