"""Which CPUs the engine and each node's processes run on (docs/resources.md, "The engine's
cores" and "Nodes on cores").

First the engine's own CPUs (:func:`engine_cores`, before it starts): ``engine: {cores: N}``
reserves N, and without it a machine with at least two CPUs per engine thread gives the
engine one per thread (the last ones), so that the nodes' programs, however busy, never take
the CPU a frame's departure waits for. The engine is confined to them (``--cpus``), and every
node's cgroup is kept off them (policy ``apart``).

The real-time engine runs its partitions on pinned threads, one core each (``stats``'
``partitions``: each partition's ``core`` and the TAP ``ports`` it reads). A node's
programs write into and read from those TAPs, so where they run relative to the partition
that serves them decides how a frame crosses the machine (MX, seed 004: software routers
on one multicore box scale only when placed with the traffic in mind). The policy:

* ``apart`` — CPUs are reserved for the engine, or its cores are pinned and the
  experiment's cgroup has at least as many other CPUs: every node on the other CPUs, so
  the nodes' programs never take time from a partition thread (which then keeps real
  time);
* ``with`` — fewer spare CPUs than engine cores (a small machine): each node on the cores
  of the partitions that read its TAPs, so its frames stay in one core's caches on their
  way in and out of the engine and the node's load follows the allocator's balancing;
  a node without TAPs keeps every CPU;
* ``none`` — the engine is not pinned (one partition, no CPU reserved for it): nodes keep
  every CPU.

A node's own ``cpus`` is never overridden. ``WANLAB_NODE_CPUS`` (``auto``, ``apart``,
``with``, ``none``) forces a policy, for measuring one against another
(``bench/node_cpus.py``); ``apart`` without a spare CPU falls back to ``with``; ``with`` and
``none`` also leave the engine without CPUs of its own unless the description reserves them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from wanlab.errors import WanlabError
from wanlab.model.ir import cpuset_members

POLICIES = ("auto", "apart", "with", "none")
ENV = "WANLAB_NODE_CPUS"


@dataclass(frozen=True)
class Decision:
    """The policy chosen, why, and each placed node's CPUs (nodes not listed keep theirs)."""

    policy: str
    why: str
    cpus: dict[str, frozenset[int]]


def cpulist(cpus: Iterable[int]) -> str:
    """``{0, 1, 2, 5}`` as the kernel writes it: ``0-2,5``."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(set(cpus)):
        if run and c != run[-1] + 1:
            out.append(_span(run))
            run = []
        run.append(c)
    if run:
        out.append(_span(run))
    return ",".join(out)


def _span(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def forced() -> str:
    """The policy ``WANLAB_NODE_CPUS`` asks for (``auto`` when unset)."""
    v = os.environ.get(ENV, "auto").strip() or "auto"
    if v not in POLICIES:
        raise WanlabError(f"{ENV}={v!r}: must be one of {', '.join(POLICIES)}")
    return v


def engine_cores(wanted: int | None, threads: int, allowed: set[int],
                 policy: str = "auto") -> tuple[frozenset[int], str]:
    """The CPUs reserved for an engine of ``threads`` partitions, and why, given the
    description's ``engine: {cores: N}`` (``wanted``; None: not set) and the CPUs wanlab
    may use. Not set: one per thread, the last of ``allowed``, when at least as many are left
    for the nodes (and ``WANLAB_NODE_CPUS`` forces neither ``with`` nor ``none``)."""
    cpus = sorted(allowed)
    if wanted is not None:
        if wanted == 0:
            return frozenset(), "engine: {cores: 0}: none reserved"
        if wanted >= len(cpus):
            raise WanlabError(f"engine.cores: {wanted} CPUs reserved for the engine, but wanlab "
                              f"may use only {len(cpus)} here ({cpulist(cpus)}) and the nodes "
                              f"need at least one")
        mine = frozenset(cpus[-wanted:])
        return mine, f"engine: {{cores: {wanted}}}: nodes on CPUs {cpulist(set(cpus) - mine)}"
    if policy in ("with", "none"):
        return frozenset(), f"{ENV}={policy}: none reserved"
    if len(cpus) < 2 * threads:
        return frozenset(), (f"the default: none reserved, {len(cpus)} CPUs are too few for "
                             f"{threads} engine thread(s) and as many for the nodes")
    mine = frozenset(cpus[-threads:])
    return mine, (f"the default: one per engine thread; nodes on CPUs "
                  f"{cpulist(set(cpus) - mine)}")


def decide(partitions: list[dict], node_ports: dict[str, list[str]], allowed: set[int],
           policy: str = "auto", reserved: Iterable[int] = ()) -> Decision:
    """Place the nodes of ``node_ports`` (node -> its engine port ids; nodes with their own
    ``cpus`` left out by the caller) given the engine's ``partitions`` (its ``stats``), the
    CPUs the experiment's cgroup ``allowed`` and those ``reserved`` for the engine
    (:func:`engine_cores`: every node is kept off them, whatever the policy)."""
    core_of = {port: p["core"] for p in partitions if p.get("core") is not None
               for port in p.get("ports") or []}
    engine = {p["core"] for p in partitions if p.get("core") is not None} & allowed
    mine = set(reserved) & allowed
    if mine and allowed - engine - mine:
        engine |= mine
        spare = allowed - engine
        why = (f"CPUs {cpulist(engine)} reserved for the engine: nodes on CPUs "
               f"{cpulist(spare)}")
        return Decision("apart", why, {n: frozenset(spare) for n in node_ports})
    if policy == "none" or not engine:
        why = "forced" if policy == "none" else \
            "the engine's thread is not pinned (one partition)"
        return Decision("none", f"{why}: nodes on every CPU", {})
    spare = allowed - engine
    if policy == "apart" or (policy == "auto" and spare and len(spare) >= len(engine)):
        if spare:
            why = (f"CPUs {cpulist(engine)} run the engine's partitions and {len(spare)} "
                   f"spare: nodes on CPUs {cpulist(spare)}")
            return Decision("apart", why, {n: frozenset(spare) for n in node_ports})
    out: dict[str, frozenset[int]] = {}
    for n, ports in node_ports.items():
        cores = {core_of[p] for p in ports if p in core_of} & allowed
        if cores:
            out[n] = frozenset(cores)
    why = (f"{len(spare)} CPUs besides the engine's {cpulist(engine)}: each node on the cores "
           f"of the partitions that read its TAPs")
    return Decision("with", why, out)


def allowed_of(experiment_cpuset: str | None) -> set[int]:
    """The CPUs in an experiment cgroup's ``cpuset.cpus`` (empty or unreadable: this
    process's own)."""
    if experiment_cpuset:
        return cpuset_members(experiment_cpuset)
    return set(os.sched_getaffinity(0))
