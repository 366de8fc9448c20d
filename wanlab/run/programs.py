"""Emulab ``Program`` objects: a command on a node, started, stopped, killed or run by events.

Each start is a numbered run; its stdout, stderr and exit code are kept in
``<folder>/programs/<name>/run-<n>.{out,err,exit}``. ``run`` waits for the
exit (``timeout`` kills it, with outcome ``timeout``). An
``expected-exit-code`` that does not match gives the outcome ``failed``.
Every process is recorded in the store before it is started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import TYPE_CHECKING

from wanlab.backends.emulate import nodes
from wanlab.model.ir import Program

if TYPE_CHECKING:
    from wanlab.run.context import Context


class ProgramRunner:
    """The live state of one Program object."""

    def __init__(self, rt: "Context", prog: Program):
        self.rt, self.prog = rt, prog
        self.command = prog.command
        self.runs = 0
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self.dir = os.path.join(rt.folder, "programs", prog.name)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> tuple[str, str]:
        with self.lock:
            if self.running():
                return "error", f"program {self.prog.name} is already running " \
                                f"(pid {self.proc.pid})"
            self.runs += 1
            n = self.runs
            os.makedirs(self.dir, exist_ok=True)
            base = os.path.join(self.dir, f"run-{n}")
            ns = self.rt.plan.nodes[self.prog.node].netns
            cwd = self.prog.dir or os.path.join(self.rt.folder, "nodes", self.prog.node)
            rid = self.rt.record_process(f"program-{self.prog.name}-{n}", self.prog.node)
            with open(base + ".out", "wb") as out, open(base + ".err", "wb") as err:
                self.proc = nodes.popen(
                    self.rt.store, self.rt.row, ns, self.prog.node, ["sh", "-c", self.command],
                    cwd=cwd if os.path.isdir(cwd) else None, stdin=subprocess.DEVNULL,
                    stdout=out, stderr=err, start_new_session=True)
            self.rt.process_started(rid, self.proc.pid)
            proc = self.proc
            threading.Thread(target=self._reap, args=(proc, base), daemon=True).start()
            return "ok", f"run {n} started (pid {proc.pid})"

    def _reap(self, proc: subprocess.Popen, base: str) -> None:
        code = proc.wait()
        with open(base + ".exit", "w") as f:
            f.write(f"{code}\n")

    def run(self) -> tuple[str, str]:
        outcome, detail = self.start()
        if outcome != "ok":
            return outcome, detail
        proc = self.proc
        assert proc is not None
        try:
            code = proc.wait(timeout=self.prog.timeout_s)
        except subprocess.TimeoutExpired:
            self._signal(proc, signal.SIGKILL)
            proc.wait()
            return "timeout", f"run {self.runs} killed after {self.prog.timeout_s:g} s"
        want = self.prog.expected_exit_code
        if want is not None and code != want:
            return "failed", f"run {self.runs} exited {code}, expected {want}"
        return "ok", f"run {self.runs} exited {code}"

    def stop(self, sig: int = signal.SIGTERM) -> tuple[str, str]:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return "ok", "not running"
        self._signal(proc, sig)
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._signal(proc, signal.SIGKILL)
            code = proc.wait()
        return "ok", f"run {self.runs} ended ({code})"

    @staticmethod
    def _signal(proc: subprocess.Popen, sig: int) -> None:
        # the program runs in its own session: signal its whole process group
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass

    def set_command(self, command: str) -> tuple[str, str]:
        """``set command=CMD`` (Emulab's tevc form), already parsed by the normaliser."""
        self.command = command
        return "ok", f"command is now {self.command!r}"
