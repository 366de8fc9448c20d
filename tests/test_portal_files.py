"""Files a portal upload brings: sent with the description, or from its project's store.

A description names them by plain name (``NAME``, ``project:NAME``), never by host path; the
portal keeps the experiment's own copies and setup unpacks them confined in the node's root
(docs/portal.md, "Files an upload brings"). In-process (Starlette's test client); one real
experiment with an image node for what lands in a node."""

import base64
import io
import os
import secrets
import subprocess
import tarfile
import warnings

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from test_portal_auth import PASSWORD, bearer  # noqa: E402
from test_portal_security import site, upload  # noqa: E402, F401

from wanlab.errors import SpecError  # noqa: E402
from wanlab.frontends import normalize, traces  # noqa: E402
from wanlab.lifecycle import Lab  # noqa: E402
from wanlab.portal import admin, files, projects  # noqa: E402


def tgz(members: list[tuple[str, bytes | None, str | None]]) -> bytes:
    """A gzip tarball of (name, data, symlink target) members, names kept as given."""
    buf = io.BytesIO()
    with warnings.catch_warnings(), tarfile.open(fileobj=buf, mode="w:gz") as t:
        warnings.simplefilter("ignore")
        for name, data, link in members:
            ti = tarfile.TarInfo(name)
            if link is not None:
                ti.type, ti.linkname = tarfile.SYMTYPE, link
                t.addfile(ti)
            else:
                ti.size, ti.mode = len(data or b""), 0o644
                t.addfile(ti, io.BytesIO(data or b""))
    return buf.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


ONE = """name: {name}
nodes:
  - {{name: a, image: default, {what}}}
"""


def put(client, token, project, name, data):
    return client.put(f"/api/projects/{project}/files/{name}", headers=bearer(token),
                      content=data)


TRACED = """name: {name}
nodes: [a, b]
links:
  - name: link0
    nodes: [a, b]
    delay: 10ms
    ab: {{bandwidth: {{trace: cell.down}}}}
"""


def test_traces_and_schedules_come_from_the_upload_and_the_link_form_picks_among_them(
        site):  # noqa: F811
    """A description's trace is read from the files sent with it; every file sent is kept
    in the experiment, and the link form switches a direction to one of them (a trace or
    a schedule) by its plain name, never by a host path. Stored, not swapped in: what the
    form accepts goes on to the experiment, which refuses it for that reason only."""
    app, client, tokens, home = site
    alice = tokens["alice"]
    sent = {"cell.down": b64(b"0\n1\n1\n5\n"), "other.up": b64(b"3\n7\n"),
            "sat.csv": b64(b"time,delay\n0,20ms\n2s,600ms\n"), "bad.down": b64(b"1\nx\n")}
    # without the file, the description's trace cannot be read
    r = upload(client, alice, TRACED.format(name="cell"), check_only=True)
    assert r.status_code == 400 and "cell.down" in r.json()["error"], r.text
    r = upload(client, alice, TRACED.format(name="cell"), files=sent)
    assert r.status_code == 200, r.text
    assert r.json()["warnings"] == [
        f"file {n} was uploaded but the description does not name it (it is kept: the "
        f"link form can switch to it)" for n in ("bad.down", "other.up", "sat.csv")]
    x = client.get("/api/experiments/cell", headers=bearer(alice)).json()
    assert x["uploads"] == ["bad.down", "cell.down", "other.up", "sat.csv"]
    assert x["topology"]["links"][0]["ab"]["impair"][0].startswith(
        "trace cell.down (4 opportunities"), x["topology"]
    url = "/api/experiments/cell/links/link0"
    for body, field, words in (
            ({"trace": "/etc/hostname"}, "trace", "a plain file name"),
            ({"trace": "../../cell/uploads/given/cell.down"}, "trace", "a plain file name"),
            ({"trace": "nosuch.down", "dir": "ab"}, "trace", "no file 'nosuch.down'"),
            ({"trace": "bad.down"}, "trace", "bad.down:2: 'x' is not a whole number"),
            ({"trace": "cell.down", "bandwidth": "10Mb"}, "trace", "give one of them"),
            ({"schedule": "cell.down"}, "schedule", "cell.down"),
            ({"schedule": "/etc/passwd linear"}, "schedule", "a plain file name")):
        r = client.post(url, json=body, headers=bearer(alice))
        assert r.status_code == 400 and r.json().get("field") == field, (body, r.text)
        assert words in r.json()["error"] and home not in r.json()["error"], (body, r.text)
    for body in ({"trace": "other.up 1s noloop", "dir": "ba"},
                 {"schedule": "sat.csv linear loop", "dir": "ab"}, {"schedule": "none"},
                 {"bandwidth": "10Mb", "dir": "ab"}):
        r = client.post(url, json=body, headers=bearer(alice))
        assert r.status_code == 400 and "not active" in r.json()["error"], (body, r.text)
    # a modify reads its description beside the kept files (a file sent again replaces
    # its copy), and keeps them all
    mod = "/api/experiments/cell/modify"
    r = client.post(mod, headers=bearer(alice), json={
        "filename": "x.yaml", "text": TRACED.format(name="cell").replace("10ms", "20ms")})
    assert r.status_code == 200, r.text
    r = client.post(mod, headers=bearer(alice), json={
        "filename": "x.yaml", "text": TRACED.format(name="cell"),
        "files": {"cell.down": b64(b"2\n4\n")}})
    assert r.status_code == 200, r.text
    x = client.get("/api/experiments/cell", headers=bearer(alice)).json()
    assert x["uploads"] == ["bad.down", "cell.down", "other.up", "sat.csv"]
    assert x["topology"]["links"][0]["ab"]["impair"][0].startswith(
        "trace cell.down (2 opportunities"), x["topology"]
    # tevc's own door types its words under the same resolver: kept names, no path
    lab = Lab(home)
    try:
        exp, kept = lab.get("cell").ir, files.resolver(lab.store.folder("cell"))
    finally:
        lab.close()
    with traces.confined_here(kept):
        ev = normalize.event(exp, 0.0, "link0", "bandwidth", ["trace", "other.up", "ab"])
        assert ev.value["trace"]["ms"] == [3, 7] and ev.value["trace"]["file"] == "other.up"
        with pytest.raises(SpecError, match="a plain file name"):
            normalize.event(exp, 0.0, "link0", "bandwidth", ["trace", "/etc/hostname"])
    with traces.confined_here(), pytest.raises(SpecError, match="only in the experiment's"):
        normalize.event(exp, 0.0, "link0", "schedule", ["sat.csv"])


def test_file_names_are_plain_and_only_uploaded_or_stored_files_are_named(site):  # noqa: F811
    _, client, tokens, home = site
    alice = tokens["alice"]
    ok = b64(tgz([("hello", b"hi\n", None)]))
    tar = "tarfiles: [{{dir: /opt, file: {f}}}]"
    # names sent with the upload: no '/', no '..', a safe charset
    for bad in ("../app.tgz", "a/app.tgz", "..", ".hidden", "app tgz", "x" * 101, "a..b"):
        r = upload(client, alice, ONE.format(name="n", what=tar.format(f="app.tgz")),
                   files={bad: ok}, check_only=True)
        assert r.status_code == 400 and "plain file name" in r.json()["error"], (bad, r.text)
    # references in the description: leading out of the upload, or into a folder
    for ref in ("../app.tgz", "sub/app.tgz", "/tmp/app.tgz", "project:../app.tgz"):
        r = upload(client, alice, ONE.format(name="n", what=tar.format(f=ref)),
                   files={"app.tgz": ok}, check_only=True)
        assert r.status_code == 400, (ref, r.text)
        assert "name files on the host" in r.json()["error"] and r.json()["line"] == 3
    # a name that was not uploaded; a .deb the same way
    r = upload(client, alice, ONE.format(name="n", what=tar.format(f="other.tgz")),
               files={"app.tgz": ok}, check_only=True)
    assert r.status_code == 400 and "other.tgz was not uploaded" in r.json()["error"]
    r = upload(client, alice, ONE.format(name="n", what="packages: [../x.deb]"),
               check_only=True)
    assert r.status_code == 400 and "packages name files on the host" in r.json()["error"]
    # an OCI image read from a host file or folder, however spelt
    for ref in ("oci-archive:/etc/web.tar", "oci:/var/lib/x", "docker-archive:../d.tar:a:b"):
        r = upload(client, alice, f"name: n\nnodes:\n  - {{name: a, image: '{ref}'}}\n",
                   check_only=True)
        assert r.status_code == 400, (ref, r.text)
        assert "image names a file on the host" in r.json()["error"], (ref, r.text)
    # bounds: count, encoding
    r = upload(client, alice, ONE.format(name="n", what=tar.format(f="f0.tgz")),
               files={f"f{i}.tgz": ok for i in range(files.FILES_MAX + 1)}, check_only=True)
    assert r.status_code == 400 and "at most 16" in r.json()["error"], r.text
    r = upload(client, alice, ONE.format(name="n", what=tar.format(f="app.tgz")),
               files={"app.tgz": "not base64!"}, check_only=True)
    assert r.status_code == 400 and "not base64" in r.json()["error"]
    # an uploaded name that is fine
    r = upload(client, alice, ONE.format(name="n", what=tar.format(f="app.tgz")),
               files={"app.tgz": ok}, check_only=True)
    assert r.status_code == 200, r.text
    # an ns script names them the same way (tb-set-node-tarfiles, tb-set-node-rpms)
    assert put(client, alice, "blue", "tool.deb", b"!<arch>\n").status_code == 200
    ns = ("set ns [new Simulator]\nsource tb_compat.tcl\nset a [$ns node]\n"
          "tb-set-node-os $a default\ntb-set-node-tarfiles $a /opt {f}\n"
          "tb-set-node-rpms $a project:tool.deb\n$ns run\n")
    r = upload(client, alice, ns.format(f="app.tgz"), filename="t.tcl", files={"app.tgz": ok},
               check_only=True)
    assert r.status_code == 200, r.text
    r = upload(client, alice, ns.format(f="../app.tgz"), filename="t.tcl",
               files={"app.tgz": ok}, check_only=True)
    assert r.status_code == 400 and r.json()["line"] == 3, r.text
    # the store's names are checked the same way
    for bad in ("a..b", ".hidden", "a%2Fb", "a%20b"):
        r = put(client, alice, "blue", bad, b"data")
        assert r.status_code in (400, 404, 405), (bad, r.text)
    assert [f["name"] for f in client.get("/api/projects/blue/files",
                                          headers=bearer(alice)).json()] == ["tool.deb"]
    assert not os.path.exists(os.path.join(files.store_root(home), "blue", "a"))


def test_a_projects_files_are_its_members_alone(site):  # noqa: F811
    _, client, tokens, home = site
    alice, bob = tokens["alice"], tokens["bob"]
    lab = Lab(home)
    projects.add_user(lab.store.db, "carol", PASSWORD)
    projects.add_member(lab.store.db, "blue", "carol", "member")
    from wanlab.portal import auth
    carol = auth.new_token(lab.store.db, projects.user_id(lab.store.db, "carol"))
    lab.close()
    secret = b"red's secret " + secrets.token_hex(8).encode()
    assert put(client, bob, "red", "secret.tgz", secret).json() == {"name": "secret.tgz",
                                                                   "size": len(secret)}
    # stored root-only, beneath the portal's state
    path = os.path.join(files.store_root(home), "red", "secret.tgz")
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
    # another project's member: 403 for everything, alike for a missing project
    for project in ("red", "nosuch"):
        for method in ("GET", "PUT", "DELETE"):
            r = client.request(method, f"/api/projects/{project}/files/secret.tgz",
                               headers=bearer(alice), content=b"x" if method == "PUT" else None)
            assert r.status_code == 403, (project, method, r.text)
        assert client.get(f"/api/projects/{project}/files",
                          headers=bearer(alice)).status_code == 403
    # nor through a description: project:NAME is the uploader's project's store
    r = upload(client, alice, ONE.format(name="n", what="tarfiles: [{dir: /opt, "
                                                         "file: project:secret.tgz}]"),
               check_only=True)
    assert r.status_code == 400 and "no file 'secret.tgz' in project blue" in r.json()["error"]
    assert client.get("/api/projects/red/files/secret.tgz",
                      headers=bearer(bob)).content == secret
    # members put, only leaders (and administrators) remove
    assert put(client, carol, "blue", "c.tgz", b"c").status_code == 200
    r = client.delete("/api/projects/blue/files/c.tgz", headers=bearer(carol))
    assert r.status_code == 403
    assert client.delete("/api/projects/blue/files/c.tgz", headers=bearer(alice)).json() \
        == {"ok": True}
    assert client.get("/api/projects/blue/files/c.tgz", headers=bearer(alice)).status_code \
        == 404
    # a removed project's files go with it: a new project of that name starts empty
    assert admin.main(home, ["project", "rm", "red"]) == 0
    assert not os.path.exists(os.path.dirname(path))
    assert admin.main(home, ["project", "add", "red"]) == 0
    assert admin.main(home, ["member", "add", "red", "alice"]) == 0
    assert client.get("/api/projects/red/files", headers=bearer(alice)).json() == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_uploaded_and_stored_tarballs_are_unpacked_in_the_node_alone(site, test_image,  # noqa: F811,E501
                                                                      tmp_path):
    """A tarball sent with the description and one of the project's store land in the node,
    and so does an uploaded .deb; a tarball with an absolute member, a link out of the root
    and a '..' member writes nothing on the host (setup runs confined in the node's root)."""
    _, client, tokens, home = site
    alice = tokens["alice"]
    tag = f"{os.getpid()}-{secrets.token_hex(4)}"
    markers = {k: f"/tmp/wanlab-upload-escape-{k}-{tag}" for k in ("abs", "link", "dotdot")}
    assert put(client, alice, "blue", "lib.tgz",
               tgz([("lib/hello", f"from the store {tag}\n".encode(), None)])).status_code \
        == 200
    given = {
        "app.tgz": tgz([("app/hello", f"from the upload {tag}\n".encode(), None)]),
        # an absolute member, and a link to the host's /tmp ...
        "evil.tgz": tgz([(markers["abs"], b"abs\n", None), ("out", None, "/tmp")]),
        # ... which the next tarball unpacks through
        "through.tgz": tgz([(os.path.basename(markers["link"]), b"link\n", None)]),
        "dotdot.tgz": tgz([("../" * 12 + markers["dotdot"].lstrip("/"), b"dd\n", None)]),
    }
    pkg = tmp_path / "pkg"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN" / "control").write_text(
        "Package: wanlab-upload-test\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: wanlab <root@localhost>\nDescription: an uploaded package\n")
    (pkg / "usr/share/wanlab-upload").mkdir(parents=True)
    (pkg / "usr/share/wanlab-upload/hello").write_text(f"from the .deb {tag}\n")
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(pkg), str(tmp_path / "t.deb")],
                   check=True, capture_output=True)
    given["tool.deb"] = (tmp_path / "t.deb").read_bytes()
    spec = ONE.format(name="tarry", what="tarfiles: [{dir: /opt, file: app.tgz}, "
                                         "{dir: /srv, file: 'project:lib.tgz'}, "
                                         "{dir: /, file: evil.tgz}, "
                                         "{dir: /out, file: through.tgz}], "
                                         "packages: [tool.deb]")
    sent = {k: b64(v) for k, v in given.items() if k != "dotdot.tgz"}
    try:
        r = upload(client, alice, spec, files=sent, swapin=True)
        assert r.status_code == 200 and r.json()["state"] == "active", r.text
        lab = Lab(home)
        try:
            got = lab.exec("tarry", "a", ["cat", "/opt/app/hello", "/srv/lib/hello",
                                          "/usr/share/wanlab-upload/hello",
                                          markers["abs"], markers["link"]],
                           capture_output=True, text=True)
            folder = lab.store.folder("tarry", files.SUBFOLDER)
        finally:
            lab.close()
        assert got.stdout == (f"from the upload {tag}\nfrom the store {tag}\n"
                              f"from the .deb {tag}\nabs\nlink\n"), got.stdout + got.stderr
        # the experiment's copies: root-only
        for kind, name in (("given", "app.tgz"), ("project", "lib.tgz")):
            assert os.stat(os.path.join(folder, kind, name)).st_mode & 0o777 == 0o600
        assert os.stat(folder).st_mode & 0o777 == 0o700
        # a '..' member: the node's tar refuses it, the create is undone
        r = upload(client, alice, ONE.format(name="dotty", what="tarfiles: [{dir: /opt, "
                                                                "file: dotdot.tgz}]"),
                   files={"dotdot.tgz": b64(given["dotdot.tgz"])}, swapin=True)
        assert r.status_code == 400 and "unpacking dotdot.tgz at /opt" in r.json()["error"]
        assert home not in r.json()["error"], r.text         # nor the state folder's path
        names = [e["name"] for e in client.get("/api/experiments",
                                               headers=bearer(alice)).json()]
        assert names == ["tarry"]
        lab = Lab(home, create=False)
        try:
            assert not os.path.exists(lab.store.folder("dotty"))
        finally:
            lab.close()
    finally:
        client.post("/api/experiments/tarry/terminate", headers=bearer(alice))
        present = {k: p for k, p in markers.items() if os.path.lexists(p)}
        for p in present.values():
            os.unlink(p)
    assert present == {}, f"written on the host: {present}"
