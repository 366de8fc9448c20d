"""The plan's data: a node's interfaces and routes, the engine's ports, links and LANs
with each direction's shaping, and the whole plan.

Everything here is typed and in the IR's units (bit/s, seconds, loss fractions): the
engine's wire format is made from it only by :mod:`wanlab.engine.encode`.

Kept apart from :mod:`wanlab.plan.plan` (which computes them) so the parts of a plan
that build on it (:mod:`wanlab.plan.sim_nodes`, :mod:`wanlab.plan.sim_flows`) import
these types and not the planner that calls them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from wanlab.model.ir import Experiment, LinkParams, LinkRule, Traffic, Transport, Trunk
from wanlab.plan.routes import RouteEntry


@dataclass(frozen=True)
class Interface:
    node: str
    ifname: str
    network: str
    ip: str | None                   # None: an IPv6-only experiment
    prefixlen: int
    mac: str
    port: str
    ip6: str | None = None           # with ipv6 dual or only: its address in a /64
    prefixlen6: int = 64

    def addresses(self) -> list[str]:
        """Its addresses with their prefix lengths, IPv4 first."""
        return ([f"{self.ip}/{self.prefixlen}"] if self.ip else []) + \
            ([f"{self.ip6}/{self.prefixlen6}"] if self.ip6 else [])


@dataclass
class NodePlan:
    name: str
    netns: str
    interfaces: list[Interface] = field(default_factory=list)
    routes: list[RouteEntry] = field(default_factory=list)
    loopback: str | None = None      # a /32 on lo, with dynamic routing (the router id)
    loopback6: str | None = None     # its /128 on lo, with dynamic routing and IPv6
    ipv4: bool = True                # False: an IPv6-only experiment (loopback: router id only)
    simulated: bool = False          # a router inside the engine: no namespace
    remote: bool = False             # a cluster neighbour's stub: a namespace for a tunnel
    gateway: str | None = None       # a simulated host's next hop for everything off-link
    gateway6: str | None = None      # ... and for IPv6


@dataclass(frozen=True)
class Port:
    """An engine port: one node's attachment to one network, named ``<node>:<ifname>``.
    An emulated node's port is a TAP the engine opens in the node's namespace (a remote
    stub's leads to another machine's engine); a simulated node's has no TAP."""

    id: str
    node: str
    network: str
    ifname: str
    netns: str | None                # None: a simulated node's port
    tunnel: bool = False


@dataclass(frozen=True)
class LinkPlan:
    """A point-to-point link in the engine: ``ab`` shapes frames from port ``a`` to port
    ``b``, ``ba`` the reverse; ``rules`` are per-destination pipelines."""

    name: str
    a: str
    b: str
    ab: LinkParams
    ba: LinkParams
    rules: tuple[LinkRule, ...] = ()


@dataclass(frozen=True)
class LanMemberPlan:
    """A LAN member's port and its two halves (member to switch, switch to member)."""

    node: str
    port: str
    to_lan: LinkParams
    from_lan: LinkParams
    switch: str | None = None        # the switch it is on, in a LAN of several


@dataclass(frozen=True)
class LanPairPlan:
    """A LAN's channel from port ``src`` to port ``dst`` (a latency matrix's cell)."""

    src: str
    dst: str
    params: LinkParams


@dataclass(frozen=True)
class LanPlan:
    name: str
    members: tuple[LanMemberPlan, ...]
    pairs: tuple[LanPairPlan, ...] = ()
    switches: tuple[str, ...] = ()   # a tree of switches joined by trunks (ir.Lan's)
    trunks: tuple[Trunk, ...] = ()
    blocked: tuple[Trunk, ...] = ()  # built too, held down (a spanning tree blocks them)


def switch_lan(lan: str, switches: Sequence[str], switch: str) -> str:
    """The engine LAN of ``switch`` in a LAN of several switches: the first switch's is the
    LAN's own id (so a LAN of one switch and its first switch are named alike)."""
    return lan if switch == switches[0] else f"{lan}/{switch}"


@dataclass(frozen=True)
class PortMap:
    """Which engine port each node's attachment to each network is: what a run-time
    change of one LAN member names. Taken from the plan at swap-in and kept with the
    experiment, so that a change needs no new plan (:mod:`wanlab.engine.portmap`)."""

    networks: dict[str, dict[str, str]]      # network -> node -> port id
    # a LAN of several switches: network -> port id -> the engine LAN the port is on
    switched: dict[str, dict[str, str]] = field(default_factory=dict)

    def port(self, network: str, node: str) -> str:
        """The engine port of ``node``'s attachment to ``network``."""
        try:
            return self.networks[network][node]
        except KeyError:
            raise ValueError(f"{node} is not a member of {network}") from None

    def ports(self, network: str) -> list[str]:
        """Every port of ``network``, in the order of its members."""
        return list(self.networks.get(network, {}).values())

    def to_json(self) -> dict[str, Any]:
        return {"networks": self.networks, **({"switched": self.switched}
                                              if self.switched else {})}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PortMap:
        return cls(*({str(n): {str(k): str(v) for k, v in m.items()}
                      for n, m in d.get(key, {}).items()} for key in ("networks", "switched")))


@dataclass(frozen=True)
class SimFlow:
    """One application realised by a source and a sink agent in the engine: the source
    on ``src_node`` sends ``traffic`` over ``transport`` to the sink (``sink``'s kind of
    transport) on ``dst_node``, at ``dst_ip``:``port``."""

    app: str
    kind: str                      # cbr | poisson | onoff | tcp
    src_node: str
    dst_node: str
    dst_ip: str
    port: int
    traffic: Traffic
    transport: Transport
    sink: Transport

    @property
    def sink_id(self) -> str:
        return self.app + ".sink"


@dataclass
class Plan:
    short: str
    nodes: dict[str, NodePlan]
    subnets: dict[str, ipaddress.IPv4Network]
    hosts: str
    warnings: list[str]
    exp: Experiment | None = None    # what was planned (with simulated endpoint hosts)
    ports: list[Port] = field(default_factory=list)        # networks' order, then members'
    links: list[LinkPlan] = field(default_factory=list)
    lans: list[LanPlan] = field(default_factory=list)
    flows: list[SimFlow] = field(default_factory=list)     # applications between simulated nodes
    subnets6: dict[str, ipaddress.IPv6Network] = field(default_factory=dict)

    def port_map(self) -> PortMap:
        out: dict[str, dict[str, str]] = {}
        for p in self.ports:
            out.setdefault(p.network, {}).setdefault(p.node, p.id)
        switched = {lan.name: {m.port: switch_lan(lan.name, lan.switches, m.switch or "")
                               for m in lan.members}
                    for lan in self.lans if lan.switches}
        return PortMap(out, switched)
