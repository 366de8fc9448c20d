"""Driving a cluster experiment at run time, with the life cycle's own method names.

:class:`OnCluster` answers ``tevc``, ``set_link``, ``apply`` (link and LAN events done by
the engines at once), ``stats``, ``event_log``, ``follow`` and ``flows`` with the
arguments :class:`~wanlab.lifecycle.Lab` takes; the cluster's site
(:mod:`wanlab.site.cluster`) gives them to every front door. ``OnCluster`` is also where
:meth:`Lab.run <wanlab.lifecycle.Lab.run>` plays a cluster experiment (``wanlab run FILE
--cluster``): create, the timeline to its end on every machine, stats, swap-out, the
flows joined.

Every event is split as the timeline's are (:mod:`wanlab.cluster.events`): it goes to the
machines that hold its object, translated for each (a cut link's direction to the
machine that shapes it whole; a delay shorter than the machines' path is refused). Every
call to the parts goes through :meth:`OnCluster._on_parts`: by each agent's socket when
its machine's folder is this host's (the local test cluster), through Ray otherwise; one
Ray session is kept for the life of the object in a ``with`` (``run``), so its polling
attaches to Ray once.

The portal's consoles and captures are here too: a node's argv from its machine's agent
(the local test cluster's namespaces are this host's) or a terminal relayed by the agent
(:mod:`wanlab.cluster.console`), and each machine's captures, a cut link's directions
each captured by the machine that shapes it.
"""

from __future__ import annotations

import base64
import contextlib
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from wanlab.cluster import agent as agents
from wanlab.cluster import connect, events, experiment
from wanlab.errors import WanlabError
from wanlab.model.ir import Event, Experiment, Timeline
from wanlab.model.states import ACTIVATING, ACTIVE, DEGRADED
from wanlab.run import captures
from wanlab.store.db import ExperimentRow

FOLLOW_POLL_S = 0.5     # how often ``follow`` reads the machines' logs
FOLLOW_HOLD_S = 1.0     # an entry is yielded once every machine had this long to log its peers


class OnCluster:
    """A cluster experiment's run-time operations (``lab``: the controller's life cycle,
    for its store and its progress messages)."""

    poll_s = 0.5        # how often ``Lab.run`` looks whether the timeline is over

    def __init__(self, lab: Any, say=print):
        self.lab, self.store, self.say = lab, lab.store, say
        self._session: contextlib.ExitStack | None = None

    # one Ray session for as long as the object is used in a ``with``
    def __enter__(self) -> OnCluster:
        self._session = contextlib.ExitStack()
        self._session.enter_context(connect.session(experiment._cluster(self.store)))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    # -- Lab.run's steps -------------------------------------------------------------
    def create(self, exp: Experiment, source_path: str | None) -> ExperimentRow:
        experiment.create(self.store, exp, source_path, say=self.say)
        return self.store.get(exp.name)

    def timeline_entries(self, row: ExperimentRow) -> int:
        """Timeline entries of every machine's log once the timeline is over: an event of
        a cut link, a flow between machines or ns is logged by each machine it went to."""
        at = experiment.where_of(self.store, row.name)
        # (a sequence over several machines: each step by each machine that does it)
        return sum(len(v) for v in events.split(row.ir, at, row.ir.events).values()) + sum(
            len(step) for item in events.conducted(row.ir, at) if item["kind"] == "sequence"
            for step in item["steps"])

    def swapout(self, name: str) -> None:
        experiment.swapout(self.store, name, say=self.say)

    def terminate(self, name: str) -> None:
        experiment.terminate(self.store, name, say=self.say)

    def t0(self, row: ExperimentRow) -> float:
        return next((r.detail["t0"] for r in experiment.parts_of(self.store, row.name)
                     if "t0" in r.detail), row.updated)

    def repair(self, name: str, fresh: bool = False) -> list[str]:
        """``swapin --repair``: ask every part how it is, rebuild only the degraded ones
        (an engine, scheduler or node namespace gone) by their machines' own repair, each
        joining the others' t = 0; the parts that are well keep running untouched.
        ``fresh``: the rebuilt parts' nodes drop their writable layers. Returns the
        machines repaired."""
        row = self.store.get(name)
        if row.state not in (ACTIVE, DEGRADED):
            raise WanlabError(f"experiment {name!r} is {row.state}, not degraded: nothing "
                              f"to repair")
        machines = experiment._machines(self.store, name)
        with self._ray() if not self._direct() else contextlib.nullcontext():
            # a machine that does not answer: its part moves to a live machine (below)
            states = experiment._part_states(self.store, experiment._cluster(self.store),
                                             name, machines)
            lost = sorted(m for m, s in states.items() if s is None)
            broken = sorted(m for m, s in states.items() if s is not None and
                            (s["state"] != ACTIVE or s["broken"]))
            if lost:
                return self._move(name, broken, lost, fresh)
            if not broken:
                if row.state == DEGRADED:
                    self.store.set_state(row.id, ACTIVE, "every part found well")
                raise WanlabError(f"experiment {name!r}: every part is active on its "
                                  f"machine, nothing to repair")
            for m in broken:
                why = "; ".join(states[m]["broken"]) or states[m]["error"] or states[m]["state"]
                self.say(f"{name}: repairing the part on {m} ({why})")
            self.store.set_state(row.id, ACTIVATING, "repair of " + ", ".join(broken))
            try:
                self._on_parts(name, [(m, "repair", (fresh,)) for m in broken])
            except BaseException as e:
                self.store.set_state(row.id, DEGRADED, "repair failed", error=str(e))
                raise
        self.store.set_state(row.id, ACTIVE, "repaired " + ", ".join(broken))
        self.say(f"{name}: repaired on {', '.join(broken)}; active on {len(machines)} "
                 f"machines")
        return broken

    def _move(self, name: str, broken: list[str], lost: list[str], fresh: bool
              ) -> list[str]:
        """Repair the broken parts, then move the lost machines' parts to live machines
        (:mod:`wanlab.cluster.move`), printing where every node now runs."""
        from wanlab.cluster import move
        row = self.store.get(name)
        self.store.set_state(row.id, ACTIVATING, "repair: moving the parts of "
                             + ", ".join(lost))
        try:
            if broken:
                self._on_parts(name, [(m, "repair", (fresh,)) for m in broken])
            with self._ray():
                to = move.move_lost(self.store, name, lost, say=self.say)
        except BaseException as e:
            self.store.set_state(row.id, DEGRADED, "repair failed", error=str(e))
            raise
        self.store.set_state(row.id, ACTIVE, "repaired: " + ", ".join(
            f"{a} moved to {b}" for a, b in sorted(to.items())))
        for line in move.placement_lines(self.store, name):
            self.say(f"  {line}")
        self.say(f"{name}: repaired; active on "
                 f"{len(experiment._machines(self.store, name))} machines")
        return broken + sorted(to.values())

    # -- results ---------------------------------------------------------------------
    def event_log(self, name: str) -> list[dict[str, Any]]:
        """Every part's event log, each entry naming its machine, in time order."""
        return self._merged(name, "events", lambda e: (e.get("scheduled_s") or 0.0,
                                                        e.get("fired_s") or 0.0))

    def flows(self, name: str) -> list[dict[str, Any]]:
        """The flows, each between machines joined from its two halves
        (:func:`~wanlab.cluster.experiment.join_halves`). Every machine's clock started at
        one moment, but each part wrote its own t0: the experiment's is given to all, so
        the flows of one run are one run's."""
        t0 = self.t0(self.store.get(name))
        rows = self._merged(name, "flows", lambda f: f.get("started_s") or 0.0)
        return [{**f, "t0": t0} for f in experiment.join_halves(rows)]

    def _merged(self, name: str, op: str, key) -> list[dict[str, Any]]:
        self.store.get(name)
        machines = experiment._machines(self.store, name)
        got = self._on_parts(name, [(m, op, ()) for m in machines])
        return sorted(({**e, "machine": m} for m, rows in zip(machines, got, strict=True)
                       for e in rows), key=key)

    def stats(self, name: str, target: str | None = None) -> dict[str, Any]:
        """The engines' statistics as one engine's: every machine's links, LANs and nodes;
        a cut link's direction from the machine that shapes it (the other machine passes
        it through unshaped, its counters count the tunnel)."""
        at = experiment.where_of(self.store, name)
        exp = self.store.get(name).ir
        machines = (events.owners(exp, at, target) if target is not None
                    else experiment._machines(self.store, name))
        got = dict(zip(machines, self._on_parts(name, [(m, "stats", (target,))
                                                       for m in machines]), strict=True))
        merged: dict[str, Any] = {}
        for m in sorted(got):
            for key, value in got[m].items():
                if isinstance(value, dict) and key not in ("realtime",):
                    for obj, body in value.items():    # a cut link's: put together below
                        merged.setdefault(key, {}).setdefault(obj, body)
                elif key != "ok":
                    merged.setdefault("per_machine", {}).setdefault(m, {})[key] = value
        for link in exp.links:
            ma, mb = at.machine_of.get(link.a), at.machine_of.get(link.b)
            if ma != mb and ma in got and mb in got and link.name in got[ma].get("links", {}):
                merged["links"][link.name] = {
                    **got[ma]["links"][link.name],
                    "ab": got[ma]["links"][link.name]["ab"],
                    "ba": got[mb]["links"][link.name]["ba"],
                    "machines": {"ab": ma, "ba": mb}}
        merged["machines"] = sorted(got)
        return merged

    def in_force(self, name: str) -> dict[str, Any]:
        """The values in force as one experiment's (:meth:`wanlab.lifecycle.Lab.in_force`):
        each link direction from the machine that shapes it (a cut link's from the machine
        that sends it), each LAN from its machine."""
        at = experiment.where_of(self.store, name)
        exp = self.store.get(name).ir
        machines = experiment._machines(self.store, name)
        got = dict(zip(machines, self._on_parts(name, [(m, "in_force", ())
                                                       for m in machines]), strict=True))
        links = {m: {x["name"]: x for x in got[m]["links"]} for m in got}
        lans = {x["name"]: x for m in got for x in got[m]["lans"]}
        out: dict[str, Any] = {"links": [], "lans": []}
        for link in exp.links:
            ma, mb = at.machine_of.get(link.a), at.machine_of.get(link.b)
            a, b = links.get(ma, {}).get(link.name), links.get(mb, {}).get(link.name)
            if a is not None and b is not None:
                out["links"].append({**a, "ba": b["ba"]})
        out["lans"] = [lans[lan.name] for lan in exp.lans if lan.name in lans]
        return out

    def follow(self, name: str) -> Iterator[dict[str, Any]]:
        """Every machine's events as they fire, merged in time order, until the
        experiment is no longer active. An entry waits ``FOLLOW_HOLD_S`` of experiment
        time before it is yielded, so one logged a little later by another machine still
        comes in its place."""
        row = self.store.get(name)
        if row.state != ACTIVE:
            raise WanlabError(f"experiment {name!r} is {row.state}, not active")
        seen: set[tuple[str, int]] = set()
        held: list[dict[str, Any]] = []
        with self._ray() if not self._direct() else contextlib.nullcontext():
            while True:
                row = self.store.get(name)
                active = row.state == ACTIVE
                try:
                    log = self.event_log(name) if active else []
                except WanlabError:
                    if self.store.get(name).state == ACTIVE:
                        raise
                    log, active = [], False     # swapped out meanwhile
                for e in log:
                    key = (e["machine"], e["id"])
                    if key not in seen:
                        seen.add(key)
                        held.append(e)
                held.sort(key=_when)
                now = time.time() - self.t0(row)
                while held and (not active or _when(held[0])[0] <= now - FOLLOW_HOLD_S):
                    yield held.pop(0)
                if not active:
                    return
                time.sleep(FOLLOW_POLL_S)

    # -- events ----------------------------------------------------------------------
    def tevc(self, name: str, time_spec: str, target: str, action: str,
             args: list[str] | None = None, wait: bool = False) -> dict[str, Any]:
        """Emulab's tevc on a cluster experiment: the event typed against the whole
        experiment, then sent to the machine(s) that own its object, translated for each
        (:func:`wanlab.cluster.events.for_machine`); an event for several machines is
        given one time since t = 0 for all. Returns the replies merged as
        :meth:`wanlab.lifecycle.Lab.tevc` returns them, with ``machines``."""
        from wanlab.frontends.normalize import event
        row = self.store.get(name)
        if row.state != ACTIVE:
            raise WanlabError(f"experiment {name!r} is {row.state}, not active")
        exp = row.ir
        kinds = exp.kinds()
        if target not in kinds:
            raise WanlabError(f"no object named {target!r} in experiment {name!r}")
        group = next((g for g in exp.groups if g.name == target), None)
        members = group.members if group is not None else (target,)
        if not members:
            raise WanlabError(f"event group {target!r} has no members")
        at = experiment.where_of(self.store, name)
        seq = next((t for t in exp.timelines if t.name == target and t.kind == "sequence"),
                   None)
        if seq is not None and events.spanning(exp, at, seq.events):
            if action not in ("start", "run"):
                raise WanlabError(f"event sequence {target} takes start or run, not "
                                  f"{action}")
            return self._conduct(name, exp, at, seq, time_spec)
        sends: list[tuple[str, Event]] = []
        for member in members:
            ev = event(exp, 0.0, member, action, list(args or []), kinds=kinds)
            for m in events.owners(exp, at, member):
                mine = events.for_machine(exp, at, ev, m)
                if mine is not None:
                    sends.append((m, mine))
        if not sends:
            raise WanlabError(f"{target} {action}: nothing to do on any machine")
        if len({m for m, _ in sends}) > 1:
            time_spec = experiment._shared_time(self.store, name, time_spec)
        rs = self._on_parts(name, [(m, "event", (time_spec, ev.to_json(), wait))
                                   for m, ev in sends])
        machines = [m for m, _ in sends]
        if len(rs) == 1:
            return {**rs[0], "machines": machines}
        return {"ok": all(r.get("ok") for r in rs),
                "scheduled_s": min((r.get("scheduled_s", 0.0) for r in rs), default=0.0),
                "outcome": "ok" if all(r.get("outcome", "ok") == "ok" for r in rs)
                else "error",
                "detail": "; ".join(f"{m}: {r.get('detail', 'scheduled')}"
                                    for m, r in zip(machines, rs, strict=True)),
                "t": max((r.get("t") or 0.0 for r in rs), default=0.0),
                "lateness_s": max((r["lateness_s"] for r in rs
                                   if r.get("lateness_s") is not None), default=None),
                "machines": machines, "replies": rs}

    def _conduct(self, name: str, exp: Experiment, at: events.Where, seq: Timeline,
                 time_spec: str) -> dict[str, Any]:
        """tevc ``SEQ start`` of a sequence whose steps are on several machines: played
        by the conductor of the first machine (:mod:`wanlab.cluster.conductor`), its
        first step at one time for all."""
        from wanlab.model.ir import HORIZON_S
        text = experiment._shared_time(self.store, name, time_spec)
        try:
            start = float(text)
        except ValueError:
            raise WanlabError(f"time {time_spec!r} is not now, +SECONDS or SECONDS") from None
        if not 0 <= start <= HORIZON_S:
            raise WanlabError(f"time {time_spec!r} is outside the experiment's horizon")
        parts = experiment.parts_of(self.store, name)
        t0 = next((r.detail["t0"] for r in parts if "t0" in r.detail), None)
        if t0 is None:
            raise WanlabError(f"{name}: its clock has not started")
        first = experiment._machines(self.store, name)[0]
        item = {"kind": "sequence", "name": seq.name, "at": start,
                "steps": events.sequence_steps(exp, at, seq)}
        self._on_parts(name, [(first, "conduct", (t0, [item], None, {}))])
        machines = sorted({m for step in item["steps"] for m, _ in step})
        return {"ok": True, "scheduled_s": start, "outcome": "ok", "t": start,
                "lateness_s": None, "machines": machines,
                "detail": f"sequence {seq.name}: {len(item['steps'])} steps on "
                          f"{', '.join(machines)} from t={start:.6f} s"}

    def set_link(self, name: str, target: str, dir: str = "both", **change: Any) -> None:
        """As :meth:`Lab.set_link <wanlab.lifecycle.Lab.set_link>`: each direction on the
        machine that shapes it."""
        from wanlab.frontends.normalize import link_change
        exp = self.store.get(name).ir
        if exp.kinds().get(target) not in ("link", "lan"):
            raise WanlabError(f"{target!r} is not a link or LAN of experiment {name!r}")
        self.apply(name, link_change(exp, target, dir, **change))

    def apply(self, name: str, evs: list[Event]) -> None:
        """Link and LAN events done at once by the engines of the machines that hold them
        (a cut link's ``up``/``down`` on both)."""
        row = self.store.get(name)
        if row.state != ACTIVE:
            raise WanlabError(f"experiment {name!r} is {row.state}, not active")
        at = experiment.where_of(self.store, name)
        shares: dict[str, list[dict[str, Any]]] = {}
        for ev in evs:
            for m in events.owners(row.ir, at, ev.target):
                mine = events.for_machine(row.ir, at, ev, m)
                if mine is not None:
                    shares.setdefault(m, []).append(mine.to_json())
        if not shares:
            raise WanlabError(f"{name}: nothing to change on any machine")
        self._on_parts(name, [(m, "apply", (evs,)) for m, evs in sorted(shares.items())])

    # -- consoles and captures (the portal's) -----------------------------------------------
    def node_argv(self, name: str, node: str, argv: list[str]) -> list[str]:
        """As :meth:`Lab.node_argv <wanlab.lifecycle.Lab.node_argv>`: an argv that runs
        ``argv`` in ``node`` from this host, which its machine's agent gives. Only on the
        local test cluster, whose machines' namespaces are this host's; a machine
        elsewhere relays a terminal instead (:meth:`console`)."""
        machine = self._machine_of_node(name, node)
        if not self.runs_here():
            raise WanlabError(f"node {node} runs on machine {machine}, not on this host: "
                              f"its agent relays a terminal (a console), or 'wanlab exec "
                              f"{name} {node} -- CMD' runs a command there")
        return list(self._on_parts(name, [(machine, "node_argv", (node, argv))])[0])

    def console(self, name: str, node: str, argv: list[str]) -> Relayed:
        """A terminal running ``argv`` in ``node``, started on its machine by the agent
        and relayed through it (:mod:`wanlab.cluster.console`): by the agent's socket on
        the local test cluster, else through Ray, inside a ``with`` of this object (one
        Ray session for the terminal's life)."""
        machine = self._machine_of_node(name, node)
        if self.runs_here():
            r = Relayed(name, machine, agents.machine_home(self.store.home, machine))
        else:
            with self._ray():
                r = Relayed(name, machine, None, experiment._handle(
                    self.store, experiment._cluster(self.store), machine))
        r.tid = r._call("console_open", node, argv)
        return r

    def runs_here(self) -> bool:
        """Whether the machines' namespaces and folders are this host's (the local test
        cluster): a node's argv then runs from here, a capture is read here."""
        return self._direct()

    def captures(self, name: str) -> list[dict[str, Any]]:
        """Every machine's captures of the experiment: ``{file, bytes, machine}``, ``file``
        being ``MACHINE/PATH`` (PATH in that part's folder)."""
        machines = experiment._machines(self.store, name)
        got = self._on_parts(name, [(m, "captures", ()) for m in machines])
        return [{**c, "file": f"{m}/{c['file']}", "machine": m}
                for m, caps in zip(machines, got, strict=True) for c in caps]

    def capture_start(self, name: str, link: str, dir: str = "both",
                      file: str | None = None) -> list[str]:
        """Capture ``link`` as :meth:`Lab.capture_start
        <wanlab.lifecycle.Lab.capture_start>` does: a link inside one machine by that
        machine's engine; a cut link's direction by the machine that sends (shapes) it, so
        ``both`` is one file on each of its two machines. Returns the files."""
        row = self.store.get(name)
        if row.state != ACTIVE:
            raise WanlabError(f"experiment {name!r} is {row.state}, not active")
        l = next((x for x in row.ir.links if x.name == link), None)
        if l is None:
            raise WanlabError(f"{link!r} is not a link of experiment {name!r}")
        where = experiment.where_of(self.store, name).machine_of
        ma, mb = where[l.a], where[l.b]
        if dir not in ("ab", "ba", "both"):
            raise WanlabError(f"capture of {link}: direction {dir!r} is not ab, ba or both")
        if ma == mb:
            calls = [(ma, dir)]
        else:
            calls = [(m, d) for m, d in ((ma, "ab"), (mb, "ba")) if dir in (d, "both")]
        rel = file or captures.new_file(link)
        self._on_parts(name, [(m, "capture_start", (link, d, rel)) for m, d in calls])
        return [f"{m}/{rel}" for m, _ in calls]

    def capture_stop(self, name: str) -> None:
        """Stop every capture on every machine."""
        self._on_parts(name, [(m, "capture_stop", ())
                              for m in experiment._machines(self.store, name)])

    def capture_file(self, name: str, file: str) -> str:
        """A path on this host of capture ``file`` (``MACHINE/PATH``, as :meth:`captures`
        lists it), flushed up to now: the machine's own file on the local test cluster, else
        a copy fetched through its agent into the controller's folder of the experiment."""
        machine, _, rel = file.partition("/")
        if file not in {c["file"] for c in self.captures(name)}:   # nothing else is read
            raise WanlabError(f"experiment {name!r} has no capture {file!r}")
        if self.runs_here():
            return self._on_parts(name, [(machine, "capture_file", (rel,))])[0]
        from wanlab.cluster.part import READ_MAX
        from wanlab.store.db import make_private_dir
        path = os.path.join(self.store.folder(name), "fetched", machine, rel)
        parent = self.store.folder(name)
        make_private_dir(parent)
        for part in ("fetched", machine, *rel.split("/")[:-1]):     # each one 0700
            parent = os.path.join(parent, part)
            make_private_dir(parent)
        with open(path, "wb") as out:
            while True:
                chunk = base64.b64decode(self._on_parts(name, [(machine, "capture_read", (
                    rel, out.tell(), READ_MAX))])[0])
                out.write(chunk)
                if len(chunk) < READ_MAX:
                    return path

    def _machine_of_node(self, name: str, node: str) -> str:
        machine = experiment._machine_of(self.store, name).get(node)
        if machine is None:
            raise WanlabError(f"experiment {name!r} has no node {node!r}")
        return machine

    # -- reaching the parts --------------------------------------------------------------
    def _direct(self) -> bool:
        """Whether the machines' agents are reached by their sockets (the local test
        cluster: its machines' folders are this host's)."""
        return experiment._cluster(self.store).local

    def _on_parts(self, name: str, calls: list[tuple[str, str, tuple]]) -> list[Any]:
        """Part operations ``(machine, op, args)``, all at once; their answers in order.
        Each goes by the agent's socket when it is on this host, else (and for an agent
        without one) through Ray. The errors, each with its machine, are raised together
        once every call is over."""
        home = self.store.home
        results: list[Any] = [None] * len(calls)
        errors: list[str] = []
        by_ray: list[int] = []
        with ThreadPoolExecutor(max(1, len(calls))) as pool:
            if self._direct():
                futs = [pool.submit(agents.call, agents.machine_home(home, m), op, name, *args)
                        for m, op, args in calls]
            else:
                futs = []
            for i, f in enumerate(futs):
                try:
                    results[i] = f.result()
                except agents.NoAgentHere:
                    by_ray.append(i)
                except WanlabError as e:
                    errors.append(f"machine {calls[i][0]}: {e}")
            if not futs:
                by_ray = list(range(len(calls)))
            if by_ray:
                with self._ray():
                    handles = self._handles()
                    rfuts = {i: pool.submit(experiment._get, handles[calls[i][0]].run_part
                                            .remote(calls[i][1], name, *calls[i][2]))
                             for i in by_ray}
                    for i, f in rfuts.items():
                        try:
                            results[i] = f.result()
                        except Exception as e:      # noqa: BLE001 - a lost machine too
                            errors.append(f"machine {calls[i][0]}: {e}")
        if errors:
            raise WanlabError(f"{name}: " + "; ".join(errors))
        return results

    # -- Ray ---------------------------------------------------------------------------
    def _ray(self):
        """The object's session if it is in a ``with``, else one for this call."""
        if self._session is not None:
            return contextlib.nullcontext()
        return connect.session(experiment._cluster(self.store))

    def _handles(self) -> dict[str, Any]:
        return experiment._handles(self.store, experiment._cluster(self.store))


class Relayed:
    """A node's terminal on its machine, relayed by the machine's agent: by its socket in
    machine folder ``home``, or through Ray by its ``handle``. It touches no store, so
    any thread may use it once it is open."""

    def __init__(self, name: str, machine: str, home: str | None, handle: Any = None):
        self.name, self.machine, self.home, self.handle = name, machine, home, handle
        self.tid = ""
        self.code: int | None = None        # the command's exit status once it ended

    def _call(self, op: str, *args: Any) -> Any:
        args = (self.tid, *args) if self.tid else args
        if self.handle is None:
            try:
                return agents.call(self.home, op, self.name, *args)
            except agents.NoAgentHere as e:
                raise WanlabError(f"machine {self.machine}'s agent does not answer on its "
                                  f"socket ({e})") from None
        return experiment._get(self.handle.run_part.remote(op, self.name, *args))

    def io(self, keys: bytes, wait_s: float) -> tuple[bytes, bool]:
        """Send ``keys``; what the terminal wrote (waiting up to ``wait_s`` for it) and
        whether it still runs."""
        r = self._call("console_io", base64.b64encode(keys).decode(), wait_s)
        if r.get("code") is not None:
            self.code = r["code"]
        return base64.b64decode(r["out"]), bool(r["alive"])

    def resize(self, cols: int, rows: int) -> None:
        self._call("console_resize", int(cols), int(rows))

    def close(self) -> None:
        self._call("console_close")


def _when(e: dict[str, Any]) -> tuple[float, float]:
    return (e.get("fired_s") if e.get("fired_s") is not None else e.get("scheduled_s") or 0.0,
            e.get("scheduled_s") or 0.0)
