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

Pure: the whole experiment, where its objects are and the measured delays in, one list
of events per machine out. The controller uses it for the timeline (each part plays its
share on a clock started at the same moment on every machine) and for ``tevc``.
"""

from __future__ import annotations

import dataclasses

from wanlab.errors import WanlabError
from wanlab.model.ir import Event, Experiment, Link, Timeline

# link actions that change one direction (the others, up and down, change the whole link)
PER_DIRECTION = ("bandwidth", "delay", "plr", "set", "drop", "trace")
# ns events the whole experiment must take, not a part: the controller's own
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


def split(exp: Experiment, where: Where, events: tuple[Event, ...]) -> dict[str, list[Event]]:
    """``events`` (a timeline) as each machine's share. An event sequence (steps that
    wait for each other) must stay on one machine: one whose steps span machines is
    refused by name."""
    out: dict[str, list[Event]] = {m: [] for m in where.machines()}
    seqs: dict[str, set[str]] = {}
    for ev in events:
        machines = [m for m in owners(exp, where, ev.target)
                    if for_machine(exp, where, ev, m) is not None]
        if ev.sequence is not None:
            seqs.setdefault(ev.sequence, set()).update(machines)
        for m in machines:
            out[m].append(for_machine(exp, where, ev, m))
    for key, ms in seqs.items():
        if len(ms) > 1:
            raise WanlabError(f"--cluster: event sequence {key} has steps on machines "
                              f"{', '.join(sorted(ms))}; a sequence's steps wait for each "
                              f"other, so they must be on one machine (tb-fix-node them)")
    return out


def timelines(exp: Experiment, where: Where) -> dict[str, tuple[Timeline, ...]]:
    """Each machine's share of every timeline (a timeline started by tevc starts its
    share on each machine that has one)."""
    out: dict[str, list[Timeline]] = {m: [] for m in where.machines()}
    for tl in exp.timelines:
        if tl.kind == "sequence":
            ms = {m for e in tl.events for m in owners(exp, where, e.target)}
            if len(ms) > 1:
                raise WanlabError(f"--cluster: event sequence {tl.name} has steps on "
                                  f"machines {', '.join(sorted(ms))}; a sequence's steps wait "
                                  f"for each other, so they must be on one machine")
        for m, evs in split(exp, where, tl.events).items():
            if evs:
                out[m].append(dataclasses.replace(tl, events=tuple(evs)))
    return {m: tuple(v) for m, v in out.items()}
