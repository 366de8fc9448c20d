"""The portal's tables, kept in the store's SQLite file beside the experiments.

Tables: ``portal_users`` (name, scrypt hash, administrator flag), ``portal_projects``,
``portal_members`` (user, project, role ``leader``/``member``), ``portal_tokens`` (API
tokens, stored as SHA-256 of the secret), ``portal_sessions`` (cookie sessions with their
CSRF secret and expiry, stored hashed too), ``portal_experiments`` (which project and user
own an experiment, by name, bound to the store's record of it by its creation time) and
``portal_audit`` (who did what, when), ``portal_interfaces`` (the host interfaces root lets
portal experiments use) and ``portal_login_failures`` (failed logins, for the backoff).

They are the portal's own: the store's numbered migrations (``PRAGMA user_version``) do not
know them, so an existing store works as it was, and a store the portal never opened has no
portal tables. Their version is ``portal_meta.version``; each step below runs once, in a
write transaction.
"""

from __future__ import annotations

import sqlite3

ROLES = ("leader", "member")

MIGRATIONS: list[str] = [
    # 1: users, projects, members, tokens, sessions, ownership, audit
    """
    CREATE TABLE portal_users (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        pw_hash TEXT NOT NULL,
        admin INTEGER NOT NULL DEFAULT 0,
        created REAL NOT NULL
    );
    CREATE TABLE portal_projects (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        description TEXT NOT NULL DEFAULT '',
        created REAL NOT NULL
    );
    CREATE TABLE portal_members (
        project_id INTEGER NOT NULL REFERENCES portal_projects(id) ON DELETE CASCADE,
        user_id INTEGER NOT NULL REFERENCES portal_users(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('leader', 'member')),
        PRIMARY KEY (project_id, user_id)
    );
    CREATE TABLE portal_tokens (
        id INTEGER PRIMARY KEY,
        user_id INTEGER NOT NULL REFERENCES portal_users(id) ON DELETE CASCADE,
        digest TEXT NOT NULL UNIQUE,
        label TEXT NOT NULL DEFAULT '',
        created REAL NOT NULL,
        expires REAL
    );
    CREATE TABLE portal_sessions (
        digest TEXT PRIMARY KEY,
        user_id INTEGER NOT NULL REFERENCES portal_users(id) ON DELETE CASCADE,
        csrf TEXT NOT NULL,
        created REAL NOT NULL,
        expires REAL NOT NULL
    );
    CREATE TABLE portal_experiments (
        name TEXT PRIMARY KEY,
        project_id INTEGER NOT NULL REFERENCES portal_projects(id),
        owner_id INTEGER NOT NULL REFERENCES portal_users(id),
        created REAL NOT NULL
    );
    CREATE TABLE portal_audit (
        id INTEGER PRIMARY KEY,
        at REAL NOT NULL,
        user TEXT NOT NULL,
        project TEXT,
        experiment TEXT,
        action TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX portal_audit_exp ON portal_audit(experiment, id)
    """,
    # 2: a claim is bound to one life of its experiment (the store's creation time), so a
    # later experiment of the same name (say, made by root after a CLI terminate) is not
    # taken for the project's
    """
    ALTER TABLE portal_experiments ADD COLUMN exp_created REAL
    """,
    # 3: the host interfaces root lets portal experiments use, failed logins (per user name
    # and per address) for the login backoff; tokens made to live for ever get 30 days
    """
    CREATE TABLE portal_interfaces (
        name TEXT PRIMARY KEY,
        added REAL NOT NULL
    );
    CREATE TABLE portal_login_failures (
        key TEXT PRIMARY KEY,
        failures INTEGER NOT NULL,
        last REAL NOT NULL
    );
    UPDATE portal_tokens SET expires = CAST(strftime('%s', 'now') AS REAL) + 2592000
        WHERE expires IS NULL
    """,
]


def migrate(db: sqlite3.Connection) -> None:
    """Bring the portal's tables up to date (safe from several processes at once)."""
    db.execute("CREATE TABLE IF NOT EXISTS portal_meta (version INTEGER NOT NULL)")
    if db.execute("SELECT count(*) FROM portal_meta").fetchone()[0] == 0:
        db.execute("INSERT INTO portal_meta(version) SELECT 0 WHERE NOT EXISTS "
                   "(SELECT 1 FROM portal_meta)")
    (version,) = db.execute("SELECT version FROM portal_meta").fetchone()
    for n, script in enumerate(MIGRATIONS[version:], start=version + 1):
        db.execute("BEGIN IMMEDIATE")
        try:
            (now,) = db.execute("SELECT version FROM portal_meta").fetchone()
            if now < n:          # another process may have migrated meanwhile
                for stmt in script.split(";"):
                    if stmt.strip():
                        db.execute(stmt)
                db.execute("UPDATE portal_meta SET version = ?", (n,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
