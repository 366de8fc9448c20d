"""The experiment life cycle: a state machine with every transition recorded.

States (as in Emulab)::

    new ──swapin──> activating ──> active ──swapout──> swapping-out ──> swapped
     ^                  │            │  ^                                 │
     └── (failure) ─────┘            └──┘ modify                          │
                                     swapped ──swapin──> activating ───────┘
    active ──(health check: engine, scheduler, a node's holder or namespace gone)──> degraded
    activating, modifying, ... ──(its process killed, the lock let go)──> degraded
    degraded ──swapin --repair──> activating ──> active   (or swapout / terminate)

A failed swap-in removes what it built and returns to the state it left,
with the reason recorded. ``terminate`` removes the resources, the folder
and the record. ``cleanup`` removes whatever the store recorded as possibly
existing (after a crash or kill -9) and leaves the experiment ``swapped``
so it can be swapped in again. Operations on one experiment are serialised
by a lock file.

``list`` and ``show`` check the health of active experiments
(wanlab/backends/emulate/health.py); a broken one becomes ``degraded``, with the
reason and the time it was noticed in its error and event log. Ctrl-C (or SIGTERM)
rolls back a swap-in, create, modify or run, and lets a swap-out, terminate or
cleanup finish first (wanlab/interrupts.py); either way the user is told which.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import asdict, replace
from typing import Any

from wanlab import interrupts
from wanlab.backends.emulate import (
    cgroups,
    egress,
    engine,
    health,
    idmap,
    images,
    modify,
    netns,
    nodefiles,
    nodes,
    oci,
    oplock,
    rootfs,
    stages,
    swap,
)
from wanlab.engine import encode, in_force, spanning
from wanlab.engine.binary import engine_binary
from wanlab.engine.client import socket_of
from wanlab.engine.protocol import CaptureSnapshot, CaptureStart, CaptureStop, Stats
from wanlab.errors import Interrupted, WanlabError
from wanlab.frontends import impair as impair_spec
from wanlab.model.ir import Experiment, Lan, LinkParams, check_event, validate
from wanlab.model.states import (  # noqa: F401 - the names callers import from here
    ACTIVATING,
    ACTIVE,
    DEGRADED,
    MODIFYING,
    NEW,
    SWAPPED,
    SWAPPING_OUT,
    TERMINATING,
    TRANSIENT,
)
from wanlab.plan.plan import make_plan
from wanlab.plan.types import Plan
from wanlab.run import captures
from wanlab.run import stages as run_stages
from wanlab.run.client import EventClient
from wanlab.store import lock
from wanlab.store.db import ExperimentRow, Store, make_private_dir


def way_out(name: str) -> str:
    """What to run for a degraded experiment."""
    return (f"'wanlab swapin --repair {name}' rebuilds it, 'wanlab terminate {name}' "
            f"removes it")


def _say_stderr(msg: str) -> None:
    print(f"wanlab: {msg}", file=sys.stderr, flush=True)


def _params(p: LinkParams) -> dict[str, Any]:
    """One direction's parameters for ``show``, in the IR's units; ``impair``: netem's
    impairments in force, in the front ends' words (none: absent)."""
    out = {"bandwidth_bps": p.bandwidth_bps, "delay_s": p.delay_s, "loss": p.loss,
           "queue": asdict(p.queue)}
    words = impair_spec.describe(p)
    if words:
        out["impair"] = words
    return out


def _direction(now: LinkParams, cfg: LinkParams) -> dict[str, Any]:
    """A direction's parameters in force, with ``configured``: the configured value of
    each field that differs (absent when none does)."""
    out, was = _params(now), _params(cfg)
    differ = {k: v for k, v in was.items() if k != "queue" and out.get(k) != v}
    if "impair" in out and "impair" not in was:
        differ["impair"] = []
    queue = {k: v for k, v in was["queue"].items() if out["queue"][k] != v}
    if queue:
        differ["queue"] = queue
    if differ:
        out["configured"] = differ
    return out


def _lan_wide(to_lan: LinkParams, from_lan: LinkParams) -> dict[str, Any]:
    """A member's halves as member-to-member values (the inverse of ir.lan_half)."""
    return {"bandwidth_bps": to_lan.bandwidth_bps,
            "delay_s": round(to_lan.delay_s + from_lan.delay_s, 9),
            "loss": round(1.0 - (1.0 - to_lan.loss) * (1.0 - from_lan.loss), 9)}


def _describe_lan(lan: Lan, now: dict[Any, LinkParams],
                  tree: dict[str, Any] | None = None) -> dict[str, Any]:
    """A LAN for ``show``: each LAN-wide value in force where every member has the same
    (``configured``: the description's where it differs); a value that differs between
    members is named in ``varies``, and each member whose value it is not the configured
    one is in ``changed_members`` with its two halves in force. ``pairs``: each per-pair
    channel with impairments or changed at run time, its values in force (``configured``
    as for a direction)."""
    out: dict[str, Any] = {"name": lan.name, "members": [m.node for m in lan.members],
                           "bandwidth_bps": lan.bandwidth_bps, "delay_s": lan.delay_s,
                           "loss": lan.loss}
    halves = {m.node: (now.get((lan.name, m.node, "to_lan"), m.to_lan),
                       now.get((lan.name, m.node, "from_lan"), m.from_lan))
              for m in lan.members}
    wide = {m.node: _lan_wide(*halves[m.node]) for m in lan.members}
    was = {m.node: _lan_wide(m.to_lan, m.from_lan) for m in lan.members}
    differ, varies = {}, []
    for f in ("bandwidth_bps", "delay_s", "loss"):
        values = {w[f] for w in wide.values()}
        if len(values) > 1:     # (named only when it was changed at run time)
            if any(wide[m][f] != was[m][f] for m in wide):
                varies.append(f)
        elif values and values != {w[f] for w in was.values()}:
            differ[f] = out[f]
            out[f] = values.pop()
    # netem's impairments, a trace, a schedule (a LAN-wide one is on the receiving halves):
    # LAN-wide when every member has the same, else each member's
    imp = {m.node: _member_impair(*halves[m.node]) for m in lan.members}
    imp_was = {m.node: _member_impair(m.to_lan, m.from_lan) for m in lan.members}
    same, same_was = set(imp.values()), set(imp_was.values())
    if len(same) == 1:
        words = same.pop()
        if words:
            out["impair"] = list(words)
        if len(same_was) != 1 or same_was != {words}:
            differ["impair"] = list(same_was.pop()) if len(same_was) == 1 else []
    else:
        out["member_impair"] = {n: list(w) for n, w in imp.items() if w}
        if imp != imp_was:
            varies.append("impair")
    if differ:
        out["configured"] = differ
    # a matrix's (or gateway's) pairs: those with impairments or changed at run time (a big
    # matrix of plain delays stays one line)
    pairs = []
    for p in lan.pairs:
        cur = now.get((lan.name, p.src, in_force.pair_dir(p.dst)), p.params)
        if cur != p.params or impair_spec.is_impaired(cur):
            pairs.append({"from": p.src, "to": p.dst, **_direction(cur, p.params)})
    if pairs:
        out["pairs"] = pairs
    if lan.switches:        # a tree of switches (Mininet's): where each member is, the trunks
        out["switches"] = {s: [m.node for m in lan.members if m.switch == s]
                           for s in lan.switches}
        out["trunks"] = [{"name": t.name, "a": t.a, "b": t.b, "ab": _params(t.ab),
                          "ba": _params(t.ba)} for t in lan.trunks]
        if tree is not None:    # the tree was computed again at run time
            out["blocked"] = tree.get("blocked") or []
            out["trunks_down"] = tree.get("down") or []
        elif lan.blocked:     # the spanning tree's blocked ports (at each link's b)
            out["blocked"] = [{"switch": t.b, "port": t.ifnames[1] or t.b,
                               "peer": t.ifnames[0] or t.a} for t in lan.blocked]
    if varies:
        changed = {"impair": lambda n: imp[n] != imp_was[n]}
        out["varies"] = varies
        out["changed_members"] = {
            m.node: {"to_lan": _direction(halves[m.node][0], m.to_lan),
                     "from_lan": _direction(halves[m.node][1], m.from_lan)}
            for m in lan.members
            if any(changed[f](m.node) if f in changed else wide[m.node][f] != was[m.node][f]
                   for f in varies)}
    return out


def _member_impair(to_lan: LinkParams, from_lan: LinkParams) -> tuple[str, ...]:
    """A member's impairments: its receiving half's, then its sending half's (named)."""
    return (*impair_spec.describe(from_lan),
            *(f"to_lan {w}" for w in impair_spec.describe(to_lan)))


def _quote_logs(message: str, folder: str) -> str:
    """The last lines of each log in ``folder`` that ``message`` names (before the folder
    of a failed create is removed)."""
    out = []
    for log in ("engine.log", "scheduler.log"):
        if log in message:
            with contextlib.suppress(OSError):
                with open(os.path.join(folder, log), errors="replace") as f:
                    lines = [x.strip() for x in f.read().splitlines() if x.strip()][-3:]
                if lines:
                    out.append(f"the end of {log}: " + " | ".join(lines))
    return "; ".join(out)


class Lab:
    """All operations on experiments; the CLI and the Python API are thin layers over it."""

    def __init__(self, home: str | None = None, progress: bool = False, create: bool = True,
                 shared: bool = False):
        """``create``: make the state folder if missing (commands that only read or act on
        existing experiments pass False, so a mistyped home is an error, not a new store);
        ``shared``: its store may be used from several threads, one at a time (the
        portal's live view)."""
        self.store = Store(home, create=create, shared=shared)
        say = _say_stderr if progress else (lambda msg: None)
        # Test hook for the fault suite (tests/test_faults.py): with WANLAB_TEST_PAUSE_AT set
        # to progress-message prefixes separated by '|', the process stops itself (SIGSTOP)
        # right after saying one, so a test can kill or interrupt at that exact stage.
        pause = [p for p in os.environ.get("WANLAB_TEST_PAUSE_AT", "").split("|") if p]
        if pause:
            def say_and_pause(msg: str, _say=say) -> None:
                _say(msg)
                if any(msg.startswith(p) for p in pause):
                    os.kill(os.getpid(), signal.SIGSTOP)
            say = say_and_pause
        self.say = say

    def close(self) -> None:
        self.store.close()

    def stages(self) -> tuple[stages.Stage, ...]:
        """The swap-in stages: emulation's, with the run layer's scheduler after the engine
        and its clock last. The scheduler reaches back here for ``swapout``/``terminate``
        through ``python -m wanlab.lifecycle``."""
        control = [sys.executable, "-m", "wanlab.lifecycle", "--home", self.store.home]
        return (*stages.insert_after(stages.STAGES, "engine",
                                     run_stages.scheduler_stage(control)), run_stages.CLOCK)

    def modify_stages(self) -> tuple[stages.Stage, ...]:
        """The swap-in stages a modify runs over what it adds (the engine, the scheduler,
        FRR and the clock run already)."""
        return tuple(s for s in self.stages() if s.name in modify.MODIFY_STAGES)

    def locked(self, name: str, wait: bool = True
               ) -> contextlib.AbstractContextManager[ExperimentRow]:
        """Hold experiment ``name``'s lock as this host's operations do (the cluster's site
        holds a cluster experiment's so): see :meth:`_locked`. ``wait``: else raise
        :class:`wanlab.store.lock.Busy`, naming the operation that holds it."""
        return self._locked(name, wait)

    @contextlib.contextmanager
    def _locked(self, name: str, wait: bool = True) -> Iterator[ExperimentRow]:
        """Hold experiment ``name``'s lock (:mod:`wanlab.store.lock`, shared with the
        cluster's controller); yields its row, read under the lock. The lock file names its
        holder (:mod:`~wanlab.backends.emulate.oplock`): an experiment left in a transient
        state by a holder that was killed becomes ``degraded`` here, before the operation."""
        with lock.holding(self.store, name, wait) as (row, fd):
            cut = oplock.claim(fd)
            try:
                if cut is not None and row.state in TRANSIENT:
                    row = self._cut_short(row, cut[0])
                yield row
            finally:
                oplock.release(fd)

    # -- create / swap ------------------------------------------------------
    def create(self, exp: Experiment, source_path: str | None = None,
               swapin: bool = True) -> ExperimentRow:
        """Store ``exp`` and (by default) swap it in; returns when every node is up."""
        validate(exp)
        make_plan(exp, "0000")        # an impossible plan fails before anything is stored
        # OCI images pulled now (an unreachable one fails before anything is built), their
        # config folded into their nodes
        exp = oci.apply(exp, self.images(), self.say)
        with interrupts.undoable(f"rolling back the creation of {exp.name}", self.say):
            try:
                row = self.store.add_experiment(exp, source_path)
            except KeyboardInterrupt:
                raise Interrupted(f"interrupted: {exp.name} was not created") from None
            try:
                for w in exp.warnings:
                    self.say(f"warning: {w}")
                if swapin:
                    self.swapin(row.name)
            except BaseException as e:
                with contextlib.suppress(Exception):
                    self.store.delete_experiment(row.id)
                with contextlib.suppress(OSError):
                    os.unlink(self.store.lock_path(row.name))
                # nothing of it is left: not its record, not its folder (a log the error
                # points to is quoted in the error first)
                folder = self.store.folder(row.name)
                quoted = _quote_logs(str(e), folder)
                shutil.rmtree(folder, ignore_errors=True)
                if quoted and isinstance(e, WanlabError):
                    raise WanlabError(f"{e}; {quoted}") from None
                if isinstance(e, KeyboardInterrupt):
                    raise Interrupted(f"interrupted: the creation of {row.name} was rolled "
                                      f"back (nothing left)") from None
                raise
        return self.store.get(row.name)

    def swapin(self, name: str, repair: bool = False, fresh: bool = False) -> ExperimentRow:
        """Swap a new or swapped experiment in; ``repair``: rebuild a degraded (or broken
        active) one: remove what is recorded, then swap in again. ``fresh``: drop the nodes'
        writable layers first (their files since their image; kept across swap-outs
        otherwise)."""
        with self._locked(name), interrupts.undoable(f"rolling back the swap-in of {name}",
                                                     self.say):
            row = self.store.get(name)
            if repair:
                if row.state == ACTIVE:
                    row = self._check_health(row, locked=True)
                if row.state != DEGRADED:
                    raise WanlabError(f"experiment {name!r} is {row.state}, not degraded: "
                                      f"nothing to repair")
                self.say(f"repairing {name} ({row.error}): removing what is recorded")
                self.store.set_state(row.id, ACTIVATING, "repair")
                before = SWAPPED        # a failed repair leaves it swapped, everything removed
            elif row.state not in (NEW, SWAPPED):
                hint = f"; {way_out(name)}" if row.state == DEGRADED else ""
                raise WanlabError(f"experiment {name!r} is {row.state}; only new or swapped "
                                  f"experiments can be swapped in{hint}")
            else:
                before = row.state
                self.store.set_state(row.id, ACTIVATING, "swap-in")
            built = repair          # a repair starts from what is recorded: undo it on failure
            try:
                if repair:
                    swap.teardown(self.store, row.id, self.say)
                if fresh:
                    self._drop_layers(row)
                plan = swap.swap_in(self.store, row, self.stages(), self.say)
                built = True
                # a part that died while the others were built: fail now, not at first use
                h = health.check(self.store, row.id, self.store.folder(name))
                if not h.ok:
                    raise WanlabError(f"swap-in of {name!r} failed: {'; '.join(h.broken)}")
                for w in plan.warnings:
                    self.say(f"warning: {w}")
                self.store.set_state(row.id, ACTIVE, "repaired" if repair else "swapped in")
            except BaseException as e:
                if built:       # broken or interrupted after the building: undo it all the same
                    swap.teardown(self.store, row.id, self.say)
                stopped = isinstance(e, KeyboardInterrupt)
                self.store.set_state(row.id, before, "swap-in interrupted" if stopped
                                     else "swap-in failed", error=str(e) or type(e).__name__)
                if stopped:
                    raise Interrupted(f"interrupted: the swap-in of {name} was rolled back "
                                      f"({name} is {before} again)") from None
                raise
            self.say(f"{name} is active ({len(plan.nodes)} nodes)")
            return self.store.get(name)

    def _drop_layers(self, row: ExperimentRow) -> None:
        layers = self.store.folder(row.name, "layers")
        if os.path.isdir(layers):
            kept = ", ".join(sorted(os.listdir(layers)))
            self.say(f"--fresh: dropping the writable layers of {kept}")
            shutil.rmtree(layers)

    # -- node images ----------------------------------------------------------
    def images(self) -> images.Images:
        """The node images ($WANLAB_IMAGES, else <home>/images)."""
        return images.Images(images.images_dir(self.store.home))

    def image_save(self, name: str, node: str, image: str) -> images.Image:
        """A new image ``image``: node ``node``'s writable layer over its image."""
        images.check_name(image)
        with self._locked(name) as row:
            n = next((x for x in row.ir.nodes if x.name == node), None)
            if n is None:
                raise WanlabError(f"experiment {name!r} has no node {node!r}")
            if not n.image:
                raise WanlabError(f"node {node} has no image: it runs on the host's file "
                                  f"system (nothing to save)")
            upper = os.path.join(rootfs.layer_path(self.store.folder(row.name), node), "upper")
            if not os.path.isdir(upper):
                raise WanlabError(f"node {node} has no writable layer yet (swap {name} in)")
            # the mount points wanlab made in the layer for the node's folder and binaries
            drop = (self.store.folder(row.name, "nodes", node),
                    os.path.dirname(os.path.realpath(engine_binary())))
            return self.images().save(image, n.image, upper, f"{name}/{node}", drop,
                                      idmap.layer_base(self.store.folder(row.name), node))

    def swapout(self, name: str, reason: str = "swap-out") -> ExperimentRow:
        """``reason``: recorded in the state history (the facility's ``idle swap``)."""
        with self._locked(name), interrupts.finish_first(f"the swap-out of {name}", self.say):
            row = self.store.get(name)
            if row.state not in (ACTIVE, DEGRADED):
                raise WanlabError(f"experiment {name!r} is {row.state}, not active")
            self.store.set_state(row.id, SWAPPING_OUT, reason)
            swap.teardown(self.store, row.id, self.say)
            self.store.set_state(row.id, SWAPPED, "swapped out")
            return self.store.get(name)

    def terminate(self, name: str) -> None:
        with self._locked(name) as row, \
                interrupts.finish_first(f"terminating {name}", self.say):
            self.store.set_state(row.id, TERMINATING, "terminate")
            swap.teardown(self.store, row.id, self.say)
            shutil.rmtree(self.store.folder(name), ignore_errors=True)
            self.store.delete_experiment(row.id)
            os.unlink(self.store.lock_path(name))     # still held: waiters retry on a new file

    def cleanup(self, name: str | None = None, all: bool = False) -> list[str]:
        """Remove recorded resources of one experiment (or, with ``all``, of every one);
        safe to run twice."""
        if name is None and not all:
            raise WanlabError("cleanup of every experiment on this host needs --all (or name "
                              "one experiment)")
        names = [name] if name else [r.name for r in self.store.list()]
        done = []
        for n in names:
            with self._locked(n) as row, \
                    interrupts.finish_first(f"the cleanup of {n}", self.say):
                swap.teardown(self.store, row.id, self.say)
                if row.state in TRANSIENT or row.state in (ACTIVE, DEGRADED):
                    self.store.set_state(row.id, SWAPPED, "cleanup")
                done.append(n)
        return done

    # -- modify ---------------------------------------------------------------
    def modify(self, name: str, new: Experiment) -> ExperimentRow:
        """Apply a new description. A stored (not active) experiment just takes the new
        IR; an active one changes only what differs (wanlab/backends/emulate/modify.py)."""
        validate(new)
        with self._locked(name), interrupts.undoable(f"rolling back the modify of {name}",
                                                     self.say):
            row = self.store.get(name)
            self._need_not_degraded(row)
            new = replace(new, name=name)
            make_plan(new, row.short)           # an impossible plan fails before any change
            # as at create: OCI images pulled now (one that cannot be fetched fails before
            # any change), their config folded in (so an unchanged node compares equal)
            new = oci.apply(new, self.images(), self.say)
            if row.state != ACTIVE:
                self.store.set_ir(row.id, new)
                return self.store.get(name)
            if any(n.kind == "simulated" for n in (*row.ir.nodes, *new.nodes)):
                raise WanlabError("modify of a running experiment with simulated nodes is not "
                                  "supported yet: swap it out, modify, swap it in")
            self.store.set_state(row.id, MODIFYING, "modify")
            try:
                counts = modify.apply(self.store, row, new, self.say, self.modify_stages())
            except BaseException as e:
                # the experiment is part old, part new: rebuild it from the old description
                self.say(f"modify failed ({e}); rebuilding the previous description")
                swap.teardown(self.store, row.id, self.say)
                try:
                    swap.swap_in(self.store, row, self.stages(), self.say)
                    self.store.set_state(row.id, ACTIVE, "modify failed; rebuilt",
                                         error=str(e))
                except BaseException as e2:
                    self.store.set_state(row.id, SWAPPED, "modify failed", error=str(e2))
                    if isinstance(e, KeyboardInterrupt):
                        raise Interrupted(f"interrupted: the modify of {name} was rolled back, "
                                          f"but rebuilding failed ({e2}); it is swapped") from None
                    raise
                if isinstance(e, KeyboardInterrupt):
                    raise Interrupted(f"interrupted: the modify of {name} was rolled back "
                                      f"(rebuilt from the previous description)") from None
                raise
            self.store.set_ir(row.id, new)
            summary = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in counts.items() if v)
            self.store.set_state(row.id, ACTIVE, f"modified: {summary or 'no change'}")
            self.say(f"modified: {summary or 'no change'}")
            return self.store.get(name)

    # -- inspection -----------------------------------------------------------
    def list(self) -> list[ExperimentRow]:
        """Every experiment; active ones are health-checked first (see :meth:`health`), and
        those in a transient state whether their operation still runs."""
        return [self._check_health(r) for r in self.store.list()]

    def get(self, name: str) -> ExperimentRow:
        return self.store.get(name)

    def health(self, name: str) -> health.Health:
        """Check an active experiment's engine, scheduler and namespaces; a broken one
        becomes ``degraded`` (recorded once, with the time it was noticed, in its state
        history and event log)."""
        row = self.store.get(name)
        if row.state != ACTIVE:
            return health.Health()
        return health.check(self.store, row.id, self.store.folder(name))

    def _check_health(self, row: ExperimentRow, locked: bool = False) -> ExperimentRow:
        """``row``, or its state after the check: an active experiment with a part gone, or
        one left in a transient state by an operation whose process is gone (killed: it
        let go of the lock without ending the state), becomes ``degraded``."""
        if row.state in TRANSIENT and not locked:
            if oplock.abandoned(self.store.lock_path(row.name)) is None:
                return row
            try:
                with self._locked(row.name) as fresh:     # which marks it (see _locked)
                    return fresh
            except WanlabError:         # terminated meanwhile
                return row
        if row.state != ACTIVE:
            return row
        h = health.check(self.store, row.id, self.store.folder(row.name))
        if h.ok:
            return row
        lock = contextlib.nullcontext() if locked else self._locked(row.name)
        with lock:
            row = self.store.get(row.name)
            if row.state != ACTIVE:         # someone else changed it meanwhile
                return row
            h = health.check(self.store, row.id, self.store.folder(row.name))
            if h.ok:
                return row
            return self._degrade(row, "; ".join(h.broken), "health check")

    def _cut_short(self, row: ExperimentRow, pid: int) -> ExperimentRow:
        """``row`` (transient, its lock just taken) was left so by an operation whose
        process ended without letting go (killed): degraded, with the way out."""
        what = {"activating": "swap-in", "modifying": "modify", "swapping-out": "swap-out",
                "terminating": "terminate"}.get(row.state, row.state)
        return self._degrade(row, f"its {what} stopped half-way (the wanlab process that "
                                  f"ran it, pid {pid}, is gone)", f"{what} cut short",
                             f"; {way_out(row.name)}")

    def _degrade(self, row: ExperimentRow, what: str, reason: str,
                 then: str = "") -> ExperimentRow:
        """Make ``row`` degraded, its error ``what`` at the time it was noticed, then
        ``then``, in its state history and its event log; the caller holds its lock."""
        import time as _time
        noticed = _time.time()
        at = _time.strftime("%Y-%m-%d %H:%M:%S %Z", _time.localtime(noticed))
        error = f"{what} at {at}{then}"
        self.store.set_state(row.id, DEGRADED, reason, error=error)
        t0 = self._t0(row)
        with contextlib.suppress(Exception):
            self.store.log_event(row.id, t0, "health", noticed - t0, noticed - t0,
                                 "experiment", "degraded", [], "error", error)
        return self.store.get(row.name)

    def _t0(self, row: ExperimentRow) -> float:
        """Wall-clock t = 0 of the current run (the scheduler writes it at ``go``)."""
        try:
            with open(os.path.join(self.store.folder(row.name), "t0")) as f:
                return float(f.read())
        except (OSError, ValueError):
            return row.updated

    def _need_active(self, row: ExperimentRow) -> ExperimentRow:
        """``row`` if it is active and healthy; else a WanlabError that says what to do."""
        row = self._check_health(row)
        self._need_not_degraded(row)
        if row.state != ACTIVE:
            raise WanlabError(f"experiment {row.name!r} is {row.state}, not active")
        return row

    def _need_not_degraded(self, row: ExperimentRow) -> None:
        if row.state == DEGRADED:
            raise WanlabError(f"experiment {row.name!r} is degraded ({row.error})"
                              + ("" if way_out(row.name) in (row.error or "")
                                 else f"; {way_out(row.name)}"))

    def show(self, name: str) -> dict[str, Any]:
        row = self._check_health(self.store.get(name))
        plan = make_plan(row.ir, row.short)
        links = {}
        if row.state == ACTIVE:
            with contextlib.suppress(Exception):
                with engine.Client(self._socket(row), timeout=5) as c:
                    links = c.send(Stats())
        info = self._describe(row, plan, links)
        own_cpus = {n.name for n in row.ir.nodes if n.cpus is not None}
        if row.state == ACTIVE:     # the engine's CPUs (backends/emulate/cpuplace.py)
            for r in self.store.resources(row.id):
                if r.kind == "engine" and "cpus" in r.detail:
                    info["engine"] = {"cpus": r.detail["cpus"] or None,
                                      "cpus_why": r.detail.get("cpus_why")}
        if row.state == ACTIVE:     # each node's use of its cgroup (CPU, memory, pids)
            groups = {r.detail["node"]: r.detail for r in self.store.resources(row.id)
                      if r.kind == "cgroup" and r.detail.get("node")}
            used = cgroups.sample({n: d.get("dirs") or {} for n, d in groups.items()})
            for n, u in used.items():
                if n in info["nodes"]:
                    # how its CPUs were chosen (backends/emulate/cpuplace.py): "own" when
                    # the node names them
                    u["cpus_policy"] = groups[n].get("cpus_policy") or \
                        ("own" if n in own_cpus else None)
                    info["nodes"][n]["usage"] = u
        return info

    def in_force(self, name: str) -> dict[str, Any]:
        """The links' and LANs' values in force (as ``show`` gives them: a direction's
        ``configured`` entry names the description's value of each field that differs)."""
        return self._in_force(self.store.get(name))

    def _in_force(self, row: ExperimentRow) -> dict[str, Any]:
        now = in_force.current(self.store.folder(row.name), row.ir) if row.state == ACTIVE \
            else in_force.configured(row.ir)
        trees = spanning.load(self.store.folder(row.name)) if row.state == ACTIVE else {}
        return {"links": [{"name": l.name, "a": l.a, "b": l.b,
                           "ab": _direction(now[(l.name, None, "ab")], l.ab),
                           "ba": _direction(now[(l.name, None, "ba")], l.ba)}
                          for l in row.ir.links],
                "lans": [_describe_lan(l, now, trees.get(l.name)) for l in row.ir.lans]}

    def _describe(self, row: ExperimentRow, plan: Plan, links: dict[str, Any]) -> dict[str, Any]:
        """The experiment for ``show``; a live one's links and LANs with the values in
        force (changed at run time by tevc, timeline events or ``set_link``)."""
        name = row.name
        values = self._in_force(row)
        images_of = {n.name: n.image for n in row.ir.nodes if n.image}
        return {"name": row.name, "id": row.short, "state": row.state, "error": row.error,
                "folder": self.store.folder(name),
                "nodes": {n.name: {"netns": None if n.simulated else n.netns,
                                   "simulated": n.simulated,
                                   "image": images_of.get(n.name),
                                   # ip None: the node's own (a containerlab file's)
                                   "interfaces": [{"ifname": i.ifname,
                                                   "ip": (i.addresses() or [None])[0],
                                                   "ip6": f"{i.ip6}/{i.prefixlen6}"
                                                   if i.ip6 else None, "mac": i.mac,
                                                   "network": i.network}
                                                  for i in n.interfaces],
                                   "routes": [f"{r.dst} via {r.via} dev {r.dev}"
                                              for r in n.routes]}
                          for n in plan.nodes.values()},
                "links": values["links"], "lans": values["lans"],
                "stats": {k: v for k, v in links.items()
                          if k in ("links", "lans", "routers", "hosts", "agents", "realtime",
                                   "partitions")},
                "history": [{"at": t, "from": a, "to": b, "reason": r}
                            for t, a, b, r in self.store.transitions(row.id)],
                "edge": egress.describe(row.ir, row.short, self.store.folder(name))}

    # -- events -------------------------------------------------------------------
    def tevc(self, name: str, time_spec: str, target: str, action: str,
             args: list[str] | None = None, wait: bool = False) -> dict[str, Any]:
        """Send an event to an active experiment (Emulab's tevc); ``wait`` returns its result.

        The words are typed here, by the front ends' normaliser, so a bad argument is a
        SpecError naming it before anything is sent."""
        from wanlab.frontends.normalize import event
        row = self._need_active(self.store.get(name))
        kinds = row.ir.kinds()
        pair = target.split("/") if target not in kinds and target.count("/") == 2 else None
        if pair and kinds.get(pair[0]) == "lan":     # LAN/SRC/DST: one pair channel
            ev = replace(event(row.ir, 0.0, pair[0], action, list(args or []), kinds=kinds),
                         member=pair[1], to=pair[2])
            check_event(row.ir, ev, kinds)
            with EventClient(self.store.folder(name)) as c:
                return c.event(time_spec, ev, wait)
        if target not in kinds:
            raise WanlabError(f"no object named {target!r} in experiment {name!r}")
        group = next((g for g in row.ir.groups if g.name == target), None)
        members = group.members if group is not None else (target,)
        if not members:
            raise WanlabError(f"event group {target!r} has no members")
        evs = [event(row.ir, 0.0, m, action, list(args or []), kinds=kinds) for m in members]
        with EventClient(self.store.folder(name)) as c:
            replies = [c.event(time_spec, ev, wait) for ev in evs]
        if len(replies) == 1:
            return replies[0]
        # an event group: one event per member, reported together
        return {"ok": all(r.get("ok") for r in replies),
                "scheduled_s": min((r.get("scheduled_s", 0.0) for r in replies), default=0.0),
                "outcome": "ok" if all(r.get("outcome", "ok") == "ok" for r in replies)
                else "error", "detail": "; ".join(f"{m}: {r.get('detail', 'scheduled')}"
                                                   for m, r in zip(members, replies,
                                                                   strict=True)),
                "t": max((r.get("t") or 0.0 for r in replies), default=0.0),
                "lateness_s": None, "replies": replies}

    def set_link(self, name: str, target: str, dir: str = "both", **change: Any) -> None:
        """Change a link's or LAN's bandwidth/delay/loss now, with tevc's meaning (a LAN's
        delay and loss are member-to-member; ``LAN/SRC/DST``: one matrix pair's channel,
        its own values), as patches through the one encoder."""
        from wanlab.frontends.normalize import link_change
        row = self.store.get(name)
        kinds = row.ir.kinds()
        pair = target.split("/") if target not in kinds and target.count("/") == 2 else None
        if pair and kinds.get(pair[0]) == "lan":
            if dir != "both":
                raise WanlabError(f"{target}: a pair channel has one direction (no dir)")
            evs = [replace(ev, member=pair[1], to=pair[2])
                   for ev in link_change(row.ir, pair[0], dir, **change)]
            for ev in evs:
                check_event(row.ir, ev, kinds)
            self.apply(name, evs)
            return
        if kinds.get(target) not in ("link", "lan"):
            raise WanlabError(f"{target!r} is not a link or LAN of experiment {name!r}")
        self.apply(name, link_change(row.ir, target, dir, **change))

    def apply(self, name: str, evs: list[Any]) -> None:
        """Typed events on links and LANs done by the engine at once (not through the
        scheduler, so not logged): ``set_link``'s, ``link_up``'s and ``link_down``'s."""
        row = self._need_active(self.store.get(name))
        kinds = row.ir.kinds()
        for ev in evs:
            if kinds.get(ev.target) not in ("link", "lan"):
                raise WanlabError(f"{ev.target!r} is not a link or LAN of experiment {name!r}")
        folder = self.store.folder(row.name)
        # the port map kept at swap-in names a LAN member's port (no new plan)
        ports = in_force.load_ports(folder) or make_plan(row.ir, row.short).port_map()
        reqs = [r for ev in evs for r in encode.event_requests(ev, kinds[ev.target], ports, "")]
        with self.engine(name) as c:
            c.send_all(reqs)
        in_force.record(folder, [(ev, kinds[ev.target]) for ev in evs])

    def stats(self, name: str, target: str | None = None) -> dict[str, Any]:
        """The engine's counters (every link, LAN and node, or only ``target``)."""
        with self.engine(name) as c:
            return c.send(Stats(target=target))

    def follow(self, name: str):
        """Yield events of an active experiment as they fire (until it is swapped out)."""
        row = self.store.get(name)
        row = self._need_active(row)
        c = EventClient(self.store.folder(name))
        try:
            yield from c.follow()
        finally:
            c.close()

    def run(self, exp: Experiment, source_path: str | None = None,
            terminate: bool = False, on: Any = None) -> dict[str, Any]:
        """Create, swap in, play the whole timeline, collect results, swap out.

        Returns a summary (events, flows, plot path, and ``failed``: the timeline events
        whose outcome was not ok, or that never fired). Results stay in the experiment's
        folder unless ``terminate``. Ctrl-C while creating rolls the creation back; later it
        stops the run: the experiment is swapped out (traffic stopped, flows recorded).
        ``on``: where the experiment runs, a :class:`Here` (default: this host) or the
        cluster's (:class:`wanlab.cluster.run.OnCluster`), with the same methods."""
        import time as _time
        on = on if on is not None else Here(self)
        with interrupts.undoable("stopping the run", self.say):
            row = on.create(exp, source_path)
            try:
                return self._play(on, row, terminate)
            except KeyboardInterrupt as e:
                if isinstance(e, Interrupted):
                    raise
                t = _time.time() - on.t0(row)
                with interrupts.finish_first("stopping the run", self.say):
                    now = self.store.find(row.name)
                    if now is not None and now.state in (ACTIVE, DEGRADED):
                        on.swapout(row.name)
                    if terminate and now is not None:
                        on.terminate(row.name)
                where = ("it was terminated (--terminate)" if terminate else
                         f"partial results in {self.store.folder(row.name)}")
                raise Interrupted(f"interrupted at t={t:.1f} s: {row.name} was swapped out "
                                  f"(traffic stopped); {where}") from None

    def _play(self, on: Any, row: ExperimentRow, terminate: bool) -> dict[str, Any]:
        import time as _time

        from wanlab.report.plots import plot_throughput
        n = on.timeline_entries(row)
        last = max((e.time_s for e in row.ir.events), default=0.0)
        self.say(f"running the timeline: {len(row.ir.events)} events over {last:g} s")
        deadline = _time.monotonic() + last + 120
        while _time.monotonic() < deadline:
            log = on.event_log(row.name)
            if len([e for e in log if e["origin"] in ("timeline", "sequence")]) >= n:
                break
            _time.sleep(on.poll_s)
        summary: dict[str, Any] = {"name": row.name, "events": on.event_log(row.name)}
        timeline = [e for e in summary["events"] if e["origin"] in ("timeline", "sequence")]
        summary["failed"] = [e for e in summary["events"]
                             if e["outcome"] not in ("ok", "cancelled")]
        summary["unfired"] = max(0, n - len(timeline))
        try:
            stats = on.stats(row.name)
            summary["links"], summary["lans"] = stats.get("links", {}), stats.get("lans", {})
        except WanlabError as e:          # the engine stopped with the timeline (ns halt)
            self.say(f"no final link statistics: {e}")
        on.swapout(row.name)               # stops agents: their flows are recorded
        summary["flows"] = on.flows(row.name)
        folder = self.store.folder(row.name)
        make_private_dir(folder)
        if summary["flows"]:
            summary["plot"] = plot_throughput(row.name, summary["flows"], summary["events"],
                                              os.path.join(folder, "plots", "throughput.png"))
        with open(os.path.join(folder, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
        summary["folder"] = folder
        if terminate:
            on.terminate(row.name)
        return summary

    def simulate(self, exp: Experiment, out: str | None = None, seed: int | None = None,
                 duration_s: float | None = None, threads: int | None = None,
                 engine: Any = None) -> dict[str, Any]:
        """Run ``exp`` as a pure simulation in virtual time (no namespaces, no engine
        process left behind); results in ``out`` (default <home>/sims/<name>), on
        ``threads`` threads (default: the spec's engine threads, ``auto`` there being this
        machine's cores, else 1; the result is the same on any number).
        ``engine``: how to run the scenario instead of one local engine (a cluster's)."""
        from wanlab.backends.simulate.runner import simulate
        validate(exp)
        if threads is None:
            threads = exp.engine_threads if exp.engine_threads > 0 else \
                len(os.sched_getaffinity(0)) if exp.engine_threads == -1 else 1
        out = out or self.store.inside("sims", exp.name)
        self.say(f"simulating {exp.name} in virtual time")
        return simulate(exp, out, seed=seed, duration_s=duration_s, threads=threads,
                        engine=engine)

    def compare(self, exp: Experiment, out: str | None = None,
                source_path: str | None = None) -> dict[str, Any]:
        """Run ``exp`` simulated, then emulated (as ``<name>-emu``, terminated after); both
        runs' results, tables and side-by-side plots in ``out`` (:mod:`wanlab.report.compare`)."""
        from wanlab.report import compare
        validate(exp)
        out = out or self.store.inside("compare", exp.name)
        os.makedirs(out, exist_ok=True)
        sim = self.simulate(exp, os.path.join(out, "simulated"))
        emu_name = f"{exp.name}-emu"
        if emu_name in {r.name for r in self.list()}:
            self.terminate(emu_name)
        self.say(f"{exp.name}: emulating (as {emu_name})")
        emu = self.run(exp.with_name(emu_name), source_path=source_path)
        shutil.copytree(emu["folder"], os.path.join(out, "emulated"), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("*.sock"))
        self.terminate(emu_name)
        emu["folder"] = os.path.join(out, "emulated")
        result = {"name": exp.name, "flows": compare.table(emu, sim),
                  "links": compare.link_table(emu, sim), "simulation_speed": sim["engine"],
                  "plots": compare.plot(emu, sim, os.path.join(out, "plots"), exp.name)}
        with open(os.path.join(out, "compare.json"), "w") as f:
            json.dump(result, f, indent=1)
        result["folder"] = out
        return result

    def export(self, name: str, dest: str) -> int:
        """Copy the experiment's results to ``dest`` (a new folder); returns the number of
        files copied.

        The state folder is private to root; this is the deliberate way to share results.
        Only folders and regular files with a single link are copied (never sockets,
        devices, symbolic or hard links a node may have planted in its folder), read
        beneath the experiment's folder without following a link (a node may swap a
        folder for a link while this runs: :mod:`wanlab.backends.emulate.nodefiles`),
        holes kept. wanlab's own files are readable by everyone; a file in a node's folder
        keeps the node's modes (less write for others and set-id bits), so what the node
        kept to itself (0600) stays root's alone; a note says how many."""
        src = self.store.folder(self.store.get(name).name)
        if os.path.lexists(dest):
            raise WanlabError(f"export: {dest} already exists (give a new folder)")
        if not os.path.isdir(src):
            raise WanlabError(f"experiment {name!r} has no folder yet (swap it in first)")
        private: list[str] = []

        def file_mode(rel: str, st: os.stat_result) -> int:
            if not _in_a_node_folder(rel):
                return 0o644
            mode = st.st_mode & 0o755 | 0o600
            if not mode & 0o004:
                private.append(rel)
            return mode

        def dir_mode(rel: str, st: os.stat_result) -> int:
            return st.st_mode & 0o755 | 0o700 if _in_a_node_folder(rel) else 0o755

        parent = os.path.dirname(os.path.abspath(dest))
        os.makedirs(parent, exist_ok=True)
        # node roots and layers are file systems, not results
        done = nodefiles.copy_tree(src, dest, file_mode=file_mode, dir_mode=dir_mode,
                                   skip_top=("roots", "layers"))
        if private:
            self.say(f"export: {len(private)} files of nodes are readable by root only (their "
                     f"modes in the node), e.g. {private[0]}")
        return done.files

    def event_log(self, name: str) -> list[dict[str, Any]]:
        """The event log of the experiment's latest run (t = 0 at its last swap-in)."""
        return self.store.event_log(self.store.get(name).id)

    def flows(self, name: str) -> list[dict[str, Any]]:
        """Results of every traffic-agent flow (latest first run last)."""
        return self.store.flows(self.store.get(name).id)

    def plot(self, name: str, output: str | None = None) -> str:
        """A PNG of the latest run's flow throughput (default <folder>/plots/throughput.png)."""
        from wanlab.report.plots import plot_throughput
        output = output or os.path.join(self.store.folder(name), "plots", "throughput.png")
        return plot_throughput(name, self.flows(name), self.event_log(name), output)

    def routes(self, name: str, node: str | None = None) -> dict[str, str]:
        """Each node's kernel routing tables (``ip route``, ``ip -6 route`` with IPv6), as
        text."""
        row = self.store.get(name)
        row = self._need_active(row)
        plan = make_plan(row.ir, row.short)
        if node is not None and node not in plan.nodes:
            raise WanlabError(f"experiment {name!r} has no node {node!r}")
        out = {}
        for n, np_ in plan.nodes.items():
            if np_.simulated:
                out[n] = "".join(f"{r.dst} via {r.via} dev {r.dev} (simulated router)\n"
                                 for r in np_.routes)
            elif node is None or n == node:
                # each family the experiment has: IPv4's table, then IPv6's
                families = (["-4"] if np_.ipv4 else []) + (["-6"] if plan.subnets6 else [])
                out[n] = "".join(subprocess.run(["ip", "-n", np_.netns, f, "route", "show"],
                                                capture_output=True, text=True).stdout
                                 for f in families)
        return out

    def engine(self, name: str) -> engine.Client:
        """A control connection to an active experiment's engine."""
        row = self.store.get(name)
        row = self._need_active(row)
        return engine.Client(self._socket(row))

    def _socket(self, row: ExperimentRow) -> str:
        return socket_of(self.store.folder(row.name))

    # -- captures of links (the portal's; ``tevc LINK trace`` is the timeline's) -------
    def captures(self, name: str) -> list[dict[str, Any]]:
        """The experiment's pcap files: ``{file, bytes}``, ``file`` relative to its folder."""
        folder = self.store.folder(self.store.get(name).name)
        return [{"file": rel, "bytes": size}
                for rel, (_, size) in captures.listing(folder).items()]

    def capture_start(self, name: str, link: str, dir: str = "both",
                      file: str | None = None) -> list[str]:
        """Capture ``link``'s direction(s) ``dir`` (ab, ba or both) into a new pcap file
        (``file``, relative to the folder, or a new name); returns the files."""
        row = self._need_active(self.store.get(name))
        if row.ir.kinds().get(link) != "link":
            raise WanlabError(f"{link!r} is not a link of experiment {name!r}")
        rel = file or captures.new_file(link)
        if os.path.isabs(rel) or ".." in rel.split("/"):
            raise WanlabError(f"capture file {rel!r}: a path inside the experiment's folder")
        make_private_dir(os.path.dirname(os.path.join(self.store.folder(row.name), rel)))
        with self.engine(name) as e:
            e.send(CaptureStart(target=link, dir=dir, path=rel))
        return [rel]

    def capture_stop(self, name: str) -> None:
        """Stop every capture (each file flushed and closed)."""
        with self.engine(name) as e:
            e.send(CaptureStop())

    def capture_file(self, name: str, file: str) -> str:
        """The path of capture ``file`` (only one :meth:`captures` lists), flushed up to now
        if the engine still writes it."""
        found = captures.listing(self.store.folder(self.store.get(name).name)).get(file)
        if found is None:
            raise WanlabError(f"experiment {name!r} has no capture {file!r}")
        with contextlib.suppress(Exception), self.engine(name) as e:
            e.send(CaptureSnapshot())
        return found[0]

    def node_argv(self, name: str, node: str, argv: list[str]) -> list[str]:
        """An argv that runs ``argv`` inside ``node`` (for any caller; started with plain
        ``Popen``, its pid is the entering process's: :meth:`popen` gives the node's process)."""
        row, ns = self._node_target(name, node)
        return nodes.node_argv(self.store, row, ns, node, argv)

    def popen(self, name: str, node: str, argv: list[str], **kw: Any) -> subprocess.Popen:
        """``subprocess.Popen`` of ``argv`` inside ``node``: the pid is the node's process."""
        row, ns = self._node_target(name, node)
        return nodes.popen(self.store, row, ns, node, argv, **kw)

    def _node_target(self, name: str, node: str) -> tuple[ExperimentRow, str]:
        row = self.store.get(name)
        row = self._need_active(row)
        if node not in {n.name for n in row.ir.nodes}:
            raise WanlabError(f"experiment {name!r} has no node {node!r} (nodes: "
                              f"{', '.join(n.name for n in row.ir.nodes)})")
        np_ = make_plan(row.ir, row.short).nodes[node]
        if np_.simulated:
            raise WanlabError(f"node {node!r} is simulated inside the engine: it runs no "
                              f"programs (ping or traceroute it from an emulated node)")
        ns = np_.netns
        if not netns.exists(ns):
            raise WanlabError(f"node {node!r} has no namespace; run 'wanlab cleanup {name}' "
                              f"and swap in again")
        return row, ns

    def exec(self, name: str, node: str, argv: list[str], **kw: Any) -> subprocess.CompletedProcess:
        """Run ``argv`` in ``node``; keyword arguments as for subprocess.run."""
        row, ns = self._node_target(name, node)
        return nodes.run(self.store, row, ns, node, argv, **kw)


class Here:
    """Where :meth:`Lab.run` plays an experiment by default: this host, one engine and
    one scheduler. The cluster's counterpart has the same methods."""

    poll_s = 0.1        # how often the run looks whether the timeline is over

    def __init__(self, lab: Lab):
        self.lab = lab

    def create(self, exp: Experiment, source_path: str | None) -> ExperimentRow:
        return self.lab.create(exp, source_path)

    def timeline_entries(self, row: ExperimentRow) -> int:
        """How many timeline entries the event log has once the whole timeline fired."""
        return len(row.ir.events)

    def event_log(self, name: str) -> list[dict[str, Any]]:
        return self.lab.event_log(name)

    def stats(self, name: str) -> dict[str, Any]:
        return self.lab.stats(name)

    def swapout(self, name: str) -> None:
        self.lab.swapout(name)

    def flows(self, name: str) -> list[dict[str, Any]]:
        return self.lab.flows(name)

    def terminate(self, name: str) -> None:
        self.lab.terminate(name)

    def t0(self, row: ExperimentRow) -> float:
        return self.lab._t0(row)


def main(argv: list[str] | None = None) -> int:
    """``python -m wanlab.lifecycle --home H swapout|terminate NAME``: how a running
    experiment's scheduler asks for its own swap-out (ns ``swapout``/``terminate``)."""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m wanlab.lifecycle")
    ap.add_argument("--home", required=True)
    ap.add_argument("op", choices=("swapout", "terminate"))
    ap.add_argument("name")
    a = ap.parse_args(argv)
    lab = Lab(a.home, create=False)
    try:
        getattr(lab, a.op)(a.name)
    except WanlabError as e:
        print(f"wanlab: {e}", file=sys.stderr)
        return 1
    finally:
        lab.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())


def _in_a_node_folder(rel: str) -> bool:
    """Whether ``rel`` (relative to an experiment's folder) is inside a node's folder."""
    parts = rel.split("/")
    return len(parts) >= 3 and parts[0] == "nodes"
