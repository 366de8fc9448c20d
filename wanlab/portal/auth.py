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
* API tokens expire (default :data:`TOKEN_TTL_S`); ``wanlab portal token rm`` or
  ``DELETE /api/tokens/ID`` revokes one. A password change or the user's removal ends every
  session and token of the user.
* The store keeps SHA-256 digests of session and token secrets, never the secrets.
* **Logins back off**: after :data:`FREE_TRIES` failures for one user name, or from one
  address, each further try waits twice as long as the last (1 s, 2 s, 4 s, ... at most
  :data:`MAX_BACKOFF_S`) and is refused (429, ``Retry-After``) until then, even with the
  right password; failures are forgotten :data:`FORGET_S` after the last. An unknown name
  costs the same scrypt as a known one (a dummy hash is checked), and is counted the same,
  so neither time nor answers tell which names exist.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sqlite3
import time
from dataclasses import dataclass
from functools import cache

SESSION_COOKIE = "wanlab_session"
CSRF_HEADER = "x-csrf-token"
SESSION_TTL_S = 8 * 3600
TOKEN_TTL_S = 30 * 86400            # an API token's default life
MAX_TOKEN_TTL_S = 366 * 86400
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
FREE_TRIES = 5                      # failed logins before the backoff starts
MAX_BACKOFF_S = 900.0
FORGET_S = 3600.0                   # failures this long after the last are forgotten
_N, _R, _P = 2 ** 14, 8, 1


@dataclass(frozen=True)
class User:
    id: int
    name: str
    admin: bool


class AuthError(Exception):
    """Who is asking is unknown (401) or the request is not allowed for them (403)."""

    def __init__(self, status: int, message: str, retry_after: int | None = None):
        self.status, self.message, self.retry_after = status, message, retry_after
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


@cache
def _dummy_hash() -> str:
    """What an unknown user's password is checked against (same cost as a real one)."""
    return hash_password(secrets.token_urlsafe(16))


def _backoff(failures: int) -> float:
    """The wait after ``failures`` failed attempts: none for the first FREE_TRIES."""
    return 0.0 if failures < FREE_TRIES else min(2.0 ** (failures - FREE_TRIES),
                                                 MAX_BACKOFF_S)


def _login_keys(name: str, address: str | None) -> list[str]:
    return [f"user:{name[:64]}"] + ([f"addr:{address}"] if address else [])


def login_wait(db: sqlite3.Connection, name: str, address: str | None = None,
               now: float | None = None) -> float:
    """Seconds before another login for ``name`` from ``address`` is tried (0: now)."""
    now = time.time() if now is None else now
    wait = 0.0
    for key in _login_keys(name, address):
        row = db.execute("SELECT failures, last FROM portal_login_failures WHERE key = ?",
                         (key,)).fetchone()
        step = 0.0 if row is None or row["last"] <= now - FORGET_S else \
            _backoff(row["failures"])
        if step > 0:
            wait = max(wait, row["last"] + step - now)
    return wait


def _attempt(db: sqlite3.Connection, name: str, address: str | None) -> None:
    """Count a login attempt as failed before its password is checked (one transaction
    with the check of the backoff, so attempts at once cannot slip past it together);
    AuthError 429 while the backoff lasts."""
    db.execute("BEGIN IMMEDIATE")
    try:
        now = time.time()           # once the lock is ours: no other attempt is later
        wait = login_wait(db, name, address, now)
        if wait > 0:
            raise AuthError(429, f"too many failed logins; try again in {wait:.0f} s",
                            retry_after=int(wait + 0.999))
        db.execute("DELETE FROM portal_login_failures WHERE last < ?", (now - FORGET_S,))
        for key in _login_keys(name, address):
            db.execute("INSERT INTO portal_login_failures(key, failures, last) VALUES (?,1,?) "
                       "ON CONFLICT(key) DO UPDATE SET failures = failures + 1, "
                       "last = excluded.last", (key, now))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def login(db: sqlite3.Connection, name: str, password: str, ttl_s: float = SESSION_TTL_S,
          address: str | None = None) -> tuple[User, str, str]:
    """Check a password; returns (user, session secret, CSRF token). ``address``: the
    client's, for the backoff per address (AuthError 429 while it lasts)."""
    _attempt(db, name, address)
    row = db.execute("SELECT * FROM portal_users WHERE name = ?", (name,)).fetchone()
    # the same work for an unknown name, so timing does not tell which names exist
    ok = check_password(password, row["pw_hash"] if row else _dummy_hash())
    if row is None or not ok:
        raise AuthError(401, "wrong user name or password")
    # it was not a failure after all: the name's count goes, the address's goes back
    user_key, *addr_key = _login_keys(name, address)
    db.execute("DELETE FROM portal_login_failures WHERE key = ?", (user_key,))
    for key in addr_key:
        db.execute("UPDATE portal_login_failures SET failures = failures - 1 WHERE key = ?",
                   (key,))
    now = time.time()
    secret, csrf = "ws_" + secrets.token_urlsafe(32), secrets.token_urlsafe(24)
    db.execute("DELETE FROM portal_sessions WHERE expires < ?", (now,))
    db.execute("INSERT INTO portal_sessions(digest, user_id, csrf, created, expires)"
               " VALUES (?,?,?,?,?)", (_digest(secret), row["id"], csrf, now, now + ttl_s))
    return _user(row), secret, csrf


def revoke_all(db: sqlite3.Connection, user_id: int) -> None:
    """End every session and API token of a user (a new password, a removed user)."""
    db.execute("DELETE FROM portal_sessions WHERE user_id = ?", (user_id,))
    db.execute("DELETE FROM portal_tokens WHERE user_id = ?", (user_id,))


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
              ttl_s: float | None = TOKEN_TTL_S) -> str:
    """A new API token for ``user_id`` (shown once; the store keeps its digest); it expires
    after ``ttl_s`` (at most :data:`MAX_TOKEN_TTL_S`)."""
    ttl_s = TOKEN_TTL_S if ttl_s is None else ttl_s
    if not 0 < ttl_s <= MAX_TOKEN_TTL_S:
        raise AuthError(400, f"a token lives more than 0 and at most "
                             f"{MAX_TOKEN_TTL_S / 86400:g} days")
    secret, now = "wl_" + secrets.token_urlsafe(32), time.time()
    db.execute("INSERT INTO portal_tokens(user_id, digest, label, created, expires)"
               " VALUES (?,?,?,?,?)", (user_id, _digest(secret), label, now, now + ttl_s))
    return secret


def tokens(db: sqlite3.Connection, user_id: int | None = None) -> list[dict]:
    """API tokens (never their secrets): id, user, label, created, expires."""
    where, args = ("WHERE t.user_id = ?", (user_id,)) if user_id is not None else ("", ())
    return [dict(r) for r in db.execute(
        "SELECT t.id, u.name AS user, t.label, t.created, t.expires FROM portal_tokens t "
        f"JOIN portal_users u ON u.id = t.user_id {where} ORDER BY t.id", args)]


def revoke_token(db: sqlite3.Connection, token_id: int, user_id: int | None = None) -> None:
    """Revoke one token (``user_id``: only if it is that user's)."""
    sql, args = "DELETE FROM portal_tokens WHERE id = ?", (token_id,)
    if user_id is not None:
        sql, args = sql + " AND user_id = ?", (token_id, user_id)
    if db.execute(sql, args).rowcount == 0:
        raise AuthError(404, f"no token {token_id}")


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
