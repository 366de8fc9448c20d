"""The per-experiment lock: one lock file per experiment name, held with ``flock`` for the
length of an operation that changes it. Every site (this host's life cycle, the cluster's
controller) takes this one, so two commands on one experiment never interleave."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

from wanlab.errors import WanlabError
from wanlab.store.db import ExperimentRow, Store, make_private_dir


class Busy(WanlabError):
    """The experiment's lock is held by another operation (and the caller would not wait)."""


@contextlib.contextmanager
def held(store: Store, name: str) -> Iterator[ExperimentRow]:
    """Hold experiment ``name``'s lock; yields its row (fresh, read under the lock)."""
    with holding(store, name) as (row, _fd):
        yield row


def holder(fd: int) -> str:
    """Who holds the lock file ``fd``, as its holder named itself there (its pid, then the
    start time; both sites' operations do): ``pid N (its command line)``."""
    try:
        pid = int(os.pread(fd, 64, 0).decode().split()[0])
    except (OSError, ValueError, IndexError):
        return "another wanlab process"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        argv = []
    if argv[1:3] == ["-m", "wanlab.cli"]:         # as the user typed it
        argv = ["wanlab", *argv[3:]]
    cmd = " ".join(argv)
    return f"pid {pid}" + (f" ({cmd[:120]})" if cmd else "")


@contextlib.contextmanager
def holding(store: Store, name: str, wait: bool = True
            ) -> Iterator[tuple[ExperimentRow, int]]:
    """Hold experiment ``name``'s lock; yields its row (fresh, read under the lock) and the
    lock file's descriptor (the sites' operations name their process in it). ``wait``:
    wait while another operation holds it, else raise :class:`Busy` naming that operation.

    The name is checked and the experiment must exist before a lock file is made;
    ``terminate`` removes the lock file (:func:`forget`), so a waiter that wakes on a
    removed file takes the lock again on the current one."""
    store.get(name)
    path = store.lock_path(name)
    make_private_dir(os.path.dirname(path))
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                raise Busy(f"{name} is busy: {holder(fd)} runs an operation on it") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                continue
            row = store.find(name)
            if row is None:             # terminated while we waited
                os.unlink(path)
                raise WanlabError(f"no experiment named {name!r} (see 'wanlab list')")
            yield row, fd
            return
        finally:
            os.close(fd)             # also releases the lock


def forget(store: Store, name: str) -> None:
    """Remove ``name``'s lock file (its experiment is gone; a waiter retries on a new file)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(store.lock_path(name))
