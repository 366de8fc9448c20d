"""Virtual-time speed of sim_scale's simulated part: the engine's own cost of N simulated
hosts in N/2 CBR pairs, without real-time lateness or the live flow.

The topology is bench/sim_scale.py's without its emulated nodes: N/2 pairs of simulated
hosts, each pair on its own 2 Mbit/s, 50 ms link, each source sending RATE bit/s of
1000-byte payloads (64 000 bit/s: 8 packets/s per pair, 400 000 packets/s at N = 100 000).
The sources start spread over the first period (as sim_scale's start them one by one).
Every engine given with ``--engine`` runs the scenario (``wanlab-engine simulate``) twice
on each ``--threads`` count: for WARM simulated seconds and for WARM + DURATION; the
difference of the two (wall time, timer events, packets delivered) is the steady state
without the topology's `apply` and the result's output. The table gives the steady
state's timer events and simulated packets per wall second, and the real-time factor
(simulated packets per wall second / packets offered per simulated second: at least 1 is
what real time needs of the simulated part alone). The result.json of every engine and
thread count must be the same, byte for byte (checked and reported).

    python3 bench/sim_scale_virtual.py --nodes 20000,100000 --duration 5 \
        --engine main=/work/wt/bin/wanlab-engine --engine new=target/release/wanlab-engine

Results: bench/results/sim-scale-virtual-latest.md and .json.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from wanlab.backends.simulate.scenario import build  # noqa: E402
from wanlab.frontends.builder import ExperimentBuilder  # noqa: E402

PAYLOAD = 1000


def scenario(n_nodes: int, rate: int, duration: float, seed: int = 1) -> dict:
    """The engine scenario of N simulated hosts in CBR pairs (starts spread over one
    period; stats sampled once per simulated second). The starts are written as engine
    requests here: N/2 timeline events would cost the IR's event check time quadratic in
    their number (each looks its application up in a list)."""
    b = ExperimentBuilder(f"vscale{n_nodes}")
    pairs = n_nodes // 2
    period = PAYLOAD * 8 / rate
    for i in range(pairs):
        s, d = b.node(f"s{i}", kind="simulated"), b.node(f"d{i}", kind="simulated")
        b.link(s, d, bandwidth="2Mb", delay="50ms")
        u = b.agent("Agent/UDP", node=s, name=f"u{i}")
        n = b.agent("Agent/Null", node=d, name=f"n{i}")
        b.connect(u, n)
        b.agent("Application/Traffic/CBR", attached=u, name=f"c{i}",
                params={"packetSize_": PAYLOAD, "rate_": rate})
    b.at(duration, "ns", "halt")
    exp = b.build()
    with tempfile.TemporaryDirectory() as d:
        sc = build(exp, d, duration)
    doc = sc.engine_json(seed, 1.0)
    doc["requests"] += [{"at_ns": round(period * i / max(1, pairs) * 1e9), "cmd": "agent",
                         "agent": f"c{i}", "action": "start"} for i in range(pairs)]
    doc["requests"].sort(key=lambda r: r["at_ns"])      # stable: apply first at 0
    return doc


def run(engine: str, path: str, out: str, threads: int) -> dict:
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([engine, "simulate", path, "--out", out, "--threads", str(threads)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{engine} failed: {p.stderr.strip()[-1000:]}")
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime
    m = re.search(r"in ([\d.]+) s wall time", p.stderr)
    with open(out, "rb") as f:
        raw = f.read()
    res = json.loads(raw)
    agents = (res.get("stats") or {}).get("agents") or {}
    delivered = sum(a.get("pkts", 0) for k, a in agents.items() if a.get("kind") == "sink")
    return {"run_wall_s": float(m.group(1)) if m else None, "cpu_s": cpu,
            "events": res.get("events"),
            "delivered": delivered, "sha256": hashlib.sha256(raw).hexdigest(),
            "stderr_tail": p.stderr.strip().splitlines()[-1:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="20000,100000")
    ap.add_argument("--rate", type=int, default=64000)
    ap.add_argument("--duration", type=float, default=5.0,
                    help="simulated s measured (after the warm-up)")
    ap.add_argument("--warm", type=float, default=1.0, help="simulated s of warm-up")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--engine", action="append", default=[],
                    help="NAME=PATH of an engine binary (repeatable)")
    ap.add_argument("--keep", help="folder for the scenarios and results (default: temporary); "
                    "a scenario already there is reused")
    a = ap.parse_args()
    engines = [e.split("=", 1) for e in a.engine] or \
        [["build", os.path.join(ROOT, "target", "release", "wanlab-engine")]]
    work = a.keep or tempfile.mkdtemp(prefix="sim-scale-virtual-")
    os.makedirs(work, exist_ok=True)
    rows = []
    load = [os.getloadavg()]
    for n in [int(x) for x in a.nodes.split(",")]:
        path = os.path.join(work, f"scenario-{n}-{a.rate}-{a.warm + a.duration:g}.json")
        if os.path.exists(path):        # --keep: made by an earlier run
            with open(path) as f:
                sc = json.load(f)
        else:
            sc = scenario(n, a.rate, a.warm + a.duration)
            with open(path, "w") as f:
                json.dump(sc, f)
        sc["until_ns"] = round(a.warm * 1e9)
        sc["requests"] = [r for r in sc["requests"] if r["at_ns"] <= sc["until_ns"]]
        warm_path = path + ".warm.json"
        with open(warm_path, "w") as f:
            json.dump(sc, f)
        offered = n // 2 * a.rate / (PAYLOAD * 8)
        for th in [int(x) for x in a.threads.split(",")]:
            # alternate the engines within each repeat so load changes hit them alike
            runs: dict[str, list[dict]] = {name: [] for name, _ in engines}
            for _ in range(a.repeats):
                for name, exe in engines:
                    out = os.path.join(work, f"result-{n}-{name}-{th}.json")
                    w = run(exe, warm_path, out + ".warm", th)
                    r = run(exe, path, out, th)
                    r["steady_wall_s"] = r["run_wall_s"] - w["run_wall_s"]
                    r["steady_cpu_s"] = r["cpu_s"] - w["cpu_s"]
                    r["steady_events"] = r["events"] - w["events"]
                    r["steady_delivered"] = r["delivered"] - w["delivered"]
                    runs[name].append(r)
            for name, _ in engines:
                rs = runs[name]
                wall = statistics.median(r["steady_wall_s"] for r in rs)
                cpu = statistics.median(r["steady_cpu_s"] for r in rs)
                r0 = rs[0]
                row = {"nodes": n, "threads": th, "engine": name, "steady_wall_s": wall,
                       "walls": [r["steady_wall_s"] for r in rs],
                       "steady_cpu_s": cpu, "cpus": [r["steady_cpu_s"] for r in rs],
                       "sim_pps_per_cpu_s": r0["steady_delivered"] / cpu,
                       "total_walls": [r["run_wall_s"] for r in rs],
                       "events": r0["steady_events"],
                       "events_per_s": r0["steady_events"] / wall,
                       "delivered": r0["steady_delivered"],
                       "sim_pps_per_wall_s": r0["steady_delivered"] / wall,
                       "offered_pps": offered,
                       "realtime_factor": r0["steady_delivered"] / wall / offered,
                       "sha256": r0["sha256"],
                       "load": os.getloadavg()[0]}
                rows.append(row)
                print(json.dumps(row), flush=True)
    load.append(os.getloadavg())
    report(rows, a, load)
    return 0


def report(rows: list[dict], a: argparse.Namespace, load: list) -> None:
    digests = {r["nodes"]: set() for r in rows}
    for r in rows:
        digests[r["nodes"]].add(r["sha256"])
    lines = [f"# Virtual-time speed of sim_scale's simulated part ({datetime.date.today()})",
             "", f"`python3 bench/sim_scale_virtual.py --nodes {a.nodes} --rate {a.rate} "
             f"--duration {a.duration} --warm {a.warm} --threads {a.threads} --repeats {a.repeats} "
             + " ".join(f"--engine {e}" for e in a.engine) + "`", "",
             f"N simulated hosts in CBR pairs ({a.rate} bit/s of {PAYLOAD}-byte payloads "
             f"each), {a.duration:g} simulated s measured after {a.warm:g} s of warm-up; "
             f"medians of {a.repeats} runs, engines alternated. Load average (1 min) "
             f"{load[0][0]:.1f} at the start, {load[1][0]:.1f} at the end "
             f"({os.cpu_count()} cores, shared). Real-time factor = simulated packets "
             "delivered per wall second / packets offered per simulated second (≥ 1: the "
             "simulated part alone keeps up with real time). CPU s: the engine's user + "
             "system time (of all its threads), less disturbed by other load than wall time.",
             "",
             "| nodes | threads | engine | steady wall s (runs) | CPU s (runs) | timer events | "
             "events/wall s | sim pkts delivered | sim pkts / wall s | sim pkts / CPU s | "
             "real-time factor | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['nodes']} | {r['threads']} | {r['engine']} | {r['steady_wall_s']:.2f} "
            f"({', '.join(f'{w:.2f}' for w in r['walls'])}) | {r['steady_cpu_s']:.2f} "
            f"({', '.join(f'{w:.2f}' for w in r['cpus'])}) | {r['events']} | "
            f"{r['events_per_s']:.0f} | {r['delivered']} | {r['sim_pps_per_wall_s']:.0f} | "
            f"{r['sim_pps_per_cpu_s']:.0f} | "
            f"{r['realtime_factor']:.2f} | {r['load']:.1f} |")
    lines += ["", "result.json identical across engines and thread counts: " + ", ".join(
        f"{n} nodes: {'yes' if len(d) == 1 else 'NO'}" for n, d in digests.items())]
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "sim-scale-virtual-latest.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(ROOT, "bench", "results", "sim-scale-virtual-latest.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
