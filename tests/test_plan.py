"""Planning: addresses, names and static routes are deterministic and correct."""

import ipaddress
from dataclasses import replace

import pytest
from conftest import chain, lan

from wanlab.engine import encode
from wanlab.errors import SpecError
from wanlab.model.ir import Experiment, Link, Node, Route, validate
from wanlab.plan.addressing import NetworkSpec, assign
from wanlab.plan.plan import make_plan
from wanlab.plan.routes import _collapse


def test_each_network_gets_its_own_subnet_in_order():
    p = make_plan(chain(4), "abcd")
    assert [str(p.subnets[f"l{i}"]) for i in range(3)] == \
        ["10.1.0.0/24", "10.1.1.0/24", "10.1.2.0/24"]
    n1 = p.nodes["n1"]
    assert [(i.ifname, i.ip) for i in n1.interfaces] == [("eth0", "10.1.0.2"),
                                                         ("eth1", "10.1.1.1")]
    assert n1.netns == "wl-abcd-n1"
    assert (p.ports[0].id, p.ports[0].ifname, p.ports[0].netns) == \
        ("n0:eth0", "eth0", "wl-abcd-n0")
    assert encode.apply(p).ports[0] == {"port": "n0:eth0", "tap": "eth0",
                                        "netns": "/run/netns/wl-abcd-n0"}


def test_plan_is_deterministic():
    a, b = make_plan(chain(6), "abcd"), make_plan(chain(6), "abcd")
    assert (a.ports, a.links, a.lans) == (b.ports, b.links, b.lans) and a.hosts == b.hosts
    assert {k: v.routes for k, v in a.nodes.items()} == {k: v.routes for k, v in b.nodes.items()}


def test_explicit_addresses_and_netmask_are_honoured():
    exp = validate(Experiment("x", nodes=(Node("a"), Node("b"), Node("c")), links=(
        Link("l0", "a", "b", ip_a="192.168.5.10", ip_b="192.168.5.20", netmask="255.255.255.0"),
        Link("l1", "b", "c"))))
    p = make_plan(exp, "abcd")
    assert [i.ip for i in p.nodes["a"].interfaces] == ["192.168.5.10"]
    assert p.subnets["l0"] == ipaddress.IPv4Network("192.168.5.0/24")
    assert p.subnets["l1"] == ipaddress.IPv4Network("10.1.0.0/24")


def test_overlapping_explicit_subnets_are_an_error():
    exp = validate(Experiment("x", nodes=(Node("a"), Node("b"), Node("c")), links=(
        Link("l0", "a", "b", ip_a="10.9.0.1", ip_b="10.9.0.2"),
        Link("l1", "b", "c", ip_a="10.9.0.3", ip_b="10.9.0.4"))))
    with pytest.raises(SpecError, match="overlaps"):
        make_plan(exp, "abcd")


def test_big_lan_gets_a_big_enough_subnet():
    p = make_plan(lan(300), "abcd")
    assert p.subnets["lan0"].prefixlen == 23
    assert len({i.ip for n in p.nodes.values() for i in n.interfaces}) == 300


def test_static_routes_follow_cost():
    # a square a-b-c-d-a; make a-b expensive so a reaches b's far side via d, c
    nodes = tuple(Node(n) for n in "abcd")
    links = (Link("ab", "a", "b", cost=10), Link("bc", "b", "c"), Link("cd", "c", "d"),
             Link("da", "d", "a"))
    p = make_plan(validate(Experiment("sq", nodes=nodes, links=links)), "abcd")
    routes = {r.dst: r for r in p.nodes["a"].routes}
    via_d = p.nodes["d"].interfaces[1].ip        # d's address on link da
    # everything not attached goes via d: a single default route
    assert list(routes) == ["default"] and routes["default"].via == via_d


def test_route_compression_is_exact():
    nets = [(int(ipaddress.IPv4Address(f"10.1.{i}.0")), 24) for i in range(4)]
    assert _collapse(nets) == [(int(ipaddress.IPv4Address("10.1.0.0")), 22)]
    # a gap prevents merging across it
    nets = [(int(ipaddress.IPv4Address(f"10.1.{i}.0")), 24) for i in (0, 1, 3)]
    assert len(_collapse(nets)) == 2


def test_every_node_reaches_every_subnet_in_a_chain():
    n = 12
    p = make_plan(chain(n), "abcd")
    for name in p.nodes:
        for net, subnet in p.subnets.items():
            # walk next hops from this node until a node attached to subnet is reached
            cur, hops = name, 0
            while not any(i.network == net for i in p.nodes[cur].interfaces):
                r = _lookup(p.nodes[cur].routes, subnet)
                cur = next(m for m, q in p.nodes.items()
                           for i in q.interfaces if i.ip == r.via)
                hops += 1
                assert hops < n
    assert len(p.nodes["n0"].routes) == 1      # a leaf: only a default route


def _lookup(routes, subnet):
    best = None
    for r in routes:
        net = ipaddress.IPv4Network("0.0.0.0/0" if r.dst == "default" else r.dst)
        if subnet.subnet_of(net) and (best is None or net.prefixlen > best[0].prefixlen):
            best = (net, r)
    return best[1]


def test_manual_routes_resolve_names():
    nodes = (Node("a", routes=(Route("c", "b"),)), Node("b"), Node("c"))
    exp = validate(Experiment("m", nodes=nodes, links=(Link("l0", "a", "b"),
                                                        Link("l1", "b", "c")),
                              rtproto="manual"))
    p = make_plan(exp, "abcd")
    (r,) = p.nodes["a"].routes
    assert r.dst == p.nodes["c"].interfaces[0].ip + "/32"
    assert r.via == p.nodes["b"].interfaces[0].ip and r.dev == "eth0"


def test_manual_route_to_non_neighbour_is_an_error():
    nodes = (Node("a", routes=(Route("10.5.0.0/16", "c"),)), Node("b"), Node("c"))
    exp = validate(Experiment("m", nodes=nodes, links=(Link("l0", "a", "b"),
                                                        Link("l1", "b", "c"))))
    with pytest.raises(SpecError, match="not a neighbour"):
        make_plan(exp, "abcd")


def test_lan_engine_topology_and_hosts():
    p = make_plan(lan(3, delay=0.01), "abcd")
    (l,) = p.lans
    assert [m.port for m in l.members] == ["h0:eth0", "h1:eth0", "h2:eth0"]
    assert l.members[0].to_lan.delay_s == 0.005
    assert encode.apply(p).lans[0]["members"][0]["to_lan"]["delay_us"] == 5000
    assert "10.1.0.1\th0 h0-lan0" in p.hosts


def test_addressing_rejects_duplicate_fixed_addresses():
    with pytest.raises(SpecError, match="same address"):
        assign([NetworkSpec("l", ("a", "b"), ("10.2.0.1", "10.2.0.1"), None)])



def test_random_traffic_plans_in_both_back_ends():
    """A Pareto source between emulated nodes is planned for emulation (wanlab-gen sends it)
    and for simulation (an engine on/off agent)."""
    from wanlab.frontends.builder import ExperimentBuilder
    from wanlab.plan.plan import make_plan
    b = ExperimentBuilder("x")
    b.node("a"), b.node("b")
    b.link("a", "b")
    u = b.agent("Agent/UDP", node="a", name="u")
    n = b.agent("Agent/Null", node="b", name="n")
    b.connect(u, n)
    b.agent("Application/Traffic/Pareto", attached=u, name="par")
    exp = b.build()
    assert make_plan(exp, "abcd").flows == []
    assert "agents" not in encode.apply(make_plan(exp, "abcd")).to_json()
    plan = make_plan(exp, "abcd", simulate_all=True)
    assert [a["kind"] for a in encode.apply(plan).agents] == ["sink", "onoff"]


def test_addresses_of_one_network_in_several_subnets_are_configured_as_given():
    # Emulab configures such addresses; the members of one subnet still reach each other
    exp = validate(Experiment("x", nodes=tuple(Node(n) for n in "abcd"), links=(
        Link("l0", "a", "b", ip_a="10.7.1.2", ip_b="10.7.2.3"),
        Link("l1", "b", "c"), Link("l2", "c", "d", ip_a="10.7.2.9", ip_b="10.7.2.10"))))
    with pytest.raises(SpecError, match="overlaps"):     # 10.7.2.0/24 is l0's (b's side)
        make_plan(exp, "abcd")
    exp = validate(Experiment("x", nodes=tuple(Node(n) for n in "abcd"), links=(
        Link("l0", "a", "b", ip_a="10.7.1.2", ip_b="10.7.2.3"),
        Link("l1", "b", "c"), Link("l2", "c", "d"))))
    p = make_plan(exp, "abcd")
    assert [w for w in p.warnings if "10.7.1.2 and 10.7.2.3 of 'l0' are not in one subnet /24"
            in w and "configured as given" in w], p.warnings
    assert [(i.ip, i.prefixlen) for i in p.nodes["a"].interfaces] == [("10.7.1.2", 24)]
    assert (p.nodes["b"].interfaces[0].ip, p.nodes["b"].interfaces[0].prefixlen) == \
        ("10.7.2.3", 24)
    # every gateway of every route is on one of the node's own subnets
    for np_ in p.nodes.values():
        own = [ipaddress.IPv4Interface(f"{i.ip}/{i.prefixlen}").network for i in np_.interfaces]
        for r in np_.routes:
            assert any(ipaddress.IPv4Address(r.via) in n for n in own), (np_.name, r)
    # c reaches b's given address through b
    b_on_l1 = p.nodes["b"].interfaces[1].ip
    dst = ipaddress.IPv4Address("10.7.2.3")
    best = max((r for r in p.nodes["c"].routes
                if r.dst == "default" or dst in ipaddress.IPv4Network(r.dst)),
               key=lambda r: -1 if r.dst == "default" else ipaddress.IPv4Network(r.dst).prefixlen)
    assert best.via == b_on_l1
    # automatic networks stay clear of both subnets
    assert not any(p.subnets[n].overlaps(ipaddress.IPv4Network(s))
                   for n in ("l1", "l2") for s in ("10.7.1.0/24", "10.7.2.0/24"))


def test_a_lan_with_addresses_in_two_subnets_routes_within_each():
    from wanlab.model.ir import Lan, LanMember
    exp = validate(Experiment("x", nodes=tuple(Node(n) for n in "abc"), lans=(
        Lan("lan0", members=(LanMember("a", ip="10.8.1.1"), LanMember("b", ip="10.8.1.2"),
                             LanMember("c", ip="10.8.9.3"))),)))
    p = make_plan(exp, "abcd")
    assert any("'lan0' are not in one subnet" in w for w in p.warnings)
    assert [i.ip for n in "abc" for i in p.nodes[n].interfaces] == \
        ["10.8.1.1", "10.8.1.2", "10.8.9.3"]


def test_a_link_from_a_node_to_itself_joins_two_named_ports_without_addresses():
    # static routing, IPv4 and IPv6: the loop link gets no address and no route crosses it
    nodes = (Node("a"), Node("sw"), Node("b"))
    loop = Link("sw-sw", "sw", "sw", ifnames=("s1-eth2", "s2-eth2"))
    exp = validate(Experiment("x", nodes=nodes, ipv6="dual", links=(
        Link("l0", "a", "sw"), loop, Link("l1", "sw", "b"))))
    p = make_plan(exp, "abcd")
    sw = {i.ifname: i for i in p.nodes["sw"].interfaces}
    assert sorted(sw) == ["eth0", "eth3", "s1-eth2", "s2-eth2"]
    assert (sw["s1-eth2"].ip, sw["s1-eth2"].ip6, sw["s2-eth2"].ip) == (None, None, None)
    assert "sw-sw" not in p.subnets and "sw-sw" not in p.subnets6
    assert [str(p.subnets[n]) for n in ("l0", "l1")] == ["10.1.0.0/24", "10.1.1.0/24"]
    assert not any(r.dev in ("s1-eth2", "s2-eth2") for r in p.nodes["sw"].routes)
    lk = next(lk for lk in p.links if lk.name == "sw-sw")
    assert (lk.a, lk.b) == ("sw:s1-eth2", "sw:s2-eth2")
    for bad, why in (
            (Link("sw-sw", "sw", "sw"), "only a link that names its two interfaces"),
            (replace(loop, ip_a="10.9.0.1"), "has no addresses"),
            (replace(loop, a="b", b="b"), None)):
        with pytest.raises(SpecError, match=why or "joins node 'b' to itself: only an emul"):
            validate(Experiment("x", nodes=(*nodes[:2], Node("b", kind="simulated")),
                                links=(bad,), rtproto="static"))
    with pytest.raises(SpecError, match="routing ospf cannot run over such a link"):
        validate(Experiment("x", nodes=nodes, links=(loop,), rtproto="ospf"))
    # the builder tells its two directions apart by the sending interface
    from wanlab.frontends.builder import ExperimentBuilder
    b = ExperimentBuilder("x")
    b.node("sw")
    b.link("sw", "sw", name="l", ifnames=("p1", "p2"))
    b.direction("l", "sw", delay="5ms", ifname="p2")
    with pytest.raises(SpecError, match="joins 'sw' to itself: name the sending interface"):
        b.direction("l", "sw", delay="1ms")
    lk = b.build().links[0]
    assert (lk.ab.delay_s, lk.ba.delay_s) == (0, 0.005)
