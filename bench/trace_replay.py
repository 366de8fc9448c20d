#!/usr/bin/env python3
"""Trace replay fidelity in virtual time: a saturating flow over a direction whose capacity
is a Mahimahi trace; its delivered bytes per 100 ms against the trace's capacity in the same
bins (goal: total within 1 %, each bin within one opportunity plus a frame), and a
side-by-side per second.

    python3 bench/trace_replay.py [TRACE ...] [--seconds 20]

Default traces: ../shared/traces/cellular/*.down. Runs the engine's simulation (no root, no
namespaces); the result does not depend on the machine's load.
"""

import argparse
import glob
import os
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from wanlab.backends.simulate.runner import simulate  # noqa: E402
from wanlab.frontends import load  # noqa: E402

SPEC = """name: replay
nodes: [h0, h1]
links:
  - name: cell
    nodes: [h0, h1]
    bandwidth: 1Gb
    queue: {{limit: 2000}}
    ab: {{bandwidth: {{trace: {trace}}}}}
agents:
  - {{kind: Agent/UDP, node: h0, name: udp, peer: sink}}
  - {{kind: Agent/Null, node: h1, name: sink, peer: udp}}
  - {{kind: Application/Traffic/CBR, name: cbr, attached: udp,
     params: {{packetSize_: 1458, rate_: {rate}}}}}
events:
  - {{at: 0.0, target: cell, action: trace, args: [start]}}
  - {{at: 0.0, target: cbr, action: start}}
  - {{at: {end}, target: cell, action: trace, args: [stop]}}
  - {{at: {end}, target: cbr, action: stop}}
"""
FRAME = 1500          # 1458 bytes of UDP payload + 42 of headers
OPP = 1500


def pcap(path):
    data = open(path, "rb").read()
    scale = 1 if struct.unpack("<I", data[:4])[0] == 0xA1B23C4D else 1000
    i, out = 24, []
    while i + 16 <= len(data):
        s, frac, incl, orig = struct.unpack("<IIII", data[i:i + 16])
        out.append((s * 1_000_000_000 + frac * scale, orig))
        i += 16 + incl
    return out


def replay(trace, seconds):
    ms = [int(x) for x in open(trace).read().split()]
    peak = max(sum(1 for m in ms if b <= m < b + 100) for b in range(0, ms[-1], 100))
    rate = f"{int(peak * OPP * 8 * 10 * 1.3 / 1e6) + 1}Mb"     # 30 % above the busiest bin
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "exp.yaml"), "w") as f:
            f.write(SPEC.format(trace=os.path.abspath(trace), rate=rate, end=seconds))
        simulate(load(os.path.join(d, "exp.yaml")), os.path.join(d, "out"), seed=1, threads=1)
        (cap,) = glob.glob(os.path.join(d, "out", "traces", "cell-ab*.pcap"))
        recs = pcap(cap)
    # capacity per 100 ms bin: opportunities at those engine times (trace set at t = 0,
    # looped by its last time)
    period, n_bins = ms[-1], seconds * 10
    capacity = [0] * n_bins
    for loop in range(seconds * 1000 // period + 1):
        for m in ms:
            t = m + loop * period
            if t < seconds * 1000:
                capacity[t // 100] += OPP
    got = [0] * n_bins
    for t, n in recs:
        b = t // 100_000_000
        if b < n_bins:
            got[b] += n
    # the first bin fills the queue; compare from the second on
    pairs = list(zip(got[1:], capacity[1:], strict=True))
    total_g, total_c = sum(g for g, _ in pairs), sum(c for _, c in pairs)
    worst = max(abs(g - c) for g, c in pairs)
    return {"trace": os.path.basename(trace), "rate": rate,
            "total_err_pct": 100 * (total_g - total_c) / total_c,
            "worst_bin_bytes": worst, "bins": len(pairs),
            "bins_within": sum(abs(g - c) <= OPP + FRAME for g, c in pairs),
            "per_s": [(sum(got[k * 10:(k + 1) * 10]) * 8 / 1e6,
                       sum(capacity[k * 10:(k + 1) * 10]) * 8 / 1e6)
                      for k in range(seconds)]}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    default = sorted(glob.glob(os.path.join(here, "..", "..", "shared", "traces", "cellular",
                                            "*.down")))
    ap.add_argument("traces", nargs="*", default=default)
    ap.add_argument("--seconds", type=int, default=20)
    a = ap.parse_args()
    print("| trace | flow | total delivered vs capacity | worst 100 ms bin | bins within "
          "one opportunity + a frame |")
    print("|---|---|---|---|---|")
    results = [replay(t, a.seconds) for t in a.traces]
    for r in results:
        print(f"| {r['trace']} | {r['rate']} | {r['total_err_pct']:+.3f} % | "
              f"{r['worst_bin_bytes']} B | {r['bins_within']}/{r['bins']} |")
    if results:
        r = results[0]
        print(f"\n{r['trace']}, per second: delivered / trace capacity (Mbit/s)")
        for k, (g, c) in enumerate(r["per_s"]):
            print(f"{k:3d} s  {g:7.3f}  {c:7.3f}")


if __name__ == "__main__":
    main()
