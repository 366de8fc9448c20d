"""The facility's records in the store: template versions, runs, the batch queue.

* ``templates``: every distinct source text of a template (by name: the file's stem) is a
  version, numbered from 1; the same text again is the same version.
* ``runs``: one row per run of a template (a sweep's point and repeat, emulated or
  simulated): the exact version, parameter values, seed, engine hash, kernel, state,
  results and where they are, so that a run can be reproduced (``wanlab sweep --rerun``).
* ``batches`` and ``batch_log``: the batch queue (Emulab's batch mode) and every change
  of a batch's state, with its reason. The queue lives here so it survives a restart of
  the daemon and of the machine.

Every write is one transaction (:meth:`Store._tx`).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

from wanlab.errors import WanlabError
from wanlab.store.db import Store


@dataclass(frozen=True)
class TemplateVersion:
    id: int
    name: str
    version: int
    path: str
    sha256: str
    source: str
    parameters: list[dict[str, str]]
    created: float


def _template(r: Any) -> TemplateVersion:
    return TemplateVersion(r["id"], r["name"], r["version"], r["path"], r["sha256"],
                           r["source"], json.loads(r["parameters"]), r["created"])


def template_version(store: Store, name: str, path: str, source: str,
                     parameters: list[dict[str, str]]) -> tuple[TemplateVersion, bool]:
    """The version of template ``name`` whose text is ``source``, recorded as the next
    version if it is new; returns (version, whether it is new)."""
    sha = hashlib.sha256(source.encode()).hexdigest()
    with store._tx():
        r = store.db.execute("SELECT * FROM templates WHERE name = ? AND sha256 = ?",
                             (name, sha)).fetchone()
        if r is not None:
            return _template(r), False
        (last,) = store.db.execute("SELECT coalesce(max(version), 0) FROM templates "
                                   "WHERE name = ?", (name,)).fetchone()
        cur = store.db.execute(
            "INSERT INTO templates(name, version, path, sha256, source, parameters, created) "
            "VALUES (?,?,?,?,?,?,?)", (name, last + 1, path, sha, source,
                                       json.dumps(parameters), time.time()))
        rid = cur.lastrowid
    return _template(store.db.execute("SELECT * FROM templates WHERE id = ?",
                                      (rid,)).fetchone()), True


def template_history(store: Store, name: str) -> list[TemplateVersion]:
    return [_template(r) for r in store.db.execute(
        "SELECT * FROM templates WHERE name = ? ORDER BY version", (name,))]


def template_by_id(store: Store, tid: int) -> TemplateVersion:
    r = store.db.execute("SELECT * FROM templates WHERE id = ?", (tid,)).fetchone()
    if r is None:
        raise WanlabError(f"no template version with id {tid}")
    return _template(r)


def run_counts(store: Store, template_id: int) -> int:
    (n,) = store.db.execute("SELECT count(*) FROM runs WHERE template_id = ?",
                            (template_id,)).fetchone()
    return n


# -- runs ----------------------------------------------------------------------------------

def add_run(store: Store, template_id: int, sweep: str, mode: str, repeat: int,
            parameters: dict[str, str], seed: int, engine: str, kernel: str) -> int:
    with store._tx():
        cur = store.db.execute(
            "INSERT INTO runs(template_id, sweep, mode, repeat, parameters, seed, engine, "
            "kernel, state, started) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (template_id, sweep, mode, repeat, json.dumps(parameters), seed, engine, kernel,
             "running", time.time()))
        return cur.lastrowid


def finish_run(store: Store, run_id: int, state: str, folder: str | None,
               result: dict[str, Any] | None, error: str | None = None) -> None:
    with store._tx():
        store.db.execute("UPDATE runs SET state = ?, folder = ?, result = ?, error = ?, "
                         "ended = ? WHERE id = ?",
                         (state, folder, None if result is None else json.dumps(result),
                          error, time.time(), run_id))


def get_run(store: Store, run_id: int) -> dict[str, Any]:
    r = store.db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
    if r is None:
        raise WanlabError(f"no run with id {run_id} (see 'wanlab template history')")
    d = dict(r)
    d["parameters"] = json.loads(d["parameters"])
    d["result"] = json.loads(d["result"]) if d["result"] else None
    return d


# -- the batch queue -------------------------------------------------------------------------

# Emulab's batch states; a batch in LIVE has a worker (or had one before a crash)
POSTED, ACTIVATING, RUNNING, TERMINATING, DONE, FAILED, CANCELLED = (
    "posted", "activating", "running", "terminating", "done", "failed", "cancelled")
LIVE = (ACTIVATING, RUNNING, TERMINATING)
FINAL = (DONE, FAILED, CANCELLED)


def add_batch(store: Store, user: str, name: str, path: str, ir_json: dict[str, Any]) -> int:
    now = time.time()
    with store._tx():
        cur = store.db.execute(
            "INSERT INTO batches(user, name, path, ir, state, submitted) VALUES (?,?,?,?,?,?)",
            (user, name, path, json.dumps(ir_json), POSTED, now))
        bid = cur.lastrowid
        store.db.execute("INSERT INTO batch_log(batch_id, at, from_state, to_state, reason) "
                         "VALUES (?,?,?,?,?)", (bid, now, None, POSTED, "submitted"))
    return bid


def _batch(r: Any) -> dict[str, Any]:
    d = dict(r)
    d["ir"] = json.loads(d["ir"])
    d["worker"] = json.loads(d["worker"]) if d["worker"] else None
    return d


def batches(store: Store, states: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    q, args = "SELECT * FROM batches", ()
    if states:
        q += f" WHERE state IN ({','.join('?' * len(states))})"
        args = states
    return [_batch(r) for r in store.db.execute(q + " ORDER BY id", args)]


def get_batch(store: Store, bid: int) -> dict[str, Any]:
    r = store.db.execute("SELECT * FROM batches WHERE id = ?", (bid,)).fetchone()
    if r is None:
        raise WanlabError(f"no batch with id {bid} (see 'wanlab batch list')")
    return _batch(r)


def set_batch_state(store: Store, bid: int, state: str, reason: str, *,
                    expect: tuple[str, ...] | None = None, **fields: Any) -> bool:
    """Move batch ``bid`` to ``state`` (only from a state in ``expect``, if given), setting
    ``fields`` (worker, folder, error, started, ended, attempts); False if it was not in
    ``expect`` (someone else moved it first)."""
    allowed = {"worker", "folder", "error", "started", "ended", "attempts"}
    if set(fields) - allowed:
        raise ValueError(f"unknown batch fields {set(fields) - allowed}")
    now = time.time()
    with store._tx():
        r = store.db.execute("SELECT state FROM batches WHERE id = ?", (bid,)).fetchone()
        if r is None:
            raise WanlabError(f"no batch with id {bid}")
        if expect is not None and r["state"] not in expect:
            return False
        sets = ", ".join(f"{k} = ?" for k in fields)
        vals = [json.dumps(v) if k == "worker" and v is not None else v
                for k, v in fields.items()]
        store.db.execute(f"UPDATE batches SET state = ?{', ' + sets if sets else ''} "
                         f"WHERE id = ?", (state, *vals, bid))
        store.db.execute("INSERT INTO batch_log(batch_id, at, from_state, to_state, reason) "
                         "VALUES (?,?,?,?,?)", (bid, now, r["state"], state, reason))
    return True


def batch_log(store: Store, bid: int) -> list[dict[str, Any]]:
    return [dict(r) for r in store.db.execute(
        "SELECT * FROM batch_log WHERE batch_id = ? ORDER BY id", (bid,))]
