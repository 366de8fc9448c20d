"""What a node sees on a cluster: a working directory it can enter, whatever folder the
cluster was started from, and its image's root, which each machine receives by digest from
the controller. The session's local test cluster (tests/conftest.py), started as a user
would: from a folder under /tmp, with the store in wanlab's own state folder
(/var/lib/wanlab, hidden from nodes), which is where a command run from a folder a node
cannot see fell back to."""

from __future__ import annotations

import os
import re
import shutil
import tempfile

import pytest
from conftest import ROOT, needs_root, wanlab_cli

pytestmark = [needs_root,
              pytest.mark.skipif(not __import__("importlib").util.find_spec("ray"),
                                 reason="ray is installed by make install")]

# one node on each machine; {os}: a tb-set-node-os line, or none
PAIR = """\
set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
$ns duplex-link $a $b 100Mb 1ms DropTail
tb-fix-node $a m0
tb-fix-node $b m1
{os}
$ns rtproto Static
$ns run
"""


def wl(home, cwd, *args, check=True, timeout=600):
    return wanlab_cli(home, *args, check=check, timeout=timeout, cwd=cwd)


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    """The session's cluster (tests/conftest.py): brought up from a folder under /tmp
    (which nodes see as their own, empty /tmp), its store under /var/lib/wanlab (which
    nodes see hidden)."""
    assert str(shared_cluster.home).startswith("/var/lib/wanlab/")
    assert str(shared_cluster.cwd).startswith("/tmp/")
    yield shared_cluster.home, shared_cluster.cwd
    shared_cluster.clear()


def test_agents_run_from_the_root_and_exec_works_from_a_folder_under_tmp(cluster, tmp_path):
    home, cwd = cluster
    # every agent (and every Ray daemon of the cluster) runs from /, not the caller's folder
    status = wl(home, cwd, "cluster", "status").stdout
    pids = [int(x) for x in re.findall(r"agent pid (\d+)", status)]
    machines = re.findall(r"^\s+m\d+\s", status, re.M)
    assert len(pids) == len(machines) >= 2, status
    for pid in pids:
        assert os.readlink(f"/proc/{pid}/cwd") == "/", pid
    spec = tmp_path / "wd.tcl"
    spec.write_text(PAIR.format(os=""))
    wl(home, cwd, "create", str(spec), "--cluster")
    where = wl(home, cwd, "show", "wd").stdout
    assert re.search(r"machine m0: ", where) and re.search(r"machine m1: ", where), where
    for node in ("a", "b"):
        p = wl(home, cwd, "exec", "wd", node, "--", "sh", "-c", "pwd; hostname")
        assert p.stdout.split() == ["/", node], p.stdout + p.stderr
    ping = wl(home, cwd, "exec", "wd", "a", "--", "ping", "-c", "2", "-i", "0.2", "b")
    assert " 0% packet loss" in ping.stdout, ping.stdout
    wl(home, cwd, "terminate", "wd")


def test_a_command_from_a_folder_nodes_lack_runs_in_the_nodes_folder(tmp_path, monkeypatch):
    """A store under /var/lib/wanlab (a cluster machine's: <home>/machines/mI), a command
    started from a folder under /tmp: the node has neither, so the command runs in the
    node's own folder, which stays visible at its path under the hidden state folder."""
    from conftest import pair

    from wanlab.lifecycle import Lab
    os.makedirs("/var/lib/wanlab", mode=0o711, exist_ok=True)
    home = tempfile.mkdtemp(prefix="test-cluster-nodes-", dir="/var/lib/wanlab")
    monkeypatch.chdir(tmp_path)
    lab = Lab(os.path.join(home, "machines", "m0"))
    try:
        lab.create(pair("hidden"))
        p = lab.exec("hidden", "a", ["sh", "-c", "pwd; ls"], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        assert p.stdout.split()[0] == lab.store.folder("hidden", "nodes", "a"), p.stdout
        assert "tmp" in p.stdout.split()[1:], p.stdout        # the node's folder, not a copy
    finally:
        try:
            for row in lab.list():
                lab.cleanup(row.name)
                lab.terminate(row.name)
        finally:
            lab.close()
            shutil.rmtree(home, ignore_errors=True)


def _root_mount(home, cwd, node):
    """The mount at / as node ``node`` of experiment ``img`` sees it (mountinfo's line),
    then whether the host's files (this checkout's tests) are there."""
    p = wl(home, cwd, "exec", "img", node, "--", "sh", "-c",
           "grep ' / / ' /proc/self/mountinfo; "
           f"if [ -d {ROOT}/tests ]; then echo host-files; else echo own-root; fi")
    return p.stdout


def test_an_image_moves_by_digest_to_each_machine_and_nodes_run_in_its_root(
        cluster, tmp_path, test_image):
    from wanlab.backends.emulate import idmap, images
    home, cwd = cluster
    here = images.Images(os.environ["WANLAB_IMAGES"])        # the controller's (conftest)
    (digest,) = [images.layer_digest(here, x) for x in here.need(test_image).layers]
    spec = tmp_path / "img.tcl"
    spec.write_text(PAIR.format(os=f"tb-set-node-os $a {test_image}\n"
                                   f"tb-set-node-os $b {test_image}"))
    p = wl(home, cwd, "create", str(spec), "--cluster", timeout=900)
    said = p.stdout + p.stderr
    # sent once to each machine, never built there
    assert said.count(f"sending an image layer ({digest[:12]})") == 2, said
    assert "mmdebstrap" not in said, said
    for m, node in (("m0", "a"), ("m1", "b")):
        store = os.path.join(home, "machines", m, "images")
        assert os.listdir(os.path.join(store, "layers")) == [digest]
        assert images.Images(store).need(test_image).layers == (digest,)
        # the node's root is an overlay over that layer, the machine's own copy (mounted
        # idmapped by the experiment's user namespace)
        seen = _root_mount(home, cwd, node)
        assert " - overlay " in seen, seen
        assert f"/exps/img/lowers/{digest}," in seen, seen
        layer = idmap.fs_source(os.path.join(store, "layers", digest))
        assert layer in idmap.idmapped_sources(), (layer, seen)
        assert seen.split()[-1] == "own-root", seen
    # a machine that holds the digest is sent nothing
    wl(home, cwd, "terminate", "img")
    p = wl(home, cwd, "create", str(spec), "--cluster", timeout=900)
    assert "sending an image layer" not in p.stdout + p.stderr, p.stdout + p.stderr
    assert " - overlay " in _root_mount(home, cwd, "b")
    wl(home, cwd, "terminate", "img")
