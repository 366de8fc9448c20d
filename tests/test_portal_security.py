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
