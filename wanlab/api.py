"""The Python API: everything the CLI does, for scripts.

A short script::

    from wanlab.api import Experiment
    with Experiment.from_file("examples/figure2.tcl") as exp:   # swapped in
        print(exp.exec("nodeA", ["ping", "-c", "3", "nodeC"]).stdout)
        exp.set_link("link0", delay="50ms")
    # terminated: nothing left behind

An experiment that exists already (this host's or the cluster's) is reached with
``Experiment.attach(name)``; ``Experiment.from_file(path, cluster=True)`` creates one on
the current cluster (``wanlab cluster up``). Every method means the same on both
(:mod:`wanlab.site`).

or built in code with :class:`wanlab.frontends.builder.ExperimentBuilder` and
passed to ``Experiment(ir)``. The same description as a pure simulation in virtual
time (no namespaces; see docs/simulation.md)::

    from wanlab.api import simulate
    summary = simulate("examples/onedrop/onedrop.tcl", seed=7)
    print(summary["flows"][0]["result"]["cwnd"][:5])
"""

from __future__ import annotations

import subprocess
from typing import Any

from wanlab import site as sites
from wanlab.lifecycle import Lab
from wanlab.model import ir


class Experiment:
    """A running (or stored) experiment; a context manager that terminates it on exit.

    ``cluster``: create it on the current cluster (``wanlab cluster up``) instead of this
    host. Every method works the same on both (:mod:`wanlab.site`)."""

    def __init__(self, description: "ir.Experiment | Any", name: str | None = None,
                 home: str | None = None, keep: bool = False, progress: bool = False,
                 cluster: bool = False):
        if hasattr(description, "build") and not isinstance(description, ir.Experiment):
            description = description.build()
        self.ir: ir.Experiment = description.with_name(name) if name else description
        self.name = self.ir.name
        self.lab = Lab(home, progress=progress)
        self.keep = keep
        self.cluster = cluster
        self._created = False

    @classmethod
    def from_file(cls, path: str, params: dict[str, str] | None = None,
                  **kw: Any) -> "Experiment":
        """``params``: template parameter values (``-p NAME=VALUE``; docs/facility.md);
        ``cluster=True``: create it on the current cluster."""
        from wanlab.frontends import load
        return cls(load(path, params=params), **kw)

    @classmethod
    def attach(cls, name: str, home: str | None = None, progress: bool = False
               ) -> "Experiment":
        """An existing experiment (of this host or placed on the cluster), to drive from a
        script; leaving a ``with`` of it keeps it (``terminate()`` forgets it)."""
        lab = Lab(home, progress=progress, create=False)
        try:
            row, cluster = lab.get(name), sites.is_cluster(lab, name)
        finally:
            lab.close()
        exp = cls(row.ir, home=home, keep=True, progress=progress, cluster=cluster)
        exp._created = True
        return exp

    def _site(self) -> sites.Site:
        """Where this experiment lives (once created), else where it will be created."""
        if self.lab.store.find(self.name) is not None:
            return sites.of(self.lab, self.name, say=self.lab.say)
        return sites.for_new(self.lab, self.cluster, say=self.lab.say)

    # life cycle
    def create(self) -> "Experiment":
        sites.for_new(self.lab, self.cluster, say=self.lab.say).create(self.ir)
        self._created = True
        return self

    def swapout(self) -> None:
        self._site().swapout(self.name)

    def swapin(self, fresh: bool = False, repair: bool = False) -> None:
        """``fresh``: drop the nodes' writable layers (files written since their image);
        ``repair``: rebuild a degraded experiment."""
        self._site().swapin(self.name, repair=repair, fresh=fresh)

    def modify(self, new: ir.Experiment) -> None:
        self._site().modify(self.name, new)
        self.ir = self.lab.get(self.name).ir

    def terminate(self) -> None:
        self._site().terminate(self.name)
        self._created = False

    def cleanup(self) -> None:
        """Remove everything recorded for it (after a crash); this host's experiment stays,
        swapped out; a cluster experiment is forgotten."""
        self._site().cleanup(self.name)

    @property
    def state(self) -> str:
        return self.lab.get(self.name).state

    def show(self) -> dict[str, Any]:
        return self._site().show(self.name)

    def __enter__(self) -> "Experiment":
        return self.create()

    def __exit__(self, *exc: object) -> None:
        try:
            if self._created and not self.keep:
                self.terminate()
        finally:
            self.lab.close()

    # nodes
    def exec(self, node: str, argv: list[str], check: bool = False,
             timeout: float | None = None) -> subprocess.CompletedProcess:
        """Run ``argv`` in ``node``; returns the completed process with text stdout/stderr."""
        r = self._site().exec(self.name, node, argv, capture=True, timeout=timeout)
        if check:
            r.check_returncode()
        return r

    def popen(self, node: str, argv: list[str], **kw: Any) -> subprocess.Popen:
        """``subprocess.Popen`` of ``argv`` in ``node`` (on this host its pid is the node's
        process)."""
        return self._site().popen(self.name, node, argv, **kw)

    # links
    def set_link(self, link: str, dir: str = "both", *, bandwidth: Any = None,
                 delay: str | float | None = None, loss: Any = None, jitter: Any = None,
                 duplicate: Any = None, corrupt: Any = None, reorder: Any = None,
                 overhead: int | None = None, cellsize: int | None = None,
                 cell_overhead: int | None = None, schedule: Any = None) -> None:
        """Change a link's (or LAN's) parameters at run time, e.g. ``delay="50ms"``: the
        same meaning as ``tevc`` (``dir`` ``ab``/``ba`` for one direction of a link; a
        LAN's delay and loss are member-to-member, so each half gets D/2). ``loss`` is a
        probability or a loss model (``{"model": "gilbert-elliott", "p": 0.01, ...}``);
        ``jitter`` (``"5ms"`` or ``{"value", "distribution", "correlation"}``),
        ``duplicate``, ``corrupt``, ``reorder`` and the framing are netem's impairments
        (docs/impairments.md). ``bandwidth={"trace": FILE, "offset", "loop"}`` and
        ``schedule={"csv": FILE, "interpolate", "loop"}`` (``"none"``: ended) start a
        capacity trace or a schedule now. Only what is given changes. ``link``
        ``"LAN/SRC/DST"`` changes one latency-matrix pair's channel (its own values)."""
        change = {k: v for k, v in dict(
            bandwidth=bandwidth, delay=delay, loss=loss, jitter=jitter, duplicate=duplicate,
            corrupt=corrupt, reorder=reorder, overhead=overhead, cellsize=cellsize,
            cell_overhead=cell_overhead, schedule=schedule).items() if v is not None}
        self._site().set_link(self.name, link, dir, **change)

    def link_down(self, link: str) -> None:
        self._site().apply(self.name, [ir.Event(0.0, link, "down")])

    def link_up(self, link: str) -> None:
        self._site().apply(self.name, [ir.Event(0.0, link, "up")])

    def stats(self, target: str | None = None) -> dict[str, Any]:
        """The engine's counters (on a cluster: every machine's, a cut link's directions
        from the machines that shape them)."""
        return self._site().stats(self.name, target)

    # events, results, routing
    def tevc(self, target: str, action: str, *args: str, at: str = "now",
             wait: bool = False) -> dict[str, Any]:
        """Send an event, as ``wanlab tevc``: ``exp.tevc("link0", "delay", "50ms")``;
        ``at`` is ``now``, ``+SECONDS`` or ``SECONDS`` since t = 0; ``wait`` returns the
        outcome."""
        return self._site().tevc(self.name, at, target, action, list(args), wait=wait)

    def events(self) -> list[dict[str, Any]]:
        """The event log of this run (scheduled and fired times, lateness, outcome)."""
        return self._site().events(self.name)

    def follow(self):
        """Iterate over events as they fire (on a cluster: every machine's, in time
        order)."""
        return self._site().follow(self.name)

    def flows(self) -> list[dict[str, Any]]:
        """Results of the traffic agents' flows."""
        return self._site().flows(self.name)

    def routes(self, node: str | None = None) -> dict[str, str]:
        return self._site().routes(self.name, node)

    # captures
    def captures(self) -> list[dict[str, Any]]:
        """The experiment's packet captures: ``{file, bytes}`` (on a cluster each
        machine's, ``file`` being ``MACHINE/PATH``)."""
        return self._site().captures(self.name)

    def capture_start(self, link: str, dir: str = "both") -> list[str]:
        """Capture ``link`` into a new pcap file; returns the files."""
        return self._site().capture_start(self.name, link, dir)

    def capture_stop(self) -> None:
        self._site().capture_stop(self.name)

    def capture_file(self, file: str) -> str:
        """A path on this host of capture ``file`` (as :meth:`captures` lists it)."""
        return self._site().capture_file(self.name, file)

    def engine_call(self, cmd: str, **args: Any) -> dict[str, Any]:
        """Any engine protocol request (docs/engine-protocol.md; this host's engine)."""
        return self._site().engine_call(self.name, cmd, **args)


def simulate(description: "str | ir.Experiment | Any", out: str | None = None,
             seed: int | None = None, duration_s: float | None = None,
             home: str | None = None, threads: int | None = None,
             cluster: bool = False) -> dict[str, Any]:
    """Run a spec file, IR or builder as a pure simulation (``wanlab run --simulate``,
    on up to ``threads`` threads (default: the spec's engine threads, or 1), or with
    ``cluster`` one engine per machine of the current cluster: ``--cluster``, each on
    ``threads`` threads, -1: the machine's cores, default: the spec's engine threads, or 1);
    returns the summary (event log, flows, per-link statistics, engine speed)."""
    if isinstance(description, str):
        from wanlab.frontends import load
        description = load(description)
    elif hasattr(description, "build") and not isinstance(description, ir.Experiment):
        description = description.build()
    lab = Lab(home)
    try:
        return sites.for_new(lab, cluster, say=lab.say).simulate(
            description, out=out, seed=seed, duration_s=duration_s, threads=threads)
    finally:
        lab.close()
