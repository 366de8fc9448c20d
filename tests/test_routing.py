"""Routing on real namespaces: static routes and FRR OSPF, failures through carrier."""

import os
import re
import time

from conftest import chain, needs_root, ping_rtts

from wanlab.frontends import load

pytestmark = needs_root

SQUARE = """set ns [new Simulator]
source tb_compat.tcl
foreach n {a b c d} { set $n [$ns node] }
set ab [$ns duplex-link $a $b 10Mb 5ms DropTail]
set bc [$ns duplex-link $b $c 10Mb 5ms DropTail]
set cd [$ns duplex-link $c $d 10Mb 5ms DropTail]
set da [$ns duplex-link $d $a 10Mb 20ms DropTail]
$ns cost $d $a 10
$ns rtproto OSPF
tb-set-ospf-timers 1 3
$ns run
"""


def test_static_routes_forward_with_ttl_and_icmp(lab):
    lab.create(chain(4, delay=0.001))
    out = lab.exec("chain", "n0", ["traceroute", "-n", "-q", "1", "-w", "2", "n3-l2"],
                   capture_output=True, text=True).stdout
    hops = re.findall(r"^\s*\d+\s+([\d.]+)", out, re.M)
    # each router answers with ICMP time-exceeded: n1, n2, then n3 itself
    plan = lab.show("chain")["nodes"]
    assert hops == [plan["n1"]["interfaces"][0]["ip"].split("/")[0],
                    plan["n2"]["interfaces"][0]["ip"].split("/")[0],
                    plan["n3"]["interfaces"][0]["ip"].split("/")[0]], out


def test_ospf_converges_and_reroutes_on_link_failure(lab, tmp_path):
    spec = tmp_path / "square.tcl"
    spec.write_text(SQUARE)
    lab.create(load(str(spec)))
    # daemons per node, reachable with a plain vtysh inside the node
    out = lab.exec("square", "a", ["vtysh", "-c", "show ip ospf neighbor"],
                   capture_output=True, text=True).stdout
    assert out.count("Full") == 2, out
    assert "proto ospf" in lab.routes("square", "a")["a"]
    # a -> d goes the cheap way round, a-b-c-d: 3 x 5 ms each way
    rtts = ping_rtts(lab, "square", "a", "d-cd", count=3)
    assert 29.9 <= min(rtts) <= 32, rtts
    # b-c fails: carrier drops, OSPF moves a -> d onto the 20 ms link
    lab.tevc("square", "now", "bc", "down", wait=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        rtts = ping_rtts(lab, "square", "a", "d-cd", count=1)
        if rtts and rtts[0] > 35:
            break
        time.sleep(0.2)
    assert rtts and 39.9 <= rtts[0] <= 43, rtts
    # and back when it is restored, with no configuration change
    lab.tevc("square", "now", "bc", "up", wait=True)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        # the first packets after carrier returns may wait for ARP or a route flip: wait
        # until a ping takes the cheap path again (3 x 5 ms each way)
        rtts = ping_rtts(lab, "square", "a", "d-cd", count=1)
        if rtts and rtts[0] < 32:
            break
        time.sleep(0.2)
    assert rtts and 29.9 <= rtts[0] < 32, rtts
    log = open(os.path.join(lab.store.home, "exps", "square", "nodes", "a",
                            "routes.log")).read()
    # the monitor recorded the reroute: some prefix had OSPF routes by two next hops (a
    # replace, or a delete and an add, depending on how OSPF saw the failure)
    vias: dict[str, set[str]] = {}
    for m in re.finditer(r"\] (?:Deleted )?(\S+) (?:nhid \d+ )?via (\S+) .*proto ospf", log):
        vias.setdefault(m.group(1), set()).add(m.group(2))
    assert any(len(v) >= 2 for v in vias.values()), log


def test_bgp_sessions_between_three_ases(lab):
    from wanlab.frontends.builder import ExperimentBuilder
    b = ExperimentBuilder("bgp")
    b.routing("bgp")
    for n, asn in (("a", 65001), ("b", 65002), ("c", 65003)):
        b.node(n)
        b.bgp_as(n, asn)
    b.link("a", "b", delay="2ms", name="ab")
    b.link("b", "c", delay="2ms", name="bc")
    b.bgp_session("a", "b")
    b.bgp_session("b", "c")
    lab.create(b.build())
    out = lab.exec("bgp", "b", ["vtysh", "-c", "show bgp summary"],
                   capture_output=True, text=True).stdout
    assert "65001" in out and "65003" in out
    assert "proto bgp" in lab.routes("bgp", "a")["a"]
    # c's loopback (its name) is learnt through AS 65002: two links of 2 ms each way
    rtts = ping_rtts(lab, "bgp", "a", "c", count=3)
    assert len(rtts) == 3 and 7.9 <= min(rtts) <= 9.5, rtts


def test_bgp_session_must_join_neighbours():
    import pytest

    from wanlab.errors import SpecError
    from wanlab.frontends.builder import ExperimentBuilder
    b = ExperimentBuilder("bad")
    b.routing("bgp")
    for n in "abc":
        b.node(n)
        b.bgp_as(n, 65000 + ord(n))
    b.link("a", "b")
    b.link("b", "c")
    b.bgp_session("a", "c")
    with pytest.raises(SpecError, match="share no link or LAN"):
        b.build()
