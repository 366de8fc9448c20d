"""A cluster modify's pure parts: what it refuses before asking any machine (no Ray, no
root); the modify itself is in test_cluster.py, on the local test cluster."""

from __future__ import annotations

import pytest

from wanlab.cluster import modify
from wanlab.errors import WanlabError
from wanlab.frontends.yaml_spec import loads

SPEC = """\
name: wa
nodes: [{name: a, wide_area: true}, {name: b, wide_area: true}, c]
links:
  - {name: ab, nodes: [a, b], delay: 20ms}
  - {name: bc, nodes: [b, c], delay: 5ms}
"""


def test_wide_area_nodes_cannot_change_and_wanlinks_stay_unshaped():
    old = loads(SPEC, file="wa.yaml")
    new = loads(SPEC.replace("delay: 5ms", "delay: 7ms"), file="wa.yaml")
    kept = modify._wide_area(old, new)
    ab, bc = kept.links
    assert ab.ab.delay_s == 0 and ab.ba.delay_s == 0        # the real path carries it
    assert bc.ab.delay_s == pytest.approx(0.007)
    fewer = loads(SPEC.replace("{name: b, wide_area: true}", "b"), file="wa.yaml")
    with pytest.raises(WanlabError, match=r"wide-area nodes \(a, b\) cannot change \(to a\)"):
        modify._wide_area(old, fewer)


def test_a_running_node_pinned_elsewhere_is_refused_by_name():
    new = loads("name: p\nnodes: [a, b]\nlinks: [{name: l, nodes: [a, b]}]\n", file="p.yaml")
    import dataclasses
    new = dataclasses.replace(new, nodes=(dataclasses.replace(new.nodes[0], fixed="m1"),
                                          new.nodes[1]))
    assert modify._kept("p", new, {"a": "m1", "b": "m0"}) == {"a": "m1", "b": "m0"}
    with pytest.raises(WanlabError, match="node a runs on machine m0 and is fixed to m1"):
        modify._kept("p", new, {"a": "m0", "b": "m0", "gone": "m2"})
