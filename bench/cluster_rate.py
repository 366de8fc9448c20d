"""Frame rate and latency across machines against the same path inside one machine
(issue 13's "cross-machine frame rate and added latency").

A local test cluster of 2 machines; one experiment with two unshaped links (100 Gbit/s,
0 ms): `cut` between a (on m0) and b (on m1), and `inside` between c and d (both on m1).
Interleaved, ``--repeats`` times, on each link: 64-byte UDP frames at the sender's
maximum rate for 3 s (frames received per second), TCP with iperf3 for 5 s, and the RTT
of 200 pings 10 ms apart.

    python3 bench/cluster_rate.py [--repeats 3]

About 3 minutes. Results: bench/results/cluster-rate-latest.md and .json, with the load
average: on this 2-core VM both "machines" (and the sender and receiver) share 2 cores,
so the ratio, not the absolute rate, is the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import FRAME_OVERHEAD, _udp, ping_stats, wl  # noqa: E402
from measure import save_results  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPEC = """\
set ns [new Simulator]
source tb_compat.tcl
foreach n {a b c d} { set $n [$ns node] }
set cut [$ns duplex-link $a $b 100Gb 0ms DropTail]
set inside [$ns duplex-link $c $d 100Gb 0ms DropTail]
foreach {n m} {a m0 b m1 c m1 d m1} { tb-fix-node [set $n] $m }
$ns rtproto Static
$ns run
"""
PATHS = {"cut": ("a", "b"), "inside": ("c", "d")}


def tcp(home: str, name: str, a: str, b: str, port: int) -> float:
    """iperf3 a -> b for 5 s: received bit/s."""
    wl(home, "exec", name, b, "--", "sh", "-c", f"iperf3 -s -1 -p {port} >/dev/null 2>&1 &")
    time.sleep(0.5)
    ip = wl(home, "exec", name, a, "--", "getent", "hosts", b).stdout.split()[0]
    out = wl(home, "exec", name, a, "--", "iperf3", "-c", ip, "-p", str(port), "-t", "5",
             "-J").stdout
    return json.loads(out)["end"]["sum_received"]["bits_per_second"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    home = tempfile.mkdtemp(prefix="wanlab-bench-rate-")
    spec = os.path.join(home, "rate.tcl")
    with open(spec, "w") as f:
        f.write(SPEC)
    got: dict[str, dict[str, list[float]]] = {
        p: {"pps": [], "tcp_bps": [], "rtt_min_ms": [], "rtt_avg_ms": []} for p in PATHS}
    load = [os.getloadavg()[0]]
    port = 7100
    try:
        wl(home, "cluster", "up", "--local", "2")
        wl(home, "create", spec, "--cluster")
        for _ in range(a.repeats):
            for path, (x, y) in PATHS.items():
                port += 1
                r = _udp(home, "rate", x, y, ["--size", str(64 - FRAME_OVERHEAD), "--max"],
                         port, 3.0)
                got[path]["pps"].append(r["pps"])
                port += 1
                got[path]["tcp_bps"].append(tcp(home, "rate", x, y, port))
                ip = wl(home, "exec", "rate", x, "--", "getent", "hosts", y).stdout.split()[0]
                st = ping_stats(wl(home, "exec", "rate", x, "--", "ping", "-n", "-q", "-c",
                                   "200", "-i", "0.01", ip).stdout)
                got[path]["rtt_min_ms"].append(st["rtt_min_ms"])
                got[path]["rtt_avg_ms"].append(st["rtt_avg_ms"])
                load.append(os.getloadavg()[0])
    finally:
        subprocess.run([sys.executable, "-m", "wanlab.cli", "cluster", "down"],
                       capture_output=True, env={**os.environ, "WANLAB_HOME": home,
                                                 "PYTHONPATH": ROOT}, check=False)
    med = {p: {k: statistics.median(v) for k, v in d.items()} for p, d in got.items()}
    c, i = med["cut"], med["inside"]
    rows = [("64-byte frames received, kpps", c["pps"] / 1e3, i["pps"] / 1e3,
             f"{c['pps'] / i['pps']:.2f}x"),
            ("TCP (iperf3, 1 stream), Gbit/s", c["tcp_bps"] / 1e9, i["tcp_bps"] / 1e9,
             f"{c['tcp_bps'] / i['tcp_bps']:.2f}x"),
            ("RTT minimum, µs", c["rtt_min_ms"] * 1e3, i["rtt_min_ms"] * 1e3,
             f"+{(c['rtt_min_ms'] - i['rtt_min_ms']) * 1e3:.0f} µs"),
            ("RTT mean, µs", c["rtt_avg_ms"] * 1e3, i["rtt_avg_ms"] * 1e3,
             f"+{(c['rtt_avg_ms'] - i['rtt_avg_ms']) * 1e3:.0f} µs")]
    md = (f"# Across machines against inside one (unshaped links)\n\n"
          f"`python3 bench/cluster_rate.py --repeats {a.repeats}`, medians, load "
          f"{min(load):.1f}-{max(load):.1f} (both machines share this host's 2 cores)\n\n"
          f"| figure | cut between m0 and m1 | inside m1 | cut against inside |\n"
          f"|---|---|---|---|\n" +
          "".join(f"| {n} | {x:.3g} | {y:.3g} | {r} |\n" for n, x, y, r in rows))
    print(md)
    print(save_results(os.path.join(ROOT, "bench", "results"), "cluster-rate", md,
                       {"runs": got, "median": med, "load": [min(load), max(load)]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
