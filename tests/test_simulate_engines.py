"""Parallel simulation over several engine processes (the cluster's way, without Ray):
engines on loopback, placed by the cluster's placement, give the single engine's bytes;
what cannot be cut or run that way is refused by name. The cluster itself:
tests/test_cluster.py."""

from __future__ import annotations

import dataclasses
import filecmp
import json
import subprocess

import pytest
from test_simulate_parallel import THREE_SITES

from wanlab.backends.simulate.runner import simulate
from wanlab.cluster import sim_engine
from wanlab.cluster import simulate as csim
from wanlab.engine.binary import engine_binary
from wanlab.errors import WanlabError
from wanlab.frontends import load
from wanlab.model.ir import LinkParams
from wanlab.plan.placement import Machine

MACHINES = [Machine("m0", 1.0), Machine("m1", 1.0), Machine("m2", 1.0)]


def _spec(tmp_path):
    p = tmp_path / "three.tcl"
    p.write_text(THREE_SITES)
    spec = load(str(p))
    core = next(lk for lk in spec.links if lk.name == "core12")
    lossy = LinkParams(bandwidth_bps=8_000_000, delay_s=0.015, loss=0.02)
    return dataclasses.replace(spec, links=tuple(
        dataclasses.replace(lk, ab=lossy) if lk is core else lk for lk in spec.links))


def _loopback(exp, machines, placed, threads=None):
    """The cluster's engine hook with engines as local processes on 127.0.0.1 (each on
    the threads the cluster would give it: ``threads`` as ``--threads``)."""
    def run(doc, scen_path, res_path):
        where = csim.place(exp, machines)
        used = sorted(set(where.values()))
        placed.update(where)
        doc["partition"] = {n: used.index(m) for n, m in where.items()}
        per_machine = csim.engine_threads(exp, [m for m in machines if m.name in used],
                                          threads)
        csim.set_threads(doc, per_machine)
        with open(scen_path, "w") as f:
            json.dump(doc, f)
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = []
        for r, argv in enumerate(csim.engine_argvs(per_machine, f"127.0.0.1:{port}")):
            sim_engine._check_argv(argv)        # what an agent would let through
            out = [] if r else ["--out", res_path]
            procs.append(subprocess.Popen(
                [engine_binary(), "simulate", scen_path, *out, *argv],
                stderr=subprocess.PIPE, text=True))
        errs = [p.communicate(timeout=300)[1] for p in procs]
        assert all(p.returncode == 0 for p in procs), errs
        return errs[0]
    return run


def test_engines_on_loopback_give_the_bytes_of_one_engine(tmp_path):
    spec = _spec(tmp_path)
    one = simulate(spec, str(tmp_path / "one"), seed=5, plot=False)
    placed: dict[str, str] = {}
    many = simulate(spec, str(tmp_path / "many"), seed=5, plot=False,
                    engine=_loopback(spec, MACHINES, placed))
    # really spread (a site per machine: the long core links are the cheap cuts) …
    assert len(set(placed.values())) == 3, placed
    assert {placed["r-0"], placed["h-0-0"], placed["h-0-1"]} == {placed["r-0"]}
    assert many["engine"]["engines"] == 3
    assert many["engine"]["lookahead_ns"] == 15_000_000
    # … and the same bytes
    assert filecmp.cmp(tmp_path / "one" / "result.json", tmp_path / "many" / "result.json",
                       shallow=False)
    assert one["flows"] == many["flows"]


@pytest.mark.parametrize("machines,threads", [(1, 2), (2, 1), (2, 2), (3, 2)])
def test_engines_on_threads_give_the_bytes_of_one_engine(tmp_path, machines, threads):
    """Each machine's engine cuts its part over its threads, which synchronise among
    themselves within the windows over TCP: still the single engine's bytes."""
    spec = _spec(tmp_path)
    simulate(spec, str(tmp_path / "one"), seed=5, plot=False)
    placed: dict[str, str] = {}
    many = simulate(spec, str(tmp_path / "many"), seed=5, plot=False,
                    engine=_loopback(spec, MACHINES[:machines], placed, threads))
    assert len(set(placed.values())) == machines, placed
    e = many["engine"]
    # every machine's part (a site or more: three nodes at least) is cut over its threads
    assert e["threads"] == machines * threads, e
    assert e.get("engines", 1) == machines, e
    if machines > 1:
        assert json.loads((tmp_path / "many" / "scenario.json").read_text()).get(
            "rank_threads", [1] * machines) == [threads] * machines
    assert filecmp.cmp(tmp_path / "one" / "result.json", tmp_path / "many" / "result.json",
                       shallow=False)


def test_the_threads_of_each_machines_engine(tmp_path):
    """--threads N, else the spec's engine threads (auto: the machine's cores), else 1."""
    spec = _spec(tmp_path)
    ms = [Machine("a", 4.0), Machine("b", 2.0)]
    assert csim.engine_threads(spec, ms) == [1, 1]
    assert csim.engine_threads(spec, ms, 3) == [3, 3]
    assert csim.engine_threads(spec, ms, -1) == [4, 2]
    assert csim.engine_threads(dataclasses.replace(spec, engine_threads=2), ms) == [2, 2]
    assert csim.engine_threads(dataclasses.replace(spec, engine_threads=-1), ms) == [4, 2]
    assert csim.engine_threads(dataclasses.replace(spec, engine_threads=2), ms, 1) == [1, 1]
    with pytest.raises(WanlabError, match="threads: a number from 1 to 1024 or auto"):
        csim.engine_threads(spec, ms, 0)
    doc: dict = {}
    csim.set_threads(doc, [1, 1])
    assert "rank_threads" not in doc          # the scenario of one thread per engine
    csim.set_threads(doc, [4, 2])
    assert doc["rank_threads"] == [4, 2]
    assert csim.engine_argvs([3], "h:1") == [["--threads", "3"]]
    assert csim.engine_argvs([1], "h:1") == [[]]


def test_threads_on_the_engines_command_line_are_refused_with_ranks(tmp_path):
    """Every engine must know every other's partitions: threads come in the scenario."""
    p = tmp_path / "s.json"
    p.write_text('{"until_ns": 1000}')
    r = subprocess.run([engine_binary(), "simulate", str(p), "--threads", "2", "--rank",
                        "1", "--ranks", "2", "--connect", "127.0.0.1:1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "rank_threads" in r.stderr, r.stderr
    p.write_text('{"until_ns": 1000, "rank_threads": [2]}')
    r = subprocess.run([engine_binary(), "simulate", str(p), "--rank", "1", "--ranks", "2",
                        "--connect", "127.0.0.1:1"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "rank_threads: 1 values for 2 engines" in r.stderr, r.stderr


def test_links_without_delay_and_lans_stay_on_one_machine(tmp_path):
    spec = _spec(tmp_path)
    zero = LinkParams(bandwidth_bps=5_000_000, delay_s=0.0)
    core = next(lk for lk in spec.links if lk.name == "core01")
    spec0 = dataclasses.replace(spec, links=tuple(
        dataclasses.replace(lk, ab=zero, ba=zero) if lk is core else lk
        for lk in spec.links))
    where = csim.place(spec0, MACHINES)
    assert where["r-0"] == where["r-1"]
    # pinned apart, a zero-delay link is refused by name
    nodes = tuple(dataclasses.replace(n, fixed={"r-0": "m0", "r-1": "m1"}.get(n.name))
                  for n in spec0.nodes)
    with pytest.raises(WanlabError, match=r"core01 .*no lookahead.*pinned"):
        csim.place(dataclasses.replace(spec0, nodes=nodes), MACHINES)


def test_a_zero_delay_cut_given_to_the_engines_is_refused_by_name(tmp_path):
    spec = _spec(tmp_path)
    spec = dataclasses.replace(spec, links=tuple(
        dataclasses.replace(lk, ab=LinkParams(bandwidth_bps=5_000_000),
                            ba=LinkParams(bandwidth_bps=5_000_000))
        if lk.name == "core01" else lk for lk in spec.links))

    def run(doc, scen_path, res_path):
        doc["partition"] = {n: 0 if n.startswith(("r-0", "h-0")) else 1
                            for n in (x.name for x in spec.nodes)}
        with open(scen_path, "w") as f:
            json.dump(doc, f)
        p = subprocess.run([engine_binary(), "simulate", scen_path, "--rank", "1",
                            "--ranks", "2", "--connect", "127.0.0.1:1"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 1
        raise WanlabError(p.stderr.strip())
    with pytest.raises(WanlabError, match=r"link core01 between r-0 \(partition 0\) and "
                       r"r-1 \(partition 1\) has no delay, so it gives no lookahead"):
        simulate(spec, str(tmp_path / "z"), seed=5, plot=False, engine=run)


def test_the_cluster_flag_needs_a_cluster(tmp_path):
    import os
    import sys

    from conftest import ROOT
    p = tmp_path / "three.tcl"
    p.write_text(THREE_SITES)
    r = subprocess.run([sys.executable, "-m", "wanlab.cli", "run", str(p), "--simulate",
                        "--cluster"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "WANLAB_HOME": str(tmp_path / "home"),
                            "PYTHONPATH": ROOT})
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert "no cluster is up" in r.stderr, r.stderr


def test_only_rank_arguments_reach_an_agents_engine(tmp_path):
    with pytest.raises(WanlabError, match="not the arguments"):
        sim_engine.run_engine_here(str(tmp_path), "run-1", "{}", ["--out", "/etc/passwd"])
    with pytest.raises(WanlabError, match="not the arguments"):
        sim_engine.run_engine_here(str(tmp_path), "run-1", "{}", ["--threads", "-o/x"])
    with pytest.raises(WanlabError, match="not a plain name"):
        sim_engine.run_engine_here(str(tmp_path), "../x", "{}", [])


def test_what_cannot_be_cut_runs_whole_on_one_machine(tmp_path):
    from wanlab.backends.simulate.scenario import build
    spec = _spec(tmp_path)
    zero = LinkParams(bandwidth_bps=5_000_000)
    spec = dataclasses.replace(spec, links=tuple(
        dataclasses.replace(lk, ab=zero, ba=zero) for lk in spec.links))
    assert len(set(csim.place(spec, MACHINES).values())) == 1
    # ... and an agent's engine without rank arguments runs the whole scenario
    doc = build(spec, str(tmp_path / "traces"), None).engine_json(5, 0.1)
    out = sim_engine.run_engine_here(str(tmp_path / "m0"), "sim-1-0", json.dumps(doc), [])
    assert out["rc"] == 0 and json.loads(out["result"])["seed"] == 5, out["stderr"]
    assert not (tmp_path / "m0" / "sims" / "sim-1-0").exists()
