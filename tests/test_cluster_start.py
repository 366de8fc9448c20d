"""A local test cluster's start survives a Ray worker that exits before it joins
(``wanlab/cluster/local.py``: ``_wait_machines``), as on a loaded host."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
from conftest import ROOT, needs_root

pytestmark = [needs_root,
              pytest.mark.skipif(not __import__("importlib").util.find_spec("ray"),
                                 reason="ray is installed by make install")]


def _worker_pid(home, machine: str) -> int | None:
    """The pid recorded for ``machine``'s Ray worker, once the other process has it."""
    from wanlab.store import cluster as rec
    from wanlab.store.db import Store
    if not os.path.exists(os.path.join(home, "wanlab.db")):
        return None
    store = Store(str(home), create=False)
    try:
        r = next((r for r in rec.live(store, "process") if r.name == f"ray-{machine}"),
                 None)
        return r.detail.get("pid") if r is not None else None
    finally:
        store.close()


def _netns() -> set[str]:
    return set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                              check=False).stdout.split())


def test_a_worker_that_exits_at_its_start_is_started_again(tmp_path):
    home = tmp_path / "home"
    env = {**os.environ, "WANLAB_HOME": str(home), "PYTHONPATH": ROOT}
    up = subprocess.Popen([sys.executable, "-m", "wanlab.cli", "cluster", "up", "--local",
                           "2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env)
    try:
        # m1's worker, killed as soon as it is recorded: long before Ray has it joined
        deadline = time.monotonic() + 300
        pid = None
        while pid is None:
            assert time.monotonic() < deadline and up.poll() is None, "no worker for m1"
            pid = _worker_pid(home, "m1")
            time.sleep(0.05)
        os.kill(pid, 9)
        out, _ = up.communicate(timeout=900)
        assert up.returncode == 0, out
        assert "machine m1's Ray worker exited at its start; starting it again" in out, out
        assert re.search(r"cluster \w+: 2 machines up", out), out
        status = subprocess.run([sys.executable, "-m", "wanlab.cli", "cluster", "status"],
                                capture_output=True, text=True, env=env, timeout=300)
        assert re.search(r"^\s+m1\s+\S+\s+up\b", status.stdout, re.M), status.stdout
        cid = re.search(r"cluster (\w+): 2 machines up", out).group(1)
        down = subprocess.run([sys.executable, "-m", "wanlab.cli", "cluster", "down"],
                              capture_output=True, text=True, env=env, timeout=300)
        assert down.returncode == 0, down.stderr
        assert not {n for n in _netns() if n.startswith(f"wlc{cid}")}
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        subprocess.run([sys.executable, "-m", "wanlab.cli", "cluster", "down"],
                       capture_output=True, text=True, env=env, timeout=300, check=False)
