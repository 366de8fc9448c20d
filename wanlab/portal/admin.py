"""Root's side of the portal: ``wanlab serve`` and the administrator's commands.

``wanlab serve [--listen ADDR:PORT] [--allow-remote]`` listens on 127.0.0.1:8480 by
default and says where; an address that is not a loopback one is refused unless
``--allow-remote`` says so (then use a TLS proxy in front: the session cookie is only as
safe as the connection).

``wanlab portal ...`` (root only, like every wanlab command; the local root CLI stays the
administrator)::

    wanlab portal user add NAME [--admin]        # password from stdin (or asked for)
    wanlab portal user passwd NAME               # ends the user's sessions and tokens
    wanlab portal user rm NAME                   # so does removing the user
    wanlab portal project add NAME [--description TEXT]
    wanlab portal project rm NAME
    wanlab portal member add PROJECT USER [--role leader|member]
    wanlab portal member remove PROJECT USER
    wanlab portal token [add] USER [--label TEXT] [--days N]   # prints a new API token
    wanlab portal token list [USER]
    wanlab portal token rm ID
    wanlab portal allow-interface IFNAME         # lend a host interface to portal uploads
    wanlab portal disallow-interface IFNAME
    wanlab portal interfaces                     # the interfaces lent
    wanlab portal list                           # users, projects, members (a table)
    wanlab portal audit [--experiment NAME] [--limit N]
"""

from __future__ import annotations

import argparse
import getpass
import ipaddress
import sys
import time

from wanlab.errors import WanlabError
from wanlab.portal import audit, auth, files, hostres, projects, tables
from wanlab.store.db import Store

DEFAULT_LISTEN = "127.0.0.1:8480"


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise WanlabError(f"--listen {listen!r}: expected ADDR:PORT, e.g. {DEFAULT_LISTEN}")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


def is_local(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(home: str | None, listen: str = DEFAULT_LISTEN, allow_remote: bool = False) -> int:
    host, port = parse_listen(listen)
    if not is_local(host) and not allow_remote:
        raise WanlabError(f"refusing to listen on {host}: not a loopback address; the portal "
                          f"is the door to root's experiments. Pass --allow-remote if you "
                          f"mean it (behind a TLS proxy)")
    import socket

    import uvicorn

    from wanlab.portal.app import make_app
    app = make_app(home)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise WanlabError(f"cannot listen on {listen}: {e.strerror or e}") from None
    sock.listen(128)
    where = f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"
    scope = "local connections only" if is_local(host) else "REMOTE connections allowed"
    print(f"wanlab portal listening on {where} ({scope}); API at {where}api/, schema at "
          f"{where}api/openapi.json", flush=True)
    config = uvicorn.Config(app, log_level="warning", ws="websockets-sansio", lifespan="off",
                            timeout_graceful_shutdown=3)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def _password(prompt: str) -> str:
    if sys.stdin.isatty():
        pw = getpass.getpass(prompt)
        if getpass.getpass("again: ") != pw:
            raise WanlabError("the passwords differ")
        return pw
    return sys.stdin.readline().rstrip("\n")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="wanlab portal", description="the portal's users, "
                                "projects, members, tokens and audit log (root only)")
    sub = p.add_subparsers(dest="what", required=True)
    u = sub.add_parser("user").add_subparsers(dest="op", required=True)
    sp = u.add_parser("add", help="add a user; the password is read from stdin")
    sp.add_argument("name")
    sp.add_argument("--admin", action="store_true", help="sees and drives every experiment")
    u.add_parser("passwd", help="set a user's password (from stdin); ends their sessions "
                 "and tokens").add_argument("name")
    u.add_parser("rm", help="remove a user, their sessions, tokens and memberships"
                 ).add_argument("name")
    pr = sub.add_parser("project").add_subparsers(dest="op", required=True)
    sp = pr.add_parser("add")
    sp.add_argument("name")
    sp.add_argument("--description", default="")
    pr.add_parser("rm", help="remove a project without experiments").add_argument("name")
    m = sub.add_parser("member").add_subparsers(dest="op", required=True)
    sp = m.add_parser("add")
    sp.add_argument("project")
    sp.add_argument("user")
    sp.add_argument("--role", default="member", choices=tables.ROLES)
    sp = m.add_parser("remove")
    sp.add_argument("project")
    sp.add_argument("user")
    t = sub.add_parser("token", help="API tokens: add (print a new one), list, rm"
                       ).add_subparsers(dest="op", required=True)
    sp = t.add_parser("add", help="print a new API token for a user")
    sp.add_argument("user")
    sp.add_argument("--label", default="")
    sp.add_argument("--days", type=float, default=auth.TOKEN_TTL_S / 86400,
                    help=f"expiry (default {auth.TOKEN_TTL_S / 86400:g}, at most "
                         f"{auth.MAX_TOKEN_TTL_S / 86400:g})")
    t.add_parser("list", help="tokens (never their secrets)").add_argument("user", nargs="?")
    t.add_parser("rm", help="revoke a token (its ID from 'token list')").add_argument(
        "id", type=int)
    sub.add_parser("allow-interface", help="let portal uploads use this host interface "
                   "(edge uplink, external)").add_argument("ifname")
    sub.add_parser("disallow-interface", help="take a host interface off the portal's list"
                   ).add_argument("ifname")
    sub.add_parser("interfaces", help="the host interfaces portal uploads may use")
    sub.add_parser("list", help="users, projects and members")
    sp = sub.add_parser("audit", help="who did what through the portal")
    sp.add_argument("--experiment")
    sp.add_argument("--limit", type=int, default=50)
    return p


def _when(t: float | None) -> str:
    return "never" if t is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def table(rows: list[list[str]], header: list[str]) -> str:
    """Rows as left-aligned columns under a header."""
    rows = [header, *rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)


def listing(db) -> str:
    """``wanlab portal list``: users, projects with members, lent interfaces."""
    users = [[u["name"], "yes" if u["admin"] else "",
              ", ".join(f"{p}({r})" for p, r in u["projects"].items()) or "-"]
             for u in projects.users(db)]
    projs = [[p["name"], ", ".join(f"{m}({r})" for m, r in p["members"].items()) or "-",
              p["description"]] for p in projects.projects(db)]
    out = [table(users, ["USER", "ADMIN", "PROJECTS"]), "",
           table(projs, ["PROJECT", "MEMBERS", "DESCRIPTION"])]
    lent = hostres.allowed_interfaces(db)
    out += ["", "interfaces lent to portal experiments: " + (", ".join(lent) or "none")]
    return "\n".join(out)


def main(home: str | None, argv: list[str]) -> int:
    if argv[:1] == ["token"] and argv[1:2] and argv[1] not in ("add", "list", "rm", "-h",
                                                                 "--help"):
        argv = ["token", "add", *argv[1:]]         # the short form: token USER
    a = build_parser().parse_args(argv)
    store = Store(home)
    db = store.db
    try:
        tables.migrate(db)
        key = (a.what, getattr(a, "op", None))
        if key == ("user", "add"):
            projects.add_user(db, a.name, _password(f"password for {a.name}: "), a.admin)
            print(f"user {a.name} added{' (administrator)' if a.admin else ''}")
        elif key == ("user", "passwd"):
            projects.set_password(db, a.name, _password(f"new password for {a.name}: "))
            print(f"password of {a.name} changed")
        elif key == ("user", "rm"):
            projects.remove_user(db, a.name)
            audit.record(db, "root", "user rm", None, None, a.name)
            print(f"user {a.name} removed (sessions and tokens ended)")
        elif key == ("project", "rm"):
            projects.remove_project(db, a.name)
            files.store_remove_project(store.home, a.name)       # its stored files too
            audit.record(db, "root", "project rm", None, a.name)
            print(f"project {a.name} removed")
        elif key == ("project", "add"):
            projects.add_project(db, a.name, a.description)
            print(f"project {a.name} added")
        elif key == ("member", "add"):
            projects.add_member(db, a.project, a.user, a.role)
            audit.record(db, "root", "member add", None, a.project, f"{a.user} as {a.role}")
            print(f"{a.user} is a {a.role} of {a.project}")
        elif key == ("member", "remove"):
            projects.remove_member(db, a.project, a.user)
            print(f"{a.user} left {a.project}")
        elif key == ("token", "add"):
            print(auth.new_token(db, projects.user_id(db, a.user), a.label, a.days * 86400))
        elif key == ("token", "list"):
            uid = None if a.user is None else projects.user_id(db, a.user)
            print(table([[str(t["id"]), t["user"], t["label"] or "-", _when(t["created"]),
                          _when(t["expires"])] for t in auth.tokens(db, uid)],
                        ["ID", "USER", "LABEL", "CREATED", "EXPIRES"]))
        elif key == ("token", "rm"):
            auth.revoke_token(db, a.id)
            audit.record(db, "root", "token rm", None, None, str(a.id))
            print(f"token {a.id} revoked")
        elif a.what == "allow-interface":
            hostres.allow_interface(db, a.ifname)
            print(f"portal experiments may use interface {a.ifname}")
        elif a.what == "disallow-interface":
            hostres.disallow_interface(db, a.ifname)
            print(f"interface {a.ifname} taken off the portal's list")
        elif a.what == "interfaces":
            for name in hostres.allowed_interfaces(db):
                print(name)
        elif a.what == "list":
            print(listing(db))
        elif a.what == "audit":
            for r in reversed(audit.rows(db, experiment=a.experiment, limit=a.limit)):
                at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["at"]))
                print(f"{at}  {r['user']:<12} {r['action']:<10} {r['project'] or '-':<12} "
                      f"{r['experiment'] or '-':<16} {r['detail']}")
    except auth.AuthError as e:         # the same refusals as the API's, as root's errors
        raise WanlabError(e.message) from None
    finally:
        store.close()
    return 0
