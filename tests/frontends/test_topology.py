"""Topology datasets (GML, GraphML, topohub's maps) as experiments: parsing, the Abilene
map against examples/abilene, and one map run on real namespaces."""

import os

import networkx as nx
import pytest
from conftest import needs_root, ping_rtts

from wanlab.errors import SpecError
from wanlab.frontends import load, topology

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TRI_GML = """graph [
  node [ id 0 label "Paris" Latitude 48.85 Longitude 2.35 ]
  node [ id 1 label "Berlin" Latitude 52.52 Longitude 13.40 ]
  node [ id 2 label "Hub" ]
  edge [ source 0 target 1 LinkSpeedRaw 10000000 ]
  edge [ source 1 target 2 ]
  edge [ source 2 target 2 ]
]
"""


def _spec(tmp_path, body: str, gml: str = TRI_GML):
    (tmp_path / "tri.gml").write_text(gml)
    p = tmp_path / "t.yaml"
    p.write_text(body)
    return str(p)


def test_gml_routers_links_delay_capacity_hosts(tmp_path):
    exp = load(_spec(tmp_path, "topology: {gml: tri.gml, hosts: 1, bandwidth: 100Mb, "
                               "delay: 2ms}\n"))
    assert [n.name for n in exp.nodes] == ["paris", "berlin", "hub", "paris-h1",
                                           "berlin-h1", "hub-h1"]
    pb = next(l for l in exp.links if {l.a, l.b} == {"paris", "berlin"})
    km = topology.great_circle_km(48.85, 2.35, 52.52, 13.40)
    assert 870 < km < 885
    assert pb.ab.delay_s == pytest.approx(km / 199_861.6, rel=1e-6)
    assert pb.cost == round(km)
    assert pb.ab.bandwidth_bps == 10_000_000                  # the map's LinkSpeedRaw
    bh = next(l for l in exp.links if {l.a, l.b} == {"berlin", "hub"})
    assert (bh.ab.delay_s, bh.ab.bandwidth_bps) == (0.002, 100_000_000)  # no coordinates
    assert len(exp.links) == 2 + 3                 # the self-loop is left out, with a note
    assert any("without coordinates" in w for w in exp.warnings)
    assert any("to itself" in w for w in exp.warnings)


def test_graphml_and_yaml_additions(tmp_path):
    g = nx.Graph()
    g.add_node("a", label="A", Latitude=0.0, Longitude=0.0)
    g.add_node("b", label="B", Latitude=0.0, Longitude=1.0)
    g.add_edge("a", "b", LinkSpeedRaw=1e9)
    nx.write_graphml(g, str(tmp_path / "m.graphml"))
    p = tmp_path / "t.yaml"
    p.write_text("routing: ospf\ntopology: {graphml: m.graphml}\nnodes: [c]\n"
                 "links: [{nodes: [b, c], delay: 1ms}]\n")
    exp = load(str(p))
    assert exp.rtproto == "ospf" and [n.name for n in exp.nodes] == ["a", "b", "c"]
    assert exp.links[0].ab.delay_s == pytest.approx(111.19 / 199_861.6, rel=1e-3)


@pytest.mark.parametrize("body,error", [
    ("topology: {gml: ../x.gml}\n", "inside the spec's folder"),
    ("topology: {gml: nope.gml}\n", "no such file"),
    ("topology: {zoo: NoSuchMap}\n", "no map 'NoSuchMap'"),
    ("topology: {gml: tri.gml, graphml: tri.gml}\n", "exactly one"),
    ("topology: {gml: tri.gml, hosts: 99}\n", "topology.hosts"),
    ("topology: {gml: tri.gml}\nnodes: [paris]\n", "declared twice"),
])
def test_bad_topologies_are_one_line_errors(tmp_path, body, error):
    with pytest.raises(SpecError) as e:
        load(_spec(tmp_path, body))
    assert error in str(e.value) and "t.yaml" in str(e.value)


def test_bad_gml_names_its_file(tmp_path):
    with pytest.raises(SpecError, match=r"tri.gml.*not a GML graph"):
        load(_spec(tmp_path, "topology: {gml: tri.gml}\n", gml="graph [ node [ id 0 "))


GRAPHML = ('<?xml version="1.0"?>\n{dtd}<graphml xmlns="http://graphml.graphdrawing.org/'
           'xmlns"><key id="d0" for="node" attr.name="label" attr.type="string"/>'
           '<graph edgedefault="undirected">{body}</graph></graphml>\n')
LAUGHS = ("<!DOCTYPE g [<!ENTITY l0 \"lol\">" + "".join(
    f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 10)) + "]>\n")


@pytest.mark.parametrize("name,text,error", [
    ("laughs.graphml", GRAPHML.format(dtd=LAUGHS, body='<node id="a"><data key="d0">&l9;'
                                                       '</data></node>'), "DTD or entity"),
    ("external.graphml", GRAPHML.format(
        dtd='<!DOCTYPE g [<!ENTITY x SYSTEM "file:///etc/hostname">]>\n',
        body='<node id="a"><data key="d0">&x;</data></node>'), "DTD or entity"),
    ("dtd.graphml", GRAPHML.format(dtd='<!DOCTYPE g SYSTEM "file:///etc/hostname">\n',
                                   body='<node id="a"/>'), "DTD or entity"),
    ("many.graphml", GRAPHML.format(dtd="", body="".join(f'<node id="n{i}"/>'
                                                         for i in range(9))), "more than 8 node"),
    ("many.gml", "graph [\n" + "".join(f" node [ id {i} ]\n" for i in range(4)) + "".join(
        f"edge [ source 0 target {i % 4} ]\n" for i in range(17)) + "]\n", "more than 16 edge"),
    ("large.gml", "graph [\n" + " " * 5000 + "]\n", "at most 4096"),
])
def test_map_files_are_bounded_before_they_are_parsed(tmp_path, monkeypatch, name, text,
                                                      error):
    """Entities (expansion, external files) are refused, and sizes and counts are checked
    in a streaming scan before NetworkX builds the graph (a 14 MB GML of 200 000 vertices
    took 40 s and 745 MB)."""
    monkeypatch.setattr(topology, "MOST_VERTICES", 8)
    monkeypatch.setattr(topology, "MOST_EDGES", 16)
    monkeypatch.setattr(topology, "MAX_BYTES", 4096)
    (tmp_path / name).write_text(text)
    kind = name.rsplit(".", 1)[1]
    spec = tmp_path / "t.yaml"
    spec.write_text(f"name: t\ntopology: {{{kind}: {name}}}\n")
    with pytest.raises(SpecError) as e:
        load(str(spec))
    assert error in str(e.value) and name in str(e.value), str(e.value)


def test_zoo_maps_and_parameters():
    exp = load("zoo:sndlib/polska", params={"ROUTING": "ospf", "HOSTS": "1"})
    assert exp.rtproto == "ospf" and len(exp.nodes) == 24 and len(exp.links) == 18 + 12
    assert len(load("zoo:caida/2024-08/1103").nodes) == 9
    with pytest.raises(SpecError, match="static or ospf"):
        load("zoo:Abilene", params={"ROUTING": "bgp"})


def _path_delay(exp, src, dst, without=None):
    """One-way delay of the OSPF (least cost) path ``src`` -> ``dst``."""
    g = nx.Graph()
    for l in exp.links:
        if l.name != without:
            g.add_edge(l.a, l.b, cost=l.cost, delay=l.ab.delay_s)
    path = nx.shortest_path(g, src, dst, weight="cost")
    return sum(g.edges[u, v]["delay"] for u, v in zip(path, path[1:], strict=False)), path


def test_abilene_map_reproduces_the_abilene_example():
    """zoo:Abilene with OSPF against examples/abilene (its own city coordinates): the same
    11 routers and 14 links, and Washington -> Seattle's RTT before and during the Denver -
    Kansas City failure within 1 %."""
    tcl = load(os.path.join(ROOT, "examples", "abilene", "abilene.tcl"))
    zoo = load("zoo:Abilene", params={"ROUTING": "ospf"})
    rename = {"washington-dc": "washington", "new-york": "newyork",
              "los-angeles": "losangeles", "kansas-city": "kansascity"}
    assert sorted(rename.get(n.name, n.name) for n in zoo.nodes) == \
        sorted(n.name for n in tcl.nodes)
    pairs = {frozenset(rename.get(x, x) for x in (l.a, l.b)) for l in zoo.links}
    assert pairs == {frozenset((l.a, l.b)) for l in tcl.links}
    cut_zoo = next(l.name for l in zoo.links if {l.a, l.b} == {"denver", "kansas-city"})
    for cut_tcl, cut in ((None, None), ("L-denver-kansascity", cut_zoo)):
        want, p1 = _path_delay(tcl, "washington", "seattle", cut_tcl)
        got, p2 = _path_delay(zoo, "washington-dc", "seattle", cut)
        assert [rename.get(x, x) for x in p2] == p1
        assert abs(2 * got - 2 * want) / (2 * want) < 0.01, (got, want)


@needs_root
def test_a_map_runs_with_its_great_circle_delays(lab, tmp_path):
    """The GML map on real namespaces: Paris's host pings Berlin's across the map's link,
    whose delay is the cities' distance at 2/3 c (4.39 ms each way)."""
    exp = load(_spec(tmp_path, "topology: {gml: tri.gml, hosts: 1}\n"))
    lab.create(exp)
    rtts = ping_rtts(lab, exp.name, "paris-h1", "berlin-h1", count=3)
    assert rtts and 8.7 < min(rtts) < 40, rtts          # 4.39 ms each way (and load)
