"""OSPF convergence time against the hello/dead intervals, for two kinds of failure.

The topology is a square of routers, a-b-c-d-a (5 ms links, with d-a costing 10),
running FRR OSPF. a pings c every 10 ms while b-c fails, and the outage is the
longest gap between replies. There are two kinds of failure:

* ``carrier``: the engine's ``down``. Carrier drops on both ends, ospfd sees the
  interface go down at once, and the outage should not depend on the timers.
* ``silent``: ``plr 1``. Every frame is lost but carrier stays up, as with a
  failure inside a provider's network, so ospfd notices only when the dead
  interval expires. The outage should track the dead interval.

    python3 bench/convergence.py [--timers 1/4,2/8,5/20,10/40]

Results go to bench/results/convergence-latest.md and .json.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from wanlab.frontends import ns  # noqa: E402
from wanlab.lifecycle import Lab  # noqa: E402

SQUARE = """set ns [new Simulator]
foreach n {{a b c d}} {{ set $n [$ns node] }}
set ab [$ns duplex-link $a $b 100Mb 5ms DropTail]
set bc [$ns duplex-link $b $c 100Mb 5ms DropTail]
set cd [$ns duplex-link $c $d 100Mb 5ms DropTail]
set da [$ns duplex-link $d $a 100Mb 5ms DropTail]
$ns cost $d $a 10
$ns rtproto OSPF
tb-set-ospf-timers {hello} {dead}
$ns run
"""


def outage(lab: Lab, name: str, kind: str, dead: int) -> float:
    # a count, not a deadline: with -w, iputils ping gives up at the first ICMP error
    ping = subprocess.Popen(lab.node_argv(name, "a", [
        "ping", "-n", "-D", "-i", "0.01", "-c", str(100 * (dead + 8)), "c"]),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    time.sleep(2.0)
    if kind == "carrier":
        lab.tevc(name, "now", "bc", "down", wait=True)
    else:
        lab.tevc(name, "now", "bc", "plr", ["1"], wait=True)
    out, _ = ping.communicate(timeout=2 * (dead + 8) + 60)
    times = [float(t) for t in re.findall(r"^\[([\d.]+)\] \d+ bytes from", out, re.M)]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    if times and times[-1] - times[0] < dead + 4:
        return float("inf")      # replies never came back before ping gave up
    return max(gaps) if gaps else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--timers", default="1/4,2/8,5/20,10/40")
    a = ap.parse_args()
    home = tempfile.mkdtemp(prefix="wanlab-bench-conv-")
    lab = Lab(home)
    rows = []
    try:
        for pair in a.timers.split(","):
            hello, dead = (int(x) for x in pair.split("/"))
            for kind in ("carrier", "silent"):
                path = os.path.join(home, "square.tcl")
                with open(path, "w") as f:
                    f.write(SQUARE.format(hello=hello, dead=dead))
                exp = ns.parse(path, name=f"conv-{hello}-{dead}-{kind}")
                lab.create(exp)
                try:
                    gap = outage(lab, exp.name, kind, dead)
                finally:
                    lab.terminate(exp.name)
                rows.append({"hello_s": hello, "dead_s": dead, "failure": kind,
                             "outage_s": gap})
                print(f"hello {hello:2d} s dead {dead:2d} s {kind:8}: outage {gap:.3f} s",
                      flush=True)
    finally:
        lab.close()
    cmd = "python3 bench/convergence.py " + " ".join(sys.argv[1:])
    lines = [f"# OSPF convergence against hello/dead intervals ({datetime.date.today()})", "",
             f"Command: `{cmd}`  ",
             "Square a-b-c-d-a (5 ms links, d-a cost 10), FRR OSPF; a pings c every 10 ms; "
             "b-c fails by carrier (`down`) or silently (`plr 1`); outage = longest gap "
             "between replies.", "",
             "| hello s | dead s | failure | outage s | outage / dead |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['hello_s']} | {r['dead_s']} | {r['failure']} | "
                     f"{r['outage_s']:.3f} | {r['outage_s'] / r['dead_s']:.2f} |")
    text = "\n".join(lines) + "\n"
    out = os.path.join(ROOT, "bench", "results")
    with open(os.path.join(out, "convergence-latest.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "convergence-latest.json"), "w") as f:
        json.dump(rows, f, indent=2)
    print("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
