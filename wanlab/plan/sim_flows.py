"""Applications on simulated nodes as the engine's traffic agents.

Applications and agents arrive typed (:class:`~wanlab.model.ir.Traffic`,
:class:`~wanlab.model.ir.Transport`; ns-2's defaults applied by the front ends):

* ``cbr`` over UDP -> engine ``cbr`` (``size``, ``rate_bps`` or ``interval_us``);
* ``poisson`` -> ``poisson`` (mean rate or mean gap);
* ``exponential`` / ``pareto`` -> ``onoff`` (``on_us``, ``off_us``, ``rate_bps`` during
  bursts; ``shape``);
* ``ftp`` over TCP ``tahoe``, ``reno``, ``newreno``, ``cubic`` -> ``tcp`` (``mss``,
  ``window``, ``initial_window``, ``min_rto_us``);
* the connected agent: ``udp_sink`` -> ``sink``, ``tcp_sink`` -> ``tcp_sink``
  (``acks`` linux with this host's ``net.ipv4.tcp_rmem`` as ``rmem``, or ns-2 DelAck's
  ``delayed`` with ``delack_us`` from ``interval_``).

Each application is one engine source named after it; its sink is ``<app>.sink`` on the
peer's node, on port 5000 + the application's index. The plan keeps each as a typed
:class:`~wanlab.plan.types.SimFlow`; :func:`wanlab.engine.encode.agents` makes the
engine's agent objects. Where the IR leaves a TCP field
unset the engine's defaults apply: ``window`` unlimited, ``initial_window`` 10 and SACK
(ns-2: 20, 1 and none), and ``mss`` is Linux's 1448 (ns-2: 1000), so that a simulated flow
is limited by the network as a Linux flow is (see docs/simulation.md).
"""

from __future__ import annotations

from wanlab.errors import SpecError
from wanlab.model.ir import TCP_CCS, Agent, Experiment
from wanlab.plan.types import Plan, SimFlow

BASE_PORT = 5000


def is_application(a: Agent) -> bool:
    return a.role == "application"


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


def _need(ok: bool, where: Agent, msg: str) -> None:
    if not ok:
        raise SpecError(f"{_where(where)}{msg}", field=f"agents.{where.name}")


def _flow(app: Agent, transport: Agent, peer: Agent, index: int, plan: Plan) -> SimFlow:
    t, tp, pp = app.traffic, transport.transport, peer.transport
    _need(t is not None, app, f"{app.name}: {app.kind} is not simulated (supported: CBR, "
          f"Exponential, Pareto, Poisson, FTP)")
    assert t is not None
    if t.pattern == "ftp":
        _need(tp is not None and tp.protocol == "tcp", app,
              f"{app.name}: FTP needs an Agent/TCP, not {transport.kind}")
        _need(pp is not None and pp.protocol == "tcp_sink", transport,
              f"{transport.name} must be connected to an Agent/TCPSink, not {peer.kind}")
        assert tp is not None and pp is not None
        _need(tp.cc in TCP_CCS, transport,
              f"{transport.name}: {transport.kind}" + (f" with select_ca {tp.cc}" if tp.cc
                                                       else "")
              + " is not simulated; use Agent/TCP, /Reno, /Newreno or /Linux with "
              "select_ca cubic")
        kind = "tcp"
    else:
        _need(tp is not None and tp.protocol == "udp", app,
              f"{app.name}: {app.kind} needs an Agent/UDP, not {transport.kind}")
        _need(pp is not None and pp.protocol == "udp_sink", transport,
              f"{transport.name} must be connected to an Agent/Null or Agent/LossMonitor, "
              f"not {peer.kind}")
        kind = t.pattern if t.pattern in ("cbr", "poisson") else "onoff"
    assert tp is not None and pp is not None and transport.node and peer.node
    # IPv4 where the peer has it (dual stack too), else IPv6 (an IPv6-only experiment)
    peer_if = plan.nodes[peer.node].interfaces[0]
    dst_ip = peer_if.ip or peer_if.ip6
    assert dst_ip is not None
    return SimFlow(app.name, kind, transport.node, peer.node, dst_ip, BASE_PORT + index, t,
                   tp, pp)
