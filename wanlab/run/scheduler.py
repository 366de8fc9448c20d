"""The per-experiment event scheduler (one process per active experiment).

``python -m wanlab.run.scheduler --home H --name NAME`` is started early in
swap-in, so the interpreter's start-up overlaps the building, and it is
recorded in the store before it starts. It waits for a ``go`` from swap-in's
last stage. That moment is **t = 0**: every node is up, and the start
commands have been launched; ``create`` returns right after it.
Timeline events (``$ns at T``) fire at t0 + T on the monotonic clock. Dynamic
events arrive on ``<folder>/events.sock``. The scheduler sleeps until about
1 ms before a deadline and spins for the rest, so lateness stays small. Every
fired event is logged in the store's ``event_log``, with its scheduled time,
actual time, lateness and outcome.

Timing. The loop thread runs at real-time priority (``SCHED_FIFO``, reset for
the processes it starts), so busy traffic generators and the engine cannot
starve it. Quick actions run inline on that thread: link and LAN changes
(one engine request each) and messages. Anything that may block (Programs,
traffic agents, reboot, swap-out) runs in a thread of its own at normal
priority, so a long ``run`` of a Program never delays the next event.
Logging happens off the loop thread.

Socket protocol (one JSON object per line):

* ``{"cmd": "event", "time": "now" | "+S" | "S", "event": EVENT, "wait": bool}``,
  EVENT a typed IR event (docs/ir.md; tevc normalises the user's words before
  sending). The reply is ``{"ok": true, "scheduled_s": S}``; with ``wait``, it
  comes after the event ran, with ``outcome``, ``detail`` and ``lateness_s``.
  ``"origin": "sequence"`` (default ``tevc``) logs it as a step of a sequence played
  from outside (a cluster's conductor), cancelled once the timeline is halted.
* ``{"cmd": "subscribe"}``. Every fired event follows, one JSON line each.
* ``{"cmd": "status"}``. Returns t0, now, the pending events, and whether the
  timeline was halted.

On SIGTERM (teardown), the scheduler stops every traffic agent and program,
so their flows are recorded, and then it exits.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import json
import os
import queue
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Collection
from dataclasses import replace
from typing import Any

from wanlab.backends.emulate import cgroups, procs
from wanlab.errors import SpecError, WanlabError
from wanlab.model.ir import HORIZON_S, Event, Timeline, check_event
from wanlab.run.client import EventClient, events_socket
from wanlab.run.objects import Runtime
from wanlab.store.db import Store

SPIN_S = 0.001
OOM_POLL_S = 1.0        # how often the nodes' OOM kill counts are read
RT_PRIORITY = 10
INLINE_KINDS = ("link", "lan")
# events sent from outside (tevc, the portal's API) that may wait at once: each is kept in
# this process until its time, so an endless stream of future ones would fill its memory
MAX_SENT_PENDING = 10_000


def _realtime() -> None:
    """Make the calling thread SCHED_FIFO; children it forks revert to normal."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK,
                              os.sched_param(RT_PRIORITY))
    except (PermissionError, OSError, AttributeError):
        pass          # not permitted here: run at normal priority


class Scheduler:
    def __init__(self, store: Store, name: str, control_argv: list[str] | None = None):
        self.store = store
        row = store.get(name)
        self.t0_wall = 0.0
        self.t0_mono = time.monotonic()
        self.started = False
        self.rt = Runtime(store, row, self.t0_mono, self.t0_wall, control_argv)
        self.rt.on_halt = self._halt
        self.folder = self.rt.folder
        self.cond = threading.Condition()
        # (time, order, origin, event or the steps of a sequence, waiter)
        self.heap: list[tuple[float, int, str, Any, Any]] = []
        self.sent_pending = 0           # of them sent with tevc (MAX_SENT_PENDING)
        self.seq = itertools.count()
        self.subscribers: list[socket.socket] = []
        self.stopping = False
        self.log_queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._logger, daemon=True).start()
        # plain events, and one entry per started event sequence carrying its steps
        self.timeline: list[tuple[float, str, Any]] = []
        steps: dict[str, list[Event]] = {}
        for e in row.ir.events:
            if e.sequence is None:
                self.timeline.append((e.time_s, "timeline", e))
            else:
                steps.setdefault(e.sequence, []).append(e)
        for evs in steps.values():
            evs.sort(key=lambda e: e.step)
            self.timeline.append((evs[0].time_s, "sequence", evs))

    def go(self, t0_wall: float | None = None) -> None:
        """t = 0: start the clock and the timeline. ``t0_wall``: a t = 0 already past, the
        clock of the other parts of a cluster experiment a repaired part joins (its
        timeline's past events fire at once, late, so its objects catch up)."""
        with self.cond:
            if self.started:
                return
            now_wall, now_mono = time.time(), time.monotonic()
            self.t0_wall = now_wall if t0_wall is None else min(t0_wall, now_wall)
            self.t0_mono = now_mono - (now_wall - self.t0_wall)
            self.rt.t0_wall, self.rt.t0_mono = self.t0_wall, self.t0_mono
            with open(os.path.join(self.folder, "t0"), "w") as f:
                # exactly (repr): the event log's runs are told apart by t0, and a health
                # event or a repaired cluster part logs with the t0 read back from here
                f.write(f"{self.t0_wall!r}\n")
            self.started = True
            for at, origin, item in self.timeline:
                heapq.heappush(self.heap, (at, next(self.seq), origin, item, None))
            self.cond.notify()
        threading.Thread(target=self._watch_memory, daemon=True).start()
        self.rt.prepare_agents()

    def _watch_memory(self) -> None:
        """A node the kernel OOM-killed a process of (its memory limit reached; its
        cgroup's oom_kill count rose) becomes an event naming it: origin ``kernel``,
        action ``oom``, outcome ``oom-killed``."""
        seen: dict[str, int] = {}
        while not self.stopping:
            with self.rt.db_lock:
                groups = [(r.detail["node"], r.detail.get("dirs") or {})
                          for r in self.store.resources(self.rt.row.id)
                          if r.kind == "cgroup" and r.detail.get("node") and
                          r.state == "created"]
            for node, dirs in groups:
                n = cgroups.oom_kills(dirs)
                if n is not None and n < seen.get(node, 0):
                    seen[node] = n      # a new cgroup under the same name (modify)
                if n is None or n <= seen.get(node, 0):
                    continue
                killed, seen[node] = n - seen.get(node, 0), n
                limit = cgroups.usage(dirs).get("memory_max")
                now = self.rt.now()
                self.log_queue.put((
                    now, now, "kernel", Event(time_s=max(now, 0.0), target=node, action="oom"),
                    "oom-killed", f"node {node}: the kernel killed {killed} process(es) at its "
                    f"memory limit" + (f" of {limit} bytes" if limit else ""), None))
            time.sleep(OOM_POLL_S)

    # -- queue ----------------------------------------------------------------
    def _push(self, at: float, origin: str, ev: Event, waiter: Any) -> None:
        with self.cond:
            heapq.heappush(self.heap, (at, next(self.seq), origin, ev, waiter))
            self.sent_pending += origin == "tevc"
            self.cond.notify()

    def _halt(self) -> None:
        with self.cond:
            cancelled = [e for e in self.heap if e[2] in ("timeline", "sequence")]
            self.heap = [e for e in self.heap if e[2] not in ("timeline", "sequence")]
            heapq.heapify(self.heap)
        for at, _, origin, item, waiter in cancelled:
            if waiter is not None:      # a step sent from outside waits for its outcome
                self.log_queue.put((at, None, origin, item, "cancelled", "halted", waiter))
                continue
            for ev in _steps(item):
                self._record(at, None, origin, ev, "cancelled", "halted")

    def run(self) -> None:
        _realtime()
        while True:
            with self.cond:
                while not self.stopping and (not self.started or not self.heap):
                    self.cond.wait()
                if self.stopping:
                    return
                at = self.heap[0][0]
                left = at - self.rt.now()
                if left > SPIN_S:
                    self.cond.wait(min(left - SPIN_S, 3600.0))   # bounded: no overflow
                    continue
                while self.rt.now() < at:       # the last millisecond: spin
                    pass
                ev = heapq.heappop(self.heap)
                self.sent_pending -= ev[2] == "tevc"
            fired = self.rt.now()
            try:
                if isinstance(ev[3], list):        # a sequence's steps
                    threading.Thread(target=self._sequence, args=(ev, fired),
                                     daemon=True).start()
                    continue
                kind = self.rt.objects().get(ev[3].target)
                if kind in INLINE_KINDS or (kind == "simulator"
                                            and ev[3].action in ("msg", "log")):
                    self._execute(ev, fired)
                else:
                    threading.Thread(target=self._execute, args=(ev, fired),
                                     daemon=True).start()
            except Exception as e:  # noqa: BLE001 - never let one event stop the loop
                print(f"scheduler: dispatch of {ev[3]} failed: {e!r}", file=sys.stderr,
                      flush=True)

    def _execute(self, entry, fired: float) -> None:
        at, _, origin, ev, waiter = entry
        try:
            outcome, detail = self.rt.fire(ev)
        except Exception as e:  # noqa: BLE001 - the scheduler never dies of an event
            print(f"scheduler: event {ev.target} {ev.action} failed: {e!r}", file=sys.stderr,
                  flush=True)
            outcome, detail = "error", f"{ev.target} {ev.action}: internal error: {e}"
        self.log_queue.put((at, fired, origin, ev, outcome, detail, waiter))

    def _sequence(self, ev, fired: float) -> None:
        """An event sequence: each step starts when the previous one has completed (a
        failed step is logged and the sequence goes on)."""
        at, steps = ev[0], ev[3]
        for step in steps:
            if self.rt.halted:
                self.log_queue.put((at, None, "sequence", step, "cancelled", "halted", None))
                continue
            outcome, detail = self.rt.fire(step)
            self.log_queue.put((at, fired, "sequence", step, outcome, detail, None))
            at = fired = self.rt.now()

    def _logger(self) -> None:
        """Store and broadcast fired events, off the timing thread."""
        while True:
            *rec, waiter = self.log_queue.get()
            msg = self._record(*rec)
            if waiter is not None:
                waiter(msg)

    def _record(self, at, fired, origin, ev: Event, outcome, detail) -> dict:
        target, action, args = ev.target, ev.action, ev.args()
        with self.rt.db_lock:
            self.store.log_event(self.rt.row.id, self.t0_wall, origin, at, fired, target, action,
                                 args, outcome, detail)
        msg = {"event": "fired" if fired is not None else outcome, "t": fired,
               "scheduled_s": at, "lateness_s": None if fired is None else fired - at,
               "origin": origin, "target": target, "action": action, "args": args,
               "outcome": outcome, "detail": detail}
        line = (json.dumps(msg) + "\n").encode()
        for s in list(self.subscribers):
            try:
                s.sendall(line)
            except OSError:
                self.subscribers.remove(s)
        return msg

    # -- control socket -----------------------------------------------------------
    def serve(self) -> None:
        path = events_socket(self.folder)
        if os.path.exists(path):
            os.unlink(path)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        srv.listen(16)
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=self._client, args=(conn,), daemon=True).start()

    def _client(self, conn: socket.socket) -> None:
        why = peer_refused(conn)
        if why:
            with contextlib.suppress(OSError):
                conn.sendall((json.dumps({"ok": False, "error": why}) + "\n").encode())
            conn.close()
            return
        f = conn.makefile("rb")
        try:
            for line in f:
                try:
                    req = json.loads(line)
                    if not isinstance(req, dict):
                        raise TypeError("a request is a JSON object")
                    reply = self._handle(conn, req)
                except (ValueError, KeyError, TypeError) as e:
                    reply = {"ok": False, "error": str(e)}
                except Exception as e:  # noqa: BLE001 - a bug must not kill the scheduler
                    print(f"scheduler: request {line[:200]!r} failed: {e!r}", file=sys.stderr,
                          flush=True)
                    reply = {"ok": False, "error": f"internal error: {e}"}
                if reply is not None:
                    conn.sendall((json.dumps(reply) + "\n").encode())
        except OSError:
            pass

    def _handle(self, conn: socket.socket, req: dict) -> dict | None:
        cmd = req.get("cmd")
        if cmd == "go":
            self.go(req.get("t0"))
            return {"ok": True, "t0": self.t0_wall}
        if not self.started:
            return {"ok": False, "error": "the experiment's clock has not started (swap-in is "
                                          "not finished)"}
        if cmd == "subscribe":
            self.subscribers.append(conn)
            return {"ok": True, "t0": self.t0_wall, "now_s": self.rt.now()}
        if cmd == "status":
            with self.cond:
                pending = [{"at": e[0], "target": ev.target, "action": ev.action,
                            "args": ev.args()} for e in sorted(self.heap, key=lambda e: e[:2])
                           for ev in _steps(e[3])]
            return {"ok": True, "t0": self.t0_wall, "now_s": self.rt.now(),
                    "halted": self.rt.halted, "pending": pending}
        if cmd != "event":
            return {"ok": False, "error": f"unknown cmd {cmd!r}; use event, subscribe, status, "
                                          f"go"}
        ev = Event.from_json(req["event"])
        if ev.target not in self.rt.objects():
            return {"ok": False, "error": f"no object named {ev.target!r} in this experiment"}
        try:
            check_event(self.rt.exp, ev)            # typed by tevc; checked again here
        except SpecError as e:
            return {"ok": False, "error": e.message}
        at = parse_time(str(req.get("time", "now")), self.rt.now())
        origin = req.get("origin", "tevc")
        if origin not in ("tevc", "sequence"):
            return {"ok": False, "error": f"origin {origin!r}: tevc or sequence"}
        if origin == "sequence" and self.rt.halted:
            # a step of a sequence played from elsewhere (a cluster's conductor): halted
            # here, as this scheduler's own sequences are
            return {"ok": True, **self._record(at, None, origin, ev, "cancelled", "halted")}
        if self.sent_pending >= MAX_SENT_PENDING and at > self.rt.now() + 1.0:
            return {"ok": False, "error": f"{self.sent_pending} events sent with tevc are "
                                          f"still waiting for their time: at most "
                                          f"{MAX_SENT_PENDING} may (send later ones later)"}
        tl = next((t for t in self.rt.exp.timelines if t.name == ev.target), None)
        if tl is not None:
            return self._start_timeline(tl, at)
        if not req.get("wait"):
            self._push(at, origin, ev, None)
            return {"ok": True, "scheduled_s": at}
        done = threading.Event()
        box: dict = {}

        def waiter(msg):
            box.update(msg)
            done.set()
        self._push(at, origin, ev, waiter)
        done.wait()
        return {"ok": box.get("outcome") == "ok", **box}

    def _start_timeline(self, tl: Timeline, at: float) -> dict:
        """tevc ``TL start``: a timeline's events at ``at`` + their times; a sequence's
        steps one after another from ``at``."""
        with self.cond:
            if tl.kind == "sequence":
                heapq.heappush(self.heap, (at, next(self.seq), "sequence", list(tl.events),
                                           None))
            else:
                for e in tl.events:
                    heapq.heappush(self.heap, (at + e.time_s, next(self.seq), "tevc",
                                               replace(e, time_s=at + e.time_s), None))
            self.cond.notify()
        detail = f"{tl.kind} {tl.name}: {len(tl.events)} events from t={at:.6f} s"
        return {"ok": True, "scheduled_s": at, "outcome": "ok", "detail": detail, "t": at,
                "lateness_s": None}

    def shutdown(self, *_: Any) -> None:
        self.stopping = True
        with self.cond:
            self.cond.notify_all()
        self.rt.stop_all()
        os._exit(0)


def _steps(item: Event | list[Event]) -> list[Event]:
    """A heap entry's events: a sequence's steps, or one event (a timeline's, a tevc's, or
    one step of a sequence played from outside, which is logged as ``sequence`` too)."""
    return item if isinstance(item, list) else [item]


def peer_refused(conn: socket.socket, netns: Collection[int | None] | None = None,
                 where: str = "the host's") -> str | None:
    """Why a client of a control socket is refused (None: accepted). Only processes of our
    own user in an allowed network namespace (``netns``; by default our own) may speak:
    never a process inside a node (docs/security.md), even if it found the socket. The
    event socket and the cluster's host agents both ask this."""
    pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                         struct.calcsize("3i")))
    if uid != os.geteuid():
        return f"refused: client uid {uid} is not {os.geteuid()}"
    try:
        theirs = os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return "refused: cannot tell the client's network namespace"
    allowed = netns if netns is not None else {os.stat("/proc/self/ns/net").st_ino}
    if theirs not in allowed:
        return f"refused: the client is not in {where} network namespace"
    return None


def parse_time(text: str, now: float) -> float:
    """tevc TIME: ``now``, ``+SECONDS`` (from now) or ``SECONDS`` (since t = 0); a time
    beyond the experiment's horizon (``HORIZON_S`` after t = 0) is a ValueError."""
    if text == "now":
        return now
    try:
        offset = float(text[1:]) if text.startswith("+") else None
        value = now + offset if offset is not None else float(text)
    except ValueError:
        raise ValueError(f"time {text!r} is not now, +SECONDS or SECONDS") from None
    if offset is not None and not offset >= 0:
        raise ValueError(f"time {text!r}: +SECONDS counts from now and cannot be negative")
    if not 0 <= value <= HORIZON_S:             # also refuses NaN and infinities
        raise ValueError(f"time {text!r} is outside the experiment's horizon (0 to "
                         f"{HORIZON_S:g} s after t = 0, 10 days)")
    return value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="wanlab-scheduler")
    ap.add_argument("--home", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--control", help="JSON argv that reaches the life cycle")
    a = ap.parse_args(argv)
    os.umask(0o077)
    store = Store(a.home, shared=True, create=False)
    try:
        sched = Scheduler(store, a.name, json.loads(a.control) if a.control else None)
    except WanlabError as e:
        print(f"scheduler: {e}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, sched.shutdown)
    signal.signal(signal.SIGINT, sched.shutdown)
    threading.Thread(target=sched.serve, daemon=True).start()
    sched.run()
    return 0


def start(store: Store, row, folder: str, control_argv: list[str] | None = None) -> None:
    """Launch the scheduler for ``row`` (recorded first); :func:`go` starts its clock.
    ``control_argv`` + [swapout|terminate, NAME] is how it asks the life cycle for the
    ns ``swapout`` and ``terminate`` events (a process of their own: they stop it)."""
    sock = events_socket(folder)
    if os.path.exists(sock):
        os.unlink(sock)
    rid = store.record(row.id, "scheduler", f"scheduler-{row.short}")
    log = open(os.path.join(folder, "scheduler.log"), "ab")
    control = ["--control", json.dumps(control_argv)] if control_argv else []
    p = subprocess.Popen([sys.executable, "-m", "wanlab.run.scheduler", "--home", store.home,
                          "--name", row.name, *control], stdin=subprocess.DEVNULL, stdout=log,
                         stderr=log, start_new_session=True, umask=0o077,
                         cwd=os.path.dirname(os.path.dirname(
                             os.path.dirname(os.path.abspath(__file__)))))
    log.close()
    store.update_resource(rid, "created", pid=p.pid, started=procs.start_time(p.pid))
    _started[os.path.abspath(folder)] = p


# the schedulers this process started, by folder: go() stops waiting for a dead one
_started: dict[str, Any] = {}


def go(folder: str, t0: float | None = None, wait_s: float = 10.0) -> float:
    """t = 0 for the scheduler of the experiment in ``folder`` (now, or ``t0`` on the wall
    clock, already past); returns t0 (wall clock). ``wait_s``: how long its socket may take
    to appear (the scheduler reads and plans the experiment first; a dead one is not
    waited for)."""
    p = _started.pop(os.path.abspath(folder), None)
    alive = (lambda: p.poll() is None) if p is not None else None
    with EventClient(folder, wait_s=wait_s, alive=alive) as c:
        reply = c.request({"cmd": "go", **({"t0": t0} if t0 is not None else {})})
    if not reply.get("ok"):
        raise WanlabError(f"the event scheduler refused to start: {reply.get('error')}")
    return reply["t0"]


if __name__ == "__main__":
    sys.exit(main())

