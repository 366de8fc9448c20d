"""Mapping wide-area requests onto measured sites (Netbed's ``wanassign``, §4.3).

A researcher asks for latency (and optionally bandwidth) between virtual nodes; the
cluster knows the measured latency and bandwidth between its wide-area machines
("sites"). Choosing which site hosts which virtual node is a quadratic assignment
problem, which Netbed solved with a genetic algorithm; so does this module: a population
of injective mappings, tournament selection, a crossover that keeps what both parents
agree on, swap and move mutations, elitism, a pairwise-swap descent on a third of the
children (a memetic GA: plain GA stalled at 70-100 % summed error on 20 nodes of 40 sites
where a perfect mapping exists) and on the final best mapping. A small request (at most
:data:`EXHAUSTIVE_MAX` mappings) is searched exhaustively instead. The result says the
error of every requested pair.

Error of a pair: ``|got - want| / want`` for delay; for bandwidth only a shortfall counts
(``max(0, want - got) / want``: more bandwidth than asked is no harm). NaN in a request
means "don't care".
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from itertools import permutations

import numpy as np

from wanlab.errors import SpecError

# Requests with at most this many one-to-one mappings (7 nodes on 7 sites, 4 on 10) are
# searched exhaustively: exact, and in well under a second, where the GA would spend its
# whole patience confirming an optimum it cannot prove
EXHAUSTIVE_MAX = 5040


@dataclass(frozen=True)
class PairError:
    a: str
    b: str
    metric: str         # "delay" or "bandwidth"
    want: float
    got: float
    error: float        # relative


@dataclass
class WanMapping:
    site_of: dict[str, str]
    pairs: list[PairError]
    total_error: float
    generations: int
    seconds: float

    @property
    def worst(self) -> PairError | None:
        return max(self.pairs, key=lambda p: p.error, default=None)


def _square(name: str, m: np.ndarray, n: int) -> np.ndarray:
    m = np.asarray(m, dtype=float)
    if m.shape != (n, n):
        raise SpecError(f"wanassign: the {name} matrix is {m.shape[0]}x"
                        f"{m.shape[1] if m.ndim > 1 else 1}, expected {n}x{n}")
    return m


def wanassign(nodes: list[str], want_delay: np.ndarray, sites: list[str],
              got_delay: np.ndarray, want_bw: np.ndarray | None = None,
              got_bw: np.ndarray | None = None, seed: int = 1, population: int = 40,
              generations: int = 2000, patience: int = 200,
              local_search: float = 0.3) -> WanMapping:
    """Map ``nodes`` one-to-one onto ``sites`` so the measured matrices match the requested
    ones as closely as possible. Deterministic for a given ``seed``."""
    t0 = time.perf_counter()
    n, m = len(nodes), len(sites)
    if n > m:
        raise SpecError(f"wanassign: {n} wide-area nodes requested, {m} sites available")
    wd = _square("requested delay", want_delay, n)
    gd = _square("measured delay", got_delay, m)
    wb = _square("requested bandwidth", want_bw, n) if want_bw is not None else None
    gb = _square("measured bandwidth", got_bw, m) if got_bw is not None else None
    if (wb is None) != (gb is None):
        raise SpecError("wanassign: bandwidth needs both a request and a measurement")
    off = ~np.eye(n, dtype=bool)
    d_mask = off & np.isfinite(wd) & (wd > 0)
    b_mask = off & np.isfinite(wb) & (wb > 0) if wb is not None else None
    wd_safe = np.where(d_mask, wd, 1.0)
    wb_safe = np.where(b_mask, wb, 1.0) if wb is not None else None

    def cost(s: np.ndarray) -> float:
        got = gd[np.ix_(s, s)]
        c = float(np.sum(np.abs(got - wd_safe)[d_mask] / wd_safe[d_mask]))
        if gb is not None:
            short = np.maximum(0.0, wb_safe - gb[np.ix_(s, s)])
            c += float(np.sum(short[b_mask] / wb_safe[b_mask]))
        return c

    if math.perm(m, n) <= EXHAUSTIVE_MAX:
        best, best_cost, done = *_exhaustive(n, m, cost), 0
    else:
        best, best_cost, done = _evolve(n, m, cost, seed, population, generations,
                                        patience, local_search)
    pairs = []
    for i in range(n):
        for j in range(n):
            if d_mask[i, j]:
                got = float(gd[best[i], best[j]])
                pairs.append(PairError(nodes[i], nodes[j], "delay", float(wd[i, j]), got,
                                       abs(got - wd[i, j]) / wd[i, j]))
            if b_mask is not None and b_mask[i, j]:
                got = float(gb[best[i], best[j]])
                pairs.append(PairError(nodes[i], nodes[j], "bandwidth", float(wb[i, j]), got,
                                       max(0.0, wb[i, j] - got) / wb[i, j]))
    return WanMapping({nodes[i]: sites[int(best[i])] for i in range(n)}, pairs,
                      best_cost, done, time.perf_counter() - t0)


def _exhaustive(n: int, m: int, cost) -> tuple[np.ndarray, float]:
    """The best of every injective mapping (the first in lexicographic order on ties)."""
    best, best_cost = None, float("inf")
    for p in permutations(range(m), n):
        s = np.array(p, dtype=int)
        c = cost(s)
        if c < best_cost - 1e-12:
            best, best_cost = s, c
    return best, best_cost


def _evolve(n: int, m: int, cost, seed: int, population: int, generations: int,
            patience: int, local_search: float) -> tuple[np.ndarray, float, int]:
    """The memetic GA: the best mapping it found, its cost, and the generations it ran."""
    rng = np.random.default_rng(seed)
    pop = [rng.permutation(m)[:n] for _ in range(population)]
    costs = [cost(s) for s in pop]
    best_i = int(np.argmin(costs))
    best, best_cost, stale, done = pop[best_i].copy(), costs[best_i], 0, 0
    for gen in range(1, generations + 1):
        done = gen
        order = np.argsort(costs)
        nxt = [pop[order[0]].copy(), pop[order[1]].copy()]        # elitism
        while len(nxt) < population:
            a, b = (pop[_tournament(costs, rng)] for _ in range(2))
            child = _crossover(a, b, m, rng)
            _mutate(child, m, rng)
            if rng.random() < local_search:     # memetic: some children climb to a local optimum
                child, _ = _descend(child, cost(child), m, cost)
            nxt.append(child)
        pop = nxt
        costs = [cost(s) for s in pop]
        i = int(np.argmin(costs))
        if costs[i] < best_cost - 1e-12:
            best, best_cost, stale = pop[i].copy(), costs[i], 0
        else:
            stale += 1
        if best_cost <= 1e-12 or stale >= patience:
            break
    best, best_cost = _descend(best, best_cost, m, cost)
    return best, best_cost, done


def _tournament(costs: list[float], rng: np.random.Generator, k: int = 3) -> int:
    picks = rng.integers(0, len(costs), size=k)
    return int(min(picks, key=lambda i: costs[i]))


def _crossover(a: np.ndarray, b: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """Keep a's site for a random half of the nodes, b's for the others where that site is
    still free, and a random free site for the rest: the child stays one-to-one."""
    n = len(a)
    child = np.full(n, -1)
    used = np.zeros(m, dtype=bool)
    take_a = rng.random(n) < 0.5
    for i in np.flatnonzero(take_a):
        child[i] = a[i]
        used[a[i]] = True
    for i in np.flatnonzero(~take_a):
        if not used[b[i]]:
            child[i] = b[i]
            used[b[i]] = True
    free = np.flatnonzero(~used)
    rng.shuffle(free)
    holes = np.flatnonzero(child < 0)
    child[holes] = free[:len(holes)]
    return child


def _mutate(s: np.ndarray, m: int, rng: np.random.Generator, rate: float = 0.3) -> None:
    if rng.random() >= rate:
        return
    n = len(s)
    if m > n and rng.random() < 0.5:        # move one node to an unused site
        unused = np.setdiff1d(np.arange(m), s)
        s[rng.integers(n)] = unused[rng.integers(len(unused))]
    elif n > 1:                             # swap two nodes' sites
        i, j = rng.choice(n, size=2, replace=False)
        s[i], s[j] = s[j], s[i]


def _descend(s: np.ndarray, c: float, m: int, cost) -> tuple[np.ndarray, float]:
    """Pairwise swaps (and moves to unused sites) while any improves the mapping."""
    n = len(s)
    improved = True
    while improved and c > 1e-12:
        improved = False
        for i in range(n):
            for j in range(i + 1, n):
                s[i], s[j] = s[j], s[i]
                cc = cost(s)
                if cc < c - 1e-12:
                    c, improved = cc, True
                else:
                    s[i], s[j] = s[j], s[i]
            for site in np.setdiff1d(np.arange(m), s):
                old = s[i]
                s[i] = site
                cc = cost(s)
                if cc < c - 1e-12:
                    c, improved = cc, True
                else:
                    s[i] = old
    return s, c


@dataclass(frozen=True)
class WideAreaRequest:
    """What an experiment asks of the wide area: its wide-area nodes, and for each ordered
    pair joined by a wanlink the one-way delay (s) and bandwidth (bit/s) it wants (NaN:
    no wish)."""

    nodes: list[str]
    delay_s: np.ndarray
    bandwidth_bps: np.ndarray

    def wants_bandwidth(self) -> bool:
        return bool(np.isfinite(self.bandwidth_bps).any())


def wide_area_request(exp) -> WideAreaRequest | None:
    """The wide-area request of ``exp`` (an :class:`~wanlab.model.ir.Experiment`), or None
    when no node is wide-area. A link between two wide-area nodes is a wanlink: its delay
    and bandwidth each way are what the real path between their machines should have."""
    nodes = [n.name for n in exp.nodes if n.wide_area]
    if not nodes:
        return None
    for n in exp.nodes:
        if n.wide_area and n.kind != "emulated":
            raise SpecError(f"node {n.name}: a {n.kind} node cannot be wide-area",
                            n.source.file, n.source.line, "wide_area")
    wide = set(nodes)
    for lan in exp.lans:
        for m in lan.members:
            if m.node in wide:
                raise SpecError(f"LAN {lan.name}: member {m.node} is wide-area; a wide-area "
                                f"node joins other nodes by links, not LANs",
                                lan.source.file, lan.source.line)
    index = {n: i for i, n in enumerate(nodes)}
    k = len(nodes)
    delay = np.full((k, k), np.nan)
    bw = np.full((k, k), np.nan)
    for link in exp.links:
        if link.a in wide and link.b in wide:
            for (x, y), p in (((link.a, link.b), link.ab), ((link.b, link.a), link.ba)):
                i, j = index[x], index[y]
                if p.delay_s > 0:
                    delay[i, j] = p.delay_s
                if p.bandwidth_bps > 0:
                    bw[i, j] = float(p.bandwidth_bps)
    return WideAreaRequest(nodes, delay, bw)


def map_request(req: WideAreaRequest, sites: list[str], one_way_s: np.ndarray,
                bandwidth_bps: np.ndarray | None, seed: int = 1) -> WanMapping:
    """Map a wide-area request onto measured sites (``one_way_s``: the sites' one-way
    delays; ``bandwidth_bps``: their measured bandwidth, None if not measured, in which
    case bandwidth wishes cannot be judged and are refused)."""
    if req.wants_bandwidth() and bandwidth_bps is None:
        raise SpecError("wanassign: wanlinks ask for bandwidth, but the cluster's bandwidth "
                        "between machines was not measured")
    return wanassign(req.nodes, req.delay_s, sites, one_way_s,
                     want_bw=req.bandwidth_bps if req.wants_bandwidth() else None,
                     got_bw=bandwidth_bps if req.wants_bandwidth() else None, seed=seed)
