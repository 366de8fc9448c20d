"""``wanlab bridge``: the engine between two host interfaces (veth pairs standing in for
physical ones, into namespaces this test creates and removes); nothing leaves the machine."""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, needs_root

from wanlab.engine import encode
from wanlab.errors import SpecError
from wanlab.frontends.bridge import bridge_experiment


def ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True).stdout


def test_bridge_rules_parse_and_reach_the_engine_topology():
    from wanlab.plan.plan import make_plan
    exp = bridge_experiment("br", "x0", "x1", delay="5ms",
                            rules=("192.168.77.64/26:delay=50ms,loss=0.1",))
    (r,) = exp.links[0].rules
    assert (r.dst, r.ab.delay_s, r.ba.loss) == ("192.168.77.64/26", 0.05, 0.1)
    (link,) = encode.apply(make_plan(exp, "abcd")).links
    assert link["rules"][0]["dst"] == "192.168.77.64/26"
    assert link["rules"][0]["ab"]["delay_us"] == 50000
    with pytest.raises(SpecError, match="not an IPv4 or IPv6 prefix"):
        bridge_experiment("br", "x0", "x1", rules=("10.0.0.0/40:delay=1ms",))
    # an IPv6 prefix: its settings follow the first colon after the /
    exp6 = bridge_experiment("br", "x0", "x1", rules=("fd00:9::/32:delay=7ms",
                                                      "fd00:9:8::/48"))
    assert [(r.dst, r.ab.delay_s) for r in exp6.links[0].rules] == [("fd00:9::/32", 0.007),
                                                                   ("fd00:9:8::/48", 0.0)]
    with pytest.raises(SpecError, match="key=value"):
        bridge_experiment("br", "x0", "x1", rules=("10.0.0.0/8:dealy=1ms",))


def test_bridge_experiment_and_its_errors():
    exp = bridge_experiment("br", "veth-a", "veth-b", delay="20ms", bandwidth="10Mb")
    assert [(n.name, n.external) for n in exp.nodes] == [("a", "veth-a"), ("b", "veth-b")]
    assert exp.links[0].name == "wire" and exp.links[0].ab.delay_s == 0.02
    with pytest.raises(SpecError, match="not a network interface name"):
        bridge_experiment("br", "bad/name", "x")
    with pytest.raises(SpecError, match="already bridged"):
        bridge_experiment("br", "same", "same")


@pytest.fixture
def outside():
    """Two 'outside machines' (namespaces L and R) with veth pairs whose host ends stand
    in for two physical interfaces; the host ends carry state to be restored exactly."""
    tag = f"{os.getpid() % 100000}"
    nss, ends = [f"wltL{tag}", f"wltR{tag}"], [f"wlta{tag}", f"wltb{tag}"]
    try:
        for k, (ns, end) in enumerate(zip(nss, ends, strict=True)):
            ip("netns", "add", ns)
            ip("link", "add", end, "type", "veth", "peer", "name", "out0", "netns", ns)
            ip("-n", ns, "addr", "add", f"192.168.77.{k + 1}/24", "dev", "out0")
            ip("-n", ns, "link", "set", "out0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
        ip("link", "set", ends[0], "mtu", "1400")
        ip("addr", "add", "192.0.2.77/32", "dev", ends[0])
        ip("link", "set", ends[0], "up")
        yield nss, ends
    finally:
        for end in ends:
            ip("link", "del", end, check=False)
        for ns in nss:
            ip("netns", "del", ns, check=False)


def state(dev):
    (i,) = json.loads(ip("-j", "addr", "show", "dev", dev))
    return i["mtu"], "UP" in i["flags"], [a["local"] for a in i.get("addr_info", [])
                                          if a["family"] == "inet"]


def ping(ns, dst, count=4):
    out = ip("netns", "exec", ns, "ping", "-n", "-c", str(count), "-i", "0.05", "-W", "2", dst,
             check=False)
    import re
    return [float(x) for x in re.findall(r"time=([\d.]+) ms", out)]


@needs_root
def test_bridge_shapes_the_path_and_gives_the_interfaces_back(tmp_path, outside):
    (left, right), (end_a, end_b) = outside
    before = {d: state(d) for d in (end_a, end_b)}
    assert ping(left, "192.168.77.2", count=1) == []        # not connected yet
    env = {**os.environ, "PYTHONPATH": ROOT}
    cli = [sys.executable, "-m", "wanlab.cli", "--home", str(tmp_path / "h")]
    # a second address behind R answers through a per-destination rule (+50 ms each way)
    ip("-n", right, "addr", "add", "192.168.77.66/24", "dev", "out0")
    # and IPv6 alike: neighbour discovery crosses the wire, a prefix rule takes ::66
    for ns, addrs in ((left, ("fd00:77::1",)), (right, ("fd00:77::2", "fd00:77::66"))):
        for a in addrs:
            ip("-n", ns, "addr", "add", f"{a}/64", "dev", "out0", "nodad")
    p = subprocess.run([*cli, "bridge", end_a, end_b, "--delay", "15ms", "--name", "box",
                        "--rule", "192.168.77.64/26:delay=65ms",
                        "--rule", "fd00:77::40/122:delay=65ms"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    # the interfaces left the host's namespace for the box
    assert not os.path.exists(f"/sys/class/net/{end_a}")
    rtts = ping(left, "192.168.77.2")
    assert len(rtts) >= 3 and 30 <= min(rtts) < 40, rtts
    # to .66 the request takes the rule (65 ms), the reply to .1 the wire (15 ms)
    rtts = ping(left, "192.168.77.66")
    assert len(rtts) >= 3 and 80 <= min(rtts) < 90, rtts
    rtts = ping(left, "fd00:77::2")
    assert len(rtts) >= 3 and 30 <= min(rtts) < 40, rtts
    rtts = ping(left, "fd00:77::66")
    assert len(rtts) >= 3 and 80 <= min(rtts) < 90, rtts
    # tevc on the wire, counters
    p = subprocess.run([*cli, "tevc", "-w", "box", "now", "wire", "delay", "40ms"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    rtts = ping(left, "192.168.77.2")
    assert len(rtts) >= 3 and 80 <= min(rtts) < 90, rtts
    p = subprocess.run([*cli, "show", "box"], capture_output=True, text=True, env=env)
    assert p.returncode == 0 and "wire" in p.stdout
    from wanlab.lifecycle import Lab
    lab = Lab(str(tmp_path / "h"))
    try:
        with lab.engine("box") as c:
            wire = c.call("stats", target="wire")["links"]["wire"]
    finally:
        lab.close()
    assert wire["ab"]["out_pkts"] >= 8
    assert wire["rules"]["192.168.77.64/26"]["ab"]["out_pkts"] >= 3
    assert wire["rules"]["fd00:77::40/122"]["ab"]["out_pkts"] >= 3
    p = subprocess.run([*cli, "terminate", "box"], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    # back in the host's namespace, exactly as they were
    assert {d: state(d) for d in (end_a, end_b)} == before
    assert ping(left, "192.168.77.2", count=1) == []
