"""The portal hands out nothing of the host: each test plays an attack a project member
could try through the portal and checks it is refused (docs/security.md, "Who reaches
wanlab through the portal").

In-process (Starlette's test client) unless a test needs a running experiment."""

import contextlib
import time
import warnings

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect

from test_portal_auth import PASSWORD, bearer  # noqa: E402

from wanlab.errors import WanlabError  # noqa: E402
from wanlab.lifecycle import Lab  # noqa: E402
from wanlab.portal import admin, auth, projects, specs, tables  # noqa: E402
from wanlab.portal.app import make_app  # noqa: E402


@pytest.fixture
def site(tmp_path):
    """A portal with projects blue (alice) and red (bob), and an administrator."""
    home = str(tmp_path / "home")
    app = make_app(home)
    lab = Lab(home)
    db = lab.store.db
    tables.migrate(db)
    for user, is_admin in (("alice", False), ("bob", False), ("admin", True)):
        projects.add_user(db, user, PASSWORD, admin=is_admin)
    for project, user in (("blue", "alice"), ("red", "bob")):
        projects.add_project(db, project)
        projects.add_member(db, project, user, "leader")
    tokens = {u: auth.new_token(db, projects.user_id(db, u)) for u in ("alice", "bob", "admin")}
    lab.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = TestClient(app)
    yield app, client, tokens, home


EDGE = """name: {name}
nodes:
  - {{name: client, egress: true}}
  - web
links:
  - {{nodes: [client, web]}}
edge:
  uplink: {{interface: {ifname}, address: 198.51.100.2/24, via: 198.51.100.1}}
"""
EXTERNAL = """name: br
nodes:
  - {{name: gw, external: {ifname}}}
  - b
links:
  - {{nodes: [gw, b]}}
"""


def upload(client, token, text, filename="x.yaml", **kw):
    return client.post("/api/experiments", headers=bearer(token),
                       json={"project": "blue", "filename": filename, "text": text,
                             "swapin": False, **kw})


# -- finding: a portal member took a host interface ------------------------------------
def test_a_portal_upload_cannot_take_a_host_interface_root_has_not_lent(site, capsys):
    app, client, tokens, home = site
    alice = tokens["alice"]
    answers = {}
    for ifname in ("lo", "eth0", "nosuch0"):       # lo exists everywhere; nosuch0 nowhere
        for template in (EDGE, EXTERNAL):
            for check_only in (True, False):
                r = upload(client, alice, template.format(name="edgy", ifname=ifname),
                           check_only=check_only)
                assert r.status_code == 400, (ifname, r.text)
                assert "allow-interface" in r.json()["error"], r.text
                answers.setdefault((template, check_only), set()).add(
                    r.json()["error"].replace(repr(ifname), "IF"))
    # the same words whether the host has the interface or not
    assert all(len(words) == 1 for words in answers.values()), answers
    assert client.get("/api/experiments", headers=bearer(alice)).json() == []
    # root lends one: then it may be named (checked only here: moving it needs root)
    assert admin.main(home, ["allow-interface", "veth-out"]) == 0
    admin.main(home, ["interfaces"])
    assert capsys.readouterr().out.splitlines()[-1] == "veth-out"
    r = upload(client, alice, EDGE.format(name="edgy", ifname="veth-out"), check_only=True)
    assert r.status_code == 200, r.text
    r = upload(client, alice, EDGE.format(name="edgy", ifname="lo"), check_only=True)
    assert r.status_code == 400
    # an edge without an uplink interface would be a veth into the host's own network
    r = upload(client, alice, EDGE.format(name="edgy", ifname="veth-out").replace(
        "  uplink: {interface: veth-out, address: 198.51.100.2/24, via: 198.51.100.1}\n",
        "  delay: 1ms\n"), check_only=True)
    assert r.status_code == 400 and "host's own network" in r.json()["error"], r.text
    admin.main(home, ["disallow-interface", "veth-out"])
    r = upload(client, alice, EDGE.format(name="edgy", ifname="veth-out"), check_only=True)
    assert r.status_code == 400


# -- finding: same-name creates from two projects at once -----------------------------
PAIR = "name: {name}\nnodes: [a, b]\nlinks:\n  - {{nodes: [a, b]}}\n"


def test_two_projects_creating_one_name_at_once_the_winner_owns_it(site, monkeypatch):
    """Each create takes a while (as a swap-in does); both requests pass the name check
    before either stores the experiment. The experiment must belong to the project whose
    create succeeded, and the loser must leave no claim behind."""
    import threading
    app, _, tokens, home = site
    real_create = Lab.create

    def slow_create(self, exp, *a, **kw):
        time.sleep(0.5)
        return real_create(self, exp, *a, **kw)
    monkeypatch.setattr(Lab, "create", slow_create)
    for round_ in range(3):
        name = f"race{round_}"
        answers = {}
        gate = threading.Barrier(2)

        def create(user, project, gate=gate, answers=answers, name=name):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                client = TestClient(app)
            gate.wait()
            answers[project] = client.post(
                "/api/experiments", headers=bearer(tokens[user]),
                json={"project": project, "filename": "p.yaml", "swapin": False,
                      "text": PAIR.format(name=name)})
        threads = [threading.Thread(target=create, args=ua)
                   for ua in (("alice", "blue"), ("bob", "red"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        won = [p for p, r in answers.items() if r.status_code == 200]
        assert len(won) == 1, {p: r.text for p, r in answers.items()}
        lost = ({"blue", "red"} - set(won)).pop()
        assert "already exists" in answers[lost].json()["error"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            client = TestClient(app)
        listed = client.get("/api/experiments", headers=bearer(tokens["admin"])).json()
        assert [(x["name"], x["project"]) for x in listed] == [(name, won[0])]
        # the loser's members do not see it; the winner's do
        user = {"blue": "alice", "red": "bob"}
        assert client.get(f"/api/experiments/{name}",
                          headers=bearer(tokens[user[lost]])).status_code == 403
        assert client.get(f"/api/experiments/{name}",
                          headers=bearer(tokens[user[won[0]]])).status_code == 200
        r = client.post(f"/api/experiments/{name}/terminate",
                        headers=bearer(tokens[user[won[0]]]))
        assert r.status_code == 200, r.text
        lab = Lab(home)
        try:
            assert lab.store.db.execute("SELECT count(*) FROM portal_experiments"
                                        ).fetchone()[0] == 0
        finally:
            lab.close()


# -- finding: accounts -------------------------------------------------------------------
def _login(client, user, password=PASSWORD):
    return client.post("/api/login", json={"user": user, "password": password})


def _age_failures(home, seconds):
    """As if the last failed login were ``seconds`` older."""
    lab = Lab(home)
    try:
        lab.store.db.execute("UPDATE portal_login_failures SET last = last - ?", (seconds,))
    finally:
        lab.close()


def test_logins_back_off_per_user_and_per_address(site, monkeypatch):
    _, client, _, home = site
    assert [auth._backoff(n) for n in range(auth.FREE_TRIES - 1, auth.FREE_TRIES + 4)] \
        == [0, 1, 2, 4, 8] and auth._backoff(100) == auth.MAX_BACKOFF_S
    # steps of 100 s here, so a loaded machine's pauses do not end one
    real = auth._backoff
    monkeypatch.setattr(auth, "_backoff", lambda n: 100 * real(n))
    for _ in range(auth.FREE_TRIES):
        assert _login(client, "alice", "wrong").status_code == 401
    # now even the right password waits (the answer does not say whether it was right)
    r = _login(client, "alice")
    assert r.status_code == 429 and int(r.headers["Retry-After"]) > 50, r.text
    _age_failures(home, 100)                        # the first step of the backoff is over
    assert _login(client, "alice", "wrong").status_code == 401
    r = _login(client, "alice")
    assert r.status_code == 429 and int(r.headers["Retry-After"]) > 150   # it doubled
    _age_failures(home, 200)
    assert _login(client, "alice").status_code == 200      # a success clears the name
    # one address guessing many names (known or not) backs off as well
    _age_failures(home, auth.FORGET_S + 1)                 # forgotten after an hour
    for i in range(auth.FREE_TRIES):
        assert _login(client, f"guess{i}", "wrong").status_code == 401
    r = _login(client, "bob")
    assert r.status_code == 429, r.text
    # one name guessed from many addresses backs off, an unknown name exactly like a known
    lab = Lab(home)
    try:
        for name in ("bob", "nosuch"):
            for i in range(auth.FREE_TRIES):
                with pytest.raises(auth.AuthError) as e:
                    auth.login(lab.store.db, name, "wrong", address=f"192.0.2.{i}")
                assert e.value.status == 401
            with pytest.raises(auth.AuthError) as e:
                auth.login(lab.store.db, name, PASSWORD, address="192.0.2.99")
            assert e.value.status == 429 and e.value.retry_after > 50, name
    finally:
        lab.close()


def test_guesses_sent_at_once_do_not_slip_past_the_backoff(site, monkeypatch):
    """Twenty wrong passwords at the same moment (each a scrypt long): the count is taken
    before the password is checked, so only the free tries are checked at all (the
    backoff is an hour here, so no time passing lets one more through)."""
    import threading
    _, _, _, home = site
    monkeypatch.setattr(auth, "_backoff", lambda n: 0.0 if n < auth.FREE_TRIES else 3600.0)
    gate, answers = threading.Barrier(20), []

    def guess(i):
        lab = Lab(home)
        try:
            gate.wait()
            auth.login(lab.store.db, "alice", f"wrong {i}", address=f"198.51.100.{i}")
        except auth.AuthError as e:
            answers.append(e.status)
        finally:
            lab.close()
    threads = [threading.Thread(target=guess, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(answers) == 20 and set(answers) <= {401, 429}
    assert answers.count(401) == auth.FREE_TRIES, answers


def test_an_unknown_user_costs_one_scrypt_like_a_known_one(site, monkeypatch):
    _, _, _, home = site
    import hashlib
    calls = []
    real = hashlib.scrypt

    def counted(*a, **kw):
        calls.append(1)
        return real(*a, **kw)
    lab = Lab(home)
    try:
        with pytest.raises(auth.AuthError):
            auth.login(lab.store.db, "nosuch", "warm-up")   # builds the dummy hash once
        monkeypatch.setattr(hashlib, "scrypt", counted)
        cost = {}
        for name in ("alice", "nosuch"):
            calls.clear()
            with pytest.raises(auth.AuthError):
                auth.login(lab.store.db, name, "wrong password")
            cost[name] = len(calls)
    finally:
        lab.close()
    assert cost == {"alice": 1, "nosuch": 1}


def test_a_new_password_or_removal_ends_sessions_and_tokens(site, capsys, monkeypatch):
    _, client, tokens, home = site
    r = _login(client, "alice")
    assert r.status_code == 200
    assert client.get("/api/me").status_code == 200
    assert client.get("/api/me", headers=bearer(tokens["alice"])).status_code == 200
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("another password\n"))
    assert admin.main(home, ["user", "passwd", "alice"]) == 0
    assert client.get("/api/me").status_code == 401                          # the session
    assert client.get("/api/me", headers=bearer(tokens["alice"])).status_code == 401
    # bob: removed while logged in and holding a token
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        other = TestClient(client.app)
    assert _login(other, "bob").status_code == 200
    assert admin.main(home, ["user", "rm", "bob"]) == 0
    assert other.get("/api/me").status_code == 401
    assert other.get("/api/me", headers=bearer(tokens["bob"])).status_code == 401
    capsys.readouterr()
    admin.main(home, ["list"])
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["USER", "ADMIN", "PROJECTS"]
    assert "bob" not in out and "alice  " in out and "blue(leader)" in out
    assert "\nred      -\n" in out                          # a project without members


def test_tokens_expire_and_are_revoked(site, capsys):
    _, client, tokens, home = site
    lab = Lab(home)
    try:
        (expires,) = lab.store.db.execute("SELECT max(expires) FROM portal_tokens").fetchone()
        assert expires is not None and expires < time.time() + 31 * 86400
        uid = projects.user_id(lab.store.db, "alice")
        with pytest.raises(auth.AuthError, match="at most"):
            auth.new_token(lab.store.db, uid, ttl_s=400 * 86400)
        old = auth.new_token(lab.store.db, uid, "old")
        lab.store.db.execute("UPDATE portal_tokens SET expires = ? WHERE label = 'old'",
                             (time.time() - 1,))
    finally:
        lab.close()
    assert client.get("/api/me", headers=bearer(old)).status_code == 401
    # root revokes one by its ID
    admin.main(home, ["token", "list", "alice"])
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split() == ["ID", "USER", "LABEL", "CREATED", "EXPIRES"]
    first = rows[1].split()[0]
    assert admin.main(home, ["token", "rm", first]) == 0
    assert client.get("/api/me", headers=bearer(tokens["alice"])).status_code == 401
    with pytest.raises(WanlabError, match="no token"):
        admin.main(home, ["token", "rm", first])
    # a user revokes their own through the API, never another's
    mine = client.post("/api/tokens", headers=bearer(tokens["bob"]), json={"label": "ci"})
    listed = client.get("/api/tokens", headers=bearer(tokens["bob"])).json()
    assert [t["label"] for t in listed] == ["", "ci"] and "digest" not in listed[0]
    assert all(t["user"] == "bob" for t in listed)
    ci = listed[1]["id"]
    assert client.delete(f"/api/tokens/{ci}", headers=bearer(tokens["admin"])).status_code \
        == 404
    assert client.delete(f"/api/tokens/{ci}", headers=bearer(tokens["bob"])).status_code \
        == 200
    assert client.get("/api/me", headers=bearer(mine.json()["token"])).status_code == 401


def test_projects_and_users_with_experiments_are_not_removed(site):
    _, client, tokens, home = site
    r = upload(client, tokens["alice"], PAIR.format(name="kept"))
    assert r.status_code == 200, r.text
    with pytest.raises(WanlabError, match="kept.*terminate them first"):
        admin.main(home, ["project", "rm", "blue"])
    with pytest.raises(WanlabError, match="owns experiment.*kept"):
        admin.main(home, ["user", "rm", "alice"])
    assert admin.main(home, ["project", "rm", "red"]) == 0
    client.post("/api/experiments/kept/terminate", headers=bearer(tokens["alice"]))
    assert admin.main(home, ["project", "rm", "blue"]) == 0
    assert admin.main(home, ["user", "rm", "alice"]) == 0


def test_every_answer_carries_the_security_headers(site):
    _, client, tokens, _ = site
    answers = [client.get("/api/experiments"),                              # 401
               client.get("/api/experiments", headers=bearer(tokens["alice"])),
               client.get("/api/nosuch", headers=bearer(tokens["alice"])),     # 404
               client.get("/"), _login(client, "alice", "wrong")]
    for r in answers:
        h = r.headers
        assert "frame-ancestors 'none'" in h["content-security-policy"], r.url
        assert "script-src 'self';" in h["content-security-policy"]
        assert h["x-content-type-options"] == "nosniff"
        assert h["x-frame-options"] == "DENY" and h["referrer-policy"] == "no-referrer"
    # an oversized body is refused before it is read: each route has its bound (a create
    # may carry files, a project's file is its bytes)
    from wanlab.portal import app as portal_app
    json_type = {**bearer(tokens["alice"]), "content-type": "application/json"}
    for method, path, bound in (("POST", "/api/tokens", portal_app.MAX_BODY_BYTES),
                                ("POST", "/api/experiments", portal_app.CREATE_BODY_BYTES),
                                ("PUT", "/api/projects/blue/files/a.tgz",
                                 portal_app.STORE_BODY_BYTES)):
        r = client.request(method, path, headers=json_type, content=b"x" * (bound + 1))
        assert r.status_code == 413 and "larger than" in r.json()["error"], (path, r.text)


# -- finding: host files reached portal users ---------------------------------------------
TARFILES = """name: tarry
nodes:
  - {{name: a, image: default, {what}}}
  - b
links:
  - {{nodes: [a, b]}}
"""
TARFILES_NS = """set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
tb-set-node-os $a default
tb-set-node-tarfiles $a / {path}
$ns duplex-link $a $b 10Mb 1ms DropTail
$ns run
"""


def test_an_upload_naming_a_host_file_is_refused_the_same_whether_it_exists(site):
    _, client, tokens, _ = site
    answers = set()
    for path in ("/etc/shadow", "/root/nosuch/evil.tgz"):
        for what in (f"tarfiles: [{{dir: /, file: {path}}}]",
                     f"packages: [{path}.deb]"):
            for check_only in (True, False):
                r = upload(client, tokens["alice"], TARFILES.format(what=what),
                           check_only=check_only)
                assert r.status_code == 400, r.text
                assert path not in r.json()["error"]
                answers.add((what.split(":")[0], r.json()["error"], r.json()["line"]))
        r = upload(client, tokens["alice"], TARFILES_NS.format(path=path), filename="t.tcl")
        assert r.status_code == 400 and "tarfiles" in r.json()["error"], r.text
        assert r.json()["line"] == 3                  # the node's
        answers.add(("ns", r.json()["error"], r.json()["line"]))
    assert len(answers) == 3, answers            # one answer per kind, whatever the path
    # dynamic routing runs FRR (SYS_ADMIN) from the nodes' image files, in their user
    # namespace: a portal experiment may route dynamically
    r = upload(client, tokens["alice"], "routing: ospf\n" + PAIR.format(name="ospf"),
               check_only=True)
    assert r.status_code == 200, r.text
    assert client.get("/api/experiments", headers=bearer(tokens["alice"])).json() == []


def test_no_upload_runs_python_or_a_mininet_script(site, tmp_path):
    """A Mininet script (or any Python description) is code run as root: the portal takes
    ns and YAML only, and its parse child refuses any other file, whatever it is asked."""
    _, client, tokens, _ = site
    marker = tmp_path / "ran"
    script = (f"open({str(marker)!r}, 'w').write('x')\n"
              "from mininet.net import Mininet\nMininet().start()\n")
    for name in ("net.py", "net.PY", "net.py.yaml"):
        r = upload(client, tokens["admin"], script, filename=name, check_only=True)
        assert r.status_code == 400, r.text
    for name in ("x.py", "x.mn", "x"):
        assert "only ns-2 and YAML" in specs.child({"file": name, "text": script})["error"]
    assert not marker.exists()


def test_an_administrators_modify_of_roots_experiment_gets_the_upload_checks(site):
    """An administrator is no root: a new description for one of root's own experiments
    (no project) named host files and interfaces unchecked."""
    _, client, tokens, home = site
    from wanlab.frontends import yaml_spec
    lab = Lab(home)
    try:
        lab.create(yaml_spec.loads(TARFILES.format(what="os: default")), swapin=False)
    finally:
        lab.close()
    for text in (TARFILES.format(what="tarfiles: [{dir: /, file: /etc/shadow}]"),
                 EXTERNAL.format(ifname="eth0").replace("name: br", "name: tarry")):
        r = client.post("/api/experiments/tarry/modify", headers=bearer(tokens["admin"]),
                        json={"filename": "x.yaml", "text": text})
        assert r.status_code == 400, r.text
        assert "/etc/shadow" not in r.text
    lab = Lab(home)
    try:
        assert all(not n.tarfiles and n.external is None for n in lab.get("tarry").ir.nodes)
    finally:
        lab.close()


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="needs root")
def test_a_portal_console_reads_no_host_file_and_no_portal_environment(site, test_image,
                                                                      monkeypatch):
    """A node the upload gave no image gets the default one: its console sees the image's
    files, not the host's (a root-only marker file in /etc, /etc/shadow), and a clean
    environment, not the portal's."""
    import os
    import secrets
    _, client, tokens, _ = site
    secret = "SECRET-" + secrets.token_hex(8)
    marker = f"/etc/wanlab-portal-test-{os.getpid()}"
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, secret.encode() + b"\n")
    os.close(fd)
    monkeypatch.setenv("WANLAB_PORTAL_TEST_ENV", "ENVMARK-" + secret)
    alice = bearer(tokens["alice"])
    try:
        r = upload(client, tokens["alice"], PAIR.format(name="peek"), swapin=True)
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "active"
        with client.websocket_connect("/api/experiments/peek/console/a", headers=alice) as ws:
            for bad in ('{"resize": [1e999, 1]}', '{"resize": [null, "x"]}', '{"resize": 7}'):
                ws.send_text(bad)             # ignored: the console stays open
            ws.send_bytes(f"cat {marker}; cat /etc/shadow; env; echo DO''NE\n".encode())
            got = b""
            while b"DONE" not in got:
                got += ws.receive_bytes()
            ws.send_bytes(b"exit\n")              # the shell ends, the portal closes
            with contextlib.suppress(WebSocketDisconnect):
                while True:
                    ws.receive_bytes()
        out = got.decode(errors="replace")
        assert "No such file" in out, out
        assert secret not in out, out
        host_shadow = [line for line in open("/etc/shadow").read().splitlines() if "$" in line]
        assert not any(line in out for line in host_shadow)
        assert "PATH=" in out and "ENVMARK" not in out and "WANLAB_" not in out, out
    finally:
        os.unlink(marker)
        client.post("/api/experiments/peek/terminate", headers=alice)


def test_an_ns_upload_sourcing_files_learns_no_host_path(site):
    """``source`` in an upload: refused, and the answer names no folder of the host (the
    upload is read in a temporary one)."""
    _, client, tokens, _ = site
    head = "set ns [new Simulator]\nsource tb_compat.tcl\n"
    for word in ("/etc/shadow", "../../etc/passwd", "nosuch.tcl", "."):
        r = upload(client, tokens["alice"], head + f"source {word}\n$ns run\n",
                   filename="s.tcl", check_only=True)
        assert r.status_code == 400 and r.json()["line"] == 3, r.text
        assert "/tmp" not in r.text and "wanlab-upload" not in r.text, r.text


# -- finding: no size bounds; parses held the server ----------------------------------
def test_uploads_are_bounded_in_size_before_they_are_read(site):
    _, client, tokens, _ = site
    big = "# " + "x" * specs.MAX_BYTES + "\nnodes: [a]\n"
    r = upload(client, tokens["alice"], big)
    assert r.status_code == 400 and "larger than" in r.json()["error"], r.text[:200]
    # 96 000 nodes in under 1 MB: refused by counting, before the IR is built
    many = "nodes: [" + ", ".join(f"n{i}" for i in range(96000)) + "]\n"
    assert len(many) < specs.MAX_BYTES
    r = upload(client, tokens["alice"], many, check_only=True)
    assert r.status_code == 400 and "96000 nodes: more than the 2000" in r.json()["error"]
    loop = ("set ns [new Simulator]\nsource tb_compat.tcl\n"
            "for {set i 0} {$i < 2500} {incr i} {set n($i) [$ns node]}\n$ns run\n")
    r = upload(client, tokens["alice"], loop, filename="many.tcl", check_only=True)
    assert r.status_code == 400 and "2500 nodes: more than" in r.json()["error"], r.text
    events = "nodes: [a, b]\nlinks: [{nodes: [a, b]}]\nevents: [" + "{}, " * 50001 + "]\n"
    r = upload(client, tokens["alice"], events, check_only=True)
    assert r.status_code == 400 and "50001 events" in r.json()["error"], r.text[:300]


def test_a_parse_runs_in_a_bounded_child_never_in_the_server(site, monkeypatch):
    """The server's own front ends and planner are broken here: uploads are still read and
    checked (in the child).
    An endless ns loop ends at the child's time limit while the server answers others."""
    import threading

    import wanlab.frontends
    import wanlab.frontends.ns
    import wanlab.frontends.yaml_spec
    import wanlab.portal.app as app_module

    def not_here(*a, **kw):
        raise AssertionError("an upload was parsed in the server process")
    for mod, fn in ((wanlab.frontends, "load"), (wanlab.frontends.ns, "parse"),
                    (wanlab.frontends.yaml_spec, "loads"), (app_module, "make_plan")):
        monkeypatch.setattr(mod, fn, not_here)
    _, client, tokens, _ = site
    for filename in ("figure2.tcl", "figure2.yaml"):
        text = open(__file__.rsplit("/", 2)[0] + "/examples/" + filename).read()
        r = upload(client, tokens["alice"], text, filename=filename, check_only=True)
        assert r.status_code == 200 and r.json()["nodes"] == 3, r.text
    monkeypatch.setattr(specs, "TIMEOUT_S", 15.0)
    answer = {}

    def endless():
        answer["r"] = upload(client, tokens["alice"], "set ns [new Simulator]\nwhile 1 {}\n",
                             filename="loop.tcl", check_only=True)
    t = threading.Thread(target=endless)
    t.start()
    try:
        # the server answers meanwhile (the loop is another process's)
        while not specs._slots._value < specs.PARSES and t.is_alive():
            time.sleep(0.05)
        r = client.get("/api/experiments", headers=bearer(tokens["alice"]))
        assert r.status_code == 200 and t.is_alive()
    finally:
        t.join(120)
    r = answer["r"]
    assert r.status_code == 400 and "longer than 15 s" in r.json()["error"], r.text
    # memory: the child's bound (1 GiB) holds for its tclsh as well
    r = upload(client, tokens["alice"], "set ns [new Simulator]\n"
               "set s [string repeat x 600000000]\nappend s $s\n", filename="mem.tcl",
               check_only=True)
    assert r.status_code == 400 and f"{specs.MEMORY_BYTES >> 20} MB" in r.json()["error"], \
        r.text
    # every parse slot taken: busy (503) at once, not a worker held
    monkeypatch.setattr(specs, "QUEUE_S", 0.1)
    for _ in range(specs.PARSES):
        specs._slots.acquire()
    try:
        r = upload(client, tokens["alice"], "nodes: [a]\n", check_only=True)
        assert r.status_code == 503 and "busy" in r.json()["error"]
    finally:
        for _ in range(specs.PARSES):
            specs._slots.release()


def test_no_portal_console_on_a_projects_node_without_an_image(site):
    """A project's experiment stored before every portal node got an image: its image-less
    node's console (the host's files) is root's alone; one with an image opens."""
    import dataclasses

    from conftest import pair
    _, client, tokens, home = site
    lab = Lab(home)
    try:
        alice = auth.User(projects.user_id(lab.store.db, "alice"), "alice", False)
        projects.claim(lab.store.db, "old", projects.project_id(lab.store.db, "blue"), alice)
        exp = pair("old")
        exp = dataclasses.replace(exp, nodes=(exp.nodes[0],
                                              dataclasses.replace(exp.nodes[1],
                                                                  image="default")))
        lab.create(exp, swapin=False)
    finally:
        lab.close()
    for node, expect in (("a", b"console is root's"), ("b", b"not active")):
        with client.websocket_connect(f"/api/experiments/old/console/{node}",
                                      headers=bearer(tokens["alice"])) as ws:
            assert expect in ws.receive_bytes(), node
