#!/usr/bin/env python3
"""Impairments measured on the wire (root): ping across one real engine link, each
impairment against its definition.

    sudo python3 bench/impair_wire.py [--n 1000]

Rows: normal jitter (Kolmogorov-Smirnov distance of the RTTs less their base against the
configured normal, and the 1 % critical value), Gilbert-Elliott mean burst length against
1/r, and duplicate, corrupt (as loss: the receiver's checksums drop it) and reorder rates
inside their 99 % binomial intervals. Trace replay: bench/trace_replay.py.
"""

import argparse
import math
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from wanlab import api  # noqa: E402
from wanlab.frontends.builder import ExperimentBuilder  # noqa: E402


def experiment():
    b = ExperimentBuilder("impwire")
    for n in "ab":
        b.node(n)
    b.link("a", "b", name="l", bandwidth="100Mb", delay="10ms")
    return b.build()


def ping(exp, n, interval="0.005"):
    ip = exp.show()["nodes"]["b"]["interfaces"][0]["ip"].split("/")[0]
    r = exp.exec("a", ["ping", "-n", "-c", str(n), "-i", interval, "-W", "3", ip])
    replies = [(int(s), float(t)) for s, t in
               re.findall(r"icmp_seq=(\d+) ttl=\d+ time=([\d.]+) ms", r.stdout)]
    return replies, r.stdout


def within(k, n, p, z=2.576):
    sd = math.sqrt(n * p * (1 - p))
    return n * p - z * sd <= k <= n * p + z * sd, (n * p - z * sd, n * p + z * sd)


def row(name, value, goal, ok):
    print(f"| {name} | {value} | {goal} | {'PASS' if ok else 'MISS'} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=1000)
    n = ap.parse_args().n
    print("| impairment | measured | goal | |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory() as home, \
            api.Experiment(experiment(), home=home) as exp:
        base, _ = ping(exp, 50, "0.02")
        b0 = min(t for _, t in base)
        # jitter: normal, sd 4 ms, on the replies only; reordering allowed so that the
        # samples are the distribution's own
        exp.set_link("l", "ba", jitter={"value": "4ms", "distribution": "normal",
                                        "reorder": True})
        rep, _ = ping(exp, n, "0.02")
        xs = sorted(t - b0 for _, t in rep)
        cdf = [0.5 * (1 + math.erf(x / (4 * math.sqrt(2)))) for x in xs]
        d = max(max(abs((i + 1) / len(xs) - c), abs(i / len(xs) - c))
                for i, c in enumerate(cdf))
        crit = 1.63 / math.sqrt(len(xs))
        row("jitter normal 4 ms (KS distance)", f"{d:.4f} ({len(xs)} samples)",
            f"< {crit:.4f} (1 %)", d < crit)
        exp.set_link("l", "ba", jitter="0ms")
        # Gilbert-Elliott on the requests: bursts of the bad state (h = 0), mean 1/r
        p, r = 0.02, 0.3
        exp.set_link("l", "ab", loss={"model": "gilbert-elliott", "p": p, "r": r})
        rep, _ = ping(exp, 4 * n)
        got = {s for s, _ in rep}
        lost = [s not in got for s in range(1, 4 * n + 1)]
        bursts = [len(m.group()) for m in re.finditer("1+", "".join("1" if x else "0"
                                                                   for x in lost))]
        mean = sum(bursts) / max(1, len(bursts))
        sd = math.sqrt((1 - r) / r ** 2 / max(1, len(bursts)))
        row("Gilbert-Elliott burst length", f"{mean:.3f} ({len(bursts)} bursts)",
            f"1/r = {1 / r:.3f} ± {2.576 * sd:.3f}", abs(mean - 1 / r) <= 2.576 * sd)
        exp.set_link("l", "ab", loss=0)
        # duplicate 10 % (replies counted twice by ping)
        exp.set_link("l", "ab", duplicate=0.1)
        _, out = ping(exp, n)
        dup = int(m.group(1)) if (m := re.search(r"\+(\d+) duplicates", out)) else 0
        ok, (lo, hi) = within(dup, n, 0.1)
        row("duplicate 10 %", f"{dup}/{n}", f"{lo:.0f}..{hi:.0f}", ok)
        exp.set_link("l", "ab", duplicate=0)
        # corrupt 5 %: a corrupted request is dropped by b's checksums
        exp.set_link("l", "ab", corrupt=0.05)
        rep, _ = ping(exp, n)
        bad = n - len({s for s, _ in rep})
        ok, (lo, hi) = within(bad, n, 0.05)
        row("corrupt 5 % (dropped by checksums)", f"{bad}/{n}", f"{lo:.0f}..{hi:.0f}", ok)
        exp.set_link("l", "ab", corrupt=0)
        # reorder 10 %: a request that skips the 10 ms delay comes back 10 ms early (ping's
        # own interval is too irregular under load to see the overtaking itself)
        exp.set_link("l", "ab", reorder=0.1)
        rep, _ = ping(exp, n, "0.005")
        early = sum(1 for _, t in rep if t < b0 - 5)
        ok, (lo, hi) = within(early, len(rep), 0.1)
        row("reorder 10 % (requests that skipped the delay)", f"{early}/{len(rep)}",
            f"{lo:.0f}..{hi:.0f}", ok)


if __name__ == "__main__":
    main()
