"""Node resources through cgroups (docs/resources.md): the front ends' one meaning of
``cpu``/``memory``/``pids``/``cpus``/``cpu_weight`` and their errors (no root), and on the
real kernel: a CPU limit holds a busy loop, a memory limit OOM-kills only its node and
says so in the event log, a pids limit stops a fork bomb, every command of a node is in
its cgroup, and teardown leaves no cgroup."""

from __future__ import annotations

import os
import subprocess
import textwrap
import time

import pytest
from conftest import ping_rtts

from wanlab.backends.emulate import cgroups, cpuplace
from wanlab.errors import SpecError, WanlabError
from wanlab.frontends import ns, units, yaml_spec
from wanlab.frontends.builder import ExperimentBuilder
from wanlab.model.ir import Node, machine_cpus

NCPU = len(machine_cpus())


# -- units and front ends (no root) ------------------------------------------------------
@pytest.mark.parametrize("text,want", [("64MB", 64 << 20), ("64M", 64 << 20), ("512KB", 512 << 10),
                                       ("1GiB", 1 << 30), ("1.5G", 3 << 29), (4096, 4096)])
def test_memory_amounts_use_binary_prefixes(text, want):
    assert units.parse_memory(text) == want


@pytest.mark.parametrize("text,msg", [("-64MB", "negative"), ("0", "positive"),
                                      ("64XB", "not understood"), (True, "not an amount")])
def test_bad_memory_amounts_are_refused_clearly(text, msg):
    with pytest.raises(SpecError, match=msg):
        units.parse_memory(text)


@pytest.mark.parametrize("text,msg", [("-1", "negative"), ("0", "positive"), ("lots", "not under"),
                                      ("nan", "positive")])
def test_bad_cpu_shares_are_refused_clearly(text, msg):
    with pytest.raises(SpecError, match=msg):
        units.parse_cores(text)


def test_cpu_lists_are_normalised_and_checked():
    assert units.parse_cpuset(" 0, 2-3 ") == "0,2-3"
    assert units.parse_cpuset(1) == "1"
    for bad in ("a", "3-1", "0,,1", "-1"):
        with pytest.raises(SpecError):
            units.parse_cpuset(bad)


def _yaml(tmp_path, node_keys: str) -> str:
    p = tmp_path / "r.yaml"
    p.write_text("name: r\nnodes:\n  - name: a\n" + textwrap.indent(node_keys, "    ") +
                 "  - name: b\nlinks:\n  - nodes: [a, b]\n")
    return str(p)


def test_yaml_keys_become_typed_fields(tmp_path):
    exp = yaml_spec.load_file(_yaml(tmp_path, "cpu: 0.25\nmemory: 64MB\npids: 100\n"
                                              "cpus: \"0\"\ncpu_weight: 200\n"))
    a = exp.nodes[0]
    assert (a.cpu_cores, a.memory_bytes, a.pids, a.cpus, a.cpu_weight) == \
        (0.25, 64 << 20, 100, "0", 200)
    assert exp.nodes[1].memory_bytes is None


@pytest.mark.parametrize("keys,msg", [
    ("memory: 0\n", "nodes[0].memory: memory 0 must be a positive"),
    ("memory: 12parsecs\n", "not understood"),
    ("cpu: -0.5\n", "negative"),
    (f"cpu: {NCPU + 1}\n", f"this machine has only {NCPU} CPUs"),
    (f"cpus: \"0-{NCPU}\"\n", "this machine has CPUs"),
    ("pids: 2\n", "pids 2 must be an integer in 8.."),
    ("cpu_weight: 0\n", "cpu_weight 0 must be"),
    ("memory: 1MB\n", "below the least"),
    ("cpux: 1\n", "unknown key"),
])
def test_yaml_bad_values_name_file_line_and_field(tmp_path, keys, msg):
    with pytest.raises(SpecError, match="r.yaml:[0-9]+: ") as e:
        yaml_spec.load_file(_yaml(tmp_path, keys))
    assert msg in str(e.value)


NS = """set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
set link0 [$ns duplex-link $a $b 10Mb 2ms DropTail]
{extra}
$ns run
"""


def test_ns_extension_commands_set_the_same_fields(tmp_path):
    p = tmp_path / "r.tcl"
    p.write_text(NS.format(extra="tb-set-node-cpu $a 0.25\ntb-set-node-memory $a 64MB\n"
                                 "tb-set-node-pids $a 64\ntb-set-node-cpus $a 0\n"
                                 "tb-set-node-cpu-weight $b 50"))
    a, b = ns.parse(str(p)).nodes
    assert (a.cpu_cores, a.memory_bytes, a.pids, a.cpus) == (0.25, 64 << 20, 64, "0")
    assert b.cpu_weight == 50


def test_ns_bad_value_names_the_commands_line(tmp_path):
    p = tmp_path / "r.tcl"
    p.write_text(NS.format(extra="tb-set-node-memory $a 64furlongs"))
    with pytest.raises(SpecError, match=r"r.tcl:6: .*furlongs.*not understood"):
        ns.parse(str(p))


def test_builder_keywords_and_their_errors():
    b = ExperimentBuilder("py")
    b.node("a", cpu=0.5, memory="32MB", pids=50)
    b.node("b")
    b.link("a", "b")
    a = b.build().nodes[0]
    assert (a.cpu_cores, a.memory_bytes, a.pids) == (0.5, 32 << 20, 50)
    with pytest.raises(SpecError, match=r"test_cgroups.py:\d+: memory: .*negative"):
        ExperimentBuilder("py").node("a", memory="-1MB")


def test_simulated_nodes_take_no_limits():
    b = ExperimentBuilder("py")
    b.node("a", kind="simulated", memory="32MB")
    with pytest.raises(SpecError, match="simulated in the engine"):
        b.build()


def test_limits_map_to_the_kernels_files():
    n = Node("a", cpu_cores=0.25, memory_bytes=64 << 20, cpus="0", cpu_weight=200)
    assert cgroups.settings(2, n, swap=True) == [
        ("cpu", "cpu.max", "25000 100000"), ("cpu", "cpu.weight", "200"),
        ("cpuset", "cpuset.cpus", "0"), ("memory", "memory.max", str(64 << 20)),
        ("memory", "memory.swap.max", "0"), ("pids", "pids.max", "4096")]
    assert cgroups.settings(1, Node("a", memory_bytes=1 << 30, pids=10), swap=False) == [
        ("memory", "memory.limit_in_bytes", str(1 << 30)), ("pids", "pids.max", "10")]
    assert ("cpu", "cpu.cfs_quota_us", "25000") in cgroups.settings(1, n, swap=False)


def test_on_cgroups_v2_the_controllers_are_passed_down_and_the_limits_written(tmp_path,
                                                                             monkeypatch):
    """This host is a v1 hybrid; the v2 sequence runs here on a fake tree whose new
    directories get the control files the kernel would make."""
    real_mkdir = os.mkdir

    def mkdir(d, *a):
        real_mkdir(d, *a)
        for f, v in (("cgroup.controllers", "cpu cpuset memory pids"),
                     ("cgroup.subtree_control", ""), ("cgroup.procs", ""), ("pids.max", "max")):
            (tmp_path / d / f).write_text(v)
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu cpuset io memory pids")
    (root / "cgroup.subtree_control").write_text("memory")
    monkeypatch.setattr(cgroups.os, "mkdir", mkdir)
    h = cgroups.Hierarchy(2, {c: str(root) for c in cgroups.V2_CONTROLLERS})
    top = h.dirs("ab12-exp")
    assert set(top.values()) == {str(root / "wanlab" / "ab12-exp")}
    cgroups.make_experiment(h, top)
    assert (root / "cgroup.subtree_control").read_text() == "+cpu +cpuset +pids"
    for d in (root / "wanlab", root / "wanlab" / "ab12-exp"):
        assert (d / "cgroup.subtree_control").read_text() == "+cpu +cpuset +memory +pids"
    # all nodes together weigh half a plain process (the engine ranks above them)
    assert (root / "wanlab" / "cpu.weight").read_text() == str(cgroups.NODES_CPU_WEIGHT)
    assert not (root / "wanlab" / "ab12-exp" / "cpu.weight").exists()
    # all nodes together, and one experiment, hold at most a share of the host's pids
    top_pids, exp_pids = cgroups.pids_limits()
    assert (root / "wanlab" / "pids.max").read_text() == str(top_pids)
    assert (root / "wanlab" / "ab12-exp" / "pids.max").read_text() == str(exp_pids)
    node = {c: os.path.join(d, "a") for c, d in top.items()}
    cgroups.make_node(h, node, Node("a", cpu_cores=0.5, memory_bytes=64 << 20, cpus="0"),
                      swap=True)
    a = root / "wanlab" / "ab12-exp" / "a"
    assert (a / "cpu.max").read_text() == "50000 100000"
    assert (a / "memory.max").read_text() == str(64 << 20)
    assert (a / "memory.swap.max").read_text() == "0"
    assert (a / "cpuset.cpus").read_text() == "0" and (a / "pids.max").read_text() == "4096"
    with pytest.raises(cgroups.Exists):
        cgroups.make_experiment(h, top)         # someone's: never taken over


def test_on_cgroups_v1_the_nodes_weight_is_in_cpu_shares(tmp_path):
    cgroups._weigh_nodes(1, str(tmp_path))
    assert (tmp_path / "cpu.shares").read_text() == str(cgroups.NODES_CPU_SHARES)
    assert cgroups.NODES_CPU_SHARES == cgroups.NODES_CPU_WEIGHT * 1024 // 100


def test_the_engines_real_time_priority_is_on_by_default_and_can_be_turned_off():
    from wanlab.backends.emulate.engine import RT_PRIORITY, rt_priority
    from wanlab.errors import EngineError
    assert rt_priority({}) == RT_PRIORITY > 0
    assert rt_priority({"WANLAB_ENGINE_RT": "off"}) == 0
    assert rt_priority({"WANLAB_ENGINE_RT": "0"}) == 0
    assert rt_priority({"WANLAB_ENGINE_RT": " 20 "}) == 20
    for bad in ("high", "41", "-1"):
        with pytest.raises(EngineError, match="WANLAB_ENGINE_RT"):
            rt_priority({"WANLAB_ENGINE_RT": bad})


def test_the_engines_receive_steering_is_off_by_default_and_can_be_turned_on():
    from wanlab.backends.emulate.engine import rps_args
    from wanlab.errors import EngineError
    assert rps_args({}) == []
    assert rps_args({"WANLAB_ENGINE_RPS": "off"}) == []
    assert rps_args({"WANLAB_ENGINE_RPS": " On "}) == ["--rps"]
    with pytest.raises(EngineError, match="WANLAB_ENGINE_RPS"):
        rps_args({"WANLAB_ENGINE_RPS": "sometimes"})


def test_a_node_without_a_cgroup_runs_its_command_as_it_is(tmp_path):
    assert cgroups.join_argv(str(tmp_path), "a", ["true"]) == ["true"]


# -- on the real kernel --------------------------------------------------------------------
needs_cgroups = pytest.mark.skipif(os.geteuid() != 0 or cgroups.hierarchy() is None,
                                   reason="needs root and cgroups (cpu, memory, pids)")


def _exp(name, **a_limits):
    b = ExperimentBuilder(name)
    b.node("a", **a_limits)
    b.node("b")
    b.link("a", "b")
    return b.build()


def _dirs(lab, name, node=None):
    row = lab.store.get(name)
    for r in lab.store.resources(row.id):
        if r.kind == "cgroup" and r.detail.get("node") == node:
            return r.detail["dirs"]
    raise AssertionError(f"no cgroup recorded for {node or 'the experiment'}")


def _members(dirs):
    return {p for d in set(dirs.values()) for p in cgroups.procs_in(d)}


def _all_recorded_dirs(lab, name):
    row = lab.store.get(name)
    return [d for r in lab.store.resources(row.id, live_only=False) if r.kind == "cgroup"
            for d in r.detail["dirs"].values()]


@needs_cgroups
def test_a_quarter_core_node_uses_at_most_a_quarter_core(lab):
    lab.create(_exp("cpu", cpu=0.25))
    dirs = _dirs(lab, "cpu", "a")
    busy = subprocess.Popen(lab.node_argv("cpu", "a", ["sh", "-c", "while :; do :; done"]))
    try:
        time.sleep(1.0)                               # let it reach its quota
        u0, t0 = cgroups.usage(dirs)["cpu_usec"], time.monotonic()
        time.sleep(3.0)
        u1, t1 = cgroups.usage(dirs)["cpu_usec"], time.monotonic()
        assert busy.poll() is None
        share = (u1 - u0) / 1e6 / (t1 - t0)
        print(f"busy loop under cpu 0.25: {share:.3f} cores")
        assert share <= 0.27, share       # the kernel enforces it; a loaded host gives less
        assert busy.pid in _members(dirs)
    finally:
        busy.kill()
        busy.wait()


@needs_cgroups
def test_a_node_over_its_memory_limit_is_oom_killed_and_the_event_names_it(lab):
    lab.create(_exp("mem", memory="64MB"))
    other = subprocess.Popen(lab.node_argv("mem", "b", ["sleep", "120"]))
    try:
        hog = lab.exec("mem", "a", ["python3", "-c", "b = bytearray(256 << 20)"],
                       capture_output=True, timeout=60)
        assert hog.returncode != 0               # SIGKILL by the kernel (status 137 / -9)
        deadline = time.monotonic() + 30
        while True:
            ooms = [e for e in lab.event_log("mem") if e["action"] == "oom"]
            if ooms or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert ooms and ooms[0]["target"] == "a" and ooms[0]["outcome"] == "oom-killed", \
            lab.event_log("mem")
        assert "memory limit" in ooms[0]["detail"]
        # the other node, the host and node a itself go on
        assert other.poll() is None
        assert lab.exec("mem", "a", ["true"]).returncode == 0
        assert subprocess.run(["true"]).returncode == 0
        assert lab.show("mem")["nodes"]["a"]["usage"]["oom_kills"] >= 1
    finally:
        other.kill()
        other.wait()


FORK_BOMB = """
import os, time
n = 0
while n < 10000:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.close(1)
        os.close(2)
        time.sleep(120)
        os._exit(0)
    n += 1
print(n, flush=True)
"""


@needs_cgroups
def test_the_pids_limit_stops_a_fork_bomb_and_teardown_removes_every_cgroup(lab):
    lab.create(_exp("pids", pids=32))
    dirs = _dirs(lab, "pids", "a")
    bomb = lab.exec("pids", "a", ["python3", "-c", FORK_BOMB], capture_output=True,
                    text=True, timeout=60)
    forked = int(bomb.stdout.split()[0])
    assert 0 < forked < 32, bomb
    assert cgroups.usage(dirs)["pids"] <= 32
    assert subprocess.run(["true"]).returncode == 0       # the host still forks
    assert lab.exec("pids", "b", ["true"]).returncode == 0  # and so does the other node
    recorded = _all_recorded_dirs(lab, "pids")
    assert recorded and all(os.path.isdir(d) for d in recorded)
    lab.terminate("pids")                   # the bomb's children still sleep in node a
    assert [d for d in recorded if os.path.exists(d)] == []


@needs_cgroups
def test_wanlab_and_each_experiment_have_a_pids_limit_below_the_hosts(lab):
    lab.create(_exp("pidtop"))
    exp = _dirs(lab, "pidtop")["pids"]
    top = os.path.dirname(exp)
    pid_max = cgroups.pid_max()
    with open(os.path.join(top, "pids.max")) as f:
        assert int(f.read()) <= pid_max // 2
    with open(os.path.join(exp, "pids.max")) as f:
        assert int(f.read()) <= pid_max // 4


@needs_cgroups
def test_every_process_of_a_node_is_in_its_cgroup(lab):
    b = ExperimentBuilder("all")
    b.node("a", startcmd="sleep 300")
    b.node("b")
    b.link("a", "b")
    lab.create(b.build())
    dirs = _dirs(lab, "all", "a")
    row = lab.store.get("all")
    procs = {r.name: r.detail["pid"] for r in lab.store.resources(row.id)
             if r.kind == "process" and r.detail.get("node") == "a"}
    # the start command joins the cgroup as its first act, which may be just after create
    # returns (CI once read the members in between)
    deadline = time.monotonic() + 5
    while procs["startcmd-a"] not in (members := _members(dirs)) and \
            time.monotonic() < deadline:
        time.sleep(0.01)
    assert procs["node-a"] in members and procs["startcmd-a"] in members, (procs, members)
    out = lab.exec("all", "a", ["cat", "/proc/self/cgroup"], capture_output=True, text=True)
    mine = {line.split(":", 2)[2] for line in out.stdout.splitlines()}
    assert any(p.endswith("/all/a") or p.endswith("-all/a") for p in mine), out.stdout
    assert lab.show("all")["nodes"]["a"]["usage"]["pids_max"] == cgroups.DEFAULT_PIDS
    lab.swapout("all")
    assert [d for d in _all_recorded_dirs(lab, "all") if os.path.exists(d)] == []


@needs_cgroups
def test_limits_are_refused_where_cgroups_are_missing(lab, monkeypatch):
    monkeypatch.setattr(cgroups, "hierarchy", lambda: None)
    with pytest.raises(WanlabError, match="no usable cgroups"):
        lab.create(_exp("none", memory="64MB"))
    lab.create(_exp("plain"))            # no limits asked: runs without cgroups
    assert lab.exec("plain", "a", ["true"]).returncode == 0


@needs_cgroups
def test_modify_changes_a_running_nodes_limits_and_gives_an_added_node_its_cgroup(lab):
    lab.create(_exp("mod", memory="64MB"))
    b = ExperimentBuilder("mod")
    b.node("a", memory="128MB", pids=100)
    b.node("b")
    b.node("c", cpu=0.5)
    b.link("a", "b")
    b.link("b", "c")
    lab.modify("mod", b.build())
    a, c = _dirs(lab, "mod", "a"), _dirs(lab, "mod", "c")
    assert cgroups.usage(a)["memory_max"] == 128 << 20
    assert cgroups.usage(a)["pids_max"] == 100
    assert cgroups.usage(c)["pids_max"] == cgroups.DEFAULT_PIDS
    assert lab.exec("mod", "c", ["true"]).returncode == 0
    recorded = _all_recorded_dirs(lab, "mod")
    lab.terminate("mod")
    assert [d for d in recorded if os.path.exists(d)] == []


# -- nodes on cores from the engine's placement (backends/emulate/cpuplace.py) -------------
def _parts(*cores_ports):
    return [{"partition": i, "core": c, "ports": ps} for i, (c, ps) in enumerate(cores_ports)]


def test_nodes_go_apart_from_the_engines_cores_when_there_are_cores_to_spare():
    d = cpuplace.decide(_parts((0, ["a0"]), (1, ["b0"])), {"a": ["a0"], "b": ["b0"]},
                        {0, 1, 2, 3})
    assert d.policy == "apart" and d.cpus == {"a": {2, 3}, "b": {2, 3}}, d
    assert "0-1" in d.why and "2-3" in d.why


def test_nodes_go_with_their_partitions_core_on_a_small_machine():
    parts = _parts((0, ["a0", "b1"]), (1, ["b0", "c0"]))
    d = cpuplace.decide(parts, {"a": ["a0"], "b": ["b0", "b1"], "c": ["c0"], "x": []}, {0, 1})
    assert d.policy == "with", d
    # a node whose TAPs two partitions read gets both cores; one without TAPs keeps all
    assert d.cpus == {"a": {0}, "b": {0, 1}, "c": {1}}, d
    # three engine cores and two spare: still with (fewer spare than engine cores)
    three = _parts((0, ["a0"]), (1, ["b0"]), (2, ["c0"]))
    assert cpuplace.decide(three, {"a": ["a0"]}, {0, 1, 2, 3, 4}).policy == "with"
    # forced apart with no spare CPU falls back to with
    assert cpuplace.decide(parts, {"a": ["a0"]}, {0, 1}, "apart").policy == "with"


def test_an_unpinned_engine_or_a_forced_none_places_nothing(monkeypatch):
    d = cpuplace.decide(_parts((None, ["a0"])), {"a": ["a0"]}, {0, 1})
    assert d.policy == "none" and d.cpus == {} and "not pinned" in d.why
    d = cpuplace.decide(_parts((0, ["a0"]), (1, [])), {"a": ["a0"]}, {0, 1, 2, 3}, "none")
    assert d.policy == "none" and d.cpus == {}
    monkeypatch.setenv(cpuplace.ENV, "sideways")
    with pytest.raises(WanlabError, match="WANLAB_NODE_CPUS"):
        cpuplace.forced()


def test_cpu_lists_are_written_as_the_kernel_writes_them():
    assert cpuplace.cpulist({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert cpuplace.cpulist([3]) == "3"


def _allowed(lab, name, node):
    out = lab.exec(name, node, ["grep", "Cpus_allowed_list", "/proc/self/status"],
                   capture_output=True, text=True)
    return out.stdout.split()[-1]


@needs_cgroups
@pytest.mark.skipif(NCPU < 2, reason="needs two CPUs for two pinned engine threads")
def test_nodes_run_on_the_cores_the_engines_placement_gives_them(lab):
    b = ExperimentBuilder("cores")
    b.engine(threads=2)
    b.node("a")
    b.node("b")
    b.node("c", cpus=str(max(machine_cpus())))
    b.link("a", "b", name="l0")
    b.link("b", "c", name="l1")
    lab.create(b.build())
    info = lab.show("cores")
    parts = info["stats"]["partitions"]
    core_of = {port: p["core"] for p in parts for port in p["ports"]}
    engine = {p["core"] for p in parts}
    assert None not in engine and len(engine) == 2, parts
    spare = machine_cpus() - engine
    for node in ("a", "b"):
        usage = info["nodes"][node]["usage"]
        got = cgroups.cpus_of(_dirs(lab, "cores", node))
        if len(spare) >= len(engine):
            want, policy = cpuplace.cpulist(spare), "apart"
        else:
            mine = {c for p, c in core_of.items() if p.split(":")[0] == node}
            assert mine, (node, parts)
            want = cpuplace.cpulist(mine)
            policy = "with"
        assert (got, usage["cpus"], usage["cpus_policy"]) == (want, want, policy), \
            (node, got, usage, parts)
        # a process inside the node is confined to them
        assert _allowed(lab, "cores", node) == want
    # the node that names its CPUs keeps them
    own = str(max(machine_cpus()))
    assert cgroups.cpus_of(_dirs(lab, "cores", "c")) == own
    assert _allowed(lab, "cores", "c") == own
    assert info["nodes"]["c"]["usage"]["cpus_policy"] == "own"
    log = open(os.path.join(info["folder"], "engine.log")).read()
    assert "placement: partition 1" in log
    lab.terminate("cores")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_an_engine_busy_all_the_time_drops_to_normal_priority_and_back(lab):
    """At real-time priority a partition that never sleeps (here a simulated flood far
    beyond one core) would leave the other tasks of its core 5 % (RT throttling): it is
    lowered after a busy second and raised again once the work is gone."""
    b = ExperimentBuilder("busy")
    b.engine(threads=1)
    a, r = b.node("a"), b.node("r", kind="simulated")
    b.link(a, r, bandwidth="100Mb", delay="1ms")
    for i in range(100):
        s, d = b.node(f"s{i}", kind="simulated"), b.node(f"d{i}", kind="simulated")
        b.link(s, d, bandwidth="100Mb", delay="1ms")
        u = b.agent("Agent/UDP", node=s, name=f"u{i}")
        b.connect(u, b.agent("Agent/Null", node=d, name=f"n{i}"))
        b.agent("Application/Traffic/CBR", attached=u, name=f"c{i}",
                params={"packetSize_": 100, "rate_": 20_000_000})
    lab.create(b.build())
    log = os.path.join(lab.store.folder("busy"), "engine.log")

    def rt(c):
        return c.call("stats")["realtime"]

    def wait(c, ok, what, timeout=15.0):
        deadline = time.monotonic() + timeout
        while not ok(got := rt(c)):
            assert time.monotonic() < deadline, f"{what}: {got}"
            time.sleep(0.2)
        return got

    with lab.engine("busy") as c:
        prio = rt(c)["rt_priority"]
        assert prio > 0 and rt(c)["rt_lowerings"] == 0
        for i in range(100):
            c.call("agent", agent=f"c{i}", action="start")
        wait(c, lambda s: s["rt_priority"] == 0 and s["rt_lowerings"] == 1, "not lowered")
        with open(log) as f:
            assert "at normal priority until" in f.read()
        for i in range(100):
            c.call("agent", agent=f"c{i}", action="stop")
        wait(c, lambda s: s["rt_priority"] == prio, "not raised again")
    with open(log) as f:
        assert f"back at real-time priority {prio}" in f.read()


# -- the engine's cores (cpuplace.engine_cores) ---------------------------------------------
def test_the_engine_gets_a_core_per_thread_by_default_when_the_machine_has_them():
    mine, why = cpuplace.engine_cores(None, 1, {0, 1})
    assert mine == {1} and "default" in why and "nodes on CPUs 0" in why
    assert cpuplace.engine_cores(None, 2, {0, 1, 2, 3})[0] == {2, 3}
    # too few CPUs for the engine's threads and as many nodes' ones: none (as before)
    assert cpuplace.engine_cores(None, 1, {0})[0] == set()
    assert cpuplace.engine_cores(None, 2, {0, 1, 2})[0] == set()
    # a forced with/none measures the old placements: no default reservation
    for policy in ("with", "none"):
        assert cpuplace.engine_cores(None, 1, {0, 1}, policy)[0] == set()
    # the description's count wins: N last CPUs, or none
    assert cpuplace.engine_cores(2, 1, {0, 1, 2, 3}, "with")[0] == {2, 3}
    assert cpuplace.engine_cores(0, 1, {0, 1})[0] == set()
    with pytest.raises(WanlabError, match=r"engine\.cores: 2 CPUs .* only 2"):
        cpuplace.engine_cores(2, 1, {0, 1})


def test_nodes_keep_off_the_cpus_reserved_for_the_engine():
    d = cpuplace.decide(_parts((1, ["a0"])), {"a": ["a0"], "b": []}, {0, 1}, reserved={1})
    assert d.policy == "apart" and d.cpus == {"a": {0}, "b": {0}}, d
    assert "reserved for the engine" in d.why
    # whatever the forced policy; reserved CPUs beyond the partitions' count too
    d = cpuplace.decide(_parts((3, ["a0"])), {"a": ["a0"]}, {0, 1, 2, 3}, "with",
                        reserved={2, 3})
    assert d.policy == "apart" and d.cpus == {"a": {0, 1}}, d


def test_engine_cores_from_yaml_builder_and_ns_and_too_many_named(tmp_path):
    base = "name: t\nnodes: [a, b]\nlinks: [{name: l, nodes: [a, b]}]\nengine: {cores: %s}\n"
    assert yaml_spec.loads(base % 0).engine_cores == 0
    assert yaml_spec.loads("name: t\nnodes: [a]\n").engine_cores is None
    with pytest.raises(SpecError, match=rf":4: engine\.cores: engine cores {NCPU}: .*at least "
                                        "one"):
        yaml_spec.loads(base % NCPU)
    b = ExperimentBuilder("t")
    with pytest.raises(SpecError, match="engine cores") as e:
        b.engine(cores=NCPU)
    assert e.value.field == "engine.cores"
    tcl = tmp_path / "e.ns"
    tcl.write_text("set ns [new Simulator]\nsource tb_compat.tcl\nset a [$ns node]\n"
                   f"tb-set-engine-cores {NCPU}\n$ns run\n")
    with pytest.raises(SpecError, match=r"e\.ns:4: tb-set-engine-cores: engine cores"):
        ns.parse(str(tcl))
    if NCPU >= 2:
        tcl.write_text("set ns [new Simulator]\nsource tb_compat.tcl\nset a [$ns node]\n"
                       "tb-set-engine-cores 1\n$ns run\n")
        assert ns.parse(str(tcl)).engine_cores == 1
    from wanlab.backends.emulate.engine import threads_for
    assert threads_for(-1, 10, cores=1) == 1 and threads_for(0, 10, cores=1) == 1


def _engine_pid(lab, name):
    row = lab.store.get(name)
    return next(r.detail["pid"] for r in lab.store.resources(row.id) if r.kind == "engine")


def _tasks_cpus(pid):
    out = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            out |= {ln.split()[-1] for ln in f if ln.startswith("Cpus_allowed_list")}
    return out


@needs_cgroups
@pytest.mark.skipif(NCPU < 2, reason="needs a CPU for the engine and one for the nodes")
def test_the_default_places_the_engine_on_its_own_core_and_the_nodes_off_it(lab):
    """One engine thread (the default) on a machine with two CPUs or more: the engine is
    confined and pinned to the last CPU, every node's cgroup (and a process in it) to the
    others, the show says so; and every frame written to a TAP has its departure measured."""
    from wanlab.site import show_text
    b = ExperimentBuilder("own")
    for n in ("a", "b", "c"):
        b.node(n)
    b.link("a", "b", name="l0", delay="1ms")
    b.link("b", "c", name="l1")
    lab.create(b.build())
    assert len(ping_rtts(lab, "own", "a", "c-l1", count=5, interval=0.02)) == 5
    info = lab.show("own")
    engine_cpu = str(max(machine_cpus()))
    nodes_cpus = cpuplace.cpulist(machine_cpus() - {int(engine_cpu)})
    assert info["engine"]["cpus"] == engine_cpu and "default" in info["engine"]["cpus_why"]
    assert [p["core"] for p in info["stats"]["partitions"]] == [int(engine_cpu)]
    pid = _engine_pid(lab, "own")
    assert _tasks_cpus(pid) == {engine_cpu}
    # at real-time priority there, as the kernel sees it (where throttling lets it be)
    with open("/proc/sys/kernel/sched_rt_runtime_us") as f:
        throttled = int(f.read()) >= 0
    if throttled and not os.environ.get("WANLAB_ENGINE_RT"):
        assert info["stats"]["realtime"]["rt_priority"] > 0
        policies = {os.sched_getscheduler(int(t)) & ~os.SCHED_RESET_ON_FORK
                    for t in os.listdir(f"/proc/{pid}/task")}
        assert os.SCHED_RR in policies, policies
    for node in ("a", "b", "c"):
        assert cgroups.cpus_of(_dirs(lab, "own", node)) == nodes_cpus
        assert info["nodes"][node]["usage"]["cpus_policy"] == "apart"
        assert _allowed(lab, "own", node) == nodes_cpus
    text = "\n".join(show_text.local_lines(info))
    assert f"engine on CPUs {engine_cpu} (the default" in text
    assert f"on CPUs {nodes_cpus} (apart)" in text
    # departures: one per frame a link delivered to a TAP (each direction's out_pkts)
    st = info["stats"]
    written = sum(st["links"][k][d]["out_pkts"] for k in ("l0", "l1") for d in ("ab", "ba"))
    dep = st["realtime"]["departure"]
    assert written >= 20 and dep["count"] == written, (written, dep)
    assert 0 <= dep["p50_us"] <= dep["p99_us"] <= dep["max_us"], dep
    assert "departure lateness: p50" in text
