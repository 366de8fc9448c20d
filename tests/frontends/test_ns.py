"""The ns-2 front end: each construct, names, semantics, warnings and errors."""

import math
import os
import tempfile

import pytest

from wanlab.errors import SpecError
from wanlab.frontends import ns
from wanlab.model.ir import Traffic, Transport


def test_nodes_links_names_and_sources(tcl):
    e = tcl("""\
        set router [$ns node]
        set n(3) [$ns node]
        $ns node
        set l [$ns duplex-link $router $n(3) 10Mb 20ms DropTail]
        $ns duplex-link $router $n(3) 1Mb 1ms DropTail
        $ns run
    """)
    assert [n.name for n in e.nodes] == ["router", "n-3", "node0"]
    assert [(l.name, l.a, l.b) for l in e.links] == [("l", "router", "n-3"),
                                                     ("link0", "router", "n-3")]
    assert e.node("router").source.line == 3
    assert e.links[0].source.line == 6
    l = e.links[0]
    assert l.ab.bandwidth_bps == 10_000_000 and math.isclose(l.ab.delay_s, 0.02)
    assert l.ab == l.ba and l.ab.queue.kind == "droptail"
    assert e.name == "t" and e.rtproto == "static" and e.warnings == ()


def test_experiment_name_sanitised(tcl):
    e = tcl("$ns node\n$ns run\n", name="3 my_exp.tcl")
    assert e.name == "my-exp"


def test_names_from_globals_set_in_procs_and_loops(tcl):
    e = tcl("""\
        proc mk {ns} { global h; for {set i 0} {$i < 3} {incr i} { set h($i) [$ns node] } }
        mk $ns
        foreach x [list $h(0) $h(1)] { tb-set-node-startcmd $x "echo hi" }
        set my_node [$ns node]
        $ns run
    """)
    assert [n.name for n in e.nodes] == ["h-0", "h-1", "h-2", "my-node"]
    assert e.node("h-1").startcmd == "echo hi"
    assert any("my_node" in w for w in e.warnings)


def test_rtproto_mapping(tcl):
    for p, want in [("Static", "static"), ("Session", "session"), ("ospf", "ospf"),
                    ("OSPF", "ospf"), ("Manual", "manual")]:
        assert tcl(f"$ns rtproto {p}\n$ns node\n$ns run\n").rtproto == want
    with pytest.raises(SpecError, match="t.tcl:3: .*supported are"):
        tcl("$ns rtproto RIP\n")


def test_lan_semantics_half_delay_and_loss_split(tcl):
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        set c [$ns node]
        set lan0 [$ns make-lan "$a $b $c" 100Mb 10ms]
        tb-set-lan-loss $lan0 0.19
        $ns run
    """)
    lan = e.lans[0]
    assert lan.name == "lan0" and lan.delay_s == 0.01 and lan.loss == 0.19
    for m in lan.members:
        for half in (m.to_lan, m.from_lan):
            assert math.isclose(half.delay_s, 0.005)
            assert half.bandwidth_bps == 100_000_000
            assert math.isclose(half.loss, 0.1)
    # end to end: a's to_lan then b's from_lan
    a, b = lan.members[0], lan.members[1]
    assert math.isclose(a.to_lan.delay_s + b.from_lan.delay_s, 0.01)
    assert math.isclose(1 - (1 - a.to_lan.loss) * (1 - b.from_lan.loss), 0.19)


def test_lan_per_node_overrides(tcl):
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        set c [$ns node]
        set lan0 [$ns make-lan "$a $b $c" 100Mb 10ms]
        tb-set-node-lan-delay $a $lan0 30ms
        tb-set-node-lan-bandwidth $b $lan0 1Mb
        tb-set-node-lan-loss $c $lan0 0.05
        tb-set-lan-simplex-params $lan0 $b 1ms 2Mb 0.1 3ms 4Mb 0.2
        tb-set-ip-lan $a $lan0 10.0.0.5
        tb-set-netmask $lan0 255.255.255.0
        $ns run
    """)
    m = {x.node: x for x in e.lans[0].members}
    assert m["a"].to_lan.delay_s == m["a"].from_lan.delay_s == 0.03
    assert m["a"].to_lan.bandwidth_bps == 100_000_000
    assert (m["b"].to_lan.delay_s, m["b"].to_lan.bandwidth_bps, m["b"].to_lan.loss) == \
        (0.001, 2_000_000, 0.1)
    assert (m["b"].from_lan.delay_s, m["b"].from_lan.bandwidth_bps, m["b"].from_lan.loss) == \
        (0.003, 4_000_000, 0.2)
    assert m["c"].to_lan.loss == m["c"].from_lan.loss == 0.05
    assert math.isclose(m["c"].to_lan.delay_s, 0.005)
    assert m["a"].ip == "10.0.0.5" and e.lans[0].netmask == "255.255.255.0"


def test_queue_params_apply_to_one_direction(tcl):
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        set l [$ns duplex-link $a $b 10Mb 10ms RED]
        set q [[$ns link $a $b] queue]
        $q set limit_ 100
        $q set queue-in-bytes_ true
        $q set gentle_ 1
        $q set thresh_ 10
        $q set maxthresh_ 40
        $q set q_weight_ 0.01
        $q set linterm_ 20
        [[$ns link $b $a] queue] set limit_ 70
        $ns run
    """)
    l = e.links[0]
    q = l.ab.queue
    assert (q.kind, q.limit, q.in_bytes, q.gentle, q.thresh, q.maxthresh, q.q_weight,
            q.linterm) == ("red", 100, True, True, 10.0, 40.0, 0.01, 20.0)
    assert l.ba.queue.limit == 70 and l.ba.queue.thresh == 5.0


def test_red_params_on_droptail_warn(tcl):
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        $ns duplex-link $a $b 10Mb 10ms DropTail
        [[$ns link $a $b] queue] set thresh_ 3
        $ns queue-limit $a $b 20
        $ns run
    """)
    assert e.links[0].ab.queue.limit == 20
    assert any("t.tcl:6:" in w and "thresh_" in w for w in e.warnings)


def test_link_loss_forms_and_simplex_params(tcl):
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        set l [$ns duplex-link $a $b 10Mb 10ms GRED]
        tb-set-link-loss $l 0.01
        tb-set-link-loss $l $b 0.02
        tb-set-link-simplex-params $l $a 5ms 1Mb 0.03
        set c [$ns node]
        set m [$ns duplex-link $b $c 10Mb 10ms DropTail]
        tb-set-link-loss $c $b 0.04
        tb-set-link-loss [$ns link $b $c] 0.05
        $ns cost $b $c 5
        tb-set-ip-link $a $l 10.0.0.1
        tb-set-ip-interface $b $a 10.0.0.2
        tb-set-netmask $l 30
        $ns run
    """)
    l, m = e.links
    assert (l.ab.delay_s, l.ab.bandwidth_bps, l.ab.loss) == (0.005, 1_000_000, 0.03)
    assert l.ba.loss == 0.02 and l.ab.queue.kind == "gred"
    assert m.ba.loss == 0.04 and m.ab.loss == 0.05 and m.cost == 5
    assert (l.ip_a, l.ip_b, l.netmask) == ("10.0.0.1", "10.0.0.2", "30")


def test_tb_set_ip_on_single_interface_node(tcl):
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        set c [$ns node]
        set l [$ns duplex-link $a $b 10Mb 10ms DropTail]
        set lan [$ns make-lan "$b $c" 10Mb 0ms]
        tb-set-ip $a 10.1.0.1
        tb-set-ip $c 10.2.0.3
        $ns run
    """)
    assert e.links[0].ip_a == "10.1.0.1"
    assert e.lans[0].members[1].ip == "10.2.0.3"
    with pytest.raises(SpecError, match=r"t.tcl:9: tb-set-ip: node b has 2 links or LANs"):
        tcl("""\
            set a [$ns node]
            set b [$ns node]
            set c [$ns node]
            set l [$ns duplex-link $a $b 10Mb 10ms DropTail]
            set lan [$ns make-lan "$b $c" 10Mb 0ms]
            tb-set-ip $a 10.1.0.1
            tb-set-ip $b 10.1.0.2
            $ns run
        """)


def test_node_attributes_and_routes(tcl):
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        set l [$ns duplex-link $a $b 10Mb 10ms DropTail]
        tb-set-node-os $a UBUNTU
        tb-set-hardware $b pc850
        tb-set-node-startup $b "run.sh"
        $a start-command "/bin/true"
        $a add-route $b $b
        $a add-route 10.9.0.0/16 10.0.0.2
        $ns rtproto Manual
        $ns run
    """)
    a, b = e.nodes
    assert a.os == "UBUNTU" and a.startcmd == "/bin/true"
    assert b.hardware == "pc850" and b.startcmd == "run.sh"
    assert [(r.dst, r.via) for r in a.routes] == [("b", "b"), ("10.9.0.0/16", "10.0.0.2")]
    assert any("t.tcl:6: tb-set-node-os UBUNTU: Ubuntu is not available; node a runs the "
               "'default' image" in w and "host" in w for w in e.warnings)
    assert a.image == "default" and b.image is None
    assert any("t.tcl:7: tb-set-hardware pc850" in w and "this host" in w for w in e.warnings)


def test_ignored_testbed_commands_warn(tcl):
    e = tcl("""\
        set a [$ns node]
        tb-fix-node $a pc12
        tb-set-colocate-factor 4
        tb-set-sync-server $a
        tb-make-soft-vtype fast {pc850 pc3000}
        tb-set-noshaping $a 1
        tb-set-wasolver-weights 1 2 3
        tb-use-ipassign 1
        $ns run
    """)
    joined = "\n".join(e.warnings)
    assert e.node("a").fixed == "pc12"          # recorded: the cluster's placement uses it
    for cmd, line in [("tb-set-colocate-factor", 5),
                      ("tb-set-sync-server", 6), ("tb-make-soft-vtype", 7),
                      ("tb-set-noshaping", 8), ("tb-set-wasolver-weights", 9),
                      ("tb-use-ipassign", 10)]:
        assert f"t.tcl:{line}: {cmd}: ignored" in joined


def test_unknown_methods_and_ns_display_commands_warn(tcl):
    e = tcl("""\
        set a [$ns node]
        $ns duplex-link-op $a $a orient right
        $ns namtrace-all nf
        $a color red
        $ns fancy-thing 1
        set b [$ns node]
        $ns run
    """)
    assert len(e.nodes) == 2
    j = "\n".join(e.warnings)
    assert "t.tcl:4: $ns duplex-link-op" in j and "t.tcl:5: $ns namtrace-all" in j
    assert "t.tcl:6: node color" in j
    assert "t.tcl:7: Simulator: method 'fancy-thing'" in j


def test_unknown_command_is_an_error_naming_the_line(tcl):
    with pytest.raises(SpecError, match=r"t.tcl:4: unknown command 'frobnicate'"):
        tcl("set a [$ns node]\nset x [frobnicate $a 1 2]\n$ns run\n")
    with pytest.raises(SpecError, match=r"t.tcl:3: unknown command 'foo'"):
        tcl("foo bar\n$ns run\n")


def test_repeated_warnings_are_folded(tcl):
    e = tcl("""\
        for {set i 0} {$i < 5} {incr i} { set n($i) [$ns node]; tb-set-hardware $n($i) pc850 }
        $ns run
    """)
    assert len(e.warnings) == 1 and "and 4 more times" in e.warnings[0]


def test_missing_run_is_an_error(tcl):
    with pytest.raises(SpecError, match=r"never calls '\$ns run'"):
        tcl("$ns node\n")


def test_make_simulated(tcl):
    e = tcl("""\
        set e1 [$ns node]
        $ns make-simulated {
            set s1 [$ns node]
            set s2 [$ns node]
            $ns duplex-link $s1 $s2 1Gb 1ms DropTail
        }
        $ns duplex-link $e1 $s1 100Mb 1ms DropTail
        $ns run
    """)
    kinds = {n.name: n.kind for n in e.nodes}
    assert kinds == {"e1": "emulated", "s1": "simulated", "s2": "simulated"}


def test_program_objects_and_program_agent(tcl):
    e = tcl("""\
        set a [$ns node]
        set p [new Program $ns]
        $p set node $a
        $p set command "iperf3 -s"
        $p set dir /tmp
        $p set timeout 30
        $p set expected-exit-code 0
        set p2 [$a program-agent -command "ls" -timeout 5]
        $ns at 1 "$p start"
        $ns at 2.5 "$p2 stop"
        $ns run
    """)
    p, p2 = e.programs
    assert (p.name, p.node, p.command, p.dir, p.timeout_s, p.expected_exit_code) == \
        ("p", "a", "iperf3 -s", "/tmp", 30.0, 0)
    assert (p2.name, p2.command, p2.timeout_s) == ("p2", "ls", 5.0)
    assert [(ev.time_s, ev.target, ev.action) for ev in e.events] == \
        [(1.0, "p", "start"), (2.5, "p2", "stop")]
    assert e.events[0].source.line == 11


def test_program_without_command_is_an_error(tcl):
    with pytest.raises(SpecError, match=r"t.tcl:4: Program 'p' has no command"):
        tcl("set a [$ns node]\nset p [new Program $ns]\n$p set node $a\n$ns run\n")


def test_agents_and_applications(tcl):
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        $ns duplex-link $a $b 10Mb 10ms DropTail
        set udp [new Agent/UDP]
        $ns attach-agent $a $udp
        set cbr [new Application/Traffic/CBR]
        $cbr set packetSize_ 500
        $cbr set rate_ 1Mb
        $cbr set interval_ 0.01
        $cbr set iptos_ 16
        $cbr attach-agent $udp
        set sink [new Agent/Null]
        $ns attach-agent $b $sink
        $ns connect $udp $sink
        set tcp [new Agent/TCP/Newreno]
        set tsink [new Agent/TCPSink]
        $ns attach-agent $a $tcp
        $ns attach-agent $b $tsink
        $ns connect $tcp $tsink
        set ftp [new Application/FTP]
        $ftp attach-agent $tcp
        set tel [$tcp attach-app Telnet]
        set full [new Agent/TCP/FullTcp]
        $ns at 1 "$cbr start"
        $ns at 2 "$cbr set rate_ 2Mb"
        $ns run
    """)
    ag = {x.name: x for x in e.agents}
    assert ag["udp"].kind == "Agent/UDP" and ag["udp"].node == "a" and ag["udp"].peer == "sink"
    assert ag["cbr"].attached == "udp" and ag["cbr"].node == "a"
    # typed once: interval_ replaces rate_ (ns-2), units parsed
    assert ag["cbr"].traffic == Traffic(pattern="cbr", packet_size=500, interval_s=0.01, tos=16)
    assert ag["tcp"].transport == Transport(protocol="tcp", cc="newreno")
    assert ag["tsink"].transport == Transport(protocol="tcp_sink")
    assert ag["sink"].transport == Transport(protocol="udp_sink")
    assert ag["tcp"].kind == "Agent/TCP/Newreno" and ag["tcp"].peer == "tsink"
    assert ag["ftp"].kind == "Application/FTP" and ag["ftp"].attached == "tcp"
    assert ag["tel"].kind == "Application/Telnet"
    assert ag["full"].kind == "Agent/TCP/FullTcp"
    assert (e.events[1].action, e.events[1].param, e.events[1].value) == \
        ("set", "rate_bps", 2_000_000)
    assert ag["tel"].traffic is None and ag["full"].transport.cc is None


def test_events_parse_targets_and_args(tcl):
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        set link0 [$ns duplex-link $a $b 10Mb 10ms DropTail]
        $ns at 12 "$link0 down"
        $ns at 13.5 "$link0 bandwidth 5Mb"
        $ns at 20 "$ns swapout"
        $ns at 21 "finish"
        $ns run
    """)
    ev = [(x.time_s, x.target, x.action, x.value) for x in e.events]
    assert ev == [(12.0, "link0", "down", None), (13.5, "link0", "bandwidth", 5_000_000),
                  (20.0, "ns", "swapout", None)]
    assert any("t.tcl:9: event 'finish'" in w for w in e.warnings)


def test_event_groups_best_effort(tcl):
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        set c [$ns node]
        set l1 [$ns duplex-link $a $b 10Mb 10ms DropTail]
        set l2 [$ns duplex-link $b $c 10Mb 10ms DropTail]
        set g [new EventGroup $ns]
        $g add $l1 $l2
        set tl [$ns event-timeline]
        $tl at 5 "$l1 down"
        set seq [$ns event-sequence {
            $l2 down
            $l2 up
        }]
        $ns at 10 "$g down"
        $ns at 100 "$tl start"
        $ns at 200 "$seq run"
        $ns run
    """)
    ev = [(x.time_s, x.target, x.action) for x in e.events]
    assert ev == [(10.0, "l1", "down"), (10.0, "l2", "down"), (105.0, "l1", "down"),
                  (200.0, "l2", "down"), (200.0, "l2", "up")]
    # kept in the IR (typed) so that tevc can start them again
    tls = {t.name: t for t in e.timelines}
    assert tls["tl"].kind == "timeline" and \
        [(x.time_s, x.target, x.action) for x in tls["tl"].events] == [(5.0, "l1", "down")]
    assert tls["seq"].kind == "sequence" and \
        [(x.target, x.action) for x in tls["seq"].events] == [("l2", "down"), ("l2", "up")]
    assert [(g.name, g.members) for g in e.groups] == [("g", ("l1", "l2"))]
    # tevc starts a sequence too: no warning that it cannot
    assert not any("event-sequence" in w for w in e.warnings), e.warnings


def test_a_timeline_never_started_stays_and_is_checked(tcl):
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        set l [$ns duplex-link $a $b 10Mb 10ms DropTail]
        set later [$ns event-timeline]
        $later at 1 "$l bandwidth 1Mb"
        $ns run
    """)
    assert e.events == () and e.timelines[0].name == "later"
    assert e.timelines[0].events[0].value == 1_000_000
    with pytest.raises(SpecError, match=r"t.tcl:\d+: .*bandwidth 'lots'"):
        tcl("""\
            set a [$ns node]
            set b [$ns node]
            set l [$ns duplex-link $a $b 10Mb 10ms DropTail]
            set later [$ns event-timeline]
            $later at 1 "$l bandwidth lots"
            $ns run
        """)


def test_template_parameters(tcl):
    body = """\
        define-template-parameter N 2 "how many"
        for {set i 0} {$i < $N} {incr i} { set n($i) [$ns node] }
        $ns run
    """
    assert len(tcl(body).nodes) == 2
    assert len(tcl(body, params={"N": "4"}).nodes) == 4
    with pytest.raises(SpecError, match="'M' is not a define-template-parameter"):
        tcl(body, params={"M": "4"})


def test_simplex_links_merge_into_duplex(tcl):
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        $ns simplex-link $a $b 10Mb 10ms DropTail
        $ns simplex-link $b $a 1Mb 50ms DropTail
        set c [$ns node]
        $ns simplex-link $a $c 2Mb 1ms DropTail
        $ns run
    """)
    l, m = e.links
    assert l.ab.bandwidth_bps == 10_000_000 and l.ba.bandwidth_bps == 1_000_000
    assert m.ab == m.ba
    assert any("simplex-link link1" in w for w in e.warnings)
    assert not any("simplex-link link0" in w for w in e.warnings)


def test_tcl_features_and_puts_do_not_confuse_records(tcl):
    e = tcl("""\
        puts "{\\"ok\\": false}"
        proc pair {ns} { return [list [$ns node] [$ns node]] }
        lassign [pair $ns] x y
        $ns duplex-link $x $y [expr {5 * 2}]Mb 10ms DropTail
        $ns run
    """)
    # as in Emulab, only `set VAR [creation]` names an object; lassign does not
    assert [n.name for n in e.nodes] == ["node0", "node1"]
    assert e.links[0].ab.bandwidth_bps == 10_000_000


# -- errors --------------------------------------------------------------------

@pytest.mark.parametrize("body,line,match", [
    ("set a [$ns node]\nset b [expr {1 +}]\n", 4, "missing operand"),
    ("set a [$ns node]\nforeach i {1 2} {\n  if {$i == 2} {\n    set x $nope\n  }\n}\n", 6,
     "can't read \"nope\""),
    ("proc mk {ns} {\n  set x 1\n  error boom\n}\nmk $ns\n", 5, "boom"),
    ("set a [$ns node]\nset b [$ns node]\n$ns duplex-link $a $b 10Mb\n", 5,
     r"wrong # args: should be \"\$ns duplex-link n1 n2 bw delay"),
    ("set a [$ns node]\ntb-set-ip $a\n", 4, r"should be \"tb-set-ip node ip\""),
    ("set a [$ns node]\nset b [$ns node]\n\n$ns duplex-link $a $b 10Xb 1ms DropTail\n", 6,
     "bandwidth '10Xb' not understood"),
    ("set a [$ns node]\nset b [$ns node]\n$ns duplex-link $a $b 1Mb 1ms CoDel\n", 5,
     "queue 'CoDel' unknown; supported queues are DropTail, RED, GRED"),
    ("set a [$ns node]\n$ns make-simulated {\n  set s [$ns node]\n  set y $missing\n}\n", 6,
     "can't read \"missing\""),
    ("set a [$ns node]\nset p [new Program $ns]\n$p set node $nosuch\n", 5, "can't read"),
    ("set a [$ns node]\nset b [$ns node]\n$ns duplex-link $a $b 1Mb 1ms DropTail\n"
     "$ns at soon \"$a reboot\"\n", 6, "time 'soon' not understood"),
    ("set a [$ns node]\nset l [list 1 2\n", 4, "missing close-bracket"),
    ("set ns [new Simulator] # Create the simulator\n", 3, "needs ';#'"),
    ("set a [$ns node]\ntb-set-node-lan-delay $a $a 10ms\n", 4, "expected a Lan, got a Node"),
    ("proc p {ns} {\n  set a [$ns node]\n  tb-set-link-loss $a 0.1\n}\np $ns\n", 5,
     "expected a Link, got a Node"),
])
def test_errors_cite_file_and_line(tcl, body, line, match):
    with pytest.raises(SpecError) as ei:
        tcl(body)
    err = ei.value
    assert err.file.endswith("t.tcl") and err.line == line, str(err)
    assert __import__("re").search(match, err.message), err.message


def test_error_in_sourced_file_cites_that_file(tcl, tmp_path):
    (tmp_path / "lib.tcl").write_text("proc helper {} {\n  return [expr {1/0}]\n}\n")
    with pytest.raises(SpecError) as ei:
        tcl("source lib.tcl\nhelper\n")
    assert ei.value.file.endswith("lib.tcl") and ei.value.line == 2


def test_missing_file_and_unsupported_extension(tmp_path):
    from wanlab.frontends import load
    with pytest.raises(SpecError, match="no such file"):
        ns.parse(tmp_path / "nope.tcl")
    (tmp_path / "x.txt").write_text("")
    with pytest.raises(SpecError, match="supported formats are"):
        load(tmp_path / "x.txt")


def test_endless_loop_times_out(tcl):
    with pytest.raises(SpecError, match=r"t.tcl:3: the script ran longer than the parse "
                                        r"time limit"):
        tcl("while 1 {}\n", timeout=1)


def test_no_temp_files_left_behind(tcl, tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    for body in ("set a [expr {1 +}]\n", "set a [$ns node]\n$ns run\n", "exit 3\n"):
        try:
            tcl(body)
        except SpecError:
            pass
    with pytest.raises(SpecError):
        tcl("while 1 {}\n", timeout=1)
    assert os.listdir(scratch) == []


def test_exit_ends_the_script_normally(tcl):
    e = tcl("set a [$ns node]\n$ns run\nexit 0\nset b [$ns node]\n")
    assert [n.name for n in e.nodes] == ["a"]


def test_locate_error_unit():
    info = ('boom\n    while executing\n"error boom"\n    ("foreach" body line 3)\n'
            '    invoked from within\n"foreach ..."\n    (file "/x/s.tcl" line 10)')
    assert ns.locate_error(info, {}) == ("/x/s.tcl", 12)
    info = ('boom\n    (procedure "mk" line 2)\n    invoked from within\n"mk"\n'
            '    (file "/x/s.tcl" line 9)')
    assert ns.locate_error(info, {"mk": ["/x/s.tcl", 4]}) == ("/x/s.tcl", 5)


def test_warnings_inside_make_simulated_cite_their_line(tcl):
    e = tcl("""\
        $ns make-simulated {
            set s1 [$ns node]

            tb-set-hardware $s1 pc
        }
        $ns run
    """)
    assert e.warnings[0].startswith(e.source.file + ":6: tb-set-hardware")


# -- tb-* semantics as in Emulab's tb_compat.tcl ----------------------------------------

def test_tb_set_ip_is_checked_when_called_and_keeps_the_first_interface(tcl):
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        set c [$ns node]
        set l0 [$ns duplex-link $a $b 10Mb 1ms DropTail]
        tb-set-ip $a 10.9.0.1
        set l1 [$ns duplex-link $a $c 10Mb 1ms DropTail]
        $ns run
    """)
    l0, l1 = e.links
    assert l0.ip_a == "10.9.0.1" and l1.ip_a is None
    with pytest.raises(SpecError, match=r"t.tcl:4: tb-set-ip: node a has no links or LANs at "
                                        r"this point"):
        tcl("set a [$ns node]\ntb-set-ip $a 10.0.0.1\nset b [$ns node]\n"
            "$ns duplex-link $a $b 1Mb 1ms DropTail\n$ns run\n")
    with pytest.raises(SpecError, match=r"t.tcl:6: tb-set-ip: '10.0.0.300' is not an IPv4"):
        tcl("set a [$ns node]\nset b [$ns node]\n$ns duplex-link $a $b 1Mb 1ms DropTail\n"
            "tb-set-ip $a 10.0.0.300\n$ns run\n")


def test_tb_set_link_loss_src_dst_sets_both_directions(tcl):
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        set l [$ns duplex-link $a $b 10Mb 1ms DropTail]
        tb-set-link-loss $a $b 0.04
        $ns run
    """)
    assert e.links[0].ab.loss == e.links[0].ba.loss == 0.04
    with pytest.raises(SpecError, match=r"t.tcl:5: tb-set-link-loss: no link between a and b"):
        tcl("set a [$ns node]\nset b [$ns node]\ntb-set-link-loss $a $b 0.1\n$ns run\n")


def test_tb_set_ip_routing_none_is_manual(tcl):
    assert tcl("tb-set-ip-routing none\n$ns node\n$ns run\n").rtproto == "manual"
    assert tcl("tb-set-ip-routing ospf\n$ns node\n$ns run\n").rtproto == "ospf"


def test_emulab_commands_that_do_not_apply_get_one_precise_note_each(tcl):
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        set l [$ns duplex-link $a $b 10Mb 1ms DropTail]
        tb-use-endnodeshaping 1
        tb-set-endnodeshaping $l 1
        tb-elab-in-elab 1
        tb-set-node-deltas $a /proj/x.delta
        tb-set-hardware $a pc3000
        $ns run
    """)
    j = "\n".join(e.warnings)
    assert len(e.warnings) == 5
    for line, cmd, why in [(6, "tb-use-endnodeshaping", "no end-node shaping"),
                           (7, "tb-set-endnodeshaping", "no end-node shaping"),
                           (8, "tb-elab-in-elab", "Emulab inside an experiment"),
                           (9, "tb-set-node-deltas", "no image deltas"),
                           (10, "tb-set-hardware pc3000", "namespaces on this host")]:
        assert f"t.tcl:{line}: {cmd}" in j and why in j
    assert e.node("a").hardware == "pc3000"


def test_link_change_events_take_emulabs_duplex_word(tcl):
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        set link [$ns duplex-link $a $b 10Mb 10ms DropTail]
        $ns at 4 "$link bandwidth 3Mb duplex"
        $ns at 5 "$link delay 20ms duplex"
        $ns at 6 "$link plr 0.1 duplex"
        $ns at 7 "$link bandwidth 4Mb"
        $ns at 8 "[$ns link $b $a] bandwidth 1Mb simplex"
        $ns run
    """)
    assert [(ev.action, ev.value, ev.dir) for ev in e.events] == [
        ("bandwidth", 3_000_000, None), ("delay", 0.02, None), ("plr", 0.1, None),
        ("bandwidth", 4_000_000, None), ("bandwidth", 1_000_000, "ba")]
    with pytest.raises(SpecError, match=r"t.tcl:6: .*'simplex' needs one direction"):
        tcl("""\
            set a [$ns node]
            set b [$ns node]
            set link [$ns duplex-link $a $b 10Mb 10ms DropTail]
            $ns at 4 "$link bandwidth 3Mb simplex"
            $ns run
        """)
    with pytest.raises(SpecError, match=r"t.tcl:6: .*needs one bandwidth, got 2 words"):
        tcl("""\
            set a [$ns node]
            set b [$ns node]
            set link [$ns duplex-link $a $b 10Mb 10ms DropTail]
            $ns at 4 "$link bandwidth 3Mb 4Mb"
            $ns run
        """)


def test_nested_sets_name_the_object_after_the_inner_variable(tcl):
    e = tcl("""\
        set r [set routerp [$ns node]]
        set a [set b [set c [$ns node]]]
        set h [$ns node]
        set link [$ns duplex-link $r $h 10Mb 10ms DropTail]
        tb-set-node-startcmd $routerp "echo hi"
        tb-set-node-startcmd $a "echo a"
        $ns node
        set x node0
        $ns at 1 "$r reboot"
        $ns run
    """)
    assert [n.name for n in e.nodes] == ["routerp", "c", "h", "x"]
    assert (e.links[0].a, e.links[0].b) == ("routerp", "h")
    assert e.node("routerp").startcmd == "echo hi" and e.node("c").startcmd == "echo a"
    assert e.events[0].target == "routerp"


def test_a_command_naming_the_ends_of_two_links_names_both(tcl):
    body = """\
        set a [$ns node]
        set b [$ns node]
        set l1 [$ns duplex-link $a $b 10Mb 10ms DropTail]
        set l2 [$ns duplex-link $a $b 10Mb 10ms DropTail]
        {}
        $ns run
    """
    with pytest.raises(SpecError, match=r"t.tcl:7: tb-set-link-loss: a and b are joined by 2 "
                                        r"links \(l1, l2\)"):
        tcl(body.replace("{}", "tb-set-link-loss $a $b 0.01"))
    with pytest.raises(SpecError, match=r"t.tcl:7: \$ns cost: .*\(l1, l2\)"):
        tcl(body.replace("{}", "$ns cost $a $b 3"))
    e = tcl(body.replace("{}", "tb-set-link-loss $l2 0.01"))
    assert (e.links[0].ab.loss, e.links[1].ab.loss) == (0.0, 0.01)


def test_simulated_nodes_run_no_programs(tcl):
    body = """\
        set e [$ns node]
        $ns make-simulated {
            set h [$ns node]
        }
        $ns duplex-link $e $h 10Mb 5ms DropTail
        {}
        $ns run
    """
    with pytest.raises(SpecError, match=r"t.tcl:5: nodes.h.startcmd: node 'h' is simulated "
                                        r"in the engine: it "
                                        r"runs no programs, so no start command"):
        tcl(body.replace("{}", 'tb-set-node-startcmd $h "echo hi"'))
    with pytest.raises(SpecError, match=r"t.tcl:8: program 'p' is on node 'h', which is "
                                        r"simulated"):
        tcl(body.replace("{}", 'set p [$h program-agent -command "sleep 1"]'))
    e = tcl(body.replace("{}", 'tb-set-node-startcmd $e "echo hi"'))
    assert e.node("h").kind == "simulated" and e.node("e").startcmd == "echo hi"
