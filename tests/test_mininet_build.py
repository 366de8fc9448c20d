"""Mininet graphs as wanlab experiments (pure: wanlab.mininet.build, the mininet package's Topo
and its refusal messages; no namespaces)."""

import os
import sys

import pytest

from wanlab.errors import SpecError
from wanlab.mininet import COMPAT
from wanlab.mininet.build import MnIntf, MnLink, Shaping, build, shaping


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


def test_a_tree_of_switches_is_one_lan_and_shaped_trunks_become_pair_channels():
    tc = shaping({"bw": 100, "delay": "30ms", "loss": 10})
    links = [link("h1", "h1-eth0", "s1", "s1-eth1"), link("h2", "h2-eth0", "s2", "s2-eth1"),
             link("h3", "h3-eth0", "s3", "s3-eth1"),
             link("s1", "s1-eth2", "s2", "s2-eth2", tc, tc),
             link("s2", "s2-eth3", "s3", "s3-eth2", shaping({"bw": 50, "delay": "10ms"}),
                  shaping({"bw": 50, "delay": "10ms"}))]
    m = build("t", hosts("h1", "h2", "h3"), ["s1", "s2", "s3"], links)
    (lan,) = m.experiment.lans
    assert m.lan_of_switch == {"s1": "s1", "s2": "s1", "s3": "s1"}
    pairs = {(p.src, p.dst): p.params for p in lan.pairs}
    assert len(pairs) == 6
    p13 = pairs[("h1", "h3")]
    assert p13.bandwidth_bps == 50_000_000 and p13.delay_s == pytest.approx(0.04)
    assert p13.loss == pytest.approx(0.1)
    assert pairs[("h2", "h3")].loss == 0.0


def test_unshaped_trunks_need_no_pair_channels():
    links = [link("h1", "h1-eth0", "s1", "s1-eth1"), link("h2", "h2-eth0", "s2", "s2-eth1"),
             link("s1", "s1-eth2", "s2", "s2-eth2")]
    (lan,) = build("t", hosts("h1", "h2"), ["s1", "s2"], links).experiment.lans
    assert lan.pairs == ()


def test_a_loop_of_switches_is_refused_naming_the_link_that_closes_it():
    links = [link("h1", "h1-eth0", "s1", "s1-eth1"), link("s1", "s1-eth2", "s2", "s2-eth1"),
             link("s2", "s2-eth2", "s3", "s3-eth1"), link("s3", "s3-eth2", "s1", "s1-eth3")]
    with pytest.raises(SpecError, match=r"s3-eth2<->s1-eth3 closes a loop"):
        build("t", hosts("h1"), ["s1", "s2", "s3"], links)


def test_two_links_of_a_host_into_one_switched_network_are_refused():
    links = [link("s1", "s1-eth1", "h1", "h1-eth0"), link("s1", "s1-eth2", "h1", "h1-eth1")]
    with pytest.raises(SpecError, match="h1 already has a link into the switched network"):
        build("t", hosts("h1"), ["s1"], links)


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
    with pytest.raises(Unsupported, match=r"spanning tree is not supported yet"):
        mn.main(["--switch", "lxbr,stp=1"])
