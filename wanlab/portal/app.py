"""The portal's ASGI application: the REST API under ``/api/``, its WebSockets, the pages.

Every API route but ``/api/login`` needs a user (a session cookie or an API token; else
401). Every route of one experiment first checks that the user may drive it (a member of
its project, or an administrator; else 403), before it looks at the experiment at all, so a
foreign experiment and a missing one look the same. State-changing requests with a session
cookie need the CSRF header (auth.py). Operations go through the experiment's site
(:mod:`wanlab.site`: this host's life cycle or the cluster's controller), the same code the
CLI runs; changes of a running experiment (link parameters, up/down, any event) go through
the experiment's event scheduler exactly as ``wanlab tevc`` does.

Errors are JSON ``{"error": ...}``: 400 for a user's mistake (with ``file`` and ``line`` for
a description that does not parse), 401/403 for authentication and authorisation, 404 for
an unknown object of an experiment the user may see.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field

from wanlab import site as sites
from wanlab.errors import SpecError, WanlabError
from wanlab.frontends import impair as impair_spec
from wanlab.frontends import normalize, traces
from wanlab.lifecycle import Lab
from wanlab.plan.plan import make_plan
from wanlab.portal import audit, auth, consoles, files, hostres, live, projects, specs, tables
from wanlab.run import terminal

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")


class NotFound(WanlabError):
    pass


# -- request bodies (they make the OpenAPI schema) ------------------------------------
class Login(BaseModel):
    user: str
    password: str


class NewToken(BaseModel):
    label: str = ""
    days: float | None = Field(None, gt=0, description="expiry in days (default 30, at "
                                                         "most 366)")


class NewMember(BaseModel):
    user: str
    role: Literal["leader", "member"] = "member"


class NewExperiment(BaseModel):
    project: str
    filename: str = Field(..., description="the uploaded file's name: .tcl/.ns or .yaml/.yml")
    text: str
    name: str | None = Field(None, description="experiment name (default: the spec's)")
    swapin: bool = True
    check_only: bool = Field(False, description="parse only: report errors, create nothing")
    files: dict[str, str] = Field(
        {}, description="files the description names by NAME (tarfiles, .deb packages): "
                        "{NAME: base64 of the file}; at most 16 files, 16 MiB each, 32 MiB "
                        "together. A description names a file of the project's store as "
                        "project:NAME")
    cluster: bool = Field(False, description="place it on the current cluster (wanlab "
                          "cluster up) instead of this host")


class Modify(BaseModel):
    filename: str = Field("", description="the new description's file name: .tcl/.ns or "
                          ".yaml/.yml")
    text: str = ""
    files: dict[str, str] = Field(
        {}, description="files the new description names by NAME, as for a create")


class Exec(BaseModel):
    node: str = ""
    argv: list[str] = Field([], description="the command and its arguments (no shell)")
    timeout: float = Field(60.0, gt=0, le=3600)


class LinkChange(BaseModel):
    delay: str | None = Field(None, examples=["50ms"])
    bandwidth: str | None = Field(None, examples=["10Mb"])
    loss: str | None = Field(None, examples=["0.01", "gemodel 1% 30%", "state 1% 30%"])
    jitter: str | None = Field(None, examples=["5ms", "5ms normal 25%"])
    duplicate: str | None = Field(None, examples=["1%"])
    corrupt: str | None = Field(None, examples=["0.1%"])
    reorder: str | None = Field(None, examples=["25%", "25% gap 5"])
    trace: str | None = Field(None, description="a capacity trace uploaded with the "
                              "experiment, started now (NAME [OFFSET] [noloop]); a "
                              "bandwidth instead ends it", examples=["cell.down",
                                                                    "cell.down 10s noloop"])
    schedule: str | None = Field(None, description="a schedule uploaded with the experiment, "
                                 "started now (NAME [linear] [loop]), or none to end it",
                                 examples=["sat.csv linear loop", "none"])
    state: Literal["up", "down"] | None = None
    dir: Literal["both", "ab", "ba"] = Field("both", description="a link's one direction "
                                             "(ab leaves its first node); LANs: both")


class Event(BaseModel):
    time: str = Field("now", description="now, +SECONDS, or SECONDS since t = 0")
    object: str
    event: str
    args: list[str] = []


class CaptureStart(BaseModel):
    link: str


@dataclass
class Ctx:
    """One request's view: the store (through the life cycle) and who asks."""
    lab: Lab
    user: auth.User
    owner: dict[str, str] | None = None

    @property
    def db(self):
        return self.lab.store.db

    def audit(self, action: str, experiment: str | None = None, detail: str = "") -> int:
        project = self.owner["project"] if self.owner else None
        return audit.record(self.db, self.user.name, action, experiment, project, detail)


# the pages' scripts and styles are bundled in static/ (no inline script); styles allow
# inline for the terminal's and the graph's element styles; connections (WebSockets too) only
# to this origin
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
# the API's browsable docs (Swagger UI) load their script and style from a CDN
DOCS_CSP = CSP.replace("script-src 'self'", "script-src 'self' 'unsafe-inline' "
                       "https://cdn.jsdelivr.net").replace(
    "style-src 'self'", "style-src 'self' https://cdn.jsdelivr.net").replace(
    "img-src 'self'", "img-src 'self' https://fastapi.tiangolo.com")
MAX_BODY_BYTES = 2 * specs.MAX_BYTES + 65536      # an upload as JSON, escaped
# a create may carry files (base64), a project's file is its bytes
CREATE_BODY_BYTES = MAX_BODY_BYTES + (files.UPLOAD_BYTES // 3 + 1) * 4 \
    + files.FILES_MAX * (files.NAME_MAX + 16)
STORE_BODY_BYTES = files.STORE_FILE_BYTES


def body_bound(method: str, path: str) -> int:
    """The largest request body a route takes."""
    if method == "POST" and path.rstrip("/") == "/api/experiments":
        return CREATE_BODY_BYTES
    if method == "PUT" and path.startswith("/api/projects/") and "/files/" in path:
        return STORE_BODY_BYTES
    return MAX_BODY_BYTES


def security_headers(path: str) -> dict[str, str]:
    return {"Content-Security-Policy": DOCS_CSP if path == "/api/docs" else CSP,
            "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
            "Referrer-Policy": "no-referrer", "Cross-Origin-Opener-Policy": "same-origin"}


def _origin_ok(headers) -> bool:
    """A browser's WebSocket carries cookies cross-site; accept only our own pages' origin."""
    origin = headers.get("origin")
    return origin is None or urlsplit(origin).netloc == headers.get("host")


def make_app(home: str | None = None, static_dir: str = STATIC) -> FastAPI:
    boot = Lab(home)            # makes the store if needed, and the portal's tables
    home = boot.store.home
    tables.migrate(boot.store.db)
    boot.close()

    app = FastAPI(title="wanlab portal", version="1", openapi_url="/api/openapi.json",
                  docs_url="/api/docs", redoc_url=None,
                  description="Experiments, live statistics, events and consoles of a "
                              "wanlab facility. Authenticate with a session (POST /api/login;"
                              " then send X-CSRF-Token on changes) or 'Authorization: Bearer "
                              "TOKEN'.")

    @contextlib.contextmanager
    def session(request: Request | WebSocket, name: str | None = None,
                method: str | None = None) -> Iterator[Ctx]:
        lab = Lab(home, create=False)
        try:
            user = auth.authenticate(lab.store.db, method or request.scope.get("method", "GET"),
                                     request.headers.get("authorization"),
                                     request.cookies.get(auth.SESSION_COOKIE),
                                     request.headers.get(auth.CSRF_HEADER))
            ctx = Ctx(lab, user)
            if name is not None:
                ctx.owner = projects.may_drive(lab.store.db, user, name)
                if lab.store.find(name) is None:
                    raise NotFound(f"no experiment named {name!r}")
            yield ctx
        finally:
            lab.close()

    @app.middleware("http")
    async def _headers(request: Request, call_next):
        """Security headers on every answer, and no request body over the bound."""
        size = request.headers.get("content-length")
        bound = body_bound(request.method, request.url.path)
        if size is not None and (not size.isdigit() or int(size) > bound):
            resp = JSONResponse({"error": f"request body larger than {bound} bytes"},
                                status_code=413)
        elif size is None and "transfer-encoding" in request.headers:
            resp = JSONResponse({"error": "a request body needs a Content-Length"},
                                status_code=411)
        else:
            resp = await call_next(request)
        resp.headers.update(security_headers(request.url.path))
        return resp

    # -- errors ----------------------------------------------------------------
    @app.exception_handler(auth.AuthError)
    async def _auth_error(request: Request, e: auth.AuthError):
        headers = {"Retry-After": str(e.retry_after)} if e.retry_after else None
        return JSONResponse({"error": e.message}, status_code=e.status, headers=headers)

    @app.exception_handler(specs.UploadError)
    async def _upload_error(request: Request, e: specs.UploadError):
        return JSONResponse({"error": e.message, "file": e.file, "line": e.line},
                            status_code=400)

    @app.exception_handler(specs.Busy)
    async def _busy(request: Request, e: specs.Busy):
        return JSONResponse({"error": str(e)}, status_code=503, headers={"Retry-After": "5"})

    @app.exception_handler(files.FileNotFound)
    async def _no_file(request: Request, e: files.FileNotFound):
        return JSONResponse({"error": str(e)}, status_code=404)

    @app.exception_handler(NotFound)
    async def _not_found(request: Request, e: NotFound):
        return JSONResponse({"error": str(e)}, status_code=404)

    @app.exception_handler(WanlabError)
    async def _user_error(request: Request, e: WanlabError):
        return JSONResponse({"error": str(e)}, status_code=400)

    @app.exception_handler(SpecError)
    async def _spec_error(request: Request, e: SpecError):
        # a form's field named, for the page to mark
        return JSONResponse({"error": str(e), **({"field": e.field} if e.field else {})},
                            status_code=400)

    # -- who ---------------------------------------------------------------------
    @app.post("/api/login", tags=["auth"])
    def login(body: Login, request: Request):
        """Start a session: sets the session cookie; returns the CSRF token for changes."""
        lab = Lab(home, create=False)
        try:
            user, secret, csrf = auth.login(lab.store.db, body.user, body.password,
                                            address=request.client.host if request.client
                                            else None)
            audit.record(lab.store.db, user.name, "login")
        finally:
            lab.close()
        resp = JSONResponse({"user": user.name, "admin": user.admin, "csrf": csrf})
        resp.set_cookie(auth.SESSION_COOKIE, secret, max_age=auth.SESSION_TTL_S,
                        httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")
        return resp

    @app.post("/api/logout", tags=["auth"])
    def logout(request: Request):
        with session(request) as c:
            auth.logout(c.db, request.cookies.get(auth.SESSION_COOKIE, ""))
        resp = JSONResponse({"ok": True})
        resp.delete_cookie(auth.SESSION_COOKIE, path="/")
        return resp

    @app.get("/api/me", tags=["auth"])
    def me(request: Request):
        """Who you are, your projects and roles, and (with a session) the CSRF token."""
        with session(request) as c:
            found = auth.session(c.db, request.cookies.get(auth.SESSION_COOKIE, "")) \
                if request.cookies.get(auth.SESSION_COOKIE) else None
            return {"user": c.user.name, "admin": c.user.admin,
                    "projects": projects.memberships(c.db, c.user),
                    "csrf": found[1] if found else None}

    @app.post("/api/tokens", tags=["auth"])
    def new_token(body: NewToken, request: Request):
        """A new API token for scripts (shown once)."""
        with session(request) as c:
            c.audit("token", detail=body.label)
            ttl = None if body.days is None else body.days * 86400
            return {"token": auth.new_token(c.db, c.user.id, body.label, ttl)}

    @app.get("/api/tokens", tags=["auth"])
    def list_tokens(request: Request):
        """Your API tokens (id, label, created, expires; never the secrets)."""
        with session(request) as c:
            return auth.tokens(c.db, c.user.id)

    @app.delete("/api/tokens/{token_id}", tags=["auth"])
    def revoke_token(token_id: int, request: Request):
        """Revoke one of your API tokens."""
        with session(request) as c:
            auth.revoke_token(c.db, token_id, c.user.id)
            c.audit("token rm", detail=str(token_id))
            return {"ok": True}

    @app.get("/api/projects", tags=["projects"])
    def list_projects(request: Request):
        with session(request) as c:
            mine = projects.memberships(c.db, c.user)
            return [p for p in projects.projects(c.db) if c.user.admin or p["name"] in mine]

    @app.post("/api/projects/{project}/members", tags=["projects"])
    def add_member(project: str, body: NewMember, request: Request):
        """Add (or change the role of) a member: an administrator or the project's leader."""
        with session(request) as c:
            projects.may_add_members(c.db, c.user, project)
            projects.add_member(c.db, project, body.user, body.role)
            audit.record(c.db, c.user.name, "member add", None, project,
                         f"{body.user} as {body.role}")
            return {"ok": True}

    # -- a project's own files (what its descriptions name as project:NAME) ------------
    def store_access(c: Ctx, project: str, remove: bool = False) -> None:
        """Members read and put a project's files; leaders (and administrators) remove
        them. Anyone else is refused alike whether the project exists or not."""
        role = projects.memberships(c.db, c.user).get(project)
        if c.user.admin:
            projects.project_id(c.db, project)
        elif role is None:
            raise auth.AuthError(403, f"you are not a member of project {project!r}")
        elif remove and role != "leader":
            raise auth.AuthError(403, f"only a leader of {project!r} or an administrator "
                                      f"removes its files")

    @app.get("/api/projects/{project}/files", tags=["projects"])
    def list_files(project: str, request: Request):
        """The project's stored files (name, size, modified)."""
        with session(request) as c:
            store_access(c, project)
            return files.store_list(home, project)

    @app.put("/api/projects/{project}/files/{filename}", tags=["projects"],
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/octet-stream": {"schema": {"type": "string",
                                                         "format": "binary"}}}}})
    async def put_file(project: str, filename: str, request: Request):
        """Store a file (the request body, at most 32 MiB; a project keeps at most 64 files
        and 256 MiB) under a plain name; replaces one of that name. A description names
        it as project:NAME."""
        from starlette.concurrency import run_in_threadpool

        def allowed() -> None:           # who asks, before the body is read
            with session(request) as c:
                store_access(c, project)
        await run_in_threadpool(allowed)
        data = await request.body()

        def put() -> dict[str, Any]:
            with session(request) as c:
                store_access(c, project)
                out = files.store_put(home, project, filename, data)
                audit.record(c.db, c.user.name, "file put", None, project,
                             f"{filename} ({len(data)} bytes)")
                return out
        return await run_in_threadpool(put)

    @app.get("/api/projects/{project}/files/{filename}", tags=["projects"])
    def get_file(project: str, filename: str, request: Request):
        """Download a stored file."""
        with session(request) as c:
            store_access(c, project)
            data = files.store_get(home, project, filename)
        return Response(data, media_type="application/octet-stream",
                        headers={"Content-Disposition": f'attachment; filename="{filename}"'})

    @app.delete("/api/projects/{project}/files/{filename}", tags=["projects"])
    def delete_file(project: str, filename: str, request: Request):
        """Remove a stored file (a leader of the project, or an administrator)."""
        with session(request) as c:
            store_access(c, project, remove=True)
            files.store_delete(home, project, filename)
            audit.record(c.db, c.user.name, "file rm", None, project, filename)
            return {"ok": True}

    @app.get("/api/audit", tags=["projects"])
    def audit_log(request: Request, limit: int = 200):
        """Who did what: everything for an administrator, else your projects' rows."""
        with session(request) as c:
            mine = None if c.user.admin else list(projects.memberships(c.db, c.user))
            return audit.rows(c.db, projects=mine, limit=min(max(limit, 1), 1000))

    @app.get("/api/batches", tags=["facility"])
    def batches(request: Request):
        """The batch queue (``wanlab batch``): root's, so administrators only."""
        from wanlab.store import facility
        with session(request) as c:
            if not c.user.admin:
                raise auth.AuthError(403, "the batch queue is root's: administrators only")
            return [{k: b[k] for k in ("id", "user", "name", "state", "attempts", "error",
                                       "submitted", "started", "ended")}
                    for b in facility.batches(c.lab.store)]

    # -- experiments ---------------------------------------------------------------
    @app.get("/api/experiments", tags=["experiments"])
    def list_experiments(request: Request):
        """The experiments you may see, with state, project and owner."""
        with session(request) as c:
            owners = projects.owners(c.db)
            mine = projects.memberships(c.db, c.user)
            out = []
            for row in sites.listing(c.lab):
                own = owners.get(row.name)
                if c.user.admin or (own and own["project"] in mine):
                    out.append({"name": row.name, "state": row.state, "error": row.error,
                                "project": own["project"] if own else None,
                                "owner": own["owner"] if own else "root",
                                "nodes": len(row.ir.nodes), "links": len(row.ir.links),
                                "lans": len(row.ir.lans), "updated": row.updated})
            return out

    @app.post("/api/experiments", tags=["experiments"])
    def create(body: NewExperiment, request: Request):
        """Create (and by default swap in) an experiment from an uploaded ns or YAML text;
        a parse error is 400 with the parser's ``line``."""
        with session(request) as c:
            pid = projects.may_create_in(c.db, c.user, body.project)
            given = files.decode(body.files)
            exp, warnings, base = specs.parse(body.filename, body.text, body.name, body.files)
            attached = files.Attached(home, body.project, base, c.lab.store.folder(exp.name),
                                      given)
            exp = confined(c, exp, body.filename, attached)   # (the child made its plan)
            warnings += [f"file {n} was uploaded but the description does not name it (it "
                         f"is kept: the link form can switch to it)"
                         for n in attached.unused(series_files(exp))]
            summary = {"name": exp.name, "nodes": len(exp.nodes), "links": len(exp.links),
                       "lans": len(exp.lans), "events": len(exp.events),
                       "warnings": warnings}
            if body.check_only:
                return {"ok": True, **summary}
            if c.lab.store.find(exp.name) is not None:
                raise WanlabError(f"an experiment named {exp.name!r} already exists")
            stamp = projects.claim(c.db, exp.name, pid, c.user)
            c.owner = {"project": body.project, "owner": c.user.name}
            rid = c.audit("create", exp.name, body.filename)
            try:
                attached.save()         # the experiment's own copies, before it is stored
                row = sites.for_new(c.lab, body.cluster).create(exp, source_path=None,
                                                                swapin=body.swapin)
            except BaseException as e:
                # a failed create leaves nothing: an experiment of this name now is another's
                if c.lab.store.find(exp.name) is None:
                    attached.discard()
                projects.release(c.db, exp.name, stamp)
                audit.failed(c.db, rid, str(e))
                if type(e) is WanlabError:      # setup's words name the copies' host paths
                    raise WanlabError(attached.shown(str(e))) from None
                raise
            return {"ok": True, **summary, "state": row.state}

    def confined(c: Ctx, exp, filename: str, attached: files.Attached | None):
        """The upload as a portal experiment: only host resources root lends (hostres),
        only files sent with it or of its project's store (files)."""
        try:
            return hostres.confine(c.db, exp, attached)
        except hostres.HostResourceError as e:
            raise specs.UploadError(e.message, os.path.basename(filename or "") or "upload",
                                    e.line) from None

    def _op(name: str, request: Request, action: str, fn) -> dict[str, Any]:
        with session(request, name) as c:
            rid = c.audit(action, name)
            try:
                fn(c)
            except BaseException as e:
                audit.failed(c.db, rid, str(e))
                raise
            row = c.lab.store.find(name)
            return {"ok": True, "state": row.state if row else "terminated"}

    @app.post("/api/experiments/{name}/swapin", tags=["experiments"])
    def swapin(name: str, request: Request, repair: bool = False):
        return _op(name, request, "swapin",
                   lambda c: sites.of(c.lab, name).swapin(name, repair=repair))

    @app.post("/api/experiments/{name}/swapout", tags=["experiments"])
    def swapout(name: str, request: Request):
        return _op(name, request, "swapout", lambda c: sites.of(c.lab, name).swapout(name))

    @app.post("/api/experiments/{name}/modify", tags=["experiments"])
    def modify(name: str, body: Modify, request: Request):
        """Apply a changed description (an uploaded ns or YAML text), as ``wanlab modify``:
        a running experiment changes only what differs."""
        def go(c: Ctx) -> None:
            own = projects.owner(c.db, name)
            # a project's: the files kept with it, and those sent now (a new one replaces
            # a kept one of its name), within an upload's bounds
            sent = body.files if own is None else \
                {**files.kept_given(c.lab.store.folder(name)), **body.files}
            given = files.decode(sent)
            exp, _, base = specs.parse(body.filename, body.text, name, sent)
            if own is None:     # root's (an administrator's upload): no host resource either,
                exp = confined(c, exp, body.filename, None)    # and no project's files
            else:               # a project's: the same bounds as its create
                attached = files.Attached(home, own["project"], base,
                                          c.lab.store.folder(name), given)
                exp = confined(c, exp, body.filename, attached)
                attached.save()
            sites.of(c.lab, name).modify(name, exp)
        return _op(name, request, "modify", go)

    @app.post("/api/experiments/{name}/cleanup", tags=["experiments"])
    def cleanup(name: str, request: Request):
        """Remove everything recorded for it (after a crash), as ``wanlab cleanup``."""
        def go(c: Ctx) -> None:
            sites.of(c.lab, name).cleanup(name)
            if c.lab.store.find(name) is None:      # a cluster experiment is forgotten
                projects.release(c.db, name)
        return _op(name, request, "cleanup", go)

    @app.post("/api/experiments/{name}/terminate", tags=["experiments"])
    def terminate(name: str, request: Request):
        def go(c: Ctx) -> None:
            sites.of(c.lab, name).terminate(name)
            projects.release(c.db, name)
        return _op(name, request, "terminate", go)

    @app.post("/api/experiments/{name}/exec", tags=["experiments"])
    def exec_(name: str, body: Exec, request: Request):
        """Run a command in a node, as ``wanlab exec`` (no shell; its output comes back
        whole once it exits, or is killed at ``timeout``)."""
        with session(request, name) as c:
            if not body.node or not body.argv:
                raise WanlabError("exec needs a node and a command (argv)")
            if projects.owner(c.db, name) is not None:   # a project's node on the host's
                # files is root's
                hostres.console_node(c.lab.get(name).ir, body.node)
            c.audit("exec", name, f"{body.node}: " + " ".join(body.argv))
            # the command gets the consoles' clean environment, never the portal's own
            argv = ["env", "-i", *(f"{k}={v}" for k, v in terminal.CLEAN_ENV.items()),
                    *body.argv]
            try:
                r = sites.of(c.lab, name).exec(name, body.node, argv, capture=True,
                                               timeout=body.timeout)
            except subprocess.TimeoutExpired:
                raise WanlabError(f"{body.argv[0]} did not exit within {body.timeout:g} s "
                                  f"(killed)") from None
            return {"code": r.returncode, "stdout": r.stdout, "stderr": r.stderr}

    @app.get("/api/experiments/{name}/routes", tags=["experiments"])
    def routes(name: str, request: Request, node: str | None = None):
        """Each node's routing table (``ip route``), as ``wanlab routes``."""
        with session(request, name) as c:
            return sites.of(c.lab, name).routes(name, node)

    @app.get("/api/experiments/{name}", tags=["experiments"])
    def show(name: str, request: Request):
        """State, nodes, addresses, routes, links and counters (as ``wanlab show``), with
        the topology the live view draws."""
        with session(request, name) as c:
            out = sites.of(c.lab, name).show(name)
            out.pop("folder", None)       # the state folder is root's business
            out["topology"] = topology(c.lab, name)
            # what the link form may switch a direction to (a trace, a schedule)
            out["uploads"] = files.kept(c.lab.store.folder(name))
            out["owner"] = c.owner
            return out

    @app.get("/api/experiments/{name}/stats", tags=["live"])
    def stats(name: str, request: Request):
        """The engine's counters now (cumulative; docs/engine-protocol.md)."""
        with session(request, name) as c:
            return sites.of(c.lab, name).stats(name)     # a cluster's: every machine's

    @app.post("/api/experiments/{name}/links/{link}", tags=["live"])
    def change_link(name: str, link: str, body: LinkChange, request: Request):
        """Change a link's or LAN's delay, bandwidth, loss or state now, through the
        experiment's event scheduler (as ``wanlab tevc``): it enters the event log."""
        with session(request, name) as c:
            kind = c.lab.get(name).ir.kinds().get(link)
            if kind not in ("link", "lan"):
                raise NotFound(f"{link!r} is not a link or LAN of experiment {name!r}")
            if body.trace is not None and body.bandwidth is not None:
                raise SpecError("a bandwidth (a fixed rate) ends a trace: give one of them",
                                field="trace")
            # tevc's words, each with the form's field; a loss model and netem's
            # impairments take several; a trace is the bandwidth's
            fields = [(f, w, v) for f, w, v in (
                ("delay", "delay", body.delay), ("bandwidth", "bandwidth", body.bandwidth),
                ("loss", "loss", body.loss), ("jitter", "jitter", body.jitter),
                ("duplicate", "duplicate", body.duplicate),
                ("corrupt", "corrupt", body.corrupt), ("reorder", "reorder", body.reorder),
                ("trace", "bandwidth", None if body.trace is None else "trace " + body.trace),
                ("schedule", "schedule", body.schedule)) if v is not None]
            words = [(f, [w, *v.split()]) for f, w, v in fields]
            if body.dir != "both":
                if kind != "link":
                    raise SpecError("a LAN's change applies to all of it: dir is both",
                                    field="dir")
                words = [(f, [*w, body.dir]) for f, w in words]
            if body.state:
                words.append(("state", [body.state]))
            if not words:
                raise WanlabError("nothing to change: give delay, bandwidth, loss, jitter, "
                                  "duplicate, corrupt, reorder, trace, schedule or state")
            # a trace or schedule: a file kept with the experiment, never a path
            kept = files.resolver(c.lab.store.folder(name))
            _check_link_words(c.lab.get(name).ir, link, words, kept)
            rid = c.audit("link", name, f"{link} " + " ".join(" ".join(w) for _, w in words))
            replies = []
            try:
                on = sites.of(c.lab, name)      # this host's, or the cluster's machines
                for _, (action, *args) in words:
                    with traces.confined_here(kept):
                        replies.append(on.tevc(name, "now", link, action, args, wait=True))
            except BaseException as e:
                audit.failed(c.db, rid, str(e))
                raise
            bad = [r for r in replies if r.get("outcome", "ok") != "ok"]
            if bad:
                raise WanlabError("; ".join(str(r.get("detail")) for r in bad))
            return {"ok": True, "replies": replies}

    @app.post("/api/experiments/{name}/tevc", tags=["live"])
    def tevc(name: str, body: Event, request: Request):
        """Send an event, as ``wanlab tevc -w``."""
        with session(request, name) as c:
            rid = c.audit("tevc", name, " ".join([body.time, body.object, body.event,
                                                  *body.args]))
            try:
                wait = body.time == "now"
                # a trace or schedule: a file kept with the experiment, never a path
                with traces.confined_here(files.resolver(c.lab.store.folder(name))):
                    return sites.of(c.lab, name).tevc(name, body.time, body.object,
                                                      body.event, body.args, wait=wait)
            except BaseException as e:
                audit.failed(c.db, rid, str(e))
                raise

    @app.get("/api/experiments/{name}/events", tags=["live"])
    def events(name: str, request: Request):
        """The event log of the current run."""
        with session(request, name) as c:
            return sites.of(c.lab, name).events(name)     # a cluster's: merged

    @app.get("/api/experiments/{name}/flows", tags=["results"])
    def flows(name: str, request: Request):
        with session(request, name) as c:
            return sites.of(c.lab, name).flows(name)     # a cluster's: halves joined

    @app.get("/api/experiments/{name}/plot", tags=["results"])
    def plot(name: str, request: Request):
        """A PNG of every flow's throughput over time in the latest run."""
        with session(request, name) as c:
            site = sites.of(c.lab, name)
            if not site.flows(name):
                raise NotFound(f"experiment {name!r} has no flows to plot yet")
            return FileResponse(site.plot(name), media_type="image/png")

    @app.get("/api/experiments/{name}/audit", tags=["results"])
    def exp_audit(name: str, request: Request):
        with session(request, name) as c:
            return audit.rows(c.db, experiment=name)

    @app.get("/api/experiments/{name}/captures", tags=["results"])
    def captures(name: str, request: Request):
        """The experiment's packet captures (pcap files in its folder; on a cluster each
        machine's, ``file`` being ``MACHINE/PATH``)."""
        with session(request, name) as c:
            return sites.of(c.lab, name).captures(name)

    @app.post("/api/experiments/{name}/captures", tags=["results"])
    def capture_start(name: str, body: CaptureStart, request: Request):
        """Start capturing a link (both directions) into a new pcap file (on a cluster, a
        cut link's direction on the machine that sends it: ``files`` has one per
        machine)."""
        with session(request, name) as c:
            if c.lab.get(name).ir.kinds().get(body.link) != "link":
                raise NotFound(f"{body.link!r} is not a link of experiment {name!r}")
            rid = c.audit("capture", name, body.link)
            try:
                files = sites.of(c.lab, name).capture_start(name, body.link)
            except BaseException as e:
                audit.failed(c.db, rid, str(e))
                raise
            return {"ok": True, "file": files[0], "files": files}

    @app.post("/api/experiments/{name}/captures/stop", tags=["results"])
    def capture_stop(name: str, request: Request):
        with session(request, name) as c:
            sites.of(c.lab, name).capture_stop(name)
            return {"ok": True}

    @app.get("/api/experiments/{name}/captures/{file:path}", tags=["results"])
    def capture_file(name: str, file: str, request: Request):
        """Download one capture (only files the listing shows)."""
        with session(request, name) as c:
            on = sites.of(c.lab, name)
            if file not in {x["file"] for x in on.captures(name)}:
                raise NotFound(f"no capture {file!r}")
            return FileResponse(on.capture_file(name, file),
                                media_type="application/vnd.tcpdump.pcap",
                                filename=os.path.basename(file))

    # -- WebSockets --------------------------------------------------------------------
    async def _ws_enter(ws: WebSocket, name: str) -> Ctx | None:
        """Authenticate a WebSocket before accepting it; a refusal is an HTTP 401/403."""
        from starlette.concurrency import run_in_threadpool

        def check() -> tuple[int, str] | None:
            if not _origin_ok(ws.headers):
                return 403, "cross-origin WebSocket refused"
            try:
                with session(ws, name, method="GET") as c:
                    if "/console/" in ws.url.path:
                        c.audit("console", name, ws.url.path.rsplit("/", 1)[-1])
            except auth.AuthError as e:
                return e.status, e.message
            except NotFound as e:
                return 404, str(e)
            return None

        refused = await run_in_threadpool(check)
        if refused is not None:
            await ws.send_denial_response(JSONResponse({"error": refused[1]},
                                                       status_code=refused[0]))
            return None
        await ws.accept()
        return True

    @app.websocket("/api/experiments/{name}/live")
    async def live_ws(ws: WebSocket, name: str):
        """Once a second: state, engine counters and new event-log rows."""
        if await _ws_enter(ws, name):
            await live.stream(ws, home, name)

    @app.websocket("/api/experiments/{name}/console/{node}")
    async def console_ws(ws: WebSocket, name: str, node: str):
        """A shell in ``node`` (as ``wanlab shell``) on a terminal, over this socket."""
        from starlette.concurrency import run_in_threadpool
        if not await _ws_enter(ws, name):
            return

        held = []

        def open_console() -> list[str] | Any:
            lab = Lab(home, create=False)
            try:
                if projects.owner(lab.store.db, name) is not None:     # a project's
                    hostres.console_node(lab.get(name).ir, node)
                site = sites.of(lab, name)
                relay = site.relay_session()
                if relay is not None:
                    consoles.RAY.enter(relay)       # Ray, while a relayed console is open
                    held.append(True)
                    return site.console(name, node, [consoles.SHELL])  # on its machine
                return site.node_argv(name, node, [consoles.SHELL])    # run from here
            finally:
                lab.close()
        try:
            try:
                cmd = await run_in_threadpool(open_console)
            except WanlabError as e:
                await ws.send_bytes(f"\r\nwanlab: {e}\r\n".encode())
                await ws.close(code=4400)
                return
            if not isinstance(cmd, list):     # a terminal relayed by its machine's agent
                held.clear()    # the relay leaves Ray once the terminal is closed
                await consoles.relay(ws, cmd, then=consoles.RAY.leave)
            else:
                await consoles.bridge(ws, cmd)
        finally:
            if held:                    # opening the terminal failed
                await run_in_threadpool(consoles.RAY.leave)

    @app.get("/api/{rest:path}", include_in_schema=False)
    def api_unknown(rest: str):
        return JSONResponse({"error": f"no API route /api/{rest}"}, status_code=404)

    if os.path.isfile(os.path.join(static_dir, "index.html")):
        app.mount("/", StaticFiles(directory=static_dir, html=True), name="pages")
    else:
        @app.get("/", include_in_schema=False)
        def unbuilt():
            return HTMLResponse("<p>The portal's pages are not built: run <code>make "
                                "install</code> (npm builds web/ into "
                                "wanlab/portal/static). The API is at /api/.</p>")
    return app


def _check_link_words(exp: Any, link: str, words: list[tuple[str, list[str]]],
                      kept: traces.Resolver) -> None:
    """The link form's fields typed as tevc types them, before anything is sent: a bad
    value is an error naming its field (the form's name for it)."""
    for field, (action, *args) in words:
        if action in ("up", "down"):
            continue
        try:
            with traces.confined_here(kept):
                normalize.event(exp, 0.0, link, action, args)
        except SpecError as e:
            where = f"{e.file}:{e.line}: " if e.file and e.line else \
                f"{e.file}: " if e.file else ""
            raise SpecError(where + e.message.removeprefix(f"{link} {action}: "),
                            field=field) from None


def series_files(exp: Any) -> set[str]:
    """The files description ``exp`` read as capacity traces or schedules."""
    dirs = [d for l in exp.links for d in (l.ab, l.ba)]
    dirs += [d for lan in exp.lans for m in lan.members for d in (m.to_lan, m.from_lan)]
    return {x.file for d in dirs for x in (d.trace, d.schedule) if x is not None}


def topology(lab: Lab, name: str) -> dict[str, Any]:
    """Nodes (with kind: emulated or simulated, and role: router or host), links and LANs
    with their parameters, for the live view."""
    row = lab.get(name)
    plan = make_plan(row.ir, row.short)
    degree: dict[str, int] = {n.name: 0 for n in row.ir.nodes}
    for l in row.ir.links:
        degree[l.a] = degree.get(l.a, 0) + 1
        degree[l.b] = degree.get(l.b, 0) + 1
    for lan in row.ir.lans:
        for m in lan.members:
            degree[m.node] = degree.get(m.node, 0) + 1
    nodes = []
    for n in row.ir.nodes:
        p = plan.nodes.get(n.name)
        nodes.append({"name": n.name, "kind": "simulated" if p and p.simulated else "emulated",
                      "role": "router" if degree.get(n.name, 0) > 1 else "host",
                      "addresses": [a for i in p.interfaces for a in i.addresses()] if p
                      else []})

    def params(lp) -> dict[str, Any]:
        return {"bandwidth_bps": lp.bandwidth_bps, "delay_s": lp.delay_s, "loss": lp.loss,
                "queue": lp.queue.kind, "limit": lp.queue.limit,
                "impair": impair_spec.describe(lp)}
    return {"nodes": nodes,
            "links": [{"name": l.name, "a": l.a, "b": l.b, "ab": params(l.ab),
                       "ba": params(l.ba)} for l in row.ir.links],
            "lans": [{"name": lan.name, "members": [m.node for m in lan.members],
                      "bandwidth_bps": lan.bandwidth_bps, "delay_s": lan.delay_s,
                      "loss": lan.loss} for lan in row.ir.lans]}
