"""This host's site: an experiment run by the life cycle here (:class:`wanlab.lifecycle.Lab`:
its stages, one engine, one scheduler). The life cycle takes the experiment's lock and
routes interrupts itself; this class only gives it the site's verbs."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

from wanlab.errors import WanlabError
from wanlab.lifecycle import Lab
from wanlab.model.ir import Event, Experiment
from wanlab.site.show_text import local_lines, select
from wanlab.store.db import ExperimentRow


class LocalSite:
    kind = "local"

    def __init__(self, lab: Lab):
        self.lab, self.store = lab, lab.store

    # -- life cycle ---------------------------------------------------------------------
    def create(self, exp: Experiment, source_path: str | None = None,
               swapin: bool = True) -> ExperimentRow:
        return self.lab.create(exp, source_path=source_path, swapin=swapin)

    def swapin(self, name: str, repair: bool = False, fresh: bool = False) -> ExperimentRow:
        return self.lab.swapin(name, repair=repair, fresh=fresh)

    def swapout(self, name: str, reason: str = "swap-out") -> ExperimentRow:
        return self.lab.swapout(name, reason=reason)

    def modify(self, name: str, new: Experiment) -> ExperimentRow:
        return self.lab.modify(name, new)

    def terminate(self, name: str) -> None:
        self.lab.terminate(name)

    def cleanup(self, name: str) -> None:
        self.lab.cleanup(name)

    def run(self, exp: Experiment, source_path: str | None = None,
            terminate: bool = False) -> dict[str, Any]:
        return self.lab.run(exp, source_path=source_path, terminate=terminate)

    def simulate(self, exp: Experiment, out: str | None = None, seed: int | None = None,
                 duration_s: float | None = None, threads: int | None = None
                 ) -> dict[str, Any]:
        """A pure simulation in this host's engine (``threads``: a number; the cluster's
        site takes -1, each machine's cores)."""
        if threads == -1:
            raise WanlabError("--threads auto goes with --cluster (each machine's cores); "
                              "give a number")
        return self.lab.simulate(exp, out=out, seed=seed, duration_s=duration_s,
                                 threads=threads)

    # -- inspection ---------------------------------------------------------------------
    def get(self, name: str) -> ExperimentRow:
        return self.store.get(name)

    def checked(self, row: ExperimentRow) -> ExperimentRow:
        """``row``, health-checked: an active one with a part gone, or one left in a
        transient state by a killed operation, becomes degraded."""
        return self.lab._check_health(row)

    def show(self, name: str, node: str | None = None, links: bool = False
             ) -> dict[str, Any]:
        """The report of ``show``; ``node`` or ``links``: only that node (its links and
        LANs) or only the links and LANs."""
        return select(self.lab.show(name), node, links)

    def show_text(self, info: dict[str, Any], summary: bool = True) -> list[str]:
        """``show``'s report as text (``summary``: counts and first rows of a large one)."""
        return local_lines(info, summary)

    def routes(self, name: str, node: str | None = None) -> dict[str, str]:
        return self.lab.routes(name, node)

    def stats(self, name: str, target: str | None = None) -> dict[str, Any]:
        return self.lab.stats(name, target)

    def in_force(self, name: str) -> dict[str, Any]:
        return self.lab.in_force(name)

    def events(self, name: str) -> list[dict[str, Any]]:
        return self.lab.event_log(name)

    def follow(self, name: str) -> Iterator[dict[str, Any]]:
        return self.lab.follow(name)

    def flows(self, name: str) -> list[dict[str, Any]]:
        return self.lab.flows(name)

    def plot(self, name: str, output: str | None = None) -> str:
        return self.lab.plot(name, output)

    # -- nodes ----------------------------------------------------------------------------
    def exec(self, name: str, node: str, argv: list[str], capture: bool = False,
             timeout: float | None = None) -> subprocess.CompletedProcess:
        """``argv`` in ``node``; ``capture``: its output as text in the result (else it
        goes to this process's stdout and stderr)."""
        kw: dict[str, Any] = {"capture_output": True, "text": True} if capture else {}
        return self.lab.exec(name, node, argv, timeout=timeout, **kw)

    def shell(self, name: str, node: str, argv: list[str]) -> int:
        return self.lab.exec(name, node, argv).returncode

    def node_argv(self, name: str, node: str, argv: list[str]) -> list[str]:
        return self.lab.node_argv(name, node, argv)

    def relay_session(self) -> None:
        """Nothing: this host's nodes run from here (:meth:`node_argv`)."""
        return None

    def console(self, name: str, node: str, argv: list[str]) -> Any:
        raise WanlabError(f"{name}'s nodes run on this host: run node_argv from here")

    def popen(self, name: str, node: str, argv: list[str], **kw: Any) -> subprocess.Popen:
        return self.lab.popen(name, node, argv, **kw)

    def engine_call(self, name: str, cmd: str, **args: Any) -> dict[str, Any]:
        with self.lab.engine(name) as c:
            return c.call(cmd, **args)

    # -- events and links -----------------------------------------------------------------
    def tevc(self, name: str, time_spec: str, target: str, action: str,
             args: list[str] | None = None, wait: bool = False) -> dict[str, Any]:
        return self.lab.tevc(name, time_spec, target, action, args, wait=wait)

    def set_link(self, name: str, target: str, dir: str = "both", **change: Any) -> None:
        self.lab.set_link(name, target, dir, **change)

    def apply(self, name: str, evs: list[Event]) -> None:
        self.lab.apply(name, evs)

    # -- captures ------------------------------------------------------------------------
    def captures(self, name: str) -> list[dict[str, Any]]:
        return self.lab.captures(name)

    def capture_start(self, name: str, link: str, dir: str = "both",
                      file: str | None = None) -> list[str]:
        return self.lab.capture_start(name, link, dir, file)

    def capture_stop(self, name: str) -> None:
        self.lab.capture_stop(name)

    def capture_file(self, name: str, file: str) -> str:
        return self.lab.capture_file(name, file)

    # -- the facility's idle sampling -------------------------------------------------------
    def activity(self, name: str) -> tuple[int, list[str]]:
        """Frames the engine's links and LANs delivered so far, and the experiment's node
        namespaces (whose processes' CPU time and terminals the idle watcher reads)."""
        from wanlab.site.activity import frames_of
        row = self.store.get(name)
        try:
            frames = frames_of(self.stats(name))
        except WanlabError:
            frames = 0
        return frames, [r.name for r in self.store.resources(row.id) if r.kind == "netns"]
