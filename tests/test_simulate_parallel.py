"""Parallel simulation: ``wanlab run --simulate --threads N`` gives the same bytes for any N."""

import dataclasses
import filecmp
import json

from wanlab.backends.simulate.runner import simulate
from wanlab.frontends import load
from wanlab.model.ir import LinkParams

# Three sites (r0, r1, r2) on a chain of long links, two hosts each: bulk TCP flows across
# the chain both ways, a CBR flow that overruns the 5 Mbit/s core link's 10-packet queue
# (drops), and 2 % loss on one long direction (set below).
THREE_SITES_T = """set ns [new Simulator]
source tb_compat.tcl
for {set i 0} {$i < 3} {incr i} {
    set r($i) [$ns node]
    for {set j 0} {$j < 2} {incr j} {
        set h($i,$j) [$ns node]
        $ns duplex-link $h($i,$j) $r($i) 100Mb 1ms DropTail
    }
}
set core01 [$ns duplex-link $r(0) $r(1) 5Mb 20ms DropTail]
set core12 [$ns duplex-link $r(1) $r(2) 8Mb 15ms DropTail]
$ns queue-limit $r(0) $r(1) 10
$ns queue-limit $r(1) $r(2) 20
{tcp}set udp [new Agent/UDP]
$ns attach-agent $h(0,1) $udp
set null [new Agent/Null]
$ns attach-agent $h(1,1) $null
$ns connect $udp $null
set cbr [new Application/Traffic/CBR]
$cbr set packetSize_ 500
$cbr set rate_ 3Mb
$cbr attach-agent $udp
$ns at 0.5 "$cbr start"
$ns at 2.5 "$cbr stop"
$ns at 1.5 "$core12 down"
$ns at 1.7 "$core12 up"
$ns run
"""
TCP_FLOW = """set t{i} [new Agent/TCP/Newreno]
$t{i} set packetSize_ 1000
$ns attach-agent {src} $t{i}
set k{i} [new Agent/TCPSink]
$ns attach-agent {dst} $k{i}
$ns connect $t{i} $k{i}
set ftp{i} [new Application/FTP]
$ftp{i} attach-agent $t{i}
$ns at {at} "$ftp{i} start"
$ns at {stop} "$ftp{i} stop"
"""
THREE_SITES = THREE_SITES_T.replace("{tcp}", "".join(
    TCP_FLOW.format(i=i, src=f"$h({src})", dst=f"$h({dst})", at=at, stop=stop)
    for i, (src, dst, at, stop) in enumerate([("0,0", "2,0", 0.1, 3.5),
                                              ("2,1", "0,1", 0.2, 3.5),
                                              ("1,0", "2,1", 0.3, 3.0)])))


def test_same_seed_same_bytes_with_1_2_and_3_threads(tmp_path):
    p = tmp_path / "three.tcl"
    p.write_text(THREE_SITES)
    spec = load(str(p))
    core = next(lk for lk in spec.links if lk.name == "core12")
    lossy = LinkParams(bandwidth_bps=8_000_000, delay_s=0.015, loss=0.02)
    spec = dataclasses.replace(spec, links=tuple(
        dataclasses.replace(lk, ab=lossy) if lk is core else lk for lk in spec.links))
    runs = {}
    for n in (1, 2, 3):
        out = tmp_path / f"t{n}"
        runs[n] = (out, simulate(spec, str(out), seed=5, threads=n, plot=False))
    # the runs really were partitioned (cut at the long core links) …
    assert [runs[n][1]["engine"].get("threads", 1) for n in (1, 2, 3)] == [1, 2, 3]
    assert runs[3][1]["engine"]["lookahead_ns"] == 15_000_000
    # … and the work is what the test means: drops at the queue and by loss, TCP both ways
    stats = runs[1][1]
    flows = {f["agent"]: f["result"] for f in stats["flows"]}
    assert all(flows[a]["bytes"] > 100_000 for a in ("ftp0", "ftp1", "ftp2")), flows
    links = {lk["name"]: lk for lk in stats["links"]} if isinstance(stats["links"], list) \
        else stats["links"]
    assert links["core01"]["ab"]["drop_queue"] > 0
    assert links["core12"]["ab"]["drop_loss"] > 0
    a = runs[1][0] / "result.json"
    for n in (2, 3):
        assert filecmp.cmp(a, runs[n][0] / "result.json", shallow=False), n


def test_without_threads_a_simulation_takes_the_specs_engine_threads(tmp_path):
    """``wanlab run --simulate`` without ``--threads``: the spec's ``tb-set-engine-threads``
    (YAML ``engine: {threads: N}``), as the help says, else one thread."""
    from wanlab.lifecycle import Lab
    p = tmp_path / "three.tcl"
    p.write_text(THREE_SITES.replace("$ns run", "tb-set-engine-threads 3\n$ns run"))
    spec = load(str(p))
    assert spec.engine_threads == 3
    lab = Lab(str(tmp_path / "home"))
    try:
        ran = lab.simulate(spec, str(tmp_path / "spec"), seed=5)
        assert ran["engine"]["threads"] == 3
        one = lab.simulate(dataclasses.replace(spec, engine_threads=0),
                           str(tmp_path / "plain"), seed=5)
        assert one["engine"].get("threads", 1) == 1
        assert lab.simulate(spec, str(tmp_path / "asked"), seed=5,
                            threads=2)["engine"]["threads"] == 2
    finally:
        lab.close()
    assert filecmp.cmp(tmp_path / "spec" / "result.json", tmp_path / "plain" / "result.json",
                       shallow=False)


# A chain of two long links (s — a —20 ms— b —15 ms— c — r), both ways overrun by CBR flows
# (1000-byte packets, whose arrivals do not keep step with the links' departures) that still
# run when the simulation ends: the final statistics are taken while the long links' queues
# are full. A direction whose two halves run on one thread records a frame's queueing delay
# when the direction is next looked at; one cut between threads, when the frame starts: the
# statistics must count the same frames either way, whenever the run ends.
BUSY_CHAIN = """set ns [new Simulator]
source tb_compat.tcl
foreach n {s a b c r} { set $n [$ns node] }
$ns duplex-link $s $a 100Mb 1ms DropTail
set ab [$ns duplex-link $a $b 4Mb 20ms DropTail]
set bc [$ns duplex-link $b $c 3Mb 15ms DropTail]
$ns duplex-link $c $r 100Mb 1ms DropTail
foreach {x y rate} {s r 5Mb r s 4.5Mb} {
    set u($x) [new Agent/UDP]
    $ns attach-agent [set $x] $u($x)
    set k($x) [new Agent/Null]
    $ns attach-agent [set $y] $k($x)
    $ns connect $u($x) $k($x)
    set cbr($x) [new Application/Traffic/CBR]
    $cbr($x) set packetSize_ 1000
    $cbr($x) set rate_ $rate
    $cbr($x) attach-agent $u($x)
    $ns at 0.1 "$cbr($x) start"
}
$ns at {end} "$ns halt"
$ns run
"""


def test_statistics_of_busy_cut_links_are_the_same_with_1_2_and_3_threads(tmp_path):
    for end in ("0.8", "0.9", "1.0"):
        p = tmp_path / f"chain{end}.tcl"
        p.write_text(BUSY_CHAIN.replace("{end}", end))
        spec = load(str(p))
        runs = {n: simulate(spec, str(tmp_path / f"{end}-t{n}"), seed=3, threads=n, plot=False)
                for n in (1, 2, 3)}
        assert [runs[n]["engine"].get("threads", 1) for n in (1, 2, 3)] == [1, 2, 3]
        # the long links are busy at the end: the final statistics see frames waiting there
        a = (tmp_path / f"{end}-t1" / "result.json").read_bytes()
        links = json.loads(a)["stats"]["links"]
        busy = {(lk, d): links[lk][d]["qlen_pkts"] for lk in ("ab", "bc") for d in ("ab", "ba")}
        assert busy[("ab", "ab")] > 0 and busy[("bc", "ba")] > 0, busy
        for n in (2, 3):
            assert (tmp_path / f"{end}-t{n}" / "result.json").read_bytes() == a, (end, n)
