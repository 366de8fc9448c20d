"""The one encoder: typed events -> engine requests, as patches (no root needed)."""

import math

from wanlab.engine import encode
from wanlab.engine.protocol import CaptureStart, Set
from wanlab.frontends import normalize
from wanlab.frontends.builder import ExperimentBuilder
from wanlab.plan.plan import make_plan


def lab():
    b = ExperimentBuilder("x")
    for n in "abcd":
        b.node(n)
    b.link("a", "b", name="l0", bandwidth="10Mb", delay="10ms", queue="RED")
    b.lan(["b", "c", "d"], name="lan0", bandwidth="100Mb", delay="4ms")
    exp = b.build()
    return exp, make_plan(exp, "abcd")


def reqs(exp, plan, target, action, *args, **kw):
    ev = normalize.event(exp, 0.0, target, action, list(args), **kw)
    return [r.to_json() for r in encode.event_requests(ev, exp.kinds()[target], plan.port_map(),
                                                      "/t")]


def test_a_link_change_is_a_patch_of_that_field_only():
    """Regression: the scheduler kept a copy of every direction and resent it whole, so a
    change made by api.set_link or modify was undone by the next timeline event. A
    bandwidth event now carries the bandwidth and nothing else."""
    exp, plan = lab()
    assert reqs(exp, plan, "l0", "bandwidth", "5Mb") == \
        [{"cmd": "set", "target": "l0", "dir": "both", "params": {"bandwidth_bps": 5_000_000}}]
    assert reqs(exp, plan, "l0", "delay", "50ms") == \
        [{"cmd": "set", "target": "l0", "dir": "both", "params": {"delay_us": 50_000.0}}]
    assert reqs(exp, plan, "l0", "set", "thresh_", "7") == \
        [{"cmd": "set", "target": "l0", "dir": "both", "params": {"queue": {"thresh": 7.0}}}]


def test_a_direction_stays_a_direction():
    exp, plan = lab()
    assert reqs(exp, plan, "l0", "set", "limit_", "10", dir="ba") == \
        [{"cmd": "set", "target": "l0", "dir": "ba", "params": {"queue": {"limit": 10}}}]
    assert reqs(exp, plan, "l0", "drop", "3", "ba") == \
        [{"cmd": "set", "target": "l0", "dir": "ba",
          "params": {"loss": {"kind": "ordinals", "drop": [1, 2, 3]}}}]


def test_lan_delay_and_loss_are_member_to_member():
    exp, plan = lab()
    (r,) = reqs(exp, plan, "lan0", "delay", "20ms")
    assert r["params"] == {"delay_us": 10_000.0} and "member" not in r
    (r,) = reqs(exp, plan, "lan0", "plr", "0.19")
    assert math.isclose(r["params"]["loss"]["p"], 0.1)


def test_api_set_link_on_a_lan_halves_the_delay_as_tevc_does():
    """Regression: api.set_link on a LAN gave each half the full delay where tevc gave
    D/2. Both now make the same typed events and the same requests."""
    exp, plan = lab()
    evs = normalize.link_change(exp, "lan0", delay="20ms", loss=0.19)
    api = [r.to_json() for ev in evs for r in encode.event_requests(ev, "lan", plan.port_map(), "")]
    tevc = reqs(exp, plan, "lan0", "delay", "20ms") + reqs(exp, plan, "lan0", "plr", "0.19")
    assert api == tevc
    assert api[0]["params"]["delay_us"] == 10_000.0


def test_lan_member_direction_and_traces():
    exp, plan = lab()
    port = plan.port_map().port("lan0", "c")
    assert reqs(exp, plan, "lan0", "bandwidth", "1Mb", dir="to_lan", member="c") == \
        [{"cmd": "set", "target": "lan0", "dir": "to_lan", "member": port,
          "params": {"bandwidth_bps": 1_000_000}}]
    starts = encode.event_requests(normalize.event(exp, 0.0, "lan0", "trace", ["start"]),
                                   "lan", plan.port_map(), "/t")
    assert len(starts) == 6 and all(isinstance(r, CaptureStart) for r in starts)
    assert starts[0].path.startswith("/t/lan0-") and starts[0].path.endswith("-to_lan.pcap")
    assert [r.to_json()["dir"] for r in encode.event_requests(
        normalize.event(exp, 0.0, "l0", "trace", ["start"]), "link", plan.port_map(), "/t")] == \
        ["ab", "ba"]


def test_modify_sends_only_what_the_description_changed():
    exp, _ = lab()
    old = exp.links[0].ab
    from dataclasses import replace
    new = replace(old, delay_s=0.02, queue=replace(old.queue, limit=40))
    assert encode.params_patch(old, new) == {"delay_us": 20_000.0, "queue": {"limit": 40}}


def test_apply_is_the_plans_topology():
    _, plan = lab()
    a = encode.apply(plan).to_json()
    assert a["cmd"] == "apply" and [x["link"] for x in a["links"]] == ["l0"]
    assert "ports" not in encode.apply(plan, with_ports=False).to_json()
    assert isinstance(Set(target="l0").to_json(), dict)


def test_a_restarted_trace_gets_the_next_free_file_name(tmp_path):
    # the engine never overwrites a capture, so a second `trace start` must not reuse a name
    exp, plan = lab()
    ev = normalize.event(exp, 0.0, "l0", "trace", ["start"], dir="ab")

    def path():
        (req,) = encode.event_requests(ev, "link", plan.port_map(), str(tmp_path))
        return req.path

    assert path() == str(tmp_path / "l0-ab.pcap")
    (tmp_path / "l0-ab.pcap").write_bytes(b"")
    assert path() == str(tmp_path / "l0-ab-2.pcap")
    (tmp_path / "l0-ab-2.pcap").write_bytes(b"")
    assert path() == str(tmp_path / "l0-ab-3.pcap")
