"""Processes an experiment owns: identified by pid *and* start time, never by name.

A pid alone can be reused after a crash; the pair (pid, start time in clock
ticks since boot, field 22 of /proc/PID/stat) names one process for ever,
so teardown never signals a stranger.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time


def start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # the command name (field 2) may hold spaces; fields resume after the last ')'
    return int(stat[stat.rindex(")") + 2:].split()[19])


def alive(pid: int, started: int | None) -> bool:
    """True while the process (pid, started) exists and has not exited (zombies are dead)."""
    _reap(pid)
    st = start_time(pid)
    if st is None or (started is not None and st != started):
        return False
    if zombie(pid):
        _reap(pid)      # it died since the first look: collect its status now, for exit_reason
        return False
    return True


def kill(pid: int, started: int | None, grace: float = 1.0) -> bool:
    """SIGTERM, then SIGKILL after ``grace`` seconds, the process (pid, started) if it lives."""
    if not alive(pid, started):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace
    pause = 0.001               # most processes end within a millisecond or two
    while time.monotonic() < deadline:
        _reap(pid)
        if not alive(pid, started):
            return True
        time.sleep(pause)
        pause = min(pause * 2, 0.01)
    if alive(pid, started):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for _ in range(100):
        _reap(pid)
        if not alive(pid, started):
            break
        time.sleep(0.01)
    return True


# exit statuses of our own children, kept when we reap them (the health check reports them)
EXITS: dict[int, int] = {}

# Children started with subprocess that we reap ourselves. Holding the Popen keeps
# subprocess from reaping it behind our back, and when we reap it we tell the Popen, so
# that its finaliser never polls the pid again: with pid_max 32768 the pid soon names
# another child, which that late poll would reap and whose exit status would be lost.
# A child we do not hold may still have a Popen that was dropped while it ran: subprocess
# keeps such Popens in its ``_active`` list and polls their pids at every later Popen().
# When we reap that child here we tell its dropped Popen too (:func:`_tell_dropped`), or
# that late poll would find the pid come round to a newer child and reap it (CI once read
# a killed engine as "process gone" so).
_HELD: dict[int, subprocess.Popen] = {}


def hold(proc: subprocess.Popen) -> None:
    """Reap ``proc`` here (``alive``/``kill``) so :func:`exit_reason` can say how it ended."""
    EXITS.pop(proc.pid, None)       # a status of an earlier process with the same pid
    for pid in [p for p, held in _HELD.items() if held.returncode is not None]:
        del _HELD[pid]              # waited for by their own Popen
    old = _HELD.get(proc.pid)
    if old is not None and old.returncode is None:
        # the pid came round, so that process was reaped elsewhere (a test's waitpid(-1)):
        # tell its Popen, or its finaliser would poll the pid and reap this new child
        old.returncode = -1
    _HELD[proc.pid] = proc


def _reap(pid: int) -> None:
    """Collect the exit status if ``pid`` is our own child (otherwise init does)."""
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return
    if got == pid:
        EXITS[pid] = status
        held = _HELD.pop(pid, None)
        if held is not None and held.returncode is None:
            held.returncode = os.waitstatus_to_exitcode(status)
        elif held is None:
            _tell_dropped(pid, status)


def _tell_dropped(pid: int, status: int) -> None:
    """Give the status of ``pid``, just reaped, to a Popen of it dropped while it ran."""
    for p in list(getattr(subprocess, "_active", None) or ()):
        if p.pid == pid and p.returncode is None:
            p.returncode = os.waitstatus_to_exitcode(status)


def exit_reason(pid: int) -> str | None:
    """"exited with signal N" / "exited with code N" if we reaped ``pid``; None if unknown
    (a process started by another wanlab command is reaped by init, not by us)."""
    status = EXITS.get(pid)
    if status is None:
        return None
    if os.WIFSIGNALED(status):
        return f"exited with signal {os.WTERMSIG(status)}"
    return f"exited with code {os.waitstatus_to_exitcode(status)}"


PF_EXITING = 0x4


def exiting(pid: int) -> bool:
    """True once the process (its main thread) has begun to exit. The init of a PID
    namespace stays so until every process of its namespace is reaped, which a parent
    outside the namespace may do late."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    return bool(int(stat[stat.rindex(")") + 2:].split()[6]) & PF_EXITING)


def kill_pending(status: str) -> bool:
    """Whether ``/proc/PID/status`` text shows a SIGKILL not yet acted on (the process's own
    or its group's pending set)."""
    for line in status.splitlines():
        if line.startswith(("SigPnd:", "ShdPnd:")) and \
                int(line.split()[1], 16) & (1 << (signal.SIGKILL - 1)):
            return True
    return False


def doomed(pid: int) -> bool:
    """True once the process has begun to exit or has a SIGKILL pending: on a loaded
    machine a killed process may not run (and so begin to exit) for a while, and a PID
    namespace whose init is doomed takes its new processes down with it."""
    if exiting(pid):
        return True
    try:
        with open(f"/proc/{pid}/status") as f:
            return kill_pending(f.read())
    except FileNotFoundError:
        return False


def zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] == "Z"
