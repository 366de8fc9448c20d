"""modify's diff (wanlab/plan/diff.py) on plans alone: no root, no kernel objects."""

import ipaddress

import pytest

from wanlab.frontends.builder import ExperimentBuilder
from wanlab.plan.diff import diff
from wanlab.plan.plan import make_plan

SHORT = "ab12"


def chain(*, delay="10ms", extra_node=False, extra_link=False, lan=("a", "b", "c"),
          lan_delay="4ms", startcmd="echo hi"):
    """a - b - c on links, plus a LAN; options change one thing at a time."""
    e = ExperimentBuilder("exp")
    for n in ("a", "b", "c"):
        e.node(n, startcmd=startcmd if n == "a" else None)
    if extra_node:
        e.node("d", startcmd="echo new")
        e.link("c", "d", bandwidth="100Mb", delay="1ms", name="cd")
    e.link("a", "b", bandwidth="100Mb", delay=delay, name="ab")
    e.link("b", "c", bandwidth="100Mb", delay="10ms", name="bc")
    if extra_link:
        e.link("a", "c", bandwidth="100Mb", delay="1ms", name="ac")
    if lan:
        e.lan(list(lan), bandwidth="100Mb", delay=lan_delay, name="lan0")
    return make_plan(e.build(), SHORT)


def test_nothing_changed_is_an_empty_diff():
    d = diff(chain(), chain())
    assert not any(d.counts().values())
    assert d.routes == {} and d.hosts == [] and d.startcmds == []


def test_link_parameter_change_is_set_in_place_both_directions():
    d = diff(chain(), chain(delay="25ms"))
    assert d.networks_removed == [] and d.networks_added == []
    assert sorted(p.dir for p in d.params) == ["ab", "ba"]
    assert all(p.network == "ab" and p.member is None for p in d.params)
    assert d.params[0].params.delay_s == 0.025 and d.params[0].old.delay_s == 0.01
    assert d.routes == {}


def test_lan_parameter_change_names_each_members_half():
    d = diff(chain(), chain(lan_delay="10ms"))
    assert d.networks_removed == [] and d.networks_added == []
    assert {(p.network, p.member, p.dir) for p in d.params} == {
        ("lan0", f"{n}:{i}", k) for n, i in (("a", "eth1"), ("b", "eth2"), ("c", "eth1"))
        for k in ("to_lan", "from_lan")}
    assert all(p.params.delay_s == 0.005 for p in d.params)     # each half D/2


def test_added_link_is_added_and_routes_follow():
    d = diff(chain(lan=()), chain(lan=(), extra_link=True))
    assert d.networks_added == ["ac"] and d.networks_removed == []
    assert d.nodes_added == [] and d.nodes_removed == [] and d.params == []
    assert set(d.routes) == {"a", "b", "c"}   # b too: it needs a route to the new subnet
    assert d.routes["a"] == chain(lan=()).nodes["a"].routes      # what is replaced


def test_added_link_renumbers_a_later_lan_which_is_replaced():
    # links come before LANs: the LAN's interfaces and subnet move, so it is re-added
    d = diff(chain(), chain(extra_link=True))
    assert d.networks_added == ["ac", "lan0"] and d.networks_removed == ["lan0"]


def test_removed_link_is_removed():
    d = diff(chain(extra_link=True), chain())
    assert "ac" in d.networks_removed and "ac" not in d.networks_added


def test_added_and_removed_node():
    d = diff(chain(), chain(extra_node=True))
    assert d.nodes_added == ["d"] and d.nodes_removed == []
    assert "cd" in d.networks_added
    assert d.routes["d"] == []            # a new node's table starts empty
    assert "d" in d.hosts and d.startcmds == ["d"]
    back = diff(chain(extra_node=True), chain())
    assert back.nodes_removed == ["d"] and "cd" in back.networks_removed
    assert "d" not in back.routes and back.startcmds == []


def test_lan_membership_change_removes_and_adds_the_lan():
    d = diff(chain(), chain(lan=("a", "b")))
    assert "lan0" in d.networks_removed and "lan0" in d.networks_added
    assert not [p for p in d.params if p.network == "lan0"]


def test_start_command_change_runs_the_new_command_only_there():
    d = diff(chain(), chain(startcmd="echo changed"))
    assert d.startcmds == ["a"]
    assert not d.networks_added and not d.networks_removed and not d.params


def test_diff_is_pure():
    old, new = chain(), chain(delay="25ms", extra_node=True)
    before = (repr(old), repr(new))
    assert diff(old, new) == diff(old, new)
    assert (repr(old), repr(new)) == before


@pytest.mark.parametrize("mode", ["only", "dual"])
def test_modify_of_an_ipv6_experiment_numbers_from_the_same_plan(mode):
    # a - b - c, then d added behind c: its link takes the next /64 of the experiment's
    # prefix, nothing else moves, and a and b get IPv6 routes to it through the old next hops
    def plan(grown):
        e = ExperimentBuilder("exp")
        e.ipv6(mode)
        for n in "abcd" if grown else "abc":
            e.node(n)
        e.link("a", "b", name="ab")
        e.link("b", "c", name="bc")
        if grown:
            e.link("c", "d", name="cd")
        return make_plan(e.build(), SHORT)
    old, new = plan(False), plan(True)
    d = diff(old, new)
    assert d.networks_added == ["cd"] and d.networks_removed == [] and d.nodes_added == ["d"]
    # (a's default route via b covers d; c has a new interface, b a new route)
    assert set(d.routes) == {"b", "c", "d"}
    for n in "abc":
        assert new.nodes[n].interfaces[:len(old.nodes[n].interfaces)] == \
            old.nodes[n].interfaces
    net = {k: ipaddress.ip_network(v) for k, v in new.subnets6.items()}
    assert net["cd"].supernet(new_prefix=48) == net["ab"].supernet(new_prefix=48)
    assert int(net["cd"].network_address) - int(net["bc"].network_address) == \
        int(net["bc"].network_address) - int(net["ab"].network_address)
    (d_if,) = new.nodes["d"].interfaces
    assert ipaddress.ip_address(d_if.ip6) in net["cd"] and bool(d_if.ip) == (mode == "dual")

    def via(node, dst):
        """The IPv6 next hop ``node`` uses for address ``dst``."""
        best = None
        for r in new.nodes[node].routes:
            if not r.v6:
                continue
            p = ipaddress.ip_network("::/0" if r.dst == "default" else r.dst)
            if ipaddress.ip_address(dst) in p and (best is None or p.prefixlen > best[0]):
                best = (p.prefixlen, r.via)
        return best and best[1]
    b_ab = next(i.ip6 for i in new.nodes["b"].interfaces if i.network == "ab")
    c_bc = next(i.ip6 for i in new.nodes["c"].interfaces if i.network == "bc")
    c_cd = next(i.ip6 for i in new.nodes["c"].interfaces if i.network == "cd")
    assert (via("a", d_if.ip6), via("b", d_if.ip6)) == (b_ab, c_bc)
    assert via("d", old.nodes["a"].interfaces[0].ip6) == c_cd
