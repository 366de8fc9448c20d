"""Which machine does an event of a cluster experiment, and what it does there (pure: no
Ray, no root)."""

from __future__ import annotations

import pytest

from wanlab.cluster import events
from wanlab.engine import encode
from wanlab.errors import WanlabError
from wanlab.frontends.yaml_spec import loads

SPEC = """\
name: ev
nodes: [a, b, c, h]
links:
  - {name: ab, nodes: [a, b], bandwidth: 10Mb, delay: 5ms}
  - {name: bc, nodes: [b, c], delay: 2ms}
lans:
  - {name: lan0, nodes: [c, h], delay: 2ms}
programs:
  - {name: p, node: c, command: "true"}
events:
  - {at: 1, target: ab, action: down}
  - {at: 2, target: ab, action: delay, args: [20ms]}
  - {at: 3, target: bc, action: bandwidth, args: [5Mb]}
  - {at: 4, target: p, action: start}
  - {at: 5, target: lan0, action: delay, args: [4ms]}
  - {at: 6, target: ns, action: msg, args: [hello]}
"""

WHERE = events.Where({"a": "m0", "b": "m1", "c": "m1", "h": "m1", "lan:lan0": "m1"},
                     {("m0", "m1"): 0.001, ("m1", "m0"): 0.001})


def exp():
    return loads(SPEC, file="ev.yaml")


def test_a_cut_links_up_and_down_go_to_both_machines_and_its_directions_to_their_senders():
    e = exp()
    down, delay = e.events[0], e.events[1]
    assert events.owners(e, WHERE, "ab") == ["m0", "m1"]
    assert events.for_machine(e, WHERE, down, "m0") == down
    assert events.for_machine(e, WHERE, down, "m1") == down
    # a -> b is sent by m0, b -> a by m1; each gets its direction, whole: the frames carry
    # their due time and the far engine holds them until then, so nothing is subtracted
    d0 = events.for_machine(e, WHERE, delay, "m0")
    d1 = events.for_machine(e, WHERE, delay, "m1")
    assert (d0.dir, d1.dir) == ("ab", "ba")
    assert d0.value == pytest.approx(0.020) and d1.value == pytest.approx(0.020)
    one_dir = type(delay)(**{**delay.__dict__, "dir": "ba"})
    assert events.for_machine(e, WHERE, one_dir, "m0") is None


def test_local_objects_go_to_their_machine_and_ns_to_every_machine():
    e = exp()
    shares = events.split(e, WHERE, e.events)
    assert [(x.target, x.action) for x in shares["m0"]] == [
        ("ab", "down"), ("ab", "delay"), ("ns", "msg")]
    assert [(x.target, x.action) for x in shares["m1"]] == [
        ("ab", "down"), ("ab", "delay"), ("bc", "bandwidth"), ("p", "start"),
        ("lan0", "delay"), ("ns", "msg")]
    # a link inside one machine keeps its event unchanged
    assert shares["m1"][2] == e.events[2]


def test_a_cut_delay_shorter_than_the_machines_path_is_refused_by_name():
    e = loads(SPEC.replace("args: [20ms]", "args: [0.5ms]"), file="ev.yaml")
    with pytest.raises(WanlabError, match=r"ab delay 0.5 ms at t=2 s.*m0 and m1"):
        events.split(e, WHERE, e.events)


def test_ns_swapout_halts_every_machine_and_is_the_conductors():
    e = loads(SPEC + "  - {at: 7, target: ns, action: swapout}\n", file="ev.yaml")
    shares = events.split(e, WHERE, e.events)
    for m in ("m0", "m1"):
        assert [(x.target, x.action, x.time_s) for x in shares[m]][-1] == ("ns", "halt", 7.0)
    assert events.conducted(e, WHERE) == [{"kind": "whole", "op": "swapout", "at": 7.0}]
    # from tevc it stays the command's
    with pytest.raises(WanlabError, match="wanlab swapout ev"):
        events.for_machine(e, WHERE, e.events[-1], "m0")


SEQUENCE = """\
set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
set l0 [$ns duplex-link $a $b 100Mb 5ms DropTail]
set pa [$a program-agent -command "sleep 1"]
set pb [$b program-agent -command "true"]
set seq [$ns event-sequence {
  $pa run
  $l0 delay 10ms
  $pb run
}]
set one [$ns event-sequence {
  $pa run
  $pa run
}]
$ns at 2 "$seq start"
$ns at 3 "$one start"
$ns run
"""


def test_a_sequence_over_two_machines_is_the_conductors_and_one_on_one_machine_its(
        tmp_path):
    from wanlab.frontends.ns import parse
    f = tmp_path / "seq.tcl"
    f.write_text(SEQUENCE)
    e = parse(str(f))
    where = events.Where({"a": "m0", "b": "m1"}, {("m0", "m1"): 0.001, ("m1", "m0"): 0.001})
    shares = events.split(e, where, e.events)
    # the sequence on m0 alone stays in m0's timeline; the other is in no share
    assert [(x.target, x.sequence) for x in shares["m0"]] == [("pa", "one@3"),
                                                              ("pa", "one@3")]
    assert shares["m1"] == []
    (item,) = events.conducted(e, where)
    assert (item["kind"], item["name"], item["at"]) == ("sequence", "seq@2", 2.0)
    # each step by the machines that do it: the cut link's delay by both, each its
    # direction whole (the frames cross with their due time)
    steps = [[(m, ev["target"], ev.get("dir"), ev["value"]) for m, ev in step]
             for step in item["steps"]]
    assert steps[0] == [("m0", "pa", None, None)] and steps[2] == [("m1", "pb", None, None)]
    assert [(m, d) for m, _, d, _ in steps[1]] == [("m0", "ab"), ("m1", "ba")]
    assert all(v == pytest.approx(0.010) for *_, v in steps[1])
    # tevc of the sequence: no machine's timeline has it
    assert all(t.name != "seq" for tls in events.timelines(e, where).values() for t in tls)


FLOWS = """\
name: fl
nodes: [a, b, c]
links:
  - {name: ab, nodes: [a, b], delay: 5ms}
  - {name: bc, nodes: [b, c], delay: 5ms}
agents:
  - {name: udp0, kind: Agent/UDP, node: a, peer: null0}
  - {name: null0, kind: Agent/Null, node: c, peer: udp0}
  - {name: cbr0, kind: Application/Traffic/CBR, attached: udp0,
     params: {packetSize_: 500, rate_: 1Mb}}
events:
  - {at: 1, target: cbr0, action: start}
"""


def test_a_flow_between_machines_goes_to_both_parts_with_a_stub_for_the_far_end():
    from wanlab.cluster.experiment import split
    from wanlab.model.ir import validate
    from wanlab.plan.plan import make_plan
    e = loads(FLOWS, file="fl.yaml")
    where = {"a": "m0", "b": "m1", "c": "m2"}
    one_way = {(x, y): 0.0001 for x in ("m0", "m1", "m2") for y in ("m0", "m1", "m2")}
    parts = split(e, make_plan(e, "0000"), where, one_way, {"ab": 7, "bc": 8},
                  {"m0": "10.0.0.1", "m1": "10.0.0.2", "m2": "10.0.0.3"})
    for m in ("m0", "m1", "m2"):
        part = parts[m][0]
        validate(part)
        make_plan(part, "0001")
        # the same applications in the same order everywhere (a flow's port is its index)
        assert [a.name for a in part.agents] == ["udp0", "null0", "cbr0"]
        assert {n.name for n in part.nodes} >= {"a", "c"}
    assert parts["m0"][0].node("c").kind == "remote"
    assert parts["m2"][0].node("a").kind == "remote"
    # a cut link's direction is shaped whole by its sender (5 ms, not 5 ms less the path),
    # the other end passes it unshaped; the stub's TAP is a tunnel to the far engine
    ab0 = next(l for l in parts["m0"][0].links if l.name == "ab")
    ab1 = next(l for l in parts["m1"][0].links if l.name == "ab")
    assert (ab0.ab.delay_s, ab0.ba.delay_s) == (0.005, 0.0)
    assert (ab1.ab.delay_s, ab1.ba.delay_s) == (0.0, 0.005)
    ports = make_plan(parts["m0"][0], "0001").ports
    assert sorted(p.tunnel for p in ports) == [False, True]
    # the start goes to the sender's and the receiver's machines only
    assert [ev.target for ev in parts["m0"][0].events] == ["cbr0"]
    assert [ev.target for ev in parts["m2"][0].events] == ["cbr0"]
    assert parts["m1"][0].events == ()


def test_the_two_halves_of_a_flow_are_joined():
    from wanlab.cluster.experiment import join_halves
    send = {"agent": "cbr0", "started_s": 1.0, "machine": "m0",
            "result": {"half": "send", "sent_packets": 500, "packets": 0, "bytes": 0,
                       "sender": {"x": 1}}}
    recv = {"agent": "cbr0", "started_s": 1.001, "machine": "m2",
            "result": {"half": "receive", "sent_packets": None, "packets": 498,
                       "bytes": 249000, "sender": {}}}
    (row,) = join_halves([send, recv])
    assert row["machine"] == "m0->m2"
    assert row["result"] == {"sent_packets": 500, "packets": 498, "bytes": 249000,
                             "sender": {"x": 1}}


def test_ns_swapout_as_a_step_of_a_sequence_over_machines_is_refused_by_name(tmp_path):
    from wanlab.frontends.ns import parse
    f = tmp_path / "seq.tcl"
    f.write_text(SEQUENCE.replace("  $pb run\n}]", "  $pb run\n  $ns swapout\n}]"))
    e = parse(str(f))
    where = events.Where({"a": "m0", "b": "m1"}, {("m0", "m1"): 0.001, ("m1", "m0"): 0.001})
    with pytest.raises(WanlabError, match="ns swapout as a step of event sequence seq@2"):
        events.split(e, where, e.events)


SIM_FLOWS = """\
name: sf
nodes: [a, {name: r1, kind: simulated}, {name: r2, kind: simulated},
        {name: s, kind: simulated}, b]
links:
  - {name: l0, nodes: [a, r1], delay: 5ms}
  - {name: l1, nodes: [r1, r2], delay: 5ms}
  - {name: l2, nodes: [r2, b], delay: 5ms}
  - {name: l3, nodes: [r2, s], delay: 1ms}
agents:
  - {name: udp0, kind: Agent/UDP, node: a, peer: null0}
  - {name: null0, kind: Agent/Null, node: b, peer: udp0}
  - {name: cbr0, kind: Application/Traffic/CBR, attached: udp0}
  - {name: tcp1, kind: Agent/TCP, node: r1, peer: sink1}
  - {name: sink1, kind: Agent/TCPSink, node: s, peer: tcp1}
  - {name: ftp1, kind: Application/FTP, attached: tcp1}
events:
  - {at: 1, target: ftp1, action: start}
"""


def test_a_simulated_flow_is_placed_whole_and_played_by_its_machine_only():
    """Traffic agents between simulated nodes run in one engine: placement keeps their
    ends together; the part of that machine gets the router's endpoint host from the
    whole plan (its addresses), the flow's events, and plans it as the engine's agents;
    the other parts keep the application (the ports of the other flows stay in order)."""
    from wanlab.cluster.experiment import split
    from wanlab.model.ir import validate
    from wanlab.plan.placement import pieces
    from wanlab.plan.plan import make_plan
    e = loads(SIM_FLOWS, file="sf.yaml")
    assert pieces(e) == [["r1", "r2", "s"]]
    where = {"a": "m0", "r1": "m1", "r2": "m1", "s": "m1", "b": "m2"}
    one_way = {(x, y): 0.0001 for x in ("m0", "m1", "m2") for y in ("m0", "m1", "m2")}
    whole = make_plan(e, "0000")
    parts = split(e, whole, where, one_way, {"l0": 7, "l2": 8},
                  {"m0": "10.0.0.1", "m1": "10.0.0.2", "m2": "10.0.0.3"})
    for m in ("m0", "m1", "m2"):
        validate(parts[m][0])
        assert [a.name for a in parts[m][0].agents if a.role == "application"] == \
            ["cbr0", "ftp1"]
    sim = parts["m1"][0]
    assert sim.node("r1-ep").kind == "simulated"
    plan = make_plan(sim, "0001")
    assert plan.nodes["r1-ep"].interfaces[0].ip == whole.nodes["r1-ep"].interfaces[0].ip
    got = {a["agent"]: a for a in encode.apply(plan).agents}
    assert sorted(got) == ["ftp1", "ftp1.sink"], got
    assert got["ftp1"]["host"] == "r1-ep"
    assert got["ftp1"]["dst"].split(":")[0] == whole.nodes["s"].interfaces[0].ip
    assert [ev.target for ev in sim.events] == ["ftp1"]
    assert parts["m0"][0].events == parts["m2"][0].events == ()
