"""The front ends' one normaliser: ns-2 words -> typed agents and events, checked at parse
time with file:line (no root needed)."""

import textwrap

import pytest

from wanlab.errors import SpecError
from wanlab.frontends import normalize, ns, yaml_spec
from wanlab.frontends.builder import ExperimentBuilder
from wanlab.model import ir

HEAD = "set ns [new Simulator]\nsource tb_compat.tcl\n"
TWO = """\
set a [$ns node]
set b [$ns node]
set l [$ns duplex-link $a $b 10Mb 10ms DropTail]
"""


def parse(tmp_path, body):
    p = tmp_path / "t.tcl"
    p.write_text(HEAD + textwrap.dedent(body) + "$ns run\n")
    return ns.parse(p)


@pytest.mark.parametrize("event,message", [
    ("$l delay banana", r"t.tcl:6: .*delay 'banana' not understood"),
    ("$l frobnicate 3", r"t.tcl:6: link l: unknown event 'frobnicate'"),
    ("$l bandwidth", r"t.tcl:6: l bandwidth: needs one bandwidth"),
    ("$l plr 1.5", r"t.tcl:6: .*loss '1.5' is not a probability"),
    ("$l set thresh_ 10", r"t.tcl:6: .*thresh applies to RED queues"),
    ("$l set colour_ red", r"t.tcl:6: .*queue parameter 'colour_' unknown"),
    ("$l drop 0 ab", r"t.tcl:6: .*l drop: count 0 must be 1..1000"),
    ("$l drop 2 sideways", r"t.tcl:6: .*l drop: direction 'sideways'"),
    ("$l trace now", r"t.tcl:6: l trace: takes start, stop or snapshot"),
    ("$a reboot now", r"t.tcl:6: a reboot: takes no arguments"),
    ("$a explode", r"t.tcl:6: node a: unknown event 'explode'"),
])
def test_bad_event_is_a_parse_error_with_its_line(tmp_path, event, message):
    with pytest.raises(SpecError, match=message):
        parse(tmp_path, TWO + f'$ns at 5 "{event}"\n')


def test_link_events_are_typed(tmp_path):
    e = parse(tmp_path, TWO + """\
        $ns at 1 "$l bandwidth 5Mb"
        $ns at 2 "$l delay 50ms"
        $ns at 3 "$l plr 0.01"
        $ns at 4 "$l drop 2 ba"
        $ns at 5 "$l trace snapshot"
        $ns at 6 "$l set limit_ 20"
    """)
    got = [(x.action, x.param, x.value, x.dir) for x in e.events]
    assert got == [("bandwidth", None, 5_000_000, None), ("delay", None, 0.05, None),
                   ("plr", None, 0.01, None), ("drop", None, 2, "ba"),
                   ("trace", None, "snapshot", None), ("set", "limit", 20, None)]


def test_queue_events_keep_their_direction(tmp_path):
    """[[$ns link $b $a] queue] is the b->a direction of a link declared a-b: an event on it
    changes that direction only (and the RED check looks at that direction's queue)."""
    e = parse(tmp_path, """\
        set a [$ns node]
        set b [$ns node]
        set l [$ns duplex-link $a $b 10Mb 10ms DropTail]
        tb-set-link-simplex-params $l $b 10ms 10Mb 0
        set q [[$ns link $b $a] queue]
        $ns at 1 "$q set limit_ 10"
        set q2 [[$ns link $a $b] queue]
        $ns at 2 "$q2 set limit_ 30"
        $ns at 3 "[$ns link $b $a] bandwidth 1Mb"
    """)
    got = [(x.target, x.dir, x.action, x.param, x.value) for x in e.events]
    assert got == [("l", "ba", "set", "limit", 10), ("l", "ab", "set", "limit", 30),
                   ("l", "ba", "bandwidth", None, 1_000_000)]


def test_red_parameter_checked_against_the_direction_it_changes(tmp_path):
    body = """\
        set a [$ns node]
        set b [$ns node]
        set l [$ns duplex-link $a $b 10Mb 10ms DropTail]
        tb-set-link-simplex-params $l $a 10ms 10Mb 0
        set qab [[$ns link $a $b] queue]
        set qba [[$ns link $b $a] queue]
    """
    with pytest.raises(SpecError, match=r"thresh applies to RED queues"):
        parse(tmp_path, body + '$ns at 1 "$qba set thresh_ 10"\n')


def test_application_defaults_applied_once(tmp_path):
    e = parse(tmp_path, """\
        set a [$ns node]
        set b [$ns node]
        $ns duplex-link $a $b 10Mb 10ms DropTail
        set u [new Agent/UDP]
        $ns attach-agent $a $u
        set n [new Agent/Null]
        $ns attach-agent $b $n
        $ns connect $u $n
        set cbr [new Application/Traffic/CBR]
        $cbr attach-agent $u
        set e1 [new Application/Traffic/Exponential]
        $e1 attach-agent $u
        set e0 [new Application/Traffic/Exponential]
        $e0 set burst_time_ 0
        $e0 set idle_time_ 10ms
        $e0 attach-agent $u
        set p [new Application/Traffic/Pareto]
        $p attach-agent $u
        set t [new Agent/TCP/Linux]
        $t select_ca reno
        $ns attach-agent $a $t
    """)
    ag = {x.name: x for x in e.agents}
    assert ag["cbr"].traffic == ir.Traffic("cbr", packet_size=210, rate_bps=448_000)
    assert ag["e1"].traffic == ir.Traffic("exponential", packet_size=210, rate_bps=64_000,
                                          burst_s=0.5, idle_s=0.5)
    assert ag["e0"].traffic == ir.Traffic("poisson", packet_size=210, interval_s=0.01)
    assert ag["p"].traffic.shape == 1.5
    assert ag["t"].transport == ir.Transport("tcp", cc="newreno")
    assert ag["n"].transport == ir.Transport("udp_sink")


def test_bad_agent_parameter_names_its_line(tmp_path):
    with pytest.raises(SpecError, match=r"t.tcl:5: .*rate_: bandwidth 'fast' not understood"):
        parse(tmp_path, """\
            set a [$ns node]
            set cbr [new Application/Traffic/CBR]
            $cbr set rate_ fast
        """)


def test_application_events_are_typed_and_checked(tmp_path):
    body = """\
        set a [$ns node]
        set u [new Agent/UDP]
        $ns attach-agent $a $u
        set cbr [new Application/Traffic/CBR]
        $cbr attach-agent $u
    """
    e = parse(tmp_path, body + '$ns at 1 "$cbr set rate_ 2Mb"\n$ns at 2 "$cbr start"\n')
    assert [(x.action, x.param, x.value) for x in e.events] == \
        [("set", "rate_bps", 2_000_000), ("start", None, None)]
    with pytest.raises(SpecError, match=r"parameter 'colour_' cannot change"):
        parse(tmp_path, body + '$ns at 1 "$cbr set colour_ 2"\n')
    with pytest.raises(SpecError, match=r"u is a transport agent"):
        parse(tmp_path, body + '$ns at 1 "$u start"\n')


def test_builder_and_yaml_check_events_with_their_line(tmp_path):
    b = ExperimentBuilder("x")
    b.node("a"), b.node("b")
    b.link("a", "b", name="l0")
    b.at(1, "l0", "delay", "banana")
    with pytest.raises(SpecError, match=r"test_normalize.py:\d+: .*delay 'banana'"):
        b.build()
    y = tmp_path / "x.yaml"
    y.write_text("nodes: [a, b]\nlinks:\n  - {name: l0, nodes: [a, b]}\nevents:\n"
                 "  - {at: 1, target: l0, action: bandwidth, args: [lots]}\n")
    with pytest.raises(SpecError, match=r"x.yaml:5: .*bandwidth 'lots'"):
        yaml_spec.load_file(y)


def test_tevc_words_name_the_bad_argument():
    b = ExperimentBuilder("x")
    b.node("a"), b.node("b")
    b.link("a", "b", name="l0")
    exp = b.build()
    ev = normalize.event(exp, 0.0, "l0", "delay", ["50ms"])
    assert (ev.action, ev.value) == ("delay", 0.05)
    with pytest.raises(SpecError, match=r"delay: delay '50 parsecs' not understood"):
        normalize.event(exp, 0.0, "l0", "delay", ["50 parsecs"])
    with pytest.raises(SpecError, match=r"unknown event 'frobnicate'"):
        normalize.event(exp, 0.0, "l0", "frobnicate", ["3"])


def test_ir_version_1_is_upgraded():
    v1 = {"version": 1, "name": "old", "nodes": [{"name": "a"}, {"name": "b"}],
          "links": [{"name": "l0", "a": "a", "b": "b"}],
          "agents": [{"name": "u", "kind": "Agent/UDP", "node": "a", "peer": "n"},
                     {"name": "n", "kind": "Agent/Null", "node": "b", "peer": "u"},
                     {"name": "c", "kind": "Application/Traffic/CBR", "node": "a",
                      "attached": "u", "params": [["rate_", "1Mb"]]}],
          "events": [{"time_s": 1, "target": "l0", "action": "bandwidth", "args": ["5Mb"]},
                     {"time_s": 2, "target": "l0", "action": "frobnicate", "args": []}]}
    with pytest.raises(SpecError, match="IR version 1"):
        ir.Experiment.from_json(v1)
    e = ir.Experiment.from_json(normalize.upgrade(v1))
    assert e.agents[2].traffic.rate_bps == 1_000_000
    assert [(x.action, x.value) for x in e.events] == [("bandwidth", 5_000_000)]
    assert "frobnicate" in e.warnings[0]
    assert ir.Experiment.from_json(e.to_json()) == e


def test_tcp_variables_honoured_in_simulation_or_warned():
    a, notes = normalize.agent("t", "Agent/TCP/Newreno", params={
        "packetSize_": "1000", "window_": "20", "maxburst_": "4", "tcpTick_": "0.01",
        "windowInit_": "2", "fid_": "1"})
    t = a.transport
    assert (t.mss, t.window, t.window_init, t.max_burst, t.tcp_tick_s) == (1000, 20, 2, 4,
                                                                            0.01)
    # one note per variable the emulated Linux cannot follow, naming it; none for the
    # two both back ends realise
    joined = "\n".join(notes)
    for var in ("maxburst_", "tcpTick_", "fid_"):
        assert sum(var in n for n in notes) == 1, (var, notes)
    assert "packetSize_" not in joined and "window_ " not in joined
    assert "windowInit_" not in joined      # the emulated sender's route's initcwnd
    assert "fid_ is not realised" in joined
    with pytest.raises(SpecError, match="maxburst_"):
        normalize.agent("t", "Agent/TCP/Newreno", params={"maxburst_": "lots"})
    # the simulated agent gets them (and Linux's MSS when packetSize_ is unset)
    from wanlab.engine.encode import agents
    from wanlab.plan.types import SimFlow
    flow = SimFlow(app="ftp", kind="tcp", src_node="a", dst_node="b", dst_ip="10.0.0.2",
                   port=5000, traffic=ir.Traffic(pattern="ftp"), transport=t,
                   sink=ir.Transport("tcp_sink"))
    src = agents([flow])[1]
    assert (src["mss"], src["max_burst"], src["tcp_tick_us"]) == (1000, 4, 10000)
    plain = agents([SimFlow(**{**flow.__dict__, "transport": ir.Transport("tcp")})])[1]
    assert plain["mss"] == ir.LINUX_MSS and "max_burst" not in plain
    # emulated: windowInit_ and minrto_ as metrics of the sender's route
    from wanlab.backends.emulate import tcp_route
    assert tcp_route.metrics(2, 0.05) == ["initcwnd", "2", "rto_min", "50ms"]
    assert tcp_route.metrics(None, None) == []


def test_tcp_sinks_ack_as_linux_or_as_ns2_delack(tmp_path, monkeypatch):
    from wanlab.engine import encode
    from wanlab.engine.encode import agents
    from wanlab.plan.types import SimFlow
    plain, notes = normalize.agent("k", "Agent/TCPSink")
    delack, _ = normalize.agent("k", "Agent/TCPSink/DelAck")
    timed, tnotes = normalize.agent("k", "Agent/TCPSink/DelAck", params={"interval_": "100ms"})
    assert notes == [] and timed.transport.delack_s == 0.1
    assert sum("interval_" in n and "simulation only" in n for n in tnotes) == 1, tnotes
    with pytest.raises(SpecError, match="interval_"):
        normalize.agent("k", "Agent/TCPSink/DelAck", params={"interval_": "soon"})

    def sink(t: ir.Transport) -> dict:
        return agents([SimFlow(app="ftp", kind="tcp", src_node="a", dst_node="b",
                               dst_ip="10.0.0.2", port=5000, traffic=ir.Traffic(pattern="ftp"),
                               transport=ir.Transport("tcp"), sink=t)])[0]
    # ns-2's TCPSink ACKs each segment; DelAck ACKs as Linux does, unless the script sets
    # ns-2 DelAck's timer
    assert (sink(plain.transport)["acks"], sink(delack.transport)["acks"]) == ("each", "linux")
    k = sink(timed.transport)
    assert (k["acks"], k["delack_us"]) == ("delayed", 100_000)
    # the Linux-like sink has this host's tcp_rmem (recorded in the scenario), the others none
    with open(encode.TCP_RMEM) as f:
        host = [int(x) for x in f.read().split()]
    assert sink(delack.transport)["rmem"] == host
    assert "rmem" not in sink(plain.transport) and "rmem" not in k
    # unreadable or malformed: none, and the engine takes Linux's defaults
    for text in (None, "87380 16777216\n", "4096 x 6291456\n", "4096 131072 4096\n"):
        path = tmp_path / "tcp_rmem"
        if text is not None:
            path.write_text(text)
        monkeypatch.setattr(encode, "TCP_RMEM", str(path))
        encode.host_tcp_rmem.cache_clear()
        assert "rmem" not in sink(delack.transport), text
        path.unlink(missing_ok=True)
    encode.host_tcp_rmem.cache_clear()
