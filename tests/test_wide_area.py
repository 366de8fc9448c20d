"""Wide-area nodes (Netbed's wanassign, §4.3) without a cluster: the front ends' one
meaning (``tb-set-node-wide-area``, YAML ``wide_area``, the builder's ``wide_area``), the
request a experiment makes of the wide area, its mapping onto a measured matrix, and the
checks of ``cluster up``'s wide-area options. Pure logic: no root, no Ray."""

import numpy as np
import pytest

from wanlab.errors import SpecError, WanlabError
from wanlab.frontends import load
from wanlab.frontends.builder import ExperimentBuilder
from wanlab.plan.wanassign import map_request, wide_area_request

# a measured matrix like the local test cluster's with access delays 2, 18, 40 and 7 ms:
# one-way delay i-j = d_i + d_j
ACCESS = [0.002, 0.018, 0.040, 0.007]
MEASURED = np.array([[0 if i == j else a + b for j, b in enumerate(ACCESS)]
                     for i, a in enumerate(ACCESS)])
SITES = ["m0", "m1", "m2", "m3"]

NS = """set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
set c [$ns node]
set h [$ns node]
tb-set-node-wide-area $a
tb-set-node-wide-area $b
tb-set-node-wide-area $c
$ns duplex-link $a $b 10Mb 20ms DropTail
$ns duplex-link $a $c 10Mb 47ms DropTail
$ns duplex-link $b $c 10Mb 58ms DropTail
$ns duplex-link $a $h 100Mb 1ms DropTail
$ns run
"""

YAML = """name: wide
nodes:
  - {name: a, wide_area: true}
  - {name: b, wide_area: true}
  - {name: c, wide_area: true}
  - h
links:
  - {nodes: [a, b], delay: 20ms, bandwidth: 10Mb}
  - {nodes: [a, c], delay: 47ms, bandwidth: 10Mb}
  - {nodes: [b, c], delay: 58ms, bandwidth: 10Mb}
  - {nodes: [a, h], delay: 1ms, bandwidth: 100Mb}
"""


def _builder():
    b = ExperimentBuilder("wide")
    for n in ("a", "b", "c"):
        b.node(n, wide_area=True)
    b.node("h")
    b.link("a", "b", delay="20ms", bandwidth="10Mb")
    b.link("a", "c", delay="47ms", bandwidth="10Mb")
    b.link("b", "c", delay="58ms", bandwidth="10Mb")
    b.link("a", "h", delay="1ms", bandwidth="100Mb")
    return b.build()


@pytest.fixture(params=["ns", "yaml", "python"])
def wide(request, tmp_path):
    if request.param == "python":
        return _builder()
    f = tmp_path / ("wide.tcl" if request.param == "ns" else "wide.yaml")
    f.write_text(NS if request.param == "ns" else YAML)
    return load(str(f))


def test_every_front_end_marks_the_same_nodes_and_asks_the_same(wide):
    assert [n.name for n in wide.nodes if n.wide_area] == ["a", "b", "c"]
    req = wide_area_request(wide)
    assert req.nodes == ["a", "b", "c"]
    want = np.array([[np.nan, .020, .047], [.020, np.nan, .058], [.047, .058, np.nan]])
    assert np.allclose(req.delay_s, want, equal_nan=True)
    assert np.nanmax(req.bandwidth_bps) == np.nanmin(req.bandwidth_bps) == 10e6


def test_the_mapping_on_a_measured_matrix_is_the_known_best(wide):
    """Paths: m0-m1 20, m0-m2 42, m0-m3 9, m1-m2 58, m1-m3 25, m2-m3 47 ms. a=m0, b=m1,
    c=m2 meets a-b and b-c exactly and misses a-c by 5 of 47 ms; every other assignment
    does worse (a-c exact on m2-m3 leaves a-b at 25 ms at best), as an exhaustive search
    over the 24 assignments confirms."""
    from itertools import permutations
    req = wide_area_request(wide)
    m = map_request(req, SITES, MEASURED, np.full((4, 4), 1e9))   # bandwidth to spare
    assert m.site_of == {"a": "m0", "b": "m1", "c": "m2"}
    err = {(p.a, p.b): p for p in m.pairs if p.metric == "delay"}
    assert err[("a", "b")].error == pytest.approx(0.0, abs=1e-9)
    assert err[("b", "c")].error == pytest.approx(0.0, abs=1e-9)
    assert err[("a", "c")].got == pytest.approx(0.042)
    assert err[("a", "c")].error == pytest.approx(5 / 47)
    assert len(err) == 6                # each requested ordered pair
    assert all(p.error == 0 for p in m.pairs if p.metric == "bandwidth")

    def cost(s):
        return sum(abs(MEASURED[s[i], s[j]] - req.delay_s[i, j]) / req.delay_s[i, j]
                   for i in range(3) for j in range(3) if i != j)
    best = min(permutations(range(4), 3), key=cost)
    assert [SITES[k] for k in best] == ["m0", "m1", "m2"]
    assert m.total_error == pytest.approx(cost(best))


def test_bandwidth_wishes_need_a_measured_bandwidth_and_count_only_shortfalls(wide):
    req = wide_area_request(wide)
    with pytest.raises(SpecError, match="bandwidth between machines was not measured"):
        map_request(req, SITES, MEASURED, None)
    bw = np.full((4, 4), 100e6)
    bw[0, 1] = bw[1, 0] = 5e6                  # m0-m1 gives half what a-b asks
    m = map_request(req, SITES, MEASURED, bw)
    short = {(p.a, p.b): p.error for p in m.pairs if p.metric == "bandwidth"}
    assert len(short) == 6
    if {m.site_of["a"], m.site_of["b"]} == {"m0", "m1"}:
        assert short[("a", "b")] == pytest.approx(0.5)
    assert all(v == 0.0 for k, v in short.items() if k not in (("a", "b"), ("b", "a")))


def test_what_wanassign_cannot_do_is_refused_by_name(tmp_path):
    f = tmp_path / "lan.yaml"
    f.write_text("name: w\nnodes: [{name: a, wide_area: true}, b, c]\n"
                 "lans: [{name: lan0, nodes: [a, b, c]}]\n")
    with pytest.raises(SpecError, match="LAN lan0: member a is wide-area"):
        wide_area_request(load(str(f)))
    f.write_text("name: w\nnodes: [{name: a, wide_area: 3}]\n")
    with pytest.raises(SpecError) as e:
        load(str(f))
    assert "wide_area" in str(e.value)
    t = tmp_path / "bad.tcl"
    t.write_text("set ns [new Simulator]\nsource tb_compat.tcl\nset a [$ns node]\n"
                 "tb-set-node-wide-area $a maybe\n$ns run\n")
    with pytest.raises(SpecError, match="maybe is not a boolean"):
        load(str(t))
    b = ExperimentBuilder("three")
    for n in ("a", "b", "c"):
        b.node(n, wide_area=True)
    b.link("a", "b", delay="20ms")
    b.link("b", "c", delay="20ms")
    with pytest.raises(SpecError, match="3 wide-area nodes requested, 2 sites"):
        map_request(wide_area_request(b.build()), SITES[:2], MEASURED[:2, :2], None)
    b = ExperimentBuilder("plain")
    b.link(b.node("a"), b.node("b"), delay="1ms")
    assert wide_area_request(b.build()) is None


def test_a_sites_own_network_stays_on_its_machine(wide):
    from wanlab.cluster.wide import site_networks
    assert site_networks(wide, {"a": "m2", "b": "m0", "c": "m1"}) == {"h": "m2"}


def test_cluster_up_checks_its_wide_area_options():
    from wanlab.cluster import join, wan_underlay
    from wanlab.cluster.info import MachineInfo
    rows = wan_underlay.request(3, "2ms,18ms,40ms", None)["delay"]
    assert rows[0][1] == rows[1][0] == "20000us" and rows[1][2] == "58000us"
    assert rows[2][2] == "0"
    with pytest.raises(WanlabError, match="2 delays for 3 machines"):
        wan_underlay.request(3, "2ms,18ms", None)
    with pytest.raises(WanlabError, match="--wan-delay"):
        wan_underlay.request(2, "2ms,fast", None)
    assert wan_underlay.request(3, None, None) is None
    with pytest.raises(WanlabError, match="not both"):
        wan_underlay.request(2, "1ms,2ms", "m.csv")
    with pytest.raises(WanlabError, match="no such file"):
        wan_underlay.request(2, None, "/nonexistent/m.csv")
    for bad in ("10.0.0.1", "10.0.0.1:0", "host:99999", "a b:1", "$(reboot):1"):
        with pytest.raises(WanlabError, match="not HOST:PORT"):
            join.check_address(bad)
    assert join.check_address("10.0.0.1:6379") == "10.0.0.1:6379"
    ms = [MachineInfo("m0", "10.0.0.1", None, 2), MachineInfo("m1", "10.0.0.2", None, 2)]
    assert join.wide_area_names(ms, "all") == {"m0", "m1"}
    assert join.wide_area_names(ms, "10.0.0.2") == {"m1"}
    with pytest.raises(WanlabError, match="no machine 'm7'"):
        join.wide_area_names(ms, "m0,m7")


def test_a_wan_matrix_file_is_checked_before_anything_is_made(tmp_path):
    from wanlab.cluster import wan_underlay
    f = tmp_path / "paths.csv"
    f.write_text("delay, m0, m1, m2\nm0, 0, 20ms, 42ms\nm1, 20ms, 0, 58ms\n"
                 "m2, 42ms, 58ms, 0\n")
    assert wan_underlay.request(3, None, str(f)) == {"csv": str(f)}
    with pytest.raises(SpecError) as e:
        wan_underlay.request(2, None, str(f))       # a 3-machine matrix for 2 machines
    assert str(f) in str(e.value)
