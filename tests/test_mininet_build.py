"""Mininet graphs as wanlab experiments (pure: wanlab.mininet.build, the mininet package's Topo
and its refusal messages; no namespaces)."""

import os
import sys
from dataclasses import replace

import pytest

from wanlab.engine import encode
from wanlab.errors import SpecError
from wanlab.mininet import COMPAT
from wanlab.mininet.build import MnIntf, MnLink, Shaping, build, jitter_requests, shaping
from wanlab.model import ir
from wanlab.plan.plan import make_plan


def link(a, ai, b, bi, sa=None, sb=None):
    return MnLink(MnIntf(a, ai, sa or Shaping()), MnIntf(b, bi, sb or Shaping()))


def hosts(*names):
    return {n: {} for n in names}


def test_tc_parameters_are_mininet_units_made_exact():
    s = shaping({"bw": 10, "delay": "5ms", "jitter": "1ms", "loss": 10,
                 "max_queue_size": 100, "use_htb": True})
    assert (s.bandwidth_bps, s.delay_s, s.jitter_s, s.loss, s.limit) == \
        (10_000_000, 0.005, 0.001, 0.1, 100)
    with pytest.raises(SpecError, match="percentage"):
        shaping({"loss": 150})
    with pytest.raises(SpecError, match="unknown link parameter 'bandwith'"):
        shaping({"bandwith": 10})


def test_a_switch_is_one_lan_whose_members_carry_each_link_s_two_interfaces():
    up, down = shaping({"bw": 10, "delay": "5ms"}), shaping({"bw": 20, "loss": 1})
    m = build("t", hosts("h1", "h2"), ["s1"],
              [link("h1", "h1-eth0", "s1", "s1-eth1", up, down),
               link("h2", "h2-eth0", "s1", "s1-eth2")])
    (lan,) = m.experiment.lans
    assert lan.name == "s1" and not m.experiment.links
    h1 = next(x for x in lan.members if x.node == "h1")
    assert (h1.to_lan.bandwidth_bps, h1.to_lan.delay_s) == (10_000_000, 0.005)
    assert (h1.from_lan.bandwidth_bps, h1.from_lan.loss) == (20_000_000, 0.01)
    w = m.where[("h1", "h1-eth0")]
    assert (w.kind, w.target, w.member, w.out_dir) == ("lan", "s1", "h1:eth0", "to_lan")
    assert m.where[("s1", "s1-eth1")].out_dir == "from_lan"
    assert m.experiment.rtproto == "manual"


def test_host_to_host_link_shapes_each_direction_from_its_sender():
    m = build("t", hosts("h1", "h2"), [],
              [link("h1", "h1-eth0", "h2", "h2-eth0", shaping({"delay": "3ms"}),
                    shaping({"delay": "7ms"}))])
    (lk,) = m.experiment.links
    assert (lk.a, lk.ab.delay_s, lk.ba.delay_s) == ("h1", 0.003, 0.007)
    assert m.where[("h2", "h2-eth0")].out_dir == "ba"


def test_a_tree_of_switches_is_one_lan_whose_trunks_are_engine_patches():
    tc = shaping({"bw": 100, "delay": "30ms", "loss": 10})
    links = [link("h1", "h1-eth0", "s1", "s1-eth1"), link("h2", "h2-eth0", "s2", "s2-eth1"),
             link("h3", "h3-eth0", "s3", "s3-eth1"),
             link("s1", "s1-eth2", "s2", "s2-eth2", tc, shaping({"delay": "1ms"})),
             link("s2", "s2-eth3", "s3", "s3-eth2", shaping({"bw": 50, "max_queue_size": 20}))]
    m = build("t", hosts("h1", "h2", "h3"), ["s1", "s2", "s3"], links)
    (lan,) = m.experiment.lans
    assert m.lan_of_switch == {"s1": "s1", "s2": "s1", "s3": "s1"}
    assert lan.switches == ("s1", "s2", "s3") and lan.pairs == ()
    assert {x.node: x.switch for x in lan.members} == {"h1": "s1", "h2": "s2", "h3": "s3"}
    t12, t23 = lan.trunks
    assert (t12.a, t12.b, t12.ab.bandwidth_bps, t12.ab.delay_s, t12.ab.loss) == \
        ("s1", "s2", 100_000_000, 0.03, pytest.approx(0.1))
    assert (t12.ba.bandwidth_bps, t12.ba.delay_s) == (0, 0.001)
    assert (t23.ab.queue.limit, t23.ba.bandwidth_bps) == (20, 0)
    # the engine: a LAN per switch, a patch per trunk whose ports are members of both LANs
    # with the sending switch's shaping on their from_lan (one queue per direction)
    req = encode.apply(make_plan(m.experiment, "x1")).to_json()
    assert [p["patch"] for p in req["patches"]] == ["s1/s1-s2", "s1/s2-s3"]
    lans = {x["lan"]: x["members"] for x in req["lans"]}
    assert set(lans) == {"s1", "s1/s2", "s1/s3"}
    assert [x["port"] for x in lans["s1/s2"]] == ["h2:eth0", "s1/s1-s2:s2", "s1/s2-s3:s2"]
    into12 = next(x for x in lans["s1"] if x["port"] == "s1/s1-s2:s1")
    assert (into12["from_lan"]["bandwidth_bps"], into12["from_lan"]["delay_us"]) == \
        (100_000_000, 30_000)
    # run-time changes on a trunk's interface go to its patch port, the sender's direction
    w = m.where[("s2", "s2-eth2")]
    assert (w.kind, w.target, w.member, w.out_dir) == ("trunk", "s1/s2", "s1/s1-s2:s2",
                                                       "from_lan")
    assert m.where[("h3", "h3-eth0")].target == "s1/s3"
    assert ir.Experiment.from_json(m.experiment.to_json()) == m.experiment


def test_a_loop_of_switches_is_refused_naming_the_link_that_closes_it():
    links = [link("h1", "h1-eth0", "s1", "s1-eth1"), link("s1", "s1-eth2", "s2", "s2-eth1"),
             link("s2", "s2-eth2", "s3", "s3-eth1"), link("s3", "s3-eth2", "s1", "s1-eth3")]
    with pytest.raises(SpecError, match=r"s3-eth2<->s1-eth3 closes a loop"):
        build("t", hosts("h1"), ["s1", "s2", "s3"], links)


def test_two_links_of_a_host_into_one_switch_are_two_ports_on_its_lan():
    # Mininet's multilink: each of h1's links is a member (a port) of its own
    links = [link("s1", "s1-eth1", "h1", "h1-eth0"), link("s1", "s1-eth2", "h2", "h2-eth0"),
             link("s1", "s1-eth3", "h1", "h1-eth1", sb=shaping({"delay": "2ms"}))]
    m = build("t", hosts("h1", "h2"), ["s1"], links)
    (lan,) = m.experiment.lans
    assert [(x.node, x.to_lan.delay_s) for x in lan.members] == \
        [("h1", 0.0), ("h2", 0.0), ("h1", 0.002)]
    assert [m.where[("h1", f"h1-eth{k}")].member for k in (0, 1)] == ["h1:eth0", "h1:eth1"]
    req = encode.apply(make_plan(m.experiment, "x1")).to_json()
    (one,) = req["lans"]
    assert [x["port"] for x in one["members"]] == ["h1:eth0", "h2:eth0", "h1:eth1"]
    assert one["members"][2]["to_lan"]["delay_us"] == 2000


def test_names_wanlab_cannot_take_are_refused():
    with pytest.raises(SpecError, match="host name 'h_1'"):
        build("t", hosts("h_1"), [], [])


@pytest.fixture
def mininet_pkg():
    """wanlab's mininet package importable as ``mininet`` (as the entry points do)."""
    sys.path.insert(0, COMPAT)
    yield
    sys.path.remove(COMPAT)
    for m in [m for m in sys.modules if m == "mininet" or m.startswith("mininet.")]:
        del sys.modules[m]


def test_topologies_give_mininet_s_hosts_switches_and_ports(mininet_pkg):
    import mininet
    from mininet.topo import LinearTopo, SingleSwitchTopo
    from mininet.topolib import TreeTopo
    assert os.path.dirname(mininet.__file__).startswith(COMPAT)
    t = TreeTopo(depth=2, fanout=3)
    assert len(t.hosts()) == 9 and t.switches() == ["s1", "s2", "s3", "s4"]
    assert t.hosts()[:3] == ["h1", "h2", "h3"]
    lin = LinearTopo(k=3, n=2)
    assert len(lin.links()) == 8 and "h2s3" in lin.hosts()
    s = SingleSwitchTopo(k=3)
    assert s.port("h1", "s1") == (0, 1) and s.port("h3", "s1") == (0, 3)


def test_a_refusal_names_the_call_and_the_script_line(mininet_pkg, tmp_path):
    from wanlab.mininet.refuse import Unsupported
    script = tmp_path / "uses_nat.py"
    script.write_text("from mininet.nodelib import NAT\n\nNAT('nat0', inNamespace=False)\n")
    code = compile(script.read_text(), str(script), "exec")
    with pytest.raises(Unsupported) as e:
        exec(code, {})
    assert str(e.value).startswith(f"{script}:3: NAT('nat0', inNamespace=False): a NAT to "
                                   "the host's network")


def test_the_cli_hands_mininet_and_mn_to_their_own_process(monkeypatch):
    from wanlab.cli import _mininet_command
    monkeypatch.delenv("WANLAB_HOME", raising=False)
    assert _mininet_command(["mn", "--topo", "linear,3"]) == ["mn", "--topo", "linear,3"]
    assert _mininet_command(["--home", "/x", "mininet", "-m", "m"]) == ["mininet", "-m", "m"]
    assert os.environ["WANLAB_HOME"] == "/x"
    assert _mininet_command(["list"]) is None
    assert _mininet_command(["exec", "mn", "h1"]) is None


def test_mn_refuses_bad_options_in_one_line(mininet_pkg):
    from wanlab.mininet import mn
    from wanlab.mininet.refuse import Unsupported
    with pytest.raises(Unsupported, match=r"mn --topo foo: Invalid topo name foo"):
        mn.main(["--topo", "foo", "--test", "build"])


def test_the_ir_refuses_a_loop_of_trunks_and_a_member_on_no_switch():
    links = [link("h1", "h1-eth0", "s1", "s1-eth1"), link("h2", "h2-eth0", "s2", "s2-eth1"),
             link("s1", "s1-eth2", "s2", "s2-eth2")]
    exp = build("t", hosts("h1", "h2"), ["s1", "s2"], links).experiment
    (lan,) = exp.lans
    loop = replace(lan, trunks=lan.trunks + (ir.Trunk("s2", "s1"),))
    with pytest.raises(SpecError, match="trunk s2-s1 closes a loop of switches"):
        ir.validate(replace(exp, lans=(loop,)))
    lost = replace(lan, members=(replace(lan.members[0], switch="s9"), lan.members[1]))
    with pytest.raises(SpecError, match="member 'h1' is on no switch of the LAN"):
        ir.validate(replace(exp, lans=(lost,)))


def test_events_on_a_lan_of_switches_go_to_each_member_s_switch():
    links = [link("h1", "h1-eth0", "s1", "s1-eth1"), link("h2", "h2-eth0", "s2", "s2-eth1"),
             link("s1", "s1-eth2", "s2", "s2-eth2")]
    ports = make_plan(build("t", hosts("h1", "h2"), ["s1", "s2"], links).experiment,
                      "x1").port_map()
    assert type(ports).from_json(ports.to_json()) == ports
    one = encode.event_requests(ir.Event(0, "s1", "bandwidth", value=10**6, member="h2"),
                                "lan", ports, "")
    assert [(r.target, r.member) for r in one] == [("s1/s2", "h2:eth0")]
    # a LAN-wide change reaches every host's port on its own switch (not the trunk)
    every = encode.event_requests(ir.Event(0, "s1", "down"), "lan", ports, "")
    assert [(r.target, r.member) for r in every] == [("s1", "h1:eth0"), ("s1/s2", "h2:eth0")]


def test_a_loop_of_switches_with_stp_builds_802_1d_s_tree_and_blocks_the_rest():
    # a square s1-s2-s3-s4-s1 plus a second s1-s2 link; bridge ids: s2 lowest
    links = [link("h1", "h1-eth0", "s1", "s1-eth1"), link("h3", "h3-eth0", "s3", "s3-eth1"),
             link("s1", "s1-eth2", "s2", "s2-eth1"), link("s2", "s2-eth2", "s3", "s3-eth2"),
             link("s3", "s3-eth3", "s4", "s4-eth1"), link("s4", "s4-eth2", "s1", "s1-eth3"),
             link("s1", "s1-eth4", "s2", "s2-eth3", shaping({"delay": "1ms"}))]
    sw = ["s1", "s2", "s3", "s4"]
    with pytest.raises(SpecError, match=r"s4-eth2<->s1-eth3 closes a loop of switches, and "
                                        r"s1 runs no spanning tree: give the switches stp"):
        build("t", hosts("h1", "h3"), sw, links, {"s2": 2, "s3": 3, "s4": 4})
    m = build("t", hosts("h1", "h3"), sw, links, {"s1": 5, "s2": 2, "s3": 3, "s4": 4})
    (lan,) = m.experiment.lans
    # root s2: s1's root port s1-eth2 (the lower port number of the two links to s2), s3's
    # s3-eth2; s4 is two hops away both ways: via s3 (bridge id 3 < 5)
    assert [(t.ifnames) for t in lan.trunks] == [("s1-eth2", "s2-eth1"),
                                                 ("s2-eth2", "s3-eth2"),
                                                 ("s3-eth3", "s4-eth1")]
    # blocked: s4-s1 at s4 (farther from the root), the second s1-s2 link at s1
    assert sorted((t.ifnames[1], t.ifnames[0]) for t in lan.blocked) == [
        ("s1-eth4", "s2-eth3"), ("s4-eth2", "s1-eth3")]
    # every link is built; the blocked ones drop everything until they are held down
    plan = make_plan(m.experiment, "x1")
    req = encode.apply(plan).to_json()
    assert [p["patch"] for p in req["patches"]] == [
        "s1/s1-s2", "s1/s2-s3", "s1/s3-s4", "s1/s1-s4/0", "s1/s2-s1/1"]
    held = {(lan["lan"], x["port"]): x["from_lan"] for lan in req["lans"]
            for x in lan["members"] if "/0:" in x["port"] or "/1:" in x["port"]}
    assert len(held) == 4 and all(v["loss"]["p"] == 1.0 for v in held.values())
    hold = [r.to_json() for r in encode.hold_blocked(plan)]
    assert [(r["cmd"], r["target"], r["member"]) for r in hold[:2]] == [
        ("down", "s1", "s1/s1-s4/0:s1"), ("set", "s1", "s1/s1-s4/0:s1")]
    # s1's end of the second s1-s2 link: down, then its own 1 ms and no loss
    assert [(r["cmd"], r["member"]) for r in hold[6:]] == [("down", "s1/s2-s1/1:s1"),
                                                          ("set", "s1/s2-s1/1:s1")]
    assert hold[7]["params"]["delay_us"] == 1000
    assert hold[7]["params"]["loss"] == {"kind": "none"}
    assert {(r["target"], r["member"]) for r in hold} == set(held)
    assert m.where[("s1", "s1-eth4")].member == "s1/s2-s1/1:s1"
    assert m.where[("s1", "s1-eth4")].spanning and m.where[("s1", "s1-eth2")].spanning
    assert [lk.a.name for lk in m.spanning["s1"][1]] == [
        "s1-eth2", "s2-eth2", "s3-eth3", "s4-eth2", "s1-eth4"]
    # jitter (set after the build) goes to the patch port, blocked or not
    j = shaping({"jitter": "1ms"})
    reqs = jitter_requests(m, {("s1", "s1-eth2"): j, ("s1", "s1-eth4"): j})
    assert [r["member"] for r in reqs] == ["s1/s1-s2:s1", "s1/s2-s1/1:s1"]


def test_the_spanning_tree_is_computed_again_over_the_links_that_are_up():
    from wanlab.mininet.spanning import Tree
    # the square s1-s2-s3-s4-s1 plus a second s1-s2 link, root s2 (as above)
    lks = [link("s1", "s1-eth2", "s2", "s2-eth1"), link("s2", "s2-eth2", "s3", "s3-eth2"),
           link("s3", "s3-eth3", "s4", "s4-eth1"), link("s4", "s4-eth2", "s1", "s1-eth3"),
           link("s1", "s1-eth4", "s2", "s2-eth3")]
    t = Tree("s1", ["s1", "s2", "s3", "s4"], lks, {"s1": 5, "s2": 2, "s3": 3, "s4": 4})
    assert t.forwarding == {0, 1, 2}
    assert [b["port"] for b in t.describe()["blocked"]] == ["s4-eth2", "s1-eth4"]
    # s1's root port goes down: it takes the second link to s2 (the blocked one)
    assert t.change(0, up=False) == ({0}, {4})
    assert t.forwarding == {1, 2, 4}
    assert t.describe() == {"blocked": [{"switch": "s4", "port": "s4-eth2",
                                         "peer": "s1-eth3"}],
                            "down": [{"a": "s1-eth2", "b": "s2-eth1"}]}
    # both s1-s2 links down: s1 hangs from s4, and nothing is blocked
    left, joined = t.change(4, up=False)
    assert (left, joined) == ({4}, {3})
    assert t.describe()["blocked"] == []
    # s2-s3 down too: two networks, s1-s4 with root s4... and s2 alone, its own root
    left, joined = t.change(1, up=False)
    assert (left, joined) == ({1}, set())
    assert t.forwarding == {2, 3}
    # everything back up: the first tree again
    for k in (0, 1, 4):
        t.change(k, up=True)
    assert t.forwarding == {0, 1, 2} and t.describe()["down"] == []


def test_a_cluster_refuses_a_lan_of_switches():
    from wanlab.cluster.experiment import create
    from wanlab.errors import WanlabError
    links = [link("h1", "h1-eth0", "s1", "s1-eth1"), link("h2", "h2-eth0", "s2", "s2-eth1"),
             link("s1", "s1-eth2", "s2", "s2-eth2")]
    exp = build("t", hosts("h1", "h2"), ["s1", "s2"], links).experiment
    with pytest.raises(WanlabError, match="LAN s1 is a tree of switches .* one machine"):
        create(None, exp, None)


def test_a_change_to_a_link_with_no_engine_object_says_why(mininet_pkg):
    from types import SimpleNamespace

    from mininet.link import Intf
    from mininet.net import Mininet
    from mininet.node import OVSSwitch

    from wanlab.mininet.refuse import Unsupported
    net = Mininet(build=False)
    net.mapped = SimpleNamespace(where={})
    intf = Intf("s1-eth3", node=OVSSwitch("s1"))
    with pytest.raises(Unsupported, match=r"s1-eth3: run-time change: it is between "
                       r"learning switches that no host is plugged into"):
        net._where(intf)
    net._fabric = object()        # an OpenFlow network: only a port moved (attach) is unknown
    with pytest.raises(Unsupported, match=r"s1-eth3: run-time change: it was moved to another "
                       r"OpenFlow switch at run time"):
        net._where(intf)


def test_free_standing_root_namespace_nodes_need_an_openflow_network(mininet_pkg, tmp_path):
    # (refused before anything is created: no root needed)
    from mininet.net import Mininet

    from wanlab.mininet.refuse import Unsupported
    script = tmp_path / "scratch.py"
    script.write_text("from mininet.node import Node\nfrom mininet.link import Link\n"
                      "s0, h0 = Node('s0', inNamespace=False), Node('h0')\nLink(h0, s0)\n"
                      "h0.cmd('true')\n")
    try:
        with pytest.raises(Unsupported) as e:
            exec(compile(script.read_text(), str(script), "exec"), {})
        assert str(e.value).startswith(
            f"{script}:5: Node('s0', inNamespace=False) with links: wanlab maps free-standing "
            "root-namespace nodes only as the switches' node of an OpenFlow network")
        assert [lk.intf1.name for lk in Mininet.implicit.links] == ["h0-eth0"]
        assert Mininet.implicit.exp is None
    finally:
        Mininet.implicit = None
