"""The Python front end: build an experiment in a few lines, Mininet-style.

::

    from wanlab.frontends.builder import ExperimentBuilder
    b = ExperimentBuilder("figure2", seed=1)
    a, r, c = b.node("nodeA"), b.node("router"), b.node("nodeC")
    b.link(a, r, bandwidth="10Mb", delay="10ms", loss=0.01, name="link0")
    b.lan([a, r, c], bandwidth="100Mb", delay="2ms")
    b.at(12, "link0", "down")
    exp = b.build()          # a validated wanlab.model.ir.Experiment

Methods return the new object's name (a ``str``), which is what the other
methods take.  Values take the same units as ns-2 and YAML
(:mod:`wanlab.frontends.units`): ``"10Mb"`` or a number of bit/s, ``"20ms"`` or a
number of seconds, loss as a probability.  Semantics are those of the ns-2
front end (docs/ns-reference.md): a LAN's delay D is member-to-member, so each
member's half is D/2 and its loss L is split as 1 - sqrt(1 - L) per half.

Every keyword is explicit (no ``**params``), so a typo is a ``TypeError`` at
the call, and a bad value is a :class:`~wanlab.errors.SpecError` naming the
argument.  Each object records the file and line of the call that declared it.
A ``.py`` experiment file passed to :func:`wanlab.frontends.load` must define a
module-level ``experiment`` (an ``Experiment`` or an ``ExperimentBuilder``).
"""

from __future__ import annotations

import difflib
import ipaddress
import os as _os
import sys
from dataclasses import replace
from typing import Any, Iterable, Mapping

from wanlab.errors import SpecError
from wanlab.frontends import edge as edge_spec
from wanlab.frontends import impair as impair_spec
from wanlab.frontends import matrix as lan_matrix
from wanlab.frontends import normalize, schedules, traces, units
from wanlab.model import ir

QUEUE_KEYS = ("kind", "limit", "in_bytes", "thresh", "maxthresh", "q_weight", "linterm",
              "gentle", "mean_pktsize")
PARAM_KEYS = ("bandwidth", "delay", "loss", "queue", *impair_spec.KEYS, "schedule")
# a latency matrix pair's own settings (matrix.pairs entries): a direction's, no schedule
PAIR_KEYS = ("bandwidth", "delay", "loss", "queue", *impair_spec.KEYS)
_RTPROTO = {"static": "static", "manual": "manual", "session": "session", "ospf": "ospf",
            "bgp": "bgp"}

QueueSpec = "str | Mapping[str, Any] | ir.Queue | None"

# Template parameter values for builders made without ``params`` (set by the Python front
# end's child for a ``.py`` spec given ``-p NAME=VALUE``).
_OVERRIDES: dict[str, str] = {}
# The folder of the ``.py`` spec being run (set by its child): a builder's trace and
# schedule files are relative to it, as a YAML or ns file's are to theirs.
_SPEC_DIR: str | None = None


def _caller_source(depth: int = 2) -> ir.Source:
    f = sys._getframe(depth)
    while f is not None and f.f_globals.get("__name__") == __name__:
        f = f.f_back
    if f is None:
        return ir.Source()
    return ir.Source(f.f_code.co_filename, f.f_lineno)


def unknown_key(key: str, allowed: Iterable[str]) -> str:
    """'unknown key (did you mean X?)' message."""
    close = difflib.get_close_matches(key, list(allowed), n=1)
    return "unknown key" + (f" (did you mean {close[0]}?)" if close else
                            f"; allowed keys are {', '.join(allowed)}")


def _opt_str(x: Any) -> str | None:
    return None if x is None else str(x)


def make_queue(spec: Any, base: ir.Queue | None = None, field: str = "queue") -> ir.Queue:
    """A Queue from a kind string (``"RED"``), a mapping of Queue fields, or a Queue."""
    q = base or ir.Queue()
    if spec is None:
        return q
    if isinstance(spec, ir.Queue):
        return spec
    if isinstance(spec, str):
        return replace(q, kind=_queue_kind(spec, field))
    if not isinstance(spec, Mapping):
        raise SpecError(f"queue must be a kind (DropTail, RED, GRED) or a mapping, "
                        f"not {spec!r}", field=field)
    ch: dict[str, Any] = {}
    for k, v in spec.items():
        f = f"{field}.{k}"
        if k not in QUEUE_KEYS:
            raise SpecError(unknown_key(k, QUEUE_KEYS), field=f)
        if k == "kind":
            ch[k] = _queue_kind(v, f)
        elif k in ("limit", "mean_pktsize"):
            ch[k] = None if v is None and k == "limit" else units.parse_int(v, k, field=f)
        elif k in ("in_bytes", "gentle"):
            ch[k] = units.parse_bool(v, k, field=f)
        else:
            ch[k] = units.parse_float(v, k, field=f)
    return replace(q, **ch)


def _queue_kind(v: Any, field: str) -> str:
    k = str(v).lower().removeprefix("queue/")
    if k not in ir.QUEUE_KINDS:
        raise SpecError(f"queue {v!r} unknown; supported queues are DropTail, RED, GRED",
                        field=field)
    return k


class ExperimentBuilder:
    """Collects nodes, links, LANs, programs, agents and events; :meth:`build` validates."""

    def __init__(self, name: str, *, seed: int = 1, routing: str = "static",
                 params: Mapping[str, Any] | None = None):
        """``params``: values for template parameters (:meth:`parameter`), by name; a name
        no :meth:`parameter` call defines is an error at :meth:`build`."""
        self.name = name
        self.seed = seed
        self._overrides = {str(k): str(v) for k, v in
                           (params if params is not None else _OVERRIDES).items()}
        self._parameters: dict[str, ir.Parameter] = {}
        self._swap = ir.SwapPolicy()
        self._engine_threads = 0
        self._engine_cores: int | None = None
        self.routing(routing)
        self._nodes: dict[str, dict[str, Any]] = {}
        self._links: dict[str, dict[str, Any]] = {}
        self._lans: dict[str, dict[str, Any]] = {}
        self._programs: list[ir.Program] = []
        self._agents: dict[str, dict[str, Any]] = {}
        self._events: list[tuple[float, str, str, tuple[str, ...], ir.Source]] = []
        self._warnings: list[str] = []
        self._counters: dict[str, int] = {}
        self._edge = edge_spec.EdgeSpec()
        # the folder trace files are relative to (None: the working directory)
        self.base_dir: str | None = _SPEC_DIR

    # -- template parameters and the swap policy ------------------------------
    def parameter(self, name: str, default: Any, description: str = "") -> str:
        """Define a template parameter (Emulab's ``define-template-parameter``); returns its
        value for this instance: the override given for it, else ``default``, as text."""
        ir.check_parameter_name(name)
        if name in self._parameters:
            raise SpecError(f"template parameter {name!r} is defined twice", field=name)
        value = self._overrides.get(name, str(default))
        self._parameters[name] = ir.Parameter(name=name, default=str(default), value=value,
                                              description=str(description))
        return value

    def swap_policy(self, *, idle: Any = None, max_duration: Any = None,
                    no_idle_reason: str | None = None) -> None:
        """Swap out after ``idle`` without activity, or ``max_duration`` after swap-in
        (seconds, or ``"30s"``, ``"2h"``); ``no_idle_reason``: why idle swap is off."""
        if idle is not None and no_idle_reason is not None:
            raise SpecError("idle swap and no idle swap contradict each other", field="swap")
        self._swap = ir.SwapPolicy(
            idle_s=None if idle is None else units.parse_duration(idle, "idle swap",
                                                                  field="idle_swap"),
            max_duration_s=None if max_duration is None else units.parse_duration(
                max_duration, "maximum duration", field="max_duration"),
            no_idle_reason=no_idle_reason)

    def engine(self, *, threads: Any = None, cores: Any = None) -> None:
        """The real-time engine of this experiment: ``threads`` partitions, each on its own
        pinned thread (1 to 64, or ``"auto"``: one per core, at most one per link or LAN;
        default 1, see docs/architecture.md); ``cores`` CPUs reserved for it, which no node
        runs on (0: none; default: one per thread when the machine has as many more for the
        nodes, see docs/resources.md)."""
        if threads is not None:
            self._engine_threads = units.parse_engine_threads(threads, field="engine.threads")
        if cores is not None:
            self._engine_cores = units.parse_engine_cores(cores, field="engine.cores")

    # -- helpers -----------------------------------------------------------
    def _is_taken(self, name: str) -> bool:
        return (name in self._nodes or name in self._links or name in self._lans
                or name in self._agents or any(p.name == name for p in self._programs))

    def _name(self, name: str | None, prefix: str) -> str:
        if name is not None:
            if not isinstance(name, str):
                raise SpecError(f"name {name!r} must be a string", field="name")
            return name
        i = self._counters.get(prefix, 0)
        while self._is_taken(f"{prefix}{i}"):
            i += 1
        self._counters[prefix] = i + 1
        return f"{prefix}{i}"

    def _warn(self, msg: str, src: ir.Source) -> None:
        where = f"{src.file}:{src.line}: " if src.file and src.line else \
            (f"{src.file}: " if src.file else "")
        self._warnings.append(where + msg)

    def _node_ref(self, n: Any, field: str) -> str:
        if not isinstance(n, str) or n not in self._nodes:
            raise SpecError(f"{n!r} is not a node of this experiment (declare it with "
                            f"node() first)", field=field)
        return n

    def _params(self, bandwidth: Any, delay: Any, loss: Any, queue: Any,
                base: ir.LinkParams | None = None, field: str = "",
                impair: Mapping[str, Any] | None = None) -> ir.LinkParams:
        """Parameters from the front ends' values (``impair``: netem's keys,
        :mod:`wanlab.frontends.impair`; ``bandwidth`` a rate or a capacity trace
        ``{"trace": FILE, "offset", "loop"}``, relative to :attr:`base_dir`) over ``base``."""
        p = base or ir.LinkParams()
        pre = field + "." if field else ""
        ch: dict[str, Any] = {}
        if isinstance(bandwidth, ir.BandwidthTrace):
            ch.update(bandwidth_bps=0, trace=bandwidth)
        elif isinstance(bandwidth, Mapping):
            ch.update(bandwidth_bps=0, trace=traces.spec(bandwidth, self.base_dir,
                                                         pre + "bandwidth"))
        elif bandwidth is not None:
            ch["bandwidth_bps"] = units.parse_bandwidth(bandwidth, field=pre + "bandwidth")
            ch["trace"] = None
        if delay is not None:
            ch["delay_s"] = units.parse_delay(delay, field=pre + "delay")
        if loss is not None:
            ch.update(impair_spec.loss(loss, field=pre + "loss"))
        if queue is not None:
            ch["queue"] = make_queue(queue, p.queue, pre + "queue")
        ch.update(impair_spec.fields(impair or {}, field))
        if (impair or {}).get("schedule") is not None:
            ch["schedule"] = schedules.spec(impair["schedule"], self.base_dir, pre + "schedule")
        p = replace(p, **ch)
        ir.check_impairments(p, field)
        return p

    # -- declarations ------------------------------------------------------
    def routing(self, proto: str) -> None:
        """Routing: static (default), manual, session or ospf (ns-2 ``rtproto``)."""
        r = _RTPROTO.get(str(proto).lower())
        if r is None:
            raise SpecError(f"routing {proto!r} unknown; supported are static, manual, "
                            f"session, ospf, bgp", field="routing")
        self.rtproto = r

    def ipv6(self, mode: Any = True, prefix: str | None = None,
             source: ir.Source | None = None) -> None:
        """Address families: ``True`` (dual stack: every interface also gets an IPv6 address),
        ``"only"`` (IPv6 only) or ``False`` (IPv4 only, the default); ``prefix``: the IPv6
        prefix (/64 or shorter) the networks' /64s are taken from (default: a unique-local
        /48 derived from the experiment's name)."""
        words = {True: "dual", False: "off", "true": "dual", "false": "off", "dual": "dual",
                 "on": "dual", "off": "off", "only": "only", "1": "dual", "0": "off"}
        key = mode.lower() if isinstance(mode, str) else mode
        if not isinstance(key, (str, bool)) or key not in words:
            raise SpecError(f"ipv6 {mode!r} unknown; write true (dual stack), only or false")
        self._ipv6 = words[key]
        if prefix is not None:
            if self._ipv6 == "off":
                raise SpecError("an IPv6 prefix is given but the experiment has no IPv6 "
                                "(ipv6: true or only)")
            self.ipv6_prefix(prefix, source=source or _caller_source())

    def ipv6_prefix(self, prefix: str, source: ir.Source | None = None) -> None:
        """The IPv6 prefix the networks' /64s are taken from (/64 or shorter)."""
        problem = ir.ipv6_prefix_problem(str(prefix))
        if problem:
            raise SpecError(problem)
        self._ipv6_prefix = str(ipaddress.IPv6Network(str(prefix)))
        self._ipv6_source = source or _caller_source()

    def bgp_as(self, node: str, asn: int) -> None:
        """Give ``node`` a BGP AS number (it then runs bgpd)."""
        self._asns = {**getattr(self, "_asns", {}), node: int(asn)}

    def bgp_session(self, a: str, b: str) -> None:
        """A BGP session between neighbours ``a`` and ``b`` (eBGP if their ASes differ)."""
        self._bgp = [*getattr(self, "_bgp", []), ir.BgpSession(a, b)]

    def ospf_timers(self, hello: int, dead: int) -> None:
        """OSPF hello and dead intervals in seconds, for routing session/ospf (default 1/4)."""
        self.ospf_hello_s, self.ospf_dead_s = int(hello), int(dead)

    def node(self, name: str | None = None, *, kind: str = "emulated", os: str | None = None,
             hardware: str | None = None, startcmd: str | None = None,
             image: str | None = None, tarfiles: Any = (), packages: Any = (),
             external: str | None = None, cpu: Any = None, memory: Any = None,
             pids: Any = None, cpus: Any = None, cpu_weight: Any = None,
             egress: Any = False, wide_area: bool = False,
             copies: Any = (), env: Any = None, entrypoint: Any = None, cmd: Any = None,
             user: str | None = None, source: ir.Source | None = None) -> str:
        """Declare a node; returns its name. ``image``: its own root file system (a
        ``wanlab image``; ``os`` maps an Emulab OS name to one); ``tarfiles``: pairs
        (folder in its root, tarball) unpacked there; ``packages``: Debian packages (or
        .deb files) installed in its root; ``external``: a network interface of this machine
        bridged into the node (``wanlab bridge``, docs/bridge.md).

        Resources (docs/resources.md): ``cpu`` a CPU time limit in cores (0.25), ``memory``
        a memory limit (``"64MB"``, binary prefixes), ``pids`` the most processes at once,
        ``cpus`` the CPUs it is pinned to (``"0"``, ``"0-1"``), ``cpu_weight`` its share
        against other nodes (1..10000, default 100).

        ``egress``: a route out of the experiment through its edge gateway (docs/edge.md).
        ``wide_area``: on a cluster the node runs on a wide-area machine chosen by
        wanassign, and its links to other wide-area nodes are wanlinks, requests for the
        real path's delay and bandwidth (docs/cluster.md).

        ``entrypoint``, ``cmd`` (argument lists) and ``user`` override an OCI image's own by
        docker's rules (docs/oci-images.md)."""
        src = source or _caller_source()
        if not isinstance(wide_area, bool):
            raise SpecError(f"node {name}: wide_area is true or false, not {wide_area!r}",
                            src.file, src.line, "wide_area")
        name = self._name(name, "node")
        if name in self._nodes:
            raise SpecError(f"node {name!r} is declared twice", src.file, src.line)
        if hardware is not None:
            self._warn(f"node {name}: hardware {hardware}: recorded; ignored: all nodes run "
                       f"as namespaces on this host", src)
        base = _os.path.dirname(_os.path.abspath(src.file)) if src.file else None
        if isinstance(tarfiles, (str, bytes)) or isinstance(packages, (str, bytes)):
            raise SpecError(f"node {name}: tarfiles and packages are lists", src.file,
                            src.line)
        tars = []
        for t in tarfiles or ():
            if isinstance(t, dict):
                t = (t.get("dir"), t.get("file"))
            if not isinstance(t, (list, tuple)) or len(t) != 2 or not all(
                    isinstance(x, str) for x in t):
                raise SpecError(f"node {name}: each tarfile is a folder and a tarball: "
                                f"{t!r}", src.file, src.line, "tarfiles")
            tars.append(normalize.tarfile_entry(t[0], t[1], base, src))
        for dst, what in copies or ():     # a file or folder copied to ``dst``
            tars.append(normalize.copy_entry(dst, what, src))
        pkgs = [normalize.rpm_package(p, base, src) for p in packages or ()]
        img, notes = normalize.node_image(name, os, image, src, setup=bool(tars or pkgs),
                                          simulated=kind == "simulated", base_dir=base)
        for n in notes:
            self._warn(f"os {os}: {n}" if os is not None else n, src)
        try:
            res = _resources(cpu, memory, pids, cpus, cpu_weight)
        except SpecError as e:
            raise SpecError(e.message, src.file, src.line, e.field) from None
        pairs = tuple((str(k), str(v)) for k, v in (env.items() if isinstance(env, Mapping)
                                                    else env or ()))
        self._nodes[name] = dict(name=name, kind=kind, os=os, hardware=hardware, env=pairs,
                                 startcmd=startcmd, routes=[], source=src, image=img,
                                 tarfiles=tuple(tars), packages=tuple(pkgs),
                                 external=_opt_str(external), wide_area=wide_area,
                                 entrypoint=None if entrypoint is None else tuple(
                                     str(x) for x in entrypoint),
                                 cmd=None if cmd is None else tuple(str(x) for x in cmd),
                                 user=None if user is None else str(user), **res)
        try:
            if egress is not None and edge_spec.on(egress, "egress", "egress"):
                self._nodes[name]["egress"] = True
        except SpecError as e:
            raise SpecError(e.message, src.file, src.line, e.field) from None
        return name

    def forward(self, node: str, port: Any, *, proto: Any = "tcp", listen: Any = None,
                source: ir.Source | None = None) -> None:
        """An ingress port forward: outside clients reach ``port`` (tcp or udp) of ``node``
        at port ``listen`` (default: ``port``) of the edge gateway (docs/edge.md)."""
        src = source or _caller_source()
        try:
            f = edge_spec.forward(self._node_ref(node, "node"), port, proto, listen, src)
        except SpecError as e:
            raise SpecError(e.message, src.file, src.line, e.field) from None
        self._edge.forwards.append(f)

    def edge(self, *, gateway: str | None = None, uplink: Mapping[str, Any] | None = None,
             bandwidth: Any = None, delay: Any = None, loss: Any = None,
             wireguard: Any = None, source: ir.Source | None = None) -> None:
        """The edge's settings (docs/edge.md): the gateway's name (default ``edge``), its
        ``uplink`` (``{"interface", "address", "via"}``; default: a veth into this machine),
        the shaping of the edge LAN (node to gateway) and a WireGuard endpoint
        (``wireguard=True`` or a port)."""
        src = source or _caller_source()
        doc = {k: v for k, v in (("gateway", gateway), ("uplink", uplink),
                                 ("bandwidth", bandwidth), ("delay", delay), ("loss", loss),
                                 ("wireguard", wireguard)) if v is not None}
        try:
            edge_spec.settings(self._edge, doc)
        except SpecError as e:
            raise SpecError(e.message, src.file, src.line, e.field) from None
        self._edge.source = src

    def route(self, node: str, dst: str, via: str) -> None:
        """A manual route on ``node`` (ns ``$node add-route DST NEXTHOP``)."""
        self._nodes[self._node_ref(node, "node")]["routes"].append(ir.Route(str(dst), str(via)))

    def link(self, a: str, b: str, *, bandwidth: Any = 0, delay: Any = 0, loss: Any = 0,
             queue: Any = None, name: str | None = None, cost: int = 1,
             ip_a: str | None = None, ip_b: str | None = None, netmask: str | None = None,
             ip6_a: str | None = None, ip6_b: str | None = None,
             ifnames: tuple[str | None, str | None] = (None, None),
             jitter: Any = None, duplicate: Any = None, corrupt: Any = None,
             reorder: Any = None, overhead: Any = None, cellsize: Any = None,
             cell_overhead: Any = None, schedule: Any = None,
             source: ir.Source | None = None) -> str:
        """A duplex link with the same shaping both ways; returns its name. ``ip_a``/``ip_b``
        (``ip6_a``/``ip6_b``): the ends' IPv4 (IPv6) addresses, else the planner's;
        ``ifnames``: the interface names at ``a`` and ``b`` (default: the next ethN).
        ``loss`` is a probability or a loss model; ``jitter``, ``duplicate``, ``corrupt``,
        ``reorder``, ``overhead``, ``cellsize``, ``cell_overhead`` are netem's impairments
        (docs/impairments.md); ``schedule`` (``{"csv": FILE, "interpolate", "loop"}``)
        makes delay, bandwidth and loss follow a time series."""
        src = source or _caller_source()
        a, b = self._node_ref(a, "a"), self._node_ref(b, "b")
        name = self._name(name, "link")
        p = self._params(bandwidth, delay, loss, queue, impair=dict(
            jitter=jitter, duplicate=duplicate, corrupt=corrupt, reorder=reorder,
            overhead=overhead, cellsize=cellsize, cell_overhead=cell_overhead,
            schedule=schedule))
        self._links[name] = dict(name=name, a=a, b=b, ab=p, ba=p, ip_a=_opt_str(ip_a),
                                 ip_b=_opt_str(ip_b), netmask=_opt_str(netmask),
                                 ip6_a=_opt_str(ip6_a), ip6_b=_opt_str(ip6_b),
                                 cost=units.parse_int(cost, "cost", field="cost"),
                                 ifnames=tuple(_opt_str(x) for x in ifnames), source=src)
        return name

    def direction(self, link: str, src: str, *, bandwidth: Any = None, delay: Any = None,
                  loss: Any = None, queue: Any = None, jitter: Any = None,
                  duplicate: Any = None, corrupt: Any = None, reorder: Any = None,
                  overhead: Any = None, cellsize: Any = None,
                  cell_overhead: Any = None, schedule: Any = None,
                  ifname: str | None = None) -> None:
        """Change the shaping of one direction of ``link``, from node ``src``
        (ns ``tb-set-link-simplex-params``, ``[[$ns link $src $dst] queue]``); ``ifname``,
        the sending interface, tells the directions of a link from a node to itself apart."""
        if link not in self._links:
            raise SpecError(f"{link!r} is not a link of this experiment", field="link")
        l = self._links[link]
        if src not in (l["a"], l["b"]):
            raise SpecError(f"{src!r} is not an end of link {link!r}", field="src")
        if l["a"] == l["b"]:
            if ifname is None or ifname not in l["ifnames"]:
                raise SpecError(f"link {link!r} joins {src!r} to itself: name the sending "
                                f"interface ({' or '.join(map(str, l['ifnames']))})",
                                field="src")
            d = "ab" if ifname == l["ifnames"][0] else "ba"
        else:
            d = "ab" if src == l["a"] else "ba"
        l[d] = self._params(bandwidth, delay, loss, queue, base=l[d], impair=dict(
            jitter=jitter, duplicate=duplicate, corrupt=corrupt, reorder=reorder,
            overhead=overhead, cellsize=cellsize, cell_overhead=cell_overhead,
            schedule=schedule))

    def lan(self, nodes: Iterable[str], *, bandwidth: Any = 0, delay: Any = 0, loss: Any = 0,
            queue: Any = None, name: str | None = None, netmask: str | None = None,
            cost: int = 1, matrix: Mapping[str, Any] | None = None,
            gateway: Mapping[str, Any] | None = None, jitter: Any = None,
            duplicate: Any = None, corrupt: Any = None, reorder: Any = None,
            overhead: Any = None, cellsize: Any = None, cell_overhead: Any = None,
            source: ir.Source | None = None) -> str:
        """A switched LAN; ``delay`` is member-to-member (each half D/2); netem's
        impairments (``jitter``..., and a loss model or correlated ``loss``) act once between
        two members: on the half from the switch to the receiving member. ``matrix``
        (``{"delay": [[...]], "bandwidth": ..., "loss": ...}`` or ``{"csv": FILE}``) gives
        every ordered pair its own channel, ``gateway`` (``{"node": g, "delay": ...}``)
        shapes only frames to the gateway: see :meth:`lan_matrix`, :meth:`lan_gateway`."""
        src = source or _caller_source()
        members = [self._node_ref(n, f"nodes[{i}]") for i, n in enumerate(nodes)]
        name = self._name(name, "lan")
        imp = impair_spec.fields(dict(
            jitter=jitter, duplicate=duplicate, corrupt=corrupt, reorder=reorder,
            overhead=overhead, cellsize=cellsize, cell_overhead=cell_overhead))
        lf = impair_spec.loss(loss, field="loss")
        if lf["loss_model"] is not None or lf["loss_correlation"]:
            imp.update(lf)          # a model is not split over the halves: the second has it
            lf = {"loss": 0.0}
        ir.check_impairments(ir.LinkParams(**imp))
        self._lans[name] = dict(
            name=name, members={m: {"to_lan": {}, "from_lan": {}, "ip": None, "ip6": None,
                                    "ifname": None} for m in members},
            order=members, impair=imp,
            bandwidth=units.parse_bandwidth(bandwidth, field="bandwidth"),
            delay=units.parse_delay(delay, field="delay"),
            loss=lf["loss"],
            queue=make_queue(queue), netmask=_opt_str(netmask),
            cost=units.parse_int(cost, "cost", field="cost"), source=src,
            pairs=(), gateway=None)
        if matrix is not None:
            m = dict(matrix)
            self.lan_matrix(name, csv=m.pop("csv", None), pairs=m.pop("pairs", None), **{
                k: m.pop(k) for k in list(m) if k in lan_matrix.QUANTITIES}, _extra=m)
        if gateway is not None:
            g = dict(gateway)
            if "node" not in g:
                raise SpecError("gateway needs a node", field="gateway.node")
            for k in g:
                if k not in ("node", "delay", "bandwidth", "loss", "queue", "direction"):
                    raise SpecError(unknown_key(k, ("node", "delay", "bandwidth", "loss",
                                                    "queue", "direction")),
                                    field=f"gateway.{k}")
            self.lan_gateway(name, g["node"], delay=g.get("delay", 0),
                             bandwidth=g.get("bandwidth", 0), loss=g.get("loss", 0),
                             queue=g.get("queue"), direction=g.get("direction", "to"))
        return name

    def lan_matrix(self, lan: str, *, delay: Any = None, bandwidth: Any = None,
                   loss: Any = None, csv: str | None = None, base_dir: Any = None,
                   jitter: Any = None, duplicate: Any = None, corrupt: Any = None,
                   pairs: Iterable[Mapping[str, Any]] | None = None,
                   _extra: Mapping[str, Any] | None = None) -> None:
        """Per-pair channels on ``lan`` (a latency matrix, hitbox's point-to-point mode):
        ``delay`` (required), ``bandwidth``, ``loss``, ``jitter``, ``duplicate`` and
        ``corrupt`` are N x N lists of rows, rows and
        columns in the LAN's node order, 0 on the diagonal; or ``csv``, a matrix file
        (:mod:`wanlab.frontends.matrix`), relative to ``base_dir`` if not absolute.
        ``pairs``: ``{"from": a, "to": b, ...}`` entries with a direction's keys
        (bandwidth, delay, loss or a loss model, queue and netem's impairments), each over
        its pair's matrix cells."""
        if lan not in self._lans:
            raise SpecError(f"{lan!r} is not a LAN of this experiment", field="lan")
        l = self._lans[lan]
        for k in _extra or {}:
            raise SpecError(unknown_key(k, (*lan_matrix.QUANTITIES, "csv", "pairs")),
                            field=f"matrix.{k}")
        if l["pairs"]:
            raise SpecError(f"LAN {lan!r} already has per-pair channels (a matrix or a "
                            f"gateway)", field="matrix")
        if csv is not None:
            if any(x is not None for x in (delay, bandwidth, loss, jitter, duplicate,
                                           corrupt)):
                raise SpecError("give either csv or the matrices inline, not both",
                                field="matrix.csv")
            if not isinstance(csv, str) or not csv:
                raise SpecError("csv must be a file name", field="matrix.csv")
            from pathlib import Path
            base = Path(base_dir) if base_dir is not None else None
            got = lan_matrix.read_csv(l["order"], lan_matrix.csv_path(csv, base))
        else:
            rows = {k: v for k, v in (("delay", delay), ("bandwidth", bandwidth),
                                      ("loss", loss), ("jitter", jitter),
                                      ("duplicate", duplicate), ("corrupt", corrupt))
                    if v is not None}
            got = lan_matrix.pairs_from_rows(l["order"], rows)
        l["pairs"] = self._pair_settings(l["order"], got, pairs)

    def _pair_settings(self, order: list[str], got: tuple[ir.LanPair, ...],
                       entries: Iterable[Mapping[str, Any]] | None) -> tuple[ir.LanPair, ...]:
        """A matrix's channels with ``matrix.pairs`` entries over their cells."""
        if entries is None:
            return got
        if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Iterable):
            raise SpecError("pairs must be a list of {from, to, ...} entries",
                            field="matrix.pairs")
        at = {(p.src, p.dst): i for i, p in enumerate(got)}
        out, seen = list(got), set()
        allowed = ("from", "to", *PAIR_KEYS)
        for i, e in enumerate(entries):
            f = f"matrix.pairs[{i}]"
            if not isinstance(e, Mapping):
                raise SpecError("a pair entry is a mapping {from: A, to: B, ...}", field=f)
            for k in e:
                if k not in allowed:
                    raise SpecError(unknown_key(str(k), allowed), field=f"{f}.{k}")
            for k in ("from", "to"):
                if e.get(k) is None:
                    raise SpecError(f"a pair entry needs {k} (a member of the LAN)",
                                    field=f"{f}.{k}")
                if str(e[k]) not in order:
                    raise SpecError(f"{e[k]!r} is not a member of the LAN "
                                    f"({', '.join(order)})", field=f"{f}.{k}")
            key = (str(e["from"]), str(e["to"]))
            if key[0] == key[1]:
                raise SpecError(f"a pair needs two members ({key[0]} to itself)",
                                field=f"{f}.to")
            if key in seen:
                raise SpecError(f"the pair {key[0]} -> {key[1]} is given twice",
                                field=f"{f}.to")
            seen.add(key)
            p = out[at[key]]
            params = self._params(e.get("bandwidth"), e.get("delay"), e.get("loss"),
                                  e.get("queue"), base=p.params, field=f,
                                  impair={k: e.get(k) for k in impair_spec.KEYS})
            out[at[key]] = replace(p, params=params)
        return tuple(out)

    def lan_gateway(self, lan: str, node: str, *, delay: Any = 0, bandwidth: Any = 0,
                    loss: Any = 0, queue: Any = None, direction: str = "to") -> None:
        """Gateway mode (hitbox) on ``lan``: ``delay``/``bandwidth``/``loss`` apply only to
        frames sent to ``node`` (``direction="to"``, hitbox's rule), sent by it
        (``"from"``) or both; frames between the other members are untouched."""
        if lan not in self._lans:
            raise SpecError(f"{lan!r} is not a LAN of this experiment", field="lan")
        l = self._lans[lan]
        if l["pairs"]:
            raise SpecError(f"LAN {lan!r} already has per-pair channels (a matrix or a "
                            f"gateway)", field="gateway")
        p = self._params(bandwidth, delay, loss, queue, field="gateway")
        l["pairs"] = lan_matrix.gateway_pairs(l["order"], str(node), p, str(direction))
        l["gateway"] = str(node)

    def lan_member(self, lan: str, node: str, *, bandwidth: Any = None, delay: Any = None,
                   loss: Any = None, ip: str | None = None, ip6: str | None = None,
                   to_lan: Mapping[str, Any] | None = None,
                   from_lan: Mapping[str, Any] | None = None,
                   ifname: str | None = None, jitter: Any = None,
                   duplicate: Any = None, corrupt: Any = None, reorder: Any = None,
                   overhead: Any = None, cellsize: Any = None,
                   cell_overhead: Any = None) -> None:
        """Per-member settings: ``bandwidth``/``delay``/``loss`` set the member's own
        attachment both ways (``tb-set-node-lan-params``); ``to_lan``/``from_lan``
        mappings (keys bandwidth, delay, loss, queue and netem's impairments) set one
        direction (``tb-set-lan-simplex-params``); ``ip`` its address (``tb-set-ip-lan``),
        ``ip6`` its IPv6 address (``tb-set-ip6-lan``), ``ifname`` its interface's name.
        netem's impairments given here act on the member's receiving half (``from_lan``)."""
        if lan not in self._lans:
            raise SpecError(f"{lan!r} is not a LAN of this experiment", field="lan")
        m = self._lans[lan]["members"].get(node)
        if m is None:
            raise SpecError(f"{node!r} is not a member of LAN {lan!r}", field="node")
        for d in ("to_lan", "from_lan"):
            for k, v in (("bandwidth", bandwidth), ("delay", delay), ("loss", loss)):
                if v is not None:
                    m[d][k] = v
        for k, v in (("jitter", jitter), ("duplicate", duplicate), ("corrupt", corrupt),
                     ("reorder", reorder), ("overhead", overhead), ("cellsize", cellsize),
                     ("cell_overhead", cell_overhead)):
            if v is not None:
                m["from_lan"][k] = v
        for d, spec in (("to_lan", to_lan), ("from_lan", from_lan)):
            for k, v in (spec or {}).items():
                if k not in PARAM_KEYS:
                    raise SpecError(unknown_key(k, PARAM_KEYS), field=f"{d}.{k}")
                m[d][k] = v
        if ip is not None:
            m["ip"] = str(ip)
        if ip6 is not None:
            m["ip6"] = str(ip6)
        if ifname is not None:
            m["ifname"] = str(ifname)
        # check the values now, so errors point at this call
        for d in ("to_lan", "from_lan"):
            self._params(m[d].get("bandwidth"), m[d].get("delay"), m[d].get("loss"),
                         m[d].get("queue"), field=d, impair=m[d])

    def program(self, node: str, command: str, *, name: str | None = None,
                dir: str | None = None, timeout: Any = None,
                expected_exit_code: int | None = None,
                source: ir.Source | None = None) -> str:
        """An Emulab Program object on ``node``; returns its name."""
        src = source or _caller_source()
        node = self._node_ref(node, "node")
        name = self._name(name, "prog")
        self._programs.append(ir.Program(
            name=name, node=node, command=str(command), dir=dir,
            timeout_s=None if timeout is None else units.parse_delay(timeout, field="timeout",
                                                                     what="timeout"),
            expected_exit_code=None if expected_exit_code is None else units.parse_int(
                expected_exit_code, "expected_exit_code", field="expected_exit_code"),
            source=src))
        return name

    def agent(self, kind: str, *, node: str | None = None, name: str | None = None,
              attached: str | None = None, peer: str | None = None,
              params: Mapping[str, Any] | None = None,
              source: ir.Source | None = None) -> str:
        """A traffic agent (``Agent/UDP``...) on ``node``, or an application
        (``Application/Traffic/CBR``...) ``attached`` to an agent."""
        src = source or _caller_source()
        if node is not None:
            self._node_ref(node, "node")
        name = self._name(name, "agent")
        self._agents[name] = dict(name=name, kind=str(kind), node=node, attached=attached,
                                  peer=peer, params=[(str(k), str(v)) for k, v in
                                                     (params or {}).items()], source=src)
        return name

    def connect(self, src: str, dst: str) -> None:
        """``$ns connect``: make two agents peers."""
        for x in (src, dst):
            if x not in self._agents:
                raise SpecError(f"{x!r} is not an agent of this experiment", field="connect")
        self._agents[src]["peer"], self._agents[dst]["peer"] = dst, src

    def at(self, time: Any, target: str, action: str, *args: Any,
           source: ir.Source | None = None) -> None:
        """``$ns at TIME "$target action args"`` (ns-2's words, e.g.
        ``at(5, "link0", "bandwidth", "5Mb")``); checked by :meth:`build`, which knows
        every target."""
        src = source or _caller_source()
        self._events.append((units.parse_time(time, field="at"), str(target), str(action),
                             tuple(str(a) for a in args), src))

    # -- result ------------------------------------------------------------
    def build_from(self, file: str) -> ir.Experiment:
        """:meth:`build` for a front end reading ``file``: an error that names no file of
        its own is reported against that file."""
        try:
            exp = self.build()
        except SpecError as e:
            if e.file:
                raise
            raise SpecError(e.message, file=file, line=e.line, field=e.field) from None
        # what the planner finds wrong with the whole (addressing) names the file too
        return exp if exp.source.file else replace(exp, source=ir.Source(file))

    def build(self) -> ir.Experiment:
        """The validated experiment."""
        unused = sorted(set(self._overrides) - set(self._parameters))
        if unused:
            raise SpecError(f"parameter {unused[0]!r} is not a template parameter of this "
                            f"experiment (defined: {', '.join(self._parameters) or 'none'})",
                            field="parameters")
        nodes = tuple(ir.Node(**{**n, "routes": tuple(n["routes"])}) for n in self._nodes.values())
        links = tuple(ir.Link(**l) for l in self._links.values())
        lans = []
        for l in self._lans.values():
            hd, hl = ir.lan_half(l["delay"], l["loss"])
            half = ir.LinkParams(bandwidth_bps=l["bandwidth"], delay_s=hd, loss=hl,
                                 queue=l["queue"])
            members = []
            for node in l["order"]:
                m = l["members"][node]
                to, fr = (self._params(m[d].get("bandwidth"), m[d].get("delay"),
                                       m[d].get("loss"), m[d].get("queue"),
                                       base=half if d == "to_lan" else
                                       replace(half, **l["impair"]), impair=m[d])
                          for d in ("to_lan", "from_lan"))
                members.append(ir.LanMember(node=node, to_lan=to, from_lan=fr, ip=m["ip"],
                                            ip6=m["ip6"], ifname=m["ifname"]))
            lans.append(ir.Lan(name=l["name"], members=tuple(members),
                               bandwidth_bps=l["bandwidth"], delay_s=l["delay"],
                               loss=l["loss"], netmask=l["netmask"], cost=l["cost"],
                               source=l["source"], pairs=l["pairs"],
                               gateway=l["gateway"]))
        agents = []
        for a in self._agents.values():
            node = a["node"]
            if node is None and a["attached"] in self._agents:
                node = self._agents[a["attached"]]["node"]
            agent, notes = normalize.agent(a["name"], a["kind"], node=node,
                                           attached=a["attached"], peer=a["peer"],
                                           params=a["params"], source=a["source"])
            for n in notes:
                self._warn(n, a["source"])
            agents.append(agent)
        exp = ir.Experiment(name=self.name, nodes=nodes, links=links, lans=tuple(lans),
                            programs=tuple(self._programs),
                            agents=tuple(agents), rtproto=self.rtproto,
                            ospf_hello_s=getattr(self, "ospf_hello_s", ir.Experiment.ospf_hello_s),
                            ospf_dead_s=getattr(self, "ospf_dead_s", ir.Experiment.ospf_dead_s),
                            asns=tuple(getattr(self, "_asns", {}).items()),
                            bgp_sessions=tuple(getattr(self, "_bgp", [])),
                            seed=units.parse_int(self.seed, "seed", field="seed"),
                            parameters=tuple(self._parameters.values()), swap=self._swap,
                            engine_threads=self._engine_threads,
                            engine_cores=self._engine_cores,
                            ipv6=getattr(self, "_ipv6", "off"),
                            ipv6_prefix=getattr(self, "_ipv6_prefix", None),
                            ipv6_source=getattr(self, "_ipv6_source", ir.Source()),
                            warnings=tuple(self._warnings))
        exp = edge_spec.expand(exp, self._edge)
        kinds = exp.kinds()
        events = tuple(normalize.event(exp, t, target, action, args, src, kinds=kinds)
                       for t, target, action, args, src in self._events)
        return ir.validate(replace(exp, events=events))


def _resources(cpu: Any, memory: Any, pids: Any, cpus: Any, cpu_weight: Any) -> dict[str, Any]:
    """The builder's resource keywords as typed IR fields (units parsed, field named)."""
    out: dict[str, Any] = {}
    if cpu is not None:
        out["cpu_cores"] = units.parse_cores(cpu, field="cpu")
    if memory is not None:
        out["memory_bytes"] = units.parse_memory(memory, field="memory")
    if pids is not None:
        out["pids"] = units.parse_int(pids, "pids", field="pids")
    if cpus is not None:
        out["cpus"] = units.parse_cpuset(cpus, field="cpus")
    if cpu_weight is not None:
        out["cpu_weight"] = units.parse_int(cpu_weight, "cpu_weight", field="cpu_weight")
    return out
