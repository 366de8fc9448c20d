"""Real-time scale of simulation: how large a simulated network can run beside a live
TCP flow without disturbing it (Netbed §7.2: nse kept a live 2 Mbit/s TCP flow at full
rate beside 150 simulated links / 300 nodes on an 850 MHz PC).

Topology: two emulated nodes ``a`` and ``b`` joined through a simulated router ``r``
(a —100 Mbit/s 1 ms— r —BW 10 ms— b), and N simulated hosts in N/2 pairs, each pair on
its own simulated link (2 Mbit/s, 50 ms), each sending CBR of RATE bit/s of 1000-byte
payloads. The live flow is iperf3 a → b for DURATION s (Linux TCP, cubic) and ping a → b.

Once every source is started, the bench waits until the engine has caught up with real
time (its `stats` say it is not behind), then measures. For every N the run is compared
with N = 0 of the same engine thread count in the same invocation: the goal is throughput
and RTT within 2 % with N ≥ 100 000 simulated nodes (400 000 simulated packets/s at the
default rate). The engine's ``realtime`` counters
tell whether the simulator fell behind. ``--threads 1,2`` runs every N with the engine on
one thread, then on two (``engine: {threads: 2}``: the partitioner puts the simulated
pairs, each its own component, on either thread, beside the live path).

    python3 bench/sim_scale.py [--nodes 0,1000,5000,10000,20000] [--rate 64000] [--threads 1,2]

A 100 000-node row takes about five minutes on a loaded 2-core machine (most of it the
swap-in and teardown).

Results: bench/results/sim-scale-latest.md and .json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from wanlab.frontends.builder import ExperimentBuilder  # noqa: E402
from wanlab.lifecycle import Lab  # noqa: E402


def experiment(name: str, n_nodes: int, rate: int, bw: str, threads: int = 0):
    """The topology, built with the Python builder (the ns front end takes ~8 s to run a
    10 000-node script: Tcl's `info frame` costs time in proportion to the position in
    the script)."""
    b = ExperimentBuilder(name)
    b.engine(threads=threads or None)
    a, bb = b.node("a"), b.node("b")
    r = b.node("r", kind="simulated")
    for i in range(n_nodes // 2):
        s, d = b.node(f"s{i}", kind="simulated"), b.node(f"d{i}", kind="simulated")
        b.link(s, d, bandwidth="2Mb", delay="50ms")
        u = b.agent("Agent/UDP", node=s, name=f"u{i}")
        n = b.agent("Agent/Null", node=d, name=f"n{i}")
        b.connect(u, n)
        b.agent("Application/Traffic/CBR", attached=u, name=f"c{i}",
                params={"packetSize_": 1000, "rate_": rate})
    b.link(a, r, bandwidth="100Mb", delay="1ms")
    b.link(r, bb, bandwidth=bw, delay="10ms")
    return b.build()


def start_all(c, agents: list[str], window: int = 32) -> None:
    """Start every CBR source, ``window`` requests in flight at a time (the engine reads
    up to 64 per connection): one round trip each took minutes for 50 000 sources."""
    for k in range(0, len(agents), window):
        batch = agents[k:k + window]
        for j, a in enumerate(batch):
            c.write({"id": f"s{k + j}", "cmd": "agent", "agent": a, "action": "start"})
        for _ in batch:
            r = c.read()
            if r is None or not r.get("ok"):
                raise RuntimeError(f"agent start refused: {r}")


def caught_up(c, limit_s: float = 120.0) -> float:
    """Wait until the engine is not behind real time (two readings in a row, half a second
    apart; a light `stats` of the router `r`); returns the seconds waited. A full `stats`
    of 100 000 nodes holds the partitions up for seconds, and so does starting 50 000
    sources: measuring the live flow right after would measure the catching up."""
    t0 = time.monotonic()
    ok = 0
    while ok < 2 and time.monotonic() - t0 < limit_s:
        rt = c.call("stats", target="r").get("realtime") or {}
        ok = ok + 1 if not rt.get("behind") else 0
        time.sleep(0.5)
    return time.monotonic() - t0


def run_one(lab: Lab, n: int, rate: int, bw: str, duration: int, threads: int) -> dict:
    name = f"scale{n}t{threads}"
    exp = experiment(name, n, rate, bw, threads)
    t0 = time.monotonic()
    lab.create(exp)
    swap_s = time.monotonic() - t0
    try:
        with lab.engine(name) as c:
            start_all(c, [f"c{i}" for i in range(n // 2)])
            time.sleep(1.0)
            settle = caught_up(c)
            before = c.call("stats")
            settle += caught_up(c)
            # (the lateness counters again, lightly: serving the full `stats` above made
            # events late that this window should not count)
            rt_before = c.call("stats", target="r").get("realtime") or {}
            ping = lab.exec(name, "a", ["ping", "-n", "-q", "-c", "50", "-i", "0.02", "b"],
                            capture_output=True, text=True).stdout
            lab.exec(name, "b", ["iperf3", "-s", "-1", "-D"], capture_output=True)
            time.sleep(0.3)
            out = lab.exec(name, "a", ["iperf3", "-c", "b", "-t", str(duration), "-J", "-C",
                                       "cubic"], capture_output=True, text=True).stdout
            after = c.call("stats")
    finally:
        lab.terminate(name)
    rep = json.loads(out or "{}")
    bps = rep.get("end", {}).get("sum_received", {}).get("bits_per_second", 0.0)
    if not bps:
        print(f"iperf3 failed with {n} simulated nodes: {rep.get('error', out[-300:])}",
              file=sys.stderr)
    m = re.search(r"= [\d.]+/([\d.]+)/", ping)
    rtt = float(m.group(1)) if m else None
    dt = (after["now_ns"] - before["now_ns"]) / 1e9
    sim_pkts = sum(a.get("pkts", 0) for k, a in after["agents"].items() if k.endswith(".sink")) \
        - sum(a.get("pkts", 0) for k, a in before["agents"].items() if k.endswith(".sink"))
    rt0, rt1 = rt_before, after.get("realtime") or {}
    return {"threads": threads, "nodes": n, "links": n // 2 + 2,
            "swapin_s": round(swap_s, 2), "settle_s": round(settle, 1), "tcp_bps": bps,
            "rtt_ms": rtt, "sim_pps": round(sim_pkts / dt) if dt > 0 else None,
            # late timer events while the live flow was measured (max: since swap-in,
            # including the start of every CBR source)
            "late_in_window": rt1.get("late_events", 0) - rt0.get("late_events", 0),
            "timer_events_in_window": rt1.get("timer_events", 0) - rt0.get("timer_events", 0),
            "realtime": rt1}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="0,1000,5000,10000,20000")
    ap.add_argument("--rate", type=int, default=64000, help="CBR bit/s per simulated pair")
    ap.add_argument("--bw", default="20Mb", help="live flow's bottleneck (r — b)")
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", default="1",
                    help="engine thread counts to run every N with, e.g. 1,2")
    a = ap.parse_args()
    lab = Lab(progress=True)
    rows = []
    load = [os.getloadavg()]
    for t in [int(x) for x in a.threads.split(",")]:
        for n in [int(x) for x in a.nodes.split(",")]:
            runs = [run_one(lab, n, a.rate, a.bw, a.duration, t) for _ in range(a.repeats)]
            r = dict(runs[0])
            r["tcp_bps"] = statistics.median(x["tcp_bps"] for x in runs)
            rtts = [x["rtt_ms"] for x in runs if x["rtt_ms"] is not None]
            r["rtt_ms"] = statistics.median(rtts) if rtts else None
            r["swapin_s"] = statistics.median(x["swapin_s"] for x in runs)
            rows.append(r)
            print(json.dumps(r), flush=True)
    load.append(os.getloadavg())
    report(rows, a, load)
    return 0


def report(rows: list[dict], a: argparse.Namespace, load: list, note: str = "") -> None:
    """Write the table (results/sim-scale-latest.md) and the rows (.json)."""
    lines = [f"# Real-time scale of simulation ({datetime.date.today()})", "",
             f"`python3 bench/sim_scale.py --nodes {a.nodes} --rate {a.rate} --bw {a.bw} "
             f"--duration {a.duration} --repeats {a.repeats} --threads {a.threads}`", "",
             f"Live iperf3 (cubic) a → b through a simulated router and a {a.bw}, 10 ms "
             f"simulated link, beside N simulated hosts in pairs sending {a.rate} bit/s CBR "
             f"each. Baseline: the first row of the same engine thread count. Load average "
             f"(1 min) {load[0][0]:.1f} at the start, {load[1][0]:.1f} at the end "
             f"({os.cpu_count()} cores).", "",
             "| engine threads | simulated nodes | links | sim packets/s | swap-in "
             "| caught up after | TCP Mbit/s | ratio | RTT ms | ratio "
             "| late timer events while measured | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        base = next(x for x in rows if x["threads"] == r["threads"])
        tr = r["tcp_bps"] / base["tcp_bps"] if base["tcp_bps"] else None
        rr = r["rtt_ms"] / base["rtt_ms"] if base["rtt_ms"] and r["rtt_ms"] else None
        # (the simulation must keep up with real time too, not only spare the live flow)
        ok = (tr is not None and rr is not None and abs(tr - 1) <= 0.02 and abs(rr - 1) <= 0.02
              and not (r.get("realtime") or {}).get("behind"))
        f = lambda x, spec: "-" if x is None else format(x, spec)   # noqa: E731
        behind = " (behind real time)" if (r.get("realtime") or {}).get("behind") else ""
        lines.append(f"| {r['threads']} | {r['nodes']} | {r['links']} | {r['sim_pps']} | "
                     f"{r['swapin_s']} s | {r.get('settle_s', '-')} s | "
                     f"{r['tcp_bps'] / 1e6:.2f} | {f(tr, '.4f')} | {f(r['rtt_ms'], '')} | "
                     f"{f(rr, '.4f')} | {r['late_in_window']} of {r['timer_events_in_window']}"
                     f"{behind} | {'PASS' if ok else 'MISS'} |")
    if note:
        lines += ["", note]
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "sim-scale-latest.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(ROOT, "bench", "results", "sim-scale-latest.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
