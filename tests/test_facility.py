"""The facility (issue 14): template parameters, versions, sweeps, the batch queue and idle
swap. Pure logic runs without root; the rest builds real namespaces."""

import csv
import json
import os
import subprocess
import sys
import time

import pytest
from conftest import ROOT, needs_root

from wanlab.errors import SpecError, WanlabError
from wanlab.facility import params as P
from wanlab.facility import sweep
from wanlab.frontends import load

NS_TEMPLATE = """set ns [new Simulator]
source tb_compat.tcl
$ns define-template-parameter BW 10Mb "bottleneck bandwidth"
$ns define-template-parameter GREETING hello "what the start command says"
set a [$ns node]
set b [$ns node]
$ns duplex-link $a $b $BW 2ms DropTail
tb-set-node-startup $b {echo "$GREETING $BW" > /tmp/said; sleep 1}
$ns run
"""

YAML_TEMPLATE = """parameters:
  BW: {default: 10Mb, description: bottleneck bandwidth}
  LOSS: 0
nodes: [a, b]
links:
  - nodes: [a, b]
    bandwidth: ${BW}
    loss: ${LOSS}
    delay: 2ms
idle_swap: 45s
"""

PY_TEMPLATE = """from typing import Annotated
from wanlab.frontends.builder import ExperimentBuilder

def experiment(BW: Annotated[str, "bottleneck bandwidth"] = "10Mb", hosts: int = 2):
    b = ExperimentBuilder("pytemplate")
    ns = [b.node(f"h{i}") for i in range(hosts)]
    b.link(ns[0], ns[1], bandwidth=BW, delay="2ms")
    return b
"""

# a bulk TCP transfer through one shaped link; bandwidth and length are parameters
SWEEP_TEMPLATE = """set ns [new Simulator]
source tb_compat.tcl
$ns define-template-parameter bw 5Mb "bottleneck bandwidth"
$ns define-template-parameter secs 3 "transfer time"
set client [$ns node]
set server [$ns node]
$ns duplex-link $client $server $bw 5ms DropTail
set tcp0 [new Agent/TCP]
$ns attach-agent $client $tcp0
set sink0 [new Agent/TCPSink]
$ns attach-agent $server $sink0
$ns connect $tcp0 $sink0
set ftp0 [new Application/FTP]
$ftp0 attach-agent $tcp0
$ns at 0.2 "$ftp0 start"
$ns at [expr {0.2 + $secs}] "$ftp0 stop"
$ns run
"""


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


# -- parameters: parsing, front ends ------------------------------------------------------------

def test_p_values_axes_product_and_rows(tmp_path):
    assert P.values(["BW=10Mb", "X=a=b"]) == {"BW": "10Mb", "X": "a=b"}
    ax = P.axes(["bw=1Mb,10Mb", "delay=10ms,50ms,90ms"])
    pts = P.product(ax)
    assert len(pts) == 6 and pts[0] == {"bw": "1Mb", "delay": "10ms"}
    assert pts[-1] == {"bw": "10Mb", "delay": "90ms"}
    for bad in (["nope"], ["1x=3"], ["PATH=/x"], ["A=1", "A=2"]):
        with pytest.raises(WanlabError):
            P.values(bad)
    with pytest.raises(WanlabError, match="listed twice"):
        P.axes(["a=1,1"])
    rows = _write(tmp_path, "rows.csv", "bw,delay\n1Mb,10ms\n2Mb,20ms\n")
    assert P.rows(rows, {"secs": ["2"]}) == [{"bw": "1Mb", "delay": "10ms", "secs": "2"},
                                             {"bw": "2Mb", "delay": "20ms", "secs": "2"}]
    bad = _write(tmp_path, "bad.csv", "bw,delay\n1Mb\n")
    with pytest.raises(WanlabError, match="bad.csv:2"):
        P.rows(bad)


def test_template_parameters_from_ns_yaml_and_python_with_overrides(tmp_path):
    cases = [(_write(tmp_path, "t.tcl", NS_TEMPLATE), "BW"),
             (_write(tmp_path, "t.yaml", YAML_TEMPLATE), "BW"),
             (_write(tmp_path, "t.py", PY_TEMPLATE), "BW")]
    for path, name in cases:
        default = load(path)
        assert default.links[0].ab.bandwidth_bps == 10_000_000, path
        p = {x.name: x for x in default.parameters}[name]
        assert (p.default, p.value, p.description) == ("10Mb", "10Mb", "bottleneck bandwidth")
        exp = load(path, params={name: "3Mb"})
        assert exp.links[0].ab.bandwidth_bps == 3_000_000, path
        assert exp.parameter_values()[name] == "3Mb"
        # the IR's JSON (what the store keeps) carries them
        assert {"name": "BW", "default": "10Mb", "value": "3Mb",
                "description": "bottleneck bandwidth"} in exp.to_json()["parameters"]
        with pytest.raises(SpecError, match="NOPE"):
            load(path, params={"NOPE": "1"})
    assert load(cases[1][0], params={"LOSS": "0.25"}).links[0].ab.loss == 0.25
    assert load(cases[1][0]).swap.idle_s == 45
    assert len(load(cases[2][0], params={"hosts": "3"}).nodes) == 3
    with pytest.raises(SpecError, match="not a int"):
        load(cases[2][0], params={"hosts": "three"})


def test_bad_template_parameters_are_errors_with_a_place(tmp_path):
    dup = _write(tmp_path, "dup.tcl", NS_TEMPLATE.replace(
        "set a [$ns node]", "define-template-parameter BW 1Mb\nset a [$ns node]"))
    with pytest.raises(SpecError, match="defined twice") as e:
        load(dup)
    assert e.value.line == 5
    reserved = _write(tmp_path, "res.tcl", NS_TEMPLATE.replace("GREETING", "PATH"))
    with pytest.raises(SpecError, match="reserved"):
        load(reserved)
    ref = _write(tmp_path, "ref.yaml", YAML_TEMPLATE.replace("${LOSS}", "${LOST}"))
    with pytest.raises(SpecError, match="LOST") as e:
        load(ref)
    assert e.value.line == 8


# -- sweeps: pure parts ---------------------------------------------------------------------------

def test_flow_rows_and_agreement():
    s = {"flows": [{"agent": "ftp0", "kind": "ftp", "started_s": 1.0, "stopped_s": 3.0,
                    "result": {"bytes": 250_000, "srtt_us": 12_000, "retransmits": 2}}],
         "links": {"l": {"ab": {"drop_queue": 3, "drop_loss": 1}, "ba": {"drop_queue": 0}}}}
    (r,) = sweep.flow_rows(s)
    assert r["throughput_bps"] == 1_000_000 and r["rtt_ms"] == 12 and r["link_drops"] == 4
    assert r["events_failed"] == 0
    assert sweep.flow_rows({"flows": [], "events": [{"outcome": "error"}]}) == \
        [{"flow": "", "link_drops": 0, "events_failed": 1}]
    rows = [{"bw": "1Mb", "flow": "f", "mode": m, "state": "done", "throughput_bps": v}
            for m, v in (("emulate", 1.0e6), ("simulate", 1.05e6), ("emulate", 0.9e6))]
    rows += [{"bw": "2Mb", "flow": "f", "mode": m, "state": "done", "throughput_bps": v}
             for m, v in (("emulate", 2.0e6), ("simulate", 1.0e6))]
    ag = sweep.agreement(rows, ["bw"])
    assert ag["compared"] == 2 and ag["within"] == 1
    assert [p["agree"] for p in ag["points"]] == [True, False]
    specs = sweep.plan_runs([{"a": "1"}, {"a": "2"}], 2, ("emulate", "simulate"))
    assert len(specs) == 8 and specs[0].mode == "simulate" and specs[-1].mode == "emulate"


@needs_root
def test_simulated_2x2_sweep_from_the_command_line(tmp_path):
    """`wanlab sweep FILE -p NAME=V1,V2 ... --simulate --repeat N --out DIR`: runs.csv with a
    column per parameter, the run's facts and per-flow throughput tracking the bottleneck;
    versions; --rerun."""
    home, out = str(tmp_path / "home"), str(tmp_path / "out")
    path = _write(tmp_path, "bulk.tcl", SWEEP_TEMPLATE)
    p = _cli(home, "sweep", path, "-p", "bw=2Mb,8Mb", "-p", "secs=1,2", "--simulate",
             "--out", out)
    assert p.returncode == 0, p.stderr
    assert "[4/4]" in p.stderr and "table:" in p.stdout
    with open(os.path.join(out, "runs.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [(r["bw"], r["secs"], r["repeat"]) for r in rows] == [
        (b, s, "0") for b in ("2Mb", "8Mb") for s in ("1", "2")]
    for col in ("run_id", "mode", "seed", "template", "template_version", "engine", "kernel",
                "flow", "throughput_bps", "rtt_ms", "loss_ratio", "retransmits"):
        assert col in rows[0], col
    for r in rows:
        bw = {"2Mb": 2e6, "8Mb": 8e6}[r["bw"]]
        assert 0.4 * bw < float(r["throughput_bps"]) <= bw, r      # tracks the bottleneck
        assert (r["mode"], r["template"], r["template_version"]) == ("simulate", "bulk", "1")
    plots = os.listdir(os.path.join(out, "plots"))
    assert "throughput_bps.png" in plots and any("heatmap" in x for x in plots)
    h = _cli(home, "template", "history", path)
    assert h.returncode == 0 and "version 1" in h.stdout and "4 runs" in h.stdout
    # a changed text is a new version; the rerun of a version-1 run uses the stored text
    with open(path, "a") as f:
        f.write("# changed\n")
    assert _cli(home, "template", "record", path).stdout.startswith("bulk: version 2")
    again = _cli(home, "sweep", "--rerun", rows[2]["run_id"], "--out", str(tmp_path / "re"))
    assert again.returncode == 0, again.stderr
    assert f"{float(rows[2]['throughput_bps']) / 1e6:.3f} Mbit/s (was" in again.stdout
    h = _cli(home, "template", "history", "bulk", "--json")
    assert [(v["version"], v["runs"]) for v in json.loads(h.stdout)] == [(1, 5), (2, 0)]


# -- with namespaces ---------------------------------------------------------------------------

@needs_root
def test_parameters_reach_every_node_environment(tmp_path, lab):
    path = _write(tmp_path, "envt.tcl", NS_TEMPLATE)
    exp = load(path, params={"GREETING": "hi there", "BW": "4Mb"})
    lab.create(exp)
    got = lab.exec("envt", "a", ["sh", "-c", 'echo "$GREETING|$BW"'], capture_output=True,
                   text=True)
    assert got.stdout.strip() == "hi there|4Mb"
    said = lab.store.folder("envt", "nodes", "b", "tmp", "said")
    deadline = time.monotonic() + 30
    while not os.path.exists(said) and time.monotonic() < deadline:
        time.sleep(0.1)
    with open(said) as f:
        assert f.read().strip() == "hi there 4Mb"      # the start command saw them too
    assert lab.get("envt").ir.parameter_values() == {"BW": "4Mb", "GREETING": "hi there"}


@needs_root
def test_emulated_2x1_sweep_tracks_bandwidth(tmp_path, lab):
    path = _write(tmp_path, "bulk.tcl", SWEEP_TEMPLATE)
    out = str(tmp_path / "out")
    pts = P.product(P.axes(["bw=2Mb,6Mb", "secs=2"]))
    s = sweep.Sweep(lab, path, pts, out, modes=("emulate",), say=lambda m: None).run()
    assert not s["failed_runs"], s
    with open(os.path.join(out, "runs.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [r["bw"] for r in rows] == ["2Mb", "6Mb"]
    for r in rows:
        bw = float(r["bw"][:-2]) * 1e6
        assert 0.4 * bw < float(r["throughput_bps"]) <= 1.05 * bw, r
        assert os.path.isdir(os.path.join(out, "runs", f"{r['run_id']}-emulate"))
    assert lab.list() == []            # every run's experiment was terminated


def _max_overlap(intervals):
    points = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    cur = best = 0
    for _, d in points:
        cur += d
        best = max(best, cur)
    return best


@needs_root
def test_batch_of_six_with_two_at_once(tmp_path):
    home = str(tmp_path / "home")
    spec = _write(tmp_path, "job.tcl", NS_TEMPLATE)
    env = {**os.environ, "PYTHONPATH": ROOT}
    cli = [sys.executable, "-m", "wanlab.cli", "--home", home]
    for i in range(6):
        p = subprocess.run(cli + ["batch", "submit", spec, "-p", f"GREETING=job{i}",
                                  "--user", f"u{i % 3}"],
                           env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
    argv = cli + ["batch", "daemon", "--foreground", "--max-concurrent", "2", "--tick", "0.3"]
    daemon = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    from wanlab.lifecycle import Lab
    from wanlab.store import facility as records
    lab = Lab(home)
    try:
        # the queue survives a restart of its daemon: stop it while batches run, start another
        deadline = time.monotonic() + 200
        while time.monotonic() < deadline and not any(
                b["state"] == "running" for b in records.batches(lab.store)):
            time.sleep(0.2)
        daemon.terminate()
        first = daemon.communicate(timeout=60)[0].decode()
        assert "stopping" in first, first
        daemon = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            states = [b["state"] for b in records.batches(lab.store)]
            if all(s in ("done", "failed") for s in states):
                break
            time.sleep(0.5)
    finally:
        daemon.terminate()
        log = daemon.communicate(timeout=60)[0].decode()
    try:
        bs = records.batches(lab.store)
        assert [b["state"] for b in bs] == ["done"] * 6, log + json.dumps(
            [records.batch_log(lab.store, b["id"]) for b in bs], indent=1)
        intervals = []
        for b in bs:
            h = records.batch_log(lab.store, b["id"])
            assert [x["to_state"] for x in h] == ["posted", "activating", "running",
                                                  "terminating", "done"]
            intervals.append((h[1]["at"], h[-1]["at"]))
            with open(os.path.join(b["folder"], "summary.json")) as f:
                summary = json.load(f)
            assert summary["startcmds"] == {"b": 0}
            i = int(b["ir"]["parameters"][1]["value"][3:])
            with open(os.path.join(b["folder"], "nodes", "b", "tmp", "said")) as f:
                assert f.read().strip() == f"job{i} 10Mb"     # its own parameters, archived
        observed = _max_overlap(intervals)
        print(f"observed concurrency: {observed}")
        assert observed <= 2
        assert all(r.state == "swapped" for r in lab.list())
    finally:
        lab.close()


@needs_root
def test_idle_experiment_is_warned_swapped_out_and_back_in(tmp_path, lab):
    from dataclasses import replace

    from wanlab.facility import idle
    from wanlab.model.ir import SwapPolicy
    path = _write(tmp_path, "idler.tcl", NS_TEMPLATE.replace(
        'tb-set-node-startup $b {echo "$GREETING $BW" > /tmp/said; sleep 1}', ""))
    exp = replace(load(path), swap=SwapPolicy(idle_s=3.0))
    lab.create(exp)
    lab.exec("idler", "a", ["sh", "-c", "echo kept > /tmp/state"], check=True)
    w = idle.Watcher(lab, say=lambda m: None)
    deadline = time.monotonic() + 60
    swapped = []
    while not swapped and time.monotonic() < deadline:
        swapped = w.tick()
        time.sleep(0.3)
    assert swapped == ["idler"]
    row = lab.get("idler")
    assert row.state == "swapped"
    reasons = [r for _t, _a, b, r in lab.store.transitions(row.id) if b == "swapping-out"]
    assert reasons == ["idle swap"]
    log = [e for e in lab.store.event_log(row.id) if e["origin"] == "idle"]
    assert [e["outcome"] for e in log] == ["warning", "ok"]
    assert log[0]["fired_s"] < log[1]["fired_s"]
    lab.swapin("idler")
    got = lab.exec("idler", "a", ["cat", "/tmp/state"], capture_output=True, text=True)
    assert got.stdout.strip() == "kept"            # the node's own files came back


@needs_root
def test_busy_experiment_is_not_idle_swapped(tmp_path, lab):
    from dataclasses import replace

    from wanlab.facility import idle
    from wanlab.model.ir import SwapPolicy
    path = _write(tmp_path, "busy.tcl", NS_TEMPLATE.replace(
        "sleep 1", "while :; do :; done"))
    lab.create(replace(load(path), swap=SwapPolicy(idle_s=2.0)))
    w = idle.Watcher(lab, say=lambda m: None)
    end = time.monotonic() + 4
    while time.monotonic() < end:
        assert w.tick() == []
        time.sleep(0.3)
    assert lab.get("busy").state == "active"


# -- the CLI's interface, the queue's logic ----------------------------------------------------

def _cli(home, *args, timeout=300):
    return subprocess.run([sys.executable, "-m", "wanlab.cli", "--home", home, *args],
                          env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True,
                          text=True, timeout=timeout)


def test_parse_takes_p_and_names_a_bad_one(tmp_path):
    path = _write(tmp_path, "envt.tcl", NS_TEMPLATE)
    p = subprocess.run([sys.executable, "-m", "wanlab.cli", "parse", path, "-p", "BW=3Mb",
                        "--json"], env={**os.environ, "PYTHONPATH": ROOT},
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["links"][0]["ab"]["bandwidth_bps"] == 3_000_000
    p = subprocess.run([sys.executable, "-m", "wanlab.cli", "parse", path, "-p", "BOGUS=1"],
                       env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "BOGUS" in p.stderr and "Traceback" not in p.stderr


def test_swap_flags_need_a_reason_and_override_the_spec(tmp_path):
    from types import SimpleNamespace as NS

    from wanlab.facility.commands import apply_swap_flags
    exp = load(_write(tmp_path, "t.yaml", YAML_TEMPLATE))
    flags = dict(idle_swap=None, max_duration=None, no_idle_swap=None)
    assert apply_swap_flags(exp, NS(**{**flags, "max_duration": "2h"})).swap.max_duration_s \
        == 7200
    off = apply_swap_flags(exp, NS(**{**flags, "no_idle_swap": "a long capture"})).swap
    assert off.idle_s is None and off.no_idle_reason == "a long capture"
    for bad in ({"no_idle_swap": " "}, {"idle_swap": "soon"},
                {"idle_swap": "5", "no_idle_swap": "x"}):
        with pytest.raises(WanlabError):
            apply_swap_flags(exp, NS(**{**flags, **bad}))


def test_queue_cancel_requeue_fairness_and_recovery(tmp_path, lab):
    from wanlab.facility import batch
    from wanlab.facility.daemon import Daemon
    from wanlab.store import facility as records
    path = _write(tmp_path, "job.tcl", NS_TEMPLATE)
    ids = [batch.submit(lab, path, {}, user=u) for u in ("alice", "alice", "bob")]
    with pytest.raises(WanlabError, match="neither"):
        batch.submit(lab, _write(tmp_path, "idle.tcl", NS_TEMPLATE.replace(
            'tb-set-node-startup $b {echo "$GREETING $BW" > /tmp/said; sleep 1}', "")), {})
    d = Daemon(lab, max_concurrent=2)
    assert d.pick()["id"] == ids[0]
    # alice's first is running: bob's goes before alice's second
    records.set_batch_state(lab.store, ids[0], "running", "test",
                            worker={"pid": 2 ** 22 + 1, "started": 1})
    assert d.pick()["id"] == ids[2]
    # ... and with bob's gone, alice's second goes (capacity would be idle otherwise)
    assert batch.cancel(lab, ids[2]) == "cancelled"
    assert d.pick()["id"] == ids[1]
    with pytest.raises(WanlabError, match="running"):
        batch.cancel(lab, ids[0])
    # the running one's worker does not exist: it is posted again, one attempt counted
    d.recover()
    b = records.get_batch(lab.store, ids[0])
    assert (b["state"], b["attempts"]) == ("posted", 1)
    assert batch.requeue(lab, ids[2]) == "posted"
    assert [x["to_state"] for x in records.batch_log(lab.store, ids[2])] == \
        ["posted", "cancelled", "posted"]


@needs_root
def test_the_daemon_counts_only_its_batches_and_says_why_one_waits(tmp_path, lab):
    """Someone's experiment running by hand holds no batch back (--max-concurrent is the
    queue's); a batch that waits says why, in ``wanlab batch list``."""
    from conftest import pair

    from wanlab.facility import batch
    from wanlab.facility.daemon import Daemon
    from wanlab.store import facility as records
    lab.create(pair("by-hand"))                 # active, and not a batch
    path = _write(tmp_path, "job.tcl", NS_TEMPLATE)
    ids = [batch.submit(lab, path, {}, user=u) for u in ("alice", "bob")]
    d = Daemon(lab, max_concurrent=1)
    assert d.active_load() == 0
    assert "no batch daemon runs" in batch.listing(lab)[0]["waiting"]
    d.say_waiting()                             # the daemon's view: this process, limit 1
    assert batch.listing(lab)[0]["waiting"] == "starting at the daemon's next tick"
    records.set_batch_state(lab.store, ids[0], "running", "test",
                            worker={"pid": os.getpid(), "started": 1})
    assert d.active_load() == 1
    why = {b["id"]: b.get("waiting") for b in batch.listing(lab)}
    assert why[ids[1]] == (f"the daemon's limit: 1 of 1 batches run ({ids[0]}; "
                           f"--max-concurrent)"), why
    p = subprocess.run([sys.executable, "-m", "wanlab.cli", "--home", lab.store.home, "batch",
                        "list"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": ROOT})
    line = next(x for x in p.stdout.splitlines() if x.split()[0] == str(ids[1]))
    assert "waits: the daemon's limit: 1 of 1" in line, p.stdout
    records.set_batch_state(lab.store, ids[0], "done", "test")
