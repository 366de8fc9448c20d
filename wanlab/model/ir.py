"""The experiment IR: immutable, validated, with explicit units.

Every front end (ns-2 Tcl, YAML, Python) produces an :class:`Experiment`;
everything downstream (store, plan, back ends, run) reads only this.

Units are in the field names: ``bandwidth_bps`` (bits/s, 0 = unlimited),
``delay_s`` (seconds), ``loss`` (probability 0..1), ``time_s`` (seconds after
t = 0 of the experiment's timeline). The JSON form (:meth:`Experiment.to_json`,
documented in docs/ir.md) has the top-level lists ``nodes``, ``links``,
``lans``, ``events``, ``programs`` and ``agents``.

Link directions: a link joins ``a`` and ``b``; ``ab`` shapes frames sent by
``a`` towards ``b``, ``ba`` the reverse. A LAN member's ``to_lan`` shapes
frames from the member into the LAN's switch, ``from_lan`` frames from the
switch to the member; a LAN's delay D is the one-way delay between any two
members, so each half is D/2 by default (Emulab's semantics).
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import posixpath
import re
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from wanlab.errors import SpecError
from wanlab.model import imageref
from wanlab.model.gc_pause import gc_paused
from wanlab.model.names import (
    IMAGE_NAME_RE,
    IMAGE_NAME_RULE,
    NAME_RULE,
    check_experiment_name,
    is_valid,
)

IR_VERSION = 2

QUEUE_KINDS = ("droptail", "red", "gred")
# "remote": a neighbour that runs on another machine of a cluster, present in one
# machine's share only as the end of a tunnelled link (made by wanlab/cluster, not by users)
NODE_KINDS = ("emulated", "simulated", "remote")
RTPROTOS = ("static", "manual", "session", "ospf", "bgp")
DYNAMIC_RTPROTOS = ("session", "ospf", "bgp")     # run FRR's daemons in every node
# address families: IPv4 only, dual stack, IPv6 only (YAML ipv6: false | true | only)
IPV6_MODES = ("off", "dual", "only")


def image_routing_refused(node: str) -> str:
    """Why a node with an image cannot take part in dynamic routing (FRR) on a host without
    user namespaces: its daemons keep SYS_ADMIN, and they would run the node's own
    (writable) files as root of the host."""
    return (f"node {node}: dynamic routing runs FRR's daemons with SYS_ADMIN, and a node with "
            f"an image would run its own files (which it may have replaced) with it as root "
            f"of the host: that needs the nodes in a user namespace (not with WANLAB_USERNS=0 "
            f"or user.max_user_namespaces 0); give routers no image, or use static routing")
MAX_BANDWIDTH_BPS = 100_000_000_000
MAX_DELAY_S = 10.0
# The experiment's horizon: no event (timeline or tevc) may be later than this after t = 0.
# Ten days is longer than any run on one machine, and keeps times far from float limits.
HORIZON_S = 10 * 24 * 3600.0
# node resources (cgroups): the smallest limits a node still runs with
MIN_CPU_CORES = 0.01            # cpu.max's quota has a floor of 1 ms per 100 ms period
MIN_MEMORY_BYTES = 4 << 20
MIN_PIDS, MAX_PIDS = 8, 4_194_304

# queue fields an event may set (the engine's names; ns-2's are mapped by the front ends)
QUEUE_FIELDS = {"limit": int, "in_bytes": bool, "thresh": float, "maxthresh": float,
                "q_weight": float, "linterm": float, "gentle": bool, "mean_pktsize": int}
RED_FIELDS = ("thresh", "maxthresh", "q_weight", "linterm", "gentle", "mean_pktsize")
TRANSPORTS = ("udp", "tcp", "udp_sink", "tcp_sink")
TCP_CCS = ("tahoe", "reno", "newreno", "cubic")
PATTERNS = ("cbr", "poisson", "exponential", "pareto", "ftp")
# traffic fields an application's ``set`` event may change, with their types
TRAFFIC_FIELDS = {"packet_size": int, "rate_bps": int, "interval_s": float, "tos": int,
                  "max_packets": int}
# the actions each kind of object takes (docs/ir.md, Event)
ACTIONS = {
    "link": ("up", "down", "bandwidth", "delay", "plr", "set", "drop", "trace", "impair"),
    "lan": ("up", "down", "bandwidth", "delay", "plr", "set", "trace", "impair"),
    "program": ("start", "stop", "kill", "run", "set"),
    "application": ("start", "stop", "reset", "set"),
    "node": ("reboot",),
    "simulator": ("halt", "terminate", "swapout", "stoprun", "msg", "log"),
    "timeline": ("start", "run"),
}
TRACE_OPS = ("start", "stop", "snapshot")


def lan_half(delay_s: float, loss: float) -> tuple[float, float]:
    """The delay and loss of one half (member to switch, or switch to member) of a LAN
    whose member-to-member delay is ``delay_s`` and loss ``loss``: D/2 and 1 - sqrt(1 - L),
    so two halves in series give D and L (Emulab's semantics). The only place of this rule:
    front ends use it at creation, the engine encoder for run-time changes."""
    return delay_s / 2, 1.0 - math.sqrt(1.0 - loss)


@dataclass(frozen=True)
class Source:
    """Where an object was declared (for error messages)."""

    file: str | None = None
    line: int | None = None


@dataclass(frozen=True)
class Queue:
    """A link direction's queue: DropTail or (gentle) RED with ns-2's parameters.

    ``limit`` None means "engine default" (50 packets, raised to the
    bandwidth-delay product); it counts bytes when ``in_bytes``.
    """

    kind: str = "droptail"
    limit: int | None = None
    in_bytes: bool = False
    thresh: float = 5.0
    maxthresh: float = 15.0
    q_weight: float = 0.002
    linterm: float = 10.0
    gentle: bool = False
    mean_pktsize: int = 500


JITTER_DISTS = ("uniform", "normal", "pareto", "paretonormal")
LOSS_MODELS = ("gilbert-elliott", "4-state")
MAX_FRAMING_BYTES = 65_535
MAX_REORDER_GAP = 1_000_000
# the fields of LinkParams that are impairments (docs/impairments.md), with their types
IMPAIR_FIELDS = {"jitter_s": float, "jitter_dist": str, "jitter_correlation": float,
                 "jitter_reorder": bool, "loss_correlation": float, "loss_model": object,
                 "duplicate": float, "corrupt": float, "reorder": float, "reorder_gap": int,
                 "overhead": int, "cellsize": int, "cell_overhead": int, "trace": object,
                 "schedule": object}


@dataclass(frozen=True)
class Schedule:
    """A direction's delay, bandwidth and loss following a time series (docs/
    impairments.md): at ``times_s`` after the direction is set up, the columns given (None:
    not scheduled) take their values, held (step) or ``linear`` in between, the series
    repeating (``loop``) after its last time. ``file`` is the name it was read from."""

    file: str
    times_s: tuple[float, ...]
    delay_s: tuple[float, ...] | None = None
    bandwidth_bps: tuple[int, ...] | None = None
    loss: tuple[float, ...] | None = None
    linear: bool = False
    loop: bool = False


@dataclass(frozen=True)
class BandwidthTrace:
    """A direction's capacity as Mahimahi delivery opportunities (docs/impairments.md): at
    each time of ``ms`` (milliseconds into the trace) 1500 bytes may leave; the trace
    starts ``offset_s`` in when the direction is set up, and repeats (``loop``) shifted by
    its last time. ``file`` is the name it was read from (for people)."""

    file: str
    ms: tuple[int, ...]
    offset_s: float = 0.0
    loop: bool = True

    def mean_bps(self) -> float:
        return len(self.ms) * 1500 * 8 / (self.ms[-1] / 1000) if self.ms and self.ms[-1] \
            else 0.0


@dataclass(frozen=True)
class LossModel:
    """A loss model with memory (docs/impairments.md): ``gilbert-elliott`` moves from good
    to bad with ``p`` and back with ``r``, and delivers a frame with probability ``k`` in the
    good state and ``h`` in the bad one (netem's ``gemodel p r 1-h 1-k``); ``4-state`` is
    netem's ``loss state p13 p31 p32 p23 p14``."""

    model: str
    p: float = 0.0
    r: float = 1.0
    h: float = 0.0
    k: float = 1.0
    p13: float = 0.0
    p31: float = 1.0
    p32: float = 0.0
    p23: float = 1.0
    p14: float = 0.0

    def values(self) -> dict[str, float]:
        """The model's own parameters, by name."""
        names = ("p", "r", "h", "k") if self.model == "gilbert-elliott" else \
            ("p13", "p31", "p32", "p23", "p14")
        return {n: getattr(self, n) for n in names}


@dataclass(frozen=True)
class LinkParams:
    """Shaping of one direction: bandwidth, delay, loss and queue, and netem's impairments:
    jitter (``jitter_s``: ±jitter for ``uniform``, the standard deviation for the other
    distributions; a ``jitter_correlation`` is the chance a draw repeats the previous one;
    frames keep their order unless ``jitter_reorder``), correlated or modelled loss
    (``loss_correlation``; ``loss_model`` replaces ``loss``), ``duplicate`` and ``corrupt``
    probabilities, ``reorder`` (every ``reorder_gap``-th frame skips the delay with this
    probability) and serialization framing (``overhead`` bytes per frame, ``cellsize`` and
    ``cell_overhead`` bytes per cell)."""

    bandwidth_bps: int = 0
    delay_s: float = 0.0
    loss: float = 0.0
    queue: Queue = field(default_factory=Queue)
    jitter_s: float = 0.0
    jitter_dist: str = "uniform"
    jitter_correlation: float = 0.0
    jitter_reorder: bool = False
    loss_correlation: float = 0.0
    loss_model: LossModel | None = None
    duplicate: float = 0.0
    corrupt: float = 0.0
    reorder: float = 0.0
    reorder_gap: int = 1
    overhead: int = 0
    cellsize: int = 0
    cell_overhead: int = 0
    trace: BandwidthTrace | None = None     # capacity from a trace instead of bandwidth_bps
    schedule: Schedule | None = None        # delay/bandwidth/loss following a time series


@dataclass(frozen=True)
class Route:
    """A manual route on a node (``$node add-route DST NEXTHOP``)."""

    dst: str            # CIDR prefix, or a node name resolved at plan time
    via: str            # next-hop IP, or a neighbour node name


@dataclass(frozen=True)
class Node:
    """A node: an emulated network namespace, or a node simulated in the engine."""

    name: str
    kind: str = "emulated"
    os: str | None = None
    hardware: str | None = None
    startcmd: str | None = None
    routes: tuple[Route, ...] = ()
    fixed: str | None = None         # on a cluster, the machine it must run on (tb-fix-node)
    # on a cluster, it runs on a wide-area machine chosen by wanassign; a link between two
    # wide-area nodes is a wanlink: a request for the real path's delay and bandwidth
    # (tb-set-node-wide-area; docs/cluster.md)
    wide_area: bool = False
    loopback: str | None = None      # with dynamic routing: this /32, not the next of
                                     # 10.255/16 (a cluster's parts keep the whole plan's)
    loopback6: str | None = None     # likewise its IPv6 /128 (with ipv6 dual or only)
    source: Source = field(default_factory=Source)
    image: str | None = None         # its root file system (wanlab image); None: the host's
    # (folder in its root, tarball on the host); ("=PATH", file or folder): a copy at PATH
    tarfiles: tuple[tuple[str, str], ...] = ()
    packages: tuple[str, ...] = ()   # Debian packages, or .deb paths, installed in its root
    # a network interface of this machine moved into the node and bridged (L2) with the
    # node's one link or LAN interface: real machines behind it see the shaped path
    # (``wanlab bridge``; docs/bridge.md)
    external: str | None = None
    # resources of an emulated node (its cgroup; None: no limit, pids: DEFAULT_PIDS)
    cpu_cores: float | None = None      # CPU time limit in cores (0.25 = a quarter core)
    cpus: str | None = None             # CPUs it is pinned to, a cpuset list ("0", "0-1")
    cpu_weight: int | None = None       # its share against other nodes, 1..10000 (100)
    memory_bytes: int | None = None     # memory limit; beyond it the kernel OOM-kills
    pids: int | None = None             # most processes and threads at once
    # a route out of the experiment through its edge gateway (docs/edge.md)
    egress: bool = False
    # environment of every command in the node (an OCI image's Env), (name, value) pairs
    env: tuple[tuple[str, str], ...] = ()
    # an OCI image's Entrypoint, Cmd and User as the node overrides them (containerlab's
    # entrypoint, cmd, user; docker's rules: docs/oci-images.md); None: the image's own
    entrypoint: tuple[str, ...] | None = None
    cmd: tuple[str, ...] | None = None
    user: str | None = None


@dataclass(frozen=True)
class LinkRule:
    """A per-destination rule of a link (hitbox's point-to-point mode by address): IPv4 or
    IPv6 frames to ``dst`` (a prefix of that family) cross their own pipelines, ``ab`` and
    ``ba``, instead of the link's directions; the longest matching prefix wins."""

    dst: str
    ab: LinkParams = field(default_factory=LinkParams)
    ba: LinkParams = field(default_factory=LinkParams)


@dataclass(frozen=True)
class Link:
    """A duplex point-to-point link between nodes ``a`` and ``b``; ``a`` = ``b``: a cable
    between two named ports of one node, without addresses (validate)."""

    name: str
    a: str
    b: str
    ab: LinkParams = field(default_factory=LinkParams)
    ba: LinkParams = field(default_factory=LinkParams)
    ip_a: str | None = None          # address of a's interface (tb-set-ip-link)
    ip_b: str | None = None
    netmask: str | None = None       # dotted mask or prefix length (tb-set-netmask)
    cost: int = 1                    # routing cost ($ns cost), both directions
    ip6_a: str | None = None         # IPv6 address of a's interface (tb-set-ip6-link), a /64
    ip6_b: str | None = None
    source: Source = field(default_factory=Source)
    rules: tuple[LinkRule, ...] = ()     # per-destination rules (wanlab bridge --rule)
    # the interface names at a and at b (a containerlab file's); None: the next ethN
    ifnames: tuple[str | None, str | None] = (None, None)


@dataclass(frozen=True)
class LanMember:
    """A node's attachment to a LAN, with its own shaping each way."""

    node: str
    to_lan: LinkParams = field(default_factory=LinkParams)
    from_lan: LinkParams = field(default_factory=LinkParams)
    ip: str | None = None
    ip6: str | None = None           # its IPv6 address (tb-set-ip6-lan), in the LAN's /64
    ifname: str | None = None        # the member's interface name; None: the next ethN
    switch: str | None = None        # the switch it is plugged into (a LAN of ``switches``)


@dataclass(frozen=True)
class Trunk:
    """A link between two switches of one LAN (Mininet's switch-to-switch link): ``ab``
    shapes the frames switch ``a`` sends to ``b``, ``ba`` the reverse. Each direction is one
    queue, shared by every flow that crosses it."""

    a: str
    b: str
    ab: LinkParams = field(default_factory=LinkParams)
    ba: LinkParams = field(default_factory=LinkParams)
    source: Source = field(default_factory=Source)
    ifnames: tuple[str | None, str | None] = (None, None)   # the ports' names at a and b

    @property
    def name(self) -> str:
        return f"{self.a}-{self.b}"


@dataclass(frozen=True)
class LanPair:
    """The channel of one ordered pair of LAN members (a latency matrix's cell, or a
    gateway-mode direction): frames from ``src`` to ``dst`` cross it, with its own queue and
    serialization, after ``src``'s ``to_lan`` and before ``dst``'s ``from_lan``."""

    src: str
    dst: str
    params: LinkParams = field(default_factory=LinkParams)


@dataclass(frozen=True)
class Lan:
    """A switched LAN (``make-lan``); bandwidth/delay/loss are the LAN-wide values.

    ``pairs`` are per-pair channels (docs/yaml.md, "Latency matrices"): the front ends
    expand a ``matrix`` (every ordered pair) or a ``gateway`` (the pairs to and/or from the
    gateway node, hitbox's gateway mode; ``gateway`` names it) into them.

    ``switches`` (Mininet's): the LAN is a tree of learning switches joined by ``trunks``
    (one broadcast domain, one subnet); each member names the switch it is plugged into.
    Empty: the LAN is one switch."""

    name: str
    members: tuple[LanMember, ...]
    bandwidth_bps: int = 0
    delay_s: float = 0.0
    loss: float = 0.0
    netmask: str | None = None
    cost: int = 1
    source: Source = field(default_factory=Source)
    pairs: tuple[LanPair, ...] = ()
    gateway: str | None = None
    switches: tuple[str, ...] = ()
    trunks: tuple[Trunk, ...] = ()
    blocked: tuple[Trunk, ...] = ()  # links a spanning tree blocks (at b): built, held down


@dataclass(frozen=True)
class Event:
    """``$ns at TIME "$obj action args"``, typed: do ``action`` on ``target`` at ``time_s``.

    The argument is typed by the action (docs/ir.md, Event): ``value`` is an int of bit/s
    (``bandwidth``), seconds (``delay``), a probability (``plr``), a packet count
    (``drop``), ``start``/``stop``/``snapshot`` (``trace``) or a text (``msg``, ``log``,
    a Program's ``set``); ``set`` names the changed field in ``param`` (a queue field for
    links and LANs, a traffic field for applications, ``command`` for programs). ``dir``
    selects one direction of a link (``ab``/``ba``) or of a LAN ``member``
    (``to_lan``/``from_lan``); None means every direction. Values of a LAN's ``delay`` and
    ``plr`` are member-to-member (each half gets :func:`lan_half`).

    Steps of an event sequence share ``sequence`` (one key per started sequence) and are
    numbered by ``step``: step k starts when step k-1 has completed (a Program's ``run``
    completes when the program exits).
    """

    time_s: float
    target: str
    action: str
    param: str | None = None
    value: Any = None
    dir: str | None = None
    member: str | None = None
    source: Source = field(default_factory=Source)
    sequence: str | None = None
    step: int = 0
    # a LAN's per-pair channel (latency matrix): from ``member`` to ``to`` (tevc LAN/A/B)
    to: str | None = None

    def to_json(self) -> dict[str, Any]:
        return _plain(asdict(self))

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Event":
        return Event(**{**d, "source": Source(**d["source"]) if d.get("source") else Source()})

    def args(self) -> list[str]:
        """The argument as words, for logs and messages."""
        out = [] if self.dir is None else [f"{self.member}/{self.dir}" if self.member
                                           else self.dir]
        if self.to is not None:
            out = [f"{self.member}>{self.to}"]
        if self.param is not None:
            out.append(self.param)
        if self.value is not None:
            out.append(_word(self.action, self.param, self.value))
        return out


def _word(action: str, param: str | None, v: Any) -> str:
    """A typed value as ns-2 would write it (``10ms``, ``5Mb``), for people."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if action == "delay" or param == "interval_s":
        return f"{v * 1e3:g}ms" if v < 1 else f"{v:g}s"
    if action == "bandwidth" or param == "rate_bps":
        for unit, k in (("Gb", 10**9), ("Mb", 10**6), ("kb", 10**3)):
            if v >= k:
                return f"{v / k:g}{unit}"
    return str(v)


@dataclass(frozen=True)
class Timeline:
    """An ns ``EventTimeline`` or ``EventSequence``, kept so that it can be started at run
    time (``wanlab tevc NAME now TL start``) even if the script never starts it.

    ``events`` are typed; a timeline's ``time_s`` are relative to its start, a sequence's
    are its steps in order (each starts when the previous one has completed). A script's
    own ``$ns at T "$tl start"`` is already expanded into :attr:`Experiment.events`.
    """

    name: str
    kind: str                        # timeline | sequence
    events: tuple[Event, ...] = ()
    source: Source = field(default_factory=Source)


@dataclass(frozen=True)
class Group:
    """An ns ``EventGroup``: an event sent to it (tevc) goes to each member."""

    name: str
    members: tuple[str, ...] = ()
    source: Source = field(default_factory=Source)


@dataclass(frozen=True)
class Program:
    """An Emulab ``Program`` object: a command run on a node on demand or by events."""

    name: str
    node: str
    command: str
    dir: str | None = None
    timeout_s: float | None = None
    expected_exit_code: int | None = None
    source: Source = field(default_factory=Source)


# Linux's MSS on a 1500-byte MTU with timestamps: a TCP agent's segment size when the script
# leaves packetSize_ unset, in emulation (what Linux picks) and in simulation alike.
LINUX_MSS = 1448


@dataclass(frozen=True)
class Transport:
    """What a transport agent does: send UDP, send TCP, or sink either.

    ``cc`` is the TCP congestion control (``tahoe``, ``reno``, ``newreno``, ``cubic``, or
    another Linux name from ``Agent/TCP/Linux``'s ``select_ca``; None for a TCP variant
    with no equivalent here). None for ``mss``/``window``/``window_init``/``min_rto_s``
    means the back end's default (Linux's in emulation, ns-2's in simulation).
    """

    protocol: str                    # udp | tcp | udp_sink | tcp_sink
    cc: str | None = None
    mss: int | None = None           # bytes (ns packetSize_)
    window: int | None = None        # packets (ns window_)
    window_init: int | None = None   # packets (ns windowInit_)
    min_rto_s: float | None = None
    max_burst: int | None = None     # packets per ACK (ns maxburst_; 0 = no limit)
    tcp_tick_s: float | None = None  # RTT measurement granularity (ns tcpTick_)
    delayed_ack: bool = False        # tcp_sink: ns-2 DelAck (ACK every other segment)
    delack_s: float | None = None    # tcp_sink: DelAck's timer (ns interval_); None = Linux's


@dataclass(frozen=True)
class Traffic:
    """What an application sends, with ns-2's defaults applied.

    ``cbr``: ``packet_size`` bytes every ``interval_s``, or at ``rate_bps`` of payload
    (exactly one of the two is set). ``poisson``: exponential gaps of mean
    ``interval_s`` or mean payload rate ``rate_bps``. ``exponential`` / ``pareto``:
    on/off, ``rate_bps`` during bursts of mean ``burst_s``, idle times of mean
    ``idle_s`` (Pareto ``shape``). ``ftp``: a bulk TCP transfer (``max_bytes`` or
    unlimited). ``max_packets`` ends a UDP source after that many packets.
    """

    pattern: str
    packet_size: int | None = None
    rate_bps: int | None = None
    interval_s: float | None = None
    burst_s: float | None = None
    idle_s: float | None = None
    shape: float | None = None
    tos: int | None = None
    max_packets: int | None = None
    max_bytes: int | None = None


@dataclass(frozen=True)
class Agent:
    """A traffic agent or application, typed.

    Agents sit on a ``node`` and have a ``transport``; applications are ``attached`` to
    an agent, get its node and have ``traffic``; ``peer`` is the agent this one is
    ``$ns connect``-ed to. ``kind`` is the class as declared (``Agent/TCP/Newreno``),
    for messages only: an agent or application wanlab does not realise has
    ``transport``/``traffic`` None.
    """

    name: str
    kind: str
    role: str = "agent"              # agent | application
    node: str | None = None
    attached: str | None = None
    peer: str | None = None
    transport: Transport | None = None
    traffic: Traffic | None = None
    source: Source = field(default_factory=Source)


@dataclass(frozen=True)
class BgpSession:
    """A BGP session between two directly connected nodes (eBGP if their ASes differ)."""

    a: str
    b: str


# A template parameter's name becomes an environment variable in every node: a shell
# identifier, and none of the variables a shell or the dynamic linker reads itself.
PARAMETER_RULE = "a letter, then letters, digits or '_' (at most 64)"
RESERVED_PARAMETERS = frozenset({
    "PATH", "HOME", "SHELL", "USER", "LOGNAME", "IFS", "ENV", "BASH_ENV", "PWD", "OLDPWD",
    "TERM", "LANG", "TZ", "TMPDIR", "HOSTNAME", "PS1", "PS4", "CDPATH", "LD_PRELOAD",
    "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP"})
MAX_PARAMETER_VALUE = 4096


@dataclass(frozen=True)
class Parameter:
    """A template parameter (Emulab's ``define-template-parameter``): its default, bound at
    parse time, the value this instance was parsed with (``-p NAME=VALUE``, else the
    default), and a description. Values are text, as in ns-2 and in a node's environment,
    where every parameter is exported under its name."""

    name: str
    default: str
    value: str
    description: str = ""


@dataclass(frozen=True)
class SwapPolicy:
    """When the facility swaps an active experiment out by itself: after ``idle_s`` seconds
    without activity in its nodes (engine counters, process CPU, open shells), or
    ``max_duration_s`` after its swap-in. None: never. ``no_idle_reason``: why idle swap is
    off (required by ``--no-idle-swap``)."""

    idle_s: float | None = None
    max_duration_s: float | None = None
    no_idle_reason: str | None = None


FORWARD_PROTOS = ("tcp", "udp")


@dataclass(frozen=True)
class Forward:
    """An ingress port forward: connections to port ``listen`` of the edge gateway's
    uplink address reach ``port`` of ``node`` (docs/edge.md)."""

    node: str
    port: int
    proto: str = "tcp"
    listen: int = 0             # the gateway's port; the front ends set it (default: port)
    source: Source = field(default_factory=Source)


@dataclass(frozen=True)
class Edge:
    """The experiment's edge (docs/edge.md): a gateway node on a LAN with the nodes that
    have ``egress`` or a forward; the front ends add both to the IR
    (:mod:`wanlab.frontends.edge`), so the LAN is an ordinary shaped LAN. ``interface``:
    a host interface moved into the gateway as its way out, with ``address`` (CIDR) and
    the next hop ``via``; None: a veth into this machine's own network."""

    gateway: str
    lan: str
    interface: str | None = None
    address: str | None = None
    via: str | None = None
    forwards: tuple[Forward, ...] = ()
    wireguard_port: int = 0             # 0: no WireGuard endpoint
    source: Source = field(default_factory=Source)


@dataclass(frozen=True)
class Experiment:
    """A whole experiment description."""

    name: str
    nodes: tuple[Node, ...] = ()
    links: tuple[Link, ...] = ()
    lans: tuple[Lan, ...] = ()
    events: tuple[Event, ...] = ()
    programs: tuple[Program, ...] = ()
    agents: tuple[Agent, ...] = ()
    timelines: tuple[Timeline, ...] = ()
    groups: tuple[Group, ...] = ()
    rtproto: str = "static"
    ospf_hello_s: int = 1            # OSPF timers for rtproto session/ospf (FRR's own
    ospf_dead_s: int = 4             # defaults, 10/40 s, make failures slow to notice)
    asns: tuple[tuple[str, int], ...] = ()            # BGP: node -> AS number
    bgp_sessions: tuple[BgpSession, ...] = ()
    seed: int = 1
    engine_threads: int = 0          # real-time engine threads (0: default, -1: auto)
    engine_cores: int | None = None  # CPUs reserved for the engine (None: the default;
    #                                  docs/resources.md, "The engine's cores")
    parameters: tuple[Parameter, ...] = ()
    swap: SwapPolicy = field(default_factory=SwapPolicy)
    warnings: tuple[str, ...] = ()
    source: Source = field(default_factory=Source)
    edge: Edge | None = None            # egress, port forwards, WireGuard (docs/edge.md)
    ipv6: str = "off"                   # IPV6_MODES: IPv4 only, dual stack or IPv6 only
    # the prefix every network's /64 is taken from (None: a ULA /48 derived from the name)
    ipv6_prefix: str | None = None
    ipv6_source: Source = field(default_factory=Source)     # where the prefix was given
    # "auto": the planner addresses every interface; "none": no address on the links' and
    # LANs' interfaces, the nodes' own commands give them (a containerlab file's)
    addressing: str = "auto"

    # -- lookups -----------------------------------------------------------
    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def object_names(self) -> set[str]:
        """Names events may target."""
        names = {o.name for coll in (self.nodes, self.links, self.lans, self.programs,
                                     self.agents, self.timelines, self.groups) for o in coll}
        return names | {"ns", "sim"}

    def kinds(self) -> dict[str, str]:
        """Every object's name -> its kind: node, link, lan, program, application, agent,
        simulator (the keys of :data:`ACTIONS`, and ``agent`` for transport agents)."""
        k = {"ns": "simulator", "sim": "simulator"}
        k.update({n.name: "node" for n in self.nodes})
        k.update({x.name: "link" for x in self.links})
        k.update({x.name: "lan" for x in self.lans})
        k.update({p.name: "program" for p in self.programs})
        k.update({a.name: "application" if a.role == "application" else "agent"
                  for a in self.agents})
        k.update({t.name: "timeline" for t in self.timelines})
        k.update({g.name: "group" for g in self.groups})
        return k

    # -- JSON --------------------------------------------------------------
    @gc_paused
    def to_json(self) -> dict[str, Any]:
        """The documented JSON form (docs/ir.md)."""
        d = _plain(self)
        d["version"] = IR_VERSION
        return d

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=False)

    @staticmethod
    @gc_paused
    def from_json(d: dict[str, Any]) -> "Experiment":
        """Inverse of :meth:`to_json` (used by the store)."""
        def src(x):
            return Source(**x) if x else Source()

        def queue(x):
            return Queue(**x) if x else Queue()

        def params(x):
            x = dict(x or {})
            x["queue"] = queue(x.get("queue"))
            if x.get("loss_model"):
                x["loss_model"] = LossModel(**x["loss_model"])
            if x.get("trace"):
                x["trace"] = BandwidthTrace(**{**x["trace"], "ms": tuple(x["trace"]["ms"])})
            if x.get("schedule"):
                x["schedule"] = schedule_of(x["schedule"])
            return LinkParams(**x)

        nodes = tuple(Node(**{**n, "routes": tuple(Route(**r) for r in n.get("routes", ())),
                              "tarfiles": tuple(tuple(t) for t in n.get("tarfiles", ())),
                              "packages": tuple(n.get("packages", ())),
                              "env": tuple(tuple(e) for e in n.get("env", ())),
                              **{k: tuple(n[k]) for k in ("entrypoint", "cmd")
                                 if n.get(k) is not None},
                              "source": src(n.get("source"))}) for n in d.get("nodes", ()))
        links = tuple(Link(**{**l, "ab": params(l.get("ab")), "ba": params(l.get("ba")),
                              "rules": tuple(LinkRule(r["dst"], params(r.get("ab")),
                                                      params(r.get("ba")))
                                             for r in l.get("rules", ())),
                              "ifnames": tuple(l.get("ifnames") or (None, None)),
                              "source": src(l.get("source"))}) for l in d.get("links", ()))
        lans = tuple(Lan(**{**l, "members": tuple(
            LanMember(**{**m, "to_lan": params(m.get("to_lan")),
                         "from_lan": params(m.get("from_lan"))}) for m in l["members"]),
            "pairs": tuple(LanPair(**{**p, "params": params(p.get("params"))})
                           for p in l.get("pairs", ())),
            "switches": tuple(l.get("switches", ())),
            **{k: tuple(Trunk(**{**t, "ab": params(t.get("ab")), "ba": params(t.get("ba")),
                                 "ifnames": tuple(t.get("ifnames") or (None, None)),
                                 "source": src(t.get("source"))}) for t in l.get(k, ()))
               for k in ("trunks", "blocked")},
            "source": src(l.get("source"))}) for l in d.get("lans", ()))
        if d.get("version", 1) != IR_VERSION:
            raise SpecError(f"IR version {d.get('version', 1)} is not {IR_VERSION}; "
                            f"upgrade it with wanlab.frontends.normalize.upgrade")
        events = tuple(Event.from_json(e) for e in d.get("events", ()))
        programs = tuple(Program(**{**p, "source": src(p.get("source"))})
                         for p in d.get("programs", ()))
        agents = tuple(Agent(**{
            **a, "transport": Transport(**a["transport"]) if a.get("transport") else None,
            "traffic": Traffic(**a["traffic"]) if a.get("traffic") else None,
            "source": src(a.get("source"))}) for a in d.get("agents", ()))
        timelines = tuple(Timeline(name=t["name"], kind=t["kind"],
                                   events=tuple(Event.from_json(e) for e in t.get("events", ())),
                                   source=src(t.get("source"))) for t in d.get("timelines", ()))
        groups = tuple(Group(name=g["name"], members=tuple(g.get("members", ())),
                             source=src(g.get("source"))) for g in d.get("groups", ()))
        top = {k: v for k, v in d.items() if k in {f.name for f in fields(Experiment)}}
        top.update(timelines=timelines, groups=groups)
        top.update(nodes=nodes, links=links, lans=lans, events=events, programs=programs,
                   agents=agents, warnings=tuple(d.get("warnings", ())),
                   asns=tuple((n, int(a)) for n, a in d.get("asns", ())),
                   bgp_sessions=tuple(BgpSession(**x) for x in d.get("bgp_sessions", ())),
                   parameters=tuple(Parameter(**x) for x in d.get("parameters", ())),
                   swap=SwapPolicy(**(d.get("swap") or {})),
                   source=src(d.get("source")), ipv6_source=src(d.get("ipv6_source")))
        if d.get("edge"):
            e = d["edge"]
            top["edge"] = Edge(**{**e, "forwards": tuple(
                Forward(**{**f, "source": src(f.get("source"))}) for f in e.get("forwards", ())),
                "source": src(e.get("source"))})
        return Experiment(**top)

    def parameter_values(self) -> dict[str, str]:
        """Template parameter -> this instance's value (what every node's environment gets)."""
        return {p.name: p.value for p in self.parameters}

    def with_name(self, name: str) -> "Experiment":
        """The same experiment under another name (checked: names become folder names)."""
        return replace(self, name=check_experiment_name(name))


def _plain(x: Any) -> Any:
    """``x`` as JSON values: dataclasses as dicts of their fields, tuples as lists (what
    ``dataclasses.asdict`` makes, without its deep copy of every value: the IR is
    immutable, and 100 000 nodes took asdict half a minute)."""
    names = _FIELDS.get(type(x))
    if names is None and hasattr(type(x), "__dataclass_fields__"):
        names = _FIELDS[type(x)] = tuple(f.name for f in fields(x))
    if names is not None:
        return {k: _plain(getattr(x, k)) for k in names}
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


_FIELDS: dict[type, tuple[str, ...]] = {}


# -- validation ------------------------------------------------------------

def _err(msg: str, src: Source | None, fld: str | None = None) -> SpecError:
    return SpecError(msg, file=src.file if src else None, line=src.line if src else None,
                     field=fld)


def _prob_ok(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1


def impair_value_ok(v: Any) -> bool:
    """An ``impair`` event's value: LinkParams impairment fields (and ``loss``) with values
    in range; a loss model as a mapping."""
    if not isinstance(v, dict) or not v or any(k not in IMPAIR_FIELDS and k != "loss"
                                                 for k in v):
        return False
    try:
        check_impairments(impair_params(v))
    except (SpecError, TypeError):
        return False
    return "loss" not in v or _prob_ok(v["loss"])


def impair_params(changes: dict[str, Any], base: "LinkParams | None" = None) -> "LinkParams":
    """``base`` (default: none) with an ``impair`` event's changes (a loss model given as a
    mapping, as events carry it)."""
    ch = dict(changes)
    if isinstance(ch.get("loss_model"), dict):
        ch["loss_model"] = LossModel(**ch["loss_model"])
    if isinstance(ch.get("trace"), dict):
        ch["trace"] = BandwidthTrace(**{**ch["trace"], "ms": tuple(ch["trace"]["ms"])})
    if isinstance(ch.get("schedule"), dict):
        ch["schedule"] = schedule_of(ch["schedule"])
    return replace(base or LinkParams(), **ch)


def schedule_of(d: dict[str, Any]) -> Schedule:
    """A schedule from its JSON form."""
    return Schedule(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def check_impairments(p: LinkParams, where: str = "", src: Source | None = None) -> None:
    """The impairment fields of ``p`` in range (SpecError naming the field)."""
    def fail(fld: str, msg: str) -> SpecError:
        return _err(msg, src, f"{where}.{fld}" if where else fld)
    if not isinstance(p.jitter_s, (int, float)) or not 0 <= p.jitter_s <= MAX_DELAY_S:
        raise fail("jitter", f"jitter {p.jitter_s!r} s out of range 0..10s")
    if p.jitter_dist not in JITTER_DISTS:
        raise fail("jitter.distribution", f"distribution {p.jitter_dist!r} unknown; use "
                   f"one of {', '.join(JITTER_DISTS)}")
    for f, what in (("jitter_correlation", "jitter correlation"),
                    ("loss_correlation", "loss correlation"), ("duplicate", "duplicate"),
                    ("corrupt", "corrupt"), ("reorder", "reorder probability")):
        if not _prob_ok(getattr(p, f)):
            raise fail(f, f"{what} {getattr(p, f)!r} is not a probability in 0..1")
    if not isinstance(p.reorder_gap, int) or not 1 <= p.reorder_gap <= MAX_REORDER_GAP:
        raise fail("reorder.gap", f"reorder gap {p.reorder_gap!r} must be 1..{MAX_REORDER_GAP}")
    for f in ("overhead", "cell_overhead"):
        v = getattr(p, f)
        if not isinstance(v, int) or not -MAX_FRAMING_BYTES <= v <= MAX_FRAMING_BYTES:
            raise fail(f, f"{f} {v!r} must be a whole number of bytes within "
                       f"±{MAX_FRAMING_BYTES}")
    if not isinstance(p.cellsize, int) or not 0 <= p.cellsize <= MAX_FRAMING_BYTES:
        raise fail("cellsize", f"cellsize {p.cellsize!r} must be 0..{MAX_FRAMING_BYTES} bytes")
    if p.cellsize and p.cellsize + p.cell_overhead < 1:
        raise fail("cell_overhead", f"cell_overhead {p.cell_overhead} leaves a cell of "
                   f"{p.cellsize} bytes no byte")
    t = p.trace
    if t is not None:
        if not isinstance(t, BandwidthTrace) or not t.ms or t.ms[-1] <= 0 or any(
                b < a for a, b in zip(t.ms, t.ms[1:], strict=False)) or t.ms[0] < 0:
            raise fail("bandwidth.trace", "a trace is non-decreasing milliseconds, the last "
                       "after 0")
        if not 0 <= t.offset_s <= HORIZON_S:
            raise fail("bandwidth.offset", f"trace offset {t.offset_s!r} s out of range")
    if p.schedule is not None:
        bad = schedule_fault(p.schedule)
        if bad is not None:
            i, msg = bad
            name = getattr(p.schedule, "file", "?")
            raise fail("schedule", f"schedule {name}: " + (f"point {i + 1}: " if i >= 0 else "")
                       + msg)
    m = p.loss_model
    if m is not None:
        if m.model not in LOSS_MODELS:
            raise fail("loss.model", f"loss model {m.model!r} unknown; use one of "
                       f"{', '.join(LOSS_MODELS)}")
        for n, v in m.values().items():
            if not _prob_ok(v):
                raise fail(f"loss.{n}", f"{n} {v!r} is not a probability in 0..1")
        if m.model == "4-state" and (m.p13 + m.p14 > 1 or m.p31 + m.p32 > 1):
            raise fail("loss", "p13 + p14 and p31 + p32 must each be at most 1")
        if p.loss or p.loss_correlation:
            raise fail("loss", "a loss model replaces the plain loss rate: give one")


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def schedule_fault(s: Any) -> tuple[int, str] | None:
    """The first fault of a schedule as (point index, what), the index -1 for the whole
    series; None when it is sound: times from 0 up to the horizon, never decreasing, at
    least one column, each with a value per point in its range."""
    if not isinstance(s, Schedule):
        return -1, "not a schedule"
    if not isinstance(s.times_s, tuple) or not s.times_s:
        return -1, "no point"
    cols = {c: getattr(s, c) for c in ("delay_s", "bandwidth_bps", "loss")
            if getattr(s, c) is not None}
    if not cols:
        return -1, "no column: give delay, bandwidth or loss"
    if not isinstance(s.linear, bool) or not isinstance(s.loop, bool):
        return -1, "linear and loop are true or false"
    for c, v in cols.items():
        if not isinstance(v, tuple) or len(v) != len(s.times_s):
            return -1, f"{len(s.times_s)} times but the {c.split('_')[0]} column has " \
                       f"{len(v) if isinstance(v, tuple) else 'no'} values"
    last = 0.0
    for i, t in enumerate(s.times_s):
        if not _num(t) or t < 0:
            return i, f"time {t!r} is not a time since the start (0 or more seconds)"
        if t > HORIZON_S:
            return i, f"time {t!r} s is beyond {HORIZON_S:.0f} s"
        if t < last:
            return i, f"time {t!r} s comes before the previous point's ({last!r} s)"
        last = t
        if s.loop and i == len(s.times_s) - 1 and t <= 0:
            return i, "a looped schedule's last time is its period: it must be after 0"
        for c, v in cols.items():
            x = v[i]
            if c == "delay_s" and not (_num(x) and 0 <= x <= MAX_DELAY_S):
                return i, f"delay {x!r} s out of range 0..10s"
            if c == "bandwidth_bps" and not (isinstance(x, int) and not isinstance(x, bool)
                                             and 0 < x <= MAX_BANDWIDTH_BPS):
                return i, f"bandwidth {x!r} bit/s out of range (above 0, at most 100Gb)"
            if c == "loss" and not (_prob_ok(x) and _num(x)):
                return i, f"loss {x!r} is not a probability in 0..1"
    return None


def _check_params(p: LinkParams, where: str, src: Source) -> None:
    if not isinstance(p.bandwidth_bps, int) or not 0 <= p.bandwidth_bps <= MAX_BANDWIDTH_BPS:
        raise _err(f"bandwidth {p.bandwidth_bps!r} bit/s out of range (0 = unlimited, "
                   f"at most 100Gb)", src, where)
    if not 0 <= p.delay_s <= MAX_DELAY_S:
        raise _err(f"delay {p.delay_s!r} s out of range 0..10s", src, where)
    if not 0 <= p.loss <= 1:
        raise _err(f"loss {p.loss!r} is not a probability in 0..1", src, where)
    check_impairments(p, where, src)
    q = p.queue
    if q.kind not in QUEUE_KINDS:
        raise _err(f"queue {q.kind!r} unknown; supported queues are DropTail, RED, GRED",
                   src, where)
    if q.limit is not None and q.limit < 1:
        raise _err(f"queue limit {q.limit} must be at least 1", src, where)
    if q.kind in ("red", "gred"):
        if not 0 <= q.thresh < q.maxthresh:
            raise _err(f"RED thresh_ {q.thresh} must be below maxthresh_ {q.maxthresh}",
                       src, where)
        if q.limit is not None and q.maxthresh > q.limit:
            raise _err(f"RED maxthresh_ {q.maxthresh} exceeds limit_ {q.limit}", src, where)
        if not 0 < q.q_weight <= 1:
            raise _err(f"RED q_weight_ {q.q_weight} must be in (0, 1]", src, where)
        if q.linterm < 1:
            raise _err(f"RED linterm_ {q.linterm} must be at least 1", src, where)


IFNAME_RE = re.compile(r"^[A-Za-z0-9_.:+-]{1,15}$")


def _check_externals(exp: Experiment) -> None:
    """A host interface is bridged into at most one emulated node, which has exactly one
    link or LAN interface; its name is a Linux interface name."""
    used: dict[str, str] = {}
    for n in exp.nodes:
        if n.external is None:
            continue
        where = f"nodes.{n.name}.external"
        if not IFNAME_RE.match(n.external) or n.external in (".", ".."):
            raise _err(f"{n.external!r} is not a network interface name", n.source, where)
        if n.kind != "emulated":
            raise _err("only an emulated node can hold a host interface", n.source, where)
        if n.external in used:
            raise _err(f"interface {n.external!r} is already bridged into node "
                       f"{used[n.external]!r}", n.source, where)
        used[n.external] = n.name
        nets = sum(n.name in (l.a, l.b) for l in exp.links) + \
            sum(any(m.node == n.name for m in lan.members) for lan in exp.lans)
        if nets != 1:
            raise _err(f"a node holding a host interface needs exactly one link or LAN "
                       f"(it is bridged with it), {n.name!r} has {nets}", n.source, where)


def _check_switches(lan: Lan) -> None:
    """A LAN of several switches: every member on one of them, the trunks a tree spanning
    them (a loop would flood broadcast frames for ever), no per-pair channels."""
    if not lan.switches:
        if lan.trunks or lan.blocked or any(m.switch for m in lan.members):
            raise _err(f"LAN {lan.name!r} has trunks or members on switches but no switches",
                       lan.source)
        return
    sw = set(lan.switches)
    if len(sw) != len(lan.switches):
        raise _err(f"LAN {lan.name!r} lists a switch twice", lan.source)
    if lan.pairs:
        raise _err(f"LAN {lan.name!r} of several switches cannot have pair channels",
                   lan.source)
    for m in lan.members:
        if m.switch not in sw:
            raise _err(f"LAN {lan.name!r}: member {m.node!r} is on no switch of the LAN",
                       lan.source)
    parent = {s: s for s in lan.switches}

    def root(s: str) -> str:
        while parent[s] != s:
            s = parent[s]
        return s
    for t in lan.trunks:
        if t.a not in sw or t.b not in sw:
            raise _err(f"LAN {lan.name!r}: trunk {t.name} joins a switch not of the LAN",
                       t.source)
        for d in ("ab", "ba"):
            _check_params(getattr(t, d), f"lans.{lan.name}.trunks.{t.name}.{d}", t.source)
        ra, rb = root(t.a), root(t.b)
        if ra == rb:
            raise _err(f"LAN {lan.name!r}: trunk {t.name} closes a loop of switches", t.source)
        parent[ra] = rb
    for t in lan.blocked:
        if t.a not in sw or t.b not in sw:
            raise _err(f"LAN {lan.name!r}: blocked link {t.name} joins a switch not of the "
                       f"LAN", t.source)
        for d in ("ab", "ba"):      # built too (held down until the tree takes it)
            _check_params(getattr(t, d), f"lans.{lan.name}.blocked.{t.name}.{d}", t.source)
    if len(lan.trunks) != len(sw) - 1:
        raise _err(f"LAN {lan.name!r}: its switches are not all joined by trunks", lan.source)


def _check_pairs(lan: Lan, members: set[str]) -> None:
    """Pair channels join two distinct members, each ordered pair at most once."""
    seen: set[tuple[str, str]] = set()
    if lan.gateway is not None and lan.gateway not in members:
        raise _err(f"LAN {lan.name!r}: gateway {lan.gateway!r} is not a member", lan.source,
                   f"lans.{lan.name}.gateway")
    for p in lan.pairs:
        where = f"lans.{lan.name}.pairs.{p.src}>{p.dst}"
        for end in (p.src, p.dst):
            if end not in members:
                raise _err(f"LAN {lan.name!r}: pair {p.src}>{p.dst}: {end!r} is not a member",
                           lan.source, where)
        if p.src == p.dst:
            raise _err(f"LAN {lan.name!r}: pair {p.src}>{p.dst} joins a node to itself",
                       lan.source, where)
        if (p.src, p.dst) in seen:
            raise _err(f"LAN {lan.name!r}: pair {p.src}>{p.dst} is given twice", lan.source,
                       where)
        seen.add((p.src, p.dst))
        _check_params(p.params, where, lan.source)


def _check_ip(ip: str | None, where: str, src: Source) -> None:
    if ip is None:
        return
    try:
        ipaddress.IPv4Address(ip)
    except ValueError:
        raise _err(f"{ip!r} is not an IPv4 address", src, where) from None


def _check_mask(mask: str | None, where: str, src: Source) -> None:
    if mask is None:
        return
    try:
        ipaddress.IPv4Network(f"0.0.0.0/{mask}")
    except ValueError:
        raise _err(f"{mask!r} is not a netmask", src, where) from None


def _check_unique_addresses(exp: Experiment) -> None:
    """An address given explicitly to two interfaces is an error at its second use (the
    kernel would refuse it at swap-in, far from the line that caused it)."""
    used: dict[str, tuple[str, Source]] = {}
    given = [(ip, f"{node} on link {l.name}", f"links.{l.name}", l.source)
             for l in exp.links for ip, node in ((l.ip_a, l.a), (l.ip_b, l.b))]
    given += [(m.ip, f"{m.node} on LAN {lan.name}", f"lans.{lan.name}.{m.node}", lan.source)
              for lan in exp.lans for m in lan.members]
    for ip, who, where, src in given:
        if not ip:
            continue
        ip = str(ipaddress.IPv4Address(ip))       # one spelling (already checked valid)
        if ip in used:
            first, fsrc = used[ip]
            at = f" ({fsrc.file}:{fsrc.line})" if fsrc.file and fsrc.line else ""
            raise _err(f"address {ip} of {who} is already the address of {first}{at}", src,
                       where)
        used[ip] = (who, src)


def ipv6_prefix_problem(text: str) -> str | None:
    """Why ``text`` cannot be an experiment's IPv6 prefix (None: it can): every link and LAN
    takes a /64 of it, so it is a unicast (global or unique-local) prefix of /64 or shorter."""
    try:
        net = ipaddress.IPv6Network(text)
    except ValueError:
        return f"{text!r} is not an IPv6 prefix (e.g. fd12:3456:789a::/48)"
    if net.prefixlen > 64:
        return (f"IPv6 prefix {net} does not fit: every link and LAN gets a /64 of it, so it "
                f"must be /64 or shorter")
    if net.is_multicast or net.is_link_local or net.supernet_of(ipaddress.IPv6Network("::/96")):
        return f"IPv6 prefix {net} is not a global or unique-local unicast prefix"
    return None


def _check_ipv6(exp: Experiment) -> None:
    """The address families: IPv6 addresses only with ``ipv6`` on, each a unicast address
    given once; the experiment's prefix holds /64s; an IPv6-only experiment gives no IPv4
    addresses and has no edge (it reaches the outside over IPv4)."""
    if exp.ipv6 not in IPV6_MODES:
        raise _err(f"ipv6 {exp.ipv6!r} unknown; write true (dual stack), only or false",
                   exp.source, "ipv6")
    given = [(ip, f"{node} on link {l.name}", f"links.{l.name}.ip6_{end}", l.source)
             for l in exp.links for ip, node, end in ((l.ip6_a, l.a, "a"), (l.ip6_b, l.b, "b"))]
    given += [(m.ip6, f"{m.node} on LAN {lan.name}", f"lans.{lan.name}.{m.node}.ip6",
               lan.source) for lan in exp.lans for m in lan.members]
    given += [(n.loopback6, f"the loopback of {n.name}", f"nodes.{n.name}.loopback6",
               n.source) for n in exp.nodes]
    given = [g for g in given if g[0] is not None]
    if exp.ipv6 == "off":
        if exp.ipv6_prefix is not None:
            raise _err("an IPv6 prefix is given but the experiment has no IPv6 (ipv6: true "
                       "or only)", exp.ipv6_source if exp.ipv6_source.file else exp.source,
                       "ipv6_prefix")
        if given:
            ip, _, where, src = given[0]
            raise _err(f"IPv6 address {ip} is given but the experiment has no IPv6 (ipv6: "
                       f"true or only)", src, where)
        return
    if exp.ipv6_prefix is not None:
        problem = ipv6_prefix_problem(exp.ipv6_prefix)
        if problem:
            raise _err(problem, exp.ipv6_source if exp.ipv6_source.file else exp.source,
                       "ipv6_prefix")
    used: dict[ipaddress.IPv6Address, tuple[str, Source]] = {}
    for ip, who, where, src in given:
        try:
            a = ipaddress.IPv6Address(ip)
        except ValueError:
            raise _err(f"{ip!r} is not an IPv6 address", src, where) from None
        if a.is_multicast or a.is_link_local or a.is_loopback or a.is_unspecified \
                or a.ipv4_mapped is not None:
            raise _err(f"{ip} is not a global or unique-local unicast address", src, where)
        if a in used:
            first, fsrc = used[a]
            at = f" ({fsrc.file}:{fsrc.line})" if fsrc.file and fsrc.line else ""
            raise _err(f"address {a} of {who} is already the address of {first}{at}", src,
                       where)
        used[a] = (who, src)
    if exp.ipv6 != "only":
        return
    for l in exp.links:
        if l.ip_a or l.ip_b or l.netmask:
            raise _err(f"link {l.name!r} gives IPv4 addresses, but the experiment is IPv6 "
                       f"only", l.source, f"links.{l.name}.ips")
    for lan in exp.lans:
        if lan.netmask or any(m.ip for m in lan.members):
            raise _err(f"LAN {lan.name!r} gives IPv4 addresses, but the experiment is IPv6 "
                       f"only", lan.source, f"lans.{lan.name}")
    if exp.edge is not None:
        raise _err("an edge (egress, forwards) reaches the outside over IPv4: not with ipv6 "
                   "only", exp.edge.source, "edge")


def _check_edge(exp: Experiment) -> None:
    """Egress and forwards: on emulated nodes, with static or manual routing; ports in
    range; the gateway and its LAN as the front ends made them; the uplink well formed."""
    e = exp.edge
    for n in exp.nodes:
        if n.egress and n.kind != "emulated":
            raise _err(f"node {n.name}: only an emulated node can have egress (it is "
                       f"{n.kind})", n.source, f"nodes.{n.name}.egress")
        if n.egress and e is None:
            raise _err(f"node {n.name} has egress but the experiment has no edge",
                       n.source, f"nodes.{n.name}.egress")
    if e is None:
        return
    kinds = {n.name: n.kind for n in exp.nodes}
    if kinds.get(e.gateway) != "emulated":
        raise _err(f"edge gateway {e.gateway!r} is not an emulated node", e.source,
                   "edge.gateway")
    lan = next((l for l in exp.lans if l.name == e.lan), None)
    if lan is None or e.gateway not in {m.node for m in lan.members}:
        raise _err(f"edge LAN {e.lan!r} is not a LAN holding the gateway {e.gateway!r}",
                   e.source, "edge.lan")
    if exp.rtproto not in ("static", "manual"):
        raise _err(f"egress and forwards need routing static or manual (the gateway's "
                   f"routes are wanlab's own), not {exp.rtproto}", e.source, "edge")
    on_lan = {m.node for m in lan.members}
    seen: dict[tuple[int, str], str] = {}
    for i, f in enumerate(e.forwards):
        where = f"forwards[{i}]"
        if f.node not in kinds:
            raise _err(f"forward to unknown node {f.node!r}", f.source, where + ".node")
        if kinds[f.node] != "emulated" or f.node == e.gateway:
            raise _err(f"forward to node {f.node!r}: only an emulated node of the "
                       f"experiment can receive one", f.source, where + ".node")
        if f.node not in on_lan:
            raise _err(f"forward to node {f.node!r}: it is not on the edge LAN {e.lan}",
                       f.source, where + ".node")
        if f.proto not in FORWARD_PROTOS:
            raise _err(f"protocol {f.proto!r} unknown; supported are tcp, udp", f.source,
                       where + ".proto")
        for k in ("port", "listen"):
            v = getattr(f, k)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 65535:
                raise _err(f"{k} {v!r} is not a port number (1..65535)", f.source,
                           f"{where}.{k}")
        if (f.listen, f.proto) in seen:
            raise _err(f"{f.proto} port {f.listen} is already forwarded to "
                       f"{seen[(f.listen, f.proto)]}", f.source, where + ".listen")
        seen[(f.listen, f.proto)] = f.node
    if not isinstance(e.wireguard_port, int) or not 0 <= e.wireguard_port <= 65535:
        raise _err(f"WireGuard port {e.wireguard_port!r} is not a port number (1..65535)",
                   e.source, "edge.wireguard")
    if e.interface is None:
        if e.address is not None or e.via is not None:
            raise _err("an uplink address and next hop go with an uplink interface",
                       e.source, "edge.uplink")
        return
    if not IFNAME_RE.match(e.interface) or e.interface in (".", ".."):
        raise _err(f"{e.interface!r} is not a network interface name", e.source,
                   "edge.uplink.interface")
    if any(n.external == e.interface for n in exp.nodes):
        raise _err(f"interface {e.interface!r} is already bridged into a node", e.source,
                   "edge.uplink.interface")
    try:
        net = ipaddress.IPv4Interface(e.address or "")
    except ValueError:
        raise _err(f"uplink address {e.address!r} is not an IPv4 address with a prefix "
                   f"length (e.g. 198.51.100.2/24)", e.source, "edge.uplink.address") from None
    if "/" not in (e.address or "") or net.network.prefixlen > 30:
        raise _err(f"uplink address {e.address!r} needs a prefix length of at most 30",
                   e.source, "edge.uplink.address")
    try:
        via = ipaddress.IPv4Address(e.via or "")
    except ValueError:
        raise _err(f"uplink next hop {e.via!r} is not an IPv4 address", e.source,
                   "edge.uplink.via") from None
    if via not in net.network or via == net.ip:
        raise _err(f"uplink next hop {via} is not another address of {net.network}",
                   e.source, "edge.uplink.via")


def check_parameter_name(name: str, src: Source | None = None) -> str:
    """``name`` if it can be a template parameter (an environment variable), else SpecError."""
    import re
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,63}", name):
        raise _err(f"template parameter name {name!r} is not valid ({PARAMETER_RULE})", src,
                   "parameters")
    if name in RESERVED_PARAMETERS or name.startswith(("LD_", "WANLAB_")):
        raise _err(f"template parameter name {name!r} is reserved (it would change how "
                   f"programs in the nodes run); choose another", src, "parameters")
    return name


def _check_parameters(exp: Experiment) -> None:
    seen: set[str] = set()
    for p in exp.parameters:
        check_parameter_name(p.name, exp.source)
        if p.name in seen:
            raise _err(f"template parameter {p.name!r} is defined twice", exp.source,
                       "parameters")
        seen.add(p.name)
        for what, v in (("default", p.default), ("value", p.value)):
            if not isinstance(v, str) or len(v) > MAX_PARAMETER_VALUE or "\0" in v:
                raise _err(f"template parameter {p.name}: {what} must be text of at most "
                           f"{MAX_PARAMETER_VALUE} characters without NUL", exp.source,
                           "parameters")
    s = exp.swap
    for what, v in (("idle swap", s.idle_s), ("maximum duration", s.max_duration_s)):
        if v is not None and not (isinstance(v, (int, float)) and 0 < v <= HORIZON_S):
            raise _err(f"{what} {v!r}: must be a positive number of seconds (at most "
                       f"{HORIZON_S:g})", exp.source, "swap")
    if s.no_idle_reason is not None and not s.no_idle_reason.strip():
        raise _err("idle swap turned off without a reason", exp.source, "swap")


PACKAGE_RE = re.compile(r"[a-z0-9][a-z0-9+.-]{1,99}")


def _canonical_ref(ref: str) -> bool:
    try:
        return imageref.canonical(ref) == ref
    except SpecError:
        return False


def _check_node_root(n: Node) -> None:
    """A node's image, tarfiles and packages: names and paths that are safe to use."""
    where = f"nodes.{n.name}"
    if n.image is not None and not IMAGE_NAME_RE.fullmatch(n.image) and not (
            imageref.is_ref(n.image) and _canonical_ref(n.image)):
        raise _err(f"node {n.name}: image name {n.image!r} is not valid ({IMAGE_NAME_RULE})",
                   n.source, where + ".image")
    if (n.tarfiles or n.packages) and n.image is None:
        raise _err(f"node {n.name}: tarfiles and packages go into a node's own root: give it "
                   f"an image (tb-set-node-os, image:)", n.source, where)
    if n.kind == "simulated" and n.image is not None:
        raise _err(f"node {n.name}: a simulated node has no file system (no image)",
                   n.source, where + ".image")
    for d, tarball in n.tarfiles:
        d = d[1:] if d.startswith("=/") else d      # "=PATH": a copy to exactly PATH
        if not d.startswith("/") or posixpath.normpath(d) != (d.rstrip("/") or "/") or "\n" in d:
            raise _err(f"node {n.name}: tarfile folder {d!r} must be an absolute path "
                       f"without '..'", n.source, where + ".tarfiles")
        if not tarball.startswith("/") or "\n" in tarball:
            raise _err(f"node {n.name}: tarball {tarball!r} must be an absolute path",
                       n.source, where + ".tarfiles")
    for k, v in n.env:
        if not _ENV_NAME.match(k) or "\x00" in v:
            raise _err(f"node {n.name}: environment variable {k!r} is not a name (letters, "
                       f"digits, '_') with a value", n.source, where + ".env")
    if n.user is not None and not USER_RE.fullmatch(n.user):
        raise _err(f"node {n.name}: user {n.user!r} is not a user (a name or id, then "
                   f"':' and a group's name or id if any)", n.source, where + ".user")
    for argv, what in ((n.entrypoint, "entrypoint"), (n.cmd, "cmd")):
        if argv is not None and any("\x00" in a or "\n" in a for a in argv):
            raise _err(f"node {n.name}: {what} has a newline or NUL", n.source,
                       f"{where}.{what}")
    for p in n.packages:
        if not PACKAGE_RE.fullmatch(p) and not (p.startswith("/") and p.endswith(".deb")):
            raise _err(f"node {n.name}: {p!r} is neither a Debian package name nor the path "
                       f"of a .deb file", n.source, where + ".packages")


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# a container's user: NAME or UID, optionally :GROUP or :GID (becomes a setpriv argument)
USER_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?")
_IFNAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,14}$")


def _check_ifnames(exp: Experiment) -> None:
    """Interface names given by the description: a Linux name (at most 15 characters, no
    '/'), not ``lo``, each once per node."""
    mine: dict[str, set[str]] = {}
    given = [(l.a, l.ifnames[0], l.name, l.source) for l in exp.links] + \
        [(l.b, l.ifnames[1], l.name, l.source) for l in exp.links] + \
        [(m.node, m.ifname, lan.name, lan.source) for lan in exp.lans for m in lan.members]
    for node, ifname, net, src in given:
        if ifname is None:
            continue
        if not isinstance(ifname, str) or not _IFNAME.match(ifname) or ifname == "lo":
            raise _err(f"{net}: interface name {ifname!r} of {node} is not a Linux "
                       f"interface name (a letter, then up to 14 letters, digits, '_', '.', "
                       f"'-'; not lo)", src, f"{net}.ifname")
        if ifname in mine.setdefault(node, set()):
            raise _err(f"{net}: node {node} has interface {ifname} twice", src,
                       f"{net}.ifname")
        mine[node].add(ifname)


def _check_loop_link(exp: Experiment, l: Link) -> None:
    """A link from a node to itself is a cable between two of its ports (the OpenFlow
    switches that share one node, Mininet's switch-to-switch links): its two interfaces
    named, no addresses (the planner gives it none), on an emulated node, with no routing
    daemon to run over it."""
    node = next(n for n in exp.nodes if n.name == l.a)
    if not (l.ifnames[0] and l.ifnames[1]):
        why = "only a link that names its two interfaces may (a cable between two ports)"
    elif any((l.ip_a, l.ip_b, l.ip6_a, l.ip6_b, l.netmask)):
        why = "such a link has no addresses (it joins two ports of one node)"
    elif node.kind != "emulated" or node.external:
        why = "only an emulated node without a host interface may have such a link"
    elif exp.rtproto in DYNAMIC_RTPROTOS or l.rules:
        why = (f"routing {exp.rtproto}" if not l.rules else "per-destination rules") + \
            " cannot run over such a link (it has no addresses)"
    else:
        return
    raise _err(f"link {l.name!r} joins node {l.a!r} to itself: {why}", l.source)


def validate(exp: Experiment) -> Experiment:
    """Check an experiment is realizable; raise :class:`SpecError` naming the culprit."""
    seen: dict[str, str] = {}

    def claim(name: str, what: str, src: Source) -> None:
        if not is_valid(name):
            raise _err(f"{what} name {name!r} is not a valid name ({NAME_RULE})", src)
        if name in seen:
            raise _err(f"{what} name {name!r} already names a {seen[name]}", src)
        seen[name] = what

    if not is_valid(exp.name):
        raise _err(f"experiment name {exp.name!r} is not a valid name ({NAME_RULE})",
                   exp.source, "name")
    if not 1 <= exp.ospf_hello_s < exp.ospf_dead_s <= 65535:
        raise _err(f"OSPF timers hello {exp.ospf_hello_s} s / dead {exp.ospf_dead_s} s: need "
                   f"1 <= hello < dead <= 65535", exp.source)
    if exp.rtproto not in RTPROTOS:
        raise _err(f"routing protocol {exp.rtproto!r} unknown; supported are "
                   f"{', '.join(RTPROTOS)}", exp.source)
    if exp.engine_cores is not None:
        check_engine_cores(exp.engine_cores, exp.source, "engine.cores")
    for n in exp.nodes:
        claim(n.name, "node", n.source)
        if n.loopback is not None:
            try:
                ipaddress.IPv4Address(n.loopback)
            except ValueError:
                raise _err(f"node {n.name}: loopback {n.loopback!r} is not an IPv4 address",
                           n.source, f"nodes.{n.name}.loopback") from None
        if n.kind not in NODE_KINDS:
            raise _err(f"node kind {n.kind!r} unknown; supported kinds are "
                       f"{', '.join(NODE_KINDS)}", n.source, f"nodes.{n.name}.kind")
        _check_node_root(n)
        check_resources(n)
    _check_externals(exp)
    nodes = {n.name for n in exp.nodes}
    pairs: set[frozenset[str]] = set()
    for l in exp.links:
        claim(l.name, "link", l.source)
        for end in (l.a, l.b):
            if end not in nodes:
                raise _err(f"link {l.name!r} joins unknown node {end!r}", l.source)
        if l.a == l.b:
            _check_loop_link(exp, l)
        pairs.add(frozenset((l.a, l.b)))
        for d in ("ab", "ba"):
            _check_params(getattr(l, d), f"links.{l.name}.{d}", l.source)
        seen_rules: set[ipaddress.IPv4Network | ipaddress.IPv6Network] = set()
        for r in l.rules:
            where = f"links.{l.name}.rules.{r.dst}"
            try:
                net = ipaddress.ip_network(r.dst)
            except ValueError:
                raise _err(f"{r.dst!r} is not an IPv4 or IPv6 prefix (e.g. 10.0.2.0/24, "
                           f"fd00:9::/32)", l.source, where) from None
            if net in seen_rules:
                raise _err(f"prefix {r.dst} has two rules", l.source, where)
            seen_rules.add(net)
            for d in ("ab", "ba"):
                _check_params(getattr(r, d), f"{where}.{d}", l.source)
        _check_ip(l.ip_a, f"links.{l.name}.ip_a", l.source)
        _check_ip(l.ip_b, f"links.{l.name}.ip_b", l.source)
        _check_mask(l.netmask, f"links.{l.name}.netmask", l.source)
        if l.cost < 1:
            raise _err(f"link {l.name!r} cost {l.cost} must be at least 1", l.source)
    _check_ifnames(exp)
    if exp.addressing not in ("auto", "none"):
        raise _err(f"addressing {exp.addressing!r} is auto or none", exp.source, "addressing")
    if exp.addressing == "none" and exp.rtproto != "manual":
        raise _err("links without addresses (addressing none) need manual routing",
                   exp.source, "addressing")
    for lan in exp.lans:
        claim(lan.name, "lan", lan.source)
        if len(lan.members) < 1:
            raise _err(f"LAN {lan.name!r} has no members", lan.source)
        members = [m.node for m in lan.members]
        if len(set(members)) != len(members) and not lan.switches:
            # (a LAN of switches may have several ports of one node: Mininet's multilink)
            raise _err(f"LAN {lan.name!r} lists a node twice", lan.source)
        for m in lan.members:
            if m.node not in nodes:
                raise _err(f"LAN {lan.name!r} has unknown member {m.node!r}", lan.source)
            for d in ("to_lan", "from_lan"):
                _check_params(getattr(m, d), f"lans.{lan.name}.{m.node}.{d}", lan.source)
            _check_ip(m.ip, f"lans.{lan.name}.{m.node}.ip", lan.source)
        _check_mask(lan.netmask, f"lans.{lan.name}.netmask", lan.source)
        _check_pairs(lan, set(members))
        _check_switches(lan)
    simulated = {n.name for n in exp.nodes if n.kind == "simulated"}
    for n in exp.nodes:
        if n.startcmd and n.name in simulated:
            raise _err(f"node {n.name!r} is simulated in the engine: it runs no programs, so "
                       f"no start command", n.source, f"nodes.{n.name}.startcmd")
    for p in exp.programs:
        claim(p.name, "program", p.source)
        if p.node not in nodes:
            raise _err(f"program {p.name!r} is on unknown node {p.node!r}", p.source)
        if p.node in simulated:
            raise _err(f"program {p.name!r} is on node {p.node!r}, which is simulated in the "
                       f"engine and runs no programs", p.source)
    for a in exp.agents:
        claim(a.name, "agent", a.source)
        if a.node is not None and a.node not in nodes:
            raise _err(f"agent {a.name!r} is attached to unknown node {a.node!r}", a.source)
    agents = {a.name for a in exp.agents}
    for a in exp.agents:
        for ref in (a.attached, a.peer):
            if ref is not None and ref not in agents:
                raise _err(f"agent {a.name!r} refers to unknown agent {ref!r}", a.source)
    asn = dict(exp.asns)
    for n, a in exp.asns:
        if n not in nodes:
            raise _err(f"BGP: AS number given for unknown node {n!r}", exp.source, "bgp.as")
        if not 1 <= a <= 4294967295:
            raise _err(f"BGP: AS number {a} of {n!r} out of range", exp.source, "bgp.as")
    neighbours = {frozenset((l.a, l.b)) for l in exp.links} if exp.bgp_sessions else set()
    for lan in exp.lans if exp.bgp_sessions else ():     # pairs: quadratic in a LAN's size
        ms = [m.node for m in lan.members]
        neighbours |= {frozenset((x, y)) for x in ms for y in ms if x != y}
    for sess in exp.bgp_sessions:
        for end in (sess.a, sess.b):
            if end not in asn:
                raise _err(f"BGP session {sess.a}-{sess.b}: node {end!r} has no AS number",
                           exp.source, "bgp.sessions")
        if frozenset((sess.a, sess.b)) not in neighbours:
            raise _err(f"BGP session {sess.a}-{sess.b}: the nodes share no link or LAN "
                       f"(sessions are between direct neighbours)", exp.source, "bgp.sessions")
    if exp.rtproto == "bgp" and set(asn) != nodes:
        missing = ", ".join(sorted(nodes - set(asn)))
        raise _err(f"routing bgp: every node needs an AS number (missing: {missing})",
                   exp.source, "bgp.as")
    if exp.bgp_sessions and exp.rtproto not in ("session", "ospf", "bgp"):
        raise _err("BGP sessions need routing bgp, ospf or session", exp.source, "routing")
    _check_unique_addresses(exp)
    _check_ipv6(exp)
    _check_edge(exp)
    _check_parameters(exp)
    for t in exp.timelines:
        claim(t.name, t.kind, t.source)
    for g in exp.groups:
        claim(g.name, "group", g.source)
    for a in exp.agents:
        check_agent(a)
    kinds = exp.kinds()
    for e in exp.events:
        check_event(exp, e, kinds)
    for t in exp.timelines:
        if t.kind not in ("timeline", "sequence"):
            raise _err(f"{t.name}: kind {t.kind!r} is neither timeline nor sequence", t.source)
        for e in t.events:
            check_event(exp, e, kinds)
    for g in exp.groups:
        for m in g.members:
            if kinds.get(m) in (None, "group", "timeline"):
                raise _err(f"group {g.name}: member {m!r} is not an object events can target",
                           g.source)
    for n in exp.nodes:
        for r in n.routes:
            if not r.dst or not r.via:
                raise _err("route needs a destination and a next hop", n.source,
                           f"nodes.{n.name}.routes")
    return exp


def machine_cpus() -> set[int]:
    """The CPU numbers this machine lets wanlab use (its affinity mask)."""
    return set(os.sched_getaffinity(0))


def check_engine_cores(n: Any, src: Source | None, fld: str) -> None:
    """``engine: {cores: N}``: a whole number of CPUs, from 0 (none reserved) to one fewer
    than this machine lets wanlab use (the nodes need one)."""
    have = len(machine_cpus())
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise _err(f"engine cores {n!r}: a whole number of CPUs to reserve for the engine "
                   f"(0: none)", src, fld)
    if n >= have:
        raise _err(f"engine cores {n}: this machine lets wanlab use {have} CPUs, and the nodes "
                   f"need at least one of them (at most {have - 1})", src, fld)


def cpuset_members(spec: str) -> set[int]:
    """The CPU numbers of a cpuset list such as ``0,2-3``."""
    out: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def check_resources(n: Node) -> None:
    """A node's resource fields are in range, and fit this machine (docs/resources.md)."""
    if (n.cpu_cores, n.cpus, n.cpu_weight, n.memory_bytes, n.pids) == (None,) * 5:
        return
    f = f"nodes.{n.name}"
    if n.kind == "simulated":
        raise _err(f"node {n.name!r} is simulated in the engine: cpu, memory and pids limits "
                   f"apply to emulated nodes only", n.source, f)
    have = machine_cpus()
    if n.cpu_cores is not None:
        if not _num_ok(n.cpu_cores, float, MIN_CPU_CORES):
            raise _err(f"cpu {n.cpu_cores!r} must be at least {MIN_CPU_CORES} cores",
                       n.source, f + ".cpu")
        if n.cpu_cores > len(have):
            raise _err(f"cpu {n.cpu_cores:g} cores: this machine has only {len(have)} CPUs",
                       n.source, f + ".cpu")
    if n.cpus is not None:
        try:
            want = cpuset_members(n.cpus)
        except ValueError:
            raise _err(f"cpus {n.cpus!r} is not a CPU list such as 0-1", n.source,
                       f + ".cpus") from None
        if not want or not want <= have:
            raise _err(f"cpus {n.cpus}: this machine has CPUs {_cpu_list(have)} only",
                       n.source, f + ".cpus")
        if n.cpu_cores is not None and n.cpu_cores > len(want):
            raise _err(f"cpu {n.cpu_cores:g} cores is more than the {len(want)} CPUs it is "
                       f"pinned to ({n.cpus})", n.source, f + ".cpu")
    if n.cpu_weight is not None and not _num_ok(n.cpu_weight, int, 1, 10000):
        raise _err(f"cpu_weight {n.cpu_weight!r} must be an integer in 1..10000 (default 100)",
                   n.source, f + ".cpu_weight")
    if n.memory_bytes is not None and not _num_ok(n.memory_bytes, int, MIN_MEMORY_BYTES):
        raise _err(f"memory {n.memory_bytes!r} bytes is below the least a node can run in "
                   f"({MIN_MEMORY_BYTES >> 20}MB)", n.source, f + ".memory")
    if n.pids is not None and not _num_ok(n.pids, int, MIN_PIDS, MAX_PIDS):
        raise _err(f"pids {n.pids!r} must be an integer in {MIN_PIDS}..{MAX_PIDS} (a node's "
                   f"own plumbing takes a few)", n.source, f + ".pids")


def _cpu_list(cpus: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def _num_ok(v: Any, typ: type, lo: float = 0, hi: float = math.inf) -> bool:
    if isinstance(v, bool) and typ is not bool:
        return False
    if typ is bool:
        return isinstance(v, bool)
    if typ is int and not isinstance(v, int):
        return False
    if not isinstance(v, (int, float)) or not math.isfinite(v):
        return False
    return lo <= v <= hi


def check_agent(a: Agent) -> None:
    """An agent's typed fields are in range (the front ends' normaliser makes them so)."""
    src = a.source
    if a.role not in ("agent", "application"):
        raise _err(f"agent {a.name!r}: role {a.role!r} is neither agent nor application", src)
    t = a.transport
    if t is not None:
        if t.protocol not in TRANSPORTS:
            raise _err(f"agent {a.name!r}: transport {t.protocol!r} unknown", src)
        for f, lo, hi in (("mss", 16, 65495), ("window", 1, 1 << 30),
                          ("window_init", 1, 1 << 20)):
            v = getattr(t, f)
            if v is not None and not _num_ok(v, int, lo, hi):
                raise _err(f"agent {a.name!r}: {f} {v!r} out of range {lo}..{hi}", src)
        if t.min_rto_s is not None and not _num_ok(t.min_rto_s, float, 0, 60):
            raise _err(f"agent {a.name!r}: min_rto_s {t.min_rto_s!r} out of range 0..60", src)
        if t.max_burst is not None and not _num_ok(t.max_burst, int, 0, 1 << 20):
            raise _err(f"agent {a.name!r}: max_burst {t.max_burst!r} out of range 0..{1 << 20}",
                       src)
        if t.tcp_tick_s is not None and not _num_ok(t.tcp_tick_s, float, 0, 1):
            raise _err(f"agent {a.name!r}: tcp_tick_s {t.tcp_tick_s!r} out of range 0..1", src)
        if t.delack_s is not None and not _num_ok(t.delack_s, float, 1e-6, 60):
            raise _err(f"agent {a.name!r}: delack_s {t.delack_s!r} out of range 1e-06..60", src)
    tr = a.traffic
    if tr is not None:
        if tr.pattern not in PATTERNS:
            raise _err(f"application {a.name!r}: traffic {tr.pattern!r} unknown", src)
        for f in TRAFFIC_FIELDS:
            v = getattr(tr, f)
            if v is not None and not _traffic_value_ok(f, v):
                raise _err(f"application {a.name!r}: {f} {v!r} out of range", src)
        if tr.pattern != "ftp" and (tr.rate_bps is None) == (tr.interval_s is None):
            raise _err(f"application {a.name!r}: give a rate or an interval, not both", src)


def _traffic_value_ok(f: str, v: Any) -> bool:
    if f == "packet_size":
        return _num_ok(v, int, 16, 65507)
    if f == "rate_bps":
        return _num_ok(v, int, 1, MAX_BANDWIDTH_BPS)
    if f == "interval_s":
        return _num_ok(v, float, 1e-9, 3600) and v > 0
    if f == "tos":
        return _num_ok(v, int, 0, 255)
    return _num_ok(v, int, 1, 1 << 62)


def queue_value_ok(fld: str, v: Any) -> bool:
    """Whether ``v`` is a valid value of queue field ``fld`` (types of QUEUE_FIELDS)."""
    typ = QUEUE_FIELDS.get(fld)
    if typ is None:
        return False
    if typ is bool:
        return isinstance(v, bool)
    if fld == "limit":
        return _num_ok(v, int, 1, 1_000_000)
    if fld == "mean_pktsize":
        return _num_ok(v, int, 1, 65535)
    return _num_ok(v, typ)


def check_event(exp: Experiment, e: Event, kinds: dict[str, str] | None = None) -> None:
    """An event is well-typed for its target: a known action, a value of the right type
    and range, a direction the target has. Raises SpecError naming the event's line."""
    kinds = kinds if kinds is not None else exp.kinds()
    src = e.source
    if not _num_ok(e.time_s, float, 0, HORIZON_S):      # also refuses NaN
        raise _err(f"event time {e.time_s} s is outside 0..{HORIZON_S:g} s (the "
                   f"experiment's horizon: 10 days)", src)
    kind = kinds.get(e.target)
    if kind is None:
        raise _err(f"event targets unknown object {e.target!r}", src)
    what = f"{kind} {e.target}"
    if kind == "agent":
        raise _err(f"{e.target} is a transport agent; send events to its application", src)
    if kind == "group":
        raise _err(f"{e.target} is an event group: its events go to each member", src)
    if kind == "application":
        app = next(a for a in exp.agents if a.name == e.target)
        if app.traffic is None:
            raise _err(f"application {e.target} ({app.kind}) is not realised by wanlab, so "
                       f"it takes no events", src)
    if e.action not in ACTIONS[kind]:
        raise _err(f"{what}: unknown event {e.action!r}; {kind}s take "
                   f"{', '.join(ACTIONS[kind])}", src)
    a, v = e.action, e.value
    if e.to is not None:
        lan = next((x for x in exp.lans if x.name == e.target), None)
        if lan is None or not any((p.src, p.dst) == (e.member, e.to) for p in lan.pairs):
            raise _err(f"{what}: no pair channel from {e.member!r} to {e.to!r} (a latency "
                       f"matrix's cell)", src)
        if a not in ("bandwidth", "delay", "plr", "impair") or e.dir is not None:
            raise _err(f"{what}: a pair channel takes delay, bandwidth, plr and netem's "
                       f"impairments", src)
    elif e.dir is not None or e.member is not None:
        if kind == "link" and e.member is None and e.dir in ("ab", "ba"):
            pass
        elif kind == "lan" and e.dir in ("to_lan", "from_lan") and e.member is not None:
            lan = next(x for x in exp.lans if x.name == e.target)
            if e.member not in {m.node for m in lan.members}:
                raise _err(f"{what}: {e.member!r} is not a member", src)
        else:
            raise _err(f"{what}: direction {e.dir!r} unknown", src)
        if a not in ("bandwidth", "delay", "plr", "set", "drop", "trace", "impair"):
            raise _err(f"{what}: {a} applies to the whole {kind}, not one direction", src)
    ok = True
    if a in ("up", "down", "start", "stop", "kill", "run", "reset", "reboot", "halt",
             "terminate", "swapout", "stoprun"):
        ok = v is None and e.param is None
    elif a == "bandwidth":
        ok = _num_ok(v, int, 0, MAX_BANDWIDTH_BPS)
    elif a == "delay":
        ok = _num_ok(v, float, 0, MAX_DELAY_S)
    elif a == "plr":
        ok = _num_ok(v, float, 0, 1)
    elif a == "drop":
        ok = _num_ok(v, int, 1, 1000) and e.dir in ("ab", "ba")
    elif a == "trace":
        ok = v in TRACE_OPS
    elif a in ("msg", "log"):
        ok = isinstance(v, str)
    elif a == "set" and kind in ("link", "lan"):
        ok = queue_value_ok(e.param or "", v)
    elif a == "impair":
        ok = impair_value_ok(v)
    elif a == "set" and kind == "application":
        ok = e.param in TRAFFIC_FIELDS and _traffic_value_ok(e.param, v)
    elif a == "set" and kind == "program":
        ok = e.param == "command" and isinstance(v, str)
    if not ok:
        raise _err(f"{what}: bad argument for {a}: {' '.join(e.args()) or '(none)'}", src)
