"""The ns-2 front end: run an Emulab-style Tcl script in a sandboxed ``tclsh``.

How it works (as Emulab's parser did): the script runs in a real Tcl
interpreter after wanlab's prelude (``wanlab/frontends/tcl/prelude.tcl`` and
``tb_compat.tcl``), which defines ``Simulator``, nodes, links, LANs, agents,
``Program``, ``$ns at`` and every ``tb-*`` command.  The prelude records each
declaration with the file and line it came from; ``run.tcl`` writes these
records as JSON to a temporary file whose path is passed in ``argv``.
:func:`parse` then turns the records into a validated
:class:`~wanlab.model.ir.Experiment`.

The script is untrusted: ``run.tcl`` runs it in a Tcl *safe* interpreter
(``interp create -safe``: no ``exec``, ``open``, ``file``, ``socket``, ...;
``source`` reads only files beside the script), bounded by
:data:`MAX_COMMANDS` Tcl commands and the timeout (``interp limit``); the
``tclsh`` process itself gets :data:`MAX_MEMORY_BYTES` of address space and
its own process group, killed whole if it outlives the timeout.

Names follow Emulab: an object assigned to a global variable right after its
creation is renamed after the variable (``set router [$ns node]`` is
``router``; ``set n(3) [$ns node]`` is ``n-3``), so ``$router`` is the string
``router`` wherever it is used (start commands, events, ``tb-*``).  Other
objects keep generated names (``node0``, ``link0``, ...).  A name Emulab
could not use is an error naming the line ('_' becomes '-', with a warning).

Errors: a Tcl error (syntax, bad ``expr``, wrong number of arguments, an
unknown command, a command the sandbox lacks), a bad value (``10Xb``) or a
script without ``$ns run`` is a :class:`~wanlab.errors.SpecError` citing the
script's file and line.  The full command reference is docs/ns-reference.md.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from wanlab.errors import SpecError
from wanlab.frontends import bounds, normalize, schedules, traces, units
from wanlab.frontends import edge as edge_spec
from wanlab.frontends import impair as impair_spec
from wanlab.frontends import matrix as lan_matrix
from wanlab.model import ir

TCL_DIR = Path(__file__).resolve().parent / "tcl"
RUN_TCL = TCL_DIR / "run.tcl"
DEFAULT_TIMEOUT_S = 120.0        # a 50 000-node script takes ~15 s of CPU; hosts are shared
MAX_COMMANDS = 500_000_000          # Tcl commands a parse may run (interp limit)
MAX_MEMORY_BYTES = 2 << 30          # address space of the tclsh child (RLIMIT_AS)

_NAMED_CLASSES = ("Node", "Link", "Lan", "Program", "Agent", "EventGroup", "EventSequence",
                  "EventTimeline")
_GROUPS = ("EventGroup", "EventSequence", "EventTimeline")


def tclsh_path() -> str:
    """The ``tclsh`` used to run scripts (``$WANLAB_TCLSH``, PATH, /usr/bin/tclsh)."""
    exe = os.environ.get("WANLAB_TCLSH") or shutil.which("tclsh") or shutil.which("tclsh8.6")
    if not exe and os.path.exists("/usr/bin/tclsh"):
        exe = "/usr/bin/tclsh"
    if not exe:
        raise SpecError("tclsh (Tcl 8.6) is needed to read ns-2 scripts; install the "
                        "'tcl' package")
    return exe


def sanitize_name(raw: str, fallback: str = "exp") -> str:
    """Make ``raw`` a valid IR name (letters, digits, '-', starting with a letter)."""
    s = re.sub(r"[^A-Za-z0-9-]+", "-", raw)
    s = re.sub(r"^[^A-Za-z]+", "", s)
    s = re.sub(r"-{2,}", "-", s)[:32].rstrip("-")
    return s or fallback


def _memory_limit() -> int:
    """tclsh's address space: MAX_MEMORY_BYTES, or less if this process has less."""
    had = resource.getrlimit(resource.RLIMIT_AS)[1]
    return MAX_MEMORY_BYTES if had == resource.RLIM_INFINITY else min(had, MAX_MEMORY_BYTES)


def _limit_child() -> None:
    """In the tclsh child: bounded memory (never more than its parent was allowed), no
    core file (runs before exec)."""
    most = _memory_limit()
    resource.setrlimit(resource.RLIMIT_AS, (most, most))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _run_tclsh(argv: list[str], cwd: str, timeout: float, display: str) -> str:
    """Run the driver in its own process group; kill the whole group on timeout.

    Returns its stderr (for a message when it stops without a result)."""
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True, preexec_fn=_limit_child)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise SpecError(f"the script did not finish within the parse time limit of "
                        f"{timeout:g} s (an endless loop?)", file=display) from None
    except BaseException:
        _kill_group(proc)
        raise
    text = err[-4000:].decode("utf-8", "replace")
    if proc.returncode and proc.returncode < 0 and "alloc" in text:
        raise SpecError(f"the script used more than the parse memory limit of "
                        f"{_memory_limit() >> 20} MB", file=display)
    return text


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def parse(path: str | os.PathLike[str], *, params: dict[str, str] | None = None,
          timeout: float = DEFAULT_TIMEOUT_S, name: str | None = None) -> ir.Experiment:
    """Run the ns-2 script at ``path`` in the sandbox and return its validated experiment.

    ``params`` override ``define-template-parameter`` defaults; ``name``
    overrides the experiment name (default: the file's stem, sanitised).
    """
    display = str(path)
    p = Path(path)
    if not p.is_file():
        raise SpecError("no such file", file=display)
    exe = tclsh_path()
    # the sandbox's own time limit ends an endless loop with its line; the process
    # timeout (a little later) is the backstop
    inner = max(0.5, timeout - min(5.0, timeout * 0.2))
    argv = [exe, str(RUN_TCL), "", str(p.resolve()), str(MAX_COMMANDS), f"{inner:.3f}"]
    for k, v in (params or {}).items():
        argv += [str(k), str(v)]
    with tempfile.TemporaryDirectory(prefix="wanlab-ns-") as tmp:
        rec = Path(tmp) / "records.json"
        argv[2] = str(rec)
        err = _run_tclsh(argv, str(p.resolve().parent), timeout, display)
        try:
            text = rec.read_text(encoding="utf-8")
        except OSError:
            lines = err.strip().splitlines()
            raise SpecError("tclsh stopped without a result"
                            + (f": {lines[-1]}" if lines else ""), file=display) from None
    try:
        records = json.loads(text)
    except ValueError as e:
        raise SpecError(f"internal error reading the ns front end's records: {e}",
                        file=display) from None
    if isinstance(records, dict) and isinstance(records.get("objects"), list):
        kinds = [o.get("class") for o in records["objects"] if isinstance(o, dict)]
        bounds.check({"nodes": kinds.count("Node"), "links": kinds.count("Link"),
                      "lans": kinds.count("Lan"),
                      "events": len(records.get("events") or ())}, display)
    conv = _Records(records, display, p.resolve(), params or {})
    try:
        return conv.experiment(name)
    except (KeyError, IndexError, TypeError, AttributeError) as e:
        # the script shares an interpreter with the prelude: redefining ::wl::
        # procedures or variables can leave records we cannot read
        raise SpecError(f"the ns front end's records are inconsistent ({type(e).__name__}: "
                        f"{e}); does the script change wanlab's ::wl:: namespace?",
                        file=display) from None


# -- errors ---------------------------------------------------------------------

_MARK_RE = re.compile(r'\((?:procedure "(?P<proc>[^"]+)" line (?P<pline>\d+)'
                      r'|"(?P<cmd>[^"]+)" [a-z ]+ line (?P<bline>\d+)'
                      r'|file "(?P<file>[^"]+)" line (?P<fline>\d+))\)')


def locate_error(errorinfo: str, procs: dict[str, list[Any]]) -> tuple[str | None, int | None]:
    """The user's file and line of the command that failed, from Tcl's errorInfo.

    errorInfo lists frames innermost first: ``(procedure "p" line K)``,
    ``("foreach" body line K)``, ``(file "f" line N)``.  Body lines are relative
    to the start of their body, so they add up until a file or a user procedure
    (whose definition line we recorded) anchors them.  Frames of the prelude's
    own procedures reset the count, except after an ``uplevel`` body, which is
    the user's code run by the prelude (``make-simulated``).
    """
    rel = 0
    through_uplevel = False
    for m in _MARK_RE.finditer(errorinfo):
        if m.group("proc"):
            k = int(m.group("pline"))
            name = m.group("proc")
            d = procs.get(name) or procs.get("::" + name.lstrip(":"))
            if d:
                return d[0], int(d[1]) + rel + k - 1
            if not through_uplevel:
                rel = 0
        elif m.group("cmd"):
            if m.group("cmd") == "uplevel":
                through_uplevel = True
            rel += int(m.group("bline")) - 1
        else:
            f = m.group("file")
            if Path(f).resolve().parent == TCL_DIR:
                rel, through_uplevel = 0, False
                continue
            return f, int(m.group("fline")) + rel
    return None, None


# -- records -> IR -----------------------------------------------------------------

class _Records:
    """Turns the prelude's JSON records into IR objects."""

    def __init__(self, rec: dict[str, Any], display: str, script: Path,
                 params: dict[str, str]):
        self.rec = rec
        self.display = display
        self.script = str(script)
        self.tparams = params
        self.warnings: list[tuple[str, str | None, int | None]] = []
        self._fnames: dict[str, str] = {}

    # files and lines
    def fname(self, f: str | None) -> str | None:
        """The file to cite: the script as the user named it, or a sourced file."""
        if not f:
            return self.display
        known = self._fnames.get(f)
        if known is None:
            known = f
            try:
                if str(Path(f).resolve()) == self.script:
                    known = self.display
            except OSError:
                pass
            self._fnames[f] = known
        return known

    def err(self, msg: str, f: str | None, line: int | None) -> SpecError:
        return SpecError(msg, file=self.fname(f), line=line or None)

    def warn(self, msg: str, f: str | None = None, line: int | None = None) -> None:
        self.warnings.append((msg, self.fname(f), line or None))

    def src(self, f: str | None, line: int | None) -> ir.Source:
        return ir.Source(self.fname(f), line or None)

    # typed values out of located attributes [value, file, line]
    def val(self, o: dict[str, Any], key: str, default: Any = None) -> Any:
        a = o["attrs"].get(key)
        return a[0] if a is not None else default

    def conv(self, o: dict[str, Any], key: str, fn, default: Any = None, **kw) -> Any:
        a = o["attrs"].get(key)
        if a is None:
            return default
        if fn in (units.parse_bandwidth, units.parse_delay):
            kw.setdefault("warn", lambda m: self.warn(m, a[1], a[2]))
        return fn(a[0], file=self.fname(a[1]), line=a[2] or None, **kw)

    def experiment(self, name: str | None) -> ir.Experiment:
        rec = self.rec
        if not rec.get("ok"):
            self.raise_error(rec["error"])
        objs = rec["objects"]
        self.by_h = {o["h"]: o for o in objs}
        self.by_name = {o["name"]: o for o in objs}
        self.names = {o["h"]: o["name"] for o in objs}
        self.sim = rec.get("sim") or ""
        nodes = [self.node(o) for o in objs if o["class"] == "Node"]
        links = [self.link(o) for o in objs if o["class"] == "Link"]
        lans = [self.lan(o) for o in objs if o["class"] == "Lan"]
        programs = [self.program(o) for o in objs if o["class"] == "Program"]
        agents = [self.agent(o) for o in objs if o["class"] == "Agent"]
        # the edge's gateway node and LAN join the objects events can target
        edged = edge_spec.expand(ir.Experiment(name="x", nodes=tuple(nodes), lans=tuple(lans),
                                               links=tuple(links)),
                                 self.edge(rec.get("edge") or {},
                                           [o for o in objs if o["class"] == "Node"]))
        nodes, lans, edge = list(edged.nodes), list(edged.lans), edged.edge
        # events are typed against the objects declared (their kinds and queues)
        self.exp = ir.Experiment(name="x", nodes=tuple(nodes), links=tuple(links),
                                 lans=tuple(lans), programs=tuple(programs),
                                 agents=tuple(agents))
        self.kinds = self.exp.kinds()
        events: list[ir.Event] = []
        for e in rec["events"]:
            events.extend(self.event(e))
        timelines, groups = self.timelines(objs)
        rt = rec.get("rtproto")
        rtproto = rt[0] if rt else "static"
        timers = rec.get("ospf") or [ir.Experiment.ospf_hello_s, ir.Experiment.ospf_dead_s]
        for k in rec.get("unused_params", []):
            raise SpecError(f"parameter {k!r} is not a define-template-parameter of "
                            f"this script", file=self.display)
        for w in rec["warnings"]:
            self.warn(w[0], w[1], w[2])
        if not rec.get("ran"):
            raise SpecError("the script never calls '$ns run' (Emulab requires it at the "
                            "end of every script)", file=self.display)
        params = tuple(ir.Parameter(name=n, default=d, value=v, description=desc)
                       for n, d, desc, v, _f, _l in rec.get("tparams", []))
        for n, _d, _desc, _v, f, line in rec.get("tparams", []):
            try:
                ir.check_parameter_name(n)
            except SpecError as e:
                raise self.err(e.message, f, line) from None
        asns, sessions = _bgp_everywhere(nodes, links, lans, edge) if rtproto == "bgp" \
            else ((), ())
        exp = ir.Experiment(
            name=name or sanitize_name(Path(self.display).stem),
            asns=asns, bgp_sessions=sessions,
            parameters=params, swap=self.swap(rec.get("swap") or {}),
            engine_threads=self.engine_threads(rec.get("engine") or {}),
            engine_cores=self.engine_cores(rec.get("engine") or {}),
            nodes=tuple(nodes), links=tuple(links), lans=tuple(lans),
            events=tuple(events), programs=tuple(programs), agents=tuple(agents),
            timelines=tuple(timelines), groups=tuple(groups),
            rtproto=rtproto, ospf_hello_s=int(timers[0]), ospf_dead_s=int(timers[1]),
            warnings=tuple(_coalesce(self.warnings)),
            source=ir.Source(self.display, None), edge=edge,
            **self.ipv6(rec.get("ipv6") or {}))
        return ir.validate(exp)

    def edge(self, ed: dict[str, Any], node_objs: list[dict[str, Any]]) -> edge_spec.EdgeSpec:
        """``tb-set-edge-*`` and each node's ``tb-set-node-forward`` -> the edge's spec,
        errors at the line of the command."""
        spec = edge_spec.EdgeSpec()
        first = min((v for v in ed.values()), key=lambda v: v[2] or 0, default=None)
        if first is not None:
            spec.source = self.src(first[1], first[2])
        doc: dict[str, Any] = {k: ed[k][0] for k in ("gateway", "delay", "bandwidth", "loss",
                                                     "wireguard") if k in ed}
        if "interface" in ed:
            doc["uplink"] = {k: ed[k][0] for k in ("interface", "address", "via")}
        cmd = {"gateway": "tb-set-edge-gateway", "uplink": "tb-set-edge-uplink",
               "wireguard": "tb-set-edge-wireguard"}
        try:
            edge_spec.settings(spec, doc)
        except SpecError as e:
            key = (e.field or "").split(".")[0]
            at = ed.get({"uplink": "interface"}.get(key, key)) or first
            raise self.err(f"{cmd.get(key, 'tb-set-edge-params')}: {e.message}",
                           at[1] if at else None, at[2] if at else None) from None
        for o in node_objs:
            for i in range(int(self.val(o, "nforwards", 0))):
                a = o["attrs"][f"forward,{i},port"]
                try:
                    spec.forwards.append(edge_spec.forward(
                        self.names[o["h"]], a[0], self.val(o, f"forward,{i},proto", "tcp"),
                        self.val(o, f"forward,{i},listen"), self.src(a[1], a[2])))
                except SpecError as e:
                    raise self.err(f"tb-set-node-forward: {e.message}", a[1], a[2]) from None
        return spec

    def ip6(self, o: dict[str, Any], key: str) -> str | None:
        """An address of ``tb-set-ip6-*``, checked at the command's line."""
        a = o["attrs"].get(key)
        if a is None:
            return None
        try:
            return str(ipaddress.IPv6Address(a[0]))
        except ValueError:
            raise self.err(f"{a[0]!r} is not an IPv6 address", a[1], a[2]) from None

    def ipv6(self, v6: dict[str, Any]) -> dict[str, Any]:
        """``tb-set-ipv6 true|only|false`` and ``tb-set-ip6-prefix`` -> the IR's fields."""
        out: dict[str, Any] = {}
        if "mode" in v6:
            v, f, line = v6["mode"]
            words = {"true": "dual", "1": "dual", "dual": "dual", "on": "dual",
                     "only": "only", "false": "off", "0": "off", "off": "off"}
            if str(v).lower() not in words:
                raise self.err(f"tb-set-ipv6 {v!r}: write true (dual stack), only or false",
                               f, line)
            out["ipv6"] = words[str(v).lower()]
        if "prefix" in v6:
            v, f, line = v6["prefix"]
            if out.get("ipv6", "off") == "off":
                raise self.err("tb-set-ip6-prefix needs tb-set-ipv6 true or only", f, line)
            problem = ir.ipv6_prefix_problem(v)
            if problem:
                raise self.err(f"tb-set-ip6-prefix: {problem}", f, line)
            out["ipv6_prefix"] = str(ipaddress.IPv6Network(v))
            out["ipv6_source"] = ir.Source(f, line)
        return out

    def engine_threads(self, eng: dict[str, Any]) -> int:
        """tb-set-engine-threads N|auto -> the engine's thread count (0: not set)."""
        if "threads" not in eng:
            return 0
        v, f, line = eng["threads"]
        return units.parse_engine_threads(v, field="tb-set-engine-threads", file=self.fname(f),
                                    line=line or None)

    def engine_cores(self, eng: dict[str, Any]) -> int | None:
        """tb-set-engine-cores N -> the CPUs reserved for the engine (None: not set)."""
        if "cores" not in eng:
            return None
        v, f, line = eng["cores"]
        return units.parse_engine_cores(v, field="tb-set-engine-cores", file=self.fname(f),
                                        line=line or None)

    def swap(self, sw: dict[str, Any]) -> ir.SwapPolicy:
        """tb-set-idleswap / tb-set-maxduration / tb-set-noidleswap -> the swap policy."""
        def dur(key, what):
            if key not in sw:
                return None
            v, f, line = sw[key]
            return units.parse_duration(v, what, file=self.fname(f), line=line or None)
        reason = sw["noidle"][0] if "noidle" in sw else None
        if reason is not None and not reason.strip():
            raise self.err("tb-set-noidleswap needs a reason", sw["noidle"][1], sw["noidle"][2])
        idle = dur("idle", "tb-set-idleswap")
        if idle is not None and reason is not None:
            raise self.err("tb-set-idleswap and tb-set-noidleswap contradict each other",
                           sw["noidle"][1], sw["noidle"][2])
        return ir.SwapPolicy(idle_s=idle, max_duration_s=dur("maxduration", "tb-set-maxduration"),
                             no_idle_reason=reason)

    def raise_error(self, e: dict[str, Any]) -> None:
        msg = " ".join(e["message"].split())
        f, line = e.get("file") or None, e.get("line") or None
        if not f:
            f, line = locate_error(e.get("errorinfo", ""), e.get("procs", {}))
        if "out of memory" in msg or "unable to alloc" in msg:
            msg = f"the script used more than the parse memory limit of " \
                  f"{_memory_limit() >> 20} MB ({msg})"
        if msg.startswith("wrong # args: should be \"set ") and line:
            msg += " (a '#' comment after a command needs ';#')"
        raise self.err(msg, f, line)

    def name_of(self, h: str) -> str:
        if h == self.sim:
            return "ns"
        o = self.by_h.get(h)
        if o and o["class"] in ("Simplex",):
            return self.name_of(o["attrs"]["parent"][0])
        if o and o["class"] == "Queue":
            return self.name_of(o["attrs"]["dir"][0])
        return self.names.get(h, h)

    def hop(self, x: str) -> str:
        """A next hop: a node, an address, or ns-2's ``[$ns link $me $next]`` (-> next)."""
        o = self.by_name.get(x)
        if o and o["class"] == "Simplex":
            link = self.by_h[o["attrs"]["parent"][0]]
            if link["class"] == "Link":
                end = "b" if o["attrs"]["dir"][0] == "ab" else "a"
                return self.names[link["attrs"][end][0]]
        return self.ref(x)

    def ref(self, x: str) -> str:
        """A word that may name an object -> the IR name of that object."""
        o = self.by_name.get(x)
        return self.name_of(o["h"]) if o else x

    # -- objects
    def node(self, o: dict[str, Any]) -> ir.Node:
        routes = []
        for i in range(int(self.val(o, "nroutes", 0))):
            routes.append(ir.Route(dst=self.ref(self.val(o, f"route,{i},dst")),
                                   via=self.hop(self.val(o, f"route,{i},via"))))
        name, src = self.names[o["h"]], self.src(o["file"], o["line"])
        base = os.path.dirname(self.script)

        def at(key: str) -> ir.Source:
            a = o["attrs"][key]
            return self.src(a[1], a[2])

        tarfiles = tuple(normalize.tarfile_entry(self.val(o, f"tarfile,{i},dir"),
                                                 self.val(o, f"tarfile,{i},file"), base,
                                                 at(f"tarfile,{i},dir"))
                         for i in range(int(self.val(o, "ntarfiles", 0))))
        packages = tuple(normalize.rpm_package(self.val(o, f"rpm,{i}"), base, at(f"rpm,{i}"))
                         for i in range(int(self.val(o, "nrpms", 0))))
        os_name = self.val(o, "os")
        kind = self.val(o, "kind", "emulated")
        image, notes = normalize.node_image(name, os_name, None, src,
                                            setup=bool(tarfiles or packages),
                                            simulated=kind == "simulated", base_dir=base)
        if notes:
            cmd, key = ((f"tb-set-node-os {os_name}", "os") if os_name is not None else
                        ("tb-set-node-rpms", "rpm,0") if packages else
                        ("tb-set-node-tarfiles", "tarfile,0,dir"))
            a = o["attrs"][key]
            for n in notes:
                self.warn(f"{cmd}: {n}", a[1], a[2])
        return ir.Node(name=name, kind=kind,
                       os=os_name, hardware=self.val(o, "hardware"),
                       startcmd=self.val(o, "startcmd"), routes=tuple(routes),
                       fixed=self.val(o, "fixed"), source=src, image=image,
                       tarfiles=tarfiles, packages=packages, egress=self.egress(o),
                       wide_area=bool(int(self.val(o, "wide_area", 0))),
                       **self.resources(o))

    def egress(self, o: dict[str, Any]) -> bool:
        a = o["attrs"].get("egress")
        if a is None:
            return False
        try:
            return edge_spec.on(a[0], "egress", "egress")
        except SpecError as e:
            raise self.err(f"tb-set-node-egress: {e.message}", a[1], a[2]) from None

    def resources(self, o: dict[str, Any]) -> dict[str, Any]:
        """A node's ``tb-set-node-cpu/-memory/-pids/-cpus/-cpu-weight`` as typed fields,
        an error naming the command's line."""
        out = {"cpu_cores": self.conv(o, "cpu", units.parse_cores),
               "memory_bytes": self.conv(o, "memory", units.parse_memory),
               "pids": self.conv(o, "pids", units.parse_int, what="pids"),
               "cpus": self.conv(o, "cpus", units.parse_cpuset),
               "cpu_weight": self.conv(o, "cpu_weight", units.parse_int, what="cpu weight")}
        return {k: v for k, v in out.items() if v is not None}

    def queue_attrs(self, o: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """An object's queue attributes ``{pre}q,{name}``, grouped by ``pre`` (once:
        scanning every attribute per LAN member was quadratic in big LANs)."""
        if "_queues" not in o:
            groups: dict[str, dict[str, Any]] = {}
            for k, v in o["attrs"].items():
                i = k.find(",q,")
                if i >= 0:
                    groups.setdefault(k[:i + 1], {})[k[i + 3:]] = v
            o["_queues"] = groups
        return o["_queues"]

    def params(self, o: dict[str, Any], pre: str, *, bw: Any, delay: Any, loss: Any,
               qkind: str, what: str, default_loss: float = 0.0,
               extra: str | None = None) -> ir.LinkParams:
        """One direction's LinkParams from attributes ``{pre}bw`` etc. or defaults."""
        b = self.conv(o, pre + "bw", units.parse_bandwidth) if pre + "bw" in o["attrs"] else bw
        d = self.conv(o, pre + "delay", units.parse_delay) if pre + "delay" in o["attrs"] \
            else delay
        lo = self.conv(o, pre + "loss", units.parse_loss) if pre + "loss" in o["attrs"] \
            else loss
        q = ir.Queue(kind=qkind)
        qa = self.queue_attrs(o).get(pre, {})
        changes: dict[str, Any] = {}
        for key, (v, f, line) in sorted(qa.items()):
            fld, value = normalize.queue_field(key, v, self.src(f, line))
            if fld in ir.RED_FIELDS and qkind == "droptail":
                self.warn(f"queue parameter {key} on the DropTail queue of {what} is "
                          f"ignored (it applies to RED/GRED queues)", f, line)
                continue
            changes[fld] = value
        if changes:
            q = replace(q, **changes)
        p = ir.LinkParams(bandwidth_bps=b, delay_s=d, loss=lo, queue=q)
        return self.impairments(o, pre, p, extra=extra)

    # tb-set-*-VERB words -> the impairment words of wanlab/frontends/impair.py
    IMPAIR_VERBS = {"jitter": "jitter", "duplicate": "duplicate", "corrupt": "corrupt",
                    "reorder": "reorder", "lossmodel": "loss", "overhead": "overhead",
                    "cellsize": "cellsize", "cell_overhead": "cell_overhead", "trace": "trace",
                    "schedule": "schedule"}

    def impairments(self, o: dict[str, Any], pre: str, p: ir.LinkParams,
                    extra: str | None = None) -> ir.LinkParams:
        """``p`` with the impairments set on ``o`` under ``{pre}imp,`` (tb-set-link-VERB,
        ``$ns lossmodel``), after those under ``{extra}imp,`` (a LAN's own); errors at the
        line of the command."""
        ch: dict[str, Any] = {}
        for prefix in ([extra] if extra is not None else []) + [pre]:
            for verb, action in self.IMPAIR_VERBS.items():
                a = o["attrs"].get(f"{prefix}imp,{verb}")
                if a is None:
                    continue
                try:
                    base = os.path.dirname(a[1] if a[1] and os.path.isabs(a[1])
                                           else self.script)
                    if verb == "trace":
                        t = traces.from_words(["trace", *str(a[0]).split()], base)
                        got = {"bandwidth_bps": 0, "trace": traces.plain(t)}
                    elif verb == "schedule":
                        w = str(a[0]).split()
                        if not w or any(x not in ("linear", "loop") for x in w[1:]):
                            raise SpecError("takes CSV ?linear? ?loop?", field=verb)
                        got = {"schedule": schedules.spec(
                            {"csv": w[0], "interpolate": "linear" if "linear" in w else
                             "step", "loop": "loop" in w[1:]}, base, verb)}
                    else:
                        got = impair_spec.from_words(action, str(a[0]).split(), field=verb)
                except SpecError as e:
                    if e.file:
                        raise       # in the trace file
                    raise self.err(f"{verb} {a[0]}: {e.message}", a[1], a[2]) from None
                ch.update(got)
            em = o["attrs"].get(f"{prefix}imp,errmodel")
            if em is not None:
                ch.update(self.error_model(em))
        if not ch:
            return p
        try:
            out = ir.impair_params(ch, p)
            ir.check_impairments(out)
        except SpecError as e:
            raise self.err(e.message, o["file"], o["line"]) from None
        return out

    def error_model(self, a: list[Any]) -> dict[str, Any]:
        """The loss of an ns-2 ErrorModel put on a direction by ``$ns lossmodel``."""
        em = self.by_h[a[0]]
        rate, unit = em["attrs"].get("rate_"), em["attrs"].get("unit")
        if unit is not None and str(unit[0]).lower() not in ("pkt", "packet", "packets"):
            raise self.err(f"ErrorModel {em['name']}: unit {unit[0]!r} is not supported "
                           f"(frames are lost whole: use unit pkt)", unit[1], unit[2])
        if rate is None:
            self.warn(f"ErrorModel {em['name']}: no rate_ set; it loses nothing", a[1], a[2])
            return {}
        try:
            return {"loss": units.parse_loss(rate[0], field="rate_"), "loss_correlation": 0.0,
                    "loss_model": None}
        except SpecError as e:
            raise self.err(f"ErrorModel {em['name']}: {e.message}", rate[1], rate[2]) from None

    def link(self, o: dict[str, Any]) -> ir.Link:
        name = self.names[o["h"]]
        dirs = {}
        for d in ("ab", "ba"):
            dirs[d] = self.params(o, d + ",", bw=0, delay=0.0, loss=0.0,
                                  qkind=self.val(o, d + ",qkind", "droptail"),
                                  what=f"link {name}")
        if self.val(o, "simplex") == "1":
            self.warn(f"simplex-link {name}: wanlab links are duplex; the reverse direction "
                      f"gets the same parameters", o["file"], o["line"])
        cost = self.conv(o, "cost", units.parse_int, 1, what="cost") if "cost" in o["attrs"] \
            else 1
        return ir.Link(name=name, a=self.names[self.val(o, "a")],
                       b=self.names[self.val(o, "b")], ab=dirs["ab"], ba=dirs["ba"],
                       ip_a=self.val(o, "ip_a"), ip_b=self.val(o, "ip_b"),
                       netmask=self.val(o, "netmask"), cost=cost,
                       ip6_a=self.ip6(o, "ip6_a"), ip6_b=self.ip6(o, "ip6_b"),
                       source=self.src(o["file"], o["line"]))

    def lan(self, o: dict[str, Any]) -> ir.Lan:
        name = self.names[o["h"]]
        bw = self.conv(o, "bw", units.parse_bandwidth, 0)
        delay = self.conv(o, "delay", units.parse_delay, 0.0)
        loss = self.conv(o, "loss", units.parse_loss, 0.0)
        qkind = self.val(o, "qkind", "droptail")
        members = []
        for h in o["attrs"]["members"][0]:
            hd, hl = ir.lan_half(delay, loss)
            half = dict(bw=bw, delay=hd, loss=hl, qkind=qkind)
            members.append(ir.LanMember(
                node=self.names[h],
                to_lan=self.params(o, f"m,{h},to,", what=f"LAN {name}", **half),
                from_lan=self.params(o, f"m,{h},from,", what=f"LAN {name}", extra="",
                                     **half),
                ip=self.val(o, f"m,{h},ip"), ip6=self.ip6(o, f"m,{h},ip6")))
        pairs, gateway = self.lan_pairs(o, [m.node for m in members])
        pairs = self.pair_impairments(o, name, pairs)
        return ir.Lan(name=name, members=tuple(members), bandwidth_bps=bw, delay_s=delay,
                      loss=loss, netmask=self.val(o, "netmask"),
                      source=self.src(o["file"], o["line"]), pairs=pairs, gateway=gateway)

    def lan_pairs(self, o: dict[str, Any], nodes: list[str]
                  ) -> tuple[tuple[ir.LanPair, ...], str | None]:
        """The channels of ``tb-set-lan-matrix`` / ``tb-set-lan-gateway`` (wanlab/frontends/
        matrix.py), errors at the line of the command."""
        a = o["attrs"]
        given = [k for k in ("matrix,csv", *(f"matrix,{q},n" for q in lan_matrix.QUANTITIES),
                             "gw,node") if k in a]
        if not given:
            return (), None
        f, line = a[given[0]][1], a[given[0]][2]
        if "gw,node" in a and len(given) > 1:
            raise self.err("a LAN has either a matrix or a gateway, not both", f, line)
        if "gw,node" in a:
            p = ir.LinkParams(bandwidth_bps=self.conv(o, "gw,bw", units.parse_bandwidth, 0),
                              delay_s=self.conv(o, "gw,delay", units.parse_delay, 0.0),
                              loss=self.conv(o, "gw,loss", units.parse_loss, 0.0))
            gw = self.names[self.val(o, "gw,node")]
            try:
                return lan_matrix.gateway_pairs(nodes, gw, p, self.val(o, "gw,dir")), gw
            except SpecError as e:
                raise self.err(e.message, a["gw,node"][1], a["gw,node"][2]) from None
        if "matrix,csv" in a:
            if len(given) > 1:
                raise self.err("tb-set-lan-matrix: give csv or the matrices, not both", f, line)
            base = Path(f).parent if f else Path(self.script).parent
            return lan_matrix.read_csv(nodes, lan_matrix.csv_path(str(a["matrix,csv"][0]),
                                                                  base)), None
        rows: dict[str, list[list[str]]] = {}
        for q in lan_matrix.QUANTITIES:
            if f"matrix,{q},n" in a:
                n = int(self.val(o, f"matrix,{q},n"))
                rows[q] = [str(self.val(o, f"matrix,{q},{i}")).split() for i in range(n)]

        def located(msg: str, field: str | None = None, line_: int | None = None):
            q = (field or "").split(".")[1].split("[")[0] if field and "." in field else ""
            at = a.get(f"matrix,{q},n", a[given[0]])
            return self.err(f"tb-set-lan-matrix: {msg}", at[1], at[2])
        return lan_matrix.pairs_from_rows(nodes, rows, err=located), None

    def pair_impairments(self, o: dict[str, Any], lan: str, pairs: tuple[ir.LanPair, ...]
                         ) -> tuple[ir.LanPair, ...]:
        """``pairs`` with what ``tb-set-lan-pair-VERB`` set on single pairs (attributes
        ``p,SRC,DST,imp,VERB``), over their matrix cells."""
        given = sorted({tuple(k.split(",")[1:3]) for k in o["attrs"] if k.startswith("p,")})
        if not given:
            return pairs
        at = {(p.src, p.dst): i for i, p in enumerate(pairs)}
        out = list(pairs)
        for src, dst in given:
            key = (self.names[src], self.names[dst])
            if key not in at:
                first = next(v for k, v in o["attrs"].items()
                             if k.startswith(f"p,{src},{dst},"))
                raise self.err(f"tb-set-lan-pair: LAN {lan} has no matrix (give it one with "
                               f"tb-set-lan-matrix first)", first[1], first[2])
            p = out[at[key]]
            out[at[key]] = replace(p, params=self.impairments(o, f"p,{src},{dst},", p.params))
        return tuple(out)

    def program(self, o: dict[str, Any]) -> ir.Program:
        name = self.names[o["h"]]
        node = self.val(o, "var,node")
        if not node:
            raise self.err(f"Program {name!r} has no node (set it with "
                           f"'${name} set node $n')", o["file"], o["line"])
        cmd = self.val(o, "var,command")
        if cmd is None:
            raise self.err(f"Program {name!r} has no command (set it with "
                           f"'${name} set command \"...\"')", o["file"], o["line"])
        timeout = self.conv(o, "var,timeout", units.parse_delay, None, what="timeout") \
            if "var,timeout" in o["attrs"] else None
        eec = self.conv(o, "var,expected-exit-code", units.parse_int, None,
                        what="expected-exit-code") \
            if "var,expected-exit-code" in o["attrs"] else None
        return ir.Program(name=name, node=self.names[node], command=cmd,
                          dir=self.val(o, "var,dir"), timeout_s=timeout,
                          expected_exit_code=eec, source=self.src(o["file"], o["line"]))

    def agent(self, o: dict[str, Any]) -> ir.Agent:
        node = self.val(o, "node")
        attached = self.val(o, "attached")
        if node is None and attached:
            node = self.by_h[attached]["attrs"].get("node", [None])[0]
        params = [(k[len("param,"):], v[0]) for k, v in sorted(o["attrs"].items())
                  if k.startswith("param,")]
        where = {k[len("param,"):]: self.src(v[1], v[2]) for k, v in o["attrs"].items()
                 if k.startswith("param,")}
        peer = self.val(o, "peer")
        a, notes = normalize.agent(self.names[o["h"]], self.val(o, "kind"),
                                   node=self.names[node] if node else None,
                                   attached=self.names[attached] if attached else None,
                                   peer=self.names[peer] if peer else None,
                                   params=params, source=self.src(o["file"], o["line"]),
                                   sources=where)
        for n in notes:
            self.warn(n, o["file"], o["line"])
        return a

    # -- events
    def event(self, e: dict[str, Any], base: float = 0.0, depth: int = 0) -> list[ir.Event]:
        f, line = e["file"], e["line"]
        t = base + units.parse_time(e["time"], file=self.fname(f), line=line or None)
        words = e.get("words")
        if words is None:
            words = _split_words(e["cmd"])
        if not words:
            self.warn(f"event at {e['time']} is empty; ignored", f, line)
            return []
        o = self.by_name.get(words[0])
        if o is None:
            self.warn(f"event {e['cmd']!r} at {e['time']} does not name a wanlab object "
                      f"(Tcl procs cannot run at experiment time); ignored", f, line)
            return []
        target = o["h"]
        if len(words) < 2:
            self.warn(f"event {e['cmd']!r} has no action; ignored", f, line)
            return []
        action, args = words[1], tuple(self.ref(w) for w in words[2:])
        if o["class"] in _GROUPS and depth < 8:
            return self.expand(o, t, action, args, e, depth)
        dir, member = self.direction_of(target)
        return [normalize.event(self.exp, t, self.name_of(target), action, args,
                                self.src(f, line), dir=dir, member=member, kinds=self.kinds)]

    def direction_of(self, h: str) -> tuple[str | None, str | None]:
        """The direction an ns simplex link (or its queue) selects: (dir, member)."""
        o = self.by_h[h]
        if o["class"] == "Queue":
            return self.direction_of(o["attrs"]["dir"][0])
        if o["class"] != "Simplex":
            return None, None
        d = o["attrs"]["dir"][0]
        if d.startswith("m,"):                   # [$ns lanlink $lan $node]: member -> LAN
            return "to_lan", self.names[d.split(",")[1]]
        return d, None

    def timelines(self, objs) -> tuple[list[ir.Timeline], list[ir.Group]]:
        """Every event timeline, sequence and group, typed and kept in the IR, so that
        tevc can start one the script never starts (or start it again)."""
        tls, groups = [], []
        for o in objs:
            if o["class"] not in _GROUPS:
                continue
            name, src = self.names[o["h"]], self.src(o["file"], o["line"])
            items = o["attrs"].get("items", [[]])[0]
            if o["class"] == "EventGroup":
                groups.append(ir.Group(name, tuple(self.name_of(self.by_name[x]["h"])
                                                   for x in items if x in self.by_name), src))
                continue
            evs: list[ir.Event] = []
            for rel, cmd in items:
                evs.extend(self.event({"time": rel, "cmd": cmd, "words": _split_words(cmd),
                                       "file": o["file"], "line": o["line"]}, depth=1))
            kind = "sequence" if o["class"] == "EventSequence" else "timeline"
            tls.append(ir.Timeline(name, kind, tuple(evs), src))
        return tls, groups

    def expand(self, o, t, action, args, e, depth) -> list[ir.Event]:
        items = o["attrs"].get("items", [[]])[0]
        out: list[ir.Event] = []
        if o["class"] == "EventGroup":
            for x in items:
                if x in self.by_name:
                    h = self.by_name[x]["h"]
                    dir, member = self.direction_of(h)
                    out.append(normalize.event(self.exp, t, self.name_of(h), action, args,
                                               self.src(e["file"], e["line"]), dir=dir,
                                               member=member, kinds=self.kinds))
            return out
        if action not in ("start", "run"):
            self.warn(f"{o['class']} action {action!r} is not supported; ignored",
                      e["file"], e["line"])
            return out
        for rel, cmd in items:
            sub = {"time": rel, "cmd": cmd, "words": _split_words(cmd), "file": e["file"],
                   "line": e["line"]}
            out.extend(self.event(sub, base=t, depth=depth + 1))
        if o["class"] == "EventSequence":
            # one key per started sequence: its steps run one after another at run time
            key = f"{self.name_of(o['h'])}@{t:g}"
            out = [replace(ev, sequence=key, step=i) for i, ev in enumerate(out)]
        return out


BGP_FIRST_AS = 4_200_000_000      # the private 4-byte AS numbers (RFC 6996)


def _bgp_everywhere(nodes, links, lans, edge) -> tuple[tuple[tuple[str, int], ...],
                                                       tuple[ir.BgpSession, ...]]:
    """``$ns rtproto BGP``: ns has no words for AS numbers or sessions, so every node is
    its own AS (a private number, in declaration order) with an eBGP session to each
    direct neighbour (on a link or a LAN; not on the edge LAN, which carries no
    experiment traffic)."""
    asns = tuple((n.name, BGP_FIRST_AS + i) for i, n in enumerate(nodes))
    pairs: list[tuple[str, str]] = [(l.a, l.b) for l in links]
    edge_lan = edge.lan if edge else None
    for lan in lans:
        if lan.name == edge_lan:
            continue
        ms = [m.node for m in lan.members]
        pairs += [(x, y) for i, x in enumerate(ms) for y in ms[i + 1:]]
    seen: set[frozenset[str]] = set()
    sessions = []
    for a, b in pairs:
        if a != b and frozenset((a, b)) not in seen:
            seen.add(frozenset((a, b)))
            sessions.append(ir.BgpSession(a, b))
    return asns, tuple(sessions)


def _split_words(cmd: str) -> list[str] | None:
    """Split a simple event string into words (Tcl list syntax, best effort)."""
    try:
        import shlex
        return shlex.split(cmd.replace("{", '"').replace("}", '"'))
    except ValueError:
        return None


def _coalesce(ws: list[tuple[str, str | None, int | None]]) -> list[str]:
    """Format warnings 'file:line: msg', folding repeats of the same message."""
    counts: dict[str, int] = {}
    first: dict[str, str] = {}
    for msg, f, line in ws:
        if msg not in counts:
            where = f"{f}:{line}: " if f and line else (f"{f}: " if f else "")
            first[msg] = where + msg
            counts[msg] = 0
        counts[msg] += 1
    return [first[m] + (f" (and {counts[m] - 1} more times)" if counts[m] > 1 else "")
            for m in first]
