"""Latency-matrix LAN fidelity: every pair's RTT against d(i, j) + d(j, i).

    python3 bench/matrix.py                 # N = 50 and N = 100 members
    python3 bench/matrix.py --n 20          # one size
    python3 bench/matrix.py --no-save       # print only

A LAN of N nodes with a random (seeded, asymmetric) matrix of one-way delays, 1 to 50 ms,
is swapped in with wanlab (its own temporary WANLAB_HOME, terminated at the end). From every
node, ``ping -q -c 5 -i 0.02`` each higher-numbered node in turn (several sources at once);
the minimum RTT of each unordered pair is compared with d(i, j) + d(j, i). The goal is the
link goal: |error| <= 0.5 % of the expected RTT or 50 us, whichever is larger. The minimum
is the right statistic: the first echo of a pair also waits for ARP, and the machine is
shared. Results: bench/results/matrix-latest.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wanlab.frontends.builder import ExperimentBuilder  # noqa: E402
from wanlab.lifecycle import Lab  # noqa: E402

RTT_RE = re.compile(r"--- (\S+) ping statistics ---.*?rtt min/avg/max/mdev = "
                    r"([\d.]+)/([\d.]+)/([\d.]+)", re.S)


def matrix(n: int, seed: int) -> list[list[float]]:
    """One-way delays in ms, 0 on the diagonal, d(i, j) != d(j, i) in general."""
    rnd = random.Random(seed)
    return [[0.0 if i == j else round(rnd.uniform(1, 50), 3) for j in range(n)]
            for i in range(n)]


def experiment(n: int, d: list[list[float]]):
    b = ExperimentBuilder(f"matrix{n}")
    names = [b.node(f"n{i}") for i in range(n)]
    b.lan(names, name="wan", matrix={"delay": [[f"{x}ms" for x in row] for row in d]})
    return b.build()


def goal_us(want_ms: float) -> float:
    return max(0.005 * want_ms * 1000, 50.0)


def run(n: int, seed: int, workers: int) -> dict:
    d = matrix(n, seed)
    with tempfile.TemporaryDirectory(prefix="wlb-matrix-") as home:
        lab = Lab(os.path.join(home, "h"))
        exp = experiment(n, d)
        t0 = time.monotonic()
        lab.create(exp)
        swapin_s = time.monotonic() - t0
        try:
            argvs = []
            for i in range(n - 1):
                targets = " ".join(f"n{j}-wan" for j in range(i + 1, n))
                script = (f"for h in {targets}; do ping -n -q -c 1 -W 3 $h >/dev/null; "
                          f"ping -n -q -c 5 -i 0.02 -W 2 $h; done")
                # the store is this thread's: build the command lines here
                argvs.append(lab.node_argv(exp.name, f"n{i}", ["sh", "-c", script]))

            def sweep(argv: list[str]) -> str:
                return subprocess.run(argv, capture_output=True, text=True).stdout
            t1 = time.monotonic()
            with ThreadPoolExecutor(workers) as pool:
                outs = list(pool.map(sweep, argvs))
            ping_s = time.monotonic() - t1
        finally:
            lab.terminate(exp.name)
            lab.close()
    rows = []
    for i, out in enumerate(outs):
        for host, mn, avg, _mx in RTT_RE.findall(out):
            j = int(host.split("-")[0][1:])
            want = d[i][j] + d[j][i]
            rows.append({"i": i, "j": j, "want_ms": round(want, 3), "min_ms": float(mn),
                         "avg_ms": float(avg), "err_us": round((float(mn) - want) * 1000, 1)})
    pairs = n * (n - 1) // 2
    errs = [r["err_us"] for r in rows]
    ok = [r for r in rows if abs(r["err_us"]) <= goal_us(r["want_ms"])]
    abs_errs = sorted(abs(e) for e in errs) or [0.0]
    return {"n": n, "seed": seed, "pairs": pairs, "measured": len(rows),
            "within_goal": len(ok), "swapin_s": round(swapin_s, 1),
            "ping_s": round(ping_s, 1),
            "median_err_us": statistics.median(errs) if errs else None,
            "p99_abs_err_us": abs_errs[min(len(abs_errs) - 1, int(0.99 * len(abs_errs)))],
            "max_abs_err_us": abs_errs[-1],
            "worst": sorted(rows, key=lambda r: -abs(r["err_us"]))[:5]}


def markdown(results: list[dict]) -> str:
    lines = ["# Latency-matrix LAN: every pair's RTT vs d(i,j) + d(j,i)", "",
             "Goal per pair: |min RTT - expected| <= max(0.5 %, 50 us). "
             "Command: `python3 bench/matrix.py`.", "",
             "| N | pairs | measured | within goal | median error | p99 abs error | "
             "max abs error | swap-in | ping sweep |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        pct = 100.0 * r["within_goal"] / max(r["measured"], 1)
        lines.append(f"| {r['n']} | {r['pairs']} | {r['measured']} | {r['within_goal']} "
                     f"({pct:.1f} %) | {r['median_err_us']} us | {r['p99_abs_err_us']} us | "
                     f"{r['max_abs_err_us']} us | {r['swapin_s']} s | {r['ping_s']} s |")
    lines += ["", "Worst pairs (i, j, expected ms, min ms):", ""]
    for r in results:
        for w in r["worst"]:
            lines.append(f"- N={r['n']}: n{w['i']} <-> n{w['j']}: {w['want_ms']} ms expected, "
                         f"{w['min_ms']} ms min ({w['err_us']:+} us)")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, action="append", help="LAN size (repeatable)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=8, help="sources pinging at once")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/matrix.py: run as root", file=sys.stderr)
        return 1
    results = [run(n, a.seed, a.workers) for n in (a.n or [50, 100])]
    md = markdown(results)
    print(md)
    if not a.no_save:
        out = ROOT / "bench" / "results"
        out.mkdir(parents=True, exist_ok=True)
        (out / "matrix-latest.md").write_text(md)
        (out / "matrix-latest.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
