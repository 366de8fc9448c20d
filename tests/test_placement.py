"""Placement over machines (assign, with METIS) and wide-area mapping (wanassign)."""

import numpy as np
import pytest
from conftest import chain, params

from wanlab.errors import SpecError
from wanlab.model.ir import Experiment, Lan, LanMember, Link, Node, validate
from wanlab.plan.placement import Machine, assign, pieces, round_robin
from wanlab.plan.wanassign import wanassign

THREE = [Machine("m0", 4), Machine("m1", 4), Machine("m2", 4)]


def chain_lan(n_chain=300, n_lan=30, bw=100_000_000):
    """A chain and a LAN hanging off its middle (the issue's 300-node chain + LAN)."""
    p = params(bw, 0.001)
    nodes = [Node(f"n{i}") for i in range(n_chain)] + [Node(f"h{i}") for i in range(n_lan)]
    links = [Link(f"l{i}", f"n{i}", f"n{i + 1}", ab=p, ba=p) for i in range(n_chain - 1)]
    members = [LanMember(f"h{i}", to_lan=p, from_lan=p) for i in range(n_lan)]
    members.append(LanMember(f"n{n_chain // 2}", to_lan=p, from_lan=p))
    return validate(Experiment("cl", nodes=tuple(nodes), links=tuple(links),
                               lans=(Lan("lan0", tuple(members), bandwidth_bps=bw),)))


def test_every_node_and_lan_is_placed_within_capacity():
    exp = chain_lan()
    p = assign(exp, THREE)
    assert set(p.machine_of) == {n.name for n in exp.nodes} | {"lan:lan0"}
    assert set(p.machine_of.values()) == {"m0", "m1", "m2"}
    assert all(p.load[m.name] <= m.cores for m in THREE)
    # METIS keeps the chain in runs and the LAN with its members: few cut links
    assert p.cut_bps <= 4 * 100_000_000
    assert p.cut_bps < round_robin(exp, THREE).cut_bps / 20


def test_parts_follow_the_machines_cores():
    exp = chain(300)
    p = assign(exp, [Machine("big", 6), Machine("small", 2)])
    assert len(p.nodes_on("big")) > 2 * len(p.nodes_on("small"))


def test_pinned_nodes_stay_where_they_are_fixed():
    exp = chain(60)
    fixed = {"n0": "m2", "n59": "m0", "n30": "m1"}
    p = assign(exp, THREE, fixed=fixed)
    assert all(p.machine_of[n] == m for n, m in fixed.items())


def test_hardware_types_are_respected_and_impossible_ones_refused():
    nodes = tuple(Node(f"n{i}", hardware="pcfast" if i < 3 else None) for i in range(10))
    links = tuple(Link(f"l{i}", f"n{i}", f"n{i + 1}") for i in range(9))
    exp = validate(Experiment("hw", nodes=nodes, links=links))
    ms = [Machine("a", 4), Machine("b", 4, types=frozenset({"pc", "pcfast"}))]
    p = assign(exp, ms)
    assert {p.machine_of[f"n{i}"] for i in range(3)} == {"b"}
    with pytest.raises(SpecError, match="hardware type 'pcfast'"):
        assign(exp, [Machine("a", 4), Machine("c", 4)])


def test_an_experiment_that_does_not_fit_is_refused_with_the_numbers():
    exp = chain(4000)
    with pytest.raises(SpecError, match=r"needs about .* cores and the cluster has 2"):
        assign(exp, [Machine("a", 1), Machine("b", 1)])
    with pytest.raises(SpecError, match="MiB"):
        assign(chain(10), [Machine("a", 8, memory_bytes=16 << 20)])
    with pytest.raises(SpecError, match="not in the cluster"):
        assign(chain(4), THREE, fixed={"n1": "nowhere"})


def test_lans_and_pieces_of_simulated_nodes_are_placed_whole():
    """A 300-node chain whose middle 60 nodes are simulated (one connected piece) and a
    LAN: each is one vertex for METIS, so each lands on one machine though the piece is
    a fifth of the chain and the machines are three."""
    base = chain_lan()
    sim = {f"n{i}" for i in range(200, 260)}
    exp = validate(Experiment("cl", nodes=tuple(Node(n.name, kind="simulated")
                                                 if n.name in sim else n
                                                 for n in base.nodes),
                              links=base.links, lans=base.lans))
    groups = pieces(exp)
    assert sorted(map(len, groups)) == [31 + 1, 60]     # the LAN (members + switch), piece
    p = assign(exp, THREE, together=groups)
    assert len({p.machine_of[n] for n in sim}) == 1
    assert all(len({p.machine_of[n] for n in g}) == 1 for g in groups)
    assert set(p.machine_of.values()) == {"m0", "m1", "m2"}
    # the piece's weight is its nodes' expected cost: its machine carries it
    home = p.machine_of["n230"]
    assert p.load[home] >= 60 * 0.0005
    # a pin on one member moves the whole piece; pins on two machines are refused
    p = assign(exp, THREE, fixed={"n210": "m2"}, together=groups)
    assert {p.machine_of[n] for n in sim} == {"m2"}
    with pytest.raises(SpecError, match="must share a machine"):
        assign(exp, THREE, fixed={"n210": "m2", "n250": "m0"}, together=groups)


def test_long_delay_links_are_cut_first_for_virtual_time():
    # two 20-node chains joined by one slow-but-long link and one fast-short link
    fast, slow = params(100_000_000, 0.0001), params(100_000_000, 0.05)
    nodes = tuple(Node(f"n{i}") for i in range(40))
    links = [Link(f"l{i}", f"n{i}", f"n{i + 1}", ab=fast, ba=fast) for i in range(39)
             if i != 19]
    links.append(Link("bridge", "n19", "n20", ab=slow, ba=slow))
    exp = validate(Experiment("la", nodes=nodes, links=tuple(links)))
    p = assign(exp, [Machine("a", 4), Machine("b", 4)], lookahead=True)
    assert p.machine_of["n19"] != p.machine_of["n20"]
    assert {p.machine_of[f"n{i}"] for i in range(20)} == {p.machine_of["n0"]}


def test_wanassign_recovers_a_planted_mapping():
    rng = np.random.default_rng(7)
    pts = rng.random((12, 2)) * 100
    measured = np.hypot(*(pts[:, None, :] - pts[None, :, :]).transpose(2, 0, 1)) / 1e3
    sites = [f"s{i}" for i in range(12)]
    chosen = [3, 8, 0, 11, 5, 9, 1]
    want = measured[np.ix_(chosen, chosen)]
    nodes = [f"v{i}" for i in range(len(chosen))]
    m = wanassign(nodes, want, sites, measured, seed=1)
    assert m.total_error < 1e-9, m.worst
    assert [m.site_of[v] for v in nodes] == [sites[c] for c in chosen]
    assert len(m.pairs) == len(nodes) * (len(nodes) - 1)


def test_wanassign_reports_each_pairs_error_and_ignores_dont_care():
    measured = np.array([[0, .010, .030], [.010, 0, .020], [.030, .020, 0]])
    want = np.array([[0, .015, np.nan], [.015, 0, np.nan], [np.nan, np.nan, 0]])
    bw_got = np.full((3, 3), 1e9)
    bw_want = np.array([[0, 2e9, 0], [2e9, 0, 0], [0, 0, 0]], dtype=float)
    m = wanassign(["a", "b", "c"], want, ["x", "y", "z"], measured,
                  want_bw=bw_want, got_bw=bw_got)
    delays = [p for p in m.pairs if p.metric == "delay"]
    assert {(p.a, p.b) for p in delays} == {("a", "b"), ("b", "a")}
    assert all(p.got == pytest.approx(0.010) or p.got == pytest.approx(0.020) for p in delays)
    bws = [p for p in m.pairs if p.metric == "bandwidth"]
    assert bws and all(p.error == pytest.approx(0.5) for p in bws)   # 1 of the 2 Gbit/s
    with pytest.raises(SpecError, match="3 wide-area nodes requested, 2 sites"):
        wanassign(["a", "b", "c"], want, ["x", "y"], measured[:2, :2])


def test_tb_fix_node_pins_a_node_from_the_ns_front_end(tmp_path):
    from wanlab.frontends import load
    spec = tmp_path / "fix.tcl"
    spec.write_text("set ns [new Simulator]\nsource tb_compat.tcl\n"
                    + "".join(f"set n{i} [$ns node]\n" for i in range(6))
                    + "".join(f"$ns duplex-link $n{i} $n{i + 1} 100Mb 1ms DropTail\n"
                              for i in range(5))
                    + "tb-fix-node $n0 m2\ntb-fix-node $n5 m2\n$ns run\n")
    exp = load(str(spec))
    assert {n.name: n.fixed for n in exp.nodes if n.fixed} == {"n0": "m2", "n5": "m2"}
    p = assign(exp, THREE)
    assert p.machine_of["n0"] == p.machine_of["n5"] == "m2"
