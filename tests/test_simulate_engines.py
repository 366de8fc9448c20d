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


def _loopback(exp, machines, placed):
    """The cluster's engine hook with engines as local processes on 127.0.0.1."""
    def run(doc, scen_path, res_path):
        where = csim.place(exp, machines)
        used = sorted(set(where.values()))
        placed.update(where)
        doc["partition"] = {n: used.index(m) for n, m in where.items()}
        with open(scen_path, "w") as f:
            json.dump(doc, f)
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = []
        for r in range(len(used)):
            out = [] if r else ["--out", res_path]
            procs.append(subprocess.Popen(
                [engine_binary(), "simulate", scen_path, *out, "--rank", str(r), "--ranks",
                 str(len(used)), "--listen" if r == 0 else "--connect",
                 f"127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True))
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
