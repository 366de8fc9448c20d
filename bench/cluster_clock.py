"""The clock offsets the host agents measure between a cluster's machines (issue 13).

A local test cluster of 2 machines and a chain cut between them; every 2 s each agent
probes the other's clock (``wanlab/cluster/clock.py``) and tells its engine. This reads
``cluster status --clocks`` ``--samples`` times, 2 s apart, and reports the offsets and the
round trips of the probes that measured them. The local cluster's machines share this
host's clock, so the true offset is 0: what is measured is the estimator's error here.

    python3 bench/cluster_clock.py [--samples 20]

About a minute and a half. Results: bench/results/cluster-clock-latest.md and .json.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from measure import save_results  # noqa: E402

CHAIN = """\
set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
set l0 [$ns duplex-link $a $b 100Mb 5ms DropTail]
tb-fix-node $a m0
tb-fix-node $b m1
$ns rtproto Static
$ns run
"""


def wl(home: str, *args: str) -> str:
    p = subprocess.run([sys.executable, "-m", "wanlab.cli", *args], capture_output=True,
                       text=True, env={**os.environ, "WANLAB_HOME": home, "PYTHONPATH": ROOT},
                       timeout=600, check=False)
    if p.returncode != 0:
        raise SystemExit(f"wanlab {' '.join(args)} failed: {p.stdout[-300:]} {p.stderr}")
    return p.stdout


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=20)
    a = ap.parse_args()
    home = tempfile.mkdtemp(prefix="wanlab-bench-clock-")
    spec = os.path.join(home, "clk.tcl")
    with open(spec, "w") as f:
        f.write(CHAIN)
    offsets: list[float] = []
    rtts: list[float] = []
    load = [os.getloadavg()[0]]
    try:
        wl(home, "cluster", "up", "--local", "2")
        wl(home, "create", spec, "--cluster")
        for _ in range(a.samples):
            out = wl(home, "cluster", "status", "--clocks")
            for off, rtt in re.findall(r"m[01] ([-+][\d.]+) ms \(round trip ([\d.]+) ms",
                                       out):
                offsets.append(float(off) * 1e3)
                rtts.append(float(rtt) * 1e3)
            load.append(os.getloadavg()[0])
            time.sleep(2)
    finally:
        subprocess.run([sys.executable, "-m", "wanlab.cli", "cluster", "down"],
                       capture_output=True, env={**os.environ, "WANLAB_HOME": home,
                                                 "PYTHONPATH": ROOT}, check=False)
    if not offsets:
        raise SystemExit("no offsets were measured")
    ab = sorted(abs(x) for x in offsets)
    res = {"samples": len(offsets), "offset_us_median": statistics.median(offsets),
           "abs_offset_us_median": statistics.median(ab),
           "abs_offset_us_max": ab[-1], "rtt_us_median": statistics.median(rtts),
           "load": [min(load), max(load)]}
    md = (f"# Clock offsets between the machines of a local cluster (true offset 0)\n\n"
          f"`python3 bench/cluster_clock.py --samples {a.samples}`, "
          f"load {min(load):.1f}-{max(load):.1f}\n\n"
          f"| readings | median offset | median abs | max abs | median probe round trip |\n"
          f"|---|---|---|---|---|\n"
          f"| {len(offsets)} | {res['offset_us_median']:+.1f} µs | "
          f"{res['abs_offset_us_median']:.1f} µs | {res['abs_offset_us_max']:.1f} µs | "
          f"{res['rtt_us_median']:.1f} µs |\n")
    print(md)
    print(save_results(os.path.join(ROOT, "bench", "results"), "cluster-clock", md, res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
