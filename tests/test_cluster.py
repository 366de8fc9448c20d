"""The cluster on Ray: a local test cluster of 3 machines (network namespaces, each with
its own Ray worker and host agent), an experiment placed over them with its cut links
tunnelled engine to engine, and everything removed exactly. Driven through the CLI, as a
user would. One cluster for the module (starting Ray's daemons takes tens of seconds)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, needs_root, wanlab_cli

pytestmark = [needs_root,
              pytest.mark.skipif(not __import__("importlib").util.find_spec("ray"),
                                 reason="ray is installed by make install")]

CHAIN = """\
name: {name}
routing: static
nodes: [n0, n1, n2, n3, n4, n5, h0, h1]
links:
  - {{name: l0, nodes: [n0, n1], bandwidth: 100Mb, delay: 5ms}}
  - {{name: l1, nodes: [n1, n2], bandwidth: 100Mb, delay: 5ms}}
  - {{name: l2, nodes: [n2, n3], bandwidth: 10Mb, delay: 5ms}}
  - {{name: l3, nodes: [n3, n4], bandwidth: 100Mb, delay: 5ms}}
  - {{name: l4, nodes: [n4, n5], bandwidth: 100Mb, delay: 5ms}}
lans:
  - {{name: lan0, nodes: [n5, h0, h1], bandwidth: 100Mb, delay: 2ms}}
"""


FLOWS = """\
agents:
  - {name: udp0, kind: Agent/UDP, node: n0, peer: null0}
  - {name: null0, kind: Agent/Null, node: h1, peer: udp0}
  - {name: cbr0, kind: Application/Traffic/CBR, attached: udp0,
     params: {packetSize_: 500, rate_: 1Mb}}
  - {name: tcp0, kind: Agent/TCP, node: h0, peer: sink0}
  - {name: sink0, kind: Agent/TCPSink, node: n0, peer: tcp0}
  - {name: ftp0, kind: Application/FTP, attached: tcp0}
"""

PROGRAM = """\
programs:
  - {name: p0, node: h1, command: "sleep 600"}
"""


def wl(home, *args, check=True, timeout=600):
    return wanlab_cli(home, *args, check=check, timeout=timeout)


def netns_names():
    from conftest import netns_names
    return netns_names()


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    """The session's cluster of 3 machines (tests/conftest.py), as (home, cluster id)."""
    yield shared_cluster.home, shared_cluster.cid
    shared_cluster.clear()


def _stored(home, name, table="event_log"):
    """Every machine's own rows of ``name`` (its event log's latest run, or its flows),
    read from the machines' stores here: a wait on them costs no command."""
    from wanlab.store.db import Store
    out = []
    for db in sorted(home.glob("machines/m*/wanlab.db")):
        store = Store(str(db.parent), create=False)
        try:
            row = store.find(name)
            if row is not None:
                rows = store.event_log(row.id) if table == "event_log" else \
                    store.flows(row.id)
                out += [{**r, "machine": db.parent.name} for r in rows]
        finally:
            store.close()
    return out


def _wait_stored(home, name, done, table="event_log", timeout=120.0):
    """Wait until ``done(rows)`` holds for :func:`_stored`'s rows."""
    import time
    deadline = time.monotonic() + timeout
    while not done(rows := _stored(home, name, table)):
        assert time.monotonic() < deadline, rows
        time.sleep(0.2)
    return rows


def _timeline_fired(rows, since=0.0):
    """The timeline's delay events fired in a run started after ``since`` (epoch s)."""
    return sum(1 for r in rows if r["origin"] == "timeline" and r["action"] == "delay"
               and r["t0"] >= since and r["fired_s"] is not None)


def test_status_finds_an_agent_in_each_machines_namespace(cluster):
    home, cid = cluster
    p = wl(home, "cluster", "status")
    rows = [line.split() for line in p.stdout.splitlines()[1:]]
    assert [r[0] for r in rows] == ["m0", "m1", "m2"]
    assert all(r[2] == "up" for r in rows), p.stdout
    # each agent lives in its machine's namespace, not the host's
    for r in rows:
        pid = int(r[r.index("pid") + 1])
        ino = os.stat(f"/proc/{pid}/ns/net").st_ino
        assert ino == os.stat(f"/run/netns/wlc{cid}-{r[0]}").st_ino
        assert ino != os.stat("/proc/self/ns/net").st_ino


def test_an_agent_that_answers_late_is_waited_for_while_its_machine_lives(cluster, tmp_path):
    """A machine loaded far beyond its cores answers late: its agent, stopped for longer
    than one hello's wait, holds up a create that then succeeds (before, the machine was
    taken for lost: "does not answer", exit 2)."""
    import signal
    import threading

    from wanlab.cluster.experiment import HELLO_TIMEOUT_S
    home, _ = cluster
    rows = [x.split() for x in wl(home, "cluster", "status").stdout.splitlines()[1:]]
    m1 = next(r for r in rows if r[0] == "m1")
    pid = int(m1[m1.index("pid") + 1])
    spec = tmp_path / "late.yaml"
    spec.write_text("name: late\nnodes: [a, b]\nlinks:\n  - {nodes: [a, b], delay: 1ms}\n")
    os.kill(pid, signal.SIGSTOP)
    wake = threading.Timer(HELLO_TIMEOUT_S + 5, os.kill, (pid, signal.SIGCONT))
    wake.start()
    try:
        p = wl(home, "create", str(spec), "--cluster", check=False)
    finally:
        wake.cancel()
        os.kill(pid, signal.SIGCONT)
    assert p.returncode == 0, p.stderr
    wl(home, "terminate", "late")


def test_a_chain_and_a_lan_spread_over_three_machines(cluster, tmp_path):
    home, _ = cluster
    spec = tmp_path / "chain.yaml"
    spec.write_text(CHAIN.format(name="spread"))
    p = wl(home, "create", str(spec), "--cluster")
    assert "active on 3 machines" in p.stdout, p.stdout + p.stderr
    info = json.loads(wl(home, "show", "spread", "--json").stdout)
    where = info["machine_of"]
    assert set(where) == {"n0", "n1", "n2", "n3", "n4", "n5", "h0", "h1"}
    assert set(where.values()) == {"m0", "m1", "m2"}
    assert where["h0"] == where["h1"] == where["n5"]       # a LAN stays on one machine
    # end to end across every machine: 5 links of 5 ms and the LAN's 2 ms, each way
    ping = wl(home, "exec", "spread", "n0", "--", "ping", "-c", "8", "-i", "0.2", "h1")
    rtt_min = float(re.search(r"= ([\d.]+)/", ping.stdout).group(1))
    assert 54.0 <= rtt_min < 60.0, ping.stdout
    wl(home, "exec", "spread", "h1", "--", "iperf3", "-s", "-1", "-D")
    perf = wl(home, "exec", "spread", "n0", "--", "iperf3", "-c", "h1", "-t", "5", "-J")
    bps = json.loads(perf.stdout)["end"]["sum_received"]["bits_per_second"]
    # the 10 Mbit/s link holds wherever it is placed (the lower bound only shows traffic
    # flows: this machine may be loaded; bench/ measures the fidelity of cut links)
    assert 3e6 < bps <= 10.1e6, bps
    text = wl(home, "show", "spread").stdout
    assert re.search(r"machine m\d: .*n0", text), text
    wl(home, "terminate", "spread")
    assert "spread" not in wl(home, "list").stdout
    # every part is gone from its machine's own store
    for m in ("m0", "m1", "m2"):
        db = home / "machines" / m / "wanlab.db"
        if db.exists():
            from wanlab.lifecycle import Lab
            lab = Lab(str(db.parent))
            try:
                assert lab.list() == []
            finally:
                lab.close()


def test_ospf_meets_across_machines(cluster, tmp_path):
    home, _ = cluster
    spec = tmp_path / "ospf.yaml"
    # dual stack: ospfd and ospf6d both meet across the tunnels
    spec.write_text(CHAIN.format(name="dyn").replace("routing: static",
                                                      "routing: ospf\nipv6: true"))
    wl(home, "create", str(spec), "--cluster")
    where = json.loads(wl(home, "show", "dyn", "--json").stdout)["machine_of"]
    # a node whose neighbour runs on another machine learned its routes from OSPF
    cut = next(a for a, b in (("n0", "n1"), ("n1", "n2"), ("n2", "n3"), ("n3", "n4"),
                              ("n4", "n5")) if where[a] != where[b])
    routes = wl(home, "routes", "dyn", cut).stdout
    assert routes.startswith(f"{cut}:") and "proto ospf" in routes, routes
    ping = wl(home, "exec", "dyn", "n0", "--", "ping", "-c", "3", "-i", "0.2", "h1")
    assert " 0% packet loss" in ping.stdout, ping.stdout
    routes6 = wl(home, "routes", "dyn", cut).stdout
    assert re.search(r"^  fd\S+ .*proto ospf", routes6, re.M), routes6
    ping6 = wl(home, "exec", "dyn", "n0", "--", "ping", "-6", "-c", "3", "-i", "0.2", "h1")
    assert " 0% packet loss" in ping6.stdout, ping6.stdout
    wl(home, "terminate", "dyn")


BGP_CHAIN = """\
set ns [new Simulator]
source tb_compat.tcl
foreach i {0 1 2 3 4 5} { set n$i [$ns node] }
foreach {a b} {n0 n1 n1 n2 n2 n3 n3 n4 n4 n5} {
    $ns duplex-link [set $a] [set $b] 100Mb 5ms DropTail
}
foreach {n m} {n0 m0 n1 m0 n2 m1 n3 m1 n4 m2 n5 m2} { tb-fix-node [set $n] $m }
$ns rtproto BGP
$ns run
"""


def test_bgp_sessions_meet_across_machines(cluster, tmp_path):
    """``$ns rtproto BGP`` (an AS per node, eBGP with each neighbour) along a chain over 3
    machines: a session across a cut link is one bgpd on each machine; routes to the far
    networks and loopbacks converge (create waits for them) and carry pings end to end."""
    home, _ = cluster
    spec = tmp_path / "bgpx.tcl"
    spec.write_text(BGP_CHAIN)
    wl(home, "create", str(spec), "--cluster")
    where = json.loads(wl(home, "show", "bgpx", "--json").stdout)["machine_of"]
    assert where == {"n0": "m0", "n1": "m0", "n2": "m1", "n3": "m1", "n4": "m2",
                     "n5": "m2"}, where
    # n1-n2 and n3-n4 are cut: n2 has a session with a node of each of two machines
    out = wl(home, "exec", "bgpx", "n2", "--", "vtysh", "-c", "show bgp summary json")
    states = [p["state"] for p in json.loads(out.stdout)["ipv4Unicast"]["peers"].values()]
    assert states == ["Established"] * 2, states
    # every route of n2's beyond its own 2 networks came from BGP: the 3 others and the
    # 5 other nodes' loopbacks, half of them on other machines
    routes = wl(home, "routes", "bgpx", "n2").stdout
    learned = re.findall(r"^\s+(\S+) .*proto bgp", routes, re.M)
    assert len(learned) == 3 + 5, routes
    ping = wl(home, "exec", "bgpx", "n0", "--", "ping", "-c", "3", "-i", "0.2", "n5")
    assert " 0% packet loss" in ping.stdout, ping.stdout
    wl(home, "terminate", "bgpx")


CUT_RTT = """\
set ns [new Simulator]
source tb_compat.tcl
foreach n {a b c} { set $n [$ns node] }
set cut [$ns duplex-link $a $b 100Mb 10ms DropTail]
set inside [$ns duplex-link $b $c 100Mb 10ms DropTail]
foreach {n m} {a m0 b m1 c m1} { tb-fix-node [set $n] $m }
$ns rtproto Static
$ns run
"""


def _rtts(home, name, src, dst, count=50):
    ping = wl(home, "exec", name, src, "--", "ping", "-n", "-c", str(count), "-i", "0.05",
              dst)
    m = re.search(r"= ([\d.]+)/([\d.]+)/", ping.stdout)
    return float(m.group(1)), float(m.group(2))


def test_a_cut_links_rtt_is_its_configured_delay(cluster, tmp_path):
    """A link cut between two machines is shaped whole by each sending engine, its frames
    carry their due time through the tunnel and the receiving engine holds them until then:
    so no RTT is ever shorter than the configured delays (a path subtracted twice, or a
    receiver that does not hold, would make it so), none is one more delay long, and the
    cut link is no slower than a link inside one machine (beyond this loaded host's
    noise). Also after tevc changes the cut link's delay."""
    home, _ = cluster
    spec = tmp_path / "cutrtt.tcl"
    spec.write_text(CUT_RTT)
    wl(home, "create", str(spec), "--cluster")
    try:
        # each machine's agent measures the other's clock and tells its engine (one host:
        # one clock, so the offset is within the probe's half round trip of 0)
        import time
        deadline = time.monotonic() + 30
        while True:
            out = wl(home, "cluster", "status", "--clocks").stdout
            seen = dict(re.findall(r"^\s+(m[01])\s.*\n\s+clocks ahead of this one's: "
                                   r"(.*); told to [1-9]", out, re.M))
            if set(seen) == {"m0", "m1"}:
                break
            assert time.monotonic() < deadline, out
            time.sleep(1)
        for m, other in (("m0", "m1"), ("m1", "m0")):
            off = re.search(rf"{other} ([-+][\d.]+) ms \(round trip ([\d.]+) ms", seen[m])
            assert off, seen
            assert abs(float(off.group(1))) <= float(off.group(2)) / 2 + 0.2, seen
        for delay_ms in (10, 3):
            if delay_ms != 10:
                for link in ("cut", "inside"):
                    wl(home, "tevc", "-w", "cutrtt", "now", link, "delay", f"{delay_ms}ms")
            cut_min, cut_avg = _rtts(home, "cutrtt", "a", "b")
            in_min, in_avg = _rtts(home, "cutrtt", "b", "c")
            floor = 2.0 * delay_ms
            assert floor <= cut_min < floor + 1.0, (delay_ms, cut_min)
            assert floor <= in_min < floor + 1.0, (delay_ms, in_min)
            assert cut_min - in_min < 0.5, (delay_ms, cut_min, in_min)
            assert cut_avg < floor + 2.0, (delay_ms, cut_avg)
    finally:
        wl(home, "terminate", "cutrtt")


def test_what_no_machine_can_run_is_refused_by_name(cluster, tmp_path):
    """A flow between a simulated and an emulated node (as on one machine)."""
    home, _ = cluster
    spec = tmp_path / "simagents.yaml"
    spec.write_text("name: simagents\nnodes: [a, {name: r, kind: simulated}, b]\n"
                    "links: [{name: l0, nodes: [a, r], delay: 5ms},"
                    " {name: l1, nodes: [r, b], delay: 5ms}]\n"
                    "agents:\n  - {name: udp0, kind: Agent/UDP, node: r, peer: null0}\n"
                    "  - {name: null0, kind: Agent/Null, node: b, peer: udp0}\n"
                    "  - {name: cbr0, kind: Application/Traffic/CBR, attached: udp0}\n")
    p = wl(home, "create", str(spec), "--cluster", check=False)
    assert p.returncode == 2 and "between an emulated and a simulated node" in p.stderr, \
        p.stderr
    assert "simagents" not in wl(home, "list").stdout


def test_create_on_a_cluster_needs_one(tmp_path):
    spec = tmp_path / "c.yaml"
    spec.write_text(CHAIN.format(name="alone"))
    p = wl(tmp_path / "home", "create", str(spec), "--cluster", check=False)
    assert p.returncode == 2 and "no cluster is up" in p.stderr, p.stderr


def _rtt_min(home, name, src, dst):
    ping = wl(home, "exec", name, src, "--", "ping", "-c", "5", "-i", "0.2", dst)
    return float(re.search(r"= ([\d.]+)/", ping.stdout).group(1))


def test_events_tevc_captures_swap_and_modify_across_machines(cluster, tmp_path):
    """One experiment for everything an experiment does at run time, over 3 machines:
    its timeline (every link's delay doubled at t = 1 s, the cut links' on both of their
    machines; a program started), tevc on a cut link (down, up, delay, a capture), the
    merged event log, a shell, CBR and TCP flows between machines, a reboot, swap-out and
    swap-in, and modify of a cut link's delay."""
    home, _ = cluster
    spec = tmp_path / "ev.yaml"
    timeline = "events:\n  - {at: 1, target: p0, action: start}\n" + "".join(
        f"  - {{at: 1, target: l{i}, action: delay, args: [10ms]}}\n" for i in range(5))
    spec.write_text(CHAIN.format(name="ev") + FLOWS + PROGRAM + timeline)
    wl(home, "create", str(spec), "--cluster")
    where = json.loads(wl(home, "show", "ev", "--json").stdout)["machine_of"]
    ends = [("n0", "n1"), ("n1", "n2"), ("n2", "n3"), ("n3", "n4"), ("n4", "n5")]
    cut = next(f"l{i}" for i, (a, b) in enumerate(ends) if where[a] != where[b])
    import time
    # the timeline (t = 1 s): 5 delays, a cut link's on both of its machines
    fires = sum(len({where[a], where[b]}) for a, b in ends)
    _wait_stored(home, "ev", lambda rows: _timeline_fired(rows) == fires)
    # the timeline: 5 links of 10 ms and the LAN's 2 ms, each way
    assert 104.0 <= _rtt_min(home, "ev", "n0", "h1") < 120.0
    # tevc on a cut link: down, then up, then 20 ms (its two directions on two machines)
    p = wl(home, "tevc", "-w", "ev", "now", cut, "down")
    assert "ok" in p.stdout, p.stdout
    lost = wl(home, "exec", "ev", "n0", "--", "ping", "-c", "3", "-i", "0.2", "-W", "1",
              "h1", check=False)
    assert "100% packet loss" in lost.stdout, lost.stdout
    wl(home, "tevc", "-w", "ev", "now", cut, "up")
    wl(home, "tevc", "-w", "ev", "now", cut, "delay", "20ms")
    wl(home, "tevc", "-w", "ev", "now", cut, "trace", "start")
    assert 124.0 <= _rtt_min(home, "ev", "n0", "h1") < 140.0
    wl(home, "tevc", "-w", "ev", "now", cut, "trace", "stop")
    # each direction is captured where it is shaped: one file on each of two machines
    pcaps = sorted(home.glob(f"machines/m*/exps/ev/traces/{cut}-*.pcap"))
    assert len({p.parts[-5] for p in pcaps}) == 2, pcaps
    assert all(p.stat().st_size > 24 for p in pcaps), pcaps     # frames after the header
    # the event log of every machine, merged: the cut link's events on both machines
    log = json.loads(wl(home, "events", "ev", "--json").stdout)
    downs = {e["machine"] for e in log if e["target"] == cut and e["action"] == "down"}
    assert len(downs) == 2 and all(e["outcome"] == "ok" for e in log), log
    assert [e["machine"] for e in log if e["target"] == "p0"] == [where["h1"]], log
    # a shell on a node of another machine (the local cluster's are this host's)
    shell = subprocess.run([sys.executable, "-m", "wanlab.cli", "shell", "ev", "h1"],
                           input="hostname\n", capture_output=True, text=True, timeout=120,
                           env={**os.environ, "WANLAB_HOME": str(home), "PYTHONPATH": ROOT,
                                "SHELL": "/bin/sh"})
    assert shell.stdout.split() == ["h1"], (shell.stdout, shell.stderr)
    # traffic between machines (n0 is never on the LAN's machine): a CBR flow n0 -> h1 and
    # a TCP transfer h0 -> n0, started and stopped by tevc; each end runs on its machine
    assert where["n0"] != where["h1"]
    for app in ("cbr0", "ftp0"):
        wl(home, "tevc", "-w", "ev", "now", app, "start")
    time.sleep(3)
    for app in ("cbr0", "ftp0"):
        wl(home, "tevc", "-w", "ev", "now", app, "stop")
    flows = {f["agent"]: f for f in json.loads(wl(home, "flows", "ev", "--json").stdout)}
    cbr, ftp = flows["cbr0"]["result"], flows["ftp0"]["result"]
    assert flows["cbr0"]["machine"] == f"{where['n0']}->{where['h1']}"
    # (tevc gives both machines one time for an event they share: the sink stops 0.3 s
    # after the sender, as on one machine)
    assert cbr["sent_packets"] > 100 and cbr["packets"] > 0.9 * cbr["sent_packets"], cbr
    assert ftp["bytes"] > 100_000 and ftp["sent_bytes"] >= ftp["bytes"], ftp
    # a node's reboot, on its machine: the program the timeline started is stopped
    p = wl(home, "tevc", "-w", "ev", "now", "h1", "reboot")
    assert "processes stopped" in p.stdout and ": ok" in p.stdout, p.stdout
    # swap-out and in: every part, on its machine; the timeline plays again
    wl(home, "swapout", "ev")
    assert re.search(r"^ev\s+\w+\s+swapped", wl(home, "list").stdout, re.M)
    since = time.time()
    wl(home, "swapin", "ev")
    _wait_stored(home, "ev", lambda rows: _timeline_fired(rows, since) == fires)
    assert 104.0 <= _rtt_min(home, "ev", "n0", "h1") < 120.0
    # modify: the cut link at 30 ms (a parameter change, in place on both machines; the
    # other links keep the 10 ms the timeline gave them)
    text = CHAIN.format(name="ev") + FLOWS + PROGRAM
    line = next(x for x in text.splitlines() if f"name: {cut}," in x)
    spec.write_text(text.replace(line, line.replace("delay: 5ms", "delay: 30ms")))
    wl(home, "modify", "ev", str(spec))
    assert 144.0 <= _rtt_min(home, "ev", "n0", "h1") < 160.0
    wl(home, "terminate", "ev")


def test_run_on_the_cluster_plays_the_timeline_and_writes_the_runs_outputs(cluster,
                                                                            tmp_path):
    """``wanlab run FILE --cluster``: created over the machines, the timeline played from
    one t = 0 on each (every link's delay changed at t = 1 s: a cut link's on both of its
    machines), flows between machines joined from their halves, and summary.json and the
    plot written as a single-machine run writes them; swapped out at the end."""
    home, _ = cluster
    spec = tmp_path / "runc.yaml"
    timeline = ("events:\n  - {at: 0.5, target: cbr0, action: start}\n"
                "  - {at: 0.5, target: ftp0, action: start}\n"
                + "".join(f"  - {{at: 1, target: l{i}, action: delay, args: [6ms]}}\n"
                          for i in range(5))
                + "  - {at: 3, target: cbr0, action: stop}\n"
                "  - {at: 3, target: ftp0, action: stop}\n")
    spec.write_text(CHAIN.format(name="runc") + FLOWS + timeline)
    p = wl(home, "run", str(spec), "--cluster")
    folder = home / "exps" / "runc"
    assert f"results: {folder}" in p.stdout, p.stdout
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["unfired"] == 0 and summary["failed"] == [], summary["failed"]
    # each event on the machine of its object; a cut link's on the two that shape it
    cut = {k: v["machines"] for k, v in summary["links"].items() if "machines" in v}
    assert cut, summary["links"]
    for link, dirs in cut.items():
        fired = {e["machine"] for e in summary["events"]
                 if e["target"] == link and e["action"] == "delay"}
        assert fired == {dirs["ab"], dirs["ba"]}, (link, fired)
        assert all(abs(e["fired_s"] - 1.0) < 0.5 for e in summary["events"]
                   if e["target"] == link), summary["events"]
    # the cut link's counters: each direction from the machine that sends it
    assert all(summary["links"][k][d]["out_pkts"] > 0 for k in cut for d in ("ab", "ba"))
    flows = {f["agent"]: f for f in summary["flows"]}
    assert set(flows) == {"cbr0", "ftp0"}, summary["flows"]
    assert "->" in flows["cbr0"]["machine"]
    cbr, ftp = flows["cbr0"]["result"], flows["ftp0"]["result"]
    assert cbr["sent_packets"] > 100 and cbr["packets"] > 0.9 * cbr["sent_packets"], cbr
    assert ftp["bytes"] > 100_000 and ftp["sent_bytes"] >= ftp["bytes"], ftp
    assert (folder / "plots" / "throughput.png").stat().st_size > 1000
    assert re.search(r"^runc\s+\w+\s+swapped", wl(home, "list").stdout, re.M)
    wl(home, "terminate", "runc")
    assert not folder.exists()


API_ON_CLUSTER = """\
import json, sys, warnings
from fastapi.testclient import TestClient
from wanlab.api import Experiment
from wanlab.frontends import load
from wanlab.lifecycle import Lab
from wanlab.portal import auth, projects, tables
from wanlab.portal.app import make_app
cut = sys.argv[3]
# the portal's tevc and stats (an admin's token; its in-process client): 25 ms
lab = Lab(sys.argv[2])
tables.migrate(lab.store.db)
projects.add_user(lab.store.db, "root", "correct horse", admin=True)
token = auth.new_token(lab.store.db, projects.user_id(lab.store.db, "root"))
lab.close()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    web = TestClient(make_app(sys.argv[2]))
hdr = {"Authorization": f"Bearer {token}"}
r = web.post("/api/experiments/fol/tevc", headers=hdr,
             json={"time": "now", "object": cut, "event": "delay", "args": ["25ms"]})
portal = {"tevc": r.json(), "status": r.status_code,
          "stats": sorted(web.get("/api/experiments/fol/stats", headers=hdr).json()["links"])}
with web.websocket_connect("/api/experiments/fol/live", headers=hdr) as ws:
    live = ws.receive_json()
portal["events"] = sorted({e["machine"] for e in web.get("/api/experiments/fol/events",
                                                           headers=hdr).json()})
portal["live"] = {"links": {k: v.get("machines") for k, v in live["links"].items()},
                  "events": [(e["machine"], e["target"]) for e in live["events"]]}
# the Python API: 30 ms, then down and up
exp = Experiment(load(sys.argv[1]), home=sys.argv[2], keep=True)
exp.set_link(cut, delay="30ms")
before = exp.stats(cut)["links"][cut]
exp.link_down(cut)
reply = exp.tevc(cut, "up", wait=True)
print(json.dumps({"stats": before, "all": sorted(exp.stats()["links"]), "tevc": reply,
                  "portal": portal}))
"""


def test_follow_repair_and_the_python_api_on_a_cluster_experiment(cluster, tmp_path):
    """``events --follow`` merges the machines' logs in time order; ``swapin --repair``
    rebuilds only the part whose engine was killed, on the others' clock; the Python API's
    ``set_link``, ``link_down``, ``stats`` and ``tevc`` reach the machines that shape a
    cut link, as the CLI's tevc does."""
    home, _ = cluster
    spec = tmp_path / "fol.yaml"
    timeline = "events:\n" + "".join(
        f"  - {{at: {4 + i * 0.5}, target: l{i}, action: delay, args: [{6 + i}ms]}}\n"
        for i in range(5))
    spec.write_text(CHAIN.format(name="fol") + timeline)
    wl(home, "create", str(spec), "--cluster")
    follow = subprocess.Popen([sys.executable, "-m", "wanlab.cli", "events", "fol", "--follow",
                               "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**os.environ, "WANLAB_HOME": str(home),
                                              "PYTHONPATH": ROOT})
    try:
        where = json.loads(wl(home, "show", "fol", "--json").stdout)["machine_of"]
        ends = [("n0", "n1"), ("n1", "n2"), ("n2", "n3"), ("n3", "n4"), ("n4", "n5")]
        cut = next(f"l{i}" for i, (a, b) in enumerate(ends) if where[a] != where[b])
        # the timeline is over (t = 6 s): 5 delays, a cut link's on both of its machines
        fires = sum(len({where[a], where[b]}) for a, b in ends)
        _wait_stored(home, "fol", lambda rows: _timeline_fired(rows) == fires)
        # the API: a cut link's delay on the machine that shapes each direction, down and
        # up, its counters from both machines
        script = tmp_path / "api.py"
        script.write_text(API_ON_CLUSTER)
        p = subprocess.run([sys.executable, str(script), str(spec), str(home), cut],
                           capture_output=True, text=True, timeout=300,
                           env={**os.environ, "PYTHONPATH": ROOT})
        assert p.returncode == 0, p.stderr
        api = json.loads(p.stdout.strip().splitlines()[-1])
        assert set(api["stats"]["machines"].values()) == {where[a] for a in
                                                          ends[int(cut[1])]}, api["stats"]
        assert api["all"] == ["l0", "l1", "l2", "l3", "l4"], api
        assert api["tevc"]["outcome"] == "ok" and len(api["tevc"]["machines"]) == 2, api
        # the portal's tevc on the cut link reached both machines too (25 ms each way)
        web = api["portal"]
        assert web["status"] == 200 and web["tevc"]["outcome"] == "ok", web
        assert sorted(web["tevc"]["machines"]) == sorted(where[a] for a in
                                                          ends[int(cut[1])]), web
        assert web["stats"] == ["l0", "l1", "l2", "l3", "l4"], web
        assert web["events"] == sorted(set(where.values())), web
        # the live view: every machine's counters and log rows
        assert set(web["live"]["links"]) == {f"l{i}" for i in range(5)}, web
        assert set(web["live"]["links"][cut].values()) == {where[a] for a in
                                                           ends[int(cut[1])]}, web
        assert len({m for m, t in web["live"]["events"] if t == cut}) == 2, web
        # the API's set_link came last: 30 ms each way on the cut link (25 would be 10 ms
        # less), the LAN's 2 ms and the timeline's 6-10 ms on the others
        one_way = 30.0 + 2.0 + sum(6.0 + i for i in range(5) if f"l{i}" != cut)
        assert _rtt_min(home, "fol", "n0", "h1") >= 2 * one_way - 2.0
        # kill the engine of the part of n0's machine: swapin --repair rebuilds that part
        from wanlab.store.db import Store
        victim = where["n0"]
        part = Store(str(home / "machines" / victim))
        try:
            engine = next(r for r in part.resources(part.get("fol").id) if r.kind == "engine")
        finally:
            part.close()
        os.kill(engine.detail["pid"], 9)
        # list asks every part how it is: this one's engine is gone
        line = next(x for x in wl(home, "list").stdout.splitlines() if x.startswith("fol"))
        assert "degraded" in line and f"part on {victim} broken: engine" in line, line
        assert "n0" in line, line
        p = wl(home, "swapin", "--repair", "fol")
        assert f"repairing the part on {victim}" in p.stdout, p.stdout
        assert p.stdout.count("repairing the part") == 1, p.stdout
        assert " 0% packet loss" in wl(home, "exec", "fol", "n0", "--", "ping", "-c", "3",
                                       "-i", "0.2", "h1").stdout
        again = wl(home, "swapin", "--repair", "fol", check=False)
        assert again.returncode == 2 and "nothing to repair" in again.stderr, again.stderr
        wl(home, "swapout", "fol")           # follow ends with the run
        out, err = follow.communicate(timeout=120)
    finally:
        follow.kill()
    assert follow.returncode == 0 and "Traceback" not in err, err
    log = [json.loads(x) for x in out.splitlines()]
    timed = [e for e in log if e["origin"] == "timeline"]
    fired = [e["fired_s"] for e in log]
    assert fired == sorted(fired), log
    assert {e["target"] for e in timed} == {f"l{i}" for i in range(5)}, log
    assert {e["machine"] for e in timed if e["target"] == cut} == \
        {where[a] for a in ends[int(cut[1])]}, log
    wl(home, "terminate", "fol")


def test_a_simulation_over_the_machines_gives_the_bytes_of_one_engine(cluster, tmp_path):
    """``run --simulate --cluster``: one engine per machine, synchronised over the
    machines' bridge, on one thread or two each; result.json is the single engine's, byte
    for byte."""
    from test_simulate_parallel import THREE_SITES
    home, _ = cluster
    spec = tmp_path / "three.tcl"
    spec.write_text(THREE_SITES)
    one, many = tmp_path / "one", tmp_path / "many"
    wl(home, "run", str(spec), "--simulate", "--seed", "5", "--out", str(one))
    p = wl(home, "run", str(spec), "--simulate", "--cluster", "--seed", "5", "--out",
           str(many))
    assert re.search(r"^3 machines: m0 \(\d+ nodes\)", p.stdout, re.M), p.stdout
    summary = json.loads((many / "summary.json").read_text())
    assert summary["engine"]["engines"] == 3
    assert summary["engine"]["lookahead_ns"] == 15_000_000
    assert (one / "result.json").read_bytes() == (many / "result.json").read_bytes()
    # each machine's engine on two threads (its site cut at its access links)
    threads = tmp_path / "threads"
    p = wl(home, "run", str(spec), "--simulate", "--cluster", "--threads", "2", "--seed", "5",
           "--out", str(threads))
    assert re.search(r"^3 machines: m0 \(\d+ nodes, 2 threads\)", p.stdout, re.M), p.stdout
    summary = json.loads((threads / "summary.json").read_text())
    assert summary["engine"]["engines"] == 3 and summary["engine"]["threads"] == 6
    assert summary["cluster"]["threads"] == {"m0": 2, "m1": 2, "m2": 2}
    assert (one / "result.json").read_bytes() == (threads / "result.json").read_bytes()
    # every machine's engine is gone and left nothing in its machine's folder
    assert not any((home / "machines").glob("*/sims/sim-*"))


SIMULATED_CORE = """\
set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
$ns make-simulated {
    set r1 [$ns node]
    set r2 [$ns node]
}
$ns duplex-link $a $r1 100Mb 5ms DropTail
$ns duplex-link $r1 $r2 100Mb 5ms DropTail
$ns duplex-link $r2 $b 10Mb 5ms DropTail
tb-fix-node $a m0
tb-fix-node $r1 m1
tb-fix-node $b m2
$ns rtproto Static
$ns run
"""


def test_simulated_routers_on_one_machine_carry_traffic_between_two_others(cluster,
                                                                         tmp_path):
    """Two simulated routers (one connected piece: r2 is not pinned, and goes with r1)
    in m1's engine, between emulated hosts on m0 and m2: ping, traceroute and TCP cross
    both cut links and the simulated core."""
    home, _ = cluster
    spec = tmp_path / "simcore.tcl"
    spec.write_text(SIMULATED_CORE)
    wl(home, "create", str(spec), "--cluster")
    where = json.loads(wl(home, "show", "simcore", "--json").stdout)["machine_of"]
    assert where == {"a": "m0", "r1": "m1", "r2": "m1", "b": "m2"}, where
    text = wl(home, "show", "simcore").stdout
    assert "machine m1: r1, r2" in text and "machine m0: a" in text, text
    # 3 links of 5 ms each way
    assert 30.0 <= _rtt_min(home, "simcore", "a", "b") < 36.0
    # the simulated routers answer on the way (ICMP time exceeded from m1's engine)
    hops = wl(home, "exec", "simcore", "a", "--", "traceroute", "-n", "-q", "1",
              "b").stdout
    assert re.findall(r"^\s*\d+\s+([\d.]+)", hops, re.M) == [
        "10.1.0.2", "10.1.1.2", "10.1.2.2"], hops
    wl(home, "exec", "simcore", "b", "--", "iperf3", "-s", "-1", "-D")
    perf = wl(home, "exec", "simcore", "a", "--", "iperf3", "-c", "b", "-t", "3", "-J")
    bps = json.loads(perf.stdout)["end"]["sum_received"]["bits_per_second"]
    assert 3e6 < bps <= 10.1e6, bps         # r2-b's 10 Mbit/s, shaped on m1 (r2's side)
    wl(home, "terminate", "simcore")
    assert "simcore" not in wl(home, "list").stdout


SIMULATED_FLOWS = SIMULATED_CORE.replace("$ns rtproto Static\n", """\
$ns make-simulated {
    set s1 [$ns node]
    set s2 [$ns node]
}
$ns duplex-link $s1 $r1 100Mb 1ms DropTail
$ns duplex-link $s2 $r2 100Mb 1ms DropTail
$ns rtproto Static
set udp0 [new Agent/UDP]
$ns attach-agent $a $udp0
set null0 [new Agent/Null]
$ns attach-agent $b $null0
$ns connect $udp0 $null0
set cbr0 [new Application/Traffic/CBR]
$cbr0 set rate_ 1Mb
$cbr0 attach-agent $udp0
set udp1 [new Agent/UDP]
$ns attach-agent $s1 $udp1
set null1 [new Agent/Null]
$ns attach-agent $s2 $null1
$ns connect $udp1 $null1
set cbr1 [new Application/Traffic/CBR]
$cbr1 set packetSize_ 1000
$cbr1 set rate_ 2Mb
$cbr1 attach-agent $udp1
set tcp2 [new Agent/TCP/Newreno]
$ns attach-agent $r1 $tcp2
set sink2 [new Agent/TCPSink]
$ns attach-agent $s2 $sink2
$ns connect $tcp2 $sink2
set ftp2 [new Application/FTP]
$ftp2 attach-agent $tcp2
foreach app {cbr0 cbr1 ftp2} {
    $ns at 1.0 "[set $app] start"
    $ns at 3.0 "[set $app] stop"
}
""")

PORTAL_ON_CLUSTER = """\
import json, sys, warnings
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect
from wanlab.cluster.control import OnCluster
from wanlab.lifecycle import Lab
from wanlab.portal import auth, projects, tables
from wanlab.portal.app import make_app
home, name, how = sys.argv[1:4]
lab = Lab(home)
tables.migrate(lab.store.db)
projects.add_user(lab.store.db, how, "correct horse", admin=True)
token = auth.new_token(lab.store.db, projects.user_id(lab.store.db, how))
lab.close()
if how == "relayed":        # as on a machine elsewhere: the agent runs the terminal
    OnCluster.runs_here = lambda self: False
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    web = TestClient(make_app(home))
hdr = {"Authorization": f"Bearer {token}"}
out = {}

def run(ws, line):
    got = b""
    ws.send_bytes(line.encode() + b"; echo DO''NE\\n")
    while b"DONE" not in got:
        got += ws.receive_bytes()
    return got.decode(errors="replace")


def console(node):
    return web.websocket_connect(f"/api/experiments/{name}/console/{node}", headers=hdr)


def leave(ws):
    # exit: the shell ends, then the portal closes the socket
    ws.send_bytes(b"exit\\n")
    try:
        while True:
            ws.receive_bytes()
    except WebSocketDisconnect:
        return True


with console("b") as b:
    b.send_text(json.dumps({"resize": [120, 40]}))
    out["hostname"] = [x.strip() for x in run(b, "hostname; stty size").splitlines()]
    # a second console open meanwhile, and closed: the first keeps working
    with console("a") as a:
        out["a"] = run(a, "hostname").splitlines()
        out["closed"] = leave(a)
    out["b again"] = [x.strip() for x in run(b, "echo $((6 * 7))").splitlines()]
    leave(b)
if how == "local":          # the agent's relay by its socket (the API's, any machine)
    lab = Lab(home)
    term = OnCluster(lab).console(name, "b", ["/bin/sh"])
    lab.close()
    got, alive = term.io(b"echo $((6 * 7))\\n", 0.5)
    for _ in range(40):
        if not alive or b"42" in got:
            break
        more, alive = term.io(b"", 0.5)
        got += more
    term.close()
    out["socket relay"] = got.decode(errors="replace")
started = {}
for link in ("link1", "link2"):
    r = web.post(f"/api/experiments/{name}/captures", headers=hdr, json={"link": link})
    started[link] = r.json()["files"]
out["started"] = started
with console("a") as a:
    out["ping"] = run(a, "ping -c 3 -i 0.2 b")
    leave(a)
out["listed"] = sorted(c["file"] for c in
                       web.get(f"/api/experiments/{name}/captures", headers=hdr).json())
out["sizes"] = {f: len(web.get(f"/api/experiments/{name}/captures/{f}", headers=hdr).content)
                for files in started.values() for f in files}
out["stop"] = web.post(f"/api/experiments/{name}/captures/stop", headers=hdr).json()
out["outside"] = web.get(f"/api/experiments/{name}/captures/m1/../../wanlab.db",
                         headers=hdr).status_code
print(json.dumps(out))
"""


def test_portal_consoles_captures_and_simulated_flows_on_a_cluster(cluster, tmp_path):
    """Simulated traffic agents in a cluster experiment (a CBR between two simulated hosts
    and TCP from a simulated router, whose two ends are placed on one machine, beside a
    CBR between emulated hosts on two others) are run by that machine's engine and
    reported by ``wanlab flows``. The portal's consoles reach nodes of other machines,
    from here (the local cluster's namespaces are this host's) and as a terminal relayed
    by the machine's agent through Ray (as on a machine elsewhere); its captures take a
    cut link's directions on the two machines that shape them, and a link inside one
    machine, and serve the files it lists only."""
    home, _ = cluster
    spec = tmp_path / "simflows.tcl"
    spec.write_text(SIMULATED_FLOWS)
    wl(home, "create", str(spec), "--cluster")
    where = json.loads(wl(home, "show", "simflows", "--json").stdout)["machine_of"]
    assert where == {"a": "m0", "r1": "m1", "r2": "m1", "s1": "m1", "s2": "m1",
                     "b": "m2"}, where
    # the flows ran from t = 1 s to 3 s: each stopped on every machine holding an end
    stops = {("cbr0", "m0"), ("cbr0", "m2"), ("cbr1", "m1"), ("ftp2", "m1")}
    _wait_stored(home, "simflows", lambda rows: stops <= {
        (r["target"], r["machine"]) for r in rows if r["action"] == "stop"
        and r["fired_s"] is not None})
    _wait_stored(home, "simflows", lambda rows: {"cbr0", "cbr1", "ftp2"} <= {
        r["agent"] for r in rows}, table="flows")
    flows = {f["agent"]: f for f in json.loads(wl(home, "flows", "simflows",
                                                  "--json").stdout)}
    assert set(flows) == {"cbr0", "cbr1", "ftp2"}, flows
    assert flows["cbr0"]["machine"] == "m0->m2"
    assert flows["cbr1"]["machine"] == flows["ftp2"]["machine"] == "m1"
    cbr1, ftp2 = flows["cbr1"]["result"], flows["ftp2"]["result"]
    # 2 s of 2 Mbit/s; TCP from r1's endpoint host to s2
    assert cbr1["sent_packets"] > 400 and cbr1["bytes"] > 0.9 * 1000 * 400, cbr1
    assert ftp2["bytes"] > 100_000, ftp2
    log = json.loads(wl(home, "events", "simflows", "--json").stdout)
    assert {e["machine"] for e in log if e["target"] in ("cbr1", "ftp2")} == {"m1"}, log
    assert all(e["outcome"] == "ok" for e in log), log
    script = tmp_path / "portal.py"
    script.write_text(PORTAL_ON_CLUSTER)
    for how in ("local", "relayed"):
        p = subprocess.run([sys.executable, str(script), str(home), "simflows", how],
                           capture_output=True, text=True, timeout=300,
                           env={**os.environ, "PYTHONPATH": ROOT})
        assert p.returncode == 0, (how, p.stderr)
        web = json.loads(p.stdout.strip().splitlines()[-1])
        assert "b" in web["hostname"] and "40 120" in web["hostname"], web["hostname"]
        assert "a" in [x.strip() for x in web["a"]] and "42" in web["b again"], web
        assert web["closed"], web
        assert how == "relayed" or "42\r\n" in web["socket relay"], web
        assert " 0% packet loss" in web["ping"], web["ping"]
        # link1 (r1-r2) inside m1: one file; link2 (r2-b) cut: each direction where it
        # is sent
        l1, l2 = web["started"]["link1"], web["started"]["link2"]
        assert [f.split("/")[0] for f in l1] == ["m1"], l1
        assert [f.split("/")[0] for f in l2] == ["m1", "m2"], l2
        assert set(l1 + l2) <= set(web["listed"]), web
        # pcap header (24 bytes) + 3 echo requests (one direction) or replies, 114 bytes
        # each as captured (a 98-byte frame and its 16-byte record header); perhaps an
        # ARP exchange more
        for f, frames in [(l1[0], 6), (l2[0], 3), (l2[1], 3)]:
            assert 24 + frames * 114 <= web["sizes"][f] <= 24 + frames * 114 + 2 * 58, web
        assert web["stop"] == {"ok": True} and web["outside"] == 404, web
    assert any(home.glob("exps/simflows/fetched/m*/captures/link2-*.pcap"))
    # ``wanlab shell`` on a node of a machine elsewhere: the agent's terminal, relayed
    # (bash: dash on a node's terminal exits 2, "Cannot set tty process group", whatever
    # its exit says, here as on one machine)
    forced = ("import sys; from wanlab.cluster.control import OnCluster; "
              "OnCluster.runs_here = lambda self: False; from wanlab.cli import main; "
              "sys.exit(main(sys.argv[1:]))")
    shell = subprocess.run([sys.executable, "-c", forced, "shell", "simflows", "b"],
                           input="hostname\nexit 3\n", capture_output=True, text=True,
                           timeout=120, env={**os.environ, "WANLAB_HOME": str(home),
                                             "PYTHONPATH": ROOT, "SHELL": "/bin/bash"})
    assert shell.returncode == 3, (shell.stdout, shell.stderr)
    assert "b" in [x.strip() for x in shell.stdout.splitlines()], shell.stdout
    wl(home, "terminate", "simflows")
    assert not any(home.glob("machines/*/exps/simflows"))
    assert not (home / "exps" / "simflows").exists()        # the fetched copies too


def _parts_made(home, name):
    """What each machine's own store recorded of its part of ``name``: its short id and
    the pids of its engine and scheduler (machine -> (short, [pids]))."""
    import sqlite3
    out = {}
    for db in sorted(home.glob("machines/m*/wanlab.db")):
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT id, short FROM experiments WHERE name = ?",
                              (name,)).fetchone()
            if row is None:
                continue
            pids = [json.loads(d).get("pid") for (d,) in con.execute(
                "SELECT detail FROM resources WHERE exp_id = ? AND kind IN "
                "('engine', 'scheduler', 'process')", (row[0],))]
        except sqlite3.OperationalError:    # a store being made: nothing in it yet
            continue
        finally:
            con.close()
        out[db.parent.name] = (row[1], [p for p in pids if p])
    return out


def _running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


RESHAPE = """\
set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
{more}
$ns duplex-link $a $b 100Mb 2ms DropTail
{links}
tb-fix-node $a m0
tb-fix-node $b m1
$a start-command "sleep 3000"
$ns rtproto Static
$ns run
"""


def _sleep_pid(home, name):
    return wl(home, "exec", name, "a", "--", "pgrep", "-x", "sleep").stdout.split()


def test_modify_adds_and_removes_nodes_links_and_machines(cluster, tmp_path):
    """A structural modify of a cluster experiment: a and b stay where they run (a's
    start command keeps its pid), node gone1 and its link go, c joins on m2 (a machine
    with no part until then) with a cut link to b, and e joins a new LAN with a (so on
    a's machine); traffic crosses the new cut link. A second modify takes c and e away
    again and m2's part goes. Moving a running node, or a LAN over two machines' running
    nodes, is refused by name and changes nothing. Swapped out, it grows again (the new
    part stored swapped) and swaps in whole."""
    home, cid = cluster
    spec = tmp_path / "reshape.tcl"
    spec.write_text(RESHAPE.format(more="set gone1 [$ns node]\ntb-fix-node $gone1 m1",
                                   links="$ns duplex-link $b $gone1 100Mb 1ms DropTail"))
    wl(home, "create", str(spec), "--cluster")
    where = json.loads(wl(home, "show", "reshape", "--json").stdout)["machine_of"]
    assert where == {"a": "m0", "b": "m1", "gone1": "m1"}, where
    pid = _sleep_pid(home, "reshape")
    assert pid, pid
    parts_before = _parts_made(home, "reshape")
    assert set(parts_before) == {"m0", "m1"}, parts_before
    gone_ns = f"wl-{parts_before['m1'][0]}-gone1"
    assert gone_ns in netns_names()
    # grow: c pinned to m2; e placed by METIS, with its LAN, which a pins to m0
    spec.write_text(RESHAPE.format(
        more="set c [$ns node]\nset e [$ns node]\ntb-fix-node $c m2",
        links="$ns duplex-link $b $c 100Mb 3ms DropTail\n"
              "set lan0 [$ns make-lan \"$a $e\" 100Mb 1ms]"))
    grown = spec.read_text()
    p = wl(home, "modify", "reshape", str(spec))
    assert "m2 joins" in p.stdout, p.stdout
    where = json.loads(wl(home, "show", "reshape", "--json").stdout)["machine_of"]
    assert where == {"a": "m0", "b": "m1", "c": "m2", "e": "m0"}, where
    assert _sleep_pid(home, "reshape") == pid           # a kept running
    assert gone_ns not in netns_names()
    # a -> c crosses m0 -> m1 -> m2: 2 + 3 ms each way
    assert 10.0 <= _rtt_min(home, "reshape", "a", "c") < 16.0
    assert _rtt_min(home, "reshape", "e", "c") >= 10.0
    # refused by name, nothing changed: a moved, and a LAN over m0's and m1's nodes
    bad = tmp_path / "bad.tcl"
    bad.write_text(spec.read_text().replace("tb-fix-node $a m0", "tb-fix-node $a m1"))
    p = wl(home, "modify", "reshape", str(bad), check=False)
    assert p.returncode != 0 and "node a runs on machine m0" in p.stderr, p.stderr
    bad.write_text(spec.read_text().replace('"$a $e"', '"$a $b $e"'))
    p = wl(home, "modify", "reshape", str(bad), check=False)
    assert p.returncode != 0 and "modify of cluster experiment reshape" in p.stderr and \
        "must share a machine" in p.stderr, p.stderr
    assert json.loads(wl(home, "show", "reshape", "--json").stdout)["machine_of"] == where
    # shrink: c and e go, and with them m2's part
    spec.write_text(RESHAPE.format(more="", links=""))
    p = wl(home, "modify", "reshape", str(spec))
    assert "m2 leaves" in p.stdout, p.stdout
    where = json.loads(wl(home, "show", "reshape", "--json").stdout)["machine_of"]
    assert where == {"a": "m0", "b": "m1"}, where
    assert set(_parts_made(home, "reshape")) == {"m0", "m1"}
    assert _sleep_pid(home, "reshape") == pid
    assert 4.0 <= _rtt_min(home, "reshape", "a", "b") < 8.0
    # a swapped experiment grows too: m2's new part is stored swapped, built at swap-in
    wl(home, "swapout", "reshape")
    spec.write_text(grown)
    p = wl(home, "modify", "reshape", str(spec))
    assert "m2 joins" in p.stdout, p.stdout
    wl(home, "swapin", "reshape")
    assert 10.0 <= _rtt_min(home, "reshape", "a", "c") < 16.0
    wl(home, "terminate", "reshape")
    assert not _parts_made(home, "reshape")
    assert not {n for n in netns_names() if n.startswith("wl-") and
                any(n.startswith(f"wl-{s}-") for s, _ in parts_before.values())}


ACROSS = """\
set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
set c [$ns node]
set l0 [$ns duplex-link $a $b 100Mb 2ms DropTail]
set l1 [$ns duplex-link $b $c 100Mb 2ms DropTail]
tb-fix-node $a m0
tb-fix-node $b m1
tb-fix-node $c m2
set pa [$a program-agent -command "sleep 1"]
set pb [$b program-agent -command "sleep 1"]
set pc [$c program-agent -command "true"]
set seq [$ns event-sequence {
  $pa run
  $l0 delay 10ms
  $pb run
  $pc run
}]
$ns at 1 "$seq start"
$ns at 6 "$ns swapout"
$ns rtproto Static
$ns run
"""


def _wait_listed(home, name, state, timeout=120.0):
    """Wait until ``wanlab list`` shows ``name`` in ``state`` (None: not listed)."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = wl(home, "list").stdout
        row = re.search(rf"^{name}\s+\w+\s+(\S+)", text, re.M)
        if (row.group(1) if row else None) == state:
            return
        time.sleep(1.0)
    raise AssertionError(f"{name} not {state}: {text}")


def _wall(e):
    """When an event fired, in Unix time: each machine logs it from its own clock's t = 0,
    which is later than the others' when the machine was late to start it (a loaded one)."""
    return e["t0"] + e["fired_s"]


def test_a_sequence_over_three_machines_then_ns_swapout_and_terminate(cluster, tmp_path):
    """An event sequence whose steps are on m0, on both ends of a cut link, on m1 and on
    m2 runs in order, each step when the one before has completed (a Program's run when
    the program exits); ``$ns at 6 "$ns swapout"`` halts every machine's timeline and
    swaps the whole experiment out; ``$ns terminate`` removes it from every machine."""
    home, _ = cluster
    spec = tmp_path / "across.tcl"
    spec.write_text(ACROSS)
    wl(home, "create", str(spec), "--cluster")
    _wait_listed(home, "across", "swapped")
    log = json.loads(wl(home, "events", "across", "--json").stdout)
    steps = sorted((e for e in log if e["origin"] == "sequence"), key=_wall)
    assert [(e["target"], e["machine"]) for e in steps[:1] + steps[3:]] == [
        ("pa", "m0"), ("pb", "m1"), ("pc", "m2")], steps
    assert {(e["target"], e["machine"]) for e in steps[1:3]} == {("l0", "m0"), ("l0", "m1")}
    assert all(e["outcome"] == "ok" for e in steps), steps
    assert 1.0 <= steps[0]["fired_s"] < 3.0
    pa, d0, d1, pb, pc = (_wall(e) for e in steps)
    # each step after the one before completed: pa and pb each run "sleep 1"
    assert min(d0, d1) >= pa + 1.0 and pb >= max(d0, d1) and pc >= pb + 1.0
    halts = {e["machine"] for e in log if (e["target"], e["action"]) == ("ns", "halt")}
    assert halts == {"m0", "m1", "m2"}, log
    wl(home, "terminate", "across")
    # the same sequence started by tevc, then $ns terminate
    spec.write_text(ACROSS.replace('$ns at 1 "$seq start"\n', "").replace(
        '"$ns swapout"', '"$ns terminate"').replace("at 6", "at 20"))
    wl(home, "create", str(spec), "--cluster")
    made = _parts_made(home, "across")
    assert set(made) == {"m0", "m1", "m2"}, made
    p = wl(home, "tevc", "-w", "across", "now", "seq", "start")
    assert "sequence seq: 4 steps on m0, m1, m2" in p.stdout, p.stdout
    import time
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        log = json.loads(wl(home, "events", "across", "--json").stdout)
        steps = sorted((e for e in log if e["origin"] == "sequence"), key=_wall)
        if len(steps) == 5:
            break
        time.sleep(1.0)
    assert [e["target"] for e in steps] == ["pa", "l0", "l0", "pb", "pc"], steps
    assert _wall(steps[1]) >= _wall(steps[0]) + 1.0
    _wait_listed(home, "across", None)
    assert not _parts_made(home, "across")
    assert not {n for n in netns_names() if any(n.startswith(f"wl-{s}-")
                                                 for s, _ in made.values())}


def test_kill_9_of_the_controller_mid_swap_in_leaves_only_what_terminate_removes(cluster,
                                                                              tmp_path):
    """``create --cluster`` killed with SIGKILL while every machine builds its part: the
    machines finish or stop what they recorded; ``terminate`` then removes exactly that on
    every machine (no namespace of a part, no process it started, no record left)."""
    import time
    home, _ = cluster
    spec = tmp_path / "k9.yaml"
    spec.write_text(CHAIN.format(name="k9"))
    env = {**os.environ, "WANLAB_HOME": str(home), "PYTHONPATH": ROOT}
    ctl = subprocess.Popen([sys.executable, "-m", "wanlab.cli", "create", str(spec),
                            "--cluster"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while len(_parts_made(home, "k9")) < 3 and ctl.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert ctl.poll() is None, ctl.stdout.read()        # killed in the middle
    os.kill(ctl.pid, 9)
    ctl.wait()
    ctl.stdout.close()
    # it stays recorded: listed, and its parts known to the controller's store
    assert re.search(r"^k9\s", wl(home, "list").stdout, re.M)
    made = _parts_made(home, "k9")
    shorts = {s for s, _ in made.values()}
    pids = [p for _, ps in made.values() for p in ps]
    wl(home, "terminate", "k9")
    assert "k9" not in wl(home, "list").stdout
    assert _parts_made(home, "k9") == {}        # every machine's store forgot its part
    # nothing of any part is left: no node namespace (by its part's short id, recorded or
    # not), no process it had recorded
    left = {n for n in netns_names() for s in shorts if n.startswith(f"wl-{s}-")}
    assert not left, left
    assert not [p for p in pids if _running(p)], pids
    from wanlab.cluster import experiment
    from wanlab.store.db import Store
    store = Store(str(home))
    try:
        assert not experiment.parts_of(store, "k9")
    finally:
        store.close()


PINNED = """\
set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
set c [$ns node]
$ns duplex-link $a $b 100Mb 5ms DropTail
$ns duplex-link $b $c 100Mb 5ms DropTail
tb-fix-node $a {a}
tb-fix-node $b {bc}
tb-fix-node $c {bc}
$ns rtproto Static
$ns run
"""

# in a child Python: a Ray worker started here would be this test's child, stopped by the
# autouse fixture after the test (the machine would be lost for the tests after it)
KILL_AND_REJOIN = """
import os, sys
from wanlab.cluster import local
from wanlab.cluster.local import _descendants
from wanlab.store import cluster as rec
from wanlab.store.db import Store
store = Store(sys.argv[1])
worker = next(r for r in rec.live(store, "process") if r.name == "ray-" + sys.argv[2])
for pid in [worker.detail["pid"], *_descendants(worker.detail["pid"])]:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass
if sys.argv[3] == "rejoin":
    local.rejoin(store, sys.argv[2])
"""


def _cluster_record(home):
    from wanlab.store import cluster as rec
    from wanlab.store.db import Store
    store = Store(str(home))
    try:
        return rec.live(store, "cluster")[-1].detail, next(
            (r.detail for r in rec.live(store, "matrix")), None)
    finally:
        store.close()


def _child(code, *args):
    p = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": ROOT})
    assert p.returncode == 0, p.stdout + p.stderr


def _wait_up(home, machine):
    import time
    deadline = time.monotonic() + 300
    while True:
        status = wl(home, "cluster", "status", check=False).stdout
        if re.search(rf"^\s+{machine}\s+\S+\s+up\b", status, re.M):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(2)


def test_join_adds_a_machine_while_up_and_a_cluster_joined_by_address_follows(cluster,
                                                                             tmp_path):
    """``cluster join --local`` adds m3 while an experiment runs (untouched: the same
    engines, placement and paths); only m3's pairs are measured; a new experiment is
    placed on m3. A second wanlab joins the same Ray cluster by address, and its
    ``cluster join`` picks up m3's Ray node. Then a machine's Ray worker dies and comes
    back as a new Ray node: the cluster joined by address finds it by its address,
    re-pins its agent, and reaches the part it kept. ``cluster down`` removes m3 (the
    fixture checks no namespace of the cluster is left)."""
    home, cid = cluster
    head = _cluster_record(home)[0]["head"]
    spec = tmp_path / "stay.tcl"
    spec.write_text(PINNED.format(a="m0", bc="m1"))
    wl(home, "create", str(spec), "--cluster")
    before = _parts_made(home, "stay")
    old = _cluster_record(home)[1]
    p = wl(home, "cluster", "join", "--local", timeout=900)
    assert "m3 joined; 4 machines up" in p.stdout, p.stdout
    assert "the pairs of m3" in p.stdout, p.stdout
    assert f"wlc{cid}-m3" in netns_names()
    rows = [x.split() for x in wl(home, "cluster", "status").stdout.splitlines()[1:]]
    assert [r[0] for r in rows] == ["m0", "m1", "m2", "m3"], rows
    assert all(r[2] == "up" for r in rows), rows
    pid = int(rows[3][rows[3].index("pid") + 1])
    assert os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/wlc{cid}-m3").st_ino
    mx = _cluster_record(home)[1]
    assert mx["machines"] == ["m0", "m1", "m2", "m3"]
    for i in range(3):          # the old pairs kept as measured, m3's measured now
        assert mx["one_way_s"][i][:3] == old["one_way_s"][i], (mx, old)
        assert mx["one_way_s"][i][3] == mx["one_way_s"][3][i] > 0, mx
    # the running experiment is untouched: the same engines and schedulers, still a path
    assert _parts_made(home, "stay") == before
    assert all(_running(p) for _, ps in before.values() for p in ps), before
    assert 20.0 <= _rtt_min(home, "stay", "a", "c") < 26.0
    # a new one is placed on the new machine
    spec2 = tmp_path / "onto.tcl"
    spec2.write_text(PINNED.format(a="m2", bc="m3"))
    wl(home, "create", str(spec2), "--cluster")
    assert "machine m3: b, c" in wl(home, "show", "onto").stdout
    assert 20.0 <= _rtt_min(home, "onto", "a", "c") < 26.0
    wl(home, "terminate", "onto")
    # `cluster measure` measures every pair again, while up
    p = wl(home, "cluster", "measure")
    assert re.search(r"m3\s+(\d+\.\d\d\s+){3}-", p.stdout), p.stdout
    assert _cluster_record(home)[1]["measured"] > mx["measured"]
    wl(home, "terminate", "stay")

    # the same Ray cluster joined by address from another wanlab, before m4 exists
    other = tmp_path / "other"
    try:
        p = wl(other, "cluster", "up", head, timeout=900)
        assert "4 machines up" in p.stdout, p.stdout
        p = wl(other, "cluster", "join", check=False)
        assert p.returncode == 2 and "no Ray node has joined" in p.stderr, p.stderr
        wl(home, "cluster", "join", "--local", timeout=900)          # m4
        p = wl(other, "cluster", "join", timeout=900)
        assert "joined m4; 5 machines up" in p.stdout, p.stdout
        info = _cluster_record(other)[0]
        assert [m["address"] for m in info["machines"]] == [
            m["address"] for m in _cluster_record(home)[0]["machines"]], info
        assert len(_cluster_record(other)[1]["machines"]) == 5
        # a part on m1; m1's Ray worker dies (its agent with it) and comes back as a new
        # Ray node at the same address
        spec3 = tmp_path / "far.tcl"
        spec3.write_text(PINNED.format(a="m1", bc="m4"))
        wl(other, "create", str(spec3), "--cluster")
        node = next(m["node_id"] for m in info["machines"] if m["name"] == "m1")
        _child(KILL_AND_REJOIN, home, "m1", "kill")
        line = next(x for x in wl(other, "list").stdout.splitlines() if x.startswith("far"))
        assert "degraded" in line and "machine m1 lost" in line, line
        _child(KILL_AND_REJOIN, home, "m1", "rejoin")
        _wait_up(home, "m1")
        status = _wait_up(other, "m1")
        again = next(m["node_id"] for m in _cluster_record(other)[0]["machines"]
                     if m["name"] == "m1")
        assert again != node, status
        wl(other, "terminate", "far")        # the part kept on m1 reached by its new agent
        assert "far" not in wl(other, "list").stdout
        assert _parts_made(other, "far") == {}
    finally:
        wl(other, "cluster", "down", check=False, timeout=300)


def test_repair_moves_a_lost_machines_part_to_a_free_machine(cluster, tmp_path):
    """``swapin --repair`` with a machine lost: its part is built on a live machine with
    no part of the experiment, the other part's tunnel points there and its clock joins
    the others'; the placement is shown. The lost part stays recorded until its machine
    is back, then ``cleanup`` removes it there."""
    home, _ = cluster
    spec = tmp_path / "mv.tcl"
    spec.write_text(PINNED.format(a="m0", bc="m2"))
    wl(home, "create", str(spec), "--cluster")
    made = _parts_made(home, "mv")
    _child(KILL_AND_REJOIN, home, "m2", "kill")
    line = next(x for x in wl(home, "list").stdout.splitlines() if x.startswith("mv"))
    assert "machine m2 lost (nodes b, c)" in line, line
    p = wl(home, "swapin", "--repair", "mv")
    moved = re.search(r"moving the part of lost machine m2 \(nodes b, c\) to (m\d)", p.stdout)
    assert moved and moved.group(1) not in ("m0", "m2"), p.stdout
    to = moved.group(1)
    assert f"machine {to}: b, c" in p.stdout and "machine m0: a" in p.stdout, p.stdout
    assert "pinned to m2" in p.stdout, p.stdout         # tb-fix-node not honoured, said
    assert f"machine {to}: b, c" in wl(home, "show", "mv").stdout
    assert re.search(r"^mv\s+\S+\s+active", wl(home, "list").stdout, re.M)
    # a -> c crosses the cut link to the new machine: 2 links of 5 ms each way
    assert 20.0 <= _rtt_min(home, "mv", "a", "c") < 26.0
    # the part of m0 kept running: the same engine and scheduler (modified in place)
    short, pids = _parts_made(home, "mv")["m0"]
    assert short == made["m0"][0] and set(made["m0"][1]) <= set(pids), (made, pids)
    assert all(_running(p) for p in made["m0"][1]), made
    # the lost part stays recorded; back, its machine removes it
    p = wl(home, "terminate", "mv", check=False)
    assert p.returncode == 2 and "m2" in p.stderr, p.stderr
    _child(KILL_AND_REJOIN, home, "m2", "rejoin")
    _wait_up(home, "m2")
    wl(home, "cleanup", "mv")
    assert "mv" not in wl(home, "list").stdout
    assert _parts_made(home, "mv") == {}
    assert not {n for n in netns_names() for s, _ in made.values() if n.startswith(f"wl-{s}-")}


def test_a_lost_machine_degrades_the_experiment_and_the_others_keep_running(cluster,
                                                                              tmp_path):
    """It kills one machine of the session's cluster (and starts it again)."""
    home, _ = cluster
    spec = tmp_path / "chain.yaml"
    spec.write_text(CHAIN.format(name="lose"))
    wl(home, "create", str(spec), "--cluster")
    where = json.loads(wl(home, "show", "lose", "--json").stdout)["machine_of"]
    victim = where["n0"]
    # kill the victim machine's Ray worker and everything under it (its agent)
    from wanlab.backends.emulate import procs
    from wanlab.cluster.local import _descendants
    from wanlab.store import cluster as rec
    from wanlab.store.db import Store
    store = Store(str(home))
    try:
        worker = next(r for r in rec.live(store, "process") if r.name == f"ray-{victim}")
    finally:
        store.close()
    for pid in [worker.detail["pid"], *_descendants(worker.detail["pid"])]:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    procs.alive(worker.detail["pid"], None)       # reaped if it was ours
    listed = wl(home, "list").stdout
    line = next(x for x in listed.splitlines() if x.startswith("lose"))
    assert "degraded" in line and f"machine {victim} lost" in line, listed
    assert "n0" in line
    # a node on another machine still answers
    other = next(n for n, m in where.items() if m != victim)
    p = wl(home, "exec", "lose", other, "--", "ip", "-br", "addr")
    assert "eth0" in p.stdout
    # terminate removes what it can reach and keeps the lost machine's part recorded
    made = _parts_made(home, "lose")
    p = wl(home, "terminate", "lose", check=False)
    assert p.returncode == 2 and victim in p.stderr, p.stderr
    assert set(_parts_made(home, "lose")) == {victim}
    assert "lose" in wl(home, "list").stdout
    # a create while a machine is lost names it (no Ray traceback) and leaves nothing
    spec2 = tmp_path / "late.yaml"
    spec2.write_text(CHAIN.format(name="late"))
    p = wl(home, "create", str(spec2), "--cluster", check=False)
    assert p.returncode == 2 and f"machine {victim} does not answer" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and "late" not in wl(home, "list").stdout
    short = made[victim][0]
    kept = {n for n in netns_names() if n.startswith(f"wl-{short}-")}
    assert kept, "the lost machine's namespaces outlive its Ray worker"
    # the machine comes back (its Ray worker started again, as after a reboot); its new
    # agent finds the part in the machine's own store, and cleanup removes exactly that.
    # (Started from a child: a worker of this test's would be stopped after it, the
    # machine lost to the session's next tests.)
    _child(KILL_AND_REJOIN, home, victim, "rejoin")
    _wait_up(home, victim)
    wl(home, "cleanup", "lose")
    assert "lose" not in wl(home, "list").stdout
    assert _parts_made(home, "lose") == {}
    assert not {n for n in netns_names() if n.startswith(f"wl-{short}-")}

