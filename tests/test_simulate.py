"""Pure simulation: ``wanlab run --simulate`` runs a whole spec in virtual time."""

import filecmp
import json
import os

import pytest

from wanlab.errors import SpecError
from wanlab.frontends import load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# host —10 Mbit/s 5 ms— router —10 Mbit/s 5 ms— host, CBR 1 Mbit/s of 1000-byte payloads
CBR = """set ns [new Simulator]
source tb_compat.tcl
set s [$ns node]
set r [$ns node]
set d [$ns node]
set l1 [$ns duplex-link $s $r 10Mb 5ms DropTail]
set l2 [$ns duplex-link $r $d 10Mb 5ms DropTail]
set udp [new Agent/UDP]
$ns attach-agent $s $udp
set null [new Agent/Null]
$ns attach-agent $d $null
$ns connect $udp $null
set cbr [new Application/Traffic/CBR]
$cbr set packetSize_ 1000
$cbr set rate_ 1Mb
$cbr attach-agent $udp
set prog [new Program $ns]
$prog set node $s
$prog set command "sleep 1"
$ns at 1 "$cbr start"
$ns at 1.5 "$prog start"
$ns at 3 "$l2 down"
$ns at 4 "$l2 up"
$ns at 6 "$cbr stop"
$ns at 6.5 "$l1 trace stop"
$ns at 0.5 "$l1 trace start"
$ns run
"""


def write(tmp_path, text, name="sim.tcl"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_cbr_through_a_link_failure_is_exact(lab, tmp_path):
    s = lab.simulate(load(write(tmp_path, CBR)), out=str(tmp_path / "out"))
    (f,) = s["flows"]
    r = f["result"]
    assert f["agent"] == "cbr" and f["kind"] == "cbr" and r["simulated"]
    assert (f["started_s"], f["stopped_s"]) == (1.0, 6.0)
    # one packet per 8 ms from t = 1 s: 625 sent in 5 s. Packet k enters l2 at
    # 1 + 0.008 k + 5.8336 ms (l1's serialization of 1042 bytes + delay) and is on l2 for
    # 5.8336 ms: those on it at t = 3 s or entering it before t = 4 s are dropped,
    # k = 249 … 374, i.e. 126 packets
    # Network events at an instant run before the timeline's requests at that instant, so
    # the packet due at exactly t = 6 s leaves before the stop: 626 sent. The flow's result
    # counts what arrived by the stop: packet k arrives at 1 + 0.008 k + 11.6672 ms, so
    # k ≤ 623 arrived, minus the 126 dropped.
    assert r["sent_packets"] == 626
    assert s["links"]["l2"]["ab"]["drop_down"] == 126, s["links"]["l2"]
    assert r["packets"] == 624 - 126
    assert r["bytes"] == 498 * 1000
    # the throughput series shows the gap
    mid = [bps for t, bps in r["throughput_bps"] if 2.2 < t < 2.9]
    assert mid and all(b == 0 for b in mid)
    early = [bps for t, bps in r["throughput_bps"] if 0.5 < t < 1.9]
    assert early and all(abs(b - 1e6) <= 0.1e6 for b in early)
    # programs are skipped, not run; every other event fired
    outcome = {(e["target"], e["action"]): e["outcome"] for e in s["events"]}
    assert outcome[("prog", "start")] == "skipped"
    assert outcome[("l2", "down")] == "ok" and outcome[("cbr", "stop")] == "ok"
    # the trace event wrote a pcap in virtual time: 1042-byte frames every 8 ms
    pcap = tmp_path / "out" / "traces" / "l1-ab.pcap"
    assert pcap.exists() and pcap.stat().st_size > 24 + 625 * (16 + 1042)
    assert (tmp_path / "out" / "plots" / "throughput.png").exists()
    assert s["engine"]["events"] > 0 and s["engine"]["speedup"] > 1


def test_same_seed_same_trace_byte_for_byte(lab, tmp_path):
    import dataclasses

    from wanlab.model.ir import LinkParams
    spec = load(write(tmp_path, CBR))
    lossy = LinkParams(bandwidth_bps=10_000_000, delay_s=0.005, loss=0.05)
    spec = dataclasses.replace(spec, links=tuple(
        dataclasses.replace(l, ab=lossy) if l.name == "l1" else l for l in spec.links))
    outs = []
    for i, seed in enumerate((7, 7, 8)):
        out = tmp_path / f"run{i}"
        s = lab.simulate(spec, out=str(out), seed=seed)
        outs.append((out, s["flows"][0]["result"]["packets"]))
    (a, pa), (b, pb), (c, pc) = outs
    assert filecmp.cmp(a / "result.json", b / "result.json", shallow=False)
    assert filecmp.cmp(a / "traces" / "l1-ab.pcap", b / "traces" / "l1-ab.pcap", shallow=False)
    assert pa == pb and pa < 500          # 5 % loss on l1 is applied …
    assert not filecmp.cmp(a / "result.json", c / "result.json", shallow=False)
    assert pc != pa                       # … and another seed loses other packets


def test_newreno_one_drop_fast_retransmit(lab, tmp_path):
    s = lab.simulate(load(os.path.join(ROOT, "examples", "onedrop", "onedrop.tcl")),
                     out=str(tmp_path / "out"))
    (f,) = s["flows"]
    r = f["result"]
    assert f["kind"] == "ftp" and r["cc"] == "newreno"
    assert r["retransmits"] == 1 and r["timeouts"] == 0, r
    cw = r["cwnd"]
    before = [c for t, c in cw if 1.2 < t < 1.5]
    after = [c for t, c in cw if 1.6 < t < 1.7]
    # window_ 20 caps the window before the drop; the fast retransmit halves it
    assert before and max(before) == pytest.approx(20, abs=0.01)
    assert after and min(after) <= 10.5
    # 1.5 Mbit/s of 1054-byte frames carrying 1000 bytes
    rate = r["bytes"] * 8 / (f["stopped_s"] - f["started_s"])
    assert 1.2e6 < rate < 1.5e6 * 1000 / 1054
    assert os.path.exists(tmp_path / "out" / "traces" / "ftp-cwnd.csv")
    assert any(p.endswith("cwnd.png") for p in s["plots"])


def test_bad_simulation_input_names_the_line(lab, tmp_path):
    bad = CBR.replace("set udp [new Agent/UDP]", "set udp [new Agent/TCP]")
    with pytest.raises(SpecError, match=r"sim\.tcl:\d+: .*cbr.*Agent/UDP"):
        lab.simulate(load(write(tmp_path, bad)), out=str(tmp_path / "out"))
    assert not (tmp_path / "out" / "result.json").exists()


def test_cli_run_simulate(tmp_path):
    import subprocess
    import sys
    spec = write(tmp_path, CBR)
    p = subprocess.run([sys.executable, "-m", "wanlab.cli", "--home", str(tmp_path / "h"), "run",
                        "--simulate", spec, "--out", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "[simulated]" in p.stdout and "498000 bytes" in p.stdout
    assert "x real time" in p.stdout
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["mode"] == "simulate"
    p = subprocess.run([sys.executable, "-m", "wanlab.cli", "--home", str(tmp_path / "h"), "run",
                        "--seed", "3", spec], capture_output=True, text=True)
    assert p.returncode == 2 and "go with --simulate" in p.stderr


YAML = """name: yamlsim
seed: 3
nodes: [a, r, b]
links:
  - {name: l1, nodes: [a, r], bandwidth: 10Mb, delay: 5ms}
  - {name: l2, nodes: [r, b], bandwidth: 2Mb, delay: 20ms, queue: {kind: DropTail, limit: 20}}
agents:
  - {name: tcp0, kind: Agent/TCP/Linux, node: a, peer: sink0, params: {select_ca: cubic}}
  - {name: sink0, kind: Agent/TCPSink, node: b, peer: tcp0}
  - {name: ftp0, kind: Application/FTP, attached: tcp0}
  - {name: udp0, kind: Agent/UDP, node: a, peer: null0}
  - {name: null0, kind: Agent/Null, node: b, peer: udp0}
  - {name: poi0, kind: Application/Traffic/Exponential, attached: udp0,
     params: {packetSize_: 500, burst_time_: 0, idle_time_: 10ms}}
events:
  - {at: 0, target: ftp0, action: start}
  - {at: 0, target: poi0, action: start}
  - {at: 10, target: poi0, action: stop}
  - {at: 10, target: ftp0, action: stop}
"""


def test_yaml_spec_simulates_cubic_and_poisson(lab, tmp_path):
    s = lab.simulate(load(write(tmp_path, YAML, "exp.yaml")), out=str(tmp_path / "out"))
    flows = {f["agent"]: f["result"] for f in s["flows"]}
    ftp, poi = flows["ftp0"], flows["poi0"]
    assert ftp["cc"] == "cubic" and poi["kind"] == "poisson"
    # Poisson with a mean gap of 10 ms: ~1000 packets in 10 s (± 4 σ ≈ ± 130)
    assert abs(poi["sent_packets"] - 1000) < 130
    # CUBIC fills what the Poisson traffic (0.4 Mbit/s) leaves of the 2 Mbit/s bottleneck,
    # losing packets at its 20-packet queue and recovering
    total = (ftp["bytes"] + poi["bytes"]) * 8 / 10
    assert 0.8 * 2e6 * 1000 / 1054 < total <= 2e6
    assert ftp["retransmits"] > 0 and s["links"]["l2"]["ab"]["drop_queue"] > 0
    # every loss is a queue drop at l2, shared between the two flows
    assert poi["lost"] + ftp["retransmits"] >= s["links"]["l2"]["ab"]["drop_queue"] > poi["lost"]
    # loss ratio as wanlab-gen defines it: lost over expected (sent, by sequence number)
    assert poi["lost"] > 0
    assert poi["loss_ratio"] == pytest.approx(poi["lost"] / poi["sent_packets"], rel=0.02)


def test_python_api_simulate_with_builder(tmp_path):
    from wanlab.api import simulate
    from wanlab.frontends.builder import ExperimentBuilder
    b = ExperimentBuilder("apisim", seed=5)
    h1, r, h2 = b.node("h1"), b.node("r"), b.node("h2")
    b.link(h1, r, bandwidth="100Mb", delay="1ms")
    b.link(r, h2, bandwidth="5Mb", delay="20ms")
    t = b.agent("Agent/TCP/Newreno", node=h1, name="t")
    k = b.agent("Agent/TCPSink", node=h2, name="k")
    b.connect(t, k)
    b.agent("Application/FTP", attached=t, name="ftp")
    b.at(0.1, "ftp", "start")
    b.at(5.1, "ftp", "stop")
    s = simulate(b, out=str(tmp_path / "o"), home=str(tmp_path / "h"))
    (f,) = s["flows"]
    assert f["result"]["cc"] == "newreno" and s["seed"] == 5
    # 5 s of a 5 Mbit/s bottleneck, minus slow start
    assert 0.7 * 5e6 * 1000 / 1054 < f["result"]["bytes"] * 8 / 5 <= 5e6


def test_agents_on_a_router_get_an_endpoint_host(lab, tmp_path):
    # armada.tcl puts a CBR source on `router` (two links): in simulation the router stays
    # a router and the agent lives on the endpoint host router-ep behind it
    s = lab.simulate(load(os.path.join(ROOT, "examples", "armada.tcl")), out=str(tmp_path / "o"))
    flows = {f["agent"]: f["result"] for f in s["flows"]}
    assert flows["cbr0"]["packets"] > 0 and flows["ftp0"]["bytes"] > 0
    assert s["links"]["router-ep"]["ba"]["out_pkts"] >= flows["cbr0"]["packets"]
    assert s["links"]["bottleneck"]["ab"]["out_pkts"] > flows["ftp0"]["packets"]


# one NewReno flow through 2 Mbit/s, 20 ms and ns-2's 50-packet DropTail queue; no
# packetSize_, window_ or windowInit_: Linux's values apply
DEEP_QUEUE = """set ns [new Simulator]
source tb_compat.tcl
set s [$ns node]
set r [$ns node]
set d [$ns node]
$ns duplex-link $s $r 100Mb 1ms DropTail
set bott [$ns duplex-link $r $d 2Mb 20ms DropTail]
$ns queue-limit $r $d 50
set tcp [new Agent/TCP/Newreno]
$ns attach-agent $s $tcp
set sink [new Agent/TCPSink]
$ns attach-agent $d $sink
$ns connect $tcp $sink
set ftp [new Application/FTP]
$ftp attach-agent $tcp
$ns at 0.5 "$ftp start"
$ns at 10.5 "$ftp stop"
$ns run
"""


def test_deep_queue_tcp_retransmits_only_what_was_dropped(lab, tmp_path):
    # The slow-start overshoot drops dozens of segments in one window. A SACK-less sender
    # resent 584 segments for 148 drops (go-back-N after timeouts) and reached 1.6 Mbit/s;
    # as Linux (SACK, RACK, PRR) each drop costs one retransmission.
    spec = tmp_path / "deep.tcl"
    spec.write_text(DEEP_QUEUE)
    s = lab.simulate(load(str(spec)), out=str(tmp_path / "out"))
    (f,) = s["flows"]
    r = f["result"]
    drops = s["links"]["bott"]["ab"]["drop_queue"]
    # (a segment dropped in the last round trip before the stop is not resent yet)
    assert drops > 20 and r["retransmits"] <= drops <= r["retransmits"] + 2, (drops, r)
    assert r["timeouts"] == 0, r
    assert r["bytes"] * 8 / 10 > 1.85e6, r["bytes"]
    scenario = json.loads((tmp_path / "out" / "scenario.json").read_text())
    apply = next(q for q in scenario["requests"] if q["cmd"] == "apply")
    (tcp,) = [a for a in apply["agents"] if a.get("kind") == "tcp"]
    assert tcp["mss"] == 1448          # Linux's MSS when the script sets no packetSize_
