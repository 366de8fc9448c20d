"""Five regions on a latency-matrix LAN (regions5.yaml): every pair's RTT, and the commit
latency of a real 5-member etcd cluster with its leader in each region, against the matrix.

    python3 examples/regions5.py          # as root; about a minute
    python3 examples/regions5.py --no-etcd

A replicated log with 5 replicas (Raft, as in etcd) commits an entry when a majority (3)
has it: the leader's own copy and the 2 fastest acknowledgements, so a leader in region i
commits after the 2nd smallest RTT from i to the other four regions. The script measures
each pair's RTT with ping (minimum of 5, so ARP and scheduling noise drop out); then, if
etcd is installed (Debian's etcd-server), it runs one etcd member per region (unmodified,
data in each node's private /tmp), moves the leadership to each region in turn
(``etcdctl move-leader``) and times writes made at the leader through etcd's HTTP gateway.
Each table shows what the matrix says next to what was measured.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from wanlab.api import Experiment  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RTT = re.compile(r"rtt min/avg/max/mdev = ([\d.]+)/")


# one write at a time at the leader, through etcd's JSON gateway (a local client: the time
# is the commit, not the client's path); prints the latencies in ms as JSON
PUTS = r"""
import base64, json, sys, time, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
b64 = lambda s: base64.b64encode(s.encode()).decode()
out = []
for i in range(int(sys.argv[1])):
    body = json.dumps({"key": b64("k"), "value": b64(str(i))}).encode()
    t = time.monotonic()
    opener.open(urllib.request.Request("http://127.0.0.1:2379/v3/kv/put", body), timeout=10).read()
    out.append((time.monotonic() - t) * 1000)
print(json.dumps(out))
"""


def quorum_rtt(rtt: dict[tuple[str, str], float], nodes: list[str], leader: str) -> float:
    """The RTT after which ``leader`` has a majority: its own copy and the fastest
    acknowledgements (with 5 members, the 2nd smallest RTT from it)."""
    return sorted(rtt[leader, b] for b in nodes if b != leader)[len(nodes) // 2 - 1]


def etcd_commits(exp: Experiment, nodes: list[str], writes: int = 20) -> dict[str, list[float]]:
    """Start one etcd member per node, put the leader in each region in turn, and return
    each leader's write latencies (ms). The members are stopped (and reaped) at the end."""
    ip = {n: exp.exec(n, ["getent", "hosts", f"{n}-wan"], check=True).stdout.split()[0]
          for n in nodes}
    cluster = ",".join(f"{n}=http://{ip[n]}:2380" for n in nodes)
    members = []
    try:
        for n in nodes:
            # heartbeat and election timeout sized for a 236 ms RTT (etcd's tuning guide:
            # heartbeat about the round trip, election timeout ten times it)
            members.append(exp.popen(n, [
                "etcd", "--name", n, "--data-dir", f"/tmp/etcd-{n}",
                "--listen-peer-urls", f"http://{ip[n]}:2380",
                "--initial-advertise-peer-urls", f"http://{ip[n]}:2380",
                "--listen-client-urls", f"http://{ip[n]}:2379,http://127.0.0.1:2379",
                "--advertise-client-urls", f"http://{ip[n]}:2379",
                "--initial-cluster", cluster, "--initial-cluster-state", "new",
                "--initial-cluster-token", "regions5",
                "--heartbeat-interval", "250", "--election-timeout", "2500"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        endpoints = ",".join(f"http://{ip[n]}:2379" for n in nodes)

        def status() -> tuple[dict[str, int], int]:
            out = exp.exec(nodes[0], ["etcdctl", "--endpoints", endpoints, "endpoint",
                                      "status", "-w", "json"], timeout=30)
            if out.returncode:
                return {}, 0
            rows = json.loads(out.stdout)
            ids = {r["Endpoint"].split("//")[1].split(":")[0]: r["Status"]["header"]["member_id"]
                   for r in rows}
            by_ip = {v: k for k, v in ip.items()}
            return {by_ip[a]: i for a, i in ids.items()}, rows[0]["Status"]["leader"]

        deadline = time.monotonic() + 60
        ids, leader = status()
        while (len(ids) < len(nodes) or not leader) and time.monotonic() < deadline:
            time.sleep(1)
            ids, leader = status()
        if len(ids) < len(nodes) or not leader:
            raise SystemExit("etcd did not elect a leader in 60 s")
        result: dict[str, list[float]] = {}
        for n in nodes:
            if leader != ids[n]:
                cur = next(m for m, i in ids.items() if i == leader)
                exp.exec(cur, ["etcdctl", "--endpoints", f"http://{ip[cur]}:2379",
                               "move-leader", format(ids[n], "x")], check=True, timeout=60)
                deadline = time.monotonic() + 30
                while leader != ids[n] and time.monotonic() < deadline:
                    time.sleep(0.5)
                    leader = status()[1]
            exp.exec(n, ["python3", "-c", PUTS, "3"], check=True, timeout=60)   # warm-up
            out = exp.exec(n, ["python3", "-c", PUTS, str(writes)], check=True, timeout=120)
            result[n] = json.loads(out.stdout)
        return result
    finally:
        for p in members:
            p.terminate()
        for p in members:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-etcd", action="store_true", help="ping only")
    ap.add_argument("--writes", type=int, default=20, help="writes per leader (20)")
    args = ap.parse_args()
    use_etcd = not args.no_etcd and shutil.which("etcd") and shutil.which("etcdctl")
    exp = Experiment.from_file(os.path.join(HERE, "regions5.yaml"))
    lan = exp.ir.lans[0]
    nodes = [m.node for m in lan.members]
    d = {(p.src, p.dst): p.params.delay_s * 1000 for p in lan.pairs}
    measured: dict[tuple[str, str], float] = {}
    with exp:
        for i, a in enumerate(nodes):
            for b in nodes[i + 1:]:
                # one ping first: until ARP has resolved (one RTT), pings wait in the
                # kernel's queue and leave together, so their RTTs would include that wait
                exp.exec(a, ["ping", "-n", "-q", "-c", "1", "-W", "3", f"{b}-wan"])
                out = exp.exec(a, ["ping", "-n", "-q", "-c", "5", "-i", "0.05", "-W", "2",
                                   f"{b}-wan"]).stdout
                m = RTT.search(out)
                measured[a, b] = measured[b, a] = float(m.group(1)) if m else float("nan")
        commits = etcd_commits(exp, nodes, args.writes) if use_etcd else {}
    print(f"{'pair':<14} {'matrix RTT':>11} {'measured':>9} {'error':>8}")
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            want = d[a, b] + d[b, a]
            got = measured[a, b]
            print(f"{a + '-' + b:<14} {want:>8.2f} ms {got:>6.2f} ms {got - want:>+6.2f} ms")
    rtt = {(x, y): d[x, y] + d[y, x] for x in nodes for y in nodes if x != y}
    print(f"\n{'leader':<8} {'quorum RTT (matrix)':>20} {'(pinged)':>10}"
          + (f" {'etcd commit p50':>16} {'min':>9} {'max':>9}" if commits else ""))
    for x in nodes:
        want, got = quorum_rtt(rtt, nodes, x), quorum_rtt(measured, nodes, x)
        line = f"{x:<8} {want:>17.2f} ms {got:>7.2f} ms"
        if commits:
            c = commits[x]
            line += f" {statistics.median(c):>13.2f} ms {min(c):>6.2f} ms {max(c):>6.2f} ms"
        print(line)
    if not use_etcd and not args.no_etcd:
        print("\n(etcd is not installed: apt-get install etcd-server etcd-client)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
