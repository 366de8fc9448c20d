"""The examples: the same experiments in ns-2, YAML and Python give the same IR."""

import os

import pytest

from wanlab.frontends import load

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def comparable(exp):
    """The IR without declaration sources and warnings (which cite files and lines)."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("source", "warnings")}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x
    return strip(exp.to_json())


@pytest.mark.parametrize("stem", ["figure2", "lan"])
def test_three_forms_give_equal_ir(stem):
    forms = [load(os.path.join(EXAMPLES, f"{stem}.{ext}")) for ext in ("tcl", "yaml", "py")]
    tcl, yml, py = (comparable(f) for f in forms)
    assert tcl == yml
    assert tcl == py


def test_figure2_content():
    e = load(os.path.join(EXAMPLES, "figure2.tcl"))
    assert [n.name for n in e.nodes] == ["source", "router", "dest"]
    l0, l1 = e.links
    assert (l0.a, l0.b, l0.ab.bandwidth_bps, l0.ab.delay_s, l0.ab.queue.kind) == \
        ("source", "router", 10_000_000, 0.0, "red")
    assert (l1.ab.bandwidth_bps, l1.ab.delay_s, l1.ab.queue.kind) == (1_500_000, 0.02, "droptail")
    assert e.node("source").os == "FBSD45-STD" and e.node("dest").hardware == "pc-inet"
    assert len(e.warnings) == 2


def test_emulab_example():
    e = load(os.path.join(EXAMPLES, "emulab.tcl"))
    assert [n.name for n in e.nodes] == ["r-0", "r-1", "r-2", "server", "client1", "client2"]
    assert [l.name for l in e.links] == ["l-1", "l-2", "bottleneck"]
    b = e.links[2]
    assert b.ab.queue.limit == 100 and b.ab.queue.gentle and b.ba.queue.limit is None
    assert [p.name for p in e.programs] == ["fetch"]
    assert [(ev.time_s, ev.target, ev.action) for ev in e.events][:2] == \
        [(5.0, "cbr0", "start"), (10.0, "fetch", "start")]
    assert e.lans[0].members[1].ip == "10.1.1.2"
    assert e.node("server").startcmd.startswith("/usr/bin/env python3")


def test_ir_json_round_trip():
    from wanlab.model.ir import Experiment
    for f in ("figure2.tcl", "lan.yaml", "emulab.tcl"):
        e = load(os.path.join(EXAMPLES, f))
        assert Experiment.from_json(e.to_json()) == e
