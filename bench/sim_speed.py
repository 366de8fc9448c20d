"""Virtual-time speed of the engine's simulation against ns-3, on the same dumbbell.

N senders —(10×B, 1 ms)— L —(B, D = 32 ms, DropTail of one BDP)— R —(10×B, 1 ms)— N
receivers; N bulk TCP NewReno flows (1000-byte segments, initial window 10, no SACK,
an ACK per segment) for T simulated seconds. wanlab runs it with
``wanlab run --simulate`` (the engine's virtual-time driver); ns-3 runs the same scenario
(bench/ns3_dumbbell.py, ``pip install ns3``) in the same invocation.

Same TCP work first: ns-3 is configured like wanlab's TCP (1000-byte segments, initial
window 10, an ACK per segment, minimum RTO 200 ms, socket buffers that never limit, device
DropTail of one BDP at the bottleneck; see bench/ns3_dumbbell.py) and with SACK: one flow's
slow start ends with ~170 segments lost in one window; wanlab's SACK-less NewReno (the
RFC 6582 "impatient" variant, as Linux without SACK) recovers them by one timeout and
go-back-N within a few hundred ms, ns-3's NewReno ("slow but steady") one segment per RTT
for ~11 s (2.0-2.95 Mb/s against 9.0 over 20 s); ns-3 with SACK recovers in about an RTT
and delivers the same work (9.39 against 9.00 Mb/s). A case's ratio counts only when the
two total goodputs are within 5 % of each other (column "same work"); otherwise it is
shown in parentheses.

Reported per case (median of ``--repeats`` runs), for wanlab with each ``--threads``
count: wall seconds, delivered TCP segments per wall second (the like-for-like figure),
engine or scheduler events per second (the two count different things: ns-3 schedules an
event per packet hop and timer, the engine one per pipeline half deadline and agent timer),
goodput, the start-up share of the wall time (wanlab: process start, JSON in and out;
ns-3: building the topology, after its Python import) and the ratio wanlab / ns-3 of
delivered segments per wall second. The goal is ≥ 10×.

    python3 bench/sim_speed.py [--flows 1,10,100] [--bottlenecks 10e6,100e6] [--duration 60]
                               [--gig-duration 30] [--threads 1,2] [--repeats 3]

Results: bench/results/sim-speed-latest.md and .json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from wanlab.backends.simulate.runner import simulate  # noqa: E402
from wanlab.frontends import ns  # noqa: E402

SEG = 1000


def dumbbell(flows: int, bps: float, delay_ms: float, duration: float, cc: str) -> str:
    bdp = max(10, round(bps * 2 * (delay_ms + 2) / 1e3 / 8 / SEG))
    access = f"{int(max(1e9, 10 * bps))}"
    agent = {"newreno": "Agent/TCP/Newreno", "cubic": "Agent/TCP/Linux"}[cc]
    lines = ["set ns [new Simulator]", "set L [$ns node]", "set R [$ns node]",
             f"$ns duplex-link $L $R {int(bps)} {delay_ms}ms DropTail",
             f"$ns queue-limit $L $R {bdp}", f"$ns queue-limit $R $L {bdp}"]
    for i in range(flows):
        lines += [f"set s{i} [$ns node]", f"set r{i} [$ns node]",
                  f"$ns duplex-link $s{i} $L {access} 1ms DropTail",
                  f"$ns duplex-link $R $r{i} {access} 1ms DropTail",
                  f"$ns queue-limit $s{i} $L 100000", f"$ns queue-limit $R $r{i} 100000",
                  f"set t{i} [new {agent}]", f"$t{i} set packetSize_ {SEG}",
                  f"$ns attach-agent $s{i} $t{i}"]
        if cc == "cubic":
            lines.append(f"$t{i} select_ca cubic")
        lines += [f"set k{i} [new Agent/TCPSink]", f"$ns attach-agent $r{i} $k{i}",
                  f"$ns connect $t{i} $k{i}", f"set f{i} [new Application/FTP]",
                  f"$f{i} attach-agent $t{i}", f"$ns at 0 \"$f{i} start\"",
                  f"$ns at {duration} \"$f{i} stop\""]
    lines.append("$ns run")
    return "\n".join(lines) + "\n"


def run_wanlab(flows: int, bps: float, delay_ms: float, duration: float, cc: str,
               threads: int = 1) -> dict:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "dumbbell.tcl")
        with open(path, "w") as f:
            f.write(dumbbell(flows, bps, delay_ms, duration, cc))
        s = simulate(ns.parse(path), os.path.join(d, "out"), plot=False, threads=threads)
    delivered = sum(f["result"]["packets"] for f in s["flows"])
    # the engine's run, like ns-3's Simulator::Run(); the whole command (JSON in and out,
    # process start) is kept as command_wall_s
    wall = s["engine"]["run_wall_s"] or s["engine"]["wall_s"]
    return {"wall_s": wall, "command_wall_s": s["engine"]["wall_s"],
            "events": s["engine"]["events"],
            "events_per_s": s["engine"]["events"] / wall, "delivered_pkts": delivered,
            "delivered_pkts_per_wall_s": delivered / wall,
            "goodput_bps": sum(f["result"]["bytes"] for f in s["flows"]) * 8 / duration,
            "threads": s["engine"].get("threads", 1),
            "lookahead_ns": s["engine"].get("lookahead_ns", 0),
            "windows": s["engine"].get("windows", 0),
            "startup_share": max(0.0, 1 - wall / s["engine"]["wall_s"])}


NS3_TIMEOUT_S = 600


def run_ns3(flows: int, bps: float, delay_ms: float, duration: float, cc: str) -> dict | None:
    try:
        p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "ns3_dumbbell.py"),
                            "--flows", str(flows), "--bottleneck", str(bps), "--duration",
                            str(duration), "--delay-ms", str(delay_ms), "--cc", cc, "--sack"],
                           capture_output=True, text=True, timeout=NS3_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        print(f"ns-3 took over {NS3_TIMEOUT_S} s: skipped", file=sys.stderr)
        return None
    if p.returncode != 0:
        print(f"ns-3 failed: {p.stderr.strip()[-500:]}", file=sys.stderr)
        return None
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["startup_share"] = r.get("setup_s", 0) / (r.get("setup_s", 0) + r["wall_s"])
    return r


def median_run(fn, repeats: int, *args) -> dict | None:
    runs = [r for r in (fn(*args) for _ in range(repeats)) if r is not None]
    if not runs:
        return None
    walls = [r["wall_s"] for r in runs]
    best = sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]
    best = dict(best)
    best["wall_s_all"] = walls
    best["wall_s"] = statistics.median(walls)
    best["delivered_pkts_per_wall_s"] = best["delivered_pkts"] / best["wall_s"]
    best["events_per_s"] = best["events"] / best["wall_s"]
    return best


def cell(r: dict | None, key: str, fmt: str) -> str:
    return format(r[key], fmt) if r and r.get(key) is not None else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flows", default="1,10,100")
    # ns-3's TCP walks its list of sent segments per retransmission: at 1 Gb/s it did not
    # finish 2 simulated s in 10 minutes here, so 100 Mb/s is the fast case
    ap.add_argument("--bottlenecks", default="10e6,100e6")
    ap.add_argument("--duration", type=float, default=60.0, help="simulated s (10 Mb/s)")
    ap.add_argument("--gig-duration", type=float, default=30.0, help="simulated s for "
                    "bottlenecks ≥ 100 Mb/s (ns-3's TCP slows with the window's size; "
                    "shorter runs end before the slow-start losses are amortised and the "
                    "two goodputs differ by more than 5 %%)")
    ap.add_argument("--delay-ms", type=float, default=32.0)
    ap.add_argument("--cc", default="newreno", choices=("newreno", "cubic"))
    ap.add_argument("--threads", default="1,2", help="wanlab thread counts")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-ns3", action="store_true")
    ap.add_argument("--rows-from", help="only write the tables from the JSON lines this "
                    "script printed (a run cut short)")
    a = ap.parse_args()
    threads = [int(x) for x in a.threads.split(",")]
    if a.rows_from:
        with open(a.rows_from) as f:
            rows = [json.loads(ln) for ln in f if ln.startswith("{")]
        for r in rows:
            r["wanlab"] = {int(k): v for k, v in r["wanlab"].items()}
            r["ratio_delivered_per_wall_s"] = {int(k): v for k, v in
                                               r["ratio_delivered_per_wall_s"].items()}
        write_results(rows, a, threads)
        return 0
    import importlib.util
    # the ns-3 wheel's package is "ns" (imported by bench/ns3_dumbbell.py in a subprocess)
    have_ns3 = not a.no_ns3 and importlib.util.find_spec("ns") is not None \
        and importlib.util.find_spec("ns").origin != ns.__file__
    if not have_ns3 and not a.no_ns3:
        print("ns-3 not installed (pip install ns3): wanlab only", file=sys.stderr)
    rows = []
    for bps in [float(x) for x in a.bottlenecks.split(",")]:
        dur = a.duration if bps < 100e6 else a.gig_duration
        for n in [int(x) for x in a.flows.split(",")]:
            t = median_run(run_ns3, a.repeats, n, bps, a.delay_ms, dur, a.cc) \
                if have_ns3 else None
            row = {"flows": n, "bottleneck_bps": bps, "duration_s": dur, "ns3": t,
                   "wanlab": {}, "ratio_delivered_per_wall_s": {}}
            for th in threads:
                w = median_run(run_wanlab, a.repeats, n, bps, a.delay_ms, dur, a.cc, th)
                row["wanlab"][th] = w
                if t:
                    row["ratio_delivered_per_wall_s"][th] = (w["delivered_pkts_per_wall_s"] /
                                                             t["delivered_pkts_per_wall_s"])
            w1 = row["wanlab"][threads[0]]
            if t:
                row["goodput_diff"] = abs(w1["goodput_bps"] - t["goodput_bps"]) / t["goodput_bps"]
                row["same_work"] = row["goodput_diff"] <= 0.05
            rows.append(row)
            print(json.dumps(row), flush=True)
    write_results(rows, a, threads)
    return 0


def write_results(rows: list[dict], a: argparse.Namespace, threads: list[int]) -> None:
    head = ("| bottleneck | flows | sim s | ns-3 goodput Mb/s | wanlab goodput Mb/s | same work | "
            "ns-3 wall s | ns-3 seg/wall s | ns-3 events/s | ns-3 start-up |")
    sep = "|---|---|---|---|---|---|---|---|---|---|"
    for th in threads:
        head += (f" wanlab {th}T wall s | {th}T seg/wall s | {th}T events/s | {th}T start-up | "
                 f"ratio {th}T |")
        sep += "---|---|---|---|---|"
    lines = [f"# Simulation speed: wanlab engine vs ns-3 ({datetime.date.today()})", "",
             f"`python3 bench/sim_speed.py --flows {a.flows} --bottlenecks {a.bottlenecks} "
             f"--duration {a.duration} --gig-duration {a.gig_duration} --delay-ms {a.delay_ms} "
             f"--cc {a.cc} --threads {a.threads} --repeats {a.repeats}`  (load average at the "
             f"end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} shared cores)", "",
             f"Dumbbell, {a.cc}, {a.duration:g} simulated s at 10 Mb/s and {a.gig_duration:g} s "
             f"at ≥ 100 Mb/s, bottleneck delay {a.delay_ms} ms, "
             f"DropTail of one BDP; medians of {a.repeats}. Ratio = wanlab / ns-3 delivered "
             f"TCP segments per wall second (goal ≥ 10); in parentheses when the goodputs "
             f"differ by more than 5 % (not the same TCP work). nT = wanlab on n threads "
             f"(the engine cuts the bottleneck link: one partition per side).", "",
             head, sep]
    for r in rows:
        t = r["ns3"]
        same = ("yes" if r.get("same_work") else "no") + \
            (f" ({r['goodput_diff'] * 100:.1f} %)" if t else "")
        w1 = r["wanlab"][threads[0]]
        line = (f"| {r['bottleneck_bps'] / 1e6:g} Mb/s | {r['flows']} | {r['duration_s']:g} | "
                f"{format(t['goodput_bps'] / 1e6, '.2f') if t else '- (ns-3 skipped)'} | "
                f"{w1['goodput_bps'] / 1e6:.2f} | {same if t else '-'} | "
                f"{cell(t, 'wall_s', '.3f')} | {cell(t, 'delivered_pkts_per_wall_s', '.0f')} | "
                f"{cell(t, 'events_per_s', '.0f')} | {cell(t, 'startup_share', '.1%')} |")
        for th in threads:
            w = r["wanlab"][th]
            ratio = r["ratio_delivered_per_wall_s"].get(th)
            rs = "-" if ratio is None else (f"{ratio:.1f}×" if r.get("same_work")
                                            else f"({ratio:.1f}×)")
            line += (f" {w['wall_s']:.3f} | {w['delivered_pkts_per_wall_s']:.0f} | "
                     f"{w['events_per_s']:.0f} | {w['startup_share']:.1%} | {rs} |")
        lines.append(line)
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "sim-speed-latest.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(ROOT, "bench", "results", "sim-speed-latest.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
