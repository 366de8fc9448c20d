"""The typed plan, the port map and the record of what is in force (no root needed)."""

import os
from dataclasses import replace

import pytest

from wanlab.engine import encode, in_force
from wanlab.frontends import normalize
from wanlab.frontends.builder import ExperimentBuilder
from wanlab.model.ir import LinkParams
from wanlab.plan.plan import make_plan
from wanlab.plan.types import PortMap


def build(link_bw="10Mb", link_delay="10ms", lan_delay="4ms"):
    b = ExperimentBuilder("x")
    for n in "abcd":
        b.node(n)
    b.link("a", "b", name="l0", bandwidth=link_bw, delay=link_delay)
    b.lan(["b", "c", "d"], name="lan0", bandwidth="100Mb", delay=lan_delay)
    return b.build()


def test_the_plan_carries_typed_directions_in_ir_units():
    plan = make_plan(build(), "abcd")
    (l0,) = plan.links
    assert (l0.a, l0.b) == ("a:eth0", "b:eth0")
    assert isinstance(l0.ab, LinkParams)
    assert (l0.ab.bandwidth_bps, l0.ab.delay_s) == (10_000_000, 0.01)
    (lan,) = plan.lans
    assert [(m.node, m.port) for m in lan.members] == \
        [("b", "b:eth1"), ("c", "c:eth0"), ("d", "d:eth0")]
    assert lan.members[0].to_lan.delay_s == 0.002           # each half D/2
    assert [(p.id, p.netns) for p in plan.ports][:2] == \
        [("a:eth0", "wl-abcd-a"), ("b:eth0", "wl-abcd-b")]
    # the wire units appear only in the encoder's output
    assert encode.apply(plan).links[0]["ab"]["delay_us"] == 10_000.0


def test_the_port_map_names_lan_members_and_survives_json(tmp_path):
    ports = make_plan(build(), "abcd").port_map()
    assert ports.port("lan0", "c") == "c:eth0" and ports.port("l0", "b") == "b:eth0"
    assert ports.ports("lan0") == ["b:eth1", "c:eth0", "d:eth0"]
    with pytest.raises(ValueError, match="a is not a member of lan0"):
        ports.port("lan0", "a")
    in_force.save_ports(str(tmp_path), ports)
    assert in_force.load_ports(str(tmp_path)) == ports
    assert in_force.load_ports(str(tmp_path / "nowhere")) is None
    assert PortMap.from_json(ports.to_json()) == ports


def test_a_member_event_is_encoded_from_the_port_map_alone():
    exp = build()
    ports = PortMap({"lan0": {"b": "b:eth1", "c": "c:eth0", "d": "d:eth0"}})
    ev = normalize.event(exp, 0.0, "lan0", "bandwidth", ["1Mb"], dir="to_lan", member="c")
    (req,) = encode.event_requests(ev, "lan", ports, "")
    assert req.to_json() == {"cmd": "set", "target": "lan0", "dir": "to_lan",
                             "member": "c:eth0", "params": {"bandwidth_bps": 1_000_000}}


def test_run_time_changes_are_recorded_and_a_reset_forgets_them(tmp_path):
    folder, exp = str(tmp_path), build()
    in_force.reset(folder, make_plan(exp, "abcd").port_map())
    assert in_force.current(folder, exp) == in_force.configured(exp)
    record(folder, exp, normalize.link_change(exp, "l0", bandwidth="20Mb", delay="50ms"))
    record(folder, exp, [normalize.event(exp, 0.0, "l0", "plr", ["0.1"], dir="ba")])
    record(folder, exp, [normalize.event(exp, 0.0, "lan0", "delay", ["8ms"], member="c",
                                         dir="to_lan")])
    record(folder, exp, normalize.link_change(exp, "lan0", delay="20ms"))
    now = in_force.current(folder, exp)
    assert now[("l0", None, "ab")] == replace(exp.links[0].ab, bandwidth_bps=20_000_000,
                                              delay_s=0.05)
    assert now[("l0", None, "ba")].loss == 0.1 and now[("l0", None, "ab")].loss == 0
    # the whole LAN's later change overrides c's earlier one
    assert {now[("lan0", m, d)].delay_s for m in "bcd" for d in ("to_lan", "from_lan")} \
        == {0.01}
    record(folder, exp, [normalize.event(exp, 0.0, "lan0", "delay", ["8ms"], member="c",
                                         dir="to_lan")])
    now = in_force.current(folder, exp)
    assert (now[("lan0", "c", "to_lan")].delay_s, now[("lan0", "c", "from_lan")].delay_s,
            now[("lan0", "b", "to_lan")].delay_s) == (0.004, 0.01, 0.01)
    # up/down, drops and traces change no parameter
    held = in_force._read(folder)
    record(folder, exp, [normalize.event(exp, 0.0, "l0", "down", []),
                         normalize.event(exp, 0.0, "l0", "drop", ["2"])])
    assert in_force._read(folder) == held
    in_force.reset(folder, make_plan(exp, "abcd").port_map())
    assert in_force._read(folder) == {}


def test_modify_rebases_what_is_in_force_as_the_engines_patch_does(tmp_path):
    """modify sends only the fields the description changed: a run-time delay survives a
    configured bandwidth change, and a configured delay change replaces it."""
    folder, old = str(tmp_path), build()
    in_force.reset(folder, make_plan(old, "abcd").port_map())
    record(folder, old, normalize.link_change(old, "l0", delay="50ms"))
    record(folder, old, normalize.link_change(old, "lan0", bandwidth="1Mb"))
    new = build(link_bw="30Mb")
    in_force.rebase(folder, old, new, make_plan(new, "abcd").port_map(), [])
    now = in_force.current(folder, new)
    ab = now[("l0", None, "ab")]
    assert (ab.bandwidth_bps, ab.delay_s) == (30_000_000, 0.05)
    assert now[("lan0", "d", "from_lan")].bandwidth_bps == 1_000_000
    newer = build(link_bw="30Mb", link_delay="70ms")
    in_force.rebase(folder, new, newer, make_plan(newer, "abcd").port_map(), ["lan0"])
    assert in_force.current(folder, newer) == in_force.configured(newer)
    record(folder, newer, normalize.link_change(newer, "l0", delay="5ms"))
    in_force.rebase(folder, newer, newer, make_plan(newer, "abcd").port_map(), ["l0"])
    assert in_force.current(folder, newer) == in_force.configured(newer)  # l0 rebuilt


def record(folder, exp, evs):
    in_force.record(folder, [(ev, exp.kinds()[ev.target]) for ev in evs])


def test_diff_reports_directions_in_ir_units():
    from wanlab.plan.diff import diff
    d = diff(make_plan(build(), "abcd"), make_plan(build(link_delay="25ms"), "abcd"))
    assert {(p.network, p.dir) for p in d.params} == {("l0", "ab"), ("l0", "ba")}
    p = d.params[0]
    assert (p.old.delay_s, p.params.delay_s) == (0.01, 0.025)
    assert encode.params_patch(p.old, p.params) == {"delay_us": 25_000.0}


def test_a_long_record_is_folded_and_a_rebase_keeps_whole_lan_and_member_changes(
        tmp_path, monkeypatch):
    folder, exp = str(tmp_path), build()
    in_force.reset(folder, make_plan(exp, "abcd").port_map())
    monkeypatch.setattr(in_force, "COMPACT_BYTES", 2000)
    for i in range(200):
        record(folder, exp, normalize.link_change(exp, "l0", delay=f"{i + 1}ms"))
    assert os.path.getsize(tmp_path / in_force.IN_FORCE) < 2000
    assert in_force.current(folder, exp)[("l0", None, "ba")].delay_s == 0.2
    record(folder, exp, normalize.link_change(exp, "lan0", bandwidth="1Mb"))
    record(folder, exp, [normalize.event(exp, 0.0, "lan0", "delay", ["8ms"], member="c",
                                         dir="to_lan")])
    before = in_force.current(folder, exp)
    in_force.rebase(folder, exp, exp, make_plan(exp, "abcd").port_map(), [])
    assert in_force.current(folder, exp) == before
    c = before[("lan0", "c", "to_lan")]
    assert (c.bandwidth_bps, c.delay_s) == (1_000_000, 0.004)


def test_show_gives_a_lans_values_in_force_and_the_members_that_differ(tmp_path):
    from wanlab.lifecycle import _describe_lan
    folder, exp = str(tmp_path), build()
    in_force.reset(folder, make_plan(exp, "abcd").port_map())
    lan = exp.lans[0]
    assert _describe_lan(lan, in_force.current(folder, exp)) == {
        "name": "lan0", "members": ["b", "c", "d"], "bandwidth_bps": 100_000_000,
        "delay_s": 0.004, "loss": 0.0}
    record(folder, exp, normalize.link_change(exp, "lan0", bandwidth="20Mb", delay="30ms"))
    record(folder, exp, [normalize.event(exp, 0.0, "lan0", "delay", ["10ms"], member="c",
                                         dir="to_lan")])
    got = _describe_lan(lan, in_force.current(folder, exp))
    assert got["bandwidth_bps"] == 20_000_000
    assert got["configured"] == {"bandwidth_bps": 100_000_000}
    assert got["varies"] == ["delay_s"] and list(got["changed_members"]) == ["b", "c", "d"]
    c = got["changed_members"]["c"]
    assert (c["to_lan"]["delay_s"], c["from_lan"]["delay_s"]) == (0.005, 0.015)
    assert c["to_lan"]["configured"] == {"bandwidth_bps": 100_000_000, "delay_s": 0.002}


def test_show_gives_a_lans_impairments_in_force(tmp_path):
    """A LAN's netem impairments (on the receiving halves) in force: LAN-wide when every
    member has the same, with the configured ones where they differ; else per member."""
    from wanlab.lifecycle import _describe_lan
    from wanlab.site.show_text import local_lines
    folder, exp = str(tmp_path), build()
    in_force.reset(folder, make_plan(exp, "abcd").port_map())
    lan = exp.lans[0]
    record(folder, exp, [normalize.event(exp, 0.0, "lan0", "duplicate", ["2%"])])
    got = _describe_lan(lan, in_force.current(folder, exp))
    assert got["impair"] == ["duplicate 0.02"] and got["configured"] == {"impair": []}
    record(folder, exp, [normalize.event(exp, 0.0, "lan0", "corrupt", ["1%"], member="d",
                                         dir="from_lan")])
    got = _describe_lan(lan, in_force.current(folder, exp))
    assert "impair" not in got and got["varies"] == ["impair"]
    assert got["member_impair"] == {"b": ["duplicate 0.02"], "c": ["duplicate 0.02"],
                                    "d": ["duplicate 0.02", "corrupt 0.01"]}
    assert set(got["changed_members"]) == {"b", "c", "d"}
    text = local_lines({"name": "x", "id": "abcd", "state": "active", "error": None,
                        "folder": folder, "nodes": {}, "links": [], "lans": [got]},
                       summary=False)
    assert "    d receives: duplicate 0.02, corrupt 0.01" in text, text


def build_matrix():
    b = ExperimentBuilder("x")
    for n in "abc":
        b.node(n)
    b.lan(["a", "b", "c"], name="wan", matrix={
        "delay": [[0, "10ms", "20ms"], ["10ms", 0, "30ms"], ["20ms", "30ms", 0]],
        "pairs": [{"from": "c", "to": "a", "duplicate": "1%"}]})
    return b.build()


def test_pair_changes_are_in_force_and_shown_where_they_differ(tmp_path):
    """Regression: a run-time change of one matrix pair (tevc LAN/SRC/DST, set_link on a
    pair) was not recorded, so show printed the configured pair values."""
    from wanlab.lifecycle import _describe_lan
    from wanlab.site.show_text import local_lines
    folder, exp = str(tmp_path), build_matrix()
    in_force.reset(folder, make_plan(exp, "abcd").port_map())
    lan = exp.lans[0]
    # unchanged: only the pair with an impairment is shown (a big matrix stays short)
    got = _describe_lan(lan, in_force.current(folder, exp))
    assert [(p["from"], p["to"], p["impair"]) for p in got["pairs"]] == \
        [("c", "a", ["duplicate 0.01"])]
    assert "configured" not in got["pairs"][0]

    def pair(evs, src, dst):
        return [replace(ev, member=src, to=dst) for ev in evs]
    record(folder, exp, pair([normalize.event(exp, 0.0, "wan", "delay", ["50ms"])], "a", "b"))
    record(folder, exp, pair(normalize.link_change(
        exp, "wan", loss={"model": "gilbert-elliott", "p": 0.01, "r": 0.3}), "a", "b"))
    now = in_force.current(folder, exp)
    ab = now[("wan", "a", in_force.pair_dir("b"))]
    assert ab.delay_s == 0.05 and ab.loss_model.model == "gilbert-elliott"   # its own value
    assert now[("wan", "b", in_force.pair_dir("a"))].delay_s == 0.01          # not the reverse
    assert now[("wan", "a", "to_lan")] == in_force.configured(exp)[("wan", "a", "to_lan")]
    got = _describe_lan(lan, now)
    (ab,) = [p for p in got["pairs"] if (p["from"], p["to"]) == ("a", "b")]
    assert ab["delay_s"] == 0.05 and ab["configured"] == {"delay_s": 0.01, "impair": []}
    assert ab["impair"] == ["loss gilbert-elliott p=0.01 r=0.3 h=0 k=1"]
    text = local_lines({"name": "x", "id": "abcd", "state": "active", "error": None,
                        "folder": folder, "nodes": {}, "links": [], "lans": [got]},
                       summary=False)
    assert "    pair a -> b: [unlimited, 50 ms (configured 10 ms), loss 0, loss " \
           "gilbert-elliott p=0.01 r=0.3 h=0 k=1 (configured no impairments)]" in text, text
    # a modify that keeps the matrix keeps the pair's change
    in_force.rebase(folder, exp, exp, make_plan(exp, "abcd").port_map(), rebuilt=())
    assert in_force.current(folder, exp)[("wan", "a", in_force.pair_dir("b"))].delay_s == 0.05
