"""The one encoder: IR, plan and typed events -> engine requests.

Used by swap-in (:func:`apply`), modify (:func:`params_patch`), the event scheduler for
timeline and tevc events, the simulation scenario and the API (:func:`event_requests`).
A change is a patch: a ``set`` carries only what the event changes, and the engine
merges it into the direction's current parameters, so no copy of a link's parameters is
kept here and a change made one way (the API, modify) is not undone by an event made
another way. A LAN's delay and loss are member-to-member: each half gets
:func:`wanlab.model.ir.lan_half`.
"""

from __future__ import annotations

import os
from typing import Any

from wanlab.engine.protocol import (
    Apply,
    CaptureSnapshot,
    CaptureStart,
    CaptureStop,
    Down,
    Params,
    Request,
    Set,
    Up,
)
from wanlab.model import ir
from wanlab.plan.types import Plan


def apply(plan: Plan, *, with_ports: bool = True) -> Apply:
    """The ``apply`` that builds the plan's whole topology in the engine."""
    t = plan.engine
    return Apply(ports=list(t.get("ports", [])) if with_ports else [],
                 links=list(t.get("links", [])), lans=list(t.get("lans", [])),
                 routers=list(t.get("routers", [])), hosts=list(t.get("hosts", [])),
                 agents=list(t.get("agents", [])))


def params_patch(old: dict[str, Any], new: dict[str, Any]) -> Params:
    """The PARAMS patch that turns ``old`` into ``new`` (only what differs; a queue field
    by field)."""
    patch: dict[str, Any] = {}
    for k, v in new.items():
        if old.get(k) == v:
            continue
        if k == "queue" and isinstance(v, dict) and isinstance(old.get(k), dict) \
                and old[k].get("kind") == v.get("kind"):
            patch[k] = {qk: qv for qk, qv in v.items() if old[k].get(qk) != qv}
        else:
            patch[k] = v
    return Params(**patch)  # type: ignore[typeddict-item]


def loss(p: float) -> dict[str, Any]:
    return {"kind": "bernoulli", "p": p} if p > 0 else {"kind": "none"}


def member_port(plan: Plan, lan: str, node: str) -> str:
    """The engine port of ``node``'s attachment to ``lan``."""
    for i in plan.nodes[node].interfaces:
        if i.network == lan:
            return i.port
    raise ValueError(f"{node} is not a member of {lan}")


def _lan_ports(plan: Plan, lan: str) -> list[str]:
    return [i.port for np_ in plan.nodes.values() for i in np_.interfaces if i.network == lan]


def event_requests(ev: ir.Event, kind: str, plan: Plan, trace_dir: str) -> list[Request]:
    """The requests of a link or LAN event (``kind`` is ``link`` or ``lan``)."""
    lan = kind == "lan"
    member = member_port(plan, ev.target, ev.member) if ev.member else None
    a, v = ev.action, ev.value
    if ev.to is not None:       # one pair's channel: its own values, not LAN halves
        if a == "bandwidth":
            pair: Params = {"bandwidth_bps": v}
        elif a == "delay":
            pair = {"delay_us": round(v * 1e6, 3)}
        elif a == "plr":
            pair = {"loss": loss(v)}  # type: ignore[typeddict-item]
        else:
            raise ValueError(f"{ev.target}: {a} does not apply to a pair channel")
        return [Set(target=ev.target, params=pair, member=member,
                    to=member_port(plan, ev.target, ev.to))]
    if a == "up":
        return [Up(target=ev.target, member=member)]
    if a == "down":
        return [Down(target=ev.target, member=member)]
    params: Params
    if a == "bandwidth":
        params = {"bandwidth_bps": v}
    elif a == "delay":
        d = ir.lan_half(v, 0.0)[0] if lan else v
        params = {"delay_us": round(d * 1e6, 3)}
    elif a == "plr":
        p = ir.lan_half(0.0, v)[1] if lan else v
        params = {"loss": loss(p)}  # type: ignore[typeddict-item]
    elif a == "set":
        params = {"queue": {ev.param: v}}  # type: ignore[misc]
    elif a == "drop":
        # the next N packets of one direction (ns-2's ErrorModel/List, counted from now)
        params = {"loss": {"kind": "ordinals", "drop": list(range(1, v + 1))}}
    elif a == "trace":
        return _trace(ev, lan, plan, trace_dir)
    else:
        raise ValueError(f"{ev.target}: {a} is not a link or LAN event")
    return [Set(target=ev.target, params=params, dir=ev.dir or "both", member=member)]


def _trace(ev: ir.Event, lan: bool, plan: Plan, trace_dir: str) -> list[Request]:
    if lan:
        ports = [member_port(plan, ev.target, ev.member)] if ev.member else \
            _lan_ports(plan, ev.target)
        sels = [(p, d) for p in ports for d in ((ev.dir,) if ev.dir else ("to_lan", "from_lan"))]
    else:
        sels = [(None, d) for d in ((ev.dir,) if ev.dir else ("ab", "ba"))]
    out: list[Request] = []
    for port, d in sels:
        if ev.value == "start":
            name = f"{port.replace(':', '-')}-{d}" if port else d
            out.append(CaptureStart(target=ev.target, dir=d, member=port,
                                    path=_unused_pcap(trace_dir, f"{ev.target}-{name}")))
        elif ev.value == "stop":
            out.append(CaptureStop(target=ev.target, dir=d, member=port))
        else:
            out.append(CaptureSnapshot(target=ev.target, dir=d, member=port))
    return out


def _unused_pcap(trace_dir: str, base: str) -> str:
    """``BASE.pcap``, or ``BASE-2.pcap``, ``BASE-3.pcap``... when a trace of that direction
    was already started: the engine never overwrites a capture, so a restarted trace gets
    the next free name."""
    path = os.path.join(trace_dir, f"{base}.pcap")
    n = 2
    while os.path.lexists(path):
        path = os.path.join(trace_dir, f"{base}-{n}.pcap")
        n += 1
    return path


def describe(ev: ir.Event, trace_dir: str = "") -> str:
    """One line saying what a link or LAN event did."""
    where = f" ({ev.member + '/' if ev.member else ''}{ev.dir})" if ev.dir else ""
    if ev.action in ("up", "down"):
        return f"{ev.target} is {ev.action}"
    if ev.action == "drop":
        return f"{ev.target} drops its next {ev.value} packet{'s' if ev.value > 1 else ''}" \
               f"{where}"
    if ev.action == "trace":
        return f"trace {ev.value}: {trace_dir}"
    if ev.action == "set":
        return f"{ev.target}{where} {ev.param} = {ev.value}"
    return f"{ev.target}{where} {ev.action} {ev.args()[-1]}"
