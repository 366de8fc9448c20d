"""Simulated routers inside the engine, crossed by real traffic between namespaces."""

import re

import pytest
from conftest import needs_root, ping_rtts

from wanlab.errors import WanlabError
from wanlab.frontends import load

pytestmark = needs_root

CORE = """set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
$ns make-simulated {
    set r1 [$ns node]
    set r2 [$ns node]
    $ns duplex-link $r1 $r2 100Mb 5ms DropTail
}
$ns duplex-link $a $r1 100Mb 1ms DropTail
$ns duplex-link $r2 $b 100Mb 1ms DropTail
$ns run
"""


def test_ping_and_traceroute_cross_a_simulated_core(lab, tmp_path):
    spec = tmp_path / "core.tcl"
    spec.write_text(CORE)
    lab.create(load(str(spec)))
    info = lab.show("core")["nodes"]
    assert info["r1"]["simulated"] and info["r1"]["netns"] is None
    # 1 + 5 + 1 ms each way, through two routers that exist only in the engine
    rtts = ping_rtts(lab, "core", "a", "b", count=3)
    assert len(rtts) == 3 and 13.9 <= min(rtts) <= 15.0, rtts
    out = lab.exec("core", "a", ["traceroute", "-n", "-q", "1", "-w", "2", "b"],
                   capture_output=True, text=True).stdout
    hops = re.findall(r"^\s*\d+\s+([\d.]+)", out, re.M)
    ip = {n: [i["ip"].split("/")[0] for i in d["interfaces"]] for n, d in info.items()}
    # each simulated router answers with ICMP time exceeded from its incoming interface
    assert hops == [ip["r1"][1], ip["r2"][0], ip["b"][0]], out
    # a simulated router answers pings to its own address
    assert len(ping_rtts(lab, "core", "a", "r1", count=2)) == 2
    with pytest.raises(WanlabError, match="simulated inside the engine"):
        lab.node_argv("core", "r1", ["true"])
    stats = lab.show("core")["stats"]
    assert stats["links"]["link0"]["ab"]["out_pkts"] > 0
