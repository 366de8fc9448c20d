"""IPv6 addressing, routes and FRR configuration, planned without namespaces: the front
ends' words, the per-experiment prefix, errors naming the file and line, one routing
routine for both families."""

import ipaddress
import random
from dataclasses import replace

import pytest

from wanlab.backends.emulate import frr
from wanlab.errors import SpecError
from wanlab.frontends import load, yaml_spec
from wanlab.frontends.builder import ExperimentBuilder
from wanlab.plan.addressing import ula_prefix
from wanlab.plan.plan import make_plan

DUAL = """\
name: v6
ipv6: true
nodes: [a, b, c]
links:
  - {nodes: [a, b], ips6: ["fd00:5::a", null]}
  - {nodes: [b, c]}
lans:
  - nodes: [a, b, {node: c, ip6: "fd00:6::c"}]
"""


def test_yaml_dual_stack_addresses_hosts_and_prefix_from_the_name():
    exp = yaml_spec.loads(DUAL, file="v6.yaml")
    plan = make_plan(exp, "abcd")
    a, b, c = (plan.nodes[n] for n in "abc")
    assert a.interfaces[0].addresses() == [a.interfaces[0].addresses()[0], "fd00:5::a/64"]
    assert b.interfaces[0].ip6 == "fd00:5::1"         # after the given ::a, the lowest free
    assert c.interfaces[1].ip6 == "fd00:6::c" and a.interfaces[1].ip6 == "fd00:6::1"
    # the link without addresses: a /64 of the experiment's ULA /48, made from its name
    ula = ula_prefix("v6")
    assert ula.prefixlen == 48 and str(ula).startswith("fd") and ula != ula_prefix("v7")
    assert plan.subnets6["link1"] == ipaddress.IPv6Network((ula.network_address + (1 << 64),
                                                            64))
    assert make_plan(exp, "ffff").subnets6 == plan.subnets6          # deterministic
    # both families in the hosts file, by the same names
    lines = plan.hosts.splitlines()
    assert "fd00:5::a\ta a-link0" in lines and any(x.endswith("\ta a-link0") and "." in
                                                  x.split("\t")[0] for x in lines)
    assert "fd00:6::c\tc-lan0" in lines


def test_ipv6_only_has_no_ipv4_and_ns_extension_sets_addresses(tmp_path):
    f = tmp_path / "only.tcl"
    f.write_text("""set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
set c [$ns node]
set l [$ns duplex-link $a $b 10Mb 1ms DropTail]
set lan [$ns make-lan "$a $b $c" 10Mb 1ms]
tb-set-ipv6 only
tb-set-ip6-prefix fd12:3456:789a::/56
tb-set-ip6-interface $b $a fd12:3456:789a:20::b
tb-set-ip6 $c fd12:3456:789a:30::c
$ns run
""")
    exp = load(str(f))
    assert exp.ipv6 == "only" and exp.ipv6_prefix == "fd12:3456:789a::/56"
    plan = make_plan(exp, "abcd")
    assert plan.subnets == {} and not any(i.ip for n in plan.nodes.values()
                                          for i in n.interfaces)
    assert plan.nodes["b"].interfaces[0].ip6 == "fd12:3456:789a:20::b"
    assert plan.nodes["a"].interfaces[0].ip6 == "fd12:3456:789a:20::1"
    assert plan.nodes["c"].interfaces[0].ip6 == "fd12:3456:789a:30::c"
    assert all(":" in line.split("\t")[0] for line in plan.hosts.splitlines()[2:])
    assert all(r.v6 for n in plan.nodes.values() for r in n.routes)


@pytest.mark.parametrize("change, message", [
    (("fd00:5::a", "fd00:5::zz"), r"v6.yaml:5: .*'fd00:5::zz' is not an IPv6 address"),
    (("fd00:6::c", "fd00:5::a"), r"v6.yaml:8: .*address fd00:5::a of c on LAN lan0 is already "
                                 r"the address of a on link link0 \(v6.yaml:5\)"),
    (("fd00:6::c", "fd00:5::c"), r"v6.yaml:8: .*IPv6 subnet fd00:5::/64 of 'lan0' is also "
                                 r"that of 'link0'"),
    (('null]}', '"fd00:7::1"]}'), r"v6.yaml:5: .*fd00:5::a and fd00:7::1 of 'link0' are "
                                  r"not in one /64"),
    (("ipv6: true", "ipv6: true\nipv6_prefix: fd00:9::/80"),
     r"v6.yaml:3: ipv6_prefix: IPv6 prefix fd00:9::/80 does not fit: .* /64 or shorter"),
    (("ipv6: true", "ipv6: true\nipv6_prefix: ff0e::/48"),
     r"v6.yaml:3: ipv6_prefix: IPv6 prefix ff0e::/48 is not a global or unique-local unicast"),
    (("ipv6: true", "ipv6_prefix: fd00:9::/48"),
     r"v6.yaml:2: ipv6_prefix: an IPv6 prefix is given but the experiment has no IPv6"),
    (("ipv6: true", "ipv6: true\nipv6_prefix: fd00:9::/64"),
     r"v6.yaml:3: ipv6_prefix: IPv6 prefix fd00:9::/64 does not fit: it holds 1 /64s"),
    (("ipv6: true", "ipv6: false"), r"v6.yaml:5: .*IPv6 address fd00:5::a is given but the "
                                    r"experiment has no IPv6"),
    (("ipv6: true", "ipv6: only\nnodes: [a, b, c]\nlinks: [{nodes: [a, b], ips: [10.0.0.1, "
                    "null]}]\nx:"), r"unknown key|IPv4 addresses, but the experiment is IPv6"),
    (("fd00:6::c", "ff02::1"), r"v6.yaml:8: .*ff02::1 is not a global or unique-local"),
    (("fd00:6::c", "fd00:6::"), r"v6.yaml:8: .*fd00:6:: is not a host address of fd00:6::/64"),
])
def test_bad_ipv6_input_names_the_file_and_line(change, message):
    text = DUAL.replace(*change)
    with pytest.raises(SpecError, match=message):
        make_plan(yaml_spec.loads(text, file="v6.yaml"), "abcd")


NS_BAD = """set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
set c [$ns node]
set l [$ns duplex-link $a $b 10Mb 1ms DropTail]
set lan [$ns make-lan "$a $b $c" 10Mb 1ms]
tb-set-ipv6 true
tb-set-ip6-link $a $l fd00:1::1
{bad}
$ns run
"""


@pytest.mark.parametrize("bad, message", [
    ("tb-set-ip6-lan $c $lan fd00:2::zz", r"bad.tcl:10: 'fd00:2::zz' is not an IPv6 address"),
    ("tb-set-ip6-lan $c $lan fd00:1::1", r"bad.tcl:7: .*address fd00:1::1 of c on LAN lan is "
                                         r"already the address of a on link l \(.*bad.tcl:6\)"),
    ("tb-set-ip6-link $b $l fd00:2::1", r"bad.tcl:6: .*fd00:1::1 and fd00:2::1 of 'l' are not "
                                        r"in one /64"),
    ("tb-set-ip6 $b fd00:1::9", r"bad.tcl:10: tb-set-ip6: node b has 2 links or LANs at this "
                                r"point of the script; tb-set-ip6 needs exactly one"),
    ("tb-set-ip6-lan $c $lan fe80::1", r"bad.tcl:7: .*fe80::1 is not a global or unique-local"),
    ("tb-set-ip6-prefix fd00:9::/80", r"bad.tcl:10: tb-set-ip6-prefix: IPv6 prefix "
                                      r"fd00:9::/80 does not fit: .* /64 or shorter"),
    ("tb-set-ip6-prefix fd00:9::/64", r"bad.tcl:10: .*IPv6 prefix fd00:9::/64 does not fit: it "
                                      r"holds 1 /64s, and the loopbacks and 1 links and LANs"),
    ("tb-set-ip6-prefix fe80::/48", r"bad.tcl:10: .*fe80::/48 is not a global or unique-local "
                                    r"unicast prefix"),
    ("tb-set-ip6-prefix 10.0.0.0/8", r"bad.tcl:10: .*'10.0.0.0/8' is not an IPv6 prefix"),
])
def test_bad_ipv6_input_in_ns_names_the_file_and_line(tmp_path, bad, message):
    f = tmp_path / "bad.tcl"
    f.write_text(NS_BAD.format(bad=bad))
    with pytest.raises(SpecError, match=message):
        make_plan(load(str(f)), "abcd")


def test_ipv6_only_refuses_ipv4_addresses():
    b = ExperimentBuilder("x")
    b.ipv6("only")
    b.node("a")
    b.node("b")
    b.link("a", "b", ip_a="10.0.0.1")
    with pytest.raises(SpecError, match="gives IPv4 addresses, but the experiment is IPv6"):
        b.build()
    with pytest.raises(SpecError, match="ipv6 'sometimes' unknown"):
        b.ipv6("sometimes")


CHAIN6 = """set ns [new Simulator]
source tb_compat.tcl
tb-set-ipv6 only
set s [$ns node]
$ns make-simulated {
    set r1 [$ns node]
}
set r2 [$ns node]
set d [$ns node]
$ns duplex-link $s $r1 10Mb 5ms DropTail
$ns duplex-link $r1 $r2 10Mb 5ms DropTail
$ns duplex-link $r2 $d 10Mb 5ms DropTail
set udp [new Agent/UDP]
$ns attach-agent $s $udp
set null [new Agent/Null]
$ns attach-agent $d $null
$ns connect $udp $null
set cbr [new Application/Traffic/CBR]
$cbr attach-agent $udp
$ns run
"""


def test_simulated_nodes_get_both_families(tmp_path):
    """Simulated routers and hosts take the plan's IPv6 addresses and routes to the engine:
    IPv6 alone when IPv6 only (agents then send to the sink's IPv6 address), both in dual
    stack (agents use IPv4)."""
    from wanlab.engine.encode import apply
    p = tmp_path / "chain.tcl"
    p.write_text(CHAIN6)
    exp = load(str(p))
    assert [n.kind for n in exp.nodes if n.name == "r1"] == ["simulated"]
    for mode in ("only", "dual"):
        plan = make_plan(replace(exp, ipv6=mode), "abcd", simulate_all=True)
        assert not plan.warnings
        a = apply(plan).to_json()
        hosts = {h["host"]: h for h in a["hosts"]}
        routers = {r["router"]: r for r in a["routers"]}
        assert set(hosts) == {"s", "d"} and set(routers) == {"r1", "r2"}
        d6 = plan.nodes["d"].interfaces[0].ip6
        assert hosts["d"]["ip6"] == f"{d6}/64"
        assert hosts["s"]["gateway6"] == plan.nodes["r1"].interfaces[0].ip6
        assert ("ip" in hosts["s"]) == ("gateway" in hosts["s"]) == (mode == "dual")
        r1 = routers["r1"]
        assert all(("ip" in i) == (mode == "dual") and "ip6" in i for i in r1["interfaces"])
        v6 = [r for r in r1["routes"] if ":" in r["via"]]
        v4 = [r for r in r1["routes"] if ":" not in r["via"]]
        assert v6 and all(r["dst"].endswith("/64") or r["dst"] == "::/0" for r in v6)
        assert bool(v4) == (mode == "dual")
        (src,) = [g for g in a["agents"] if g["kind"] == "cbr"]
        d4 = plan.nodes["d"].interfaces[0].ip
        assert src["dst"] == (f"[{d6}]:5000" if mode == "only" else f"{d4}:5000")


def _random_dual(seed: int):
    rng = random.Random(seed)
    b = ExperimentBuilder(f"r{seed}")
    b.ipv6(True)
    names = [f"n{i}" for i in range(14)]
    for n in names:
        b.node(n)
    for i in range(1, len(names)):            # a tree, then some extra links and two LANs
        b.link(names[rng.randrange(i)], names[i], cost=rng.randint(1, 5))
    for _ in range(6):
        x, y = rng.sample(names, 2)
        b.link(x, y, cost=rng.randint(1, 5))
    for _ in range(2):
        b.lan(rng.sample(names, 4), cost=rng.randint(1, 3))
    return b.build()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_static_routes_are_the_same_paths_in_both_families(seed):
    plan = make_plan(_random_dual(seed), "abcd")
    # every interface address -> (node, network), in each family
    owner = {a: (i.node, i.network) for n in plan.nodes.values() for i in n.interfaces
             for a in (i.ip, i.ip6)}

    def hop(n, subnet):
        """Where ``n`` sends a packet for ``subnet`` (its longest matching route), as the
        next hop's (node, network) and the device; None: attached or unrouted."""
        best = None
        for r in n.routes:
            if r.v6 != (subnet.version == 6):
                continue
            dst = ipaddress.ip_network("::/0" if r.v6 else "0.0.0.0/0") \
                if r.dst == "default" else ipaddress.ip_network(r.dst)
            if subnet.subnet_of(dst) and (best is None or dst.prefixlen > best[0].prefixlen):
                best = (dst, r)
        return (owner[best[1].via], best[1].dev) if best else None
    checked = 0
    for n in plan.nodes.values():
        mine = {i.network for i in n.interfaces}
        for net in plan.subnets:
            if net in mine:
                continue
            four = hop(n, plan.subnets[net])
            assert four is not None and four == hop(n, plan.subnets6[net]), (n.name, net)
            checked += 1
    assert checked > 100


def test_manual_routes_take_ipv6_prefixes_and_names_give_both_families():
    b = ExperimentBuilder("man", routing="manual")
    b.ipv6(True)
    for n in "abc":
        b.node(n)
    b.link("a", "b", ip6_b="fd00:1::2")
    b.link("b", "c")
    b.route("a", "fd00:77::/48", "fd00:1::2")
    b.route("a", "c", "b")
    plan = make_plan(b.build(), "abcd")
    routes = {(r.dst, r.via, r.dev) for r in plan.nodes["a"].routes}
    c0 = plan.nodes["c"].interfaces[0]
    b0 = plan.nodes["b"].interfaces[0]
    assert ("fd00:77::/48", "fd00:1::2", "eth0") in routes
    assert (f"{c0.ip}/32", b0.ip, "eth0") in routes
    assert (f"{c0.ip6}/128", "fd00:1::2", "eth0") in routes
    b.route("a", "fd00:78::/48", "10.1.0.2")
    with pytest.raises(SpecError, match="not of the destination's address family"):
        make_plan(b.build(), "abcd")


def test_frr_runs_ospf6d_and_bgp_carries_ipv6_unicast(tmp_path):
    b = ExperimentBuilder("f", routing="ospf")
    b.ipv6("only")
    for n, asn in (("a", 65001), ("b", 65002)):
        b.node(n)
        b.bgp_as(n, asn)
    b.link("a", "b", cost=7)
    b.lan(["a", "b"])
    b.bgp_session("a", "b")
    exp = b.build()
    plan = make_plan(exp, "abcd")
    a = plan.nodes["a"]
    conf = frr.configs(exp, plan, a, str(tmp_path))
    assert "ospfd.conf" not in conf                      # no IPv4 at all
    o6 = conf["ospf6d.conf"]
    assert "interface eth0\n ipv6 ospf6 area 0.0.0.0\n ipv6 ospf6 network point-to-point\n" \
           " ipv6 ospf6 cost 7" in o6
    assert "interface eth1\n ipv6 ospf6 area 0.0.0.0\n ipv6 ospf6 cost 1" in o6
    assert "interface lo\n ipv6 ospf6 area 0.0.0.0" in o6 and a.loopback6
    assert f"ospf6 router-id {a.loopback}" in o6
    bgp = conf["bgpd.conf"]
    peer = plan.nodes["b"].interfaces[0].ip6
    assert f"neighbor {peer} remote-as 65002" in bgp
    assert f" address-family ipv6 unicast\n  redistribute connected\n  neighbor {peer} " \
           f"activate" in bgp
    assert "ipv4 unicast" not in bgp
    assert frr._daemons(exp, "a") == ["zebra", "ospf6d", "bgpd"]


@pytest.mark.parametrize("mode, routing", [("dual", "static"), ("only", "ospf")])
def test_cluster_parts_keep_the_whole_plans_ipv6_addresses_and_routes(mode, routing):
    from wanlab.cluster.experiment import split
    b = ExperimentBuilder("cut6", routing=routing)
    b.ipv6(True if mode == "dual" else "only")
    for n in "abcd":
        b.node(n)
    b.link("a", "b", name="ab")
    b.link("b", "c", name="bc")              # cut: b and c on two machines
    b.lan(["c", "d"], name="cd")
    exp = b.build()
    whole = make_plan(exp, "0000")
    where = {"a": "m0", "b": "m0", "c": "m1", "d": "m1", "lan:cd": "m1"}
    one_way = {(x, y): 0.0001 for x in ("m0", "m1") for y in ("m0", "m1")}
    parts = split(exp, whole, where, one_way, {"bc": 7}, {"m0": "10.0.0.1", "m1": "10.0.0.2"})
    for m, (part, _) in parts.items():
        plan = make_plan(part, "0001")
        for name, np_ in plan.nodes.items():
            assert [i.addresses() for i in np_.interfaces] == \
                [i.addresses() for i in whole.nodes[name].interfaces if
                 i.network in {x.network for x in np_.interfaces}], (m, name)
            if np_.remote:
                continue
            assert np_.loopback6 == whole.nodes[name].loopback6
            if routing == "static":       # the whole plan's routes, both families
                assert sorted(np_.routes, key=str) == sorted(whole.nodes[name].routes, key=str)
                assert any(r.v6 for r in np_.routes)
