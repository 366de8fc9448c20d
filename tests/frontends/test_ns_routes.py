"""Manual routes (`$node add-route`) to nodes, links and LANs: parsed, planned, and
forwarding over real namespaces."""

import pytest
from conftest import needs_root, ping_rtts

from wanlab.errors import SpecError
from wanlab.plan.plan import make_plan

ROUTED = """\
    set a [$ns node]
    set b [$ns node]
    set c [$ns node]
    set d [$ns node]
    set l0 [$ns duplex-link $a $b 100Mb 1ms DropTail]
    set l1 [$ns duplex-link $b $c 100Mb 1ms DropTail]
    set lan [$ns make-lan "$b $d" 100Mb 2ms]
    $a add-route $l1 $b
    $a add-route $lan [$ns link $a $b]
    $c add-route $l0 $b
    $d add-route $l0 $b
    $ns rtproto Manual
    $ns run
"""


def test_routes_to_links_and_lans_parse_and_plan(tcl):
    e = tcl(ROUTED, name="routed.tcl")
    assert [(r.dst, r.via) for r in e.node("a").routes] == [("l1", "b"), ("lan", "b")]
    p = make_plan(e, "abcd")
    subnet = {n: str(v) for n, v in p.subnets.items()}
    b_on_l0 = p.nodes["b"].interfaces[0].ip
    assert [(r.dst, r.via, r.dev) for r in p.nodes["a"].routes] == \
        [(subnet["l1"], b_on_l0, "eth0"), (subnet["lan"], b_on_l0, "eth0")]
    assert [r.dst for r in p.nodes["d"].routes] == [subnet["l0"]]


def test_route_to_an_own_network_is_an_error(tcl):
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        set l0 [$ns duplex-link $a $b 1Mb 1ms DropTail]
        $a add-route $l0 $b
        $ns rtproto Manual
        $ns run
    """)
    with pytest.raises(SpecError, match="'l0' is one of its own networks"):
        make_plan(e, "abcd")


@needs_root
def test_pings_follow_manual_routes_to_a_link_and_a_lan(lab, tcl):
    lab.create(tcl(ROUTED, name="routed.tcl"))
    # a -> c over l0, l1: 2 x 1 ms each way; a -> d over l0 and the LAN (2 ms end to end).
    # The floor shows the path; the ceiling only rules out a detour (the host may be busy).
    rtts = ping_rtts(lab, "routed", "a", "c-l1", count=3)
    assert len(rtts) == 3 and 3.9 <= min(rtts) <= 30, rtts
    rtts = ping_rtts(lab, "routed", "a", "d-lan", count=3)
    assert len(rtts) == 3 and 5.9 <= min(rtts) <= 30, rtts


def test_rtproto_bgp_makes_every_node_an_as_with_a_session_to_each_neighbour(tcl):
    """ns has no words for AS numbers or sessions: ``$ns rtproto BGP`` gives every node a
    private AS of its own and an eBGP session with each direct neighbour (a LAN's members
    pairwise), which the IR's checks accept as a YAML spec's."""
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        set c [$ns node]
        set d [$ns node]
        $ns duplex-link $a $b 100Mb 1ms DropTail
        $ns duplex-link $b $c 100Mb 1ms DropTail
        $ns duplex-link $c $b 100Mb 1ms DropTail
        set lan [$ns make-lan "$b $c $d" 100Mb 2ms]
        $ns rtproto BGP
        $ns run
    """)
    assert e.rtproto == "bgp"
    asn = dict(e.asns)
    assert sorted(asn) == ["a", "b", "c", "d"] and len(set(asn.values())) == 4
    assert all(4_200_000_000 <= x <= 4_294_967_294 for x in asn.values())
    # one session per pair of neighbours, however many links and LANs they share
    assert sorted(tuple(sorted((s.a, s.b))) for s in e.bgp_sessions) == [
        ("a", "b"), ("b", "c"), ("b", "d"), ("c", "d")]
    make_plan(e, "abcd")
