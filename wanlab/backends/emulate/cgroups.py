"""Per-node resources through Linux control groups: one cgroup per experiment, one per node
beneath it (docs/resources.md).

Layout: ``<base>/wanlab/<short>-<experiment>/<node>``. With cgroups v2 (the unified
hierarchy holds the cpu, memory and pids controllers) there is one directory per cgroup,
and ``<base>`` is the hierarchy's root, where wanlab enables the controllers in
``cgroup.subtree_control`` (and in its own levels). On a host that still binds those
controllers to cgroups v1 hierarchies (a hybrid layout), the same cgroup is one directory
in each of them (cpu, cpuacct, cpuset, memory, pids), and ``<base>`` is the cgroup the
swap-in runs in, so a node stays inside the host's accounting of whoever started wanlab.
A :class:`Group` maps each controller to its directory; that map is what the store records
(kind ``cgroup``), before any directory is made, and all that teardown removes.

What a node's fields become (the v1 file in brackets):

* ``cpu_cores`` -> ``cpu.max`` quota/period (``cpu.cfs_quota_us``/``cpu.cfs_period_us``)
* ``cpu_weight`` -> ``cpu.weight`` (``cpu.shares``, weight * 1024 / 100)
* ``cpus`` -> ``cpuset.cpus`` (v1: ``cpuset.mems`` copied from the parent, as v1 needs)
* ``memory_bytes`` -> ``memory.max`` and, if the host has swap, ``memory.swap.max`` 0
  (``memory.limit_in_bytes``, ``memory.memsw.limit_in_bytes`` = the same)
* ``pids`` (default :data:`DEFAULT_PIDS`) -> ``pids.max``

``wanlab/`` and each experiment's cgroup have a ``pids.max`` too (:func:`pids_limits`: half
and a quarter of the host's ``kernel.pid_max``), so many nodes together cannot take every pid.

Priority: ``wanlab/`` (all experiments' nodes together) gets the CPU weight
:data:`NODES_CPU_WEIGHT` (``cpu.weight``; v1 ``cpu.shares`` :data:`NODES_CPU_SHARES`) when
wanlab makes it, half a plain process's: where the engine's packet thread does not run at
real-time priority (``WANLAB_ENGINE_RT=off``; :mod:`wanlab.backends.emulate.engine`), the
nodes' programs taken together still rank below it and the host's own processes on a busy
machine. Within an experiment, nodes share by their own ``cpu_weight``.

Membership: a node's holder (:mod:`wanlab.backends.emulate.nodes`) joins the node's cgroup
before it runs anything (:func:`join_argv`), and so does every command that enters the node
later, so start commands, Programs, traffic, FRR and ``exec``/``shell`` are all inside.
The kernel's count of OOM kills (``memory.events`` ``oom_kill``; v1 ``memory.oom_control``)
is read by :func:`oom_kills`; the event scheduler turns a new kill into an event.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass

from wanlab.errors import WanlabError
from wanlab.model.ir import Node

DEFAULT_PIDS = 4096
# All experiments' nodes together (``wanlab/``), and one experiment, may hold at most this
# share of the host's pids (kernel.pid_max): nodes cannot starve the host of processes.
TOP_PIDS_SHARE = 2                          # half
EXPERIMENT_PIDS_SHARE = 4                   # a quarter
CPU_PERIOD_US = 100_000
TOP = "wanlab"
V2_CONTROLLERS = ("cpu", "cpuset", "memory", "pids")
V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids")
REQUIRED = ("cpu", "memory", "pids")        # without these, wanlab makes no cgroups
NODES_CPU_WEIGHT = 50                       # of wanlab/ (v2; the default is 100)
NODES_CPU_SHARES = 512                      # the same for v1 (the default is 1024)
_MOUNTS = "/proc/self/mounts"


@dataclass(frozen=True)
class Hierarchy:
    """Where this host's cgroups are: version 2 (one ``base`` for every controller) or 1
    (a ``base`` per controller). ``base`` is the directory under which ``wanlab/`` goes."""

    version: int
    bases: dict[str, str]       # controller -> base directory

    def dirs(self, *parts: str) -> dict[str, str]:
        return {c: os.path.join(b, TOP, *parts) for c, b in self.bases.items()}


def _mounts() -> list[tuple[str, str, set[str]]]:
    out = []
    with open(_MOUNTS) as f:
        for line in f:
            w = line.split()
            if len(w) >= 4 and w[2] in ("cgroup", "cgroup2"):
                out.append((w[2], w[1].replace("\\040", " "), set(w[3].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """This process's cgroup in each hierarchy: controller (or "" for v2) -> path."""
    out = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            for c in ctrls.split(",") if ctrls else [""]:
                out[c] = path
    return out


def hierarchy() -> Hierarchy | None:
    """This host's cgroups, or None if wanlab cannot use them (no cpu, memory and pids
    controllers anywhere, or not mounted)."""
    mounts = _mounts()
    for typ, path, _ in mounts:
        if typ != "cgroup2":
            continue
        try:
            with open(os.path.join(path, "cgroup.controllers")) as f:
                have = set(f.read().split())
        except OSError:
            continue
        if set(REQUIRED) <= have:
            wanted = [c for c in V2_CONTROLLERS if c in have]
            return Hierarchy(2, {c: path for c in wanted})
    own = _own_paths()
    bases = {}
    for c in V1_CONTROLLERS:
        for typ, path, opts in mounts:
            if typ == "cgroup" and c in opts and c in own:
                bases[c] = os.path.normpath(path + own[c])
                break
    if set(REQUIRED) <= set(bases):
        return Hierarchy(1, bases)
    return None


# -- limits ---------------------------------------------------------------------------

def has_swap() -> bool:
    try:
        with open("/proc/swaps") as f:
            return len(f.read().splitlines()) > 1
    except OSError:
        return False


def settings(version: int, node: Node, swap: bool) -> list[tuple[str, str, str]]:
    """The (controller, file, value) writes that give a node its limits, in order."""
    out: list[tuple[str, str, str]] = []
    pids = node.pids or DEFAULT_PIDS
    if version == 2:
        if node.cpu_cores is not None:
            quota = max(1000, round(node.cpu_cores * CPU_PERIOD_US))
            out.append(("cpu", "cpu.max", f"{quota} {CPU_PERIOD_US}"))
        if node.cpu_weight is not None:
            out.append(("cpu", "cpu.weight", str(node.cpu_weight)))
        if node.cpus is not None:
            out.append(("cpuset", "cpuset.cpus", node.cpus))
        if node.memory_bytes is not None:
            out.append(("memory", "memory.max", str(node.memory_bytes)))
            if swap:
                out.append(("memory", "memory.swap.max", "0"))
        out.append(("pids", "pids.max", str(pids)))
        return out
    if node.cpu_cores is not None:
        quota = max(1000, round(node.cpu_cores * CPU_PERIOD_US))
        out += [("cpu", "cpu.cfs_period_us", str(CPU_PERIOD_US)),
                ("cpu", "cpu.cfs_quota_us", str(quota))]
    if node.cpu_weight is not None:
        out.append(("cpu", "cpu.shares", str(max(2, node.cpu_weight * 1024 // 100))))
    if node.cpus is not None:
        out.append(("cpuset", "cpuset.cpus", node.cpus))
    if node.memory_bytes is not None:
        out.append(("memory", "memory.limit_in_bytes", str(node.memory_bytes)))
        if swap:
            out.append(("memory", "memory.memsw.limit_in_bytes", str(node.memory_bytes)))
    out.append(("pids", "pids.max", str(pids)))
    return out


def limits_of(node: Node) -> tuple:
    return (node.cpu_cores, node.cpus, node.cpu_weight, node.memory_bytes, node.pids)


def update(dirs: dict[str, str], node: Node, swap: bool) -> None:
    """Give a running node's cgroup ``node``'s limits (``modify``): every limit back to
    none (the parent's CPUs), then the new ones."""
    v1 = "cpuacct" in dirs or "cpu.cfs_quota_us" in os.listdir(dirs["cpu"])
    if v1:
        unset = [("memory", "memory.memsw.limit_in_bytes", "-1"),
                 ("memory", "memory.limit_in_bytes", "-1"), ("cpu", "cpu.cfs_quota_us", "-1"),
                 ("cpu", "cpu.shares", "1024")]
    else:
        unset = [("cpu", "cpu.max", f"max {CPU_PERIOD_US}"), ("cpu", "cpu.weight", "100"),
                 ("memory", "memory.max", "max"), ("memory", "memory.swap.max", "max")]
    parent_cpus = os.path.join(os.path.dirname(dirs["cpuset"]), "cpuset.cpus") \
        if "cpuset" in dirs else None
    if parent_cpus:
        unset.append(("cpuset", "cpuset.cpus", _read(parent_cpus) if v1 else ""))
    for c, f, v in unset + settings(1 if v1 else 2, node, swap):
        path = os.path.join(dirs.get(c, ""), f)
        if c in dirs and os.path.exists(path):
            try:
                _write(path, v)
            except OSError as e:
                raise WanlabError(f"node {node.name}: cannot set {f} to {v}: "
                                  f"{e.strerror}") from None


def cpus_of(dirs: dict[str, str]) -> str | None:
    """The CPUs a cgroup's processes may run on (v2: ``cpuset.cpus.effective``, which an
    empty ``cpuset.cpus`` inherits), or None without a cpuset controller."""
    d = dirs.get("cpuset")
    if d is None:
        return None
    for f in ("cpuset.cpus.effective", "cpuset.cpus"):
        with contextlib.suppress(OSError):
            v = _read(os.path.join(d, f))
            if v:
                return v
    return None


def place_cpus(dirs: dict[str, str], node: str, cpus: str) -> None:
    """Put a node's processes on ``cpus`` (the placement of
    :mod:`wanlab.backends.emulate.cpuplace`; a node's own ``cpus`` is written by
    :func:`make_node` instead)."""
    if "cpuset" not in dirs:
        return
    try:
        _write(os.path.join(dirs["cpuset"], "cpuset.cpus"), cpus)
    except OSError as e:
        raise WanlabError(f"node {node}: cannot place it on CPUs {cpus}: {e.strerror}") from None


def asks_for_limits(node: Node) -> bool:
    return any(v is not None for v in (node.cpu_cores, node.cpus, node.cpu_weight,
                                       node.memory_bytes, node.pids))


# -- making and removing --------------------------------------------------------------

def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def _enable(d: str, controllers: Iterable[str]) -> None:
    """Enable ``controllers`` for the children of v2 cgroup ``d`` (those it has)."""
    have = set(_read(os.path.join(d, "cgroup.controllers")).split())
    on = set(_read(os.path.join(d, "cgroup.subtree_control")).split())
    missing = [c for c in controllers if c in have and c not in on]
    if missing:
        try:
            _write(os.path.join(d, "cgroup.subtree_control"),
                   " ".join("+" + c for c in missing))
        except OSError as e:
            raise WanlabError(f"cgroups: cannot enable {', '.join(missing)} in {d} ({e}); "
                              f"a cgroup with processes of its own cannot pass controllers "
                              f"on (docs/resources.md)") from None


def _v1_inherit_cpuset(d: str) -> None:
    """A new v1 cpuset cgroup starts with no CPUs and no memory nodes: take the parent's,
    and let its children take its own when they are made (``cgroup.clone_children``)."""
    parent = os.path.dirname(d)
    for f in ("cpuset.cpus", "cpuset.mems"):
        if not _read(os.path.join(d, f)):
            _write(os.path.join(d, f), _read(os.path.join(parent, f)))
    _write(os.path.join(d, "cgroup.clone_children"), "1")


class Exists(WanlabError):
    """A cgroup wanlab would make is there already (someone else's: never removed)."""


def _mkdir(d: str, exist_ok: bool) -> bool:
    """Make cgroup ``d``; True if this call made it."""
    try:
        os.mkdir(d)
        return True
    except FileExistsError:
        if exist_ok:
            return False
        raise Exists(f"cgroup {d} exists already: another experiment with the same id? "
                          f"('wanlab cleanup --all' removes leftovers)") from None


def pid_max() -> int:
    try:
        return int(_read("/proc/sys/kernel/pid_max"))
    except (OSError, ValueError):
        return 32768                        # the kernel's default


def pids_limits() -> tuple[int, int]:
    """``pids.max`` of ``wanlab/`` and of each experiment's cgroup."""
    n = pid_max()
    return max(1024, n // TOP_PIDS_SHARE), max(512, n // EXPERIMENT_PIDS_SHARE)


def _bound_pids(d: str, limit: int, only_unset: bool) -> None:
    path = os.path.join(d, "pids.max")
    if os.path.exists(path) and (not only_unset or _read(path) == "max"):
        _write(path, str(limit))


def _top(h: Hierarchy) -> None:
    """``wanlab/`` under each base (shared by all experiments, kept), controllers on, and
    its pids bounded (also when an older wanlab made it without)."""
    for c, base in _unique(h.bases).items():
        top = os.path.join(base, TOP)
        if h.version == 2:
            _enable(base, h.bases)
        made = _mkdir(top, exist_ok=True)
        if h.version == 2:
            _enable(top, h.bases)
        elif c == "cpuset":
            _v1_inherit_cpuset(top)
        if made and c == "cpu":
            _weigh_nodes(h.version, top)
        if c == "pids" or h.version == 2:
            _bound_pids(top, pids_limits()[0], only_unset=not made)


def _weigh_nodes(version: int, top: str) -> None:
    """Give ``wanlab/`` its CPU weight (a host that refuses keeps the default)."""
    f, v = ("cpu.weight", NODES_CPU_WEIGHT) if version == 2 else ("cpu.shares",
                                                                  NODES_CPU_SHARES)
    with contextlib.suppress(OSError):
        _write(os.path.join(top, f), str(v))


def make_experiment(h: Hierarchy, dirs: dict[str, str]) -> None:
    """Make the experiment's cgroup (``dirs`` from :meth:`Hierarchy.dirs`)."""
    for c, d in _unique(dirs).items():
        for _ in range(5):      # ``wanlab/`` may vanish under us: the last experiment's went
            _top(h)
            try:
                _mkdir(d, exist_ok=False)
                break
            except FileNotFoundError:
                continue
        if h.version == 2:
            _enable(d, h.bases)
        elif c == "cpuset":
            _v1_inherit_cpuset(d)
        if c == "pids" or h.version == 2:
            _bound_pids(d, pids_limits()[1], only_unset=False)


def make_node(h: Hierarchy, dirs: dict[str, str], node: Node, swap: bool) -> None:
    """Make a node's cgroup and set its limits."""
    for d in _unique(dirs).values():
        _mkdir(d, exist_ok=False)       # a v1 cpuset one takes its parent's (clone_children)
    for c, f, v in settings(h.version, node, swap):
        if c not in dirs:
            raise WanlabError(f"node {node.name}: the {c} controller is not available on this "
                              f"host, so {f} cannot be set (docs/resources.md)")
        try:
            _write(os.path.join(dirs[c], f), v)
        except OSError as e:
            raise WanlabError(f"node {node.name}: cannot set {f} to {v}: {e.strerror}") from None


def _unique(dirs: dict[str, str]) -> dict[str, str]:
    """One controller per directory (v2: one directory; v1: one per hierarchy)."""
    out: dict[str, str] = {}
    for c, d in dirs.items():
        if d not in out.values():
            out[c] = d
    return out


def procs_in(d: str) -> list[int]:
    try:
        return [int(x) for x in _read(os.path.join(d, "cgroup.procs")).split()]
    except FileNotFoundError:
        return []


def remove(dirs: dict[str, str], timeout: float = 10.0, top: bool = False) -> None:
    """Remove a recorded cgroup: kill what still runs in it (it is the node's: the node's
    processes are its only members), then remove its directories. Gone ones are skipped.
    With ``top`` (an experiment's cgroup), ``wanlab/`` above it goes too once empty (it is
    no one's else; a cgroup with children refuses rmdir, so a busy one stays)."""
    _remove(dirs, timeout)
    if top:
        for d in _unique(dirs).values():
            parent = os.path.dirname(d)
            if os.path.basename(parent) == TOP:
                with contextlib.suppress(OSError):
                    os.rmdir(parent)


def _remove(dirs: dict[str, str], timeout: float) -> None:
    for d in _unique(dirs).values():
        if not os.path.isdir(d):
            continue
        deadline = time.monotonic() + timeout
        while True:
            left = procs_in(d)
            if left:
                kill = os.path.join(d, "cgroup.kill")
                if os.path.exists(kill):
                    with contextlib.suppress(OSError):
                        _write(kill, "1")
                for pid in left:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise WanlabError(f"cannot remove cgroup {d}: {e.strerror} (processes "
                                      f"{procs_in(d)} in it)") from None
                time.sleep(0.02)


# -- joining -------------------------------------------------------------------------

def note_file(folder: str) -> str:
    """Where the experiment's cgroup directories are noted for the commands that enter its
    nodes (in the experiment's folder, which no node sees); a node's are beneath them."""
    return os.path.join(folder, "cgroups.json")


def note(folder: str, top: dict[str, str]) -> None:
    path = note_file(folder)
    with open(path + ".new", "w") as f:
        json.dump(top, f)
    os.replace(path + ".new", path)


def noted(folder: str, node: str) -> dict[str, str]:
    """The node's cgroup directories (empty if the experiment has none: no cgroups here)."""
    try:
        with open(note_file(folder)) as f:
            top = json.load(f)
    except (OSError, ValueError):
        return {}
    return {c: os.path.join(d, node) for c, d in top.items()}


# $0: how many directories follow; then the directories, then the command
_JOIN = ('n=$0; while [ "$n" -gt 0 ]; do echo $$ > "$1/cgroup.procs" || exit 111; shift; '
         'n=$((n - 1)); done; exec "$@"')


def join_argv(folder: str, node: str, argv: list[str]) -> list[str]:
    """``argv``, run after the process has joined the node's cgroup (its children inherit
    it). As it is when the node has no cgroup."""
    dirs = list(_unique(noted(folder, node)).values())
    if not dirs:
        return argv
    return ["sh", "-c", _JOIN, str(len(dirs)), *dirs, *argv]


# -- usage ---------------------------------------------------------------------------

def _int(path: str) -> int | None:
    try:
        v = _read(path)
    except OSError:
        return None
    return None if v == "max" else int(v.split()[0])


def _keyed(path: str, key: str) -> int | None:
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(" ")
                if k == key:
                    return int(v)
    except OSError:
        return None
    return None


def oom_kills(dirs: dict[str, str]) -> int | None:
    """How many processes of the cgroup the kernel killed for its memory limit."""
    d = dirs.get("memory")
    if d is None:
        return None
    n = _keyed(os.path.join(d, "memory.events"), "oom_kill")
    return n if n is not None else _keyed(os.path.join(d, "memory.oom_control"), "oom_kill")


def usage(dirs: dict[str, str]) -> dict[str, int | None]:
    """The CPUs it may use, CPU time used (µs), memory now and its limit (bytes), processes
    now and their limit, OOM kills. None where the host does not say."""
    cpu = dirs.get("cpu")
    usec = _keyed(os.path.join(cpu, "cpu.stat"), "usage_usec") if cpu else None
    if usec is None and "cpuacct" in dirs:
        ns = _int(os.path.join(dirs["cpuacct"], "cpuacct.usage"))
        usec = None if ns is None else ns // 1000
    mem, pids = dirs.get("memory"), dirs.get("pids")
    out: dict[str, int | str | None] = {
        "cpus": cpus_of(dirs), "cpu_usec": usec, "memory": None, "memory_max": None,
        "pids": None, "pids_max": None, "oom_kills": oom_kills(dirs)}
    if mem:
        out["memory"] = _int(os.path.join(mem, "memory.current"))
        if out["memory"] is None:
            out["memory"] = _int(os.path.join(mem, "memory.usage_in_bytes"))
            lim = _int(os.path.join(mem, "memory.limit_in_bytes"))
            out["memory_max"] = None if lim is None or lim >= 1 << 60 else lim
        else:
            out["memory_max"] = _int(os.path.join(mem, "memory.max"))
    if pids:
        out["pids"] = _int(os.path.join(pids, "pids.current"))
        out["pids_max"] = _int(os.path.join(pids, "pids.max"))
    return out


def sample(groups: dict[str, dict[str, str]], interval: float = 0.25) -> dict[str, dict]:
    """:func:`usage` of each node of ``groups`` (node -> directories), with ``cpu_share``:
    the cores it used over the last ``interval`` seconds (read twice)."""
    first = {n: usage(d) for n, d in groups.items()}
    t0 = time.monotonic()
    time.sleep(interval if groups else 0)
    out = {}
    for n, d in groups.items():
        u = usage(d)
        a, b = first[n]["cpu_usec"], u["cpu_usec"]
        share = None if a is None or b is None else \
            round((b - a) / 1e6 / (time.monotonic() - t0), 3)
        out[n] = {**u, "cpu_share": share}
    return out
