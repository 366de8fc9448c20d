#!/usr/bin/env python3
"""Capacity of the real-time engine with 1 and 2 threads, against a plain veth pair and a
kernel-router namespace measured in the same run (issue 11's capacity table).

Runs the capacity part of the fidelity suite (``wanlab validate --only capacity``: 64-byte
frames with ``wanlab-gen send --max``, iperf3 with 1 and 8 streams, 3 repetitions each)
``--runs`` times and reports, per path, the median over the runs of each run's median, with
every run's figure beside it, so the spread caused by other work on the machine shows.
Paths: ``veth``, ``router``, ``relay`` (``engine/examples/tap_relay.rs``: the same TAPs as
the engine's, every frame copied from one to the other by a loop with nothing else in it, the
ceiling of any forwarder built on TAPs), ``engine`` (one thread) and ``engine-2t``
(``--threads 2``: the link's two ports, i.e. its two directions, on two partitions pinned to
two cores).

    sudo python3 bench/engine_threads.py [--runs 3] [--full]

Writes bench/results/engine-threads-YYYYMMDD-HHMM.{md,json}. Needs root.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fidelity  # noqa: E402

PATHS = ("veth", "router", "relay", "engine", "engine-2t")


def _med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _fmt(x, scale, digits=3):
    return "–" if x is None else f"{x / scale:.{digits}f}"


def run_once(quick: bool) -> dict:
    suite = fidelity.Suite(quick, {"capacity"})
    try:
        suite.run()
    finally:
        for k in list(suite.topos):
            try:
                suite.drop_topo(k)
            except Exception:
                pass
        suite.lab.close()
    return suite.res


def summarize(runs: list[dict]) -> dict:
    out = {"pps": {}, "tcp": {}}
    for p in PATHS:
        out["pps"][p] = [next((r["pps_median"] for r in res["capacity"] if r["path"] == p), None)
                         for res in runs]
        for par in (1, 8):
            out["tcp"][(p, par)] = [next((r["bps_median"] for r in res["tcp"]
                                          if r["path"] == p and r["parallel"] == par), None)
                                    for res in runs]
    return out


def markdown(runs: list[dict], s: dict, cmd: str) -> str:
    m = runs[0]["meta"]
    loads = [r["meta"].get("loadavg_start") for r in runs]
    L = ["# Engine capacity with 1 and 2 threads", "",
         f"{m['date']}, {m['host']}, kernel {m['kernel']}, {m['cpus']} CPUs, git {m['git']}.",
         f"Command: `{cmd}`", "",
         f"{len(runs)} runs of `wanlab validate --only capacity"
         f"{' --quick' if m.get('quick') else ''}` (each: median of 3 repetitions); the table "
         "gives the median over runs, each run's figure in brackets. Load average at the start "
         "of each run: " + ", ".join(f"{x[0]:.1f}" for x in loads if x) + " (above about 1 on "
         "these 2 cores, other work shares them: absolute figures fall and spread; the "
         "ratios within one run are the fairer comparison).", "",
         "## 64-byte frames (Mpps received)", "",
         "| path | Mpps | vs veth | vs router | vs relay | runs |", "|---|---|---|---|---|---|"]
    base = [_med(s["pps"][b]) for b in ("veth", "router", "relay")]
    for p in PATHS:
        v = _med(s["pps"][p])
        L.append(f"| {p} | {_fmt(v, 1e6)} | "
                 + "".join(f"{_fmt(v / b if v and b else None, 1, 2)} | " for b in base)
                 + f"{', '.join(_fmt(x, 1e6) for x in s['pps'][p])} |")
    for par in (1, 8):
        L += ["", f"## TCP, {par} stream{'s' if par > 1 else ''} (Gbit/s, iperf3)", "",
              "| path | Gbit/s | vs veth | vs router | vs relay | runs |",
              "|---|---|---|---|---|---|"]
        base = [_med(s["tcp"][(b, par)]) for b in ("veth", "router", "relay")]
        for p in PATHS:
            v = _med(s["tcp"][(p, par)])
            L.append(f"| {p} | {_fmt(v, 1e9)} | "
                     + "".join(f"{_fmt(v / b if v and b else None, 1, 2)} | " for b in base)
                     + f"{', '.join(_fmt(x, 1e9) for x in s['tcp'][(p, par)])} |")
    errs = [e for r in runs for e in r.get("errors", [])]
    if errs:
        L += ["", "## Errors", ""] + [f"- {e}" for e in errs]
    return "\n".join(L) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--full", action="store_true", help="longer samples (not --quick)")
    ap.add_argument("--out", default=fidelity.RESULTS)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("engine_threads.py must run as root (network namespaces)", file=sys.stderr)
        return 1
    fidelity.build_relay()
    runs = [run_once(not a.full) for _ in range(a.runs)]
    s = summarize(runs)
    cmd = "sudo python3 bench/engine_threads.py" + (f" --runs {a.runs}" if a.runs != 3 else "") \
        + (" --full" if a.full else "")
    md = markdown(runs, s, cmd)
    print(md)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"engine-threads-{stamp}.md"), "w") as f:
        f.write(md)
    with open(os.path.join(a.out, f"engine-threads-{stamp}.json"), "w") as f:
        json.dump({"runs": runs, "pps": s["pps"],
                   "tcp": {f"{p}/P{par}": v for (p, par), v in s["tcp"].items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
