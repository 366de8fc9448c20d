"""netem's impairments in every front end: YAML, the builder, ns and tevc words give the
same typed IR, which the one encoder turns into the engine's PARAMS (pure: no engine)."""

import dataclasses
import os

import pytest

from wanlab.engine import encode, in_force
from wanlab.errors import SpecError
from wanlab.frontends import impair, normalize, ns, yaml_spec
from wanlab.frontends.builder import ExperimentBuilder
from wanlab.model import ir
from wanlab.plan.plan import make_plan

YAML = """
name: imp
nodes: [a, b, c, d]
links:
  - nodes: [a, b]
    delay: 10ms
    jitter: {value: 2ms, distribution: pareto, correlation: 25%}
    duplicate: 1%
    corrupt: 0.1%
    reorder: {probability: 25%, gap: 5}
    loss: {model: gilbert-elliott, p: 1%, r: 30%, h: 0.2}
    overhead: 8
    cellsize: 48
    cell_overhead: 5
    ba: {jitter: 1ms, loss: {p: 2%, correlation: 50%}}
lans:
  - nodes: [b, c, {node: d, jitter: {value: 3ms, distribution: normal}}]
    delay: 4ms
    corrupt: 1%
    loss: {model: 4-state, p13: 1%}
    matrix:
      delay: [[0, 1ms, 2ms], [1ms, 0, 3ms], [2ms, 3ms, 0]]
      jitter: [[0, 1ms, 0], [0, 0, 0], [0, 0, 0]]
      duplicate: [[0, 0, 0], [5%, 0, 0], [0, 0, 0]]
"""


def test_yaml_gives_every_impairment_per_direction_member_and_pair():
    exp = yaml_spec.loads(YAML)
    ab, ba = exp.links[0].ab, exp.links[0].ba
    assert (ab.jitter_s, ab.jitter_dist, ab.jitter_correlation) == (0.002, "pareto", 0.25)
    assert (ab.duplicate, ab.corrupt, ab.reorder, ab.reorder_gap) == (0.01, 0.001, 0.25, 5)
    assert ab.loss_model == ir.LossModel("gilbert-elliott", p=0.01, r=0.3, h=0.2, k=1.0)
    assert (ab.overhead, ab.cellsize, ab.cell_overhead) == (8, 48, 5)
    # a direction overrides what it names and keeps the rest
    assert (ba.jitter_s, ba.jitter_dist, ba.loss, ba.loss_correlation, ba.loss_model) == \
        (0.001, "pareto", 0.02, 0.5, None)
    assert ba.duplicate == 0.01
    # a LAN's impairments act once between two members: on the receiving halves
    lan = exp.lans[0]
    for m in lan.members:
        assert m.from_lan.corrupt == 0.01 and m.to_lan.corrupt == 0
        assert m.from_lan.loss_model.model == "4-state" and m.to_lan.loss_model is None
        assert m.from_lan.loss_model.p31 == pytest.approx(0.99)     # netem's default
    d = lan.members[2]
    assert (d.from_lan.jitter_s, d.from_lan.jitter_dist) == (0.003, "normal")
    assert lan.members[0].from_lan.jitter_s == 0
    pairs = {(p.src, p.dst): p.params for p in lan.pairs}
    assert pairs[("b", "c")].jitter_s == 0.001 and pairs[("c", "b")].duplicate == 0.05
    assert pairs[("c", "d")].jitter_s == 0
    # the IR's JSON form keeps all of it
    assert ir.Experiment.from_json(exp.to_json()) == exp


def test_the_encoder_gives_the_engine_every_field():
    exp = yaml_spec.loads(YAML)
    p = encode.params(exp.links[0].ab)
    assert p["loss"] == {"kind": "gilbert", "p": 0.01, "r": 0.3, "h": 0.2, "k": 1.0}
    assert (p["jitter_us"], p["jitter_dist"], p["jitter_corr"]) == (2000.0, "pareto", 0.25)
    assert (p["duplicate"], p["corrupt"], p["reorder"], p["reorder_gap"]) == \
        (0.01, 0.001, 0.25, 5)
    assert (p["overhead"], p["cellsize"], p["cell_overhead"]) == (8, 48, 5)
    assert encode.params(exp.links[0].ba)["loss"] == \
        {"kind": "bernoulli", "p": 0.02, "corr": 0.5}
    state = encode.params(exp.lans[0].members[0].from_lan)["loss"]
    assert state["kind"] == "state" and state["p13"] == 0.01
    # a change back to no impairment is a patch that carries the defaults
    patch = encode.params_patch(exp.links[0].ab, ir.LinkParams(delay_s=0.01))
    assert patch["jitter_us"] == 0 and patch["reorder"] == 0 and patch["cellsize"] == 0
    assert patch["loss"] == {"kind": "none"}


def test_builder_and_ns_say_the_same_as_yaml():
    b = ExperimentBuilder("imp")
    for n in "ab":
        b.node(n)
    b.link("a", "b", delay="10ms", jitter={"value": "2ms", "distribution": "pareto",
                                           "correlation": "25%"},
           duplicate="1%", corrupt=0.001, reorder={"probability": 0.25, "gap": 5},
           loss={"model": "gilbert-elliott", "p": 0.01, "r": 0.3, "h": 0.2},
           overhead=8, cellsize=48, cell_overhead=5, name="link0")
    b.direction("link0", "b", jitter="1ms", loss={"p": "2%", "correlation": 0.5})
    built = b.build().links[0]
    want = yaml_spec.loads(YAML).links[0]
    assert (built.ab, built.ba) == (want.ab, want.ba)


NS = """set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
set c [$ns node]
set d [$ns node]
set l0 [$ns duplex-link $a $b 10Mb 10ms DropTail]
set l1 [$ns duplex-link $b $c 10Mb 10ms DropTail]
set lan0 [$ns make-lan "$b $c $d" 100Mb 4ms]
tb-set-link-jitter $l0 2ms pareto 25%
tb-set-link-duplicate $l0 1%
tb-set-link-corrupt $l0 0.1%
tb-set-link-reorder $l0 25% gap 5
tb-set-link-lossmodel [$ns link $a $b] gemodel 1% 30% 80%
tb-set-link-overhead $l0 8
tb-set-link-cellsize $l0 48
tb-set-link-cell-overhead $l0 5
tb-set-link-jitter [$ns link $b $a] 1ms
tb-set-link-lossmodel [$ns link $b $a] random 2% 50%
tb-set-lan-corrupt $lan0 1%
tb-set-node-lan-jitter $d $lan0 3ms normal
set em [new ErrorModel]
$em set rate_ 0.02
$em unit pkt
$em ranvar [new RandomVariable/Uniform]
$em drop-target [new Agent/Null]
$ns lossmodel $em $b $c
$ns at 1 "$l0 jitter 1ms normal 10% reorder"
$ns at 2 "$lan0 loss state 1% 30%"
$ns at 3 "$l0 reorder 10% gap 3"
$ns run
"""


def test_ns_extensions_and_ns2_error_models(tmp_path):
    f = tmp_path / "imp.ns"
    f.write_text(NS)
    exp = ns.parse(str(f))
    want = yaml_spec.loads(YAML).links[0]
    l0, l1 = exp.links
    assert dataclasses.replace(l0.ab, bandwidth_bps=0) == want.ab
    # a tb-set-link-VERB command sets the whole of its impairment (the later one on b -> a
    # replaces the link's pareto jitter)
    assert dataclasses.replace(l0.ba, bandwidth_bps=0) == \
        dataclasses.replace(want.ba, jitter_dist="uniform", jitter_correlation=0.0)
    # $ns lossmodel: frames from b to c only
    assert (l1.ab.loss, l1.ba.loss) == (0.02, 0.0)
    for m in exp.lans[0].members:
        assert (m.from_lan.corrupt, m.to_lan.corrupt) == (0.01, 0)
    assert exp.lans[0].members[2].from_lan.jitter_dist == "normal"
    e1, e2, e3 = exp.events
    assert e1.action == "impair" and e1.value == {
        "jitter_s": 0.001, "jitter_dist": "normal", "jitter_correlation": 0.1,
        "jitter_reorder": True}
    assert e2.value["loss_model"]["model"] == "4-state"
    assert e2.value["loss_model"]["p31"] == 0.3
    assert e3.value == {"reorder": 0.1, "reorder_gap": 3}


@pytest.mark.parametrize("line,needle", [
    ("tb-set-link-reorder $l0 25% gap 0", "gap 0"),
    ("tb-set-link-jitter $l0 fast", "jitter"),
    ("tb-set-link-lossmodel $l0 gemodel 120%", "lossmodel gemodel 120%"),
    ("tb-set-link-cellsize $l0 -3", "cellsize"),
])
def test_ns_bad_impairments_name_the_line(tmp_path, line, needle):
    f = tmp_path / "bad.ns"
    lines = NS.splitlines()
    lines.insert(-1, line)      # last, before $ns run
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError) as e:
        ns.parse(str(f))
    assert e.value.line == len(lines) - 1 and needle in str(e.value), str(e.value)


@pytest.mark.parametrize("text,field,line", [
    ("jitter: {value: 2ms, distribution: gauss}", "links[0].jitter.distribution", 7),
    ("loss: {model: gilbert-elliott, p: 2}", "links[0].loss.p", 4),
    ("loss: {model: gilbert-elliott, r: 0.3}", "links[0].loss.p", 4),
    ("reorder: {probability: 25%, gap: 0}", "links[0].reorder.gap", 7),
    ("duplicate: 120%", "links[0].duplicate", 4),
    ("jitter: {value: 2ms, spread: 1}", "links[0].jitter.spread", 7),
])
def test_yaml_bad_impairments_name_file_line_field(text, field, line):
    # the schema's errors cite the key's line, the builder's the entry's (line 4)
    doc = f"name: x\nnodes: [a, b]\nlinks:\n  - nodes: [a, b]\n    delay: 1ms\n" \
          f"    bandwidth: 10Mb\n    {text}\n"
    with pytest.raises(SpecError) as e:
        yaml_spec.loads(doc, file="exp.yaml")
    assert (e.value.file, e.value.field) == ("exp.yaml", field), str(e.value)
    assert e.value.line == line


def test_tevc_words_become_one_patch_and_show_what_is_in_force(tmp_path):
    exp = yaml_spec.loads(YAML)
    ports = make_plan(exp, "abcd").port_map()
    ev = normalize.event(exp, 0.0, "link0", "loss", ["gemodel", "1%", "10%", "70%"],
                         dir="ab")
    (req,) = encode.event_requests(ev, "link", ports, str(tmp_path))
    assert req.to_json()["params"] == {"loss": {"kind": "gilbert", "p": 0.01, "r": 0.1,
                                                "h": 0.3, "k": 1.0}}
    assert req.dir == "ab"
    dup = normalize.event(exp, 0.0, "lan0", "duplicate", ["2%"])
    (req,) = encode.event_requests(dup, "lan", ports, str(tmp_path))
    assert (req.dir, req.params) == ("from_lan", {"duplicate": 0.02})
    plain = normalize.event(exp, 0.0, "link0", "plr", ["0.05"], dir="ab")
    # what is in force: the GE model, then a plain loss rate that ends it
    folder = str(tmp_path)
    in_force.reset(folder, ports)
    in_force.record(folder, [(ev, "link"), (dup, "lan")])
    now = in_force.current(folder, exp)
    assert now[("link0", None, "ab")].loss_model.r == 0.1
    assert now[("link0", None, "ba")] == exp.links[0].ba
    assert now[("lan0", "c", "from_lan")].duplicate == 0.02
    assert now[("lan0", "c", "to_lan")].duplicate == 0
    assert impair.describe(now[("link0", None, "ab")])[1].startswith("loss gilbert-elliott")
    in_force.record(folder, [(plain, "link")])
    now = in_force.current(folder, exp)
    assert (now[("link0", None, "ab")].loss, now[("link0", None, "ab")].loss_model) == \
        (0.05, None)


@pytest.mark.parametrize("words,needle", [
    (["jitter", "abc"], "jitter"), (["reorder"], "needs"), (["duplicate", "2"], "0..1"),
    (["loss", "state", "60%", "50%", "0", "1", "50%"], "p13 + p14"),
    (["overhead", "99999"], "overhead"),
])
def test_bad_tevc_words_are_refused(words, needle):
    exp = yaml_spec.loads(YAML)
    with pytest.raises(SpecError) as e:
        normalize.event(exp, 0.0, "link0", words[0], words[1:])
    assert needle in str(e.value), str(e.value)


def test_set_link_takes_impairments():
    exp = yaml_spec.loads(YAML)
    evs = normalize.link_change(exp, "link0", "ba", delay="5ms", jitter="3ms",
                                loss={"model": "gilbert-elliott", "p": 0.1})
    assert [e.action for e in evs] == ["delay", "impair"]
    assert evs[1].value["jitter_s"] == 0.003 and evs[1].dir == "ba"
    assert evs[1].value["loss_model"]["model"] == "gilbert-elliott"
    with pytest.raises(SpecError, match="corrupt"):
        normalize.link_change(exp, "link0", corrupt=3)


# -- capacity traces ------------------------------------------------------------------

CELL = "/work/shared/traces/cellular/Verizon-LTE-short.down"


def test_a_trace_from_yaml_ns_and_tevc(tmp_path):
    (tmp_path / "t.trace").write_text("0\n0\n5\n10\n")
    (tmp_path / "exp.yaml").write_text(
        "name: tr\nnodes: [a, b]\nlinks:\n  - nodes: [a, b]\n    bandwidth: 10Mb\n"
        "    ab: {bandwidth: {trace: t.trace, offset: 2ms, loop: false}}\n")
    from wanlab.frontends import load
    exp = load(str(tmp_path / "exp.yaml"))
    ab, ba = exp.links[0].ab, exp.links[0].ba
    assert ab.trace == ir.BandwidthTrace("t.trace", (0, 0, 5, 10), 0.002, False)
    assert (ab.bandwidth_bps, ba.trace, ba.bandwidth_bps) == (0, None, 10_000_000)
    assert encode.params(ab)["trace"] == {"ms": [0, 0, 5, 10], "offset_ms": 2, "loop": False}
    assert encode.params(ba)["trace"] == {"ms": []}
    assert "t.trace (4 opportunities" in impair.describe(ab)[0]
    # tevc: another trace, then a fixed rate again (which ends the trace in the engine)
    ev = normalize.event(exp, 0.0, "link0", "bandwidth", ["trace", CELL, "5s"], dir="ab")
    (req,) = encode.event_requests(ev, "link", make_plan(exp, "abcd").port_map(), "")
    t = req.to_json()["params"]["trace"]
    assert (len(t["ms"]), t["offset_ms"], t["loop"]) == (58655, 5000, True)
    # a modify from the trace to a rate, and back
    assert encode.params_patch(ab, ba) == {"bandwidth_bps": 10_000_000, "trace": {"ms": []}}
    assert encode.params_patch(ba, ab)["trace"]["ms"] == [0, 0, 5, 10]


@pytest.mark.parametrize("text,line,needle", [
    ("0\n3\nx\n", 3, "not a whole number"),
    ("0\n5\n4\n", 3, "before the previous"),
    ("0\n0\n", 2, "after 0 ms"),
    ("\n", None, "no opportunity"),
])
def test_a_bad_trace_names_its_file_and_line(tmp_path, text, line, needle):
    (tmp_path / "bad.trace").write_text(text)
    doc = "name: x\nnodes: [a, b]\nlinks:\n  - {nodes: [a, b], bandwidth: {trace: bad.trace}}\n"
    (tmp_path / "exp.yaml").write_text(doc)
    from wanlab.frontends import load
    with pytest.raises(SpecError) as e:
        load(str(tmp_path / "exp.yaml"))
    assert e.value.file.endswith("bad.trace") and e.value.line == line, str(e.value)
    assert needle in str(e.value)


def test_trace_paths_are_confined_for_other_users(tmp_path):
    from wanlab.frontends import bounds, schedules, traces
    (tmp_path / "in.trace").write_text("1\n")
    assert traces.path("/etc/passwd", tmp_path) == traces.Path("/etc/passwd")   # root's CLI
    with bounds.limited(nodes=10):
        assert traces.path("in.trace", tmp_path) == (tmp_path / "in.trace").resolve()
        for bad in ("/etc/passwd", "../x.trace"):
            with pytest.raises(SpecError, match="relative path inside"):
                traces.path(bad, tmp_path)
            with pytest.raises(SpecError, match="relative path inside"):   # a schedule too
                schedules.spec({"csv": bad}, tmp_path)
    # root's own description: a device or FIFO is no schedule (it was read without end)
    os.mkfifo(tmp_path / "fifo.csv")
    for bad in ("/dev/zero", str(tmp_path / "fifo.csv")):
        with pytest.raises(SpecError, match="not a regular file"):
            schedules.spec({"csv": bad}, tmp_path)
        with pytest.raises(SpecError, match="not a regular file"):
            traces.read(traces.Path(bad))
    with traces.confined_here():
        with pytest.raises(SpecError, match="only in the experiment's description"):
            traces.path("in.trace", None)
        exp = yaml_spec.loads(YAML)
        with pytest.raises(SpecError, match="only in the experiment's description"):
            normalize.event(exp, 0.0, "link0", "bandwidth", ["trace", CELL])


def test_a_schedule_from_yaml_and_ns_and_its_errors(tmp_path):
    (tmp_path / "s.csv").write_text("# satellite\ntime,delay,loss\n0,10ms,0\n1s,30ms,1%\n"
                                    "2.5,20ms,0\n")
    (tmp_path / "exp.yaml").write_text(
        "name: s\nnodes: [a, b]\nlinks:\n  - nodes: [a, b]\n    bandwidth: 10Mb\n"
        "    schedule: {csv: s.csv, interpolate: linear}\n")
    from wanlab.frontends import load
    sc = load(str(tmp_path / "exp.yaml")).links[0].ab.schedule
    assert sc == ir.Schedule("s.csv", (0.0, 1.0, 2.5), (0.01, 0.03, 0.02), None,
                             (0.0, 0.01, 0.0), linear=True)
    assert encode.schedule(sc) == {"t_ns": [0, 10**9, 25 * 10**8], "linear": True,
                                   "loop": False, "delay_us": [10000.0, 30000.0, 20000.0],
                                   "loss": [0.0, 0.01, 0.0]}
    assert encode.schedule(None) == {"t_ns": []}
    (tmp_path / "s.ns").write_text(
        "set ns [new Simulator]\nset a [$ns node]\nset b [$ns node]\n"
        "set l0 [$ns duplex-link $a $b 10Mb 10ms DropTail]\n"
        "tb-set-link-schedule [$ns link $a $b] s.csv linear\n$ns run\n")
    l0 = ns.parse(str(tmp_path / "s.ns")).links[0]
    assert (l0.ab.schedule, l0.ba.schedule) == (sc, None)
    for text, line in (("time,delay\n0,10ms\n1,fast\n", 3), ("time,delay\n2,1ms\n1,1ms\n", 3),
                       ("delay,time\n", 1), ("time,bandwidth\n0,0\n", 2)):
        (tmp_path / "s.csv").write_text(text)
        with pytest.raises(SpecError) as e:
            load(str(tmp_path / "exp.yaml"))
        assert e.value.file.endswith("s.csv") and e.value.line == line, str(e.value)


def test_a_schedule_is_checked_in_its_csv_and_in_the_ir(tmp_path):
    """A schedule's faults name the file and line (CSV) or the file and point (a schedule
    given in the IR, which the CSV reader never saw): unknown columns, times going back,
    negative or out-of-range values."""
    (tmp_path / "exp.yaml").write_text(
        "name: s\nnodes: [a, b]\nlinks:\n  - nodes: [a, b]\n"
        "    ab: {schedule: {csv: s.csv, loop: true}}\n")
    from wanlab.frontends import load
    for text, line, words in (
            ("time,delay,jitter\n0,1ms,1ms\n", 1, "unknown column 'jitter'"),
            ("time,delay\n0,1ms\n-1,2ms\n", 3, "negative"),
            ("time,delay\n0,1ms\n3,2ms\n2,1ms\n", 4, "before the previous"),
            ("time,loss\n0,1%\n1,-2%\n", 3, "negative"),
            ("time,bandwidth\n0,-1Mb\n", 2, "negative"),
            ("time,delay\n0,1ms\n1,11s\n", 3, "out of range"),
            ("time,delay\n0,1ms\n1e9,1ms\n", 3, "beyond")):
        (tmp_path / "s.csv").write_text(text)
        with pytest.raises(SpecError) as e:
            load(str(tmp_path / "exp.yaml"))
        assert e.value.file.endswith("s.csv") and words in e.value.message, str(e.value)
        assert e.value.line == line, str(e.value)
    # looping a series that ends at 0 is the description's fault: its line is named
    (tmp_path / "s.csv").write_text("time,delay\n0,1ms\n")
    with pytest.raises(SpecError, match=r"exp.yaml:5: .*schedule s.csv: point 1: .*period"):
        load(str(tmp_path / "exp.yaml"))
    good = ir.Schedule("sat.csv", (0.0, 1.0), delay_s=(0.01, 0.02))
    ir.check_impairments(ir.LinkParams(schedule=good))
    for bad, words in (
            (dataclasses.replace(good, times_s=(1.0, 0.5)), "point 2: time 0.5 s comes before"),
            (dataclasses.replace(good, times_s=(-1.0, 0.5)), "point 1: time -1.0"),
            (dataclasses.replace(good, delay_s=(0.01, -0.02)), "point 2: delay -0.02"),
            (dataclasses.replace(good, delay_s=None, loss=(0.0, 1.5)), "point 2: loss 1.5"),
            (dataclasses.replace(good, delay_s=None, bandwidth_bps=(0, 10)), "point 1: band"),
            (dataclasses.replace(good, delay_s=(0.01,)), "2 times but the delay column"),
            (dataclasses.replace(good, delay_s=None), "no column")):
        with pytest.raises(SpecError) as e:
            ir.check_impairments(ir.LinkParams(schedule=bad), "links.l0.ab")
        assert e.value.field == "links.l0.ab.schedule" and "schedule sat.csv: " + words \
            in e.value.message, str(e.value)
    # a whole experiment read from JSON is checked the same way
    exp = yaml_spec.loads("name: s\nnodes: [a, b]\nlinks:\n  - {name: l0, nodes: [a, b]}\n")
    j = exp.to_json()
    j["links"][0]["ab"]["schedule"] = {"file": "sat.csv", "times_s": [2, 1],
                                       "delay_s": [0.01, 0.02]}
    with pytest.raises(SpecError, match="schedule sat.csv: point 2"):
        ir.validate(ir.Experiment.from_json(j))


def test_a_schedule_or_trace_at_run_time_on_one_direction(tmp_path):
    """ns events and tevc's words start a schedule (or end it) on one direction named by
    the last word; the event carries the series read from the file."""
    (tmp_path / "s.csv").write_text("time,delay\n0,100ms\n2,5ms\n")
    (tmp_path / "s.ns").write_text(
        "set ns [new Simulator]\nset a [$ns node]\nset b [$ns node]\n"
        "set l0 [$ns duplex-link $a $b 10Mb 10ms DropTail]\n"
        "$ns at 1 \"$l0 schedule s.csv linear ab\"\n"
        "$ns at 2 \"$l0 schedule none ab\"\n"
        f"$ns at 3 \"$l0 bandwidth trace {CELL} ba\"\n$ns run\n")
    exp = ns.parse(str(tmp_path / "s.ns"))
    on, off, tr = (e for e in exp.events if e.target == "l0")
    assert (on.action, on.dir, off.dir, tr.dir) == ("impair", "ab", "ab", "ba")
    assert ir.impair_params(on.value).schedule == ir.Schedule(
        "s.csv", (0.0, 2.0), delay_s=(0.1, 0.005), linear=True)
    assert off.value == {"schedule": None} and tr.value["trace"]["ms"]
    assert encode.impair_patch({"schedule": None}) == {"schedule": {"t_ns": []}}
    ev = normalize.event(exp, 0.0, "l0", "delay", ["5ms", "ba"])
    assert (ev.dir, ev.value) == ("ba", 0.005)
    for words, msg in ((["s.csv", "fast", "ab"], "takes FILE"), ([], "takes FILE"),
                       (["nothere.csv"], "cannot read")):
        with pytest.raises(SpecError, match=msg):
            normalize.event(exp, 0.0, "l0", "schedule", words,
                            ir.Source(str(tmp_path / "s.ns"), 9))


def test_the_api_starts_a_trace_or_schedule_on_one_direction(tmp_path):
    """``set_link``'s events: ``bandwidth={"trace": FILE}`` and ``schedule={"csv": FILE}``
    (or ``"none"``) in one impair event on the direction asked for."""
    (tmp_path / "s.csv").write_text("time,loss\n0,1%\n")
    exp = yaml_spec.loads("name: s\nnodes: [a, b]\nlinks:\n  - {name: l0, nodes: [a, b]}\n")
    (ev,) = normalize.link_change(exp, "l0", "ab", bandwidth={"trace": CELL},
                                  schedule={"csv": str(tmp_path / "s.csv")})
    assert (ev.action, ev.dir) == ("impair", "ab")
    p = ir.impair_params(ev.value)
    assert p.trace.ms[:2] and p.schedule.loss == (0.01,) and p.schedule.times_s == (0.0,)
    (ev,) = normalize.link_change(exp, "l0", "ba", schedule="none")
    assert (ev.dir, ev.value) == ("ba", {"schedule": None})
    with pytest.raises(SpecError, match="no such trace file"):
        normalize.link_change(exp, "l0", bandwidth={"trace": str(tmp_path / "none")})


def test_a_change_beside_a_running_trace_or_schedule_leaves_it_in_phase(tmp_path):
    """The engine starts a trace or schedule over only when a request carries one (it
    merges a patch into what runs). So a modify, tevc or set_link that changes another
    field of a traced direction must not carry it, and a modify that changes it must."""
    from wanlab.backends.emulate.modify import param_requests
    from wanlab.frontends import load
    from wanlab.plan.diff import diff
    (tmp_path / "t.trace").write_text("0\n1\n5\n")
    (tmp_path / "s.csv").write_text("time,delay\n0,10ms\n1s,50ms\n")
    spec = ("name: tr\nnodes: [a, b]\nlinks:\n  - name: l0\n    nodes: [a, b]\n"
            "    bandwidth: 10Mb\n    delay: {delay}\n    queue: {{limit: {limit}}}\n"
            "    ab: {{bandwidth: {{trace: {trace}}}}}\n    ba: {{schedule: {{csv: s.csv}}}}\n")

    def modify(old, new):
        (tmp_path / "old.yaml").write_text(spec.format(**old))
        (tmp_path / "new.yaml").write_text(spec.format(**new))
        a, b = load(str(tmp_path / "old.yaml")), load(str(tmp_path / "new.yaml"))
        a = ir.Experiment.from_json(a.to_json())          # as the store keeps it
        return {r.dir: r.params for r in
                param_requests(diff(make_plan(a, "0001"), make_plan(b, "0001")))}
    base = {"delay": "10ms", "limit": 50, "trace": "t.trace"}
    assert modify(base, {**base, "delay": "20ms", "limit": 80}) == {
        d: {"delay_us": 20_000.0, "queue": {"limit": 80}} for d in ("ab", "ba")}
    assert modify(base, base) == {}
    (tmp_path / "u.trace").write_text("0\n2\n5\n")
    assert modify(base, {**base, "trace": "u.trace"}) == {
        "ab": {"trace": {"ms": [0, 2, 5], "offset_ms": 0, "loop": True}}}
    # tevc and set_link: another field alone, one direction or both
    exp = load(str(tmp_path / "old.yaml"))
    ports = make_plan(exp, "0001").port_map()
    evs = [normalize.event(exp, 0.0, "l0", "delay", ["30ms"]),
           normalize.event(exp, 0.0, "l0", "jitter", ["5ms", "ab"]),
           normalize.event(exp, 0.0, "l0", "schedule", ["none", "ab"]),
           *normalize.link_change(exp, "l0", "ba", loss={"model": "gilbert-elliott",
                                                         "p": 0.01}, delay="5ms")]
    for ev in evs:
        for req in encode.event_requests(ev, "link", ports, ""):
            params = req.to_json()["params"]
            assert "trace" not in params and ("schedule" not in params
                                              or params["schedule"] == {"t_ns": []}), params


def test_a_python_specs_trace_and_schedule_are_relative_to_its_folder(tmp_path, request,
                                                                      monkeypatch):
    """As a YAML or ns file's: a ``.py`` spec run from elsewhere finds them beside it
    (in a folder others may read: root's child runs the spec as nobody)."""
    import shutil
    import tempfile
    from pathlib import Path

    from wanlab.frontends import load
    spec = Path(tempfile.mkdtemp(prefix="wanlab-pyspec-", dir="/tmp"))
    spec.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(spec, ignore_errors=True))
    (spec / "t.trace").write_text("0\n1\n5\n")
    (spec / "s.csv").write_text("time,delay\n0,10ms\n1s,50ms\n")
    (spec / "exp.py").write_text(
        "from wanlab.frontends.builder import ExperimentBuilder\n"
        "b = ExperimentBuilder('pys')\nb.node('a')\nb.node('b')\n"
        "b.link('a', 'b', name='l0', bandwidth={'trace': 't.trace'}, "
        "schedule={'csv': 's.csv'})\nexperiment = b\n")
    monkeypatch.chdir(tmp_path)
    exp = load(str(spec / "exp.py"))
    assert exp.links[0].ab.trace.ms == (0, 1, 5)
    assert exp.links[0].ba.schedule.delay_s == (0.01, 0.05)
