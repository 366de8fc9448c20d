"""netem's impairments on a real link (namespaces, the real-time engine): one experiment,
several parameters checked on the wire with ping, changed at run time, and ``show``."""

import re
import time

from conftest import needs_root

from wanlab import api
from wanlab.frontends.builder import ExperimentBuilder

pytestmark = needs_root

CELL = "/work/shared/traces/cellular/Verizon-LTE-short.down"


def description():
    b = ExperimentBuilder("impreal")
    for n in "ab":
        b.node(n)
    b.link("a", "b", name="link0", bandwidth="100Mb", delay="5ms")
    # echo requests (a -> b) duplicated; replies (b -> a) with 4 ms of normal jitter
    b.direction("link0", "a", duplicate=0.3)
    b.direction("link0", "b", jitter={"value": "4ms", "distribution": "normal"})
    return b.build()


def ping(exp, n=200):
    ip = exp.show()["nodes"]["b"]["interfaces"][0]["ip"].split("/")[0]
    r = exp.exec("a", ["ping", "-n", "-q", "-c", str(n), "-i", "0.01", "-W", "2", ip])
    return r.stdout


def test_impairments_on_the_wire_and_in_force(tmp_path):
    with api.Experiment(description(), home=str(tmp_path / "home")) as exp:
        out = ping(exp)
        # duplicates: 30 % of 200 (binomial sd 6.5; wide bounds for a loaded host)
        dup = int(re.search(r"\+(\d+) duplicates", out).group(1))
        assert 25 <= dup <= 95, out
        # jitter: the spread of the RTTs is the replies' (4 ms sd), the minimum above the
        # 10 ms of delay less what jitter takes off (frames keep their order)
        mn, avg, mx, mdev = map(float, re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms",
                                                 out).groups())
        assert mdev > 1.5 and mx - mn > 6, out
        # corrupt every request at run time: the receiver's checksums drop them all
        exp.set_link("link0", "ab", corrupt=1.0, duplicate=0)
        out = ping(exp, 20)
        assert "100% packet loss" in out, out
        assert exp.stats("link0")["links"]["link0"]["ab"]["corrupted"] >= 20
        # a capacity trace by tevc; show prints what is in force
        r = exp.tevc("link0", "bandwidth", "trace", CELL, wait=True)
        assert r["outcome"] == "ok", r
        info = exp.show()["links"][0]
        assert "corrupt 1" in info["ab"]["impair"], info
        assert any(w.startswith("trace ") for w in info["ba"]["impair"]), info
        assert any(w.startswith("jitter 4ms normal") for w in info["ba"]["impair"]), info
        exp.set_link("link0", "ab", corrupt=0)
        assert "0% packet loss" in ping(exp, 20)
        # one direction by tevc's last word: a fixed rate ends ab's trace, ba keeps its own;
        # a schedule started now on ab (100 ms of delay from its time 0), then ended
        assert exp.tevc("link0", "bandwidth", "100Mb", "ab", wait=True)["outcome"] == "ok"
        sched = tmp_path / "sat.csv"
        sched.write_text("time,delay\n0,100ms\n3600,100ms\n")
        r = exp.tevc("link0", "schedule", str(sched), "ab", wait=True)
        assert r["outcome"] == "ok", r
        info = exp.show()["links"][0]
        assert not any(w.startswith("trace ") for w in info["ab"]["impair"]), info
        assert any(w.startswith("trace ") for w in info["ba"]["impair"]), info
        assert any(w.startswith("schedule ") for w in info["ab"]["impair"]), info
        assert not any(w.startswith("schedule ") for w in info["ba"]["impair"]), info
        mn = float(re.search(r"= ([\d.]+)/", ping(exp, 5)).group(1))
        assert mn >= 100, mn             # 100 ms scheduled on ab + 5 ms on ba
        assert exp.tevc("link0", "schedule", "none", "ab", wait=True)["outcome"] == "ok"
        mn = float(re.search(r"= ([\d.]+)/", ping(exp, 5)).group(1))
        assert mn < 100, mn
        # a schedule's step at its own time, in the engine: 300 ms for its first 2.5 s, then
        # 1 ms (ping's summary line: at least 300 ms first, then below 100 ms)
        sched.write_text("time,delay\n0,300ms\n2.5s,1ms\n")
        r = exp.tevc("link0", "schedule", str(sched), "ab", wait=True)
        assert r["outcome"] == "ok", r
        began = time.monotonic()
        mn = float(re.search(r"= ([\d.]+)/", ping(exp, 1)).group(1))
        if time.monotonic() - began < 1.5:          # (a host too busy to ping in time: skip)
            assert mn >= 300, mn
        time.sleep(max(0.0, began + 2.8 - time.monotonic()))
        mn = float(re.search(r"= ([\d.]+)/", ping(exp, 2)).group(1))
        assert mn < 100, mn


def test_the_cellular_example_replays_its_trace_under_tcp_and_a_download(tmp_path):
    """examples/cellular.py, briefly: iperf3 and a download share a downlink whose capacity
    is a cellular trace restarted at run time; the link never carries more than the
    trace's opportunities in the window (the engine's clock around the restart bounds
    them), carries something, and the file arrives intact."""
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "examples", "cellular.py")
    spec = importlib.util.spec_from_file_location("cellular", path)
    cellular = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cellular)
    r = cellular.run(CELL, 3, home=str(tmp_path / "home"), file_bytes=200_000, lead_s=1.0)
    lo, hi = r["capacity_bytes"]
    assert 0 < r["delivered_bytes"] <= hi * 1.01 + 2 * cellular.OPP, r
    assert r["file_intact"], r
    assert len(r["rows"]) == 3 and r["iperf3_bps"] > 0, r
