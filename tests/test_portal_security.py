"""The portal hands out nothing of the host: each test plays an attack a project member
could try through the portal and checks it is refused (docs/security.md, "The portal").

In-process (Starlette's test client) unless a test needs a running experiment."""

import warnings

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from test_portal_auth import PASSWORD, bearer  # noqa: E402

from wanlab.lifecycle import Lab  # noqa: E402
from wanlab.portal import admin, auth, projects, tables  # noqa: E402
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
    import time
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
