"""Idle and max-duration swap: Emulab's slothd signals, and the swap-out they lead to.

An active experiment is *active* in a sample when any of these moved since the last one
(the signals Emulab's slothd reported):

* the engine's counters: frames its links and LANs delivered (more than
  :data:`MIN_FRAMES_PER_S`: routing hellos alone do not keep an experiment busy); a
  cluster experiment's from every machine's engine (its site's ``activity``);
* process CPU: CPU time of the processes in its nodes' network namespaces (found by the
  recorded namespaces' inodes), more than :data:`MIN_CPU_SHARE` of a core (this host's
  experiments);
* open shells: a process in a node with a controlling terminal (``wanlab shell``).

Its policy is the IR's :class:`~wanlab.model.ir.SwapPolicy` (ns ``tb-set-idleswap``, YAML
``idle_swap:``, ``--idle-swap``; ``--no-idle-swap REASON`` turns it off), or the daemon's
default. When it has been idle for ``idle_s - warn_s`` (``warn_s``: a fifth of the
threshold, 1 s to 5 min), a warning goes into its event log (origin ``idle``, outcome
``warning``); at ``idle_s``, and not before the warning is ``warn_s / 2`` old, it is
swapped out through its site (reason ``idle swap`` in its history; a cluster
experiment's parts on every machine): soft state goes, the store, its folder
and each node's own files stay, so ``wanlab swapin`` brings it back. ``max_duration_s``
after its swap-in it is warned and swapped out the same way, busy or not.

:class:`Watcher` keeps the samples between ticks; the batch daemon calls :meth:`tick`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from wanlab import site as sites
from wanlab.errors import WanlabError
from wanlab.lifecycle import Lab
from wanlab.model.states import ACTIVE
from wanlab.site.activity import frames_of  # noqa: F401 - the signal's name here
from wanlab.store.db import ExperimentRow

MIN_FRAMES_PER_S = 5.0
MIN_CPU_SHARE = 0.05
_TICKS = os.sysconf("SC_CLK_TCK")

Say = Callable[[str], None]


def warn_s(limit_s: float) -> float:
    """How long before a swap its warning comes."""
    return min(300.0, max(1.0, limit_s * 0.2))


@dataclass
class _Seen:
    since: float                    # swap-in time of the run being watched
    last_active: float
    frames: int | None = None
    cpu_s: float | None = None
    at: float = 0.0
    warned: dict[str, float] = field(default_factory=dict)     # kind -> when


def process_table() -> dict[int, tuple[float, bool]]:
    """Network namespace inode -> (CPU seconds of its processes, whether one of them has a
    controlling terminal: an open shell). One pass over /proc per tick."""
    out: dict[int, tuple[float, bool]] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            ino = os.stat(f"/proc/{pid}/ns/net").st_ino
            with open(f"/proc/{pid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            # after the command: state ppid pgrp session tty_nr ... utime(12) stime(13)
            cpu, tty = (int(rest[11]) + int(rest[12])) / _TICKS, int(rest[4]) != 0
        except (OSError, IndexError, ValueError):
            continue
        c, t = out.get(ino, (0.0, False))
        out[ino] = (c + cpu, t or tty)
    return out


def node_processes(namespaces: list[str],
                   table: dict[int, tuple[float, bool]] | None = None) -> tuple[float, bool]:
    """CPU seconds of every process in these network namespaces (found by the recorded
    namespaces' inodes, never by name), and whether one has a terminal."""
    table = process_table() if table is None else table
    cpu, shell = 0.0, False
    for ns in namespaces:
        try:
            ino = os.stat(os.path.join("/run/netns", ns)).st_ino
        except OSError:
            continue
        c, t = table.get(ino, (0.0, False))
        cpu, shell = cpu + c, shell or t
    return cpu, shell


class Watcher:
    """Samples active experiments and swaps out those idle (or running) too long."""

    def __init__(self, lab: Lab, say: Say = print, default_idle_s: float | None = None):
        self.lab, self.say, self.default_idle_s = lab, say, default_idle_s
        self.seen: dict[int, _Seen] = {}
        self._table: dict[int, tuple[float, bool]] | None = None     # this tick's /proc

    def policy(self, row: ExperimentRow) -> tuple[float | None, float | None]:
        s = row.ir.swap
        idle = s.idle_s if s.idle_s is not None else (
            None if s.no_idle_reason is not None else self.default_idle_s)
        return idle, s.max_duration_s

    def tick(self, now: float | None = None) -> list[str]:
        """One sample of every active experiment with a policy; returns those swapped out."""
        now = time.time() if now is None else now
        swapped = []
        live = set()
        self._table = None
        for row in self.lab.store.list():
            idle_s, max_s = self.policy(row)
            if row.state != ACTIVE or (idle_s is None and max_s is None):
                continue
            live.add(row.id)
            try:
                if self._check(row, idle_s, max_s, now):
                    swapped.append(row.name)
            except WanlabError as e:       # swapped out or broken meanwhile: next tick
                self.say(f"idle check of {row.name}: {e}")
        for gone in set(self.seen) - live:
            del self.seen[gone]
        return swapped

    def _swapin_at(self, row: ExperimentRow) -> float:
        ats = [t for t, _a, b, _r in self.lab.store.transitions(row.id) if b == ACTIVE]
        return ats[-1] if ats else row.updated

    def _check(self, row: ExperimentRow, idle_s: float | None, max_s: float | None,
               now: float) -> bool:
        since = self._swapin_at(row)
        s = self.seen.get(row.id)
        if s is None or s.since != since:
            s = self.seen[row.id] = _Seen(since=since, last_active=since)
        frames, cpu, shell = self._sample(row)
        if s.frames is not None and now > s.at:
            dt = now - s.at
            busy = (shell or (frames - s.frames) / dt > MIN_FRAMES_PER_S
                    or (cpu - (s.cpu_s or 0.0)) / dt > MIN_CPU_SHARE)
            if busy:
                s.last_active = now
                s.warned.pop("idle", None)
        s.frames, s.cpu_s, s.at = frames, cpu, now
        for kind, limit, elapsed in (("max-duration", max_s, now - since),
                                     ("idle", idle_s, now - s.last_active)):
            if limit is None:
                continue
            w = warn_s(limit)
            if elapsed >= limit - w and kind not in s.warned:
                s.warned[kind] = now
                self._log(row, now, "warning", f"{kind}: {elapsed:.0f} s of {limit:g} s; "
                          f"swapping out in about {max(0.0, limit - elapsed):.0f} s")
                self.say(f"{row.name}: {kind} warning ({elapsed:.0f} s of {limit:g} s)")
            if elapsed >= limit and kind in s.warned and now - s.warned[kind] >= w / 2:
                self._log(row, now, "ok", f"{kind} swap after {elapsed:.0f} s")
                self.say(f"{row.name}: {kind} swap after {elapsed:.0f} s")
                # through its site: a cluster experiment's parts stop on their machines
                sites.of(self.lab, row.name, say=self.say).swapout(row.name,
                                                                   reason=f"{kind} swap")
                del self.seen[row.id]
                return True
        return False

    def _sample(self, row: ExperimentRow) -> tuple[int, float, bool]:
        frames, namespaces = sites.of(self.lab, row.name, say=self.say).activity(row.name)
        if self._table is None:
            self._table = process_table()
        cpu, shell = node_processes(namespaces, self._table)
        return frames, cpu, shell

    def _log(self, row: ExperimentRow, now: float, outcome: str, detail: str) -> None:
        t0 = None
        with contextlib.suppress(OSError, ValueError):
            with open(self.lab.store.folder(row.name, "t0")) as f:
                t0 = float(f.read().strip())
        if t0 is None:
            t0 = self._swapin_at(row)
        self.lab.store.log_event(row.id, t0, "idle", now - t0, now - t0, "ns", "swapout",
                                 [], outcome, detail)
