"""Parallel simulation across the cluster's machines (``wanlab run FILE --simulate --cluster``).

The controller builds the same scenario as a single-process run
(:mod:`wanlab.backends.simulate.runner`), places the nodes on the machines with
:func:`wanlab.plan.placement.assign` weighted for lookahead (long links are cheap to
cut), keeps every link without delay (it would give no lookahead) and every LAN on
one machine, and writes the placement into the scenario (``partition``: node ->
engine rank). Each machine's host agent then runs one ``wanlab-engine simulate`` with
``--rank``; rank 0 listens on its machine's address, the others connect to it, and the
engines run conservative windows with the smallest cut delay as lookahead, exchanging
the frames in flight on cut links over TCP (engine ``driver/remote.rs``; messages between
engines, no MPI). Each engine runs its machine's part on its own threads
(:func:`engine_threads`: ``--threads N``, else the spec's engine threads), cut by the
engine's partitioner as a single engine's ``--threads`` cuts the whole topology; the
threads synchronise among themselves in memory, within the windows over TCP. Rank 0
merges the replicas' statistics exactly as the threads of one engine do, so
``result.json`` is byte for byte the single-process run's for the seed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from wanlab.cluster import agent as agents
from wanlab.cluster import connect
from wanlab.cluster.info import ClusterInfo, current
from wanlab.cluster.sim_engine import RUN_TIMEOUT_S
from wanlab.errors import WanlabError
from wanlab.model.ir import Experiment
from wanlab.plan.placement import Machine, assign
from wanlab.store.db import Store

CONNECT_TIMEOUT_S = 120         # engines finding each other (Ray may start them apart)
PORTS = (20000, 60000)          # the coordinator's port is drawn from here
ATTEMPTS = 3                    # a drawn port already in use: draw again


def _fixed_groups(exp: Experiment) -> list[tuple[list[str], str]]:
    """Nodes that must share a machine, with why: the ends of a link without delay (it
    would give no lookahead) and the members of a LAN (one switch)."""
    parent = {n.name: n.name for n in exp.nodes}
    why: dict[str, str] = {}

    def find(a: str) -> str:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def union(a: str, b: str, reason: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            lo, hi = sorted((ra, rb))
            parent[hi] = lo
            why[lo] = why.get(lo) or why.get(hi) or reason
    for lk in exp.links:
        if min(lk.ab.delay_s, lk.ba.delay_s) <= 0:
            union(lk.a, lk.b, f"link {lk.name} ({lk.a}-{lk.b}) has no delay, so it gives "
                  "no lookahead")
    for lan in exp.lans:
        ms = [m.node for m in lan.members]
        for a, b in zip(ms, ms[1:], strict=False):
            union(a, b, f"LAN {lan.name} is one switch")
    groups: dict[str, list[str]] = {}
    for n in exp.nodes:
        groups.setdefault(find(n.name), []).append(n.name)
    return [(g, why.get(r, "")) for r, g in sorted(groups.items()) if len(g) > 1]


def place(exp: Experiment, machines: list[Machine]) -> dict[str, str]:
    """node -> machine for a simulation over ``machines``: METIS with long links cheap to
    cut, then every group that must stay together moved to the machine of most of its
    members (a pinned member decides; two pins apart are refused by name)."""
    sim = dataclasses.replace(exp, nodes=tuple(dataclasses.replace(n, kind="simulated")
                                               for n in exp.nodes))
    where = {n: m for n, m in assign(sim, machines, lookahead=True).machine_of.items()
             if not n.startswith("lan:")}
    pins = {n.name: n.fixed for n in exp.nodes if n.fixed}
    for group, why in _fixed_groups(exp):
        pinned = sorted({pins[n] for n in group if n in pins})
        if len(pinned) > 1:
            raise WanlabError(f"--cluster: {why}, but its nodes are pinned to machines "
                              f"{' and '.join(pinned)} (tb-fix-node): keep them on one")
        count: dict[str, int] = {}
        for n in group:
            count[where[n]] = count.get(where[n], 0) + 1
        home = pinned[0] if pinned else max(sorted(count), key=lambda k: count[k])
        for n in group:
            where[n] = home
    return where


MAX_THREADS = 1024              # the engine's --threads limit in simulate mode


def engine_threads(exp: Experiment, machines: list, threads: int | None = None) -> list[int]:
    """Threads of each machine's engine, in the order of ``machines``: ``threads``
    (``--threads N``; -1: ``auto``), else the spec's engine threads (YAML ``engine:
    {threads: N}``, ns ``tb-set-engine-threads``), else 1. ``auto``: the machine's cores."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads == 0 or not -1 <= threads <= MAX_THREADS):
        raise WanlabError(f"threads: a number from 1 to {MAX_THREADS} or auto, got "
                          f"{threads!r}")
    want = exp.engine_threads if threads is None else threads
    return [max(1, min(MAX_THREADS, int(m.cores))) if want < 0 else max(1, want)
            for m in machines]


def set_threads(doc: dict, threads: list[int]) -> None:
    """Every engine's threads into the scenario ``doc`` (``rank_threads``, in rank order):
    each engine of a run over several must know every other's partitions."""
    if len(threads) > 1 and any(t > 1 for t in threads):
        doc["rank_threads"] = list(threads)


def engine_argvs(threads: list[int], hub: str) -> list[list[str]]:
    """The command-line arguments of each machine's engine (rank = position) with the
    coordinator at ``hub``."""
    n = len(threads)
    if n == 1:          # one machine (nothing could be cut): its engine runs it alone
        return [["--threads", str(threads[0])] if threads[0] > 1 else []]
    return [["--rank", str(r), "--ranks", str(n), "--listen" if r == 0 else "--connect",
             hub, "--connect-timeout", str(CONNECT_TIMEOUT_S)] for r in range(n)]


def _threads_used(stderr: str) -> int | None:
    """The partitions an engine ran (its log line), fewer than asked where its part of the
    topology could not be cut further."""
    m = re.search(r"this engine: (\d+) thread\(s\)", stderr) or \
        re.search(r"(\d+) thread\(s\), lookahead", stderr)
    return int(m.group(1)) if m else None


def _current(store: Store) -> ClusterInfo:
    info = current(store)
    if info is None:
        raise WanlabError("--cluster: no cluster is up; start one with 'wanlab cluster up "
                          "--local N' (or simulate on this machine without --cluster)")
    return info


def engine_runner(store: Store, exp: Experiment, report: dict[str, Any],
                  threads: int | None = None) -> Callable[[dict, str, str], str]:
    """The hook :func:`wanlab.backends.simulate.runner.simulate` runs the engine with: the
    scenario's nodes placed on the current cluster and one engine per machine used, on
    :func:`engine_threads` threads each. ``report`` receives the placement (node ->
    machine, the machines in rank order) and each machine's threads."""
    info = _current(store)
    machines = [Machine(m.name, m.cores) for m in info.machines]

    def run(doc: dict, scen_path: str, res_path: str) -> str:
        if any(r.get("cmd") == "capture_start" for r in doc["requests"]):
            raise WanlabError("--cluster: a simulation with trace (capture) events runs in "
                              "one engine; drop the traces or run without --cluster")
        where = place(exp, machines)
        used = sorted(set(where.values()), key=[m.name for m in info.machines].index)
        rank = {m: i for i, m in enumerate(used)}
        report.update(machine_of=where, machines=used)
        doc["partition"] = {n: rank[m] for n, m in sorted(where.items())}
        by_name = {m.name: m for m in info.machines}
        ms = [by_name[m] for m in used]
        per_machine = engine_threads(exp, ms, threads)
        set_threads(doc, per_machine)
        text = json.dumps(doc, indent=1)
        with open(scen_path, "w") as f:
            f.write(text)
        outs = _run_ranks(store, info, ms, text, per_machine)
        with open(res_path, "w") as f:
            f.write(outs[0]["result"])
        report["wall_s"] = {m: o["wall_s"] for m, o in zip(used, outs, strict=True)}
        report["threads"] = {m: _threads_used(o["stderr"])
                             for m, o in zip(used, outs, strict=True)}
        return outs[0]["stderr"]
    return run


def _run_ranks(store: Store, info: ClusterInfo, machines: list, text: str,
               threads: list[int]) -> list[dict]:
    """One engine per machine (rank = position) on ``threads`` threads each, through the
    machines' agents; a port already taken on the coordinator's machine is drawn again."""
    import random
    run = f"sim-{secrets.token_hex(6)}"
    last = ""
    with connect.session(info):
        handles = [agents.agent(info, m, agents.machine_home(store.home, m.name))
                   for m in machines]
        for _ in range(ATTEMPTS):
            hub = f"{machines[0].address}:{random.randint(*PORTS)}"
            refs = [h.simulate_part.remote(f"{run}-{r}", text, argv) for r, (h, argv)
                    in enumerate(zip(handles, engine_argvs(threads, hub), strict=True))]
            with ThreadPoolExecutor(len(refs)) as pool:
                outs = list(pool.map(lambda ref: _get(ref), refs))
            if all(o["rc"] == 0 for o in outs) and outs[0]["result"] is not None:
                return outs
            failed = [(r, m, o) for r, (m, o) in enumerate(zip(machines, outs, strict=True))
                      if o["rc"] != 0]
            last = "; ".join(f"{m.name} (rank {r}): {_last_line(o['stderr'])}"
                             for r, m, o in failed)
            if "in use" not in outs[0]["stderr"]:
                break
    raise WanlabError(f"the simulation on the cluster failed: {last}")


def _get(ref: Any) -> Any:
    from wanlab.cluster.experiment import _get as get
    return get(ref, timeout=RUN_TIMEOUT_S + 60)


def _last_line(s: str) -> str:
    lines = [x for x in s.strip().splitlines() if x.strip()]
    return lines[-1].removeprefix("wanlab-engine simulate: ") if lines else "no output"


def simulate(lab: Any, exp: Experiment, out: str | None = None, seed: int | None = None,
             duration_s: float | None = None, plot: bool = True,
             threads: int | None = None) -> dict[str, Any]:
    """``lab.simulate`` with one engine per machine of the current cluster, each on
    ``threads`` threads (:func:`engine_threads`); the summary also says where each node ran
    (``cluster``: machine_of, machines in rank order, each engine's wall time and the
    threads it ran)."""
    report: dict[str, Any] = {}
    s = lab.simulate(exp, out=out, seed=seed, duration_s=duration_s,
                     engine=engine_runner(lab.store, exp, report, threads))
    s["cluster"] = report
    with open(os.path.join(s["folder"], "summary.json"), "w") as f:
        json.dump(s, f, indent=1)
    return s
