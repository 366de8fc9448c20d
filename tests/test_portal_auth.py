"""The portal's doors: no credentials is 401 everywhere, a user of another project gets 403
for every route and WebSocket of a foreign experiment, a cookie session without the CSRF
header cannot change anything, and what users do lands in the audit log.

Runs in-process (Starlette's test client), without root: the experiments here are stored,
never swapped in (tests/test_portal_browser.py drives a running one)."""

import io
import re
import warnings

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.routing import APIWebSocketRoute
    from fastapi.testclient import TestClient
    from starlette.testclient import WebSocketDenialResponse

from conftest import pair  # noqa: E402

from wanlab.errors import WanlabError  # noqa: E402
from wanlab.lifecycle import Lab  # noqa: E402
from wanlab.portal import admin, auth, projects, tables  # noqa: E402
from wanlab.portal.app import make_app  # noqa: E402

PASSWORD = "correct horse"
FIGURE2 = open(__file__.rsplit("/", 2)[0] + "/examples/figure2.tcl").read()
# a body every state-changing route accepts (extra keys are ignored), so a refusal is the
# route's own and not the body's validation
ANY_BODY = {"object": "link0", "event": "down", "link": "link0", "project": "blue",
            "filename": "x.tcl", "text": "", "user": "bob"}


@pytest.fixture
def portal(tmp_path):
    home = str(tmp_path / "home")
    app = make_app(home)
    lab = Lab(home)
    db = lab.store.db
    tables.migrate(db)
    for user, is_admin in (("alice", False), ("bob", False), ("admin", True)):
        projects.add_user(db, user, PASSWORD, admin=is_admin)
    projects.add_project(db, "blue")
    projects.add_project(db, "red")
    projects.add_member(db, "blue", "alice", "leader")
    projects.add_member(db, "red", "bob", "member")
    alice = auth.User(projects.user_id(db, "alice"), "alice", False)
    projects.claim(db, "blue-exp", projects.project_id(db, "blue"), alice)   # as the portal
    lab.create(pair("blue-exp"), swapin=False)
    tokens = {u: auth.new_token(db, projects.user_id(db, u)) for u in ("alice", "bob", "admin")}
    lab.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = TestClient(app)
    yield app, client, tokens, home


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def experiment_routes(app):
    """Every (method, path, is_websocket) of one experiment, with sample parameters."""
    fill = {"name": "blue-exp", "link": "link0", "node": "a", "file": "captures/x.pcap"}
    out = []
    for r in app.routes:
        path = getattr(r, "path", "")
        if "{name}" not in path:
            continue
        concrete = re.sub(r"\{(\w+)(:\w+)?\}", lambda m: fill[m.group(1)], path)
        if isinstance(r, APIWebSocketRoute):
            out.append(("WS", concrete, True))
        else:
            out.extend((m, concrete, False) for m in r.methods if m != "HEAD")
    return out


def test_every_experiment_route_is_covered(portal):
    app, *_ = portal
    routes = experiment_routes(app)
    assert sum(ws for *_, ws in routes) == 2                # live and console
    assert len(routes) >= 17


def test_no_credentials_is_401_everywhere(portal):
    app, client, *_ = portal
    assert client.get("/api/experiments").status_code == 401
    assert client.get("/api/experiments").json()["error"].startswith("not logged in")
    for method, path, ws in experiment_routes(app):
        if ws:
            with pytest.raises(WebSocketDenialResponse) as e:
                with client.websocket_connect(path):
                    pass
            assert e.value.status_code == 401, path
        else:
            r = client.request(method, path, json=ANY_BODY)
            assert r.status_code == 401, (method, path, r.text)
    assert client.get("/api/experiments", headers=bearer("wl_forged")).status_code == 401
    # the schema is public
    schema = client.get("/api/openapi.json").json()
    assert "/api/experiments" in schema["paths"]


def test_another_projects_user_gets_403_for_every_route_and_websocket(portal):
    app, client, tokens, home = portal
    for method, path, ws in experiment_routes(app):
        if ws:
            with pytest.raises(WebSocketDenialResponse) as e:
                with client.websocket_connect(path, headers=bearer(tokens["bob"])):
                    pass
            assert e.value.status_code == 403, path
        else:
            r = client.request(method, path, json=ANY_BODY, headers=bearer(tokens["bob"]))
            assert r.status_code == 403, (method, path, r.text)
    # bob's list does not show it; alice's and the administrator's do
    listed = {u: [x["name"] for x in client.get("/api/experiments",
                                                headers=bearer(t)).json()]
              for u, t in tokens.items()}
    assert listed == {"alice": ["blue-exp"], "bob": [], "admin": ["blue-exp"]}
    mine = client.get("/api/experiments", headers=bearer(tokens["alice"])).json()[0]
    assert (mine["project"], mine["owner"], mine["state"]) == ("blue", "alice", "new")
    # a missing experiment looks like a foreign one
    assert client.get("/api/experiments/nosuch", headers=bearer(tokens["bob"])).status_code \
        == 403
    # bob cannot create in a project he is not in, nor add himself to it
    r = client.post("/api/experiments", headers=bearer(tokens["bob"]),
                    json={"project": "blue", "filename": "f.tcl", "text": FIGURE2})
    assert r.status_code == 403
    r = client.post("/api/projects/blue/members", headers=bearer(tokens["bob"]),
                    json={"user": "bob"})
    assert r.status_code == 403
    # the batch queue is root's
    assert client.get("/api/batches", headers=bearer(tokens["bob"])).status_code == 403
    from wanlab.store import facility
    lab = Lab(home)
    facility.add_batch(lab.store, "root", "nightly", "/x/nightly.tcl", {})
    lab.close()
    queue = client.get("/api/batches", headers=bearer(tokens["admin"])).json()
    assert [(b["name"], b["state"], b["user"]) for b in queue] == [("nightly", "posted", "root")]
    # the member sees it
    r = client.get("/api/experiments/blue-exp", headers=bearer(tokens["alice"]))
    assert r.status_code == 200 and r.json()["topology"]["links"][0]["name"] == "link0"


def test_cookie_session_needs_the_csrf_header_to_change_anything(portal):
    _, client, *_ = portal
    assert client.post("/api/login", json={"user": "alice", "password": "wrong"}).status_code \
        == 401
    r = client.post("/api/login", json={"user": "alice", "password": PASSWORD})
    assert r.status_code == 200 and auth.SESSION_COOKIE in r.cookies
    csrf = r.json()["csrf"]
    assert client.get("/api/experiments").status_code == 200        # reads need no header
    for path, body in (("/api/tokens", {}), ("/api/experiments/blue-exp/swapout", None),
                       ("/api/experiments/blue-exp/terminate", None),
                       ("/api/experiments/blue-exp/links/link0", {"state": "down"})):
        r = client.post(path, json=body)
        assert r.status_code == 403 and "CSRF" in r.json()["error"], path
        r = client.post(path, json=body, headers={"X-CSRF-Token": "not-it"})
        assert r.status_code == 403, path
    assert client.get("/api/experiments/blue-exp").json()["state"] == "new"   # still there
    r = client.post("/api/tokens", json={"label": "ci"}, headers={"X-CSRF-Token": csrf})
    assert r.status_code == 200 and r.json()["token"].startswith("wl_")
    assert client.get("/api/me").json()["csrf"] == csrf
    client.post("/api/logout", headers={"X-CSRF-Token": csrf})
    assert client.get("/api/experiments").status_code == 401


def test_sessions_expire(portal):
    _, _, _, home = portal
    lab = Lab(home)
    try:
        user, secret, _ = auth.login(lab.store.db, "alice", PASSWORD, ttl_s=-1)
        assert auth.session(lab.store.db, secret) is None
        with pytest.raises(auth.AuthError) as e:
            auth.authenticate(lab.store.db, "GET", None, secret, None)
        assert e.value.status == 401
    finally:
        lab.close()
    assert auth.check_password(PASSWORD, auth.hash_password(PASSWORD))
    assert not auth.check_password("nope", auth.hash_password(PASSWORD))
    assert auth.hash_password(PASSWORD).startswith("scrypt$16384$8$1$")


def test_a_parse_error_comes_back_with_its_line_and_nothing_is_created(portal):
    _, client, tokens, _ = portal
    bad = FIGURE2.replace("$router $dest", "$router $nosuch", 1)
    line = next(i for i, t in enumerate(bad.splitlines(), 1) if "$nosuch" in t)
    r = client.post("/api/experiments", headers=bearer(tokens["alice"]),
                    json={"project": "blue", "filename": "fig.tcl", "text": bad,
                          "swapin": False})
    assert r.status_code == 400, r.text
    assert r.json()["line"] == line and r.json()["file"] == "fig.tcl"
    assert "nosuch" in r.json()["error"]
    r = client.post("/api/experiments", headers=bearer(tokens["alice"]),
                    json={"project": "blue", "filename": "fig.yaml",
                          "text": "name: x\nnodes:\n  a: {}\n  b: {kind: bogus}\n",
                          "swapin": False})
    assert r.status_code == 400 and "bogus" in r.json()["error"]
    r = client.post("/api/experiments", headers=bearer(tokens["alice"]),
                    json={"project": "blue", "filename": "evil.py", "text": "import os",
                          "swapin": False})
    assert r.status_code == 400 and "Python" in r.json()["error"]
    names = [x["name"] for x in client.get("/api/experiments",
                                           headers=bearer(tokens["alice"])).json()]
    assert names == ["blue-exp"]


def test_audit_rows_are_written(portal):
    _, client, tokens, home = portal
    a = bearer(tokens["alice"])
    r = client.post("/api/experiments", headers=a, json={
        "project": "blue", "filename": "figure2.tcl", "text": FIGURE2, "swapin": False})
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "new"
    # tevc and a console on an experiment that is not swapped in: refused, and audited
    r = client.post("/api/experiments/figure2/tevc", headers=a,
                    json={"object": "link1", "event": "down"})
    assert r.status_code == 400 and "not active" in r.json()["error"]
    with client.websocket_connect("/api/experiments/figure2/console/router",
                                  headers=a) as ws:
        assert b"not active" in ws.receive_bytes()
    r = client.post("/api/experiments/figure2/terminate", headers=a)
    assert r.status_code == 200 and r.json()["state"] == "terminated"
    rows = client.get("/api/audit", headers=a).json()
    got = [(x["user"], x["action"], x["experiment"], x["project"]) for x in reversed(rows)]
    assert got == [("alice", "create", "figure2", "blue"), ("alice", "tevc", "figure2", "blue"),
                   ("alice", "console", "figure2", "blue"),
                   ("alice", "terminate", "figure2", "blue")]
    assert "failed" in rows[2]["detail"]           # the tevc
    assert client.get("/api/audit", headers=bearer(tokens["bob"])).json() == []
    assert len(client.get("/api/audit", headers=bearer(tokens["admin"])).json()) == 4


def test_serve_listens_locally_unless_told(tmp_path):
    assert admin.parse_listen("127.0.0.1:8480") == ("127.0.0.1", 8480)
    assert admin.parse_listen("[::1]:9000") == ("::1", 9000)
    assert admin.is_local("localhost") and admin.is_local("::1")
    assert not admin.is_local("0.0.0.0") and not admin.is_local("10.1.2.3")
    with pytest.raises(WanlabError, match="not a loopback address.*--allow-remote"):
        admin.serve(str(tmp_path / "h"), "0.0.0.0:8480")
    with pytest.raises(WanlabError, match="ADDR:PORT"):
        admin.parse_listen("8480")


def test_admin_commands(tmp_path, monkeypatch, capsys):
    home = str(tmp_path / "h")
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    assert admin.main(home, ["user", "add", "carol"]) == 0
    admin.main(home, ["project", "add", "green"])
    admin.main(home, ["member", "add", "green", "carol", "--role", "leader"])
    capsys.readouterr()
    admin.main(home, ["token", "carol", "--label", "ci"])
    token = capsys.readouterr().out.strip()
    lab = Lab(home)
    try:
        user = auth.token_user(lab.store.db, token)
        assert user.name == "carol"
        assert projects.memberships(lab.store.db, user) == {"green": "leader"}
        with pytest.raises(WanlabError, match="bad user name"):
            projects.add_user(lab.store.db, "Bad Name", PASSWORD)
        with pytest.raises(WanlabError, match="unknown role"):
            projects.add_member(lab.store.db, "green", "carol", "owner")
    finally:
        lab.close()
    # an existing store keeps working, and migrating twice changes nothing
    lab = Lab(home)
    tables.migrate(lab.store.db)
    assert lab.store.db.execute("SELECT version FROM portal_meta").fetchone()[0] == \
        len(tables.MIGRATIONS)
    lab.close()


def test_a_claim_outlives_no_experiment(portal):
    """Root terminates a project's experiment with the CLI and makes another of the same
    name: the new one is root's, not the project's."""
    _, client, tokens, home = portal
    a = bearer(tokens["alice"])
    assert client.get("/api/experiments/blue-exp", headers=a).status_code == 200
    lab = Lab(home)
    try:
        lab.terminate("blue-exp")
        lab.create(pair("blue-exp"), swapin=False)
    finally:
        lab.close()
    assert client.get("/api/experiments/blue-exp", headers=a).status_code == 403
    assert client.get("/api/experiments", headers=a).json() == []
    mine = client.get("/api/experiments", headers=bearer(tokens["admin"])).json()
    assert [(x["name"], x["project"], x["owner"]) for x in mine] == [("blue-exp", None, "root")]


def test_the_link_form_checks_each_field_and_names_it(portal):
    """netem's fields of the link form are typed before anything is sent: a bad one is a
    400 naming its field; good ones (one direction here) go on to the experiment, which,
    stored and not swapped in, refuses them for that reason only."""
    _, client, tokens, _ = portal
    url, who = "/api/experiments/blue-exp/links/link0", bearer(tokens["alice"])
    for body, field in (({"jitter": "5xs"}, "jitter"), ({"jitter": "5ms bogus"}, "jitter"),
                        ({"duplicate": "150%"}, "duplicate"), ({"corrupt": "-1%"}, "corrupt"),
                        ({"reorder": "25% gap 0"}, "reorder"), ({"loss": "gemodel 2"}, "loss"),
                        ({"jitter": "5ms", "duplicate": "x", "dir": "ab"}, "duplicate"),
                        ({"delay": "soon"}, "delay")):
        r = client.post(url, json=body, headers=who)
        assert r.status_code == 400 and r.json().get("field") == field, (body, r.text)
    assert client.post(url, json={"jitter": "5ms", "dir": "up"}, headers=who).status_code \
        == 422
    r = client.post(url, headers=who, json={"jitter": "5ms normal 25%", "duplicate": "1%",
                                            "corrupt": "0.1%", "reorder": "25% gap 5",
                                            "loss": "gemodel 1% 30%", "dir": "ab"})
    assert r.status_code == 400 and "field" not in r.json(), r.text
    assert "not active" in r.json()["error"], r.text
