"""Passwords, sessions, API tokens and CSRF.

* Passwords are stored as ``scrypt$N$r$p$salt$hash`` (hashlib.scrypt, N = 2^14, r = 8,
  p = 1: tens of milliseconds a guess); compared in constant time.
* A login makes a **session**: a random secret in an HttpOnly, SameSite=Strict cookie, and a
  second random secret, the **CSRF token**, that the page sends back in the
  ``X-CSRF-Token`` header of every state-changing request (POST, PUT, PATCH, DELETE). A
  request that came with the cookie but without the matching header is refused (403).
  Sessions expire (default 8 hours) and logout ends one.
* **API tokens** are for scripts: ``Authorization: Bearer wl_...``. A script's request
  carries no cookie, so a forged cross-site request cannot carry a token: no CSRF check.
* The store keeps SHA-256 digests of session and token secrets, never the secrets.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sqlite3
import time
from dataclasses import dataclass

SESSION_COOKIE = "wanlab_session"
CSRF_HEADER = "x-csrf-token"
SESSION_TTL_S = 8 * 3600
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
_N, _R, _P = 2 ** 14, 8, 1


@dataclass(frozen=True)
class User:
    id: int
    name: str
    admin: bool


class AuthError(Exception):
    """Who is asking is unknown (401) or the request is not allowed for them (403)."""

    def __init__(self, status: int, message: str):
        self.status, self.message = status, message
        super().__init__(message)


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    h = hashlib.scrypt(password.encode(), salt=salt, n=_N, r=_R, p=_P, dklen=32)
    return f"scrypt${_N}${_R}${_P}${salt.hex()}${h.hex()}"


def check_password(password: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, h = stored.split("$")
        if kind != "scrypt":
            return False
        got = hashlib.scrypt(password.encode(), salt=bytes.fromhex(salt), n=int(n), r=int(r),
                             p=int(p), dklen=len(h) // 2)
    except ValueError:
        return False
    return hmac.compare_digest(got.hex(), h)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _user(row: sqlite3.Row | None) -> User | None:
    return None if row is None else User(row["id"], row["name"], bool(row["admin"]))


def login(db: sqlite3.Connection, name: str, password: str,
          ttl_s: float = SESSION_TTL_S) -> tuple[User, str, str]:
    """Check a password; returns (user, session secret, CSRF token)."""
    row = db.execute("SELECT * FROM portal_users WHERE name = ?", (name,)).fetchone()
    # hash even for an unknown name, so timing does not tell which names exist
    ok = check_password(password, row["pw_hash"] if row else hash_password("x"))
    if row is None or not ok:
        raise AuthError(401, "wrong user name or password")
    secret, csrf, now = "ws_" + secrets.token_urlsafe(32), secrets.token_urlsafe(24), time.time()
    db.execute("DELETE FROM portal_sessions WHERE expires < ?", (now,))
    db.execute("INSERT INTO portal_sessions(digest, user_id, csrf, created, expires)"
               " VALUES (?,?,?,?,?)", (_digest(secret), row["id"], csrf, now, now + ttl_s))
    return _user(row), secret, csrf


def logout(db: sqlite3.Connection, secret: str) -> None:
    db.execute("DELETE FROM portal_sessions WHERE digest = ?", (_digest(secret),))


def session(db: sqlite3.Connection, secret: str) -> tuple[User, str] | None:
    """The user and CSRF token of a live session, or None."""
    row = db.execute("SELECT u.*, s.csrf, s.expires FROM portal_sessions s JOIN portal_users u"
                     " ON u.id = s.user_id WHERE s.digest = ?", (_digest(secret),)).fetchone()
    if row is None or row["expires"] < time.time():
        return None
    return _user(row), row["csrf"]


def new_token(db: sqlite3.Connection, user_id: int, label: str = "",
              ttl_s: float | None = None) -> str:
    """A new API token for ``user_id`` (shown once; the store keeps its digest)."""
    secret, now = "wl_" + secrets.token_urlsafe(32), time.time()
    db.execute("INSERT INTO portal_tokens(user_id, digest, label, created, expires)"
               " VALUES (?,?,?,?,?)", (user_id, _digest(secret), label, now,
                                       None if ttl_s is None else now + ttl_s))
    return secret


def token_user(db: sqlite3.Connection, secret: str) -> User | None:
    row = db.execute("SELECT u.*, t.expires FROM portal_tokens t JOIN portal_users u"
                     " ON u.id = t.user_id WHERE t.digest = ?", (_digest(secret),)).fetchone()
    if row is None or (row["expires"] is not None and row["expires"] < time.time()):
        return None
    return _user(row)


def authenticate(db: sqlite3.Connection, method: str, authorization: str | None,
                 cookie: str | None, csrf_header: str | None) -> User:
    """Who makes this request: a bearer token, else a session cookie (with the CSRF header
    on state-changing methods). Raises AuthError 401/403."""
    if authorization:
        scheme, _, secret = authorization.partition(" ")
        user = token_user(db, secret.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise AuthError(401, "invalid or expired API token")
        return user
    if cookie:
        found = session(db, cookie)
        if found is None:
            raise AuthError(401, "session expired; log in again")
        user, csrf = found
        if method.upper() not in SAFE_METHODS and not (
                csrf_header and hmac.compare_digest(csrf_header, csrf)):
            raise AuthError(403, "missing or wrong CSRF token (X-CSRF-Token header)")
        return user
    raise AuthError(401, "not logged in: log in, or send 'Authorization: Bearer TOKEN'")
