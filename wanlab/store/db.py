"""The embedded store: one SQLite file holding every experiment's hard state.

Tables: ``experiments`` (name, short id, state, IR as JSON, seed),
``transitions`` (every state change, with the reason), ``resources`` (every
namespace, TAP, process and file an experiment creates: recorded *before* it
is created, marked removed after), ``event_log`` (every fired event of each run, with
its lateness and outcome) and ``flows`` (traffic agents' results). The timeline itself
is part of the IR. The facility's tables (``templates``, ``runs``, ``batches``,
``batch_log``) are read and written by :mod:`wanlab.store.facility`.
Schema changes are numbered migrations applied in order, tracked by
``PRAGMA user_version``.

The path is ``$WANLAB_HOME/wanlab.db`` (default ``/var/lib/wanlab``). The
state folder is private to its owner (root): the folder 0700, the database
0600 (docs/security.md). Every path built from an experiment's name comes from
:meth:`Store.folder` / :meth:`Store.inside`, which check the name and that the
result stays inside the state folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from wanlab.errors import WanlabError
from wanlab.model.gc_pause import gc_paused
from wanlab.model.ir import IR_VERSION, Experiment
from wanlab.model.names import check_experiment_name
from wanlab.store import host

MIGRATIONS: list[str] = [
    # 1: the initial schema
    """
    CREATE TABLE experiments (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        short TEXT NOT NULL UNIQUE,
        state TEXT NOT NULL,
        ir TEXT NOT NULL,
        source_path TEXT,
        seed INTEGER NOT NULL,
        error TEXT,
        created REAL NOT NULL,
        updated REAL NOT NULL
    );
    CREATE TABLE transitions (
        id INTEGER PRIMARY KEY,
        exp_id INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
        at REAL NOT NULL,
        from_state TEXT,
        to_state TEXT NOT NULL,
        reason TEXT
    );
    CREATE TABLE resources (
        id INTEGER PRIMARY KEY,
        exp_id INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '{}',
        state TEXT NOT NULL,
        created REAL NOT NULL
    );
    CREATE INDEX resources_exp ON resources(exp_id, state);
    CREATE TABLE events (
        id INTEGER PRIMARY KEY,
        exp_id INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
        time_s REAL NOT NULL,
        target TEXT NOT NULL,
        action TEXT NOT NULL,
        args TEXT NOT NULL
    );
    """,
    # 2: the event log (every fired event with its lateness and outcome) and flow results
    """
    CREATE TABLE event_log (
        id INTEGER PRIMARY KEY,
        exp_id INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
        t0 REAL NOT NULL,
        origin TEXT NOT NULL,
        scheduled_s REAL NOT NULL,
        fired_s REAL,
        lateness_s REAL,
        target TEXT NOT NULL,
        action TEXT NOT NULL,
        args TEXT NOT NULL,
        outcome TEXT NOT NULL,
        detail TEXT
    );
    CREATE INDEX event_log_exp ON event_log(exp_id, t0);
    CREATE TABLE flows (
        id INTEGER PRIMARY KEY,
        exp_id INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
        t0 REAL NOT NULL,
        agent TEXT NOT NULL,
        kind TEXT NOT NULL,
        started_s REAL NOT NULL,
        stopped_s REAL,
        result TEXT NOT NULL
    );
    """,
    # 3: the timeline lives in the IR (experiments.ir); its copy in ``events`` was never read
    """
    DROP TABLE events
    """,
    # 4: the facility (wanlab/store/facility.py): versioned templates, the record of every
    # run of a template (sweeps), the batch queue. Not tied to experiments' rows: a run
    # or a batch outlives the experiment it created.
    """
    CREATE TABLE templates (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        version INTEGER NOT NULL,
        path TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        source TEXT NOT NULL,
        parameters TEXT NOT NULL,
        created REAL NOT NULL,
        UNIQUE(name, version),
        UNIQUE(name, sha256)
    );
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        template_id INTEGER NOT NULL REFERENCES templates(id),
        sweep TEXT NOT NULL,
        mode TEXT NOT NULL,
        repeat INTEGER NOT NULL,
        parameters TEXT NOT NULL,
        seed INTEGER NOT NULL,
        engine TEXT NOT NULL,
        kernel TEXT NOT NULL,
        state TEXT NOT NULL,
        folder TEXT,
        result TEXT,
        error TEXT,
        started REAL NOT NULL,
        ended REAL
    );
    CREATE TABLE batches (
        id INTEGER PRIMARY KEY,
        user TEXT NOT NULL,
        name TEXT NOT NULL,
        path TEXT NOT NULL,
        ir TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        worker TEXT,
        folder TEXT,
        error TEXT,
        submitted REAL NOT NULL,
        started REAL,
        ended REAL
    );
    CREATE TABLE batch_log (
        id INTEGER PRIMARY KEY,
        batch_id INTEGER NOT NULL REFERENCES batches(id) ON DELETE CASCADE,
        at REAL NOT NULL,
        from_state TEXT,
        to_state TEXT NOT NULL,
        reason TEXT
    );
    """,
    # 5: the cluster (wanlab/store/cluster.py): what ``wanlab cluster up`` made (machines'
    # namespaces, the bridge, Ray's processes) and where each cluster experiment's parts
    # run, recorded before they are made, as experiments' resources are
    """
    CREATE TABLE cluster (
        id INTEGER PRIMARY KEY,
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        detail TEXT NOT NULL,
        state TEXT NOT NULL,
        created REAL NOT NULL
    );
    """,
]


def default_home() -> str:
    return os.environ.get("WANLAB_HOME", "/var/lib/wanlab")


def make_private_dir(path: str) -> None:
    """Create ``path`` (and parents) readable only by its owner; tighten it if it exists."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    if st.st_uid == os.geteuid() and st.st_mode & 0o077:
        os.chmod(path, 0o700)


@dataclass(frozen=True)
class ExperimentRow:
    id: int
    name: str
    short: str
    state: str
    ir: Experiment
    source_path: str | None
    seed: int
    error: str | None
    created: float
    updated: float


@dataclass(frozen=True)
class Resource:
    id: int
    exp_id: int
    kind: str
    name: str
    detail: dict[str, Any]
    state: str


class Store:
    """A connection to the store; cheap to open, safe to use from several processes."""

    def __init__(self, home: str | None = None, shared: bool = False, create: bool = True):
        """``shared``: the connection may be used from several threads (callers serialise).
        ``create``: make the state folder if it does not exist (else that is an error, so a
        mistyped ``--home`` is not silently a new, empty store)."""
        self.home = os.path.abspath(home or default_home())
        if not create and not os.path.isdir(self.home):
            raise WanlabError(f"no wanlab state folder at {self.home} (nothing was ever created "
                              f"there; check --home or WANLAB_HOME)")
        make_private_dir(self.home)
        self.path = os.path.join(self.home, "wanlab.db")
        # SQLite gives its -wal and -shm files the database file's mode: create it 0600
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        if os.stat(self.path).st_mode & 0o077:
            os.chmod(self.path, 0o600)
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None,
                                  check_same_thread=not shared)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        self._migrate()
        # the last IR read or written, as stored text and as parsed (frozen) experiment:
        # one swap-in reads its experiment's row several times, and reading 100 000
        # simulated nodes back takes tens of seconds
        self._ir_cache: tuple[str, Experiment] | None = None

    def _ir_text(self, exp: Experiment) -> str:
        text = json.dumps(exp.to_json())
        self._ir_cache = (text, exp)
        return text

    def _parsed(self, text: str) -> Experiment:
        if self._ir_cache is None or self._ir_cache[0] != text:
            self._ir_cache = (text, _ir(_loads(text)))
        return self._ir_cache[1]

    def close(self) -> None:
        self.db.close()

    def _migrate(self) -> None:
        (version,) = self.db.execute("PRAGMA user_version").fetchone()
        for n, script in enumerate(MIGRATIONS[version:], start=version + 1):
            self.db.execute("BEGIN IMMEDIATE")
            try:
                (now,) = self.db.execute("PRAGMA user_version").fetchone()
                if now < n:    # another process may have migrated meanwhile
                    for stmt in script.split(";"):
                        if stmt.strip():
                            self.db.execute(stmt)
                    self.db.execute(f"PRAGMA user_version = {n}")
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    # -- paths ----------------------------------------------------------------
    def inside(self, *parts: str) -> str:
        """``home/parts...``, refusing any result outside the state folder."""
        path = os.path.normpath(os.path.join(self.home, *parts))
        if os.path.commonpath([self.home, path]) != self.home or path == self.home:
            raise WanlabError(f"refusing a path outside the state folder: {path}")
        return path

    def folder(self, name: str, *parts: str) -> str:
        """Experiment ``name``'s folder (or ``parts`` inside it); the name is checked first."""
        base = self.inside("exps", check_experiment_name(name))
        path = os.path.normpath(os.path.join(base, *parts))
        if os.path.commonpath([base, path]) != base:
            raise WanlabError(f"refusing a path outside {base}: {path}")
        return path

    def lock_path(self, name: str) -> str:
        return self.inside("locks", check_experiment_name(name) + ".lock")

    @contextlib.contextmanager
    def _tx(self) -> Iterator[None]:
        """One write transaction; rolled back on any exception, Ctrl-C included, so the
        connection is never left inside a transaction."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    @property
    def schema_version(self) -> int:
        return self.db.execute("PRAGMA user_version").fetchone()[0]

    # -- experiments ----------------------------------------------------------
    def add_experiment(self, exp: Experiment, source_path: str | None) -> ExperimentRow:
        check_experiment_name(exp.name)
        now = time.time()
        with self._tx():       # all of it or nothing (a Ctrl-C leaves no half record)
            for _ in range(20):
                short = secrets.token_hex(2)
                try:
                    cur = self.db.execute(
                        "INSERT INTO experiments(name, short, state, ir, source_path, seed,"
                        " created, updated) VALUES (?,?,?,?,?,?,?,?)",
                        (exp.name, short, "new", self._ir_text(exp), source_path,
                         exp.seed, now, now))
                    break
                except sqlite3.IntegrityError as e:
                    if "experiments.name" in str(e):
                        raise WanlabError(f"an experiment named {exp.name!r} already "
                                          f"exists (choose another with --name, or "
                                          f"terminate it)") from None
            else:
                raise WanlabError("could not allocate a short id for the experiment")
            exp_id = cur.lastrowid
            self._claim_short(exp_id, short)
            self.db.execute("INSERT INTO transitions(exp_id, at, from_state, to_state, reason)"
                            " VALUES (?,?,?,?,?)", (exp_id, now, None, "new", "created"))
        return self.get(exp.name)

    def _row(self, r: sqlite3.Row) -> ExperimentRow:
        return ExperimentRow(id=r["id"], name=r["name"], short=r["short"], state=r["state"],
                             ir=self._parsed(r["ir"]),
                             source_path=r["source_path"], seed=r["seed"], error=r["error"],
                             created=r["created"], updated=r["updated"])

    def get(self, name: str) -> ExperimentRow:
        check_experiment_name(name)
        r = self.db.execute("SELECT * FROM experiments WHERE name = ?", (name,)).fetchone()
        if r is None:
            raise WanlabError(f"no experiment named {name!r} (see 'wanlab list')")
        return self._row(r)

    def find(self, name: str) -> ExperimentRow | None:
        r = self.db.execute("SELECT * FROM experiments WHERE name = ?", (name,)).fetchone()
        return self._row(r) if r else None

    def list(self) -> list[ExperimentRow]:
        return [self._row(r) for r in self.db.execute("SELECT * FROM experiments ORDER BY id")]

    def set_state(self, exp_id: int, state: str, reason: str = "",
                  error: str | None = None) -> None:
        now = time.time()
        with self._tx():
            (old,) = self.db.execute("SELECT state FROM experiments WHERE id = ?",
                                     (exp_id,)).fetchone()
            self.db.execute("UPDATE experiments SET state = ?, updated = ?, error = ? "
                            "WHERE id = ?", (state, now, error, exp_id))
            self.db.execute("INSERT INTO transitions(exp_id, at, from_state, to_state, reason)"
                            " VALUES (?,?,?,?,?)", (exp_id, now, old, state, reason))

    def set_ir(self, exp_id: int, exp: Experiment) -> None:
        with self._tx():
            self.db.execute("UPDATE experiments SET ir = ?, updated = ? WHERE id = ?",
                            (self._ir_text(exp), time.time(), exp_id))

    def transitions(self, exp_id: int) -> list[tuple[float, str | None, str, str]]:
        return [(r["at"], r["from_state"], r["to_state"], r["reason"]) for r in
                self.db.execute("SELECT * FROM transitions WHERE exp_id = ? ORDER BY id",
                                (exp_id,))]

    def delete_experiment(self, exp_id: int) -> None:
        self.db.execute("DELETE FROM experiments WHERE id = ?", (exp_id,))
        host.release(self.home, exp_id)

    def _claim_short(self, exp_id: int, first: str) -> None:
        """Make the new experiment's short id unique on the host, not only in this store: it
        names namespaces and devices every store shares (:mod:`wanlab.store.host`). Keeps
        ``first`` if no other store holds it; a short a namespace of the host already
        carries (an experiment from before the host's claims) is never taken."""
        mine = {r[0] for r in self.db.execute("SELECT short FROM experiments WHERE id != ?",
                                              (exp_id,))}
        try:
            live = {n.split("-")[1] for n in os.listdir("/run/netns") if n.startswith("wl-")
                    and n.count("-") >= 2}
        except OSError:
            live = set()
        candidates = [first, *(secrets.token_hex(2) for _ in range(200))]
        got = host.claim("short", candidates, self.home, exp_id,
                         usable=lambda k: k not in mine and k not in live)
        if got is None:
            raise WanlabError("could not allocate a short id for the experiment (every one "
                              "tried is held by another experiment on this host)")
        if got != first:
            self.db.execute("UPDATE experiments SET short = ? WHERE id = ?", (got, exp_id))

    # -- resources ------------------------------------------------------------
    def record(self, exp_id: int, kind: str, name: str, **detail: Any) -> int:
        """Record a resource *before* creating it (state 'planned')."""
        cur = self.db.execute(
            "INSERT INTO resources(exp_id, kind, name, detail, state, created)"
            " VALUES (?,?,?,?,?,?)", (exp_id, kind, name, json.dumps(detail), "planned",
                                      time.time()))
        return cur.lastrowid

    def record_many(self, exp_id: int, items: list[tuple[str, str, dict[str, Any]]]) -> None:
        now = time.time()
        with self._tx():
            self.db.executemany(
                "INSERT INTO resources(exp_id, kind, name, detail, state, created)"
                " VALUES (?,?,?,?,?,?)",
                [(exp_id, k, n, json.dumps(d), "planned", now) for k, n, d in items])

    def update_resource(self, res_id: int, state: str | None = None, **detail: Any) -> None:
        if detail:
            (old,) = self.db.execute("SELECT detail FROM resources WHERE id = ?",
                                     (res_id,)).fetchone()
            merged = {**json.loads(old), **detail}
            self.db.execute("UPDATE resources SET detail = ? WHERE id = ?",
                            (json.dumps(merged), res_id))
        if state:
            self.db.execute("UPDATE resources SET state = ? WHERE id = ?", (state, res_id))

    def update_resources(self, state: str, details: dict[int, dict[str, Any]]) -> None:
        """Set many resources' state, merging details, in one transaction."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            for rid, detail in details.items():
                if detail:
                    (old,) = self.db.execute("SELECT detail FROM resources WHERE id = ?",
                                             (rid,)).fetchone()
                    self.db.execute("UPDATE resources SET detail = ?, state = ? WHERE id = ?",
                                    (json.dumps({**json.loads(old), **detail}), state, rid))
                else:
                    self.db.execute("UPDATE resources SET state = ? WHERE id = ?", (state, rid))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def resources(self, exp_id: int, live_only: bool = True) -> list[Resource]:
        q = "SELECT * FROM resources WHERE exp_id = ?"
        if live_only:
            q += " AND state != 'removed'"
        return [Resource(r["id"], r["exp_id"], r["kind"], r["name"], json.loads(r["detail"]),
                         r["state"]) for r in self.db.execute(q + " ORDER BY id", (exp_id,))]

    # -- event log and flows ----------------------------------------------------
    def log_event(self, exp_id: int, t0: float, origin: str, scheduled_s: float,
                  fired_s: float | None, target: str, action: str, args: list[str],
                  outcome: str, detail: str | None = None) -> int:
        lateness = None if fired_s is None else fired_s - scheduled_s
        cur = self.db.execute(
            "INSERT INTO event_log(exp_id, t0, origin, scheduled_s, fired_s, lateness_s, target,"
            " action, args, outcome, detail) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (exp_id, t0, origin, scheduled_s, fired_s, lateness, target, action,
             json.dumps(args), outcome, detail))
        return cur.lastrowid

    def event_log(self, exp_id: int, t0: float | None = None) -> list[dict[str, Any]]:
        """The log of the run starting at ``t0`` (default: the latest run)."""
        if t0 is None:
            r = self.db.execute("SELECT max(t0) FROM event_log WHERE exp_id = ?",
                                (exp_id,)).fetchone()
            t0 = r[0]
        rows = self.db.execute("SELECT * FROM event_log WHERE exp_id = ? AND t0 = ? ORDER BY"
                               " id", (exp_id, t0))
        return [{**dict(r), "args": json.loads(r["args"])} for r in rows]

    def add_flow(self, exp_id: int, t0: float, agent: str, kind: str, started_s: float,
                 stopped_s: float | None, result: dict[str, Any]) -> None:
        self.db.execute("INSERT INTO flows(exp_id, t0, agent, kind, started_s, stopped_s, result)"
                        " VALUES (?,?,?,?,?,?,?)", (exp_id, t0, agent, kind, started_s,
                                                    stopped_s, json.dumps(result)))

    def flows(self, exp_id: int, t0: float | None = None) -> list[dict[str, Any]]:
        q = "SELECT * FROM flows WHERE exp_id = ?"
        args: tuple = (exp_id,)
        if t0 is not None:
            q += " AND t0 = ?"
            args = (exp_id, t0)
        return [{**dict(r), "result": json.loads(r["result"])}
                for r in self.db.execute(q + " ORDER BY id", args)]

    def mark_removed(self, res_ids: list[int]) -> None:
        with self._tx():
            self.db.executemany("UPDATE resources SET state = 'removed' WHERE id = ?",
                                [(i,) for i in res_ids])


@gc_paused
def _loads(text: str) -> Any:
    return json.loads(text)


def _ir(d: dict[str, Any]) -> Experiment:
    """A stored IR; one stored by an older wanlab is upgraded as it is read."""
    if d.get("version", 1) != IR_VERSION:
        from wanlab.frontends.normalize import upgrade
        d = upgrade(d)
    return Experiment.from_json(d)
