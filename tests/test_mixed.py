"""Mixed experiments: a simulated subnetwork with simulated traffic, inside an emulation."""

import pytest

from wanlab.errors import SpecError
from wanlab.spec import load

from conftest import needs_root, ping_rtts

pytestmark = needs_root

MIXED = """set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
$ns make-simulated {
    set r1 [$ns node]
    set r2 [$ns node]
    set hs [$ns node]
    set hd [$ns node]
    set core [$ns duplex-link $r1 $r2 20Mb 5ms DropTail]
    $ns duplex-link $hs $r1 100Mb 1ms DropTail
    $ns duplex-link $r2 $hd 100Mb 1ms DropTail
    set udp [new Agent/UDP]
    $ns attach-agent $hs $udp
    set null [new Agent/Null]
    $ns attach-agent $hd $null
    $ns connect $udp $null
    set cbr [new Application/Traffic/CBR]
    $cbr set packetSize_ 1000
    $cbr set rate_ 4Mb
    $cbr attach-agent $udp
    set tcp [new Agent/TCP/Newreno]
    $ns attach-agent $hs $tcp
    set sink [new Agent/TCPSink]
    $ns attach-agent $hd $sink
    $ns connect $tcp $sink
    set ftp [new Application/FTP]
    $ftp attach-agent $tcp
}
$ns duplex-link $a $r1 100Mb 1ms DropTail
$ns duplex-link $r2 $b 100Mb 1ms DropTail
$ns run
"""


def test_simulated_cross_traffic_beside_real_ping(lab, tmp_path):
    spec = tmp_path / "mixed.tcl"
    spec.write_text(MIXED)
    lab.create(load(str(spec)))
    info = lab.show("mixed")
    assert info["nodes"]["hs"]["simulated"] and info["nodes"]["hs"]["netns"] is None
    for app in ("cbr", "ftp"):
        lab.tevc("mixed", "now", app, "start", wait=True)
    rtts = ping_rtts(lab, "mixed", "a", "b", count=10, interval=0.1)
    for app in ("cbr", "ftp"):
        lab.tevc("mixed", "now", app, "stop", wait=True)
    flows = {f["agent"]: f for f in lab.flows("mixed")}
    cbr, ftp = flows["cbr"]["result"], flows["ftp"]["result"]
    dur = flows["cbr"]["stopped_s"] - flows["cbr"]["started_s"]
    # the simulated CBR delivered its 4 Mbit/s (500 packets/s) while TCP filled the rest
    assert cbr["simulated"] and cbr["packets"] == pytest.approx(500 * dur, rel=0.1)
    assert ftp["simulated"] and ftp["cc"] == "newreno" and ftp["bytes"] > 100_000, (ftp, lab.show("mixed")["stats"]["agents"])
    assert ftp["cwnd"], "the TCP trace reached the flow result"
    # real pings crossed the same simulated core: 2 × (1 + 5 + 1) ms plus queueing
    assert len(rtts) >= 8 and min(rtts) >= 14.0
    stats = lab.show("mixed")["stats"]
    assert stats["agents"]["cbr.sink"]["pkts"] >= cbr["packets"]
    assert stats["links"]["core"]["ab"]["out_pkts"] > cbr["packets"]


def test_traffic_between_emulated_and_simulated_is_refused(lab, tmp_path):
    bad = MIXED.replace("$ns attach-agent $hd $null", "").replace(
        "$ns connect $udp $null", "$ns attach-agent $b $null\n$ns connect $udp $null")
    spec = tmp_path / "bad.tcl"
    spec.write_text(bad)
    with pytest.raises(SpecError, match="between an emulated and a simulated node"):
        lab.create(load(str(spec)))
    assert lab.list() == [] or all(r.state != "active" for r in lab.list())
