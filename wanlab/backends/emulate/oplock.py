"""Who runs an operation on an experiment: its lock file names the process holding it.

Every life-cycle operation holds the experiment's lock file (``flock``) while it runs and,
while it holds it, the file names that process (pid and start time). The holder erases
the name when it lets go. A process killed with SIGKILL cannot: its lock is freed by the
kernel, its name stays. A name left in a lock nobody holds is therefore an operation cut
short, whose transient state (``activating``, ``modifying`` ...) would never end by itself;
the health check reports it (:func:`abandoned`), and the next operation to take the lock
learns of it (:func:`claim`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from wanlab.backends.emulate import procs

Owner = tuple[int, "int | None"]


def _read(fd: int) -> Owner | None:
    try:
        pid, started = os.pread(fd, 64, 0).decode().split()
        return int(pid), (int(started) if started != "-" else None)
    except (OSError, ValueError):
        return None


def claim(fd: int) -> Owner | None:
    """Name this process in the lock file ``fd`` (its lock just taken); returns the process
    named there before, if any: an earlier holder that ended without letting go."""
    before = _read(fd)
    started = procs.start_time(os.getpid())
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {'-' if started is None else started}\n".encode(), 0)
    return before


def release(fd: int) -> None:
    """Erase the holder's name (before the lock is let go)."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)


def abandoned(path: str) -> Owner | None:
    """The process named in the lock file at ``path`` if it is gone and nobody holds the
    lock (an operation cut short); None otherwise (no such file, no name, or the
    operation still runs)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        owner = _read(fd)
        if owner is None or procs.alive(*owner):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None                     # held: its operation runs
        owner = _read(fd)                   # read again under the lock
        return owner if owner is not None and not procs.alive(*owner) else None
    finally:
        os.close(fd)                        # also lets the lock go
