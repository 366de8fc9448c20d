"""The Python builder and .py loading."""

import math

import pytest

from wanlab.errors import SpecError
from wanlab.frontends import load
from wanlab.frontends.builder import ExperimentBuilder


def test_brief_example():
    b = ExperimentBuilder("figure2", seed=1)
    a, r, c = b.node("nodeA"), b.node("router"), b.node("nodeC")
    b.link(a, r, bandwidth="10Mb", delay="10ms", loss=0.01, name="link0")
    b.lan([a, r, c], bandwidth="100Mb", delay="2ms")
    b.at(12, "link0", "down")
    exp = b.build()
    assert exp.links[0].ab.loss == 0.01 and exp.lans[0].name == "lan0"
    assert math.isclose(exp.lans[0].members[0].to_lan.delay_s, 0.001)
    assert exp.events[0].target == "link0"
    assert exp.nodes[0].source.file == __file__


def test_typos_are_errors():
    b = ExperimentBuilder("x")
    a, c = b.node("a"), b.node("c")
    with pytest.raises(TypeError):
        b.link(a, c, bandwith="10Mb")  # type: ignore[call-arg]
    with pytest.raises(SpecError, match="bandwidth"):
        b.link(a, c, bandwidth="10Xb")
    with pytest.raises(SpecError, match="not a node"):
        b.link(a, "zz")
    with pytest.raises(SpecError, match=r"queue.limt: unknown key \(did you mean limit\?\)"):
        b.link(a, c, queue={"kind": "red", "limt": 3})
    with pytest.raises(SpecError, match="routing"):
        ExperimentBuilder("x", routing="rip")


def test_direction_and_members():
    b = ExperimentBuilder("x")
    a, c, d = b.node("a"), b.node("c"), b.node("d")
    l = b.link(a, c, bandwidth="1Mb", delay="1ms")
    b.direction(l, c, delay="5ms", queue={"kind": "red", "limit": 30})
    lan = b.lan([a, c, d], delay="10ms", loss=0.19)
    b.lan_member(lan, d, delay="1ms", ip="10.0.0.4")
    b.lan_member(lan, c, to_lan={"bandwidth": "2Mb"})
    e = b.build()
    assert e.links[0].ba.delay_s == 0.005 and e.links[0].ba.queue.kind == "red"
    assert e.links[0].ab.delay_s == 0.001
    m = {x.node: x for x in e.lans[0].members}
    assert m["d"].to_lan.delay_s == m["d"].from_lan.delay_s == 0.001
    assert m["c"].to_lan.bandwidth_bps == 2_000_000 and m["c"].from_lan.bandwidth_bps == 0
    assert math.isclose(m["a"].to_lan.loss, 0.1)


def test_load_python_file(tmp_path):
    p = tmp_path / "exp.py"
    p.write_text("from wanlab.frontends.builder import ExperimentBuilder\n"
                 "b = ExperimentBuilder('pyexp')\nb.node('a')\nexperiment = b.build()\n")
    assert load(p).name == "pyexp"
    p.write_text("x = 1\n")
    with pytest.raises(SpecError, match="module-level 'experiment'"):
        load(p)
    p.write_text("from wanlab.frontends.builder import ExperimentBuilder\n"
                 "b = ExperimentBuilder('e')\n\nb.link('a', 'b')\n")
    with pytest.raises(SpecError) as ei:
        load(p)
    assert ei.value.line == 4 and "not a node" in ei.value.message
    p.write_text("def f(:\n")
    with pytest.raises(SpecError, match="syntax error"):
        load(p)
