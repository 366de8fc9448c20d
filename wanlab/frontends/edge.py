"""The edge of an experiment: egress, port forwards and WireGuard, in one place.

The three front ends (ns ``tb-set-node-egress``/``tb-set-node-forward``/``tb-set-edge-*``,
YAML ``egress:``/``forwards:``/``edge:``, the builder's ``egress=``/``forward``/``edge``)
collect an :class:`EdgeSpec` and call :func:`expand`, which gives the IR what the edge
is: a gateway node (default name ``edge``) and a LAN ``<gateway>-lan`` joining it with
every node that has egress or receives a forward. The LAN is an ordinary LAN, shaped by
the engine like any other (its ``delay`` is node to gateway, one way), so ``show``,
``stats``, captures and ``tevc`` act on it. ``ir.Experiment.edge`` records the rest
(uplink, forwards, WireGuard); the emulation back end builds it
(:mod:`wanlab.backends.emulate.egress`). See docs/edge.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from wanlab.errors import SpecError
from wanlab.frontends import units
from wanlab.model import ir

DEFAULT_GATEWAY = "edge"
EDGE_KEYS = ("gateway", "uplink", "bandwidth", "delay", "loss", "wireguard")
UPLINK_KEYS = ("interface", "address", "via")
FORWARD_KEYS = ("node", "port", "proto", "listen")


@dataclass
class EdgeSpec:
    """What a front end read about the edge (units parsed, not yet checked as a whole)."""

    gateway: str = DEFAULT_GATEWAY
    interface: str | None = None
    address: str | None = None
    via: str | None = None
    bandwidth_bps: int = 0
    delay_s: float = 0.0
    loss: float = 0.0
    wireguard_port: int = 0
    forwards: list[ir.Forward] = field(default_factory=list)
    source: ir.Source = field(default_factory=ir.Source)


def port_number(v: Any, what: str, fld: str) -> int:
    """A port number 1..65535 from an int or its decimal text; else a SpecError naming
    ``fld``."""
    if isinstance(v, bool):
        v = None
    if isinstance(v, str) and v.strip().isdigit():
        v = int(v.strip())
    if not isinstance(v, int) or not 1 <= v <= 65535:
        raise SpecError(f"{what} {v!r} is not a port number (1..65535)", field=fld)
    return v


def forward(node: Any, port: Any, proto: Any = "tcp", listen: Any = None,
            source: ir.Source | None = None) -> ir.Forward:
    """One port forward, typed: ``listen`` defaults to ``port``; ``proto`` tcp or udp.
    Errors name the key (``port``, ``listen``, ``proto``, ``node``)."""
    if not isinstance(node, str) or not node:
        raise SpecError(f"forward needs a node name, got {node!r}", field="node")
    p = port_number(port, "port", "port")
    lp = p if listen is None else port_number(listen, "listen port", "listen")
    pr = str(proto).lower()
    if pr not in ir.FORWARD_PROTOS:
        raise SpecError(f"protocol {proto!r} unknown; supported are tcp, udp", field="proto")
    return ir.Forward(node=node, port=p, proto=pr, listen=lp, source=source or ir.Source())


def on(v: Any, what: str, fld: str) -> bool:
    """A yes/no value: true/false, 1/0, yes/no, on/off (ns passes text)."""
    if isinstance(v, bool):
        return v
    t = str(v).strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise SpecError(f"{what} {v!r}: give 1 or 0 (true or false)", field=fld)


def settings(spec: EdgeSpec, doc: Any) -> EdgeSpec:
    """Apply a YAML/builder ``edge:`` mapping to ``spec``; errors name the key below
    ``edge`` (``uplink.via``)."""
    if doc is None:
        return spec
    if not isinstance(doc, dict):
        raise SpecError("edge: must be a mapping (gateway, uplink, delay, bandwidth, loss, "
                        "wireguard)", field=None)
    for k in doc:
        if k not in EDGE_KEYS:
            raise SpecError(f"unknown key; allowed keys are {', '.join(EDGE_KEYS)}",
                            field=k)
    if "gateway" in doc:
        spec.gateway = str(doc["gateway"])
    up = doc.get("uplink")
    if up is not None:
        if not isinstance(up, dict):
            raise SpecError("uplink: is a mapping {interface, address, via}",
                            field="uplink")
        for k in up:
            if k not in UPLINK_KEYS:
                raise SpecError(f"unknown key; allowed keys are {', '.join(UPLINK_KEYS)}",
                                field=f"uplink.{k}")
        for k in UPLINK_KEYS:
            if k not in up:
                raise SpecError(f"uplink needs {k}", field=f"uplink.{k}")
            setattr(spec, k, str(up[k]))
    if "bandwidth" in doc:
        spec.bandwidth_bps = units.parse_bandwidth(doc["bandwidth"], field="bandwidth")
    if "delay" in doc:
        spec.delay_s = units.parse_delay(doc["delay"], field="delay")
    if "loss" in doc:
        spec.loss = units.parse_loss(doc["loss"], field="loss")
    wg = doc.get("wireguard")
    if wg is not None and wg is not False:
        spec.wireguard_port = 51820 if wg is True else port_number(
            wg.get("port", 51820) if isinstance(wg, dict) else wg, "WireGuard port",
            "wireguard")
    return spec


def expand(exp: ir.Experiment, spec: EdgeSpec | None) -> ir.Experiment:
    """``exp`` with its edge: the gateway node, the edge LAN and ``exp.edge``. Without
    egress, forwards or WireGuard there is no edge (``exp`` unchanged)."""
    spec = spec or EdgeSpec()
    egress = [n.name for n in exp.nodes if n.egress]
    if not egress and not spec.forwards and not spec.wireguard_port:
        if spec.interface is not None:
            raise SpecError("an uplink is given, but no node has egress, a forward or "
                            "WireGuard", file=spec.source.file, line=spec.source.line,
                            field="uplink")
        return exp
    if not spec.source.line:        # no edge settings: the edge comes from its first user
        spec.source = next((n.source for n in exp.nodes if n.egress), None) or \
            (spec.forwards[0].source if spec.forwards else spec.source)
    gw, lan = spec.gateway, f"{spec.gateway}-lan"
    taken = exp.object_names()
    for name, what in ((gw, "edge.gateway"), (lan, "edge.gateway")):
        if name in taken:
            raise SpecError(f"{name!r} is already the name of an object of the experiment; "
                            f"name the edge gateway otherwise (edge: {{gateway: NAME}}, "
                            f"tb-set-edge-gateway)", file=spec.source.file,
                            line=spec.source.line, field=what)
        if not ir.is_valid(name):
            raise SpecError(f"edge gateway name {gw!r} is not a valid name ({ir.NAME_RULE})",
                            file=spec.source.file, line=spec.source.line, field=what)
    known = {n.name for n in exp.nodes}
    members = list(dict.fromkeys([*egress, *(f.node for f in spec.forwards
                                             if f.node in known)]))
    hd, hl = ir.lan_half(spec.delay_s, spec.loss)
    half = ir.LinkParams(bandwidth_bps=spec.bandwidth_bps, delay_s=hd, loss=hl)
    edge_lan = ir.Lan(name=lan, members=tuple(ir.LanMember(node=m, to_lan=half, from_lan=half)
                                              for m in [*members, gw]),
                      bandwidth_bps=spec.bandwidth_bps, delay_s=spec.delay_s, loss=spec.loss,
                      source=spec.source)
    edge = ir.Edge(gateway=gw, lan=lan, interface=spec.interface, address=spec.address,
                   via=spec.via, forwards=tuple(spec.forwards),
                   wireguard_port=spec.wireguard_port, source=spec.source)
    return replace(exp, nodes=(*exp.nodes, ir.Node(name=gw, source=spec.source)),
                   lans=(*exp.lans, edge_lan), edge=edge)
