"""Node images and per-node roots on real overlays: the same daemon with different /etc in
two nodes, files private to a node, hard state across swap-out, ``--fresh``, Emulab node
setup (tarfiles, packages), ``wanlab image`` and cleanup of the mounts.

The image is built once per session (conftest ``test_image``) and shared by every test."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time

import pytest
from conftest import ROOT, TEST_IMAGES, needs_root, params

from wanlab.backends.emulate import images, rootfs
from wanlab.errors import WanlabError
from wanlab.model.ir import Experiment, Link, Node, validate

pytestmark = needs_root


def exp_of(name, image, n=2, **node_kw):
    p = params(0, 0.001)
    nodes = tuple(Node(f"n{i}", image=image, **node_kw) for i in range(1, n + 1))
    links = tuple(Link(f"l{i}", f"n{i}", f"n{i + 1}", ab=p, ba=p) for i in range(1, n))
    return validate(Experiment(name, nodes=nodes, links=links))


def sh(lab, exp, node, script, check=True):
    r = lab.exec(exp, node, ["sh", "-c", script], capture_output=True, text=True, timeout=60)
    if check:
        assert r.returncode == 0, (node, script, r.stdout, r.stderr)
    return r.stdout


def overlays_under(path):
    return [p for p in rootfs.mounted_overlays() if p.startswith(str(path))]


def cli(home, *args, timeout=120):
    return subprocess.run([sys.executable, "-m", "wanlab.cli", "--home", str(home), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": ROOT})


def test_same_daemon_from_one_image_with_its_own_etc_in_each_node(lab, test_image):
    lab.create(exp_of("dns", test_image))
    for node, addr in (("n1", "10.9.9.1"), ("n2", "10.9.9.2")):
        # the same path in both nodes, different contents: each node has its own /etc
        sh(lab, "dns", node, f"echo address=/svc.test/{addr} > /etc/dnsmasq.conf && "
                             "echo nameserver 127.0.0.1 > /etc/resolv.conf && "
                             "dnsmasq --conf-file=/etc/dnsmasq.conf --pid-file=/run/dnsmasq.pid")
    for node, addr in (("n1", "10.9.9.1"), ("n2", "10.9.9.2")):
        out = sh(lab, "dns", node, "for i in $(seq 50); do getent hosts svc.test && exit 0; "
                                   "sleep 0.2; done; exit 1")
        assert out.split()[0] == addr
        assert sh(lab, "dns", node, "hostname; cat /etc/hostname").split() == [node, node]
    # n1's own files: invisible to n2 and to the host, and the image stays as it was
    sh(lab, "dns", "n1", "echo secret > /root/only-n1 && echo t > /tmp/only-n1 && "
                         "echo v > /var/only-n1")
    for f in ("/root/only-n1", "/tmp/only-n1", "/var/only-n1"):
        assert sh(lab, "dns", "n2", f"test -e {f}", check=False) == "" and \
            lab.exec("dns", "n2", ["test", "-e", f]).returncode == 1
        assert not os.path.exists(f)
    lower = images.Images(TEST_IMAGES).lowerdirs(test_image)[0]
    assert not os.path.exists(os.path.join(lower, "root", "only-n1"))
    assert open(os.path.join(lower, "etc", "hostname")).read() != "n1\n"
    # the node sees neither the host's files nor wanlab's state
    assert sh(lab, "dns", "n1", f"test -e {lab.store.home}/wanlab.db || echo hidden") == \
        "hidden\n"
    assert sh(lab, "dns", "n1", f"test -e {ROOT}/README.md || echo hidden") == "hidden\n"


def test_a_file_survives_swapout_and_swapin_and_fresh_drops_it(lab, test_image):
    lab.create(exp_of("hard", test_image, n=1,
                      startcmd="echo ran > /root/by-startcmd; cat /etc/hostname"))
    # the start command ran inside the node's root; its output is kept in the node's folder
    ndir = lab.store.folder("hard", "nodes", "n1")
    for _ in range(300):
        if os.path.exists(os.path.join(ndir, "startcmd.exit")):
            break
        time.sleep(0.1)
    assert open(os.path.join(ndir, "startcmd.log")).read() == "n1\n"
    assert sh(lab, "hard", "n1", "cat /root/by-startcmd") == "ran\n"
    assert not os.path.exists("/root/by-startcmd")
    sh(lab, "hard", "n1", "echo kept > /root/state")
    folder = lab.store.folder("hard")
    # the node plants a link to a host path where wanlab writes its resolv.conf
    victim = f"/tmp/wanlab-victim-{lab.store.get('hard').short}"
    sh(lab, "hard", "n1", f"rm /etc/resolv.conf && ln -s {victim} /etc/resolv.conf")
    lab.swapout("hard")
    assert overlays_under(folder) == []             # nothing mounted while swapped out
    lab.swapin("hard")
    assert sh(lab, "hard", "n1", "cat /root/state") == "kept\n"
    assert not os.path.lexists(victim)              # the link was replaced, not followed
    assert sh(lab, "hard", "n1", "test -L /etc/resolv.conf || echo file") == "file\n"
    lab.swapout("hard")
    lab.swapin("hard", fresh=True)
    assert sh(lab, "hard", "n1", "cat /root/state 2>/dev/null || echo gone") == "gone\n"
    lab.terminate("hard")
    assert overlays_under(folder) == [] and not os.path.exists(folder)


def test_tarfiles_and_a_deb_go_into_the_node_root_once(lab, test_image, tmp_path):
    # a tarball with a file and a link that would lead out of the root if followed on the host
    tb = tmp_path / "site.tgz"
    with tarfile.open(tb, "w:gz") as t:
        data = b"hello from the tarball\n"
        info = tarfile.TarInfo("conf/greeting")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("conf/escape")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc"
        t.addfile(link)
    # a tiny .deb built here (dpkg-deb), installed with apt inside the node's root
    pkg = tmp_path / "pkg"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "usr" / "bin").mkdir(parents=True)
    (pkg / "DEBIAN" / "control").write_text(
        "Package: wanlab-probe\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@t>\n"
        "Description: test\n")
    (pkg / "usr" / "bin" / "wanlab-probe").write_text("#!/bin/sh\necho probe ok\n")
    os.chmod(pkg / "usr" / "bin" / "wanlab-probe", 0o755)
    deb = tmp_path / "wanlab-probe.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(pkg), str(deb)],
                   check=True, capture_output=True)
    lab.create(exp_of("setup", test_image, n=1, tarfiles=(("/opt/site", str(tb)),),
                      packages=(str(deb),)))
    assert sh(lab, "setup", "n1", "cat /opt/site/conf/greeting; wanlab-probe") == \
        "hello from the tarball\nprobe ok\n"
    assert sh(lab, "setup", "n1", "readlink /opt/site/conf/escape") == "/etc\n"
    layer = rootfs.layer_path(lab.store.folder("setup"), "n1")
    marker = os.path.join(layer, "setup.json")
    made = os.stat(marker).st_mtime_ns
    lab.swapout("setup")
    lab.swapin("setup")             # the kept layer has them: not installed again
    assert os.stat(marker).st_mtime_ns == made
    assert sh(lab, "setup", "n1", "wanlab-probe") == "probe ok\n"


def test_a_missing_package_is_a_clear_error_and_nothing_stays_mounted(lab, test_image,
                                                                     tmp_path):
    bad = exp_of("badpkg", test_image, n=1, packages=(str(tmp_path / "absent.deb"),))
    with pytest.raises(WanlabError, match=r"node n1: package file .*absent.deb is not a file"):
        lab.create(bad)
    assert overlays_under(tmp_path) == []
    with pytest.raises(WanlabError, match=r"no image named 'no-such-image'"):
        lab.create(exp_of("noimg", "no-such-image", n=1))


def test_image_commands(tmp_path, test_image):
    home = tmp_path / "home"
    # the same packages again: the cached build is reused under the new name
    p = cli(home, "image", "build", "again", "--packages",
            ",".join(images.DEFAULT_PACKAGES[:3]), "--packages",
            ",".join(images.DEFAULT_PACKAGES[3:]))
    assert p.returncode == 0 and "reused an identical build" in p.stdout, p.stderr
    p = cli(home, "image", "list", "--json")
    listed = {i["name"]: i for i in json.loads(p.stdout)}
    assert listed["again"]["layers"] == listed[test_image]["layers"]
    out = tmp_path / "img.tar"
    p = cli(home, "image", "export", "again", str(out))
    assert p.returncode == 0, p.stderr
    with tarfile.open(out) as t:
        assert "./etc/os-release" in t.getnames()
    # removing one name keeps the layer the other still uses
    assert cli(home, "image", "rm", "again").returncode == 0
    assert images.Images(TEST_IMAGES).get(test_image) is not None
    for args, msg in ((("image", "build", "../x"), "not valid"),
                      (("image", "rm", "../../etc"), "'../../etc'"),
                      (("image", "build", "x", "--from", "ubuntu:jammy"), "debian:SUITE"),
                      (("image", "build", "x", "--packages", "a;b"), "not a Debian package"),
                      (("image", "export", "nosuch", str(tmp_path / "x.tar")), "no image")):
        p = cli(home, *args)
        assert p.returncode == 2 and msg in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_save_a_node_layer_as_a_new_image(lab, test_image):
    lab.create(exp_of("snap", test_image, n=1))
    sh(lab, "snap", "n1", "echo from-n1 > /etc/motd-wanlab && rm /etc/issue && "
                          "mkdir /home/u && touch /home/u/f && chown 1000:1000 /home/u/f")
    name = "snap-" + lab.store.get("snap").short
    store = images.Images(TEST_IMAGES)
    try:
        img = lab.image_save("snap", "n1", name)
        assert img.layers[1:] == store.need(test_image).layers and img.origin == "snap/n1"
        # the wanlab mount points made in the layer are left out
        top = store.layer_path(img.layers[0])
        assert not os.path.exists(top + lab.store.folder("snap"))
        # saved 0-based, as every image (the node's layer holds its range's uids)
        assert [os.stat(os.path.join(top, p)).st_uid for p in
                ("etc/motd-wanlab", "home/u/f")] == [0, 1000]
        lab.create(exp_of("fromsnap", name, n=1))
        assert sh(lab, "fromsnap", "n1", "cat /etc/motd-wanlab; test -e /etc/issue || "
                                         "echo deleted; stat -c %u /etc/motd-wanlab "
                                         "/home/u/f") == "from-n1\ndeleted\n0\n1000\n"
        with pytest.raises(WanlabError, match="in use"):
            store.remove(name)
        lab.terminate("fromsnap")
    finally:
        if store.get(name):
            store.remove(name)
    assert not os.path.exists(top)


def test_modify_adds_a_node_with_its_own_root(lab, test_image):
    lab.create(exp_of("grow", test_image, n=1))
    lab.modify("grow", exp_of("grow", test_image, n=2))
    assert sh(lab, "grow", "n2", "hostname; echo x > /root/n2-file") == "n2\n"
    assert lab.exec("grow", "n1", ["test", "-e", "/root/n2-file"]).returncode == 1
    assert lab.show("grow")["nodes"]["n2"]["image"] == test_image
