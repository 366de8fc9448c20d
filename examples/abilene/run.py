"""Run VINI's Abilene failure experiment and report it as VINI's Figures 8 and 9 did.

    python3 examples/abilene/run.py          # ping Washington -> Seattle (Figure 8)
    python3 examples/abilene/run.py --tcp    # a bulk TCP transfer instead (Figure 9)

It swaps in examples/abilene/abilene.tcl (11 nodes running FRR OSPF) and plays the
60 s timeline: Denver-Kansas City fails at 12 s and comes back at 38 s. Then it
writes to bench/results/:

* abilene-ping.png (RTT against time), or abilene-tcp.png (throughput against
  time), with the expected levels and the events marked;
* abilene-ping.md / abilene-tcp.md, a summary. For ping, the RTT before,
  during and after the failure is compared with the configured path's delay
  sum; it also gives the time to reroute and to restore, and the packets
  lost.

The expected paths are computed here independently of wanlab's routing: a
shortest-path search over the links' OSPF costs, with and without the failed
link.
"""

from __future__ import annotations

import argparse
import heapq
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)

from wanlab.frontends import ns  # noqa: E402
from wanlab.lifecycle import Lab  # noqa: E402

FAIL_AT, RESTORE_AT, END = 12.0, 38.0, 60.0
FAILED = "L-denver-kansascity"
SRC, DST = "washington", "seattle"
FRAME = 98            # an ICMP echo of 56 data bytes, as an Ethernet frame


def expected_path(exp, without: str | None = None) -> tuple[list[str], float]:
    """Shortest path SRC -> DST by OSPF cost; returns (nodes, one-way delay in s)."""
    adj: dict[str, list] = {}
    for l in exp.links:
        if l.name == without:
            continue
        adj.setdefault(l.a, []).append((l.cost, l.b, l))
        adj.setdefault(l.b, []).append((l.cost, l.a, l))
    heap = [(0, SRC, [SRC], 0.0, 0.0)]
    seen = set()
    while heap:
        cost, node, path, delay, ser = heapq.heappop(heap)
        if node in seen:
            continue
        seen.add(node)
        if node == DST:
            return path, delay + ser
        for c, nxt, l in adj.get(node, ()):
            if nxt not in seen:
                heapq.heappush(heap, (cost + c, nxt, path + [nxt], delay + l.ab.delay_s,
                                      ser + FRAME * 8 / l.ab.bandwidth_bps))
    raise SystemExit("no path")


def ping_samples(path: str, t0: float) -> list[tuple[float, float, int]]:
    """(send time since t0, RTT ms, icmp_seq) of every reply."""
    out = []
    for ts, seq, rtt in re.findall(r"^\[([\d.]+)\].*icmp_seq=(\d+) .*time=([\d.]+) ms",
                                   open(path).read(), re.M):
        out.append((float(ts) - t0 - float(rtt) / 1000, float(rtt), int(seq)))
    return out


def plot(xs, ys, levels, ylabel, title, path, style="."):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 4.2))
    ax.plot(xs, ys, style, ms=3, label="measured")
    for label, y, t1, t2 in levels:
        ax.hlines(y, t1, t2, colors="tab:red", linestyles="--", lw=1)
        ax.annotate(label, ((t1 + t2) / 2, y), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize=8, color="tab:red")
    for t, what in ((FAIL_AT, "Denver-Kansas City down"), (RESTORE_AT, "restored")):
        ax.axvline(t, color="grey", ls=":", lw=1)
        ax.annotate(what, (t, 0.02), xycoords=("data", "axes fraction"), rotation=90,
                    fontsize=8, color="grey", ha="right")
    ax.set_xlabel("time (s)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.set_xlim(0, END)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tcp", action="store_true", help="bulk TCP transfer (Figure 9)")
    ap.add_argument("--home", help="wanlab state folder (default: a temporary one)")
    a = ap.parse_args()
    import tempfile
    home = a.home or tempfile.mkdtemp(prefix="wanlab-abilene-")
    traffic = "tcp" if a.tcp else "ping"
    exp = ns.parse(os.path.join(HERE, "abilene.tcl"), params={"TRAFFIC": traffic},
                   name=f"abilene-{traffic}")
    lab = Lab(home, progress=True)
    summary = None
    try:
        summary = lab.run(exp)
        folder = summary["folder"]
        t0 = float(open(os.path.join(folder, "t0")).read())
        normal, d_normal = expected_path(exp)
        detour, d_detour = expected_path(exp, without=FAILED)
        out = os.path.join(ROOT, "bench", "results")
        os.makedirs(out, exist_ok=True)
        lines = [f"# Abilene: Denver-Kansas City fails at {FAIL_AT:g} s, restored at "
                 f"{RESTORE_AT:g} s ({traffic})", "",
                 f"Command: `python3 examples/abilene/run.py{' --tcp' if a.tcp else ''}`  ",
                 "Topology: examples/abilene/abilene.tcl (11 PoPs, 14 links, delays and OSPF "
                 "weights from great-circle distances; FRR OSPF, hello 1 s, dead 4 s).", "",
                 f"Normal path: {' - '.join(normal)} (one-way {d_normal * 1e3:.3f} ms)  ",
                 f"Detour: {' - '.join(detour)} (one-way {d_detour * 1e3:.3f} ms)", ""]
        if traffic == "ping":
            samples = ping_samples(os.path.join(folder, "programs", "pinger", "run-1.out"), t0)
            sent = max(s for _, _, s in samples)
            phases = {"before": (1.0, FAIL_AT), "during": (FAIL_AT + 2, RESTORE_AT),
                      "after": (RESTORE_AT + 2, END)}
            expect = {"before": 2 * d_normal, "during": 2 * d_detour, "after": 2 * d_normal}
            lines += ["| phase | window (s) | median RTT (ms) | expected RTT (ms) | error % | "
                      "goal (≤ 1 %) |", "|---|---|---|---|---|---|"]
            for ph, (lo, hi) in phases.items():
                med = statistics.median(r for t, r, _ in samples if lo <= t < hi)
                err = (med - expect[ph] * 1e3) / (expect[ph] * 1e3) * 100
                lines.append(f"| {ph} | {lo:g}–{hi:g} | {med:.3f} | {expect[ph] * 1e3:.3f} | "
                             f"{err:+.2f} | {'PASS' if abs(err) <= 1 else 'MISS'} |")
            mid = (d_normal + d_detour) * 1e3          # RTT threshold between the two paths
            reroute = min(t for t, r, _ in samples if t >= FAIL_AT) - FAIL_AT
            restore = min(t for t, r, _ in samples if t >= RESTORE_AT and r < mid) - RESTORE_AT
            lost = sent - len(samples)
            lines += ["", f"Time to reroute (first ping answered after the failure): "
                          f"{reroute * 1e3:.0f} ms  ",
                      f"Time to restore (first ping on the original path after the repair): "
                      f"{restore * 1e3:.0f} ms  ",
                      f"Pings sent {sent}, answered {len(samples)}, lost {lost} "
                      f"(one every 100 ms)"]
            png = os.path.join(out, "abilene-ping.png")
            plot([t for t, _, _ in samples], [r for _, r, _ in samples],
                 [("expected", 2 * d_normal * 1e3, 0, FAIL_AT),
                  ("expected", 2 * d_detour * 1e3, FAIL_AT, RESTORE_AT),
                  ("expected", 2 * d_normal * 1e3, RESTORE_AT, END)],
                 "RTT (ms)", "Washington → Seattle ping across the Denver–Kansas City "
                 "failure", png)
        else:
            (flow,) = [f for f in summary["flows"] if f["agent"] == "ftp0"]
            pts = [(flow["started_s"] + t, bps / 1e6) for t, bps in
                   flow["result"]["throughput_bps"]]
            for ph, (lo, hi) in {"before": (2, FAIL_AT), "during": (FAIL_AT + 2, RESTORE_AT),
                                 "after": (RESTORE_AT + 2, END)}.items():
                vals = [v for t, v in pts if lo <= t < hi]
                lines.append(f"- {ph} ({lo:g}–{hi:g} s): median {statistics.median(vals):.2f} "
                             f"Mbit/s over {len(vals)} intervals of 100 ms")
            gap = [t for t, v in pts if FAIL_AT <= t < FAIL_AT + 5 and v < 1]
            lines.append(f"- intervals under 1 Mbit/s in the 5 s after the failure: {len(gap)}"
                         f" (× 100 ms)")
            lines.append(f"- bytes received: {flow['result']['bytes']}")
            try:
                import json
                cc = json.load(open(os.path.join(folder, "flows", "ftp0-1.send.json")))[
                    "end"]["sender_tcp_congestion"]
                lines.append(f"- sender congestion control: {cc} (the nodes' kernel default)"
                             + ("; BBR's ProbeRTT phase shows as a dip every ~10 s"
                                if cc == "bbr" else ""))
            except (OSError, KeyError, ValueError):
                pass
            # iperf3 reports every 100 ms what the application read, which is bursty
            # (a hole filled by a retransmission releases everything behind it): plot 0.5 s
            # averages
            bins: dict[int, list[float]] = {}
            for t, v in pts:
                bins.setdefault(int(t / 0.5), []).append(v)
            png = os.path.join(out, "abilene-tcp.png")
            plot([k * 0.5 + 0.25 for k in sorted(bins)],
                 [sum(bins[k]) / len(bins[k]) for k in sorted(bins)], [],
                 "throughput (Mbit/s, 0.5 s averages)",
                 "Washington → Seattle TCP (iperf3) across the Denver–Kansas City failure",
                 png, style="-")
        lines += ["", f"Plot: {os.path.relpath(png, ROOT)}"]
        md = os.path.join(out, f"abilene-{traffic}.md")
        with open(md, "w") as f:
            f.write("\n".join(lines) + "\n")
        print("\n".join(lines))
    finally:
        if summary is not None:
            lab.terminate(summary["name"])    # results were copied to bench/results/
        lab.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
