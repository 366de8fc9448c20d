"""The objects events act on, and what each event does (docs/ns-reference.md § Events).

| object | events |
|---|---|
| link, LAN | ``up``, ``down``, ``bandwidth B``, ``delay D``, ``plr P``, ``set PARAM V`` (queue: ``limit_``, ``thresh_``, ``maxthresh_``, ``q_weight_``, ``linterm_``, ``queue-in-bytes_``, ``gentle_``), ``trace start|stop|snapshot`` |
| Program | ``start``, ``stop``, ``kill``, ``run``, ``set command=CMD`` |
| CBR / FTP application | ``start``, ``stop``, ``reset``, ``set PARAM V`` |
| node | ``reboot`` (its processes are stopped and its start command runs again) |
| ``ns`` (the simulator) | ``halt`` (no further timeline events), ``terminate``, ``swapout``, ``stoprun`` (stop every program and agent), ``msg TEXT``, ``log TEXT`` |

A LAN's ``delay D`` gives each member's half D/2, and its ``plr P`` gives each
half 1 - sqrt(1 - P), as at creation. Link changes go to the engine's ``set``
and take effect without reordering.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Any, Callable

from wanlab.plan.plan import engine_params
from wanlab.backends.emulate import engine, netns, nodes, procs
from wanlab.run.context import Context
from wanlab.engine.link_events import requests_for
from wanlab.run.programs import ProgramRunner
from wanlab.run.sim_traffic import SimTrafficAgent
from wanlab.run.traffic import TrafficAgent
from wanlab.plan.sim_flows import sim_flows
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
        sim = {n for n, np_ in self.plan.nodes.items() if np_.simulated}
        for f in sim_flows(self.plan.exp or row.ir, self.plan, sim) if sim else []:
            self.agents[f.app] = SimTrafficAgent(self, f)
        apps = [a for a in row.ir.agents if a.kind.startswith("Application/")]
        for i, a in enumerate(apps):
            if a.name in self.agents:
                continue
            if a.kind.endswith("CBR") or a.kind.endswith("FTP"):
                try:
                    self.agents[a.name] = TrafficAgent(self, a, i)
                except ValueError as e:
                    self.log_note(f"agent {a.name} unusable: {e}")
        self.links = {l.name: l for l in row.ir.links}
        self.lans = {l.name: l for l in row.ir.lans}
        # current engine parameters of every direction, starting from the IR
        self.params: dict[tuple[str, str], dict[str, Any]] = {}
        for l in row.ir.links:
            self.params[(l.name, "ab")] = engine_params(l.ab)
            self.params[(l.name, "ba")] = engine_params(l.ba)
        for lan in row.ir.lans:
            for m, iface in zip(lan.members, self._lan_ports(lan.name)):
                self.params[(lan.name, f"{iface}/to_lan")] = engine_params(m.to_lan)
                self.params[(lan.name, f"{iface}/from_lan")] = engine_params(m.from_lan)

    # -- bookkeeping ------------------------------------------------------------
    def _lan_ports(self, lan: str) -> list[str]:
        return [i.port for np_ in self.plan.nodes.values() for i in np_.interfaces
                if i.network == lan]

    def objects(self) -> dict[str, str]:
        kinds = {"ns": "simulator"}
        kinds.update({n.name: "node" for n in self.exp.nodes})
        kinds.update({n: "link" for n in self.links})
        kinds.update({n: "lan" for n in self.lans})
        kinds.update({n: "program" for n in self.programs})
        kinds.update({n: "agent" for n in self.agents})
        return kinds

    # -- dispatch ---------------------------------------------------------------
    def fire(self, target: str, action: str, args: list[str]) -> Outcome:
        kinds = self.objects()
        kind = kinds.get(target)
        if kind is None:
            other = {a.name for a in self.exp.agents} - set(self.agents)
            if target in other:
                return "error", f"{target} is a transport agent; send events to its application"
            return "error", f"no object named {target!r}"
        try:
            return getattr(self, f"_{kind}")(target, action, args)
        except (ValueError, KeyError) as e:
            return "error", f"{target} {action}: {e}"
        except Exception as e:     # an engine refusal, a failed process start, ...
            return "error", f"{target} {action}: {e}"

    # links and LANs
    def _link(self, target: str, action: str, args: list[str]) -> Outcome:
        return self._shaped(target, action, args, lan=False)

    def _lan(self, target: str, action: str, args: list[str]) -> Outcome:
        return self._shaped(target, action, args, lan=True)

    def _shaped(self, target: str, action: str, args: list[str], lan: bool) -> Outcome:
        trace_dir = os.path.join(self.folder, "traces")
        reqs, detail = requests_for(self.params, target, action, args, lan, trace_dir)
        if any(r["cmd"] == "capture_start" for r in reqs):
            os.makedirs(trace_dir, exist_ok=True)
        with engine.Client(self.sock) as c:
            for r in reqs:
                c.call(r.pop("cmd"), **r)
        return "ok", detail

    # programs and agents
    def _program(self, target: str, action: str, args: list[str]) -> Outcome:
        p = self.programs[target]
        if action == "start":
            return p.start()
        if action == "run":
            return p.run()
        if action == "stop":
            return p.stop(signal.SIGTERM)
        if action == "kill":
            return p.stop(signal.SIGKILL)
        if action == "set":
            return p.set(args)
        raise ValueError("unknown event; programs take start, stop, kill, run, set")

    def _agent(self, target: str, action: str, args: list[str]) -> Outcome:
        a = self.agents[target]
        if action in ("start", "stop", "reset"):
            return getattr(a, action)()
        if action == "set":
            return a.set(args)
        raise ValueError("unknown event; traffic agents take start, stop, reset, set")

    # nodes and the simulator
    def _node(self, target: str, action: str, args: list[str]) -> Outcome:
        if action != "reboot":
            raise ValueError("unknown event; nodes take reboot")
        ns = self.plan.nodes[target].netns
        ino = netns.inode(ns)
        killed = 0
        for pid in netns.pids_in(ino) if ino else []:
            if procs.kill(pid, procs.start_time(pid)):
                killed += 1
        node = next(n for n in self.exp.nodes if n.name == target)
        if node.startcmd:
            with self.db_lock:
                nodes.start_command(self.store, self.row, self.plan, target, node.startcmd,
                                   self.folder)
        return "ok", f"{killed} processes stopped" + (", start command rerun"
                                                      if node.startcmd else "")

    def prepare_agents(self) -> None:
        """At t = 0: start every agent's receiver (and paused CBR sender) in the background."""
        for a in self.agents.values():
            threading.Thread(target=a._prepare_quietly, daemon=True).start()

    def stop_all(self) -> None:
        for a in self.agents.values():
            a.stop(prepare_next=False)
        for p in self.programs.values():
            p.stop(signal.SIGTERM)

    def _simulator(self, target: str, action: str, args: list[str]) -> Outcome:
        if action in ("msg", "log"):
            self.log_note(" ".join(args))
            return "ok", " ".join(args)
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


