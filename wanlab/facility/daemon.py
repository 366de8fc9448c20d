"""The facility daemon (``wanlab batch daemon [--foreground]``; packaging/wanlab-batch.service).

Every tick it:

1. looks after the workers: a batch in activating/running/terminating whose worker is gone
   (the daemon or the machine restarted, a worker was killed) has its experiment cleaned
   up and is posted again, or failed after :data:`~wanlab.facility.batch.MAX_ATTEMPTS`;
   a worker still alive from an earlier daemon is adopted (it is watched by pid and start
   time, the way every process is recorded);
2. starts posted batches while fewer than ``max_concurrent`` batches are live (its own
   work only: experiments that people run by hand are theirs, not the queue's, and never
   hold a batch back): oldest first, but a user who already has a running batch waits
   while another user's batch is posted (one running batch per user unless capacity is
   otherwise idle). Before a worker starts, the batch is moved to ``activating`` in one
   transaction, so two daemons never start one batch twice; the daemon also holds a lock
   so that only one runs per state folder. What it sees (its limit, the batches it runs)
   is written to ``batches/daemon.json`` each tick, so ``wanlab batch list`` says why a
   posted batch waits, and its log says so when the reason changes;
3. samples active experiments for idle and max-duration swap (:mod:`wanlab.facility.idle`).

All of its state is in the store, so stopping it (SIGTERM) loses nothing: running workers
go on, and the next daemon adopts them. ``max_concurrent`` defaults to one per two cores,
so that emulations keep a core for their engines.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time

from wanlab import site as sites
from wanlab.backends.emulate import procs
from wanlab.errors import WanlabError
from wanlab.facility import batch, idle
from wanlab.facility.batch import MAX_ATTEMPTS, experiment_name, folder
from wanlab.lifecycle import Lab
from wanlab.store import facility as records
from wanlab.store.db import make_private_dir
from wanlab.store.facility import ACTIVATING, FAILED, LIVE, POSTED


def default_max_concurrent() -> int:
    return max(1, (os.cpu_count() or 1) // 2)


def _log(msg: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} wanlab-batch: {msg}", flush=True)


class Daemon:
    def __init__(self, lab: Lab, max_concurrent: int | None = None,
                 default_idle_s: float | None = None):
        self.lab = lab
        self.max = max_concurrent or default_max_concurrent()
        if self.max < 1:
            raise WanlabError("--max-concurrent must be at least 1")
        self.children: dict[int, subprocess.Popen] = {}       # batch id -> our worker
        self.watcher = idle.Watcher(lab, say=_log, default_idle_s=default_idle_s)
        self._waiting: dict[int, str] = {}      # posted batch -> why it waits (logged)

    # -- workers --------------------------------------------------------------------------
    def _alive(self, b: dict) -> bool:
        child = self.children.get(b["id"])
        if child is not None:
            if child.poll() is None:
                return True
            del self.children[b["id"]]
            return False
        w = b["worker"]
        return bool(w) and procs.alive(w["pid"], w["started"])

    def recover(self) -> None:
        for b in records.batches(self.lab.store, LIVE):
            if self._alive(b):
                continue
            if b["worker"] is None and b["state"] == ACTIVATING and b["id"] in self.children:
                continue
            # its worker is gone without finishing: clean up, then retry or give up
            name = experiment_name(b["name"], b["id"])
            with contextlib.suppress(WanlabError):
                if self.lab.store.find(name) is not None:
                    sites.of(self.lab, name, say=_log).cleanup(name)
            attempts = b["attempts"] + 1
            again = attempts < MAX_ATTEMPTS
            records.set_batch_state(
                self.lab.store, b["id"], POSTED if again else FAILED,
                f"its worker ended while {b['state']}" + ("; will retry" if again else ""),
                expect=(b["state"],), attempts=attempts, worker=None,
                error=None if again else f"worker ended while {b['state']}")
            _log(f"batch {b['id']}: worker gone while {b['state']}; "
                 f"{'posted again' if again else 'failed'}")

    def active_load(self) -> int:
        """The daemon's own work: its live batches (activating, running, terminating)."""
        return len(records.batches(self.lab.store, LIVE))

    def pick(self) -> dict | None:
        posted = records.batches(self.lab.store, (POSTED,))
        if not posted:
            return None
        busy_users = {b["user"] for b in records.batches(self.lab.store, LIVE)}
        for b in posted:
            if b["user"] not in busy_users:
                return b
        return posted[0]           # only users with a running batch wait: capacity is idle

    def start(self, b: dict) -> None:
        bid = b["id"]
        if not records.set_batch_state(self.lab.store, bid, ACTIVATING, "capacity free",
                                       expect=(POSTED,), started=time.time(), worker=None):
            return
        out = folder(self.lab, bid)
        make_private_dir(out)
        with open(os.path.join(out, "worker.log"), "ab") as log:
            p = subprocess.Popen([sys.executable, "-m", "wanlab.facility.worker", "--home",
                                  self.lab.store.home, str(bid)],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                 start_new_session=True)
        procs.hold(p)           # reaped here, by poll(), never by a stray waitpid
        self.children[bid] = p
        with self.lab.store._tx():
            import json
            self.lab.store.db.execute("UPDATE batches SET worker = ? WHERE id = ?",
                                      (json.dumps({"pid": p.pid,
                                                   "started": procs.start_time(p.pid)}), bid))
        _log(f"batch {bid} ({b['user']}, {b['name']}): started, worker pid {p.pid}")

    def tick(self) -> None:
        self.recover()
        free = self.max - self.active_load()
        while free > 0:
            b = self.pick()
            if b is None:
                break
            self.start(b)
            free -= 1
        self.say_waiting()
        self.watcher.tick()

    def say_waiting(self) -> None:
        """Record what the daemon sees (``wanlab batch list`` reads it) and log why the
        posted batches wait, once each time the reason changes."""
        batch.write_status(self.lab, self.max, os.getpid())
        why = {b["id"]: batch.waiting(self.lab, b)
               for b in records.batches(self.lab.store, (POSTED,))}
        for bid, reason in sorted(why.items()):
            if reason and self._waiting.get(bid) != reason:
                _log(f"batch {bid} waits: {reason}")
        self._waiting = why

    def stop_children(self) -> None:
        """Reap finished workers; running ones go on (the next daemon adopts them)."""
        for bid, p in list(self.children.items()):
            if p.poll() is not None:
                del self.children[bid]


def main(home: str, max_concurrent: int | None = None, foreground: bool = False,
         tick_s: float = 2.0, once: bool = False, default_idle_s: str | None = None) -> int:
    from wanlab.frontends import units
    idle_s = (units.parse_duration(default_idle_s, "--default-idle")
              if default_idle_s is not None else None)
    if not foreground and not once:
        _daemonize(home)
    lab = Lab(home)
    lock_path = lab.store.inside("locks", "batch-daemon.lock")
    make_private_dir(os.path.dirname(lock_path))
    lock = open(lock_path, "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise WanlabError(f"a batch daemon already runs for {lab.store.home}") from None
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    d = Daemon(lab, max_concurrent, idle_s)
    _log(f"started (home {lab.store.home}, at most {d.max} at once, pid {os.getpid()})")
    try:
        while not stop:
            try:
                d.tick()
            except WanlabError as e:
                _log(f"error: {e}")
            except KeyboardInterrupt:   # SIGTERM during a swap-out, which finished first
                break
            d.stop_children()
            if once:
                break
            for _ in range(max(1, int(tick_s / 0.1))):
                if stop:
                    break
                time.sleep(0.1)
    finally:
        _log("stopping (running batches go on; the next daemon adopts them)")
        batch.clear_status(lab)
        lab.close()
        lock.close()
    return 0


def _daemonize(home: str) -> None:
    """Detach: a new session, output to $HOME/batch-daemon.log."""
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
    log_path = os.path.join(os.path.abspath(home), "batch-daemon.log")
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
