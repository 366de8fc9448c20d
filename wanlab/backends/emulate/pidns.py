"""Starting a process directly inside a node's PID namespace.

A process cannot move itself into a PID namespace; only its children can be born there.
Entering one from outside therefore forks, and the pid a caller's ``Popen`` holds is then
the entering process's, not the node's process: signals (an agent's SIGUSR1),
``/proc/<pid>/status`` and the recorded (pid, start time) would all name the wrong process.

Instead, the calling *thread* sets the PID namespace its next children are born in
(``setns`` with CLONE_NEWPID, or ``unshare`` for a new one), forks with ``Popen``, and
sets it back to its own at once. The child is then the node's process itself, under the
pid ``Popen`` reports (its pid in the host's namespace). The setting is per thread (other
threads of the scheduler are not affected); while it is set, the thread must not start
threads, which the kernel refuses, so the window is kept to the ``Popen`` call.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

from wanlab.backends.emulate import procs

CLONE_NEWPID = 0x20000000

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


@contextlib.contextmanager
def _restoring() -> Iterator[None]:
    # the thread's own (active) namespace: children go back to being born there
    own = os.open("/proc/thread-self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    try:
        yield
    finally:
        try:
            _check(_libc.setns(own, CLONE_NEWPID), "setns back to the host's PID namespace")
        finally:
            os.close(own)


@contextlib.contextmanager
def children_in_new() -> Iterator[None]:
    """The calling thread's next child is the init (pid 1) of a new PID namespace."""
    with _restoring():
        _check(_libc.unshare(CLONE_NEWPID), "unshare a PID namespace")
        yield


@contextlib.contextmanager
def children_in(pid: int, started: int | None = None) -> Iterator[None]:
    """The calling thread's children are born in process ``pid``'s PID namespace.

    ``started`` (the process's start time) is checked after the namespace is opened, so a
    pid reused in between never lends its namespace. Raises OSError if the process is gone
    (a fork into a namespace whose init has exited fails with ENOMEM)."""
    fd = os.open(f"/proc/{pid}/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if started is not None and procs.start_time(pid) != started:
            raise ProcessLookupError(f"process {pid} is gone")
        with _restoring():
            _check(_libc.setns(fd, CLONE_NEWPID), f"setns into the PID namespace of {pid}")
            yield
    finally:
        os.close(fd)

