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


@contextlib.contextmanager
def held(store: Store, name: str) -> Iterator[ExperimentRow]:
    """Hold experiment ``name``'s lock; yields its row (fresh, read under the lock)."""
    with holding(store, name) as (row, _fd):
        yield row


@contextlib.contextmanager
def holding(store: Store, name: str) -> Iterator[tuple[ExperimentRow, int]]:
    """Hold experiment ``name``'s lock; yields its row (fresh, read under the lock) and the
    lock file's descriptor (the life cycle names the holder in it).

    The name is checked and the experiment must exist before a lock file is made;
    ``terminate`` removes the lock file (:func:`forget`), so a waiter that wakes on a
    removed file takes the lock again on the current one."""
    store.get(name)
    path = store.lock_path(name)
    make_private_dir(os.path.dirname(path))
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
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
