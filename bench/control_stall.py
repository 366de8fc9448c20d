#!/usr/bin/env python3
"""Does large control work stall packets? (issue 17, defect 7)

Two namespaces joined by one engine link (``netlab.EngineTopo``, unshaped); a ping
every 5 ms crosses it while a second control connection sends one ``apply`` of N
simulated routers chained by N-1 links (20 000 routers: ~5 MB of JSON). Reported per
repetition: the ping RTT median before the apply, the largest RTT of the pings sent
while the apply was being received, parsed and executed, pings lost, and how long the
apply took to answer. Each repetition uses a fresh engine. Needs root.

    sudo python3 bench/control_stall.py [--routers 20000] [--reps 3] [--engine PATH]
        [--out bench/results/control-stall-latest.md]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netlab  # noqa: E402

PING_INTERVAL = 0.005


def big_apply(n: int) -> bytes:
    """An apply of `n` routers, two interfaces each, chained by n-1 links."""
    routers, links = [], []
    for i in range(n):
        ifs = []
        for j in (0, 1):
            k = 2 * i + j
            addr = (10 << 24) | (128 << 16) | (4 * k + 1)
            ip = ".".join(str((addr >> s) & 255) for s in (24, 16, 8, 0))
            mac = "02:%02x:%02x:%02x:%02x:%02x" % (j, (i >> 24) & 255, (i >> 16) & 255,
                                                  (i >> 8) & 255, i & 255)
            ifs.append({"port": f"r{i}-{j}", "mac": mac, "ip": f"{ip}/30"})
        routers.append({"router": f"r{i}", "interfaces": ifs, "routes": []})
        if i:
            links.append({"link": f"c{i}", "a": f"r{i - 1}-1", "b": f"r{i}-0",
                          "ab": {"delay_us": 1000}, "ba": {"delay_us": 1000}})
    req = {"id": "big", "cmd": "apply", "routers": routers, "links": links}
    return (json.dumps(req, separators=(",", ":")) + "\n").encode()


def one_rep(lab: netlab.Lab, rep: int, payload: bytes) -> dict:
    topo = netlab.EngineTopo(lab, suffix=f"s{rep}")
    ping = lab.popen(netlab.ns_cmd(topo.ns_a, ["ping", "-n", "-D", "-i", str(PING_INTERVAL),
                                               "-W", "10", topo.ip_b]))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(ping.stdout), daemon=True)
    reader.start()
    time.sleep(2.0)  # baseline
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(topo.engine.path)
    s.settimeout(120)
    t0 = time.time()
    s.sendall(payload)
    reply = s.makefile("r").readline()
    t1 = time.time()
    s.close()
    time.sleep(2.0)  # let late replies arrive
    ping.send_signal(2)
    ping.wait(timeout=10)
    reader.join(timeout=5)
    ok = json.loads(reply).get("ok")
    sent = {}
    for line in lines:
        m = re.match(r"\[(\d+\.\d+)\].*icmp_seq=(\d+).*time=([\d.]+) ms", line)
        if m:
            rtt = float(m.group(3))
            sent[int(m.group(2))] = (float(m.group(1)) - rtt / 1000, rtt)
    base = [rtt for t, rtt in sent.values() if t < t0 - 0.1]
    during = [rtt for t, rtt in sent.values() if t0 <= t <= t1]
    seqs = sorted(sent)
    lost = (seqs[-1] - seqs[0] + 1 - len(seqs)) if seqs else None
    topo.close()
    for ns in (topo.ns_a, topo.ns_b):
        lab.del_ns(ns)
    return {"ok": ok, "apply_s": t1 - t0, "base_p50_ms": statistics.median(base) if base else None,
            "during_max_ms": max(during) if during else None,
            "during_p50_ms": statistics.median(during) if during else None,
            "during_n": len(during), "lost": lost}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--routers", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--engine", default=netlab.ENGINE)
    ap.add_argument("--label", default="")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    netlab.ENGINE = a.engine
    payload = big_apply(a.routers)
    lab = netlab.Lab()
    rows = []
    try:
        for r in range(a.reps):
            row = one_rep(lab, r, payload)
            rows.append(row)
            print(f"rep {r + 1}: {json.dumps(row)}", flush=True)
    finally:
        lab.close()

    def med(k):
        vals = [x[k] for x in rows if x[k] is not None]
        return statistics.median(vals) if vals else None

    load = os.getloadavg()
    label = a.label or os.path.basename(a.engine)
    summary = (f"| {label} | {a.routers} | {len(payload) / 1e6:.1f} MB "
               f"| {med('apply_s'):.3f} s | {med('base_p50_ms'):.3f} ms "
               f"| {med('during_p50_ms')} ms | **{med('during_max_ms')} ms** "
               f"| {med('lost')} | {load[0]:.1f} |")
    print(summary)
    if a.out:
        with open(a.out, "a") as f:
            f.write(summary + "\n")
    return 0 if all(x["ok"] for x in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
