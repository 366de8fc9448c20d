"""The objects events act on, and what each typed event does (docs/ir.md § Event).

* link, LAN: ``up``, ``down``, ``bandwidth``, ``delay``, ``plr``, ``set`` (a queue
  field), ``drop`` (links), ``trace``: engine requests from :mod:`wanlab.engine.encode`;
* Program: ``start``, ``stop``, ``kill``, ``run``, ``set`` (its command);
* traffic application: ``start``, ``stop``, ``reset``, ``set`` (a traffic field);
* node: ``reboot`` (its processes are stopped and its start command runs again);
* ``ns`` (the simulator): ``halt`` (no further timeline events), ``terminate``,
  ``swapout``, ``stoprun`` (stop every program and agent), ``msg``, ``log``.

Events arrive typed and checked (the front ends and tevc normalise them), so nothing
here reads ns-2 words.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Callable

from wanlab.backends.emulate import engine, frr, netns, nodes, procs
from wanlab.engine import encode, in_force
from wanlab.model.ir import Event
from wanlab.run.context import Context
from wanlab.run.programs import ProgramRunner
from wanlab.run.sim_traffic import SimTrafficAgent
from wanlab.run.traffic import TrafficAgent
from wanlab.store.db import ExperimentRow, Store

Outcome = tuple[str, str]          # ("ok" | "failed" | "timeout" | "error", detail)

class Runtime(Context):
    """Everything the scheduler of one running experiment knows and can touch."""

    def __init__(self, store: Store, row: ExperimentRow, t0_mono: float, t0_wall: float,
                 control_argv: list[str] | None = None):
        super().__init__(store, row, t0_mono, t0_wall)
        # how to ask the life cycle for a swap-out or terminate (ns swapout/terminate):
        # given by whoever started the scheduler, which runs no layer above its own
        self.control_argv = control_argv
        self.halted = False
        self.on_halt: Callable[[], None] = lambda: None
        self.programs = {p.name: ProgramRunner(self, p) for p in row.ir.programs}
        self.agents: dict[str, TrafficAgent | SimTrafficAgent] = {}
        for f in self.plan.flows:
            self.agents[f.app] = SimTrafficAgent(self, f)
        apps = [a for a in row.ir.agents if a.role == "application"]
        self.unusable: dict[str, str] = {}
        for i, a in enumerate(apps):
            if a.name in self.agents or a.traffic is None:
                continue
            try:
                self.agents[a.name] = TrafficAgent(self, a, i)
            except ValueError as e:
                self.unusable[a.name] = str(e)
                self.log_note(f"agent {a.name} unusable: {e}")
        self.links = {l.name: l for l in row.ir.links}
        self.lans = {l.name: l for l in row.ir.lans}

    # -- bookkeeping ------------------------------------------------------------
    def objects(self) -> dict[str, str]:
        kinds = {"ns": "simulator"}
        kinds.update({n.name: "node" for n in self.exp.nodes})
        kinds.update({n: "link" for n in self.links})
        kinds.update({n: "lan" for n in self.lans})
        kinds.update({n: "program" for n in self.programs})
        kinds.update({n: "agent" for n in self.agents})
        kinds.update({t.name: "timeline" for t in self.exp.timelines})
        return kinds

    # -- dispatch ---------------------------------------------------------------
    def fire(self, ev: Event) -> Outcome:
        """Do one typed event (checked against the experiment when it was made)."""
        kind = self.objects().get(ev.target)
        if kind is None:
            if ev.target in self.unusable:
                return "error", f"{ev.target} cannot run: {self.unusable[ev.target]}"
            return "error", f"no object named {ev.target!r}"
        try:
            return getattr(self, f"_{kind}")(ev)
        except (ValueError, KeyError) as e:
            return "error", f"{ev.target} {ev.action}: {e}"
        except Exception as e:     # an engine refusal, a failed process start, ...
            return "error", f"{ev.target} {ev.action}: {e}"

    # links and LANs: patches through the one encoder (no copy of their parameters here)
    def _link(self, ev: Event) -> Outcome:
        return self._shaped(ev, "link")

    def _lan(self, ev: Event) -> Outcome:
        return self._shaped(ev, "lan")

    def _shaped(self, ev: Event, kind: str) -> Outcome:
        trace_dir = os.path.join(self.folder, "traces")
        reqs = encode.event_requests(ev, kind, self.ports, trace_dir)
        if ev.action == "trace" and ev.value == "start":
            os.makedirs(trace_dir, exist_ok=True)
        with engine.Client(self.sock) as c:
            c.send_all(reqs)
        in_force.record(self.folder, [(ev, kind)])      # what show reports as in force
        return "ok", encode.describe(ev, trace_dir)

    # programs and agents
    def _program(self, ev: Event) -> Outcome:
        p = self.programs[ev.target]
        if ev.action == "start":
            return p.start()
        if ev.action == "run":
            return p.run()
        if ev.action == "stop":
            return p.stop(signal.SIGTERM)
        if ev.action == "kill":
            return p.stop(signal.SIGKILL)
        if ev.action == "set":
            return p.set_command(ev.value)
        raise ValueError("unknown event; programs take start, stop, kill, run, set")

    def _agent(self, ev: Event) -> Outcome:
        a = self.agents[ev.target]
        if ev.action in ("start", "stop", "reset"):
            return getattr(a, ev.action)()
        if ev.action == "set":
            return a.set(ev.param, ev.value)
        raise ValueError("unknown event; traffic agents take start, stop, reset, set")

    # nodes and the simulator
    def _node(self, ev: Event) -> Outcome:
        target = ev.target
        if ev.action != "reboot":
            raise ValueError("unknown event; nodes take reboot")
        ns = self.plan.nodes[target].netns
        ino = netns.inode(ns)
        with self.db_lock:
            # the node's holder ends with its processes, on purpose: its record goes first,
            # so the health check does not take the reboot for a fault (the node's next
            # command starts a new one)
            self.store.mark_removed([
                r.id for r in self.store.resources(self.row.id)
                if r.kind == "process" and r.detail.get("node") == target and
                r.detail.get("role") == "holder" and r.state == "created"])
        killed = 0
        for pid in netns.pids_in(ino) if ino else []:
            if procs.kill(pid, procs.start_time(pid)):
                killed += 1
        node = next(n for n in self.exp.nodes if n.name == target)
        routing = self.exp.rtproto in frr.DYNAMIC and not self.plan.nodes[target].remote
        with self.db_lock:
            # the node's recorded processes that ended are gone for good (the health check
            # would otherwise miss its routing daemons)
            self.store.mark_removed([
                r.id for r in self.store.resources(self.row.id)
                if r.kind == "process" and r.detail.get("node") == target and
                r.detail.get("pid") and not procs.alive(r.detail["pid"], r.detail.get("started"))])
            if routing:
                frr.start_daemons(self.store, self.row, self.exp, self.plan.nodes[target],
                                  self.folder)
            if node.startcmd:
                nodes.start_command(self.store, self.row, self.plan, target, node.startcmd,
                                   self.folder)
        return "ok", f"{killed} processes stopped" + (
            ", routing daemons restarted" if routing else "") + (
            ", start command rerun" if node.startcmd else "")

    def prepare_agents(self) -> None:
        """At t = 0: start every agent's receiver (and paused CBR sender) in the background."""
        for a in self.agents.values():
            threading.Thread(target=a._prepare_quietly, daemon=True).start()

    def stop_all(self) -> None:
        for a in self.agents.values():
            a.stop(prepare_next=False)
        for p in self.programs.values():
            p.stop(signal.SIGTERM)

    def _simulator(self, ev: Event) -> Outcome:
        action = ev.action
        if action in ("msg", "log"):
            self.log_note(ev.value)
            return "ok", ev.value
        if action == "stoprun":
            self.stop_all()
            return "ok", "every program and agent stopped"
        if action in ("halt", "terminate", "swapout"):
            if action != "halt" and not self.control_argv:
                raise ValueError(f"{action} needs the life cycle; this scheduler was started "
                                 f"without a way to reach it")
            self.halted = True
            self.on_halt()
            if action == "halt":
                return "ok", "timeline halted"
            # the swap-out kills this scheduler: run it from a process of its own
            subprocess.Popen([*self.control_argv,
                              "terminate" if action == "terminate" else "swapout",
                              self.row.name], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
            return "ok", f"{action} requested"
        raise ValueError("unknown event; ns takes halt, terminate, swapout, stoprun, msg, log")


