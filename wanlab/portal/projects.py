"""Users, projects and members, and who may touch which experiment (Emulab's model).

A project has members, each a ``leader`` or a ``member``. An experiment created through the
portal belongs to one project (``portal_experiments``); every member of that project sees
and drives it, and nobody else does. A user with the administrator flag (made by root with
``wanlab portal user add --admin``) sees every experiment, including those root made with
the CLI, which belong to no project. Only an administrator or a project's leader adds
members to a project.
"""

from __future__ import annotations

import re
import sqlite3
import time
from typing import Any

from wanlab.errors import WanlabError
from wanlab.portal.auth import AuthError, User, hash_password, revoke_all
from wanlab.portal.tables import ROLES

_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


def check_name(kind: str, name: str) -> str:
    if not _NAME.match(name or ""):
        raise WanlabError(f"bad {kind} name {name!r}: a lower-case letter, then lower-case "
                          f"letters, digits, '_' or '-' (at most 32)")
    return name


def add_user(db: sqlite3.Connection, name: str, password: str, admin: bool = False) -> int:
    check_name("user", name)
    if len(password) < 8:
        raise WanlabError("a password has at least 8 characters")
    try:
        return db.execute("INSERT INTO portal_users(name, pw_hash, admin, created)"
                          " VALUES (?,?,?,?)", (name, hash_password(password), int(admin),
                                                time.time())).lastrowid
    except sqlite3.IntegrityError:
        raise WanlabError(f"a user named {name!r} exists") from None


def set_password(db: sqlite3.Connection, name: str, password: str) -> None:
    if len(password) < 8:
        raise WanlabError("a password has at least 8 characters")
    uid = user_id(db, name)
    db.execute("UPDATE portal_users SET pw_hash = ? WHERE id = ?", (hash_password(password), uid))
    revoke_all(db, uid)           # whoever knew the old one is out: sessions and tokens


def remove_user(db: sqlite3.Connection, name: str) -> None:
    """Remove a user: their sessions, tokens and memberships go with them. Refused while
    they own a live experiment (terminate it, or its project's members keep using it)."""
    uid = user_id(db, name)
    owned = sorted(n for n, o in owners(db).items() if o["owner"] == name)
    if owned:
        raise WanlabError(f"user {name!r} owns experiment(s) {', '.join(owned)}: terminate "
                          f"them first (their projects' members can still drive them)")
    revoke_all(db, uid)
    db.execute("DELETE FROM portal_experiments WHERE owner_id = ?", (uid,))   # stale claims
    db.execute("DELETE FROM portal_users WHERE id = ?", (uid,))


def user_id(db: sqlite3.Connection, name: str) -> int:
    row = db.execute("SELECT id FROM portal_users WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise WanlabError(f"no user named {name!r}")
    return row[0]


def add_project(db: sqlite3.Connection, name: str, description: str = "") -> int:
    check_name("project", name)
    try:
        return db.execute("INSERT INTO portal_projects(name, description, created)"
                          " VALUES (?,?,?)", (name, description, time.time())).lastrowid
    except sqlite3.IntegrityError:
        raise WanlabError(f"a project named {name!r} exists") from None


def remove_project(db: sqlite3.Connection, name: str) -> None:
    """Remove a project and its memberships; refused while it has a live experiment."""
    pid = project_id(db, name)
    owned = sorted(n for n, o in owners(db).items() if o["project"] == name)
    if owned:
        raise WanlabError(f"project {name!r} has experiment(s) {', '.join(owned)}: "
                          f"terminate them first")
    db.execute("DELETE FROM portal_experiments WHERE project_id = ?", (pid,))  # stale claims
    db.execute("DELETE FROM portal_projects WHERE id = ?", (pid,))


def project_id(db: sqlite3.Connection, name: str) -> int:
    row = db.execute("SELECT id FROM portal_projects WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise WanlabError(f"no project named {name!r}")
    return row[0]


def add_member(db: sqlite3.Connection, project: str, user: str, role: str = "member") -> None:
    if role not in ROLES:
        raise WanlabError(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
    db.execute("INSERT INTO portal_members(project_id, user_id, role) VALUES (?,?,?) "
               "ON CONFLICT(project_id, user_id) DO UPDATE SET role = excluded.role",
               (project_id(db, project), user_id(db, user), role))


def remove_member(db: sqlite3.Connection, project: str, user: str) -> None:
    db.execute("DELETE FROM portal_members WHERE project_id = ? AND user_id = ?",
               (project_id(db, project), user_id(db, user)))


def memberships(db: sqlite3.Connection, user: User) -> dict[str, str]:
    """``{project: role}`` of ``user``."""
    return {r[0]: r[1] for r in db.execute(
        "SELECT p.name, m.role FROM portal_members m JOIN portal_projects p"
        " ON p.id = m.project_id WHERE m.user_id = ? ORDER BY p.name", (user.id,))}


def projects(db: sqlite3.Connection) -> list[dict[str, Any]]:
    out = []
    for p in db.execute("SELECT * FROM portal_projects ORDER BY name").fetchall():
        members = {r[0]: r[1] for r in db.execute(
            "SELECT u.name, m.role FROM portal_members m JOIN portal_users u"
            " ON u.id = m.user_id WHERE m.project_id = ? ORDER BY u.name", (p["id"],))}
        out.append({"name": p["name"], "description": p["description"], "members": members})
    return out


def users(db: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every user: name, administrator flag, ``{project: role}``."""
    return [{"name": r["name"], "admin": bool(r["admin"]),
             "projects": memberships(db, User(r["id"], r["name"], bool(r["admin"])))}
            for r in db.execute("SELECT * FROM portal_users ORDER BY name").fetchall()]


def may_add_members(db: sqlite3.Connection, user: User, project: str) -> None:
    if not user.admin and memberships(db, user).get(project) != "leader":
        raise AuthError(403, f"only an administrator or a leader of {project!r} adds members")


# -- experiments ----------------------------------------------------------------
_CLAIMS = """SELECT e.name, p.name AS project, u.name AS owner, e.created AS claimed,
                     e.exp_created, x.created AS exp_now
              FROM portal_experiments e
              JOIN portal_projects p ON p.id = e.project_id
              JOIN portal_users u ON u.id = e.owner_id
              LEFT JOIN experiments x ON x.name = e.name"""


def _live_claims(db: sqlite3.Connection, where: str = "", args: tuple = ()
                 ) -> dict[str, dict[str, str]]:
    """Claims whose experiment is the one they were made for: an unbound claim binds to
    the first experiment of its name stored after it; a bound one whose experiment is gone
    or was replaced is stale and is dropped."""
    out = {}
    for r in db.execute(_CLAIMS + where, args).fetchall():
        if r["exp_now"] is None or (r["exp_created"] is not None
                                    and r["exp_created"] != r["exp_now"]):
            if r["exp_created"] is not None:          # its experiment's life is over
                db.execute("DELETE FROM portal_experiments WHERE name = ? AND exp_created = ?",
                           (r[0], r["exp_created"]))
            continue
        if r["exp_created"] is None:
            if r["exp_now"] < r["claimed"] - 1.0:     # an older experiment of that name
                continue
            db.execute("UPDATE portal_experiments SET exp_created = ? WHERE name = ?",
                       (r["exp_now"], r[0]))
        out[r[0]] = {"project": r["project"], "owner": r["owner"]}
    return out


def owner(db: sqlite3.Connection, exp_name: str) -> dict[str, str] | None:
    """``{"project": ..., "owner": ...}`` of a portal experiment, None for root's own."""
    return _live_claims(db, " WHERE e.name = ?", (exp_name,)).get(exp_name)


def owners(db: sqlite3.Connection) -> dict[str, dict[str, str]]:
    return _live_claims(db)


def may_create_in(db: sqlite3.Connection, user: User, project: str) -> int:
    pid = project_id(db, project)
    if not user.admin and project not in memberships(db, user):
        raise AuthError(403, f"you are not a member of project {project!r}")
    return pid


PENDING_S = 300.0    # a claim whose create has not stored its experiment within this is stale


def claim(db: sqlite3.Connection, exp_name: str, project_id_: int, user: User) -> float:
    """Claim ``exp_name`` for a project just before creating it (the claim binds to that
    experiment when first read); returns the claim's stamp for :func:`release`.

    One transaction checks and writes, so of two creates of one name at once exactly one
    claims it; the other is refused here, before it creates anything. Refused too: a name
    the store has, or one a create in flight has claimed (for :data:`PENDING_S`)."""
    now = time.time()
    db.execute("BEGIN IMMEDIATE")
    try:
        _live_claims(db, " WHERE e.name = ?", (exp_name,))       # drops a stale claim
        held = db.execute("SELECT created, exp_created FROM portal_experiments"
                          " WHERE name = ?", (exp_name,)).fetchone()
        stored = db.execute("SELECT 1 FROM experiments WHERE name = ?",
                            (exp_name,)).fetchone()
        if stored is not None or (held is not None and held["exp_created"] is None
                                  and held["created"] > now - PENDING_S):
            raise WanlabError(f"an experiment named {exp_name!r} already exists or is being "
                              f"created")
        db.execute("INSERT OR REPLACE INTO portal_experiments(name, project_id, owner_id,"
                   " created, exp_created) VALUES (?,?,?,?,NULL)",
                   (exp_name, project_id_, user.id, now))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return now


def release(db: sqlite3.Connection, exp_name: str, stamp: float | None = None) -> None:
    """Drop the claim of ``exp_name``: any (``stamp`` None: its experiment was terminated),
    or only the one :func:`claim` returned ``stamp`` for (a create that failed)."""
    if stamp is None:
        db.execute("DELETE FROM portal_experiments WHERE name = ?", (exp_name,))
    else:
        db.execute("DELETE FROM portal_experiments WHERE name = ? AND created = ?",
                   (exp_name, stamp))


def may_drive(db: sqlite3.Connection, user: User, exp_name: str) -> dict[str, str] | None:
    """Allow ``user`` to see and drive experiment ``exp_name``, else AuthError 403; returns
    its owner record (None for root's own)."""
    own = owner(db, exp_name)
    if user.admin:
        return own
    if own is None or own["project"] not in memberships(db, user):
        raise AuthError(403, f"experiment {exp_name!r} belongs to a project you are not in")
    return own
