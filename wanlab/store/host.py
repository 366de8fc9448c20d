"""Names every store on a host shares: experiments' short ids and user-namespace uid ranges.

Each store (one ``WANLAB_HOME``) keeps its own experiments, but their kernel objects meet on
the host: a short id names the experiment's namespaces and devices (``wl-<short>-<node>``),
and a uid range is the experiment's user namespace. Two stores (two users' homes, the
machines of a local cluster, tests beside each other) must never hold the same one, so each
is claimed here, in one SQLite file of the host, for (store, experiment) until the
experiment is deleted.

A claim whose experiment no longer exists (its store deleted, or the experiment gone
without releasing it: a store removed by hand, a crash between the two writes) is stale
and is taken over; a claim younger than :data:`GRACE_S` is never judged stale, as its
experiment may not be committed yet.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterable

# inside the default state folder: no bind may copy it, no node sees it
PATH = "/var/lib/wanlab/host/claims.db"
GRACE_S = 600.0

_SCHEMA = """CREATE TABLE IF NOT EXISTS claims (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    home TEXT NOT NULL,
    exp_id INTEGER NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (kind, key)
)"""


def _path() -> str:
    """The host's claims (``WANLAB_HOST_CLAIMS`` for a test's own); a user other than root
    makes no kernel objects, and keeps its claims to itself."""
    if "WANLAB_HOST_CLAIMS" in os.environ:
        return os.environ["WANLAB_HOST_CLAIMS"]
    if os.geteuid() != 0:
        return os.path.join(tempfile.gettempdir(), f"wanlab-host-{os.geteuid()}", "claims.db")
    return PATH


def _open() -> sqlite3.Connection:
    path = _path()
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    db = sqlite3.connect(path, timeout=60, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(_SCHEMA)
    return db


def _exists(home: str, exp_id: int) -> bool:
    """Whether store ``home`` still has experiment ``exp_id`` (an unreadable store counts
    as having it: a claim is only taken over when it is surely stale)."""
    path = os.path.join(home, "wanlab.db")
    if not os.path.exists(path):
        return False
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        try:
            return db.execute("SELECT 1 FROM experiments WHERE id = ?",
                              (exp_id,)).fetchone() is not None
        finally:
            db.close()
    except sqlite3.Error:
        return True


def claim(kind: str, candidates: Iterable[str], home: str, exp_id: int,
          usable: Callable[[str], bool] = lambda _: True) -> str | None:
    """Claim the first of ``candidates`` that no other experiment on the host holds (and
    ``usable`` accepts) for experiment ``exp_id`` of store ``home``; the one it already
    holds, if it holds one among them. None if every candidate is taken."""
    home = os.path.abspath(home)
    db = _open()
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            got = None
            for key in candidates:
                r = db.execute("SELECT home, exp_id, at FROM claims WHERE kind = ? AND key = ?",
                               (kind, key)).fetchone()
                if r is not None:
                    if (r[0], r[1]) == (home, exp_id):
                        got = key
                        break
                    if time.time() - r[2] < GRACE_S or _exists(r[0], r[1]):
                        continue
                if not usable(key):
                    continue
                db.execute("INSERT OR REPLACE INTO claims(kind, key, home, exp_id, at)"
                           " VALUES (?,?,?,?,?)", (kind, key, home, exp_id, time.time()))
                got = key
                break
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return got
    finally:
        db.close()


def holder(kind: str, key: str) -> tuple[str, int] | None:
    """The (store, experiment id) holding ``key``, if any."""
    db = _open()
    try:
        r = db.execute("SELECT home, exp_id FROM claims WHERE kind = ? AND key = ?",
                       (kind, key)).fetchone()
        return (r[0], int(r[1])) if r else None
    finally:
        db.close()


def release(home: str, exp_id: int, kind: str | None = None) -> None:
    """Free what experiment ``exp_id`` of store ``home`` holds (of ``kind``, or all)."""
    db = _open()
    try:
        q = "DELETE FROM claims WHERE home = ? AND exp_id = ?"
        args: tuple = (os.path.abspath(home), exp_id)
        if kind is not None:
            q += " AND kind = ?"
            args += (kind,)
        db.execute(q, args)
    finally:
        db.close()
