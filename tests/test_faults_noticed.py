"""Faults the health check notices, on real namespaces: a ``create`` whose CLI is killed
with SIGKILL in the middle of its swap-in (its experiment would stay ``activating`` for
good), and a node's holder killed (every process of the node ends with it). Each becomes
``degraded``, says what to run, and ``swapin --repair`` or ``terminate`` gets out of it,
leaving nothing behind. Helpers and the faulty spec are test_faults.py's."""

from __future__ import annotations

import os
import signal
import time

import pytest
from conftest import needs_root, pair
from test_faults import (
    SPEC,
    assert_nothing_left,
    cli,
    merge,
    recorded,
    wait_gone,
    wait_stopped,
)

pytestmark = needs_root


@pytest.fixture
def faulty(tmp_path):
    """test_faults' spec (its node b runs ``sleep <marker>``, a command no other process on
    the host runs): its path and the marker."""
    mark = f"{300 + os.getpid() % 1000}.{time.monotonic_ns() % 10**9:09d}"
    path = tmp_path / "faulty.tcl"
    path.write_text(SPEC.replace("MARKER", mark))
    return str(path), mark


def _run(home, *args):
    p = cli(home, *args)
    out, err = p.communicate(timeout=300)
    assert "Traceback" not in err, err
    return p.returncode, out, err


def _state(home, name):
    code, out, err = _run(home, "list")
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.split()[:1] == [name])
    return row.split()[2], row


def test_a_create_killed_mid_swap_in_is_degraded_and_says_what_to_run(tmp_path, faulty):
    spec, marker = faulty
    home = tmp_path / "home"
    p = cli(home, "create", spec, pause="wiring")
    wait_stopped(p)
    # paused, it still holds the experiment: the swap-in runs, nothing to report
    assert _state(home, "faulty")[0] == "activating"
    paused = recorded(home)
    p.kill()
    p.communicate(timeout=60)
    state, row = _state(home, "faulty")
    assert state == "degraded", row
    assert "its swap-in stopped half-way" in row and f"pid {p.pid}" in row, row
    assert "'wanlab terminate faulty'" in row and "'wanlab swapin --repair faulty'" in row
    first = _run(home, "show", "faulty")[1].splitlines()[0]
    assert "degraded: its swap-in stopped half-way" in first, first
    assert first.count("'wanlab swapin --repair faulty'") == 1, first      # said once
    code, _, err = _run(home, "swapin", "faulty")
    assert code != 0 and "'wanlab terminate faulty' removes it" in err, err
    code, _, err = _run(home, "swapin", "--repair", "faulty")
    assert code == 0, err
    assert _state(home, "faulty")[0] == "active"
    code, out, err = _run(home, "exec", "faulty", "a", "--", "ping", "-c", "1", "-W", "5", "b")
    assert code == 0, out + err
    seen = merge(paused, recorded(home))
    assert _run(home, "terminate", "faulty")[0] == 0
    assert_nothing_left(home, seen, marker)


def test_repair_right_after_a_killed_create_rebuilds_it(tmp_path, faulty):
    """No look in between: the operation that takes the lock next notices."""
    spec, marker = faulty
    home = tmp_path / "home"
    p = cli(home, "create", spec, pause="running 1 start commands")
    wait_stopped(p)
    paused = recorded(home)
    p.kill()
    p.communicate(timeout=60)
    code, _, err = _run(home, "swapin", "--repair", "faulty")
    assert code == 0, err
    assert "its swap-in stopped half-way" in err, err       # said while repairing
    assert _state(home, "faulty")[0] == "active"
    seen = merge(paused, recorded(home))
    assert _run(home, "terminate", "faulty")[0] == 0
    assert _run(home, "list")[1].splitlines()[1:] == []
    assert_nothing_left(home, seen, marker)


def test_a_killed_node_holder_makes_the_experiment_degraded(lab):
    lab.create(pair(name="held"))
    # an idle node gets its holder at its first command
    assert lab.exec("held", "a", ["true"]).returncode == 0
    holder = next(r for r in lab.store.resources(lab.get("held").id)
                  if r.detail.get("role") == "holder" and r.detail.get("node") == "a")
    os.kill(holder.detail["pid"], signal.SIGKILL)
    wait_gone(holder.detail["pid"])
    (listed,) = lab.list()
    assert listed.state == "degraded", listed
    assert "node a's holder (the init of its processes)" in listed.error, listed.error
    lab.swapin("held", repair=True)
    assert lab.get("held").state == "active"
    p = lab.exec("held", "a", ["ping", "-c", "1", "-W", "5", "b"], capture_output=True)
    assert p.returncode == 0, p
    assert lab.list()[0].state == "active"
    seen = recorded(lab.store.home)
    lab.terminate("held")
    assert_nothing_left(lab.store.home, seen)
