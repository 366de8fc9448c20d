"""IPv6 in whole-experiment simulation: the engine's simulated hosts, routers and agents
over IPv6 give the IPv4 run's results, each packet 20 bytes longer (a 40-byte IPv6 header
for a 20-byte IPv4 one)."""

import filecmp
import struct

import pytest

from wanlab.frontends import load

# s —100 Mbit/s 1 ms— r —10 Mbit/s 10 ms— d: a 1 Mbit/s CBR and a window-limited FTP of
# 1 MB (no loss: 10 segments in flight need 5.6 Mbit/s), both from s to d
SPEC = """set ns [new Simulator]
source tb_compat.tcl
{family}
set s [$ns node]
set r [$ns node]
set d [$ns node]
set l1 [$ns duplex-link $s $r 100Mb 1ms DropTail]
set l2 [$ns duplex-link $r $d 10Mb 10ms DropTail]
set udp [new Agent/UDP]
$ns attach-agent $s $udp
set null [new Agent/Null]
$ns attach-agent $d $null
$ns connect $udp $null
set cbr [new Application/Traffic/CBR]
$cbr set packetSize_ 1000
$cbr set rate_ 1Mb
$cbr attach-agent $udp
set tcp [new Agent/TCP/Newreno]
$tcp set window_ 10
$ns attach-agent $s $tcp
set sink [new Agent/TCPSink]
$ns attach-agent $d $sink
$ns connect $tcp $sink
set ftp [new Application/FTP]
$ftp set maxbytes_ 1000000
$ftp attach-agent $tcp
$ns at 0 "$l1 trace start"
$ns at 0 "$l2 trace start"
$ns at 0.5 "$cbr start"
$ns at 0.5 "$ftp start"
$ns at 3.5 "$cbr stop"
$ns at 3.5 "$ftp stop"
$ns run
"""


def frames(pcap):
    """(EtherType, length) of every frame of a pcap file; ICMPv6 (here neighbour
    discovery: the flows send none) as EtherType 58."""
    data = pcap.read_bytes()
    out, at = [], 24
    while at < len(data):
        n = struct.unpack_from("<I", data, at + 8)[0]
        frame = data[at + 16:at + 16 + n]
        kind = struct.unpack_from(">H", frame, 12)[0]
        out.append((58 if kind == 0x86dd and frame[20] == 58 else kind, n))
        at += 16 + n
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The spec simulated over IPv4, over IPv6 only, and over IPv6 only again."""
    from wanlab.lifecycle import Lab
    tmp = tmp_path_factory.mktemp("v6sim")
    lab = Lab(str(tmp / "home"))
    out = {}
    try:
        for name, family in (("v4", ""), ("v6", "tb-set-ipv6 only"),
                             ("v6again", "tb-set-ipv6 only")):
            p = tmp / f"{name}.tcl"
            p.write_text(SPEC.format(family=family))
            out[name] = (lab.simulate(load(str(p)), out=str(tmp / name), seed=3),
                         tmp / name / "result.json")
    finally:
        lab.close()
    return out


def test_agents_over_ipv6_match_ipv4_but_for_the_header(runs):
    (v4, _), (v6, _) = runs["v4"], runs["v6"]
    f4 = {f["agent"]: f["result"] for f in v4["flows"]}
    f6 = {f["agent"]: f["result"] for f in v6["flows"]}
    # the same packets arrive: every CBR datagram, the whole megabyte, nothing resent
    for k in ("sent_packets", "packets", "bytes", "lost"):
        assert f6["cbr"][k] == f4["cbr"][k], k
    assert f4["cbr"]["lost"] == 0 and f4["cbr"]["packets"] > 370
    for k in ("bytes", "retransmits", "timeouts"):
        assert f6["ftp"][k] == f4["ftp"][k], k
    assert f4["ftp"]["bytes"] == 1_000_000 and f4["ftp"]["retransmits"] == 0
    # on every link direction the same packets, each exactly 20 bytes longer over IPv6,
    # and as many neighbour solicitations and advertisements (86 bytes) as ARP frames (42):
    # the wire throughput differs by that and nothing else
    for link in ("l1", "l2"):
        for d in ("ab", "ba"):
            s4, s6 = v4["links"][link][d], v6["links"][link][d]
            t4 = frames(runs["v4"][1].parent / "traces" / f"{link}-{d}.pcap")
            t6 = frames(runs["v6"][1].parent / "traces" / f"{link}-{d}.pcap")
            arp = [n for t, n in t4 if t == 0x0806]
            nd = [n for t, n in t6 if t == 58]
            ip4 = sorted(n for t, n in t4 if t == 0x0800)
            ip6 = sorted(n for t, n in t6 if t == 0x86dd)
            assert set(arp) == {42} and nd == [86] * len(arp), (link, d)
            assert len(ip4) > 300 and ip6 == [n + 20 for n in ip4], (link, d)
            assert s6["out_pkts"] == s4["out_pkts"] == len(t4), (link, d)
            assert s6["out_bytes"] - s4["out_bytes"] == 20 * len(ip4) + 44 * len(arp), (link, d)


def test_ipv6_simulation_is_deterministic(runs):
    assert filecmp.cmp(runs["v6"][1], runs["v6again"][1], shallow=False)
