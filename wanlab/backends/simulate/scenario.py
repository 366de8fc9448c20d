"""An experiment as one virtual-time scenario for ``wanlab-engine simulate``.

Every node is simulated (hosts and routers in the engine); links and LANs keep their
parameters; the timeline becomes engine requests at their times:

* link and LAN events: the same requests the scheduler sends in an emulation
  (:mod:`wanlab.engine.encode`);
* ``start`` / ``stop`` of an application: the engine's ``agent`` command, with a
  ``stats`` request for its source and sink at the same instant (flow accounting);
* ``$ns halt`` / ``terminate`` / ``swapout`` end the run there; ``stoprun`` stops
  every application; ``msg`` / ``log`` are logged;
* ``Program`` and node events, and application ``set`` / ``reset``, are **skipped**
  (reported as such): programs do not run in a simulation.

The run ends at the last event (or at ``duration``), as ``wanlab run`` swaps out
after its last event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wanlab.engine import encode
from wanlab.engine.protocol import AgentAction, Request, Stats
from wanlab.model.ir import Event, Experiment
from wanlab.plan.plan import make_plan
from wanlab.plan.types import Plan, SimFlow

SHORT = "5100"            # fixed, so addresses and MACs are the same in every run
NS = 1_000_000_000


@dataclass
class Disposition:
    """What became of one timeline event (the simulation's event log)."""

    time_s: float
    target: str
    action: str
    args: tuple[str, ...]
    outcome: str                 # ok | skipped | error
    detail: str


@dataclass
class FlowWindow:
    """One start … stop of an application."""

    app: str
    start_s: float
    stop_s: float | None = None


@dataclass
class Scenario:
    exp: Experiment
    plan: Plan
    flows: dict[str, SimFlow]
    requests: list[tuple[float, Request]]           # each at its time (s)
    until_s: float
    events: list[Disposition] = field(default_factory=list)
    windows: list[FlowWindow] = field(default_factory=list)

    def engine_json(self, seed: int, sample_interval_s: float) -> dict[str, Any]:
        # samples of the sinks only: throughput over time (full samples cost more than
        # the simulation in big networks)
        return encode.batch(self.requests, seed=seed, until_s=self.until_s,
                            sample_interval_s=sample_interval_s,
                            sample_agents=sorted(f.sink_id for f in self.flows.values()))


def _at(t: float) -> int:
    return round(t * NS)


def build(exp: Experiment, trace_dir: str, duration_s: float | None = None) -> Scenario:
    """The scenario of ``exp`` (raises SpecError for what cannot be simulated)."""
    plan = make_plan(exp, SHORT, simulate_all=True)
    exp = plan.exp or exp                 # with endpoint hosts for multi-homed nodes
    flows = {f.app: f for f in plan.flows}
    ports = plan.port_map()
    sc = Scenario(exp, plan, flows, [(0.0, encode.apply(plan, with_ports=False)),
                                      *((0.0, r) for r in encode.hold_blocked(plan))], 0.0)

    links, lans = {l.name for l in exp.links}, {l.name for l in exp.lans}
    programs = {p.name for p in exp.programs}
    nodes = {n.name for n in exp.nodes}
    running: dict[str, FlowWindow] = {}

    def agent(app: str, start: bool, t: float) -> None:
        sc.requests.append((t, AgentAction(agent=app, action="start" if start else "stop")))
        for target in (app, flows[app].sink_id):
            sc.requests.append((t, Stats(target=target)))
        if start and app not in running:
            running[app] = FlowWindow(app, t)
            sc.windows.append(running[app])
        elif not start and app in running:
            running.pop(app).stop_s = t

    events = sorted(exp.events, key=lambda e: e.time_s)       # stable: file order at ties
    end = duration_s if duration_s is not None else max((e.time_s for e in events), default=0.0)
    halted_at: float | None = None
    for e in events:
        def log(outcome: str, detail: str, e: Event = e) -> None:
            sc.events.append(Disposition(e.time_s, e.target, e.action, tuple(e.args()),
                                         outcome, detail))
        if halted_at is not None or e.time_s > end:
            log("skipped", "after the end of the run")
            continue
        t = e.time_s
        if e.target in links or e.target in lans:
            reqs = encode.event_requests(e, "lan" if e.target in lans else "link", ports,
                                         trace_dir)
            sc.requests.extend((t, r) for r in reqs)
            log("ok", encode.describe(e, trace_dir))
        elif e.target in flows:
            if e.action in ("start", "stop"):
                agent(e.target, e.action == "start", t)
                log("ok", f"simulated {flows[e.target].kind} {e.action}")
            else:
                log("skipped", f"{e.action} of a simulated application is not supported")
        elif e.target in programs:
            log("skipped", "programs do not run in a simulation")
        elif e.target in nodes:
            log("skipped", "node events do not apply to simulated nodes")
        elif e.target == "ns":
            if e.action in ("halt", "terminate", "swapout"):
                halted_at = t
                log("ok", "end of the run")
            elif e.action == "stoprun":
                for app in list(running):
                    agent(app, False, t)
                log("ok", "every application stopped")
            elif e.action in ("msg", "log"):
                log("ok", e.value)
            else:
                log("error", f"ns {e.action}: unknown event")
        else:
            log("error", f"no object named {e.target!r} in the simulation")
    sc.until_s = halted_at if halted_at is not None else end
    for app in list(running):                 # still running at the end: stopped there
        agent(app, False, sc.until_s)
    sc.requests.sort(key=lambda r: _at(r[0]))   # stable: timeline order at equal times
    return sc
