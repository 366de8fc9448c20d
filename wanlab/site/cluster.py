"""The cluster's site: an experiment placed over the current cluster's machines, one part
per machine, each part a life cycle of its own on its machine (:mod:`wanlab.cluster`).

The controller's side of every verb is here: the experiment's lock (the same lock file
as this host's experiments, :mod:`wanlab.store.lock`, naming its holder as this host's
operations do: :meth:`wanlab.lifecycle.Lab.locked`) around every change, Ctrl-C and
SIGTERM through :mod:`wanlab.interrupts` (a create, swap-in or modify is rolled back on
every machine; a swap-out, terminate or cleanup finishes on every machine first), and
the run-time calls through :class:`~wanlab.cluster.control.OnCluster`.

``cleanup`` of a cluster experiment removes every recorded part and forgets it (its parts
are its machines' own records: nothing is left to swap in again).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

from wanlab import interrupts
from wanlab.cluster import experiment
from wanlab.cluster.control import OnCluster
from wanlab.errors import Interrupted, WanlabError
from wanlab.lifecycle import Lab
from wanlab.model.ir import Event, Experiment, validate
from wanlab.model.states import ACTIVE, TRANSIENT
from wanlab.site.show_text import placed_lines
from wanlab.store import lock
from wanlab.store.db import ExperimentRow


class ClusterSite:
    kind = "cluster"

    def __init__(self, lab: Lab, say: Callable[[str], None] = print):
        self.lab, self.store, self.say = lab, lab.store, say
        self.control = OnCluster(lab, say=say)

    # -- life cycle ---------------------------------------------------------------------
    def create(self, exp: Experiment, source_path: str | None = None,
               swapin: bool = True) -> ExperimentRow:
        """Place ``exp`` on the current cluster and build every part (a cluster experiment
        is placed and swapped in at once)."""
        if not swapin:
            raise WanlabError(f"{exp.name}: a cluster experiment is placed and swapped in at "
                              f"once (storing it only is for this host's experiments)")
        validate(exp)
        with interrupts.undoable(f"rolling back the creation of {exp.name}", self.say):
            try:
                placed = experiment.create(self.store, exp, source_path, say=self.say)
            except KeyboardInterrupt as e:
                if isinstance(e, Interrupted):
                    raise
                raise Interrupted(f"interrupted: the creation of {exp.name} was rolled back "
                                  f"on every machine (nothing left)") from None
        machines = sorted(set(placed["machine_of"].values()))
        self.say(f"{exp.name}: active on {len(machines)} machines ({len(exp.nodes)} nodes, "
                 f"{len(placed['cut_links'])} links cut)")
        return self.store.get(exp.name)

    def swapin(self, name: str, repair: bool = False, fresh: bool = False) -> ExperimentRow:
        with self.lab.locked(name), \
                interrupts.undoable(f"rolling back the swap-in of {name}", self.say):
            try:
                if repair:
                    self.control.repair(name, fresh=fresh)
                else:
                    experiment.swapin(self.store, name, say=self.say, fresh=fresh)
            except KeyboardInterrupt as e:
                if isinstance(e, Interrupted):
                    raise
                raise Interrupted(f"interrupted: the swap-in of {name} was rolled back on "
                                  f"every machine ({name} is "
                                  f"{self.store.get(name).state})") from None
        return self.store.get(name)

    def swapout(self, name: str, reason: str = "swap-out") -> ExperimentRow:
        with self.lab.locked(name), \
                interrupts.finish_first(f"the swap-out of {name}", self.say):
            experiment.swapout(self.store, name, say=self.say, reason=reason)
        return self.store.get(name)

    def modify(self, name: str, new: Experiment) -> ExperimentRow:
        from wanlab.cluster import modify
        with self.lab.locked(name), \
                interrupts.undoable(f"rolling back the modify of {name}", self.say):
            try:
                modify.modify(self.store, name, new, say=self.say)
            except KeyboardInterrupt as e:
                if isinstance(e, Interrupted):
                    raise
                raise Interrupted(f"interrupted: the modify of {name} was rolled back on "
                                  f"every machine") from None
        return self.store.get(name)

    def terminate(self, name: str, op: str = "terminate") -> None:
        with self.lab.locked(name), \
                interrupts.finish_first(f"{'cleaning up' if op == 'cleanup' else 'terminating'}"
                                        f" {name}", self.say):
            experiment.terminate(self.store, name, op, say=self.say)
            from wanlab.cluster import wide  # its numpy: only when used
            wide.forget(self.store, name)
            lock.forget(self.store, name)     # still held: waiters retry on a new file

    def cleanup(self, name: str) -> None:
        self.terminate(name, op="cleanup")

    def run(self, exp: Experiment, source_path: str | None = None,
            terminate: bool = False) -> dict[str, Any]:
        """Create, play the whole timeline from one t = 0 on every machine, collect, swap
        out (:meth:`wanlab.lifecycle.Lab.run` with the cluster's steps)."""
        with OnCluster(self.lab, say=self.say) as on:
            return self.lab.run(exp, source_path=source_path, terminate=terminate, on=on)

    def simulate(self, exp: Experiment, out: str | None = None, seed: int | None = None,
                 duration_s: float | None = None, threads: int | None = None
                 ) -> dict[str, Any]:
        """A pure simulation with one engine per machine, each on ``threads`` threads (-1:
        the machine's cores); the summary's ``cluster`` says where each node ran."""
        from wanlab.cluster.simulate import simulate
        return simulate(self.lab, exp, out=out, seed=seed, duration_s=duration_s,
                        threads=threads)

    # -- inspection ---------------------------------------------------------------------
    def get(self, name: str) -> ExperimentRow:
        return self.store.get(name)

    def checked(self, row: ExperimentRow) -> ExperimentRow:
        """``row``, with its machines asked how their parts are if it is active: a lost
        machine or a broken part makes it degraded, naming them and their nodes."""
        if row.state in TRANSIENT:     # an operation killed half-way: as this host's
            return self.lab._check_health(row)
        if row.state != ACTIVE or not experiment.faults_of(self.store, row.name):
            return row
        try:        # looked at again under the lock: a swap-out or terminate may be under way
            with self.lab.locked(row.name) as fresh:
                if fresh.state != ACTIVE:
                    return fresh
                return experiment.check(self.store, row.name)
        except WanlabError:                 # terminated meanwhile
            return row

    def show(self, name: str, node: str | None = None, links: bool = False
             ) -> dict[str, Any]:
        """Where each node runs and each part's own ``show`` (from its machine); the
        wide-area mapping if wanassign placed it. (Each part's report is whole: ``node``
        and ``links`` select nothing here.)"""
        row = self.store.get(name)
        info = experiment.show(self.store, name)
        info.update(id=row.short, error=row.error, site=self.kind)
        from wanlab.cluster import wide
        mapped = wide.stored(self.store, name)
        if mapped:
            info["wide_area"] = mapped
        return info

    def show_text(self, info: dict[str, Any], summary: bool = True) -> list[str]:
        """``show``'s report as text: the placement (each machine's nodes and fault)."""
        return placed_lines(info)

    def routes(self, name: str, node: str | None = None) -> dict[str, str]:
        return experiment.routes(self.store, name, node)

    def stats(self, name: str, target: str | None = None) -> dict[str, Any]:
        return self.control.stats(name, target)

    def in_force(self, name: str) -> dict[str, Any]:
        return self.control.in_force(name)

    def events(self, name: str) -> list[dict[str, Any]]:
        return self.control.event_log(name)

    def follow(self, name: str) -> Iterator[dict[str, Any]]:
        return self.control.follow(name)

    def flows(self, name: str) -> list[dict[str, Any]]:
        return self.control.flows(name)

    def plot(self, name: str, output: str | None = None) -> str:
        """A PNG of the latest run's flows (joined from the machines' halves), in the
        controller's folder of the experiment unless ``output``."""
        import os

        from wanlab.report.plots import plot_throughput
        output = output or os.path.join(self.store.folder(name), "plots", "throughput.png")
        return plot_throughput(name, self.flows(name), self.events(name), output)

    # -- nodes ----------------------------------------------------------------------------
    def exec(self, name: str, node: str, argv: list[str], capture: bool = False,
             timeout: float | None = None) -> subprocess.CompletedProcess:
        """``argv`` in ``node``, run by its machine's agent; ``capture``: its output as
        text in the result (else written to this process's stdout and stderr)."""
        if timeout is not None:
            argv = ["timeout", "-s", "KILL", f"{timeout:g}", *argv]
        rc, out, err = experiment.exec_(self.store, name, node, argv)
        if not capture:
            sys.stdout.write(out)
            sys.stdout.flush()
            sys.stderr.write(err)
            return subprocess.CompletedProcess(argv, rc)
        return subprocess.CompletedProcess(argv, rc, out, err)

    def shell(self, name: str, node: str, argv: list[str]) -> int:
        """A shell in a node: on the local test cluster run from here, on a machine
        elsewhere run by its agent and relayed to this terminal."""
        from wanlab.cluster import console
        if self.control.runs_here():
            return subprocess.run(self.control.node_argv(name, node, argv),
                                  check=False).returncode
        with self.control:
            return console.attach(self.control.console(name, node, argv))

    def node_argv(self, name: str, node: str, argv: list[str]) -> list[str]:
        return self.control.node_argv(name, node, argv)

    def relay_session(self) -> OnCluster | None:
        """The Ray session a relayed terminal needs while it is open (a machine elsewhere),
        or None when the nodes' argv runs from here (the local test cluster)."""
        return None if self.control.runs_here() else self.control

    def console(self, name: str, node: str, argv: list[str]) -> Any:
        """A terminal running ``argv`` in ``node``, started by its machine's agent and
        relayed (:class:`wanlab.cluster.control.Relayed`)."""
        return self.control.console(name, node, argv)

    def popen(self, name: str, node: str, argv: list[str], **kw: Any) -> subprocess.Popen:
        return subprocess.Popen(self.node_argv(name, node, argv), **kw)

    def engine_call(self, name: str, cmd: str, **args: Any) -> dict[str, Any]:
        raise WanlabError(f"{name} is placed on the cluster: each machine has its own "
                          f"engine (stats, tevc and set_link reach them all)")

    # -- events and links -----------------------------------------------------------------
    def tevc(self, name: str, time_spec: str, target: str, action: str,
             args: list[str] | None = None, wait: bool = False) -> dict[str, Any]:
        return self.control.tevc(name, time_spec, target, action, args, wait=wait)

    def set_link(self, name: str, target: str, dir: str = "both", **change: Any) -> None:
        self.control.set_link(name, target, dir, **change)

    def apply(self, name: str, evs: list[Event]) -> None:
        self.control.apply(name, evs)

    # -- captures ------------------------------------------------------------------------
    def captures(self, name: str) -> list[dict[str, Any]]:
        return self.control.captures(name)

    def capture_start(self, name: str, link: str, dir: str = "both",
                      file: str | None = None) -> list[str]:
        return self.control.capture_start(name, link, dir, file)

    def capture_stop(self, name: str) -> None:
        self.control.capture_stop(name)

    def capture_file(self, name: str, file: str) -> str:
        return self.control.capture_file(name, file)

    # -- the facility's idle sampling -------------------------------------------------------
    def activity(self, name: str) -> tuple[int, list[str]]:
        """Frames every machine's engine delivered for the experiment; no namespaces (a
        node's processes are its machine's: the engines' traffic is the signal here)."""
        from wanlab.site.activity import frames_of
        try:
            return frames_of(self.stats(name)), []
        except WanlabError:
            return 0, []
