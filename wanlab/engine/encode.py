"""The one encoder: IR, plan and typed events -> engine requests.

The only place that knows the engine's wire format for what wanlab builds and changes
(docs/engine-protocol.md): the plan and the events are typed and in the IR's units
(bit/s, seconds, loss fractions); here they become PARAMS (microseconds, loss models),
ports, links, LANs, routers, hosts and agents. Used by swap-in (:func:`apply`), modify
(:func:`remove`, :func:`params_patch`), the event scheduler for timeline and tevc events,
the simulation scenario and the life cycle's ``set_link`` (:func:`event_requests`, which
needs only the experiment's :class:`~wanlab.plan.types.PortMap`, not a plan).
A change is a patch: a ``set`` carries only what the event changes, and the engine
merges it into the direction's current parameters, so no copy of a link's parameters is
kept here and a change made one way (the API, modify) is not undone by an event made
another way. A LAN's delay and loss are member-to-member: each half gets
:func:`wanlab.model.ir.lan_half`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Collection
from typing import Any

from wanlab.engine.protocol import (
    Apply,
    CaptureSnapshot,
    CaptureStart,
    CaptureStop,
    Down,
    Params,
    Remove,
    Request,
    Set,
    Up,
)
from wanlab.model import ir
from wanlab.model.ir import LinkParams
from wanlab.plan.sim_nodes import is_host
from wanlab.plan.types import Interface, LanPlan, Plan, PortMap, SimFlow, switch_lan


def params(p: LinkParams) -> Params:
    """One direction's IR parameters as the engine's PARAMS."""
    q = p.queue
    queue: dict[str, Any] = {"kind": "droptail" if q.kind == "droptail" else "red",
                             "in_bytes": q.in_bytes}
    if q.limit is not None:
        queue["limit"] = q.limit
    if q.kind in ("red", "gred"):
        queue.update(thresh=q.thresh, maxthresh=q.maxthresh, q_weight=q.q_weight,
                     linterm=q.linterm, gentle=q.gentle or q.kind == "gred",
                     mean_pktsize=q.mean_pktsize)
    return {"bandwidth_bps": p.bandwidth_bps, "delay_us": _us(p.delay_s),
            "loss": loss(p.loss, p.loss_correlation, p.loss_model), "queue": queue,
            **impairments(p)}  # type: ignore[typeddict-item]


def impairments(p: LinkParams) -> dict[str, Any]:
    """netem's impairments of one direction as PARAMS fields (all of them: a patch that
    clears one must carry its default)."""
    return {"jitter_us": _us(p.jitter_s), "jitter_dist": p.jitter_dist,
            "jitter_corr": p.jitter_correlation, "jitter_reorder": p.jitter_reorder,
            "duplicate": p.duplicate, "corrupt": p.corrupt, "reorder": p.reorder,
            "reorder_gap": p.reorder_gap, "overhead": p.overhead, "cellsize": p.cellsize,
            "cell_overhead": p.cell_overhead, "trace": trace(p.trace),
            "schedule": schedule(p.schedule)}


def schedule(s: ir.Schedule | None) -> dict[str, Any]:
    """A schedule as the engine takes it (no points: none)."""
    if s is None:
        return {"t_ns": []}
    out: dict[str, Any] = {"t_ns": [round(t * 1e9) for t in s.times_s], "linear": s.linear,
                           "loop": s.loop}
    if s.delay_s is not None:
        out["delay_us"] = [_us(d) for d in s.delay_s]
    if s.bandwidth_bps is not None:
        out["bandwidth_bps"] = list(s.bandwidth_bps)
    if s.loss is not None:
        out["loss"] = list(s.loss)
    return out


def trace(t: ir.BandwidthTrace | None) -> dict[str, Any]:
    """A capacity trace as the engine takes it (no opportunities: none, a fixed rate)."""
    if t is None:
        return {"ms": []}
    return {"ms": list(t.ms), "offset_ms": round(t.offset_s * 1000), "loop": t.loop}


# the engine's PARAMS field of each impairment field of the IR
_WIRE = {"jitter_s": "jitter_us", "jitter_dist": "jitter_dist",
         "jitter_correlation": "jitter_corr", "jitter_reorder": "jitter_reorder",
         "duplicate": "duplicate", "corrupt": "corrupt", "reorder": "reorder",
         "reorder_gap": "reorder_gap", "overhead": "overhead", "cellsize": "cellsize",
         "cell_overhead": "cell_overhead"}


def impair_patch(changes: dict[str, Any]) -> Params:
    """The PARAMS patch of an ``impair`` event's IR field changes (loss fields together)."""
    out: dict[str, Any] = {}
    for k, v in changes.items():
        if k in _WIRE:
            out[_WIRE[k]] = _us(v) if k == "jitter_s" else v
    p = ir.impair_params(changes)
    if "loss_model" in changes or "loss_correlation" in changes or "loss" in changes:
        out["loss"] = loss(p.loss, p.loss_correlation, p.loss_model)
    if "trace" in changes:
        out["trace"] = trace(p.trace)
    if "schedule" in changes:
        out["schedule"] = schedule(p.schedule)
    return Params(**out)  # type: ignore[typeddict-item]


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def apply(plan: Plan, *, with_ports: bool = True,
          networks: Collection[str] | None = None) -> Apply:
    """The ``apply`` that builds the plan's whole topology in the engine (simulated routers,
    hosts and agents included); with ``networks``, only those links and LANs and their TAPs
    (what a modify adds)."""
    nets = set(networks) if networks is not None else None
    ports = [{"port": p.id, "tap": p.ifname, "netns": f"/run/netns/{p.netns}",
              **({"tunnel": True} if p.tunnel else {})}
             for p in plan.ports if p.netns is not None and (nets is None or p.network in nets)]
    links = []
    for l in plan.links:
        if nets is not None and l.name not in nets:
            continue
        links.append({"link": l.name, "a": l.a, "b": l.b, "ab": params(l.ab),
                      "ba": params(l.ba)})
        if l.rules:
            links[-1]["rules"] = [{"dst": r.dst, "ab": params(r.ab), "ba": params(r.ba)}
                                  for r in l.rules]
    lans: list[dict[str, Any]] = []
    patches: list[dict[str, Any]] = []
    for lan in plan.lans:
        if nets is not None and lan.name not in nets:
            continue
        if lan.switches:
            _switched(lan, lans, patches)
            continue
        lans.append({"lan": lan.name, "members": [
            {"port": m.port, "to_lan": params(m.to_lan), "from_lan": params(m.from_lan)}
            for m in lan.members]})
        if lan.pairs:
            lans[-1]["pairs"] = [{"from": p.src, "to": p.dst, "params": params(p.params)}
                                 for p in lan.pairs]
    if nets is not None:
        return Apply(ports=ports if with_ports else [], links=links, lans=lans,
                     patches=patches)
    routers, hosts = _simulated_nodes(plan)
    return Apply(ports=ports if with_ports else [], links=links, lans=lans, routers=routers,
                 patches=patches, hosts=hosts, agents=agents(plan.flows))


def engine_lans(lan: LanPlan) -> list[str]:
    """The engine LANs of a LAN: itself, or one per switch."""
    return [switch_lan(lan.name, lan.switches, s) for s in lan.switches] or [lan.name]


def trunk_ports(lan: str, trunk: ir.Trunk) -> tuple[str, str]:
    """The patch ports of a trunk: the one in ``a``'s engine LAN, the one in ``b``'s."""
    return f"{lan}/{trunk.name}:{trunk.a}", f"{lan}/{trunk.name}:{trunk.b}"


def blocked_ports(lan: str, k: int, trunk: ir.Trunk) -> tuple[str, str]:
    """The patch ports of the ``k``-th link a spanning tree blocks (two links may join the
    same switches): the one in ``a``'s engine LAN, the one in ``b``'s."""
    return f"{lan}/{trunk.name}/{k}:{trunk.a}", f"{lan}/{trunk.name}/{k}:{trunk.b}"


# what a blocked link's ports are applied with: no frame crosses until they are down
_BLOCK: dict[str, Any] = {"loss": {"kind": "bernoulli", "p": 1.0}}


def _switched(lan: LanPlan, lans: list[dict[str, Any]], patches: list[dict[str, Any]]) -> None:
    """A LAN of several switches: one engine LAN per switch, one patch per trunk. A trunk's
    direction a -> b is the ``from_lan`` of its port in a's LAN (what a sends into it): one
    queue, shared by every flow that crosses the trunk that way. The links a spanning tree
    blocks are patches too, applied dropping everything (:func:`hold_blocked` takes them
    down): a loop of switches must never carry a frame round."""
    members: dict[str, list[dict[str, Any]]] = {s: [] for s in lan.switches}
    for m in lan.members:
        members[m.switch or lan.switches[0]].append(
            {"port": m.port, "to_lan": params(m.to_lan), "from_lan": params(m.from_lan)})
    for t in lan.trunks:
        pa, pb = trunk_ports(lan.name, t)
        patches.append({"patch": f"{lan.name}/{t.name}", "ports": [pa, pb]})
        members[t.a].append({"port": pa, "from_lan": params(t.ab)})
        members[t.b].append({"port": pb, "from_lan": params(t.ba)})
    for k, t in enumerate(lan.blocked):
        pa, pb = blocked_ports(lan.name, k, t)
        patches.append({"patch": pa.rsplit(":", 1)[0], "ports": [pa, pb]})
        members[t.a].append({"port": pa, "from_lan": {**params(t.ab), **_BLOCK}})
        members[t.b].append({"port": pb, "from_lan": {**params(t.ba), **_BLOCK}})
    for s in lan.switches:
        lans.append({"lan": switch_lan(lan.name, lan.switches, s), "members": members[s]})


def hold_blocked(plan: Plan, networks: Collection[str] | None = None) -> list[Request]:
    """What follows an ``apply`` of switched LANs whose spanning tree blocks links: each
    blocked link's two ports taken down (no frame crosses, ``drop_down``), then given their
    own shaping, ready for an ``up`` when the tree changes."""
    nets = set(networks) if networks is not None else None
    out: list[Request] = []
    for lan in plan.lans:
        if nets is not None and lan.name not in nets:
            continue
        for k, t in enumerate(lan.blocked):
            for port, sw, p in zip(blocked_ports(lan.name, k, t), (t.a, t.b), (t.ab, t.ba),
                                   strict=True):
                target = switch_lan(lan.name, lan.switches, sw)
                out.append(Down(target=target, member=port))
                out.append(Set(target=target, params=params(p), dir="from_lan", member=port))
    return out


def _simulated_nodes(plan: Plan) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(routers, hosts): simulated nodes with one interface are hosts, with more routers."""
    routers, hosts = [], []
    for np_ in plan.nodes.values():
        if not np_.simulated or not np_.interfaces:
            continue                   # an isolated node: nothing to simulate
        if is_host(np_):
            i = np_.interfaces[0]
            h: dict[str, Any] = {"host": np_.name, "port": i.port, "mac": i.mac,
                                 **_addresses(i)}
            if np_.gateway and i.ip:
                h["gateway"] = np_.gateway
            if np_.gateway6 and i.ip6:
                h["gateway6"] = np_.gateway6
            hosts.append(h)
        else:
            routers.append({
                "router": np_.name,
                "interfaces": [{"port": i.port, "mac": i.mac, **_addresses(i)}
                               for i in np_.interfaces],
                "routes": [{"dst": ("::/0" if r.v6 else "0.0.0.0/0") if r.dst == "default"
                            else r.dst, "via": r.via} for r in np_.routes]})
    return routers, hosts


def _addresses(i: Interface) -> dict[str, str]:
    """A simulated interface's ``ip`` and ``ip6`` (either may be absent)."""
    out = {}
    if i.ip:
        out["ip"] = f"{i.ip}/{i.prefixlen}"
    if i.ip6:
        out["ip6"] = f"{i.ip6}/{i.prefixlen6}"
    return out


def agents(flows: list[SimFlow]) -> list[dict[str, Any]]:
    """The engine's traffic agents of simulated applications: sinks first (so a source
    never sends to a port that has no sink yet)."""
    return [_sink(f) for f in flows] + [_source(f) for f in flows]


def _sink(f: SimFlow) -> dict[str, Any]:
    if f.kind == "tcp":
        # ns-2's TCPSink ACKs each segment; a DelAck sink ACKs as Linux's receiver does (the
        # emulated sink's), with this host's receive buffer (the emulated nodes' namespaces
        # start with the host's tcp_rmem), or with ns-2 DelAck's timer when the script
        # gives its interval_.
        k = {"agent": f.sink_id, "host": f.dst_node, "kind": "tcp_sink", "port": f.port,
             "acks": "linux" if f.sink.delayed_ack else "each"}
        if f.sink.delack_s is not None:
            k.update(acks="delayed", delack_us=max(1, round(f.sink.delack_s * 1e6)))
        elif f.sink.delayed_ack and (rmem := host_tcp_rmem()) is not None:
            k["rmem"] = list(rmem)
        return k
    return {"agent": f.sink_id, "host": f.dst_node, "kind": "sink", "port": f.port}


TCP_RMEM = "/proc/sys/net/ipv4/tcp_rmem"


@functools.cache
def host_tcp_rmem() -> tuple[int, int, int] | None:
    """This host's ``net.ipv4.tcp_rmem`` (min, default, max bytes), which the Linux-like
    simulated sink takes as its receive buffer; None when unreadable (the engine then uses
    Linux's defaults). Read once per process; the scenario records it, so a simulation
    replays the same."""
    try:
        with open(TCP_RMEM) as f:
            v = tuple(int(x) for x in f.read().split())
    except (OSError, ValueError):
        return None
    if len(v) != 3 or not 1 <= v[0] <= v[1] <= v[2] < 2**31:
        return None
    return v[0], v[1], v[2]


def _source(f: SimFlow) -> dict[str, Any]:
    t, tp = f.traffic, f.transport
    dst = f"[{f.dst_ip}]" if ":" in f.dst_ip else f.dst_ip
    src: dict[str, Any] = {"agent": f.app, "host": f.src_node, "dst": f"{dst}:{f.port}"}
    if f.kind == "tcp":
        src.update(kind="tcp", cc=tp.cc, trace_interval_us=10000,
                   mss=tp.mss if tp.mss is not None else ir.LINUX_MSS)
        for key, v in (("window", tp.window),
                       ("initial_window", tp.window_init)):
            if v is not None:
                src[key] = v
        if tp.min_rto_s is not None:
            src["min_rto_us"] = round(tp.min_rto_s * 1e6)
        if tp.max_burst:
            src["max_burst"] = tp.max_burst
        if tp.tcp_tick_s:
            src["tcp_tick_us"] = max(1, round(tp.tcp_tick_s * 1e6))
        if t.max_bytes is not None:
            src["bytes"] = t.max_bytes
        return src
    src["size"] = max(16, t.packet_size or 0)
    if t.interval_s is not None:
        src["interval_us"] = max(1, round(t.interval_s * 1e6))
    else:
        src["rate_bps"] = t.rate_bps
    if f.kind != "onoff":
        return {**src, "kind": f.kind}
    assert t.burst_s is not None and t.idle_s is not None
    src.update(kind="onoff", on_us=t.burst_s * 1e6, off_us=t.idle_s * 1e6, dist=t.pattern)
    if t.pattern == "pareto":
        src["shape"] = t.shape
    return src


def remove(plan: Plan, networks: Collection[str]) -> Remove:
    """The ``remove`` of ``networks`` (links and LANs of ``plan``) with their TAPs."""
    nets = set(networks)
    return Remove(links=[l.name for l in plan.links if l.name in nets],
                  lans=[x for l in plan.lans if l.name in nets for x in engine_lans(l)],
                  ports=[p.id for p in plan.ports if p.netns is not None and p.network in nets])


def params_patch(old: LinkParams, new: LinkParams) -> Params:
    """The PARAMS patch that turns direction parameters ``old`` into ``new`` (only what
    differs; a queue field by field)."""
    o, n = params(old), params(new)
    patch: dict[str, Any] = {}
    for k, v in n.items():
        was = o.get(k)
        if was == v:
            continue
        if k == "queue" and isinstance(v, dict) and isinstance(was, dict) \
                and was.get("kind") == v.get("kind"):
            patch[k] = {qk: qv for qk, qv in v.items() if was.get(qk) != qv}
        else:
            patch[k] = v
    if "bandwidth_bps" in patch and new.trace is not None:
        patch["trace"] = n["trace"]         # a bandwidth alone would end the trace
    return Params(**patch)  # type: ignore[typeddict-item]


def batch(timed: list[tuple[float, Request]], *, seed: int, until_s: float,
          sample_interval_s: float, sample_agents: list[str]) -> dict[str, Any]:
    """The input of ``wanlab-engine simulate``: requests, each at its time in seconds
    (docs/engine-protocol.md, virtual time)."""
    return {"seed": seed, "until_ns": _ns(until_s), "sample_interval_ns": _ns(sample_interval_s),
            "sample_agents": sample_agents,
            "requests": [{"at_ns": _ns(t), **r.to_json()} for t, r in timed]}


def _ns(seconds: float) -> int:
    return round(seconds * 1_000_000_000)


def loss(p: float, correlation: float = 0.0, model: ir.LossModel | None = None
         ) -> dict[str, Any]:
    """The engine's loss model: none, Bernoulli (with its correlation), Gilbert-Elliott or
    4-state (``model``, which replaces ``p``)."""
    if model is not None:
        if model.model == "gilbert-elliott":
            return {"kind": "gilbert", "p": model.p, "r": model.r, "h": model.h, "k": model.k}
        return {"kind": "state", **model.values()}
    if p <= 0:
        return {"kind": "none"}
    return {"kind": "bernoulli", "p": p, **({"corr": correlation} if correlation else {})}


def event_requests(ev: ir.Event, kind: str, ports: PortMap, trace_dir: str) -> list[Request]:
    """The requests of a link or LAN event (``kind`` is ``link`` or ``lan``); ``ports``
    names a LAN member's port. On a LAN of several switches each request goes to the engine
    LAN of the member it names, and one naming no member to every member (trunks keep
    their shaping)."""
    reqs = _event_requests(ev, kind, ports, trace_dir)
    lan_of = ports.switched.get(ev.target) if kind == "lan" else None
    if not lan_of:
        return reqs
    out: list[Request] = []
    for r in reqs:
        m = getattr(r, "member", None)
        for p in [m] if m else ports.ports(ev.target):
            out.append(dataclasses.replace(r, target=lan_of[p], member=p))  # type: ignore
    return out


def _event_requests(ev: ir.Event, kind: str, ports: PortMap, trace_dir: str
                    ) -> list[Request]:
    lan = kind == "lan"
    member = ports.port(ev.target, ev.member) if ev.member else None
    a, v = ev.action, ev.value
    if ev.to is not None:       # one pair's channel: its own values, not LAN halves
        if a == "bandwidth":
            pair: Params = {"bandwidth_bps": v}
        elif a == "delay":
            pair = {"delay_us": _us(v)}
        elif a == "plr":
            pair = {"loss": loss(v)}  # type: ignore[typeddict-item]
        elif a == "impair":
            pair = impair_patch(v)
        else:
            raise ValueError(f"{ev.target}: {a} does not apply to a pair channel")
        return [Set(target=ev.target, params=pair, member=member,
                    to=ports.port(ev.target, ev.to))]
    if a == "up":
        return [Up(target=ev.target, member=member)]
    if a == "down":
        return [Down(target=ev.target, member=member)]
    patch: Params
    if a == "bandwidth":       # (the engine ends a trace at a fixed rate)
        patch = {"bandwidth_bps": v}
    elif a == "delay":
        d = ir.lan_half(v, 0.0)[0] if lan else v
        patch = {"delay_us": _us(d)}
    elif a == "plr":
        p = ir.lan_half(0.0, v)[1] if lan else v
        patch = {"loss": loss(p)}  # type: ignore[typeddict-item]
    elif a == "set":
        patch = {"queue": {ev.param: v}}  # type: ignore[misc]
    elif a == "drop":
        # the next N packets of one direction (ns-2's ErrorModel/List, counted from now)
        patch = {"loss": {"kind": "ordinals", "drop": list(range(1, v + 1))}}
    elif a == "trace":
        return _trace(ev, lan, ports, trace_dir)
    elif a == "impair":
        patch = impair_patch(ev.value)
        if lan and not ev.dir:       # once between two members: on the receiving half
            return [Set(target=ev.target, params=patch, dir="from_lan", member=member)]
    else:
        raise ValueError(f"{ev.target}: {a} is not a link or LAN event")
    return [Set(target=ev.target, params=patch, dir=ev.dir or "both", member=member)]


def _trace(ev: ir.Event, lan: bool, ports: PortMap, trace_dir: str) -> list[Request]:
    if lan:
        members = [ports.port(ev.target, ev.member)] if ev.member else ports.ports(ev.target)
        sels = [(p, d) for p in members
                for d in ((ev.dir,) if ev.dir else ("to_lan", "from_lan"))]
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
    if ev.action == "impair":
        return f"{ev.target}{where} " + ", ".join(f"{k} = {v}" for k, v in ev.value.items())
    return f"{ev.target}{where} {ev.action} {ev.args()[-1]}"
