"""What a running experiment's objects share: its plan, folder, clock and store.

Programs and traffic agents (:mod:`wanlab.run.programs`, :mod:`wanlab.run.traffic`,
:mod:`wanlab.run.sim_traffic`) act through this context; the dispatcher that owns
them (:class:`wanlab.run.objects.Runtime`) extends it, so they never import it.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from wanlab.backends.emulate import procs
from wanlab.engine.client import socket_of
from wanlab.plan.plan import make_plan
from wanlab.store.db import ExperimentRow, Store


class Context:
    """The experiment's description and plan, its folder, t = 0, and the store (one writer
    at a time: ``db_lock``)."""

    def __init__(self, store: Store, row: ExperimentRow, t0_mono: float, t0_wall: float):
        self.store, self.row, self.exp = store, row, row.ir
        self.plan = make_plan(row.ir, row.short)
        self.ports = self.plan.port_map()
        self.folder = store.folder(row.name)
        self.sock = socket_of(self.folder)
        self.t0_mono, self.t0_wall = t0_mono, t0_wall
        self.db_lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self.t0_mono

    def record_process(self, name: str, node: str) -> int:
        with self.db_lock:
            return self.store.record(self.row.id, "process", name, node=node)

    def process_started(self, rid: int, pid: int) -> None:
        with self.db_lock:
            self.store.update_resource(rid, "created", pid=pid, started=procs.start_time(pid))

    def flow_done(self, agent: str, kind: str, start: float, stop: float,
                  result: dict[str, Any]) -> None:
        with self.db_lock:
            self.store.add_flow(self.row.id, self.t0_wall, agent, kind, start, stop, result)

    def log_note(self, text: str) -> None:
        with open(os.path.join(self.folder, "scheduler.log"), "a") as f:
            f.write(f"{self.now():.6f} {text}\n")
