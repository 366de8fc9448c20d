"""OCI images as node images: references (pure), the store (layers by digest, shared), and
nodes on each local transport, from images built here: a wanlab image export as the base
layer, a small layer of our own over it, the config set with umoci."""

import hashlib
import io
import json
import os
import re
import stat
import subprocess
import tarfile
import time

import pytest
from conftest import needs_root

from wanlab.errors import SpecError, WanlabError
from wanlab.frontends import load
from wanlab.model import imageref

# -- references (pure) -------------------------------------------------------------------


@pytest.mark.parametrize("given,canon", [
    ("alpine:3.19", "docker://alpine:3.19"),
    ("ghcr.io/nokia/srlinux", "docker://ghcr.io/nokia/srlinux:latest"),
    ("docker://localhost:5000/x/y:1", "docker://localhost:5000/x/y:1"),
    ("oci:img", "oci:/lab/img"),
    ("oci:img:v1", "oci:/lab/img:v1"),
    ("oci-archive:/x/a.tar", "oci-archive:/x/a.tar"),
    ("docker-archive:b.tar:b:latest", "docker-archive:/lab/b.tar:b:latest"),
])
def test_references_are_made_canonical(given, canon):
    assert imageref.canonical(given, "/lab") == canon
    assert imageref.store_name(canon) == imageref.store_name(canon)
    assert re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,62}", imageref.store_name(canon))


@pytest.mark.parametrize("bad", ["docker://-x:1", "docker://a/../b:1", "Alpine:3",
                                 "oci:", "oci:/a\nb", "docker-archive:a.tar:b:c:d"])
def test_bad_references_are_refused(bad):
    with pytest.raises(SpecError):
        imageref.canonical(bad, "/lab")


def test_yaml_and_ns_take_references(tmp_path):
    y = tmp_path / "t.yaml"
    y.write_text("nodes: [{name: a, image: 'oci:imgs/web:v1'}, {name: b, image: 'debian:12'}]\n")
    exp = load(str(y))
    assert exp.nodes[0].image == f"oci:{tmp_path}/imgs/web:v1"
    assert exp.nodes[1].image == "docker://debian:12"
    t = tmp_path / "t.tcl"
    t.write_text("set ns [new Simulator]\nsource tb_compat.tcl\nset a [$ns node]\n"
                 "tb-set-node-os $a oci-archive:a.tar\n$ns run\n")
    assert load(str(t)).nodes[0].image == f"oci-archive:{tmp_path}/a.tar"


def test_an_unreachable_reference_is_a_clear_error(tmp_path):
    from wanlab.backends.emulate import images, oci
    store = images.Images(str(tmp_path / "images"))
    with pytest.raises(WanlabError, match=r"docker://registry.invalid/x:1 cannot be fetched"
                                          r".*reaches no container registry"):
        oci.pull(store, "registry.invalid/x:1")
    with pytest.raises(WanlabError, match="no such folder"):
        oci.pull(store, f"oci:{tmp_path}/none")
    assert not os.listdir(os.path.join(store.root, "layers"))


# -- images built here -------------------------------------------------------------------

def _blob(layout, data: bytes) -> str:
    h = hashlib.sha256(data).hexdigest()
    with open(os.path.join(layout, "blobs", "sha256", h), "wb") as f:
        f.write(data)
    return "sha256:" + h


def _layout_from_tar(layout: str, layer: str, tag: str) -> None:
    """An OCI layout with one image of one uncompressed layer (the tar file ``layer``)."""
    os.makedirs(os.path.join(layout, "blobs", "sha256"))
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    h = hashlib.sha256()
    with open(layer, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    digest = "sha256:" + h.hexdigest()
    os.rename(layer, os.path.join(layout, "blobs", "sha256", h.hexdigest()))
    config = {"architecture": "amd64", "os": "linux", "config": {},
              "rootfs": {"type": "layers", "diff_ids": [digest]}}
    cfg = json.dumps(config).encode()
    man = json.dumps({"schemaVersion": 2, "mediaType":
                      "application/vnd.oci.image.manifest.v1+json",
                      "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                 "digest": _blob(layout, cfg), "size": len(cfg)},
                      "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                  "digest": digest, "size": os.path.getsize(
                                      os.path.join(layout, "blobs", "sha256",
                                                   digest[7:]))}]}).encode()
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": _blob(layout, man), "size": len(man),
            "annotations": {"org.opencontainers.image.ref.name": tag}}]}, f)


def _add_layer(layout: str, base: str, tag: str, layer: bytes, compress: str) -> None:
    """Image ``tag`` in ``layout``: image ``base``, then the tar ``layer`` compressed with
    the program ``compress``."""
    with open(os.path.join(layout, "index.json")) as f:
        index = json.load(f)
    (desc,) = [m for m in index["manifests"]
               if m["annotations"]["org.opencontainers.image.ref.name"] == base]

    def read(digest):
        with open(os.path.join(layout, "blobs", "sha256", digest[7:]), "rb") as f:
            return json.load(f)
    man = read(desc["digest"])
    config = read(man["config"]["digest"])
    packed = subprocess.run([compress, "-c"], input=layer, capture_output=True,
                            check=True).stdout
    config["rootfs"]["diff_ids"].append("sha256:" + hashlib.sha256(layer).hexdigest())
    cfg = json.dumps(config).encode()
    man["config"] = {**man["config"], "digest": _blob(layout, cfg), "size": len(cfg)}
    man["layers"].append({"mediaType": f"application/vnd.oci.image.layer.v1.tar+{compress}",
                          "digest": _blob(layout, packed), "size": len(packed)})
    m = json.dumps(man).encode()
    index["manifests"].append({**desc, "digest": _blob(layout, m), "size": len(m),
                               "annotations": {"org.opencontainers.image.ref.name": tag}})
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump(index, f)


def _umoci(*args):
    subprocess.run(["umoci", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def oci_images(tmp_path_factory, test_image):
    """``base`` (the default image's export, one layer) and ``web`` (base, then a layer
    adding /srv/index.html and /srv/owned (uid 1234) and removing /etc/issue, with Env,
    Cmd, WorkingDir and User) in one OCI layout; the same two as an OCI archive and a
    docker archive."""
    from wanlab.backends.emulate import images
    d = tmp_path_factory.mktemp("oci")
    store = images.Images(images.images_dir(""))
    # the default image's files, less what these nodes never run (/usr/share, Python,
    # Perl, FRR, dpkg's database): a base layer of ~90 MB
    (lower,) = store.lowerdirs(test_image)
    leave = ("usr/share", "usr/lib/python3.11", "usr/lib/frr", "var/lib",
             "usr/lib/x86_64-linux-gnu/perl", "usr/lib/x86_64-linux-gnu/perl-base",
             "usr/lib/x86_64-linux-gnu/gconv", "usr/lib/x86_64-linux-gnu/frr")
    subprocess.run(["tar", "--sort=name", "--numeric-owner", "--xattrs", "-C", lower,
                    *(f"--exclude=./{x}" for x in leave), "-cf", str(d / "base.tar"), "."],
                   check=True)
    layout = str(d / "layout")
    _layout_from_tar(layout, str(d / "base.tar"), "base")
    # the second layer, with an OCI whiteout, written with umoci
    extra = d / "extra"
    (extra / "srv").mkdir(parents=True)
    (extra / "srv" / "index.html").write_text("served\n")
    (extra / "srv" / "owned").write_text("")
    os.chown(extra / "srv" / "owned", 1234, 1234)
    _umoci("insert", "--image", f"{layout}:base", "--tag", "web", str(extra / "srv"), "/srv")
    _umoci("insert", "--image", f"{layout}:web", "--whiteout", "/etc/issue")
    _umoci("config", "--image", f"{layout}:web", "--config.env", "GREETING=hello oci",
           "--config.env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "--config.entrypoint", "sh", "--config.cmd", "-c",
           "--config.cmd", 'echo "$GREETING $(id -u):$(id -g) $(pwd)" > /tmp/started; sleep 600',
           "--config.workingdir", "/srv", "--config.user", "65534",
           "--config.exposedports", "80/tcp")
    # zweb: web, then a zstd-compressed layer adding /srv/z.txt
    _add_layer(layout, "web", "zweb", _tar([("srv", None), ("srv/z.txt", b"zstd\n")]),
               "zstd")
    subprocess.run(["tar", "-C", layout, "-cf", str(d / "web-oci.tar"), "."], check=True)
    subprocess.run(["skopeo", "--insecure-policy", "copy", "--quiet", f"oci:{layout}:web",
                    f"docker-archive:{d}/web-docker.tar:web:latest"], check=True)
    return d


@needs_root
def test_nodes_on_each_transport_share_layers(lab, oci_images, tmp_path, monkeypatch):
    from wanlab.backends.emulate import images
    monkeypatch.setenv("WANLAB_IMAGES", str(tmp_path / "images"))   # a store of its own
    d = oci_images
    spec = tmp_path / "t.yaml"
    spec.write_text(f"""
routing: static
nodes:
  - {{name: base, image: "oci:{d}/layout:base", startcmd: "cat /etc/issue > /tmp/issue"}}
  - {{name: web, image: "oci-archive:{d}/web-oci.tar:web"}}
  - {{name: dock, image: "docker-archive:{d}/web-docker.tar"}}
links:
  - {{nodes: [base, web]}}
  - {{nodes: [web, dock]}}
""")
    exp = load(str(spec))
    old = os.umask(0o077)       # the CLI's: the nodes' / was made 0700, users could not run
    try:
        lab.create(exp)
    finally:
        os.umask(old)
    store = images.Images(images.images_dir(""))
    recs = {n.name: store.need(n.image) for n in exp.nodes}
    # one base layer on disk for all three; web and dock (one image, two transports) are
    # the same layers and the same image id
    assert recs["web"].layers[-1:] == recs["base"].layers and len(recs["web"].layers) == 3
    assert recs["web"].layers == recs["dock"].layers
    assert recs["web"].oci["digest"] != recs["base"].oci["digest"]

    def run(node, *argv):
        return lab.exec(exp.name, node, list(argv), capture_output=True, text=True).stdout
    # the image's Entrypoint + Cmd start the node, in its WorkingDir as its User, with Env
    for node in ("web", "dock"):
        for _ in range(50):
            said = run(node, "cat", "/tmp/started")
            if said:
                break
            time.sleep(0.1)
        assert said == "hello oci 65534:65534 /srv\n", node    # the user's own group
        assert run(node, "sh", "-c", "echo $GREETING") == "hello oci\n"     # exec: Env too
        assert run(node, "cat", "/srv/index.html") == "served\n"
        assert run(node, "sh", "-c", "test -e /etc/issue || echo gone") == "gone\n"
    assert "Debian" in run("base", "cat", "/etc/issue")
    # owners and set-id bits as the layers have them: the layer's uid 0 is the node's root
    assert run("web", "stat", "-c", "%u:%g %a %n", "/", "/usr/bin/su", "/usr/bin/chage",
               "/var/mail", "/srv/owned").splitlines() == [
        "0:0 755 /", "0:0 4755 /usr/bin/su", "0:42 2755 /usr/bin/chage", "0:8 2775 /var/mail",
        "1234:1234 644 /srv/owned"]
    said = "\n".join(lab.show(exp.name).get("warnings", [])) + "\n".join(
        lab.store.get(exp.name).ir.warnings)
    assert "exposed ports are not published" in said
    r = lab.exec(exp.name, "base", ["ping", "-c", "1", "-W", "2", "web"])
    assert r.returncode == 0                 # the nodes are on the experiment's links
    # modify: a node on an image not in the store yet is pulled (its zstd layer unpacked
    # over web's layers) and runs; one that cannot be fetched is a clear error, no change
    grown = spec.read_text().replace("links:\n", f"""  - {{name: zst, image: "oci:{d}/layout:zweb",
      startcmd: "sleep 600"}}
links:
  - {{nodes: [web, zst]}}
""")
    spec.write_text(grown)
    lab.modify(exp.name, load(str(spec)))
    assert store.need(f"oci:{d}/layout:zweb").layers[1:] == recs["web"].layers
    assert run("zst", "cat", "/srv/z.txt", "/srv/index.html") == "zstd\nserved\n"
    assert "hello oci" in run("web", "cat", "/tmp/started")         # web left running
    spec.write_text(grown.replace(f"oci:{d}/layout:zweb", "registry.invalid/x:1"))
    with pytest.raises(WanlabError, match=r"^image docker://registry.invalid/x:1 cannot be "
                                          r"fetched: .*reaches no container registry"):
        lab.modify(exp.name, load(str(spec)))
    row = lab.store.get(exp.name)
    assert row.state == "active" and [n.image for n in row.ir.nodes][-1].endswith(":zweb")


def test_docker_save_archives_are_told_apart(tmp_path):
    from wanlab.backends.emulate import oci
    a = tmp_path / "a.tar"
    with tarfile.open(a, "w") as t:
        info = tarfile.TarInfo("oci-layout")
        data = b'{"imageLayoutVersion": "1.0.0"}'
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    assert oci.is_oci_archive(str(a))
    b = tmp_path / "b.tar"
    with tarfile.open(b, "w") as t:
        info = tarfile.TarInfo("manifest.json")
        info.size = 2
        t.addfile(info, io.BytesIO(b"[]"))
    assert not oci.is_oci_archive(str(b))


def _tar(entries) -> bytes:
    """A tar of (name, data or None for a folder)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                t.addfile(info)
            else:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _small_layout(path, images_of):
    """An OCI layout of images {tag: [layer tar bytes, bottom first]} with a config each."""
    os.makedirs(os.path.join(path, "blobs", "sha256"))
    with open(os.path.join(path, "oci-layout"), "w") as f:
        f.write('{"imageLayoutVersion": "1.0.0"}')
    index = []
    for tag, layers in images_of.items():
        ds = [_blob(path, x) for x in layers]
        cfg = json.dumps({"architecture": "amd64", "os": "linux",
                          "config": {"Env": [f"TAG={tag}"], "Volumes": {"/data": {}}},
                          "rootfs": {"type": "layers", "diff_ids": ds}}).encode()
        man = json.dumps({"schemaVersion": 2, "config": {"digest": _blob(path, cfg)},
                          "layers": [{"digest": d} for d in ds]}).encode()
        index.append({"digest": _blob(path, man),
                      "annotations": {"org.opencontainers.image.ref.name": tag}})
    with open(os.path.join(path, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": index}, f)


@needs_root
def test_layers_are_shared_whited_out_and_moved_by_digest(tmp_path):
    """Two images on one base: the base layer is unpacked once; a whiteout and an opaque
    folder become overlayfs'; the image moves to another store (a cluster machine) by
    its layers' digests, config and all."""
    from wanlab.backends.emulate import images, oci
    base = _tar([("etc", None), ("etc/issue", b"base\n"), ("opt", None),
                 ("opt/old", b"x" * 100_000)])
    top = _tar([("etc", None), ("etc/.wh.issue", b""), ("opt", None),
                ("opt/.wh..wh..opq", b""), ("opt/new", b"y\n")])
    _small_layout(str(tmp_path / "l"), {"a": [base], "b": [base, top]})
    here = images.Images(str(tmp_path / "controller"))
    a = oci.pull(here, f"oci:{tmp_path}/l:a")
    b = oci.pull(here, f"oci:{tmp_path}/l:b")
    assert b.layers[1:] == a.layers and len(os.listdir(os.path.join(here.root, "layers"))) == 2
    t = here.layer_path(b.layers[0])
    st = os.lstat(os.path.join(t, "etc", "issue"))
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == 0                 # a whiteout
    assert os.getxattr(os.path.join(t, "opt"), "trusted.overlay.opaque") == b"y"
    assert not os.path.exists(os.path.join(t, "opt", ".wh..wh..opq"))
    assert b.oci["config"]["Env"] == ["TAG=b"] and b.oci["config"]["noted"] == ["Volumes"]
    # to a machine: the layers it lacks, by digest, then the record
    there = images.Images(str(tmp_path / "machine"))
    rec = images.manifest(here, f"oci:{tmp_path}/l:b")
    for d, layer in rec["sources"].items():
        r = images.Receiver(there, d)
        with images.layer_stream(here.layer_path(layer)) as chunks:
            for data in chunks:
                r.feed(data)
        r.finish()
    got = images.adopt(there, {k: v for k, v in rec.items() if k != "sources"})
    assert there.need(f"oci:{tmp_path}/l:b") == got and got.oci == b.oci
    assert there.get(f"oci:{tmp_path}/l:b") == got      # as a part's machine asks for it
    moved = there.layer_path(got.layers[0])
    assert stat.S_ISCHR(os.lstat(os.path.join(moved, "etc", "issue")).st_mode)
    assert os.getxattr(os.path.join(moved, "opt"), "trusted.overlay.opaque") == b"y"


@needs_root
def test_pull_import_and_list_from_the_command_line(tmp_path):
    base = _tar([("etc", None), ("etc/issue", b"base\n")])
    _small_layout(str(tmp_path / "l"), {"a": [base]})
    _small_layout(str(tmp_path / "l2"), {"b": [base, _tar([("opt", None),
                                                           ("opt/b", b"b" * 50_000)])]})
    subprocess.run(["tar", "-C", str(tmp_path / "l"), "-cf", str(tmp_path / "a.tar"), "."],
                   check=True)
    env = {**os.environ, "WANLAB_IMAGES": str(tmp_path / "images"),
           "WANLAB_HOME": str(tmp_path / "home")}

    def wanlab(*args):
        return subprocess.run(["python3", "-m", "wanlab.cli", *args], env=env,
                              capture_output=True, text=True)
    r = wanlab("image", "pull", f"oci:{tmp_path}/l:a")
    assert r.returncode == 0, r.stderr
    r = wanlab("image", "import", str(tmp_path / "a.tar"))
    assert r.returncode == 0 and "oci-archive:" in r.stdout, r.stderr
    from wanlab.backends.emulate import images, oci
    oci.pull(images.Images(env["WANLAB_IMAGES"]), f"oci:{tmp_path}/l2:b")
    rows = json.loads(wanlab("image", "list", "--json").stdout)
    b = next(x for x in rows if x["origin"].endswith("l2:b"))
    rows = [x for x in rows if x is not b]
    assert sorted(x["origin"] for x in rows) == [f"oci-archive:{tmp_path}/a.tar",
                                                 f"oci:{tmp_path}/l:a"]
    assert len({x["digest"] for x in rows}) == 1 and rows[0]["digest"].startswith("sha256:")
    assert len({x["layers"][0] for x in rows}) == 1          # one layer for both
    # sizes: the base layer is shared by all three; b's own layer is b's alone
    a = rows[0]
    assert a["size"] == a["shared"] > 0 and a["unique"] == 0
    assert b["shared"] == a["size"] and b["unique"] >= 50_000
    assert b["size"] == b["unique"] + b["shared"]
    out = wanlab("image", "list").stdout
    assert f"oci:{tmp_path}/l:a" in out and rows[0]["digest"][:19] in out
    assert "UNIQUE" in out.splitlines()[0] and "3 images, 2 layers: " in out


def test_the_config_is_folded_in_once():
    from dataclasses import replace

    from wanlab.backends.emulate import oci
    from wanlab.backends.emulate.images import Image
    from wanlab.model.ir import Experiment, Node

    class Store:              # the one image the nodes name, with its config
        def get(self, name):
            return Image(name=name, layers=("x" * 8,), suite="oci", packages=(), created=0,
                         origin="oci:/i", oci={"config": {
                             "Env": ["A=1", "B=2"], "Entrypoint": ["srv"], "Cmd": ["-v"],
                             "WorkingDir": "/w", "User": "7", "noted": ["Volumes"]}})
    exp = Experiment(name="x", nodes=(Node("a", image="oci:/i"),
                                      Node("b", image="oci:/i", startcmd="mine",
                                           env=(("B", "3"),))))
    once = oci.apply(exp, Store())
    a, b = once.nodes
    assert a.env == (("A", "1"), ("B", "2")) and b.env == (("A", "1"), ("B", "3"))
    assert "cd -- /w && " in a.startcmd and "setpriv --reuid=7 " in a.startcmd
    assert "sh -c 'srv -v'" in a.startcmd and "sh -c mine" in b.startcmd
    assert sum("volumes are not mounted" in w for w in once.warnings) == 2
    assert oci.apply(once, Store()) == once            # a cluster part: created again
    assert oci.apply(replace(exp, nodes=(Node("c"),)), Store()).nodes == (Node("c"),)


# -- hostile layers ----------------------------------------------------------------------

def _layer(*members) -> bytes:
    """A tar of TarInfo-like dicts: name, and type/linkname/mode/uid/data/pax as needed."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for m in members:
            info = tarfile.TarInfo(m["name"])
            data = m.get("data", b"")
            info.type = m.get("type", tarfile.REGTYPE)
            info.linkname = m.get("linkname", "")
            info.mode = m.get("mode", 0o644)
            info.uid = info.gid = m.get("uid", 0)
            info.devmajor, info.devminor = m.get("dev", (0, 0))
            info.pax_headers = m.get("pax", {})
            info.size = len(data) if info.type == tarfile.REGTYPE else 0
            t.addfile(info, io.BytesIO(data) if info.size else None)
    return buf.getvalue()


def _sparse_map(realsize: int) -> bytes:
    """A PAX 1.0 sparse file's data: its map (one byte of data at the end), then the byte."""
    head = f"1\n{realsize - 1}\n1\n".encode()
    return head + b"\0" * (512 - len(head)) + b"z"


@needs_root
def test_a_hostile_layer_writes_nothing_outside_its_folder(tmp_path):
    """Absolute names, '..', a file through a symlink, a hard link to a file outside,
    device nodes, a set-uid file, a huge sparse file: each lands inside the layer's folder
    or is refused, never outside, and no device node is made."""
    from wanlab.backends.emulate import images, oci
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret").write_text("mine\n")
    up = "../" * 16 + str(out)[1:]
    attacks = {
        "absolute": [{"name": f"{out}/abs", "data": b"x"}],
        "dotdot": [{"name": f"{up}/dotdot", "data": b"x"}],
        "symlink": [{"name": "esc", "type": tarfile.SYMTYPE, "linkname": str(out)},
                    {"name": "esc/through", "data": b"x"},
                    {"name": "rel", "type": tarfile.SYMTYPE, "linkname": up},
                    {"name": "rel/through2", "data": b"x"}],
        "symlink-to-a-folder": [{"name": str(out)[1:], "type": tarfile.DIRTYPE},
                                {"name": "esc", "type": tarfile.SYMTYPE, "linkname": str(out)},
                                {"name": "esc/through", "data": b"x"}],
        "hardlink": [{"name": "hl", "type": tarfile.LNKTYPE, "linkname": f"{out}/secret"}],
        "hardlink-dotdot": [{"name": "hl", "type": tarfile.LNKTYPE,
                             "linkname": f"{up}/secret"}],
        "devices": [{"name": "null", "type": tarfile.CHRTYPE, "dev": (1, 3)},
                    {"name": "disk", "type": tarfile.BLKTYPE, "dev": (8, 0)},
                    {"name": "ok", "data": b"x"}],
        "setuid": [{"name": "su", "data": b"#!/bin/sh\n", "mode": 0o4755},
                   {"name": "mine", "data": b"x", "uid": 1234, "mode": 0o2755}],
        "sparse": [{"name": "big", "data": _sparse_map(1 << 40), "pax": {
            "GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "big",
            "GNU.sparse.realsize": str(1 << 40)}}],
    }
    _small_layout(str(tmp_path / "l"), {k: [_layer(*v)] for k, v in attacks.items()})
    store = images.Images(str(tmp_path / "images"))
    got, refused = {}, {}
    for tag in attacks:
        try:
            got[tag] = oci.pull(store, f"oci:{tmp_path}/l:{tag}")
        except WanlabError as e:
            refused[tag] = str(e)
    assert sorted(os.listdir(out)) == ["secret"]
    st = os.stat(out / "secret")
    assert (out / "secret").read_text() == "mine\n" and st.st_nlink == 1
    assert "more than" in refused.pop("sparse")       # refused before a byte is written
    # a path through a symlink to a folder it lacks, a link to a file it lacks: refused
    assert set(refused) <= {"symlink", "hardlink", "hardlink-dotdot"}, refused
    # what was unpacked is inside the layers: no device node, no file owned by the sandbox
    layers = os.path.join(store.root, "layers")
    for d, _dirs, files in os.walk(layers):
        for f in [*_dirs, *files]:
            s = os.lstat(os.path.join(d, f))
            assert not (stat.S_ISCHR(s.st_mode) or stat.S_ISBLK(s.st_mode)), f
            assert s.st_uid in (0, 1234), (f, s.st_uid)
    lay = {t: store.layer_path(img.layers[0]) for t, img in got.items()}
    assert open(os.path.join(lay["absolute"], str(out)[1:], "abs")).read() == "x"
    assert os.path.isfile(os.path.join(lay["dotdot"], str(out)[1:], "dotdot"))
    assert os.path.isfile(os.path.join(lay["symlink-to-a-folder"], str(out)[1:], "through"))
    assert os.listdir(lay["devices"]) == ["ok"]
    su, mine = (os.lstat(os.path.join(lay["setuid"], x)) for x in ("su", "mine"))
    assert (su.st_uid, stat.S_IMODE(su.st_mode)) == (0, 0o4755)      # an image's own su
    assert (mine.st_uid, mine.st_gid, stat.S_IMODE(mine.st_mode)) == (1234, 1234, 0o2755)
    assert stat.S_IMODE(os.stat(store.root).st_mode) == 0o700       # no user reaches them


@needs_root
def test_containerlab_cmd_entrypoint_and_user_follow_docker(tmp_path):
    """A node's cmd replaces the image's Cmd, its entrypoint the image's Entrypoint and
    drops the image's Cmd, its user the image's User (its group: the one given, else the
    user's own, else 0); the start commands made are run here, as a node runs them."""
    from wanlab.backends.emulate import oci
    from wanlab.backends.emulate.images import Image
    wd = tmp_path / "wd"                  # the image's WorkingDir, made when missing

    class Store:
        def get(self, name):
            return Image(name=name, layers=("x" * 8,), suite="oci", packages=(), created=0,
                         origin="oci:/i", oci={"config": {
                             "Entrypoint": ["sh", "-c"], "WorkingDir": str(wd),
                             "Cmd": ['echo image $(id -u):$(id -g) $(pwd)'],
                             "User": "nobody"}})
    lab = tmp_path / "lab.clab.yml"
    lab.write_text("""
name: docker
topology:
  defaults: {kind: linux}
  groups: {oci: {image: "oci:/i"}}
  nodes:
    img: {group: oci}
    cmd: {group: oci, cmd: "'echo cmd $(id -u)'"}
    ep: {group: oci, entrypoint: "sh -c 'echo ep $(id -u) $0' from-ep"}
    root: {group: oci, user: "0"}
    uid: {group: oci, user: "4321"}
    group: {group: oci, user: "nobody:4321"}
    plain: {entrypoint: echo, cmd: "plain  node", user: nobody}
""")
    exp = oci.apply(load(str(lab)), Store())
    said = {}
    for n in exp.nodes:
        r = subprocess.run(["sh", "-c", n.startcmd], capture_output=True, text=True,
                           cwd="/", timeout=30)
        said[n.name] = r.stdout.strip()
    assert said == {"img": f"image 65534:65534 {wd}", "cmd": "cmd 65534",
                    "ep": "ep 65534 from-ep", "root": f"image 0:0 {wd}",
                    "uid": f"image 4321:0 {wd}", "group": f"image 65534:4321 {wd}",
                    "plain": "plain node"}
    assert exp.nodes[-1].image is None and any("wanlab exec, shell and programs run as root"
                                               in w for w in exp.warnings)
