"""Placing an experiment's nodes on machines (Netbed's ``assign``), with METIS.

The experiment becomes a weighted graph: a vertex per node (its weight the CPU it is
expected to cost: a base, its share of the traffic its links can carry, a routing daemon)
and per LAN (the LAN's switch lives in one machine's engine), an edge per link or LAN
attachment (its weight the bandwidth a cut would carry between machines). METIS splits it
into one part per machine, with target part weights proportional to each machine's cores;
the parts are then given to machines so that as many pinned nodes (``tb-fix-node``) as
possible are already where they must be, and a repair pass moves the rest (pinned nodes,
nodes whose hardware type a machine lacks, machines over capacity) greedily, cheapest cut
first. An experiment that cannot fit is refused with the numbers.

For virtual-time runs a cut link with a long delay is cheap (its delay is the lookahead
the partitions synchronise on), so ``lookahead`` divides a link's weight by its delay.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from wanlab.errors import SpecError
from wanlab.model.ir import Experiment

# Cost model (cores and bytes); deliberately simple and documented in docs/cluster.md.
NODE_BASE_CORES = 0.001         # an idle namespace and its holder (10 000 fit a core)
ROUTER_DAEMON_CORES = 0.05      # FRR's zebra + ospfd/bgpd
ENGINE_BPS_PER_CORE = 2e9       # what one engine core forwards (validate --quick: ~2-20 Gbit/s)
LINK_UTILISATION = 0.1          # the share of a shaped link's bandwidth assumed busy on average
UNLIMITED_BPS = 10e9            # cut weight of a link without a bandwidth limit (no CPU charge:
                                # its traffic is whatever its programs send)
SIMULATED_NODE_CORES = 0.0005   # a node simulated inside the engine
NODE_MEMORY = 8 << 20           # a namespace, its holder and its start command, roughly
ROUTER_MEMORY = 48 << 20        # FRR's daemons


@dataclass(frozen=True)
class Machine:
    """One machine of a cluster, as the placer sees it."""

    name: str
    cores: float
    memory_bytes: int = 1 << 40
    types: frozenset[str] = frozenset({"pc"})   # hardware types it can host (tb-set-hardware)


@dataclass
class Placement:
    """Where each node (and LAN switch) runs, and what the choice costs."""

    machine_of: dict[str, str]
    cut_bps: float                  # bandwidth of the links cut between machines
    load: dict[str, float]          # cores expected on each machine
    memory: dict[str, int]
    method: str
    seconds: float
    notes: list[str] = field(default_factory=list)

    def nodes_on(self, machine: str) -> list[str]:
        return sorted(n for n, m in self.machine_of.items() if m == machine)


@dataclass
class _Graph:
    names: list[str]
    weight: list[float]                      # cores
    memory: list[int]
    kinds: list[str]                         # hardware type wanted ("pc" unless told)
    edges: dict[tuple[int, int], float]      # i < j -> cut weight (bit/s, or scaled)
    bps: dict[tuple[int, int], float]        # i < j -> bandwidth a cut carries

    def neighbours(self) -> list[list[tuple[int, float]]]:
        adj: list[list[tuple[int, float]]] = [[] for _ in self.names]
        for (i, j), w in self.edges.items():
            adj[i].append((j, w))
            adj[j].append((i, w))
        return adj


def _bps(bw: int) -> float:
    return float(bw) if bw > 0 else UNLIMITED_BPS


def experiment_graph(exp: Experiment, lookahead: bool = False) -> _Graph:
    """The weighted graph of ``exp`` (LANs as switch vertices named ``lan:NAME``)."""
    names = [n.name for n in exp.nodes] + [f"lan:{lan.name}" for lan in exp.lans]
    index = {n: i for i, n in enumerate(names)}
    routed = exp.rtproto in ("session", "ospf", "bgp") or bool(exp.bgp_sessions)
    weight, memory, kinds = [], [], []
    for n in exp.nodes:
        sim = n.kind == "simulated"
        weight.append(SIMULATED_NODE_CORES if sim else
                      NODE_BASE_CORES + (ROUTER_DAEMON_CORES if routed else 0.0))
        memory.append(0 if sim else NODE_MEMORY + (ROUTER_MEMORY if routed else 0))
        kinds.append(n.hardware or "pc")
    for _ in exp.lans:
        weight.append(0.0)
        memory.append(0)
        kinds.append("switch")
    edges: dict[tuple[int, int], float] = {}
    bps: dict[tuple[int, int], float] = {}

    def add(a: str, b: str, bw: float, delay: float) -> None:
        i, j = sorted((index[a], index[b]))
        if i == j:
            return
        # the engine's forwarding cost of a shaped link, half charged to each end
        if bw < UNLIMITED_BPS:
            share = bw * LINK_UTILISATION / ENGINE_BPS_PER_CORE / 2
            weight[i] += share
            weight[j] += share
        w = bw / (1.0 + 1e3 * delay) if lookahead else bw
        edges[(i, j)] = edges.get((i, j), 0.0) + w
        bps[(i, j)] = bps.get((i, j), 0.0) + bw

    for link in exp.links:
        add(link.a, link.b, max(_bps(link.ab.bandwidth_bps), _bps(link.ba.bandwidth_bps)),
            min(link.ab.delay_s, link.ba.delay_s))
    for lan in exp.lans:
        for m in lan.members:
            bw = max(_bps(m.to_lan.bandwidth_bps or lan.bandwidth_bps),
                     _bps(m.from_lan.bandwidth_bps or lan.bandwidth_bps))
            add(m.node, f"lan:{lan.name}", bw, lan.delay_s / 2)
    return _Graph(names, weight, memory, kinds, edges, bps)


def assign(exp: Experiment, machines: list[Machine], fixed: dict[str, str] | None = None,
           lookahead: bool = False, together: list[list[str]] | None = None) -> Placement:
    """Map every node of ``exp`` onto ``machines``, minimising the cut bandwidth under the
    machines' capacities; ``fixed`` pins nodes (``tb-fix-node``); each group of
    ``together`` (nodes and ``lan:NAME`` switches) lands whole on one machine. Raises
    SpecError when the experiment cannot fit or a pin names an unknown node or machine."""
    t0 = time.perf_counter()
    if not machines:
        raise SpecError("placement: the cluster has no machines")
    g = experiment_graph(exp, lookahead)
    fixed = {**{n.name: n.fixed for n in exp.nodes if n.fixed}, **(fixed or {})}
    _check_request(exp, g, machines, fixed)
    if together:
        g, members, fixed = _contract(g, together, fixed)
        placed = _assign_graph(g, machines, fixed, t0)
        placed.machine_of = {n: placed.machine_of[v] for v, ns in members.items()
                             for n in ns}
        return placed
    return _assign_graph(g, machines, fixed, t0)


def _assign_graph(g: _Graph, machines: list[Machine], fixed: dict[str, str],
                  t0: float) -> Placement:
    names_m = [m.name for m in machines]
    if len(machines) == 1 or len(g.names) <= 1:
        part = [0] * len(g.names)
        method = "single machine"
    else:
        part = _metis(g, machines)
        part = _match_parts(part, g, machines, fixed)
        method = "metis"
    part = _repair(part, g, machines, fixed)
    return _result(part, g, machines, names_m, method, time.perf_counter() - t0)


def round_robin(exp: Experiment, machines: list[Machine]) -> Placement:
    """The naive placement (node i on machine i mod M), the baseline of bench/placement.py."""
    t0 = time.perf_counter()
    g = experiment_graph(exp)
    part = [i % len(machines) for i in range(len(g.names))]
    return _result(part, g, machines, [m.name for m in machines], "round-robin",
                   time.perf_counter() - t0)


def pieces(exp: Experiment) -> list[list[str]]:
    """What an emulation keeps on one machine (:func:`assign`'s ``together``): each LAN
    with its members (``lan:NAME``: one switch, in one engine), each connected piece of
    simulated nodes (they are routers and hosts inside one engine, which a cut between
    machines cannot split), and the two simulated ends of a traffic agent's flow (one
    engine runs its source and its sink). Groups that share a node are one."""
    parent: dict[str, str] = {}

    def find(a: str) -> str:
        parent.setdefault(a, a)
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[rb] = ra
    simulated = {n.name for n in exp.nodes if n.kind == "simulated"}
    for link in exp.links:
        if link.a in simulated and link.b in simulated:
            union(link.a, link.b)
    for lan in exp.lans:
        for m in lan.members:
            union(f"lan:{lan.name}", m.node)
    agents = {a.name: a for a in exp.agents}
    for a in exp.agents:
        peer = agents.get(a.peer or "")
        if a.node in simulated and peer is not None and peer.node in simulated:
            union(a.node, peer.node)
    order = [n.name for n in exp.nodes] + [f"lan:{lan.name}" for lan in exp.lans]
    groups: dict[str, list[str]] = {}
    for n in order:
        if n in parent:
            groups.setdefault(find(n), []).append(n)
    return [g for g in groups.values() if len(g) > 1]


# -- steps ---------------------------------------------------------------------------------
def _contract(g: _Graph, together: list[list[str]], fixed: dict[str, str]) -> tuple[
        _Graph, dict[str, list[str]], dict[str, str]]:
    """``g`` with each group of ``together`` one vertex (named by its first member; its
    weight and memory the group's sum, its edges the sums of its members' edges leaving
    it); returns the graph, vertex -> the names it stands for, and the pins moved onto
    the vertices (two members pinned to different machines are refused by name)."""
    rep = {n: n for n in g.names}
    for group in together:
        for n in group:
            rep[n] = group[0]
    names = [n for n in g.names if rep[n] == n]
    index = {n: i for i, n in enumerate(names)}
    weight, memory = [0.0] * len(names), [0] * len(names)
    kinds: list[str] = [""] * len(names)
    members: dict[str, list[str]] = {n: [] for n in names}
    for i, n in enumerate(g.names):
        k = index[rep[n]]
        weight[k] += g.weight[i]
        memory[k] += g.memory[i]
        members[rep[n]].append(n)
        # a group's hardware type is its nodes' (a switch goes wherever its nodes go)
        if kinds[k] in ("", "switch"):
            kinds[k] = g.kinds[i]
        elif g.kinds[i] not in ("switch", kinds[k]):
            raise SpecError(f"placement: {members[rep[n]][0]!r} and {n!r} must share a "
                            f"machine but want hardware types {kinds[k]!r} and "
                            f"{g.kinds[i]!r}")
    edges: dict[tuple[int, int], float] = {}
    bps: dict[tuple[int, int], float] = {}
    for (i, j), w in g.edges.items():
        a, b = sorted((index[rep[g.names[i]]], index[rep[g.names[j]]]))
        if a != b:
            edges[(a, b)] = edges.get((a, b), 0.0) + w
            bps[(a, b)] = bps.get((a, b), 0.0) + g.bps[(i, j)]
    pins: dict[str, str] = {}
    for n, m in fixed.items():
        v = rep[n]
        if pins.get(v, m) != m:
            raise SpecError(f"placement: {n!r} is fixed to machine {m!r} but must share a "
                            f"machine with nodes fixed to {pins[v]!r} ({', '.join(members[v])})")
        pins[v] = m
    return _Graph(names, weight, memory, kinds, edges, bps), members, pins


def _check_request(exp: Experiment, g: _Graph, machines: list[Machine],
                   fixed: dict[str, str]) -> None:
    known_m = {m.name: m for m in machines}
    nodes = {n.name for n in exp.nodes}
    for node, mach in fixed.items():
        if node not in nodes:
            raise SpecError(f"placement: tb-fix-node names {node!r}, which is not a node")
        if mach not in known_m:
            raise SpecError(f"placement: node {node!r} is fixed to machine {mach!r}, which "
                            f"is not in the cluster ({', '.join(sorted(known_m))})")
    for i, kind in enumerate(g.kinds):
        if kind != "switch" and not any(kind in m.types for m in machines):
            raise SpecError(f"placement: node {g.names[i]!r} wants hardware type {kind!r}, "
                            f"which no machine offers")
    need_cores, have_cores = sum(g.weight), sum(m.cores for m in machines)
    need_mem, have_mem = sum(g.memory), sum(m.memory_bytes for m in machines)
    if need_cores > have_cores:
        raise SpecError(f"placement: the experiment needs about {need_cores:.2f} cores and "
                        f"the cluster has {have_cores:g}")
    if need_mem > have_mem:
        raise SpecError(f"placement: the experiment needs about {need_mem >> 20} MiB and "
                        f"the cluster has {have_mem >> 20} MiB")


def _metis(g: _Graph, machines: list[Machine]) -> list[int]:
    import pymetis
    n = len(g.names)
    adj = g.neighbours()
    # METIS wants positive integer weights: edges in kbit/s (at least 1), vertices in
    # thousandths of a core (at least 1)
    xadj, adjncy, ew = [0], [], []
    for i in range(n):
        for j, w in adj[i]:
            adjncy.append(j)
            ew.append(max(1, int(w / 1e3)))
        xadj.append(len(adjncy))
    vw = [max(1, int(w * 1e3)) for w in g.weight]
    total = sum(m.cores for m in machines)
    tp = [m.cores / total for m in machines]
    tp[-1] = max(0.0, 1.0 - sum(tp[:-1]))       # sum exactly 1 despite rounding
    if not adjncy:                              # no edges: METIS needs none; balance only
        return _balance_only(g, machines)
    _, parts = pymetis.part_graph(len(machines), pymetis.CSRAdjacency(xadj, adjncy),
                                  vweights=vw, eweights=ew, tpwgts=tp)
    return list(parts)


def _balance_only(g: _Graph, machines: list[Machine]) -> list[int]:
    load = [0.0] * len(machines)
    part = [0] * len(g.names)
    for i in sorted(range(len(g.names)), key=lambda i: -g.weight[i]):
        k = min(range(len(machines)), key=lambda k: load[k] / machines[k].cores)
        part[i] = k
        load[k] += g.weight[i]
    return part


def _match_parts(part: list[int], g: _Graph, machines: list[Machine],
                 fixed: dict[str, str]) -> list[int]:
    """Relabel METIS's parts so pinned nodes already sit on their machines where possible
    (METIS's parts are interchangeable up to their target weights)."""
    if not fixed:
        return part
    import numpy as np
    from scipy.optimize import linear_sum_assignment
    k = len(machines)
    mindex = {m.name: i for i, m in enumerate(machines)}
    index = {n: i for i, n in enumerate(g.names)}
    agree = np.zeros((k, k))
    for node, mach in fixed.items():
        agree[part[index[node]], mindex[mach]] += 1
    rows, cols = linear_sum_assignment(-agree)
    relabel = dict(zip(rows.tolist(), cols.tolist(), strict=True))
    return [relabel[p] for p in part]


def _repair(part: list[int], g: _Graph, machines: list[Machine],
            fixed: dict[str, str]) -> list[int]:
    """Honour pins and hardware types, then move nodes off overloaded machines, each time
    choosing the move that adds the least cut bandwidth."""
    k = len(machines)
    mindex = {m.name: i for i, m in enumerate(machines)}
    index = {n: i for i, n in enumerate(g.names)}
    pinned = {index[n]: mindex[m] for n, m in fixed.items()}
    allowed = [[kk for kk in range(k) if g.kinds[i] == "switch" or g.kinds[i] in
                machines[kk].types] for i in range(len(g.names))]
    for i, kk in pinned.items():
        part[i] = kk
    for i in range(len(g.names)):
        if part[i] not in allowed[i]:
            part[i] = allowed[i][0]
    adj = g.neighbours()
    load = [0.0] * k
    mem = [0] * k
    for i, p in enumerate(part):
        load[p] += g.weight[i]
        mem[p] += g.memory[i]

    def over(kk: int) -> bool:
        return load[kk] > machines[kk].cores + 1e-9 or mem[kk] > machines[kk].memory_bytes

    def gain(i: int, to: int) -> float:     # cut added by moving i to ``to`` (may be < 0)
        return sum(w if part[j] == part[i] else -w if part[j] == to else 0.0
                   for j, w in adj[i])

    for _ in range(len(g.names)):
        bad = [kk for kk in range(k) if over(kk)]
        if not bad:
            break
        src = bad[0]
        best = None
        for i in (i for i, p in enumerate(part) if p == src and i not in pinned):
            for to in allowed[i]:
                if to == src:
                    continue
                if (load[to] + g.weight[i] > machines[to].cores or
                        mem[to] + g.memory[i] > machines[to].memory_bytes):
                    continue
                c = gain(i, to)
                if best is None or c < best[0]:
                    best = (c, i, to)
        if best is None:
            raise SpecError(f"placement: machine {machines[src].name!r} is over capacity "
                            f"({load[src]:.2f} of {machines[src].cores:g} cores, "
                            f"{mem[src] >> 20} of {machines[src].memory_bytes >> 20} MiB) "
                            f"and nothing can move off it (pinned or no room elsewhere)")
        _, i, to = best
        load[part[i]] -= g.weight[i]
        mem[part[i]] -= g.memory[i]
        part[i] = to
        load[to] += g.weight[i]
        mem[to] += g.memory[i]
    return part


def _result(part: list[int], g: _Graph, machines: list[Machine], names_m: list[str],
            method: str, seconds: float) -> Placement:
    load = {m: 0.0 for m in names_m}
    memory = {m: 0 for m in names_m}
    for i, p in enumerate(part):
        load[names_m[p]] += g.weight[i]
        memory[names_m[p]] += g.memory[i]
    cut = sum(bw for (i, j), bw in g.bps.items() if part[i] != part[j])
    return Placement({g.names[i]: names_m[p] for i, p in enumerate(part)},
                     cut if math.isfinite(cut) else float("inf"),
                     load, memory, method, seconds)
