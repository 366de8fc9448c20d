"""The cluster's records in the store (table ``cluster``).

One store knows at most one current cluster. Its parts are recorded *before* they are
made (state ``planned``), become ``created``, then ``removed``, exactly as an
experiment's resources (:mod:`wanlab.store.db`): ``cluster down`` removes what is
recorded here and nothing else. Kinds: ``cluster`` (its id, subnet, head address),
``dir`` (Ray's private folder), ``bridge``, ``machine`` (a machine's network namespace
on the local test cluster), ``process`` (a Ray daemon: pid and start time), and ``part``
(the share of a cluster experiment that one machine runs).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from wanlab.store.db import Store


@dataclass(frozen=True)
class Record:
    id: int
    kind: str
    name: str
    detail: dict[str, Any]
    state: str


def record(store: Store, kind: str, name: str, **detail: Any) -> int:
    """Record a part of the cluster before making it."""
    with store._tx():
        cur = store.db.execute("INSERT INTO cluster(kind, name, detail, state, created) "
                               "VALUES (?,?,?,?,?)", (kind, name, json.dumps(detail),
                                                      "planned", time.time()))
    return cur.lastrowid


def update(store: Store, rid: int, state: str | None = None, **detail: Any) -> None:
    with store._tx():
        if detail:
            (old,) = store.db.execute("SELECT detail FROM cluster WHERE id = ?",
                                      (rid,)).fetchone()
            store.db.execute("UPDATE cluster SET detail = ? WHERE id = ?",
                             (json.dumps({**json.loads(old), **detail}), rid))
        if state:
            store.db.execute("UPDATE cluster SET state = ? WHERE id = ?", (state, rid))


def live(store: Store, kind: str | None = None) -> list[Record]:
    """Every record not yet removed (of one kind), oldest first."""
    q, args = "SELECT * FROM cluster WHERE state != 'removed'", ()
    if kind:
        q, args = q + " AND kind = ?", (kind,)
    return [Record(r["id"], r["kind"], r["name"], json.loads(r["detail"]), r["state"])
            for r in store.db.execute(q + " ORDER BY id", args)]


def removed(store: Store, rid: int) -> None:
    update(store, rid, "removed")
