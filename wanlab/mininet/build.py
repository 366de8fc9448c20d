"""A Mininet network's graph as a wanlab experiment (pure: no kernel, no engine).

Mininet's nodes are hosts (anything with a shell: ``Host``, ``Node``, a ``LinuxRouter``,
a ``NAT``) and switches; its links join two interfaces. wanlab realises them so:

* every host is an emulated node (its own namespaces); its interfaces get Mininet's names
  and addresses when the network starts (in the ``mininet`` package's ``net.py``);
* a host-to-host link is an engine link: ``ab`` shapes what the first node sends (its
  interface's ``TCIntf`` parameters), ``ba`` what the second sends;
* switches are the engine's learning switches. The switches joined by switch-to-switch links
  form one switched domain (a tree; a loop is refused, naming the link that closes it,
  unless its switches run a spanning tree: then the links 802.1D would block are built and
  held down, and the ``mininet`` package's ``net.py`` computes the tree again when a link
  between the switches goes down or up),
  and each domain with hosts on it is one IR LAN named after its first switch, whose
  ``switches`` are the domain's and whose ``trunks`` its switch-to-switch links (each
  direction shaped by the sending switch interface's parameters; the engine makes each
  switch a LAN and each trunk a patch, whose directions every crossing flow shares). Each
  host's link to a switch is a LAN member on that switch: ``to_lan`` carries the host
  interface's shaping, ``from_lan`` the switch interface's.

Addresses, MACs and interface names are Mininet's, set on the running nodes; the IR's own
addresses are not used (``rtproto`` manual: no routes but the connected ones, as Mininet).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from wanlab.engine import encode
from wanlab.errors import SpecError
from wanlab.frontends import units
from wanlab.frontends.builder import ExperimentBuilder
from wanlab.model import ir

NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,31}$")
SHAPING_KEYS = ("bw", "delay", "jitter", "loss", "max_queue_size", "use_htb", "speedup",
                "enable_ecn", "enable_red", "use_hfsc", "use_tbf", "latency_ms",
                "enable_gro", "txo", "rxo", "smooth_change", "r2q")


@dataclass
class Shaping:
    """One interface's egress shaping, in Mininet's terms made exact (TCIntf's keys)."""

    bandwidth_bps: int = 0
    delay_s: float = 0.0
    jitter_s: float = 0.0
    loss: float = 0.0            # a probability (Mininet gives percent)
    limit: int | None = None     # max_queue_size, packets

    def params(self) -> ir.LinkParams:
        q = ir.Queue(limit=self.limit) if self.limit else ir.Queue()
        return ir.LinkParams(bandwidth_bps=self.bandwidth_bps, delay_s=self.delay_s,
                             loss=self.loss, queue=q)

    def shaped(self) -> bool:
        return bool(self.bandwidth_bps or self.delay_s or self.jitter_s or self.loss
                    or self.limit)


def shaping(params: dict[str, Any], where: str = "link") -> Shaping:
    """A TCIntf's parameters (``bw`` Mbit/s, ``delay``/``jitter`` as ``'5ms'``, ``loss``
    percent, ``max_queue_size`` packets) as exact values; an unknown key is an error."""
    s = Shaping()
    for k, v in params.items():
        if v is None:
            continue
        f = f"{where}.{k}"
        if k == "bw":
            bw = units.parse_float(v, "bw", field=f)
            if bw < 0:
                raise SpecError(f"bw {v!r} must be at least 0 (Mbit/s)", field=f)
            s.bandwidth_bps = int(round(bw * 1e6))
        elif k in ("delay", "jitter"):
            d = units.parse_delay(v if isinstance(v, str) else f"{v}us", field=f)
            if k == "delay":
                s.delay_s = d
            else:
                s.jitter_s = d
        elif k == "loss":
            pct = units.parse_float(v, "loss", field=f)
            if not 0 <= pct <= 100:
                raise SpecError(f"loss {v!r} must be a percentage, 0 to 100", field=f)
            s.loss = pct / 100.0
        elif k == "max_queue_size":
            s.limit = units.parse_int(v, "max_queue_size", field=f)
        elif k not in SHAPING_KEYS:
            raise SpecError(f"unknown link parameter {k!r}", field=f)
    return s


@dataclass
class MnIntf:
    """One end of a Mininet link, as the mapping sees it."""

    node: str
    name: str
    shaping: Shaping = field(default_factory=Shaping)


@dataclass
class MnLink:
    a: MnIntf
    b: MnIntf
    source: ir.Source = field(default_factory=ir.Source)


@dataclass
class Where:
    """Where an interface lives in the engine: a link direction pair, a LAN member or a
    trunk's end (the member of a switch's engine LAN that is the trunk's patch port)."""

    # "link", "lan" or "trunk" (a patch port's LAN member; blocked ones too)
    kind: str
    target: str                  # the link's or LAN's name
    ifname: str                  # wanlab's interface name in the node (eth0, ...)
    out_dir: str                 # the direction that carries what this interface sends
    in_dir: str                  # ... and what it receives
    member: str | None = None    # the LAN member's port id (``node:ifname``)
    spanning: bool = False       # a trunk of a network that runs a spanning tree (a loop)


@dataclass
class Mapped:
    experiment: ir.Experiment
    # (node, Mininet interface name) -> where it is; switch-side interfaces map to their
    # peer host's entry with the directions swapped
    where: dict[tuple[str, str], Where]
    lan_of_switch: dict[str, str]
    # a switched network with a loop (its switches run a spanning tree): LAN -> its
    # switches and every link between them (each end's ``where`` is a trunk's)
    spanning: dict[str, tuple[list[str], list[MnLink]]] = field(default_factory=dict)


def check_name(name: str, what: str, src: ir.Source | None = None) -> None:
    if not NAME_RE.match(name):
        raise SpecError(f"{what} name {name!r}: wanlab names are a letter, then letters, "
                        f"digits or '-' (at most 32)",
                        file=src.file if src else None, line=src.line if src else None)


def build(name: str, hosts: dict[str, dict[str, Any]], switches: list[str],
          links: list[MnLink], stp: dict[str, int] | None = None) -> Mapped:
    """The experiment of a Mininet graph. ``hosts``: name -> ``{"cpu_cores": float|None,
    "source": ir.Source}``; ``switches``: names in declaration order; ``stp``: the switches
    that run a spanning tree, with their bridge ids (a loop of them is allowed)."""
    stp = stp or {}
    b = ExperimentBuilder(name, routing="manual")
    sw = set(switches)
    for h, info in hosts.items():
        src = info.get("source") or ir.Source()
        check_name(h, "host", src)
        if h in sw:
            raise SpecError(f"{h!r} is both a host and a switch", file=src.file, line=src.line)
        b.node(h, cpu=info.get("cpu_cores"), source=src)
    for s in switches:
        check_name(s, "switch")
    # switched domains: union-find over switch-to-switch links; a link joining two switches
    # already joined closes a loop
    parent = {s: s for s in switches}

    def root(s: str) -> str:
        while parent[s] != s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s
    trunks: list[MnLink] = []
    loops: list[MnLink] = []
    for lk in links:
        for e in (lk.a, lk.b):
            if e.node not in sw and e.node not in hosts:
                raise SpecError(f"link {lk.a.name}<->{lk.b.name}: {e.node!r} is no node of "
                                f"this network", file=lk.source.file, line=lk.source.line)
        if lk.a.node in sw and lk.b.node in sw:
            if lk.a.node == lk.b.node:
                raise SpecError(f"link {lk.a.name}<->{lk.b.name} joins switch {lk.a.node} to "
                                f"itself (a loop)", file=lk.source.file, line=lk.source.line)
            ra, rb = root(lk.a.node), root(lk.b.node)
            if ra == rb:
                loops.append(lk)
            parent[ra] = rb
            trunks.append(lk)
    first = {}
    for s in switches:
        first.setdefault(root(s), s)
    lan_of_switch = {s: first[root(s)] for s in switches}
    # a loop needs every switch of its network to run a spanning tree; then the tree is
    # computed here (and again at run time when a link goes down or up): the links it
    # blocks are built and held down
    looped: dict[str, tuple[list[str], list[MnLink]]] = {}
    blocked: list[tuple[MnLink, bool]] = []
    for lk in loops:
        lan = lan_of_switch[lk.a.node]
        plain_sw = [s for s in switches if lan_of_switch[s] == lan and s not in stp]
        if plain_sw:
            raise SpecError(
                f"link {lk.a.name}<->{lk.b.name} closes a loop of switches, and "
                f"{plain_sw[0]} runs no spanning tree: give the switches stp=True (or "
                f"remove a link to make a tree)", file=lk.source.file, line=lk.source.line)
    for lan in dict.fromkeys(lan_of_switch[lk.a.node] for lk in loops):
        sws = [s for s in switches if lan_of_switch[s] == lan]
        mine = [t for t in trunks if lan_of_switch[t.a.node] == lan]
        tree, off = spanning_tree(sws, mine, stp)
        trunks = [t for t in trunks if lan_of_switch[t.a.node] != lan or
                  any(t is x for x in tree)]
        blocked += off
        looped[lan] = (sws, mine)

    ifcount: dict[str, int] = {h: 0 for h in hosts}
    where: dict[tuple[str, str], Where] = {}
    members: dict[str, list[tuple[str, MnIntf, MnIntf]]] = {}   # lan -> (switch, host, sw)
    plain: list[tuple[MnLink, str]] = []
    # wanlab numbers a node's interfaces links first, then LANs (wanlab.plan)
    for lk in links:
        a_sw, b_sw = lk.a.node in sw, lk.b.node in sw
        if a_sw and b_sw:
            continue
        if not a_sw and not b_sw:
            lname = b.link(lk.a.node, lk.b.node, name=_free(b, f"{lk.a.node}-{lk.b.node}"),
                           source=lk.source)
            pa, pb = lk.a.shaping.params(), lk.b.shaping.params()
            b.direction(lname, lk.a.node, bandwidth=pa.bandwidth_bps, delay=pa.delay_s,
                        loss=pa.loss, queue=pa.queue)
            b.direction(lname, lk.b.node, bandwidth=pb.bandwidth_bps, delay=pb.delay_s,
                        loss=pb.loss, queue=pb.queue)
            plain.append((lk, lname))
            continue
        host, swi = (lk.b, lk.a) if a_sw else (lk.a, lk.b)
        members.setdefault(lan_of_switch[swi.node], []).append((swi.node, host, swi))
    for lk, lname in plain:
        for e, out, inn in ((lk.a, "ab", "ba"), (lk.b, "ba", "ab")):
            ifn = f"eth{ifcount[e.node]}"
            ifcount[e.node] += 1
            where[(e.node, e.name)] = Where("link", lname, ifn, out, inn)
    # each switched network: one LAN of its switches and trunks; a host may have several
    # ports on it (Mininet's multilink), each a member of its own
    domain: dict[str, ir.Lan] = {}
    spanning: dict[str, tuple[list[str], list[MnLink]]] = {}
    for key, ms in members.items():
        lan = b.lan(list(dict.fromkeys(h.node for _, h, _ in ms)), name=_free(b, key))
        sws = tuple(s for s in switches if lan_of_switch[s] == key)
        mem = []
        for swname, h, s in ms:
            ifn = f"eth{ifcount[h.node]}"
            ifcount[h.node] += 1
            port = f"{h.node}:{ifn}"
            mem.append(ir.LanMember(h.node, to_lan=h.shaping.params(),
                                    from_lan=s.shaping.params(), switch=swname))
            target = encode.switch_lan(lan, sws, swname)
            where[(h.node, h.name)] = Where("lan", target, ifn, "to_lan", "from_lan", port)
            where[(swname, s.name)] = Where("lan", target, ifn, "from_lan", "to_lan", port)
        ts = []
        looped_here = key in looped
        if looped_here:
            spanning[lan] = looped[key]
        for t in trunks:
            if t.a.node not in sws:
                continue
            tr = ir.Trunk(t.a.node, t.b.node, t.a.shaping.params(), t.b.shaping.params(),
                          source=t.source, ifnames=(t.a.name, t.b.name))
            ts.append(tr)
            pa, pb = encode.trunk_ports(lan, tr)
            # the trunk's direction a -> b is the from_lan of a's port (what a sends)
            where[(t.a.node, t.a.name)] = Where("trunk", encode.switch_lan(lan, sws, t.a.node),
                                                "", "from_lan", "to_lan", pa, looped_here)
            where[(t.b.node, t.b.name)] = Where("trunk", encode.switch_lan(lan, sws, t.b.node),
                                                "", "from_lan", "to_lan", pb, looped_here)
        off = tuple(_blocked_trunk(t, at_a) for t, at_a in blocked if t.a.node in sws)
        for k, (t, at_a) in enumerate((t, at_a) for t, at_a in blocked if t.a.node in sws):
            # the IR keeps a blocked link with its blocked port at b: x is the other end
            x, y = (t.b, t.a) if at_a else (t.a, t.b)
            px, py = encode.blocked_ports(lan, k, off[k])
            for e, port in ((x, px), (y, py)):
                where[(e.node, e.name)] = Where("trunk", encode.switch_lan(lan, sws, e.node),
                                                "", "from_lan", "to_lan", port, True)
        domain[lan] = ir.Lan(lan, tuple(mem), switches=sws, trunks=tuple(ts), blocked=off)
    exp = b.build()
    exp = ir.validate(replace(exp, lans=tuple(
        replace(x, members=domain[x.name].members, switches=domain[x.name].switches,
                trunks=domain[x.name].trunks, blocked=domain[x.name].blocked)
        for x in exp.lans)))
    return Mapped(exp, where, lan_of_switch, spanning)


def _blocked_trunk(t: MnLink, at_a: bool) -> ir.Trunk:
    """A link the spanning tree blocks, as the IR keeps it: its blocked port at ``b``."""
    x, y = (t.b, t.a) if at_a else (t.a, t.b)
    return ir.Trunk(x.node, y.node, x.shaping.params(), y.shaping.params(), source=t.source,
                    ifnames=(x.name, y.name))


def port_number(intf: str) -> int:
    """Mininet's port number of a switch interface (``s1-eth3``: 3)."""
    m = re.search(r"(\d+)$", intf)
    return int(m.group(1)) if m else 0


def spanning_tree(switches: list[str], links: list[MnLink], bid: dict[str, int]
                  ) -> tuple[list[MnLink], list[tuple[MnLink, bool]]]:
    """802.1D's spanning tree of a network of switches, as it settles (every link costs
    the same): the root is the lowest bridge id; each other switch's root port leads to the
    root in the fewest hops, ties going to the lowest neighbour bridge id, then the lowest
    port number there, then its own. Returns the tree's links and the others, each with
    whether its blocked port is at ``a`` (the end farther from the root; ties: the higher
    bridge id, then the higher port number). Switches that ``links`` leave apart (links
    down) are so many networks, each with a tree and a root of its own."""
    dist: dict[str, int] = {}
    for root in sorted(switches, key=lambda s: (bid[s], s)):
        if root in dist:
            continue
        dist[root] = 0
        todo = [root]
        while todo:
            nxt = []
            for x in todo:
                for lk in links:
                    for u, v in ((lk.a, lk.b), (lk.b, lk.a)):
                        if u.node == x and v.node not in dist:
                            dist[v.node] = dist[x] + 1
                            nxt.append(v.node)
            todo = nxt

    def rank(e: MnIntf) -> tuple[int, int, str, int]:
        return dist[e.node], bid[e.node], e.node, port_number(e.name)
    tree: list[MnLink] = []
    for s in switches:
        if dist[s] == 0:        # a root
            continue
        ends = [(v, u, lk) for lk in links for u, v in ((lk.a, lk.b), (lk.b, lk.a))
                if u.node == s and v.node != s]
        _, _, best = min(ends, key=lambda e: (rank(e[0]), port_number(e[1].name)))
        tree.append(best)
    off = [(lk, rank(lk.a) > rank(lk.b)) for lk in links if not any(lk is t for t in tree)]
    return tree, off


def _free(b: ExperimentBuilder, want: str) -> str:
    n, i = want[:32], 1
    while b._is_taken(n):
        n = f"{want[:28]}-{i}"
        i += 1
    return n


def jitter_requests(m: Mapped, shaped: dict[tuple[str, str], Shaping]) -> list[dict[str, Any]]:
    """Engine ``set`` requests for what the IR has no field for (jitter), per interface."""
    out = []
    for key, s in shaped.items():
        w = m.where.get(key)
        if w is None or not s.jitter_s:
            continue
        req: dict[str, Any] = {"target": w.target, "dir": w.out_dir,
                               "params": {"jitter_us": s.jitter_s * 1e6}}
        if w.member:
            req["member"] = w.member
        out.append(req)
    return out
