"""Which machine does an event of a cluster experiment, and what it does there.

Every object of a cluster experiment lives on one machine (a node, its programs and
agents; a link between two nodes of one machine; a LAN, kept whole), except a link cut
between machines: each machine holds one end, and each direction is shaped by the
machine that sends it, whole (the other end passes it through unshaped, holding each
frame until the due time it carries: :mod:`wanlab.cluster.experiment`). So an event on a
cut link becomes one event on each machine: ``up``/``down`` on both (the whole link goes
down everywhere), anything of one direction (bandwidth, delay, loss, queue, drop, trace)
on the machine that shapes that direction; a delay shorter than the machines' measured
path is refused.

An event sequence whose steps are on several machines, and an ns ``swapout`` or
``terminate``, belong to no one machine: :func:`conducted` lists them for the conductor
(:mod:`wanlab.cluster.conductor`), which sends each step to its machines in turn, and
asks the controller's machine for the whole experiment's swap-out after every part has
halted its timeline (each part gets ``halt`` at that time).

Pure: the whole experiment, where its objects are and the measured delays in, one list
of events per machine out. The controller uses it for the timeline (each part plays its
share on a clock started at the same moment on every machine) and for ``tevc``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from wanlab.errors import WanlabError
from wanlab.model.ir import Event, Experiment, Link, Timeline

# link actions that change one direction (the others, up and down, change the whole link)
PER_DIRECTION = ("bandwidth", "delay", "plr", "set", "drop", "trace")
# ns events the whole experiment must take, not a part: the controller's (by the
# conductor, on the timeline; by the commands, from tevc)
CONTROLLER_ONLY = ("swapout", "terminate")


@dataclasses.dataclass(frozen=True)
class Where:
    """Where a cluster experiment's objects are: node -> machine, ``lan:NAME`` -> machine,
    and the measured one-way delay between two machines (both orders)."""

    machine_of: dict[str, str]
    one_way: dict[tuple[str, str], float]

    def machines(self) -> list[str]:
        return sorted({m for k, m in self.machine_of.items() if not k.startswith("lan:")})


def owners(exp: Experiment, where: Where, target: str) -> list[str]:
    """The machines that hold object ``target`` (two for a cut link, every machine for
    the simulator)."""
    kind = exp.kinds().get(target)
    m = where.machine_of
    if kind == "node":
        return [m[target]]
    if kind == "link":
        link = _link(exp, target)
        return sorted({m[link.a], m[link.b]})
    if kind == "lan":
        return [m[f"lan:{target}"]]
    if kind == "program":
        return [m[next(p.node for p in exp.programs if p.name == target)]]
    if kind in ("application", "agent"):
        # a flow's two ends: the sender's machine and the receiver's
        return sorted({m[x] for x in flow_ends(exp, target)})
    if kind == "simulator":
        return where.machines()
    if kind == "timeline":
        tl = next(t for t in exp.timelines if t.name == target)
        return sorted({x for e in tl.events for x in owners(exp, where, e.target)})
    raise WanlabError(f"{target!r} is not an object of {exp.name}")


def _link(exp: Experiment, name: str) -> Link:
    return next(x for x in exp.links if x.name == name)


def flow_ends(exp: Experiment, name: str) -> list[str]:
    """The nodes of agent or application ``name`` and of the agent it is connected to."""
    agents = {a.name: a for a in exp.agents}
    a = agents[name]
    transport = agents.get(a.attached) if a.attached else a
    nodes = [x.node for x in (transport, agents.get(transport.peer) if transport and
                              transport.peer else None) if x is not None and x.node]
    if not nodes:
        raise WanlabError(f"agent {name} is on no node")
    return nodes


def shaped_dir(link: Link, machine: str, where: Where) -> str:
    """The direction of cut ``link`` that ``machine`` sends (and shapes)."""
    return "ab" if where.machine_of[link.a] == machine else "ba"


def for_machine(exp: Experiment, where: Where, ev: Event, machine: str) -> Event | None:
    """What event ``ev`` does on ``machine`` (None: nothing there). Raises WanlabError
    naming the event when a cut link would get a delay shorter than the machines' path."""
    if machine not in owners(exp, where, ev.target):
        return None
    kind = exp.kinds().get(ev.target)
    if kind == "simulator" and ev.action in CONTROLLER_ONLY:
        raise WanlabError(f"ns {ev.action} on a cluster experiment: use 'wanlab "
                          f"{ev.action} {exp.name}' (the event would stop one machine's "
                          f"part only)")
    if kind != "link" or ev.action not in PER_DIRECTION:
        return ev
    link = _link(exp, ev.target)
    ma, mb = where.machine_of[link.a], where.machine_of[link.b]
    if ma == mb:
        return ev
    mine = shaped_dir(link, machine, where)
    if ev.dir is not None and ev.dir != mine:
        return None
    ev = dataclasses.replace(ev, dir=mine)
    if ev.action == "delay":
        path = where.one_way[(ma, mb)]
        if 0 < ev.value < path:
            raise WanlabError(f"{ev.target} delay {ev.value * 1e3:g} ms at t={ev.time_s:g} s"
                              f": less than the {path * 1e3:.3f} ms between machines {ma} "
                              f"and {mb} the link is cut across")
    return ev


def shares(exp: Experiment, where: Where, ev: Event) -> list[tuple[str, Event]]:
    """``ev`` as each machine that does something for it does it."""
    return [(m, x) for m in owners(exp, where, ev.target)
            if (x := for_machine(exp, where, ev, m)) is not None]


def spanning(exp: Experiment, where: Where, steps: tuple[Event, ...] | list[Event]) -> bool:
    """Whether the steps of a sequence are done by more than one machine."""
    return len({m for ev in steps for m, _ in shares(exp, where, ev)}) > 1


def _sequences(events: tuple[Event, ...]) -> dict[str, list[Event]]:
    out: dict[str, list[Event]] = {}
    for ev in events:
        if ev.sequence is not None:
            out.setdefault(ev.sequence, []).append(ev)
    return {k: sorted(v, key=lambda e: e.step) for k, v in out.items()}


def _whole(exp: Experiment, ev: Event) -> bool:
    """An ns swapout/terminate of the timeline: the whole experiment's, the conductor's."""
    return exp.kinds().get(ev.target) == "simulator" and ev.action in CONTROLLER_ONLY


def split(exp: Experiment, where: Where, events: tuple[Event, ...]) -> dict[str, list[Event]]:
    """``events`` (a timeline) as each machine's share. An event sequence whose steps are
    on several machines, and an ns ``swapout``/``terminate``, are the conductor's
    (:func:`conducted`): a sequence's steps are left out of every share, and the ns
    event becomes ``halt`` on every machine (the timeline stops everywhere at once)."""
    out: dict[str, list[Event]] = {m: [] for m in where.machines()}
    for ev in events:
        if _whole(exp, ev) and ev.sequence is not None:
            raise WanlabError(f"--cluster: ns {ev.action} as a step of event sequence "
                              f"{ev.sequence}: put it on the timeline ($ns at)")
    across = {k for k, steps in _sequences(events).items() if spanning(exp, where, steps)}
    for ev in events:
        if ev.sequence in across:
            continue
        if _whole(exp, ev):
            ev = dataclasses.replace(ev, action="halt")
        for m, x in shares(exp, where, ev):
            out[m].append(x)
    return out


def conducted(exp: Experiment, where: Where) -> list[dict[str, Any]]:
    """What no one machine's timeline can do, for the conductor
    (:mod:`wanlab.cluster.conductor`) to play: each sequence whose steps are on several
    machines (``at``: its start; ``steps``: each step as ``[machine, event]`` pairs, done
    at once), and each ns ``swapout``/``terminate`` (``at``, ``op``)."""
    out: list[dict[str, Any]] = []
    for key, steps in _sequences(exp.events).items():
        if spanning(exp, where, steps):
            out.append({"kind": "sequence", "name": key, "at": steps[0].time_s,
                        "steps": [[[m, x.to_json()] for m, x in shares(exp, where, ev)]
                                  for ev in steps]})
    out += [{"kind": "whole", "op": ev.action, "at": ev.time_s} for ev in exp.events
            if _whole(exp, ev) and ev.sequence is None]
    return sorted(out, key=lambda x: x["at"])


def sequence_steps(exp: Experiment, where: Where, tl: Timeline) -> list[list[list[Any]]]:
    """The steps of sequence ``tl`` as :func:`conducted` gives them (for tevc)."""
    return [[[m, x.to_json()] for m, x in shares(exp, where, ev)] for ev in tl.events]


def timelines(exp: Experiment, where: Where) -> dict[str, tuple[Timeline, ...]]:
    """Each machine's share of every timeline (a timeline started by tevc starts its
    share on each machine that has one). A sequence whose steps are on several machines
    is no machine's: tevc hands it to the conductor."""
    out: dict[str, list[Timeline]] = {m: [] for m in where.machines()}
    for tl in exp.timelines:
        if tl.kind == "sequence" and spanning(exp, where, tl.events):
            continue
        for m, evs in split(exp, where, tl.events).items():
            if evs:
                out[m].append(dataclasses.replace(tl, events=tuple(evs)))
    return {m: tuple(v) for m, v in out.items()}
