"""Run an experiment as a pure simulation and keep its results.

``simulate(exp)`` builds the scenario (:mod:`wanlab.backends.simulate.scenario`), runs
``wanlab-engine simulate`` on it and writes, in the output folder:

* ``scenario.json`` — what the engine ran; ``result.json`` — what it returned (the
  trace of the run: byte for byte the same for the same spec and seed);
* ``summary.json`` — the event log, per-flow results in the same form as an emulated
  run's (``wanlab flows``), per-link statistics, and the engine's speed;
* ``traces/`` — pcap captures requested by ``trace`` events, and ``<app>-cwnd.csv``
  for TCP flows; ``plots/`` — throughput (and cwnd) over time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable
from typing import Any

from wanlab.backends.simulate.scenario import NS, Scenario, build
from wanlab.engine.binary import engine_binary
from wanlab.engine.protocol import CaptureStart
from wanlab.errors import WanlabError
from wanlab.model.ir import Experiment

SAMPLE_S = 0.1


def simulate(exp: Experiment, out: str, seed: int | None = None,
             duration_s: float | None = None, plot: bool = True,
             threads: int = 1,
             engine: Callable[[dict, str, str], str] | None = None) -> dict[str, Any]:
    """Simulate ``exp`` in virtual time on up to ``threads`` threads (the engine partitions
    the topology; the result does not depend on it); returns the summary (also in
    out/summary.json). ``engine(doc, scenario_path, result_path)``, if given, runs the
    scenario instead of one local engine (e.g. one engine per machine of a cluster: see
    :mod:`wanlab.cluster.simulate`) and returns the coordinating engine's log."""
    if not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= 1024:
        raise WanlabError(f"threads: must be an integer from 1 to 1024, got {threads!r}")
    seed = exp.seed if seed is None else seed
    os.makedirs(out, exist_ok=True)
    traces = os.path.join(out, "traces")
    os.makedirs(traces, exist_ok=True)
    sc = build(exp, traces, duration_s)
    scen_path, res_path = os.path.join(out, "scenario.json"), os.path.join(out, "result.json")
    doc = sc.engine_json(seed, SAMPLE_S)
    # The engine never overwrites a capture: remove this run's own earlier ones.
    for _, r in sc.requests:
        if isinstance(r, CaptureStart) and os.path.isfile(r.path):
            os.unlink(r.path)
    with open(scen_path, "w") as f:
        json.dump(doc, f, indent=1)
    t0 = time.monotonic()
    if engine is not None:
        stderr = engine(doc, scen_path, res_path)
    else:
        p = subprocess.run([engine_binary(), "simulate", scen_path, "--out", res_path,
                            "--threads", str(threads)], capture_output=True, text=True)
        if p.returncode != 0:
            raise WanlabError(f"the simulation of {exp.name} failed: "
                              f"{(p.stderr or p.stdout).strip()[-2000:]}")
        stderr = p.stderr
    wall = time.monotonic() - t0
    with open(res_path) as f:
        result = json.load(f)
    m = re.search(r"in ([\d.]+) s wall time", stderr)
    summary = summarize(sc, result, seed, wall)
    # the engine's own time for the run (without reading and writing JSON): ns-3's Run()
    summary["engine"]["run_wall_s"] = float(m.group(1)) if m else None
    # how it ran: partitions actually used, lookahead and synchronisation windows
    m = re.search(r"(\d+) (thread|engine)\(s\)(?: with (\d+) thread\(s\))?, lookahead "
                  r"(\d+) ns, (\d+) windows", stderr)
    if m:
        # threads of one engine, or engine processes (one per machine) of a cluster run
        # and their threads in all (lookahead and windows: between the engines)
        how = {"threads": int(m.group(1))} if m.group(2) == "thread" else \
            {"engines": int(m.group(1)), "threads": int(m.group(3) or m.group(1))}
        summary["engine"].update(how, lookahead_ns=int(m.group(4)), windows=int(m.group(5)))
    for app, rows in summary.pop("_cwnd").items():
        with open(os.path.join(traces, f"{app}-cwnd.csv"), "w") as f:
            f.write("time_s,cwnd_pkts,ssthresh_pkts,srtt_ms,acked_bytes,retransmits\n")
            for r in rows:
                f.write(",".join("" if v is None else f"{v:g}" for v in r) + "\n")
    if plot and summary["flows"]:
        from wanlab.report.plots import plot_flows
        summary["plots"] = plot_flows(summary["flows"], summary["events"],
                                      os.path.join(out, "plots"), f"{exp.name} (simulated)")
    summary["folder"] = out
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return summary


def _agents_at(result: dict[str, Any]) -> dict[tuple[int, str], dict[str, Any]]:
    """Agent stats from the `stats` replies, by (time, agent)."""
    out = {}
    for r in result.get("replies", []):
        if r.get("cmd") == "stats":
            for name, st in (r.get("agents") or {}).items():
                out[(r["at_ns"], name)] = st
    return out


def summarize(sc: Scenario, result: dict[str, Any], seed: int, wall: float) -> dict[str, Any]:
    at = _agents_at(result)
    samples = result.get("samples", [])
    traces = result.get("traces", {})
    flows, cwnd_rows = [], {}
    for w in sc.windows:
        f = sc.flows[w.app]
        t_start, t_stop = round(w.start_s * NS), round((w.stop_s or sc.until_s) * NS)
        s0, s1 = at.get((t_start, f.sink_id), {}), at.get((t_stop, f.sink_id), {})
        a0, a1 = at.get((t_start, w.app), {}), at.get((t_stop, w.app), {})
        d = lambda a, b, k: (b.get(k) or 0) - (a.get(k) or 0)   # noqa: E731
        series, prev = [], s0.get("bytes") or 0
        for s in samples:
            if t_start < s["t_ns"] <= t_stop:
                b = ((s.get("agents") or {}).get(f.sink_id) or {}).get("bytes") or 0
                series.append([round((s["t_ns"] - t_start) / NS, 6), (b - prev) * 8 / SAMPLE_S])
                prev = b
        res: dict[str, Any] = {"simulated": True, "bytes": d(s0, s1, "bytes"),
                               "sent_bytes": d(a0, a1, "sent_bytes"), "throughput_bps": series}
        if f.kind == "tcp":
            # (1000: the engine's MSS when the description sets none)
            res.update(kind="ftp", cc=f.transport.cc, mss=f.transport.mss or 1000,
                       packets=d(s0, s1, "pkts"),
                       sent_packets=d(a0, a1, "sent_pkts"),
                       retransmits=d(a0, a1, "retransmits"), timeouts=d(a0, a1, "timeouts"),
                       srtt_us=a1.get("srtt_us"), cwnd_final=a1.get("cwnd"))
            rows = [[(t - t_start) / NS, c, ss, None if rtt is None else rtt / 1000, acked, rx]
                    for t, c, ss, rtt, acked, rx in traces.get(w.app, []) if t_start <= t <= t_stop]
            res["cwnd"] = [[r[0], r[1]] for r in rows]
            cwnd_rows.setdefault(w.app, []).extend(rows)
        else:
            pk, lost = d(s0, s1, "pkts"), d(s0, s1, "lost")
            # flowstats' definition, as wanlab-gen's: lost / expected (duplicates count once)
            expected = d(s0, s1, "expected")
            res.update(kind=f.kind, packets=pk, sent_packets=d(a0, a1, "sent_pkts"), lost=lost,
                       loss_ratio=lost / expected if expected else 0,
                       owd_avg_us=s1.get("owd_avg_us"))
        flows.append({"agent": w.app, "kind": res["kind"], "started_s": w.start_s,
                      "stopped_s": w.stop_s if w.stop_s is not None else sc.until_s,
                      "result": res})
    stats = result.get("stats", {})
    events = [{"time_s": e.time_s, "fired_s": e.time_s if e.outcome == "ok" else None,
               "target": e.target, "action": e.action, "args": list(e.args),
               "outcome": e.outcome, "detail": e.detail, "origin": "timeline"}
              for e in sc.events]
    n_events = result.get("events", 0)
    return {"name": sc.exp.name, "mode": "simulate", "seed": seed, "until_s": sc.until_s,
            "warnings": sc.plan.warnings, "events": events, "flows": flows,
            "links": stats.get("links", {}), "lans": stats.get("lans", {}),
            "engine": {"events": n_events, "wall_s": round(wall, 3),
                       "events_per_s": round(n_events / wall) if wall > 0 else None,
                       "speedup": round(sc.until_s / wall, 1) if wall > 0 else None},
            "_cwnd": cwnd_rows}
