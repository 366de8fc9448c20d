"""Pure logic behind issue 17's fixes, without root: event-time bounds, duplicate
addresses, interrupt regions, the soak verdict."""

from __future__ import annotations

import math
import os
import signal
import sys

import pytest
from conftest import ROOT

from wanlab import interrupts
from wanlab.errors import Interrupted, SpecError
from wanlab.frontends import load
from wanlab.model.ir import HORIZON_S, Event, Experiment, Link, Node, validate
from wanlab.run.scheduler import parse_time


# -- the horizon (defect 5) -------------------------------------------------------------
@pytest.mark.parametrize("text", ["+1e20", "1e300", "+inf", "inf", "nan", "+nan", "-1",
                                  "+-5", str(HORIZON_S + 1), "soon", "", "+"])
def test_times_outside_the_horizon_or_not_numbers_are_value_errors(text):
    with pytest.raises(ValueError) as e:
        parse_time(text, now=5.0)
    assert text in str(e.value) or "horizon" in str(e.value)


def test_times_inside_the_horizon_are_taken():
    assert parse_time("now", 5.0) == 5.0
    assert parse_time("+2.5", 5.0) == 7.5
    assert parse_time("30", 5.0) == 30.0
    assert parse_time(str(HORIZON_S), 5.0) == HORIZON_S


@pytest.mark.parametrize("t", [HORIZON_S * 2, math.inf, math.nan])
def test_timeline_events_beyond_the_horizon_are_spec_errors(t):
    exp = Experiment("h", nodes=(Node("a"), Node("b")), links=(Link("l", "a", "b"),),
                     events=(Event(t, "l", "down"),))
    with pytest.raises(SpecError, match="horizon"):
        validate(exp)


# -- duplicate addresses (defect 9) ----------------------------------------------------------
def test_duplicate_address_names_the_line_of_its_second_use_in_tcl(tmp_path):
    p = tmp_path / "dup.tcl"
    p.write_text("set ns [new Simulator]\nsource tb_compat.tcl\n"
                 "set a [$ns node]\nset b [$ns node]\nset c [$ns node]\n"
                 "set l0 [$ns duplex-link $a $b 10Mb 1ms DropTail]\n"
                 "set l1 [$ns duplex-link $b $c 10Mb 1ms DropTail]\n"
                 "tb-set-ip-link $a $l0 10.9.0.1\ntb-set-ip-link $c $l1 10.9.0.1\n$ns run\n")
    with pytest.raises(SpecError) as e:
        load(str(p))
    assert e.value.file == str(p) and e.value.line == 7, str(e.value)
    assert "10.9.0.1" in str(e.value) and f"{p}:6" in str(e.value)


def test_duplicate_address_in_yaml_between_a_link_and_a_lan(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("name: dup\nnodes: [a, b, c]\n"
                 "links:\n  - {name: l0, nodes: [a, b], ips: [10.9.0.1, 10.9.0.2]}\n"
                 "lans:\n  - name: lan0\n    nodes: [b, {node: c, ip: 10.9.0.2}]\n")
    with pytest.raises(SpecError, match="10.9.0.2 of c on LAN lan0 is already the address "
                                        "of b on link l0"):
        load(str(p))


def test_overlapping_fixed_subnets_fail_at_parse_with_the_line(tmp_path):
    from wanlab import cli
    p = tmp_path / "ov.tcl"
    p.write_text("set ns [new Simulator]\nsource tb_compat.tcl\n"
                 "set a [$ns node]\nset b [$ns node]\nset c [$ns node]\n"
                 "set l0 [$ns duplex-link $a $b 10Mb 1ms DropTail]\n"
                 "set l1 [$ns duplex-link $b $c 10Mb 1ms DropTail]\n"
                 "tb-set-ip-link $a $l0 10.9.0.1\ntb-set-ip-link $c $l1 10.9.0.5\n$ns run\n")
    with pytest.raises(SpecError) as e:
        cli.cmd_parse(None, type("A", (), {"file": str(p), "json": False})())
    assert e.value.line == 7 and "overlaps" in str(e.value)


# -- interrupt regions (defect 6) ---------------------------------------------------------------
def test_undoable_raises_once_and_shields_the_roll_back():
    said = []
    with pytest.raises(KeyboardInterrupt), interrupts.undoable("rolling back x", said.append):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10**6):
                pass
            raise AssertionError("the first interrupt did not raise")
        except KeyboardInterrupt:
            os.kill(os.getpid(), signal.SIGINT)     # during the roll-back: only said
            for _ in range(10**5):
                pass
            raise
    assert said == ["interrupt received: rolling back x first (please wait)"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_finish_first_finishes_then_says_so():
    said, done = [], []
    with pytest.raises(Interrupted, match="interrupted: finished the swap-out of x first"), \
            interrupts.finish_first("the swap-out of x", said.append):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10**5):
            pass
        done.append(True)
    assert done == [True]
    assert said == ["interrupt received: finishing the swap-out of x first (please wait)"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_finish_first_without_an_interrupt_is_silent():
    with interrupts.finish_first("y", print):
        pass


# -- the soak verdict -----------------------------------------------------------------------------
def test_soak_verdict_is_flat_only_for_flat_series():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import soak
    flat = [{"t_s": t, "rss_kib": 4000 + (t // 10) % 2, "fds": 12, "threads": 1}
            for t in range(0, 600, 10)]
    assert soak.verdict(flat, 10, 1024, 1)["flat"]
    leak = [dict(s, rss_kib=4000 + s["t_s"]) for s in flat]     # 1 KiB/s = 3600 KiB/h
    v = soak.verdict(leak, 10, 1024, 1)
    assert not v["flat"] and 3500 < v["rss_slope_kib_per_h"] < 3700
    fdleak = [dict(s, fds=12 + s["t_s"] // 60) for s in flat]
    assert not soak.verdict(fdleak, 10, 1024, 1)["flat"]


def test_a_process_with_a_kill_pending_is_doomed_before_it_runs_again():
    """A node's holder killed on a loaded machine may not run (and begin to exit) for a
    while; a command entering its PID namespace then would die with it (a repaired node's
    new zebra did: "exited with signal 9"). So a pending SIGKILL counts as ending."""
    import subprocess

    from wanlab.backends.emulate import procs
    status = "Name:\tx\nSigQ:\t0/1\nSigPnd:\t{}\nShdPnd:\t{}\nSigBlk:\t0000000000000000\n"
    kill = format(1 << (signal.SIGKILL - 1), "016x")
    term = format(1 << (signal.SIGTERM - 1), "016x")
    assert procs.kill_pending(status.format("0" * 16, kill))
    assert procs.kill_pending(status.format(kill, "0" * 16))
    assert not procs.kill_pending(status.format(term, term))
    p = subprocess.Popen(["sleep", "30"])
    try:
        assert not procs.doomed(p.pid)
    finally:
        p.kill()
        p.wait()
    assert not procs.doomed(p.pid)          # gone: not ending, and no holder either
