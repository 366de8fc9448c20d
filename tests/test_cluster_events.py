"""Which machine does an event of a cluster experiment, and what it does there (pure: no
Ray, no root)."""

from __future__ import annotations

import pytest

from wanlab.cluster import events
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
    # a -> b is sent by m0, b -> a by m1; each gets its direction, less the 1 ms path
    d0 = events.for_machine(e, WHERE, delay, "m0")
    d1 = events.for_machine(e, WHERE, delay, "m1")
    assert (d0.dir, d1.dir) == ("ab", "ba")
    assert d0.value == pytest.approx(0.019) and d1.value == pytest.approx(0.019)
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


def test_ns_swapout_is_the_controllers():
    e = loads(SPEC + "  - {at: 7, target: ns, action: swapout}\n", file="ev.yaml")
    with pytest.raises(WanlabError, match="wanlab swapout ev"):
        events.split(e, WHERE, e.events)
