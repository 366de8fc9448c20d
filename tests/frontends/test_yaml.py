"""The YAML front end: schema errors with paths, syntax errors with lines, semantics."""

import math
import textwrap

import pytest

from wanlab.errors import SpecError
from wanlab.frontends import yaml_spec


def load(text, tmp_path, name="t.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return yaml_spec.load_file(p)


def test_full_form(tmp_path):
    e = load("""\
        name: demo
        seed: 7
        routing: ospf
        nodes: [a, {name: b, startcmd: "echo hi"}, {name: c, os: UBUNTU, kind: simulated,
                                                    routes: [{dst: 10.0.0.0/8, via: b}]}]
        links:
          - {name: l0, nodes: [a, b], bandwidth: 10Mb, delay: 10ms, loss: 0.01,
             queue: {kind: red, limit: 50, thresh: 5, maxthresh: 15, gentle: true},
             ba: {delay: 30ms}, ips: [10.0.0.1, 10.0.0.2], netmask: 24, cost: 3}
        lans:
          - {name: lan0, nodes: [a, b, {node: c, delay: 20ms, ip: 10.1.0.3,
                                        to_lan: {loss: 0.5}}],
             bandwidth: 100Mb, delay: 2ms, loss: 0.19}
        programs:
          - {name: srv, node: a, command: "iperf3 -s", timeout: 30s, expected_exit_code: 0}
        agents:
          - {name: udp0, kind: Agent/UDP, node: a, peer: null0}
          - {name: null0, kind: Agent/Null, node: b, peer: udp0}
          - {name: cbr0, kind: Application/Traffic/CBR, attached: udp0,
             params: {rate_: 1Mb, packetSize_: 500}}
        events:
          - {at: 12, target: l0, action: down}
          - {at: 1.5s, target: cbr0, action: set, args: [rate_, 2Mb]}
    """, tmp_path)
    assert (e.name, e.seed, e.rtproto) == ("demo", 7, "ospf")
    c = e.node("c")
    assert c.kind == "simulated" and c.routes[0].via == "b" and e.node("b").startcmd == "echo hi"
    l = e.links[0]
    assert l.ab.delay_s == 0.01 and l.ba.delay_s == 0.03 and l.ab.queue.gentle
    assert (l.ip_a, l.ip_b, l.netmask, l.cost) == ("10.0.0.1", "10.0.0.2", "24", 3)
    m = {x.node: x for x in e.lans[0].members}
    assert math.isclose(m["a"].to_lan.delay_s, 0.001)
    assert math.isclose(m["a"].to_lan.loss, 0.1)
    assert m["c"].from_lan.delay_s == 0.02 and m["c"].to_lan.loss == 0.5
    assert m["c"].ip == "10.1.0.3"
    assert e.programs[0].timeout_s == 30.0
    cbr = [a for a in e.agents if a.name == "cbr0"][0]
    assert cbr.node == "a" and cbr.traffic.rate_bps == 1_000_000
    assert cbr.traffic.packet_size == 500
    assert e.events[1].time_s == 1.5 and (e.events[1].param, e.events[1].value) == \
        ("rate_bps", 2_000_000)
    assert e.programs[0].source.line == 15


def test_default_name_is_file_stem(tmp_path):
    assert load("nodes: [a]\n", tmp_path, name="my_exp.yaml").name == "my-exp"


def test_unknown_key_names_path_and_suggests(tmp_path):
    with pytest.raises(SpecError) as ei:
        load("""\
            nodes: [a, b]
            links:
              - {nodes: [a, b], bandwith: 10Mb}
        """, tmp_path)
    assert str(ei.value).endswith("links[0].bandwith: unknown key (did you mean bandwidth?)")
    assert ei.value.line == 3 and ei.value.file.endswith("t.yaml")


def test_unknown_key_deep_and_top_level(tmp_path):
    with pytest.raises(SpecError, match=r"lans\[0\]\.nodes\[1\]\.dealy: unknown key "
                                        r"\(did you mean delay\?\)"):
        load("nodes: [a, b]\nlans:\n  - nodes: [a, {node: b, dealy: 1ms}]\n", tmp_path)
    with pytest.raises(SpecError, match=r"t.yaml:2: lnks: unknown key \(did you mean links\?\)"):
        load("nodes: [a]\nlnks: []\n", tmp_path)
    with pytest.raises(SpecError, match=r"links\[0\]\.queue\.limt: unknown key"):
        load("nodes: [a, b]\nlinks:\n- {nodes: [a, b], queue: {kind: red, limt: 5}}\n", tmp_path)


def test_bad_values_cite_path_and_line(tmp_path):
    with pytest.raises(SpecError) as ei:
        load("nodes: [a, b]\nlinks:\n  - nodes: [a, b]\n    delay: 10 parsecs\n", tmp_path)
    assert ei.value.line == 3 and ei.value.field == "links[0].delay"
    with pytest.raises(SpecError, match=r"links\[0\]\.b: 'zz' is not a node"):
        load("nodes: [a, b]\nlinks:\n  - nodes: [a, zz]\n", tmp_path)
    with pytest.raises(SpecError, match="required"):
        load("nodes: [a]\nprograms: [{node: a}]\n", tmp_path)
    with pytest.raises(SpecError, match="event targets unknown object 'nope'"):
        load("nodes: [a]\nevents: [{at: 1, target: nope, action: down}]\n", tmp_path)


def test_yaml_syntax_error_cites_line(tmp_path):
    with pytest.raises(SpecError) as ei:
        load("nodes: [a, b]\nlinks:\n  - {nodes: [a, b]\n  - x\n", tmp_path)
    assert "YAML syntax error" in ei.value.message and ei.value.line in (3, 4)


def test_not_a_mapping(tmp_path):
    with pytest.raises(SpecError, match="must be a YAML mapping"):
        load("- a\n- b\n", tmp_path)


def test_bare_numbers_for_delay_and_bandwidth_warn_naming_the_field(tmp_path):
    e = load("""\
        nodes: [a, b, c]
        links:
          - {nodes: [a, b], bandwidth: 100, delay: 10}
          - {nodes: [b, c], bandwidth: 10Mb, delay: 10ms, ba: {delay: 0.5}}
        lans:
          - {nodes: [a, b, {node: c, delay: 2, to_lan: {bandwidth: 5}}], delay: 0,
             bandwidth: 1000000}
        """, tmp_path)
    l0 = e.links[0]
    assert l0.ab.delay_s == 10 and l0.ab.bandwidth_bps == 100   # accepted as ns-2 reads them
    w = e.warnings
    assert any("t.yaml:3: links[0].delay: delay 10 has no unit" in x and "10ms" in x
               for x in w), w
    assert any("t.yaml:3: links[0].bandwidth: bandwidth 100 has no unit" in x for x in w), w
    assert any("t.yaml:4: links[1].ba.delay: delay 0.5 " in x for x in w), w
    assert any("lans[0].nodes[2].delay: delay 2 " in x for x in w), w
    assert any("lans[0].nodes[2].to_lan.bandwidth: bandwidth 5 " in x for x in w), w
    # with units, 0, or a large plain bandwidth: no note
    assert len(w) == 5, w
