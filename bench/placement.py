"""Placement (assign with METIS) and wide-area mapping (wanassign): quality and time.

Netbed's assign (simulated annealing) took up to 13 s for its largest experiments; the
goal here is 1 000 virtual nodes mapped in <= 1 s. Quality is the bandwidth of the links
cut between machines, against the naive round-robin placement measured in the same run.

Topologies (deterministic, seed 1): "transit-stub" (a ring of transit routers, each with
stub chains and a LAN of hosts, 100 Mbit/s stubs, 1 Gbit/s transit) of about N nodes,
placed over 3 and 8 machines. wanassign: K virtual nodes onto 2K sites whose measured
latencies are points on a plane, the request being a planted sub-matrix (error 0 exists).

    python3 bench/placement.py [--sizes 100,1000,10000] [--reps 5]

Results: bench/results/placement-latest.md and .json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from wanlab.model.ir import (  # noqa: E402
    Experiment,
    Lan,
    LanMember,
    Link,
    LinkParams,
    Node,
)
from wanlab.plan.placement import Machine, assign, round_robin  # noqa: E402
from wanlab.plan.wanassign import wanassign  # noqa: E402


def transit_stub(n: int) -> Experiment:
    """About ``n`` nodes: T transit routers in a ring, each with stub chains and a LAN."""
    transit = max(3, n // 50)
    per = max(1, (n - transit) // transit)
    fast = LinkParams(bandwidth_bps=1_000_000_000, delay_s=0.005)
    stub = LinkParams(bandwidth_bps=100_000_000, delay_s=0.001)
    nodes, links, lans = [], [], []
    for t in range(transit):
        nodes.append(Node(f"t{t}"))
        links.append(Link(f"tt{t}", f"t{t}", f"t{(t + 1) % transit}", ab=fast, ba=fast))
        hosts = [f"h{t}_{i}" for i in range(per)]
        nodes += [Node(h) for h in hosts]
        half = len(hosts) // 2
        prev = f"t{t}"
        for h in hosts[:half]:                      # a chain of stub routers
            links.append(Link(f"s{h}", prev, h, ab=stub, ba=stub))
            prev = h
        members = [LanMember(h, to_lan=stub, from_lan=stub) for h in hosts[half:]]
        if members:
            members.append(LanMember(prev, to_lan=stub, from_lan=stub))
            lans.append(Lan(f"lan{t}", tuple(members), bandwidth_bps=100_000_000))
    return Experiment("ts", nodes=tuple(nodes), links=tuple(links), lans=tuple(lans))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--machines", default="3,8")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args()
    rows = []
    for n in [int(x) for x in a.sizes.split(",")]:
        exp = transit_stub(n)
        for k in [int(x) for x in a.machines.split(",")]:
            ms = [Machine(f"m{i}", 64) for i in range(k)]
            times, p = [], None
            for _ in range(a.reps):
                p = assign(exp, ms)
                times.append(p.seconds)
            rr = round_robin(exp, ms)
            loads = list(p.load.values())
            rows.append({"nodes": len(exp.nodes), "machines": k,
                         "map_s_median": statistics.median(times),
                         "cut_gbps": p.cut_bps / 1e9, "round_robin_cut_gbps": rr.cut_bps / 1e9,
                         "cut_ratio": p.cut_bps / rr.cut_bps if rr.cut_bps else 0.0,
                         "imbalance": max(loads) / (sum(loads) / len(loads))})
            r = rows[-1]
            print(f"assign {r['nodes']:6d} nodes on {k} machines: {r['map_s_median']*1e3:8.1f} ms "
                  f"(median of {a.reps}); cut {r['cut_gbps']:.2f} Gbit/s vs round-robin "
                  f"{r['round_robin_cut_gbps']:.1f} ({r['cut_ratio']:.4f}x); "
                  f"imbalance {r['imbalance']:.2f}")
    wan = []
    rng = np.random.default_rng(1)
    for kk in (5, 10, 20):
        pts = rng.random((2 * kk, 2)) * 100
        measured = np.hypot(*(pts[:, None, :] - pts[None, :, :]).transpose(2, 0, 1)) / 1e3
        chosen = rng.permutation(2 * kk)[:kk]
        want = measured[np.ix_(chosen, chosen)]
        m = wanassign([f"v{i}" for i in range(kk)], want, [f"s{i}" for i in range(2 * kk)],
                      measured, seed=1234)
        worst = m.worst.error if m.worst else 0.0
        wan.append({"virtual": kk, "sites": 2 * kk, "seconds": m.seconds,
                    "total_error": m.total_error, "worst_pair_error": worst,
                    "generations": m.generations})
        print(f"wanassign {kk} nodes on {2 * kk} sites: {m.seconds:.2f} s, {m.generations} "
              f"generations, total relative error {m.total_error:.4f}, worst pair {worst:.4f}")
    if a.no_save:
        return
    out = os.path.join(ROOT, "bench", "results")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    with open(os.path.join(out, "placement-latest.json"), "w") as f:
        json.dump({"when": stamp, "assign": rows, "wanassign": wan}, f, indent=2)
    with open(os.path.join(out, "placement-latest.md"), "w") as f:
        f.write(f"# Placement: assign (METIS) and wanassign (GA), {stamp}\n\n"
                f"`python3 bench/placement.py --sizes {a.sizes} --reps {a.reps}`; goal: "
                f"1 000 nodes mapped in <= 1 s.\n\n"
                "| nodes | machines | map time (median) | cut Gbit/s | round-robin cut | "
                "ratio | load imbalance |\n|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write(f"| {r['nodes']} | {r['machines']} | {r['map_s_median']*1e3:.1f} ms | "
                    f"{r['cut_gbps']:.2f} | {r['round_robin_cut_gbps']:.1f} | "
                    f"{r['cut_ratio']:.4f} | {r['imbalance']:.2f} |\n")
        f.write("\n| wide-area nodes | sites | time | generations | total rel. error | "
                "worst pair |\n|---|---|---|---|---|---|\n")
        for w in wan:
            f.write(f"| {w['virtual']} | {w['sites']} | {w['seconds']:.2f} s | "
                    f"{w['generations']} | {w['total_error']:.4f} | "
                    f"{w['worst_pair_error']:.4f} |\n")


if __name__ == "__main__":
    main()
