"""ns-2 agents and applications on simulated nodes as the engine's traffic agents.

| ns-2 | engine source | sink (the connected agent) |
|---|---|---|
| ``Application/Traffic/CBR`` on ``Agent/UDP`` | ``cbr`` (``packetSize_``, ``rate_`` or ``interval_``) | ``Agent/Null``, ``Agent/LossMonitor``: ``sink`` |
| ``Application/Traffic/Exponential`` | ``onoff`` exponential (``burst_time_``, ``idle_time_``, ``rate_``); with ``burst_time_ 0``: ``poisson``, mean gap ``idle_time_`` | ``sink`` |
| ``Application/Traffic/Pareto`` | ``onoff`` Pareto (``shape_`` too) | ``sink`` |
| ``Application/Traffic/Poisson`` (wanlab) | ``poisson`` (``rate_``) | ``sink`` |
| ``Application/FTP`` on ``Agent/TCP`` (Tahoe), ``/Reno``, ``/Newreno``, ``/Linux`` + ``select_ca cubic`` | ``tcp`` (``packetSize_`` = MSS, ``window_``, ``windowInit_``, ``minrto_``) | ``Agent/TCPSink``: ``tcp_sink``; ``/DelAck``: delayed ACKs |

Each application is one engine source named after it; its sink is ``<app>.sink`` on the
peer's node, on port 5000 + the application's index. Defaults are ns-2's except for TCP:
``window_`` is unlimited and ``windowInit_`` 10 (ns-2: 20 and 1), so that a simulated
flow is limited by the network as a Linux flow is (see docs/simulation.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wanlab.errors import SpecError
from wanlab.model.ir import Agent, Experiment
from wanlab.plan.types import Plan
from wanlab.frontends.units import parse_bandwidth, parse_time

BASE_PORT = 5000
SINK_SUFFIX = ".sink"

TCP_CC = {"Agent/TCP": "tahoe", "Agent/TCP/Reno": "reno", "Agent/TCP/Newreno": "newreno",
          "Agent/TCP/NewReno": "newreno"}
UDP_SINKS = ("Agent/Null", "Agent/LossMonitor")
TCP_SINKS = ("Agent/TCPSink", "Agent/TCPSink/DelAck")
TRAFFIC_DEFAULTS = {"packetSize_": "210", "rate_": "448Kb"}
ONOFF_DEFAULTS = {"packetSize_": "210", "rate_": "64Kb", "burst_time_": "0.5",
                  "idle_time_": "0.5", "shape_": "1.5"}


@dataclass
class SimFlow:
    """One application realised by a source and a sink agent in the engine."""

    app: str
    kind: str                      # cbr | poisson | onoff | tcp
    src_node: str
    dst_node: str
    source: dict[str, Any]
    sink: dict[str, Any]
    params: dict[str, str] = field(default_factory=dict)

    @property
    def sink_id(self) -> str:
        return self.sink["agent"]


def is_application(a: Agent) -> bool:
    return a.kind.startswith("Application/")


def _where(a: Agent) -> str:
    s = a.source
    return f"{s.file}:{s.line}: " if s.file and s.line else ""


def sim_flows(exp: Experiment, plan: Plan, simulated: set[str]) -> list[SimFlow]:
    """The engine agents of every application whose nodes are simulated.

    An application between an emulated and a simulated node is an error (real traffic
    programs cannot run on a simulated node)."""
    agents = {a.name: a for a in exp.agents}
    flows = []
    for index, app in enumerate(a for a in exp.agents if is_application(a)):
        transport = agents.get(app.attached or "")
        peer = agents.get(transport.peer or "") if transport else None
        if transport is None or transport.node is None or peer is None or peer.node is None:
            continue            # not connected: the emulation side reports it when used
        src, dst = transport.node, peer.node
        if src not in simulated and dst not in simulated:
            continue
        if (src in simulated) != (dst in simulated):
            raise SpecError(f"{_where(app)}application {app.name} runs between an emulated and "
                            f"a simulated node ({src}, {dst}); simulated traffic needs both "
                            f"ends simulated", field=f"agents.{app.name}")
        for node in (src, dst):
            np_ = plan.nodes[node]
            if len(np_.interfaces) != 1:
                raise SpecError(f"{_where(app)}application {app.name}: simulated node {node} "
                                f"has {len(np_.interfaces)} interfaces; simulated traffic "
                                f"endpoints are hosts with exactly one", field=f"agents.{app.name}")
        flows.append(_flow(app, transport, peer, index, plan))
    return flows


def _num(params: dict[str, str], key: str, app: Agent, conv=float) -> float:
    try:
        return conv(float(params[key]))
    except (ValueError, KeyError):
        raise SpecError(f"{_where(app)}{app.name}: {key} {params.get(key)!r} is not a number",
                        field=f"agents.{app.name}.{key}") from None


def _flow(app: Agent, transport: Agent, peer: Agent, index: int, plan: Plan) -> SimFlow:
    port = BASE_PORT + index
    dst_ip = plan.nodes[peer.node].interfaces[0].ip
    base = {"agent": app.name, "host": transport.node, "dst": f"{dst_ip}:{port}"}
    sink_id = app.name + SINK_SUFFIX
    kind = app.kind
    if kind == "Application/FTP":
        if not transport.kind.startswith("Agent/TCP") or transport.kind.startswith("Agent/TCPSink"):
            raise SpecError(f"{_where(app)}{app.name}: FTP needs an Agent/TCP, not "
                            f"{transport.kind}", field=f"agents.{app.name}")
        if peer.kind not in TCP_SINKS:
            raise SpecError(f"{_where(app)}{transport.name} must be connected to an "
                            f"Agent/TCPSink, not {peer.kind}", field=f"agents.{transport.name}")
        tp = dict(transport.params)
        cc = TCP_CC.get(transport.kind)
        if transport.kind == "Agent/TCP/Linux":
            cc = {"cubic": "cubic", "reno": "newreno", "newreno": "newreno"}.get(
                tp.get("select_ca", "cubic").lower())
        if cc is None:
            raise SpecError(f"{_where(transport)}{transport.name}: {transport.kind}"
                            + (f" with select_ca {tp.get('select_ca')}" if "select_ca" in tp else "")
                            + " is not simulated; use Agent/TCP, /Reno, /Newreno or /Linux with "
                            "select_ca cubic", field=f"agents.{transport.name}")
        src = {**base, "kind": "tcp", "cc": cc, "trace_interval_us": 10000}
        if "packetSize_" in tp:
            src["mss"] = int(_num(tp, "packetSize_", transport))
        if "window_" in tp:
            src["window"] = int(_num(tp, "window_", transport))
        if "windowInit_" in tp:
            src["initial_window"] = int(_num(tp, "windowInit_", transport))
        if "minrto_" in tp:
            src["min_rto_us"] = round(_num(tp, "minrto_", transport) * 1e6)
        ap = dict(app.params)
        if "maxbytes_" in ap:
            src["bytes"] = int(_num(ap, "maxbytes_", app))
        sink = {"agent": sink_id, "host": peer.node, "kind": "tcp_sink", "port": port,
                "delayed_ack": peer.kind.endswith("DelAck")}
        return SimFlow(app.name, "tcp", transport.node, peer.node, src, sink, tp)
    if not transport.kind.startswith("Agent/UDP"):
        raise SpecError(f"{_where(app)}{app.name}: {kind} needs an Agent/UDP, not "
                        f"{transport.kind}", field=f"agents.{app.name}")
    if peer.kind not in UDP_SINKS:
        raise SpecError(f"{_where(app)}{transport.name} must be connected to an Agent/Null or "
                        f"Agent/LossMonitor, not {peer.kind}", field=f"agents.{transport.name}")
    sink = {"agent": sink_id, "host": peer.node, "kind": "sink", "port": port}
    if kind == "Application/Traffic/CBR":
        p = {**TRAFFIC_DEFAULTS, **dict(app.params)}
        src = {**base, "kind": "cbr", "size": max(16, int(_num(p, "packetSize_", app)))}
        if "interval_" in p:
            src["interval_us"] = round(parse_time(p["interval_"]) * 1e6, 3)
        else:
            src["rate_bps"] = parse_bandwidth(p["rate_"])
        return SimFlow(app.name, "cbr", transport.node, peer.node, src, sink, p)
    if kind == "Application/Traffic/Poisson":
        p = {**TRAFFIC_DEFAULTS, **dict(app.params)}
        src = {**base, "kind": "poisson", "size": max(16, int(_num(p, "packetSize_", app))),
               "rate_bps": parse_bandwidth(p["rate_"])}
        return SimFlow(app.name, "poisson", transport.node, peer.node, src, sink, p)
    if kind in ("Application/Traffic/Exponential", "Application/Traffic/Pareto"):
        p = {**ONOFF_DEFAULTS, **dict(app.params)}
        size = max(16, int(_num(p, "packetSize_", app)))
        burst, idle = parse_time(p["burst_time_"]), parse_time(p["idle_time_"])
        if burst == 0 and kind.endswith("Exponential"):
            if idle <= 0:
                raise SpecError(f"{_where(app)}{app.name}: idle_time_ must be > 0",
                                field=f"agents.{app.name}.idle_time_")
            src = {**base, "kind": "poisson", "size": size, "rate_bps": max(1, round(size * 8 / idle))}
            return SimFlow(app.name, "poisson", transport.node, peer.node, src, sink, p)
        src = {**base, "kind": "onoff", "size": size, "rate_bps": parse_bandwidth(p["rate_"]),
               "on_us": burst * 1e6, "off_us": idle * 1e6,
               "dist": "pareto" if kind.endswith("Pareto") else "exponential"}
        if kind.endswith("Pareto"):
            src["shape"] = _num(p, "shape_", app)
        return SimFlow(app.name, "onoff", transport.node, peer.node, src, sink, p)
    raise SpecError(f"{_where(app)}{app.name}: {kind} is not simulated (supported: CBR, "
                    f"Exponential, Pareto, Poisson, FTP)", field=f"agents.{app.name}")


def engine_agents(flows: list[SimFlow]) -> list[dict[str, Any]]:
    """Sinks first (so a source never sends to a port that has no sink yet)."""
    return [f.sink for f in flows] + [f.source for f in flows]
