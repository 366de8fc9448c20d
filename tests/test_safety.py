"""Issue 17: names never become paths outside the store, the store is private, housekeeping.

Most of these need no root: they check that every entry point refuses a bad
name before anything touches the filesystem.
"""

import json
import os
import stat
import subprocess
import sys
from dataclasses import replace

import pytest
from conftest import ROOT, needs_root, pair

from wanlab.errors import SpecError, WanlabError
from wanlab.frontends.builder import ExperimentBuilder
from wanlab.lifecycle import Lab
from wanlab.model.names import NAME_MAX, check_experiment_name
from wanlab.store.db import Store

BAD_NAMES = ["../../../../tmp/v", "a/b", "/etc", "", "1abc", "-x", "a b", "a\n", "Ωmega",
             "a" * (NAME_MAX + 1), "x" * 300, ".", "..", "a..b/"]


def wanlab(home, *args):
    return subprocess.run([sys.executable, "-m", "wanlab.cli", "--home", str(home), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


def files_under(path):
    out = []
    for root, dirs, files in os.walk(path):
        out += [os.path.join(root, x) for x in dirs + files]
    return out


@pytest.mark.parametrize("name", ["a", "exp-1", "A" * NAME_MAX, "figure2"])
def test_the_name_rule_accepts_emulab_names(name):
    assert check_experiment_name(name) == name


@pytest.mark.parametrize("name", BAD_NAMES + [None, 5])
def test_the_name_rule_refuses_anything_else(name):
    with pytest.raises(WanlabError, match="not a valid name"):
        check_experiment_name(name)


def test_ir_api_and_builder_refuse_path_names():
    with pytest.raises(WanlabError):
        pair().with_name("../../../../tmp/v")
    b = ExperimentBuilder("../x")
    b.node("a")
    with pytest.raises(SpecError, match="experiment name '../x' is not a valid name"):
        b.build()
    from wanlab.api import Experiment
    with pytest.raises(WanlabError):
        Experiment(pair(), name="../v", home="/nonexistent-never-created")
    assert not os.path.exists("/nonexistent-never-created")


@pytest.mark.parametrize("name", ["../../../../outside", "../outside", "x" * 300])
def test_every_lab_entry_point_refuses_before_touching_files(tmp_path, name):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("precious")
    lab = Lab(str(tmp_path / "home" / "a" / "b"))
    try:
        before = sorted(files_under(tmp_path))
        for call in (lambda: lab.terminate(name), lambda: lab.cleanup(name),
                     lambda: lab.swapin(name), lambda: lab.swapout(name),
                     lambda: lab.show(name), lambda: lab.get(name),
                     lambda: lab.modify(name, pair()),
                     lambda: lab.export(name, str(tmp_path / "e")),
                     lambda: lab.create(replace(pair(), name=name), swapin=False),
                     lambda: lab.store.add_experiment(replace(pair(), name=name), None),
                     lambda: lab.store.folder(name), lambda: lab.store.lock_path(name)):
            with pytest.raises(WanlabError):
                call()
        assert sorted(files_under(tmp_path)) == before
        assert (outside / "keep").read_text() == "precious"
    finally:
        lab.close()


def test_store_paths_stay_inside(tmp_path):
    s = Store(str(tmp_path / "home"))
    try:
        want = tmp_path / "home" / "exps" / "ok" / "nodes" / "a"
        assert s.folder("ok", "nodes", "a") == str(want)
        for parts in (("..", "x"), ("nodes", "..", "..", "..", "x"), ("/etc",)):
            with pytest.raises(WanlabError, match="refusing a path outside"):
                s.folder("ok", *parts)
        with pytest.raises(WanlabError, match="refusing a path outside"):
            s.inside("..", "elsewhere")
    finally:
        s.close()


def test_the_store_is_private(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)                       # an old, world-readable store is tightened
    s = Store(str(home))
    s.close()
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o700
    for f in os.listdir(home):                  # wanlab.db and its -wal/-shm
        assert stat.S_IMODE(os.stat(home / f).st_mode) & 0o077 == 0, f
    fresh = tmp_path / "new" / "home"
    Store(str(fresh)).close()
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o700


def test_lock_files_go_with_the_experiment(tmp_path):
    lab = Lab(str(tmp_path / "home"))
    try:
        lab.create(pair("locky"), swapin=False)
        lab.cleanup("locky")
        assert os.listdir(tmp_path / "home" / "locks") == ["locky.lock"]
        lab.terminate("locky")
        assert os.listdir(tmp_path / "home" / "locks") == []
        with pytest.raises(WanlabError, match="no experiment named 'NOSUCH'"):
            lab.cleanup("NOSUCH")
        assert os.listdir(tmp_path / "home" / "locks") == []
        with pytest.raises(WanlabError, match="needs --all"):
            lab.cleanup()
        assert lab.cleanup(all=True) == []
    finally:
        lab.close()


def test_a_missing_home_is_refused_unless_creating(tmp_path):
    with pytest.raises(WanlabError, match="no wanlab state folder"):
        Lab(str(tmp_path / "typo"), create=False)
    assert not (tmp_path / "typo").exists()


@needs_root
def test_cli_refuses_path_names_and_a_typo_home(tmp_path):
    victim = tmp_path / "v"
    victim.mkdir()
    (victim / "keep").write_text("x")
    home = tmp_path / "a" / "b" / "c" / "home"
    rel = os.path.relpath(victim, home / "exps")
    spec = os.path.join(ROOT, "examples", "figure2.tcl")
    for args in (("create", spec, "--name", rel, "--no-swapin"), ("terminate", rel),
                 ("cleanup", rel), ("run", spec, "--name", "y" * 300)):
        p = wanlab(home, *args)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        assert "not a valid name" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert (victim / "keep").read_text() == "x"
    typo = tmp_path / "typo"
    for args in (("list",), ("cleanup", "NOSUCH"), ("show", "x")):
        p = wanlab(typo, *args)
        assert p.returncode == 2 and "no wanlab state folder" in p.stderr, p.stderr
    assert not typo.exists()
    p = wanlab(home, "cleanup")
    assert p.returncode == 2 and "--all" in p.stderr
    assert wanlab(home, "cleanup", "NOSUCH").returncode == 2
    assert not os.path.exists(home / "locks" / "NOSUCH.lock")


@needs_root
def test_an_active_experiment_is_private_and_exported_on_purpose(tmp_path, default_image):
    # default_image: Figure 2's source names an Emulab OS, so it runs the default image
    home = tmp_path / "home"
    spec = os.path.join(ROOT, "examples", "figure2.yaml")
    p = wanlab(home, "create", spec, "--name", "priv")
    assert p.returncode == 0, p.stderr
    try:
        show = json.loads(wanlab(home, "show", "priv", "--json").stdout)
        folder = show["folder"]
        assert stat.S_IMODE(os.stat(home).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        # the nodes' roots, layers and the image's layers mounted for them are file systems
        # (an image's modes), behind the folder's 0700; every other file is private itself
        nodes_fs = tuple(os.path.join(folder, d) for d in ("roots", "layers", "lowers"))
        assert os.path.ismount(os.path.join(folder, "roots", "source"))
        for f in [str(home / "wanlab.db")] + [f for f in files_under(folder)
                                              if not f.startswith(nodes_fs)]:
            if os.path.isfile(f):
                assert stat.S_IMODE(os.stat(f).st_mode) & 0o077 == 0, f
        # a node plants links to secrets in its own folder: export copies neither
        node_dir = os.path.join(folder, "nodes", next(iter(show["nodes"])))
        os.symlink("/etc/shadow", os.path.join(node_dir, "sym"))
        os.link(home / "wanlab.db", os.path.join(node_dir, "hard"))
        dest = tmp_path / "shared"
        p = wanlab(home, "export", "priv", str(dest))
        assert p.returncode == 0, p.stderr
        copied = [f for f in files_under(dest) if os.path.isfile(f)]
        assert copied and not any(f.endswith(("sym", "hard", ".sock")) for f in copied)
        assert all(stat.S_IMODE(os.stat(f).st_mode) == 0o644 for f in copied)
        assert wanlab(home, "export", "priv", str(dest)).returncode == 2
    finally:
        assert wanlab(home, "terminate", "priv").returncode == 0
    assert os.listdir(home / "locks") == []
