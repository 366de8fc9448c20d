"""Armada's parameter study as one sweep: bottleneck bandwidth x delay, emulated and simulated.

    sudo python3 examples/armada/run.py [--quick] [--out bench/results/armada-sweep]

The same as ``wanlab sweep examples/armada/armada-sweep.tcl -p bw=2Mb,5Mb,10Mb -p
delay=5ms,20ms,40ms --repeat 2 --both --out DIR``; then the table (runs.csv), the summary
(summary.json, with the agreement of emulation and simulation), the plots and a short
README.md of the results are copied to ``--out`` (the runs' own folders stay in a temporary
state folder, removed at the end). ``--quick``: 2 x 2, once.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)

from wanlab.facility import params  # noqa: E402
from wanlab.facility.sweep import Sweep  # noqa: E402
from wanlab.lifecycle import Lab  # noqa: E402


def _say(msg: str) -> None:
    print(msg, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "armada-sweep"))
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    axes = (["bw=2Mb,10Mb", "delay=5ms,40ms"] if a.quick
            else ["bw=2Mb,5Mb,10Mb", "delay=5ms,20ms,40ms"])
    repeat = 1 if a.quick else 2
    template = os.path.join(HERE, "armada-sweep.tcl")
    with tempfile.TemporaryDirectory(prefix="wanlab-armada-") as tmp:
        lab = Lab(os.path.join(tmp, "home"))
        try:
            t0 = time.monotonic()
            s = Sweep(lab, template, params.product(params.axes(axes)),
                      os.path.join(tmp, "sweep"), repeat=repeat,
                      modes=("emulate", "simulate"), say=_say).run()
            wall = time.monotonic() - t0
        finally:
            lab.close()
        os.makedirs(a.out, exist_ok=True)
        for f in ("runs.csv", "summary.json", "runs.parquet"):
            src = os.path.join(tmp, "sweep", f)
            if os.path.exists(src):
                shutil.copy(src, os.path.join(a.out, f))
        shutil.copytree(os.path.join(tmp, "sweep", "plots"), os.path.join(a.out, "plots"),
                        dirs_exist_ok=True)
        with open(os.path.join(tmp, "sweep", "runs.csv")) as f:
            rows = list(csv.DictReader(f))
    write_readme(a.out, s, rows, wall, axes, repeat)
    print(f"{s['runs']} runs in {wall:.0f} s; results in {a.out}")
    return 0 if not s["failed_runs"] else 1


def write_readme(out: str, s: dict, rows: list[dict], wall: float, axes, repeat) -> None:
    def bw(v: str) -> float:
        return float(v[:-2]) * 1e6

    lines = ["# Armada's bandwidth x delay study as a wanlab sweep", "",
             f"`python3 examples/armada/run.py` ({' '.join('-p ' + x for x in axes)}, "
             f"repeat {repeat}, emulated and simulated): {s['runs']} runs in {wall:.0f} s of "
             f"wall time on this (shared, 2-core) machine; engine {s['software']['engine']}, "
             f"kernel {s['software']['kernel']}; template version {s['template_version']}.",
             "", "Mean throughput of the bulk TCP flow (Mbit/s) per point, over the repeats; "
             "`ratio` is simulated / emulated; `tracks` says whether every emulated and "
             "simulated run stayed at or under the bottleneck and above 40 % of it.", "",
             "| bw | delay | emulated | simulated | ratio | agree (±"
             f"{s['agreement']['tolerance']:.0%}) | tracks |" if s.get("agreement") else "",
             "|---|---|---|---|---|---|---|"]
    from wanlab.report.sweep import quantity
    points = sorted((s.get("agreement") or {}).get("points", []),
                    key=lambda p: (quantity(p["bw"]), quantity(p["delay"])))
    for p in points:
        sel = [r for r in rows if r["bw"] == p["bw"] and r["delay"] == p["delay"]
               and r["throughput_bps"]]
        tracks = all(0.4 * bw(p["bw"]) < float(r["throughput_bps"]) <= 1.02 * bw(p["bw"])
                     for r in sel)
        lines.append(f"| {p['bw']} | {p['delay']} | {p['emulated_bps'] / 1e6:.3f} | "
                     f"{p['simulated_bps'] / 1e6:.3f} | {p['ratio']} | "
                     f"{'yes' if p['agree'] else 'no'} | {'yes' if tracks else 'no'} |")
    ag = s.get("agreement") or {}
    lines += ["", f"Agreement: {ag.get('within')} of {ag.get('compared')} points within "
              f"±{ag.get('tolerance', 0):.0%}. Failed runs: {s['failed_runs'] or 'none'}.", "",
              "Files: `runs.csv` (one row per run and flow: parameters, run id, repeat, mode, "
              "seed, template version, engine hash, kernel, throughput, RTT, retransmissions, "
              "link drops), `summary.json`, `plots/` (each metric against each parameter; "
              "heat maps over bw x delay per mode)."]
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(x for x in lines if x is not None) + "\n")
    with open(os.path.join(out, "summary.json")) as f:
        json.load(f)      # it parses


def readme_only(out: str, wall: float) -> None:
    """Rewrite README.md from ``out``'s summary.json and runs.csv (no runs)."""
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    with open(os.path.join(out, "runs.csv")) as f:
        rows = list(csv.DictReader(f))
    axes = [f"{p}={','.join(dict.fromkeys(r[p] for r in rows))}" for p in s["parameters"]]
    repeat = len({r["repeat"] for r in rows})
    write_readme(out, s, rows, wall, axes, repeat)


if __name__ == "__main__":
    sys.exit(main())
