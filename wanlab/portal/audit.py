"""The audit log: who did what through the portal (create, swap, tevc, link changes, console
opens, logins), in the store's ``portal_audit`` table. A row is written once the action was
allowed, before it runs, with its outcome appended when it fails, so a crash mid-action still
leaves who started it."""

from __future__ import annotations

import sqlite3
import time
from typing import Any


def record(db: sqlite3.Connection, user: str, action: str, experiment: str | None = None,
           project: str | None = None, detail: str = "") -> int:
    return db.execute("INSERT INTO portal_audit(at, user, project, experiment, action, detail)"
                      " VALUES (?,?,?,?,?,?)", (time.time(), user, project, experiment, action,
                                                detail[:2000])).lastrowid


def failed(db: sqlite3.Connection, row_id: int, error: str) -> None:
    db.execute("UPDATE portal_audit SET detail = detail || ? WHERE id = ?",
               (f" [failed: {error[:500]}]", row_id))


def rows(db: sqlite3.Connection, experiment: str | None = None, projects: list[str] | None = None,
         limit: int = 200) -> list[dict[str, Any]]:
    """The newest ``limit`` rows, of one experiment and/or of some projects (None: all)."""
    q, args = "SELECT * FROM portal_audit WHERE 1=1", []
    if experiment is not None:
        q += " AND experiment = ?"
        args.append(experiment)
    if projects is not None:
        q += f" AND project IN ({','.join('?' * len(projects))})"
        args.extend(projects)
    q += " ORDER BY id DESC LIMIT ?"
    args.append(limit)
    return [dict(r) for r in db.execute(q, args)]
