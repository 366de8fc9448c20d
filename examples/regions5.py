"""Five regions on a latency-matrix LAN (regions5.yaml): every pair's RTT and each region's
quorum commit latency, measured against the matrix.

    python3 examples/regions5.py          # as root; ~15 s

A replicated log with 5 replicas (Raft, Paxos) commits an entry when a majority (3) has it:
the leader's own copy and the 2 fastest acknowledgements, so a leader in region i commits
after the 2nd smallest RTT from i to the other four regions. The script measures each
pair's RTT with ping (minimum of 5, so ARP and scheduling noise drop out) and prints both
tables, measured next to what the matrix says.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from wanlab.api import Experiment  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RTT = re.compile(r"rtt min/avg/max/mdev = ([\d.]+)/")


def main() -> int:
    exp = Experiment.from_file(os.path.join(HERE, "regions5.yaml"))
    lan = exp.ir.lans[0]
    nodes = [m.node for m in lan.members]
    d = {(p.src, p.dst): p.params.delay_s * 1000 for p in lan.pairs}
    measured: dict[tuple[str, str], float] = {}
    with exp:
        for i, a in enumerate(nodes):
            for b in nodes[i + 1:]:
                out = exp.exec(a, ["ping", "-n", "-q", "-c", "5", "-i", "0.05", "-W", "2",
                                   f"{b}-wan"]).stdout
                m = RTT.search(out)
                measured[a, b] = measured[b, a] = float(m.group(1)) if m else float("nan")
    print(f"{'pair':<14} {'matrix RTT':>11} {'measured':>9} {'error':>8}")
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            want = d[a, b] + d[b, a]
            got = measured[a, b]
            print(f"{a + '-' + b:<14} {want:>8.2f} ms {got:>6.2f} ms {got - want:>+6.2f} ms")
    print(f"\n{'leader':<8} {'commit (matrix)':>16} {'commit (measured)':>18}")
    for a in nodes:
        want = sorted(d[a, b] + d[b, a] for b in nodes if b != a)[1]
        got = sorted(measured[a, b] for b in nodes if b != a)[1]
        print(f"{a:<8} {want:>13.2f} ms {got:>15.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
