"""ns-2's vocabulary turned into the typed IR, once, for every front end and for tevc.

The ns, YAML and Python front ends (and ``wanlab tevc`` / the API at run time) describe
agents and events in ns-2's words: classes such as ``Agent/TCP/Newreno``, instance
variables such as ``rate_ 448Kb``, events such as ``"$link set thresh_ 10"``. This module
is the only place that reads those words:

* :func:`agent`: an agent or application class and its ns-2 instance variables ->
  :class:`~wanlab.model.ir.Transport` / :class:`~wanlab.model.ir.Traffic`, with ns-2's
  defaults applied here and nowhere else;
* :func:`event`: a target and the words of an event -> a typed
  :class:`~wanlab.model.ir.Event` (every argument checked; a bad one is a SpecError with
  the event's file:line, or naming the argument for tevc);
* :func:`queue_field`: an ns-2 queue parameter (``thresh_``) -> the IR's queue field and
  typed value, for declarations and events alike;
* :func:`upgrade`: IR JSON of version 1 (ns-2 strings) -> the current version.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from wanlab.errors import SpecError
from wanlab.frontends import impair as impair_spec
from wanlab.frontends import schedules, traces, units
from wanlab.model import imageref, ir, names

# ns-2 queue parameter -> IR queue field (``queue_in_bytes_`` is an old spelling)
QUEUE_PARAMS = {"limit_": "limit", "thresh_": "thresh", "maxthresh_": "maxthresh",
                "q_weight_": "q_weight", "linterm_": "linterm", "mean_pktsize_": "mean_pktsize",
                "queue-in-bytes_": "in_bytes", "queue_in_bytes_": "in_bytes",
                "gentle_": "gentle"}

# ns-2 application class -> traffic pattern, and the defaults of its instance variables
PATTERN_OF = {"Application/Traffic/CBR": "cbr", "Application/Traffic/Poisson": "poisson",
              "Application/Traffic/Exponential": "exponential",
              "Application/Traffic/Pareto": "pareto", "Application/FTP": "ftp"}
NS2_DEFAULTS = {
    "cbr": {"packetSize_": "210", "rate_": "448Kb"},
    "poisson": {"packetSize_": "210", "rate_": "448Kb"},
    "exponential": {"packetSize_": "210", "rate_": "64Kb", "burst_time_": "0.5",
                    "idle_time_": "0.5"},
    "pareto": {"packetSize_": "210", "rate_": "64Kb", "burst_time_": "0.5",
               "idle_time_": "0.5", "shape_": "1.5"},
    "ftp": {},
}
# the instance variables each pattern reads (others are accepted and unused, as in ns-2)
TRAFFIC_VARS = {"packetSize_": "packet_size", "rate_": "rate_bps", "interval_": "interval_s",
                "iptos_": "tos", "maxpkts_": "max_packets"}
# ns-2 TCP agent class -> congestion control
TCP_CC = {"Agent/TCP": "tahoe", "Agent/TCP/Reno": "reno", "Agent/TCP/Newreno": "newreno",
          "Agent/TCP/NewReno": "newreno", "Agent/TCP/Linux": "cubic"}
UDP_SINKS = ("Agent/Null", "Agent/LossMonitor")
TCP_SINKS = ("Agent/TCPSink", "Agent/TCPSink/DelAck")
# TCP agent variables both back ends follow (packetSize_ as iperf3's MSS, window_ as its
# socket buffers), and those only the simulation can (Linux's value instead in emulation)
# (windowInit_ and minrto_ as the initcwnd and rto_min of the sender's route to the sink)
TCP_BOTH = ("packetSize_", "window_", "select_ca", "windowInit_", "minrto_")
TCP_SIM_ONLY = {"maxburst_": "no burst limit", "tcpTick_": "its own clock"}
TIME_VERBS = ("up", "down", "start", "stop", "kill", "run", "reset", "reboot", "halt",
              "terminate", "swapout", "stoprun")


def _err(msg: str, src: ir.Source | None, field: str | None = None) -> SpecError:
    return SpecError(msg, file=src.file if src else None, line=src.line if src else None,
                     field=field)


def _at(src: ir.Source | None) -> dict[str, Any]:
    return {"file": src.file if src else None, "line": src.line if src else None}


# -- agents -----------------------------------------------------------------------

def agent(name: str, kind: str, *, node: str | None = None, attached: str | None = None,
          peer: str | None = None, params: Mapping[str, Any] | Sequence[tuple[str, Any]] = (),
          source: ir.Source | None = None,
          sources: Mapping[str, ir.Source] | None = None) -> tuple[ir.Agent, list[str]]:
    """A typed agent from its ns-2 class and instance variables; returns the agent and
    notes (messages for warnings: what is not realised). ``sources`` locate each
    variable's assignment for errors (default: the declaration)."""
    src = source or ir.Source()
    here = {**(sources or {})}
    p = {str(k): str(v) for k, v in (params.items() if isinstance(params, Mapping)
                                      else params)}
    notes: list[str] = []
    kw = {"name": name, "kind": kind, "node": node, "attached": attached, "peer": peer,
          "source": src}
    if kind.startswith("Application/"):
        pattern = PATTERN_OF.get(kind)
        if pattern is None:
            notes.append(f"{kind} {name}: wanlab does not generate this traffic; the "
                         f"application is recorded only")
            return ir.Agent(role="application", **kw), notes
        return ir.Agent(role="application", traffic=_traffic(name, pattern, p, src, here),
                        **kw), notes
    return ir.Agent(role="agent", transport=_transport(name, kind, p, src, notes, here),
                    **kw), notes


def _traffic(name: str, pattern: str, given: dict[str, str], decl: ir.Source,
             here: dict[str, ir.Source]) -> ir.Traffic:
    p = {**NS2_DEFAULTS[pattern], **given}
    field = f"agents.{name}"

    def at(key: str) -> dict[str, Any]:
        return _at(here.get(key, decl))
    src = decl
    if pattern == "ftp":
        mb = p.get("maxbytes_")
        return ir.Traffic(pattern="ftp", max_bytes=None if mb is None else units.parse_int(
            mb, "maxbytes_", field=field + ".maxbytes_", **at("maxbytes_")))
    vals = {f: traffic_value(f, p[k], here.get(k, decl), f"{field}.{k}")
            for k, f in TRAFFIC_VARS.items() if k in p}
    if pattern in ("exponential", "pareto"):
        burst = units.parse_delay(p["burst_time_"], what="burst_time_", **at("burst_time_"),
                                  field=field + ".burst_time_")
        idle = units.parse_delay(p["idle_time_"], what="idle_time_", **at("idle_time_"),
                                 field=field + ".idle_time_")
        if pattern == "exponential" and burst == 0:
            # ns-2: an exponential source with no bursts sends single packets with
            # exponential gaps of mean idle_time_: a Poisson process
            if idle <= 0:
                raise _err(f"{name}: idle_time_ must be > 0 when burst_time_ is 0", src,
                           field + ".idle_time_")
            return ir.Traffic(pattern="poisson", packet_size=vals["packet_size"],
                              interval_s=idle, tos=vals.get("tos"),
                              max_packets=vals.get("max_packets"))
        if burst <= 0:
            raise _err(f"{name}: burst_time_ must be > 0", src, field + ".burst_time_")
        shape = None
        if pattern == "pareto":
            shape = units.parse_float(p["shape_"], "shape_", **at("shape_"),
                                      field=field + ".shape_")
            if shape <= 1:
                raise _err(f"{name}: shape_ {shape} must be > 1", src, field + ".shape_")
        return ir.Traffic(pattern=pattern, packet_size=vals["packet_size"],
                          rate_bps=vals["rate_bps"], burst_s=burst, idle_s=idle, shape=shape,
                          tos=vals.get("tos"), max_packets=vals.get("max_packets"))
    # cbr, poisson: interval_, when set, replaces rate_ (ns-2)
    interval = vals.get("interval_s")
    return ir.Traffic(pattern=pattern, packet_size=vals["packet_size"],
                      rate_bps=None if interval is not None else vals["rate_bps"],
                      interval_s=interval, tos=vals.get("tos"),
                      max_packets=vals.get("max_packets"))


def traffic_value(field: str, text: Any, src: ir.Source | None = None,
                  where: str | None = None) -> Any:
    """One traffic field's typed value from its ns-2 text (``rate_bps`` from ``"1Mb"``);
    ``where`` names it in errors (default: the field)."""
    f = where or field
    kw = {**_at(src), "field": f}
    if field == "rate_bps":
        v: Any = units.parse_bandwidth(text, **kw)
        if v < 1:
            raise _err(f"rate {text!r} must be positive", src, f)
    elif field == "interval_s":
        v = units.parse_delay(text, what="interval", **kw)
        if v <= 0:
            raise _err(f"interval {text!r} must be positive", src, f)
    else:
        v = units.parse_int(text, field, **kw)
    if not ir._traffic_value_ok(field, v):
        raise _err(f"{field} {text!r} out of range", src, f)
    return v


def _transport(name: str, kind: str, p: dict[str, str], src: ir.Source,
               notes: list[str], here: dict[str, ir.Source]) -> ir.Transport | None:
    field = f"agents.{name}"

    def num(key: str, conv=int) -> Any:
        if key not in p:
            return None
        at = _at(here.get(key, src))
        return (units.parse_int(p[key], key, **at, field=f"{field}.{key}") if conv is int
                else units.parse_delay(p[key], what=key, **at, field=f"{field}.{key}"))
    if kind.startswith("Agent/UDP"):
        return ir.Transport(protocol="udp")
    if kind in UDP_SINKS:
        return ir.Transport(protocol="udp_sink")
    if kind in TCP_SINKS:
        delack = kind.endswith("DelAck")
        t = ir.Transport(protocol="tcp_sink", delayed_ack=delack,
                         delack_s=num("interval_", float) if delack else None)
        if t.delack_s is not None:
            notes.append(f"{kind} {name}: interval_ is honoured in simulation only; emulated "
                         f"Linux keeps its delayed-ACK timer (40-200 ms, from the RTT)")
        ir.check_agent(ir.Agent(name=name, kind=kind, transport=t, source=src))
        return t
    if kind.startswith("Agent/TCP"):
        cc = TCP_CC.get(kind)
        if kind == "Agent/TCP/Linux":
            ca = p.get("select_ca", "cubic").lower()
            # Linux "reno" recovers as NewReno
            cc = {"reno": "newreno", "newreno": "newreno"}.get(ca, ca)
            if not ca.replace("_", "").isalnum():
                raise _err(f"{name}: select_ca {ca!r} is not a congestion control name", src,
                           f"{field}.select_ca")
        elif cc is None:
            notes.append(f"{kind} {name}: no equivalent TCP here; emulation uses the host's "
                         f"default congestion control, simulation refuses it")
        t = ir.Transport(protocol="tcp", cc=cc, mss=num("packetSize_"), window=num("window_"),
                         window_init=num("windowInit_"), min_rto_s=num("minrto_", float),
                         max_burst=num("maxburst_"), tcp_tick_s=num("tcpTick_", float))
        for var in sorted(p):
            if var in TCP_SIM_ONLY:
                notes.append(f"{kind} {name}: {var} is honoured in simulation only; "
                             f"emulated Linux keeps {TCP_SIM_ONLY[var]}")
            elif var not in TCP_BOTH:
                notes.append(f"{kind} {name}: {var} is not realised (simulation and "
                             f"emulation ignore it)")
        ir.check_agent(ir.Agent(name=name, kind=kind, transport=t, source=src))
        return t
    notes.append(f"{kind} {name}: recorded only; wanlab does not realise this agent")
    return None


# -- queue parameters -----------------------------------------------------------

def queue_field(key: str, text: Any, src: ir.Source | None = None,
                where: str | None = None) -> tuple[str, Any]:
    """An ns-2 queue parameter and its text -> (IR queue field, typed value)."""
    fld = QUEUE_PARAMS.get(key)
    f = where or key
    if fld is None:
        raise _err(f"queue parameter {key!r} unknown; use one of "
                   f"{', '.join(k for k in QUEUE_PARAMS if k != 'queue_in_bytes_')}", src, f)
    typ = ir.QUEUE_FIELDS[fld]
    if typ is bool:
        v: Any = units.parse_bool(text, key, **_at(src), field=f)
    elif typ is int:
        v = units.parse_int(text, key, **_at(src), field=f)
    else:
        v = units.parse_float(text, key, **_at(src), field=f)
    if not ir.queue_value_ok(fld, v):
        raise _err(f"queue parameter {key} {text!r} out of range", src, f)
    return fld, v


# -- events ---------------------------------------------------------------------

def event(exp: ir.Experiment, time_s: float, target: str, action: str, args: Sequence[Any],
          source: ir.Source | None = None, *, dir: str | None = None,
          member: str | None = None, kinds: dict[str, str] | None = None) -> ir.Event:
    """A typed event from ns-2's words: ``target`` (an object of ``exp``), ``action`` and
    its arguments (``"5Mb"``; numbers are accepted too). ``dir``/``member`` select one
    direction (an ns-2 simplex link or its queue). Raises SpecError naming the bad word."""
    src = source or ir.Source()
    kinds = kinds if kinds is not None else exp.kinds()
    kind = kinds.get(target)
    words = [str(a) for a in args]
    if kind == "link" and dir is None and action != "drop" and len(words) >= 2 \
            and words[-1] in ("ab", "ba") and words != ["trace", words[-1]]:
        # tevc's one direction: a link event's last word (drop has its own)
        dir, words = words[-1], words[:-1]
    e = ir.Event(time_s=time_s, target=target, action=action, dir=dir, member=member,
                 source=src)
    if kind is None:
        raise _err(f"event targets unknown object {target!r}", src)
    what = f"{target} {action}"

    def one(name: str) -> str:
        if len(words) != 1:
            raise _err(f"{what}: needs one {name}, got {len(words)} words", src)
        return words[0]
    from dataclasses import replace
    if kind in ("link", "lan") and action in ("bandwidth", "delay", "plr", "loss") \
            and len(words) == 2 and words[1] in ("duplex", "simplex"):
        # Emulab's form, "$link bandwidth 3Mb duplex": the change applies to every
        # direction the target has (both for a link; one for [$ns link $a $b])
        if words[1] == "simplex" and dir is None:
            raise _err(f"{what}: 'simplex' needs one direction as the target "
                       f"([$ns link $a $b]); {target} has two", src)
        words = words[:1]
    if kind in ("link", "lan") and action == "bandwidth" and words[:1] == ["trace"]:
        # a capacity trace: the file relative to the describing file's folder (tevc: the
        # working directory, where the process may read files at all)
        base = os.path.dirname(src.file) if src.file else None
        try:
            t = traces.from_words(words, base)
        except SpecError as err:
            if err.file:
                raise
            raise _err(f"{what}: {err.message}", src, err.field) from None
        e = replace(e, action="impair", value={"trace": traces.plain(t)})
    elif kind in ("link", "lan") and action == "schedule":
        # a schedule started now (or ended: none), its file found as a trace's
        base = os.path.dirname(src.file) if src.file else None
        try:
            sc = schedules.from_words(words, base)
        except SpecError as err:
            if err.file:
                raise
            raise _err(f"{what}: {err.message}", src, err.field) from None
        e = replace(e, action="impair", value={"schedule": schedules.plain(sc)})
    elif kind in ("link", "lan") and impair_spec.is_verb(action, words):
        try:
            value = impair_spec.from_words(action, words)
        except SpecError as err:
            raise _err(f"{what}: {err.message}", src, err.field) from None
        e = replace(e, action="impair", value=value)
    elif kind in ("link", "lan"):
        if action == "bandwidth":
            e = replace(e, value=units.parse_bandwidth(one("bandwidth"), **_at(src),
                                                        field="bandwidth"))
        elif action == "delay":
            e = replace(e, value=units.parse_delay(one("delay"), **_at(src), field="delay"))
        elif action in ("plr", "loss"):
            e = replace(e, action="plr",
                        value=units.parse_loss(one("loss rate"), **_at(src), field="plr"))
        elif action == "set":
            if len(words) != 2:
                raise _err(f"{what}: needs a queue parameter and a value", src)
            fld, v = queue_field(words[0], words[1], src)
            _check_red(exp, target, kind, fld, dir, member, src)
            e = replace(e, param=fld, value=v)
        elif action == "drop" and kind == "link":
            if not 1 <= len(words) <= 2:
                raise _err(f"{what}: takes a count and a direction: drop N [ab|ba]", src)
            n = units.parse_int(words[0], "drop count", **_at(src), field="count")
            d = words[1] if len(words) == 2 else (dir or "ab")
            if d not in ("ab", "ba"):
                raise _err(f"{what}: direction {d!r} must be ab or ba", src, "dir")
            if not 1 <= n <= 1000:
                raise _err(f"{what}: count {n} must be 1..1000", src, "count")
            e = replace(e, value=n, dir=d)
        elif action == "trace":
            op = words[0] if words else "start"
            if len(words) > 1 or op not in ir.TRACE_OPS:
                raise _err(f"{what}: takes start, stop or snapshot, not "
                           f"{' '.join(words)!r}", src)
            e = replace(e, value=op)
        elif words and action in TIME_VERBS:
            raise _err(f"{what}: takes no arguments (got {' '.join(words)!r})", src)
    elif kind == "program" and action == "set":
        text = " ".join(words)
        key, sep, value = text.partition("=")
        if not sep:
            key, _, value = text.partition(" ")
        if key.strip() != "command":
            raise _err(f"{what}: programs can set only command (command=CMD), not "
                       f"{key.strip()!r}", src)
        e = replace(e, param="command", value=value.strip().strip('"'))
    elif kind == "application" and action == "set":
        if len(words) < 2:
            raise _err(f"{what}: needs a parameter and a value", src)
        fld = TRAFFIC_VARS.get(words[0])
        if fld is None:
            raise _err(f"{what}: parameter {words[0]!r} cannot change at run time; use one "
                       f"of {', '.join(TRAFFIC_VARS)}", src)
        e = replace(e, param=fld, value=traffic_value(fld, " ".join(words[1:]), src,
                                                      words[0]))
    elif kind == "simulator" and action in ("msg", "log"):
        e = replace(e, value=" ".join(words))
    elif words and action in TIME_VERBS:
        raise _err(f"{what}: takes no arguments (got {' '.join(words)!r})", src)
    ir.check_event(exp, e, kinds)
    return e


def _check_red(exp: ir.Experiment, target: str, kind: str, fld: str, dir: str | None,
               member: str | None, src: ir.Source) -> None:
    """RED parameters need a RED queue in every direction the event changes."""
    if fld not in ir.RED_FIELDS:
        return
    if kind == "link":
        link = next(x for x in exp.links if x.name == target)
        qs = [getattr(link, d).queue for d in ((dir,) if dir else ("ab", "ba"))]
    else:
        lan = next(x for x in exp.lans if x.name == target)
        qs = [getattr(m, d).queue for m in lan.members if member in (None, m.node)
              for d in ((dir,) if dir else ("to_lan", "from_lan"))]
    if any(q.kind == "droptail" for q in qs):
        raise _err(f"{target} set: {fld} applies to RED queues; {target} has a DropTail "
                   f"queue" + (f" ({dir})" if dir else ""), src)


def link_change(exp: ir.Experiment, target: str, dir: str = "both", *,
                bandwidth: Any = None, delay: Any = None, loss: Any = None,
                jitter: Any = None, duplicate: Any = None, corrupt: Any = None,
                reorder: Any = None, overhead: Any = None, cellsize: Any = None,
                cell_overhead: Any = None, schedule: Any = None) -> list[ir.Event]:
    """Events now for the API's ``set_link``: the same meaning as tevc's (a LAN's delay
    and plain loss are member-to-member); netem's impairments (and a loss model, a
    mapping; a capacity trace, ``bandwidth={"trace": FILE}``; a ``schedule``, ``{"csv":
    FILE}`` or None to end it) as one ``impair`` event, a trace or schedule starting now."""
    d = None if dir == "both" else dir
    out = []
    for action, v in (("bandwidth", bandwidth), ("delay", delay), ("plr", loss)):
        if v is not None and not (action in ("plr", "bandwidth") and isinstance(v, Mapping)):
            out.append(event(exp, 0.0, target, action, [v], dir=d))
    try:
        ch = impair_spec.fields(dict(jitter=jitter, duplicate=duplicate, corrupt=corrupt,
                                     reorder=reorder, overhead=overhead, cellsize=cellsize,
                                     cell_overhead=cell_overhead))
        if isinstance(loss, Mapping):
            ch.update(impair_spec.loss(loss))
        if isinstance(bandwidth, Mapping):
            ch["trace"] = traces.plain(traces.spec(bandwidth, None))
        if schedule is not None:
            ch["schedule"] = schedules.plain(schedules.spec(schedule, None)) \
                if schedule != "none" else None
    except SpecError as e:
        raise _err(f"{target}: {e.message}", None, e.field) from None
    if ch:
        if ch.get("loss_model") is not None:
            from dataclasses import asdict
            ch["loss_model"] = asdict(ch["loss_model"])
        e = ir.Event(time_s=0.0, target=target, action="impair", value=ch, dir=d)
        ir.check_event(exp, e)
        out.append(e)
    return out


# -- IR version 1 -----------------------------------------------------------------

def upgrade(d: dict[str, Any]) -> dict[str, Any]:
    """IR JSON of an older version -> the current version (agents' and events' ns-2 strings
    are normalised as a front end does)."""
    if d.get("version", 1) == ir.IR_VERSION:
        return d
    d = dict(d, version=ir.IR_VERSION)
    agents, events = d.get("agents", []), d.get("events", [])
    base = ir.Experiment.from_json({**d, "agents": [], "events": []})
    typed = []
    for a in agents:
        s = ir.Source(**a["source"]) if a.get("source") else ir.Source()
        ag, _ = agent(a["name"], a["kind"], node=a.get("node"), attached=a.get("attached"),
                      peer=a.get("peer"), params=[tuple(kv) for kv in a.get("params", ())],
                      source=s)
        typed.append(ag)
    from dataclasses import replace
    exp = replace(base, agents=tuple(typed))
    kinds = exp.kinds()
    evs, notes = [], []
    for e in events:
        s = ir.Source(**e["source"]) if e.get("source") else ir.Source()
        try:
            ev = event(exp, float(e["time_s"]), e["target"], e["action"], e.get("args", ()),
                       s, kinds=kinds)
        except SpecError as err:      # stored before events were checked: keep the rest
            notes.append(f"event dropped when upgrading the stored description: {err}")
            continue
        evs.append(replace(ev, sequence=e.get("sequence"), step=e.get("step", 0)))
    return replace(exp, events=tuple(evs), warnings=exp.warnings + tuple(notes)).to_json()


# -- node images and setup (tb-set-node-os, tb-set-node-tarfiles, tb-set-node-rpms) ---------

DEFAULT_IMAGE = "default"
# Emulab OS name prefix -> what it was, for the note saying what runs in its place
EMULAB_OS = (("FBSD", "FreeBSD"), ("FREEBSD", "FreeBSD"), ("UBUNTU", "Ubuntu"),
             ("RHL", "Red Hat Linux"), ("RHEL", "Red Hat Enterprise Linux"),
             ("FEDORA", "Fedora"), ("CENTOS", "CentOS"), ("DEBIAN", "Debian"),
             ("WIN", "Windows"), ("OPENBSD", "OpenBSD"), ("NETBSD", "NetBSD"))
# RPM names whose Debian package is called differently
RPM_TO_DEB = {"httpd": "apache2", "bind-utils": "dnsutils", "bind": "bind9",
              "nmap-ncat": "netcat-openbsd", "nc": "netcat-openbsd", "iputils": "iputils-ping",
              "python": "python3", "quagga": "frr", "openssh-clients": "openssh-client",
              "procps-ng": "procps", "iproute": "iproute2", "vim-enhanced": "vim",
              "gcc-c++": "g++", "openssl-devel": "libssl-dev", "zlib-devel": "zlib1g-dev"}
_RPM_FILE = re.compile(r"^(?P<name>.+?)-[0-9][^-]*-[^-]+?(\.(x86_64|i[3-6]86|noarch|aarch64|"
                       r"armv7hl|src))?\.rpm$")


def node_image(name: str, os_name: str | None, image: str | None,
               src: ir.Source | None = None, setup: bool = False,
               simulated: bool = False,
               base_dir: str | None = None) -> tuple[str | None, list[str]]:
    """A node's image from ``image`` (a wanlab image name or an OCI reference, made
    canonical against ``base_dir``) or an OS name (or an OCI reference)
    (``tb-set-node-os``): a wanlab image name is used as it is, an Emulab OS name maps to
    the closest image, the default one, with a note saying what differs (the caller
    prefixes it with the command or key that named the OS). ``setup``: the node has
    tarfiles or packages, which need an image (the default one if none is named). A
    ``simulated`` node has no file system: its OS is only recorded."""
    for given, key in ((image, "image"), (os_name, "os")):
        if imageref.is_ref(given):      # an OCI image (docs/oci-images.md)
            try:
                return imageref.canonical(str(given), base_dir, key), []
            except SpecError as e:
                if key == "image":
                    raise _err(f"node {name}: {e.message}", src, key) from None
                # an OS name that is no reference: an Emulab OS name, mapped below
    if image is not None:
        if not names.IMAGE_NAME_RE.fullmatch(str(image)):
            raise _err(f"node {name}: image name {image!r} is not valid "
                       f"({names.IMAGE_NAME_RULE})", src, "image")
        return str(image), []
    if os_name is None or (simulated and not setup):
        if setup:               # tarfiles or packages need a root of the node's own
            return DEFAULT_IMAGE, [f"node {name} gets the '{DEFAULT_IMAGE}' image: its "
                                   f"tarfiles and packages go into a root of its own"]
        return None, []
    os_name = str(os_name)
    if names.IMAGE_NAME_RE.fullmatch(os_name):
        return os_name, []
    up = os_name.upper()
    what = next((w for prefix, w in EMULAB_OS if up.startswith(prefix)), None)
    img = (f"node {name} runs the '{DEFAULT_IMAGE}' image (Debian 12 bookworm with iproute2, "
           f"ping, iperf3, FRR, tcpdump, python3, dnsmasq) on this host's Linux kernel")
    if what is None:
        note = f"not an Emulab OS wanlab knows; {img}"
    elif what == "Debian":
        note = img
    elif what in ("FreeBSD", "OpenBSD", "NetBSD", "Windows"):
        note = (f"{what} cannot run here; {img}: Linux tools and paths (ip, not "
                f"ifconfig/route/ipfw; /etc/frr, not /usr/local/etc)")
    else:
        note = f"{what} is not available; {img}: Debian's package names and paths"
    return DEFAULT_IMAGE, [note]


def copy_entry(dest: str, what: str, src: ir.Source | None = None) -> tuple[str, str]:
    """A file or folder ``what`` (absolute, checked by the caller) copied to ``dest`` in the
    node's root: a tarfiles entry whose folder is ``=DEST``."""
    dest = str(dest)
    if not dest.startswith("/") or ".." in dest.split("/") or os.path.normpath(dest) == "/":
        raise _err(f"copy destination {dest!r} must be an absolute path without '..'", src,
                   "binds")
    return ("=" + os.path.normpath(dest).replace("//", "/"), os.path.normpath(str(what)))


def rpm_package(word: str, base_dir: str | None, src: ir.Source | None = None) -> str:
    """A ``tb-set-node-rpms`` word -> a Debian package name, or the absolute path of a .deb.
    An ``.rpm`` file name gives its package's name (mapped to Debian's where it differs)."""
    word = str(word)
    if word.endswith(".deb"):
        path = os.path.normpath(os.path.join(base_dir or os.getcwd(), word))
        return path
    base = os.path.basename(word)
    m = _RPM_FILE.match(base)
    pkg = m.group("name") if m else base
    pkg = RPM_TO_DEB.get(pkg, pkg).lower()
    if not ir.PACKAGE_RE.fullmatch(pkg):
        raise _err(f"{word!r} names no package (give a Debian package name or a .deb file)",
                   src, "packages")
    return pkg


def tarfile_entry(folder: str, tarball: str, base_dir: str | None,
                  src: ir.Source | None = None) -> tuple[str, str]:
    """(folder in the node's root, absolute tarball path) of ``tb-set-node-tarfiles``."""
    folder, tarball = str(folder), str(tarball)
    if not folder.startswith("/") or ".." in folder.split("/"):
        raise _err(f"tarfile folder {folder!r} must be an absolute path without '..'", src,
                   "tarfiles")
    return (os.path.normpath(folder).replace("//", "/"),
            os.path.normpath(os.path.join(base_dir or os.getcwd(), tarball)))
