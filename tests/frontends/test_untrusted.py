"""Issue 17 defect 2: a spec cannot run away with the host.

Python specs run in a bounded child process (time, memory; its process group is
killed afterwards); YAML anchor bombs and recursive documents are refused before
they are built. Every failure is one SpecError naming the file.
"""

import os
import time

import pytest

from wanlab.errors import SpecError
from wanlab.frontends import load, pyspec, yaml_spec

GOOD = ("from wanlab.frontends.builder import ExperimentBuilder\n"
        "b = ExperimentBuilder('pyexp')\nb.node('a')\nexperiment = b\n")


def running(marker):
    """Host pids of processes whose command line contains ``marker`` (read from /proc)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        out.append(int(d))
            except OSError:
                pass
    return out


def gone(marker):
    for _ in range(100):
        if not running(marker):
            return True
        time.sleep(0.05)
    return False


def test_python_spec_runs_in_a_bounded_child(tmp_path, capfd):
    p = tmp_path / "exp.py"
    p.write_text("import os\nprint('spec pid', os.getpid(), 'uid', os.getuid())\n" + GOOD)
    exp = load(p)
    assert exp.name == "pyexp" and [n.name for n in exp.nodes] == ["a"]
    words = capfd.readouterr().err.split()
    pid, uid = int(words[words.index("pid") + 1]), int(words[words.index("uid") + 1])
    assert pid != os.getpid()
    if os.geteuid() == 0:
        assert uid == 65534                    # root's child runs as nobody
        assert pid == 1                        # in its own PID namespace


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the child drops to nobody)")
def test_a_root_started_spec_cannot_touch_roots_files(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("root only")
    os.chmod(secret, 0o600)
    p = tmp_path / "peek.py"
    p.write_text(f"open({str(secret)!r}).read()\n")
    with pytest.raises(SpecError, match="PermissionError") as ei:
        load(p)
    assert ei.value.line == 1
    p.write_text("import resource\n"
                 "resource.setrlimit(resource.RLIMIT_AS, (-1, -1))\n")
    with pytest.raises(SpecError, match="ValueError|not allowed|PermissionError"):
        load(p)


def test_sys_exit_is_a_clear_error(tmp_path):
    p = tmp_path / "exit.py"
    p.write_text("import sys\n\nsys.exit(3)\n")
    with pytest.raises(SpecError) as ei:
        load(p)
    assert ei.value.file == str(p) and ei.value.line == 3
    assert "sys.exit(3)" in ei.value.message


def test_an_exception_names_the_users_line(tmp_path):
    p = tmp_path / "boom.py"
    p.write_text("x = 1\n\ndef f():\n    return {}['k']\n\nf()\n")
    with pytest.raises(SpecError) as ei:
        load(p)
    assert ei.value.line == 4 and "KeyError" in ei.value.message


def test_timeout_kills_the_script_and_its_background_children(tmp_path):
    p = tmp_path / "slow.py"
    p.write_text("import subprocess\n"
                 "subprocess.Popen(['sleep', '95.0417'], start_new_session=True)\n"
                 "while True:\n    pass\n")
    t = time.monotonic()
    with pytest.raises(SpecError, match="did not finish within 2 s|more than 2 s of CPU"):
        pyspec.load(p, timeout=2)
    assert time.monotonic() - t < 30
    assert gone("95.0417"), "the background process outlived the parse"


def test_a_finished_parse_leaves_no_background_process(tmp_path):
    p = tmp_path / "bg.py"
    p.write_text("import subprocess\n"
                 "subprocess.Popen(['sleep', '95.0418'], start_new_session=True)\n" + GOOD)
    assert load(p).name == "pyexp"
    assert gone("95.0418")


def test_memory_limit(tmp_path):
    p = tmp_path / "hog.py"
    p.write_text("x = []\nwhile True:\n    x.append(bytearray(16 << 20))\n")
    with pytest.raises(SpecError, match="memory"):
        pyspec.load(p, memory=512 << 20)


YAML_BOMB = "".join(
    f"{c}: &{c} [" + ",".join([f"*{p}"] * 9) + "]\n"
    for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


def test_yaml_alias_bomb_is_refused_before_building():
    text = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + YAML_BOMB
    t = time.monotonic()
    with pytest.raises(SpecError, match="alias bomb") as ei:
        yaml_spec.loads(text, file="bomb.yaml")
    assert ei.value.file == "bomb.yaml"
    assert time.monotonic() - t < 10          # generous: it takes milliseconds


def test_yaml_recursive_alias_is_refused():
    with pytest.raises(SpecError, match="refers to its own anchor") as ei:
        yaml_spec.loads("name: x\nnodes: &n [a, *n]\n", file="rec.yaml")
    assert ei.value.line == 2


def test_yaml_ordinary_aliases_still_work():
    text = ("name: al\nnodes: [a, b]\n"
            "links:\n  - {nodes: [a, b], <<: &p {bandwidth: 10Mb, delay: 5ms}}\n"
            "  - {name: l2, nodes: [b, a], <<: *p}\n")
    exp = yaml_spec.loads(text, file="al.yaml")
    assert [l.ab.delay_s for l in exp.links] == [0.005, 0.005]
    assert yaml_spec.expansion_bound(10) >= 100_000


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the child drops to nobody)")
def test_a_fork_bomb_in_a_spec_stops_at_the_process_limit(tmp_path):
    p = tmp_path / "forks.py"
    p.write_text("import os, time\nn = 0\n"
                 "try:\n"
                 "    for _ in range(1000):\n"
                 "        if os.fork() == 0:\n"
                 "            time.sleep(95.0419)\n"
                 "            os._exit(0)\n"
                 "        n += 1\n"
                 "except OSError as e:\n"
                 "    raise SystemExit(f'stopped after {n} forks: {e}')\n")
    with pytest.raises(SpecError, match=r"stopped after \d+ forks") as ei:
        load(p)
    assert int(ei.value.message.split("after ")[1].split()[0]) <= pyspec.MAX_PROCS
    assert gone(str(p))
