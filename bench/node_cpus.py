#!/usr/bin/env python3
"""Nodes on cores: the policies of ``wanlab/backends/emulate/cpuplace.py`` against each other.

A chain ``a - b - c`` (zero-delay unlimited links, the kernel forwarding in ``b``) on a
two-thread engine (``engine: {threads: 2}``: two partitions pinned to two cores). For each
policy (``WANLAB_NODE_CPUS``: ``none`` = nodes on every CPU, ``with`` = each node on the
cores of the partitions that read its TAPs, ``apart`` = nodes off the engine's cores,
which falls back to ``with`` when there is no spare CPU) the experiment is made, then
iperf3 TCP from ``a`` to ``c`` for ``--seconds`` and 200 pings at 5 ms intervals; the
policies are interleaved in every repetition, and the table gives medians over
``--repeats``.

    sudo python3 bench/node_cpus.py [--repeats 3] [--seconds 3] [--policies none,with,apart]

About 20 s per policy and repetition. Writes bench/results/node-cpus-latest.{md,json}.
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from measure import save_results  # noqa: E402

from wanlab.backends.emulate import cpuplace  # noqa: E402
from wanlab.frontends.builder import ExperimentBuilder  # noqa: E402
from wanlab.lifecycle import Lab  # noqa: E402


def experiment(name: str):
    b = ExperimentBuilder(name)
    b.engine(threads=2)
    for n in ("a", "b", "c"):
        b.node(n)
    b.link("a", "b", name="l0")
    b.link("b", "c", name="l1")
    return b.build()


def one(lab: Lab, policy: str, seconds: float, k: int) -> dict:
    os.environ[cpuplace.ENV] = policy
    name = f"cpus{k}"
    lab.create(experiment(name))
    try:
        info = lab.show(name)
        placed = {n: (d.get("usage") or {}).get("cpus") for n, d in info["nodes"].items()}
        chosen = {(d.get("usage") or {}).get("cpus_policy") for d in info["nodes"].values()}
        c_ip = next(i["ip"].split("/")[0] for i in info["nodes"]["c"]["interfaces"])
        server = subprocess.Popen(lab.node_argv(name, "c", ["iperf3", "-s", "-1"]),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            bps = None
            for _ in range(20):
                r = lab.exec(name, "a", ["iperf3", "-c", c_ip, "-t", str(seconds), "-J"],
                             capture_output=True, text=True)
                if r.returncode == 0:
                    bps = json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"]
                    break
                time.sleep(0.2)
        finally:
            server.kill()
            server.wait()
        p = lab.exec(name, "a", ["ping", "-q", "-c", "200", "-i", "0.005", c_ip],
                     capture_output=True, text=True)
        rtt = None
        for line in p.stdout.splitlines():
            if "min/avg" in line:
                rtt = float(line.split("=")[1].split("/")[1]) * 1000   # avg, µs
        return {"policy": policy, "chosen": sorted(x for x in chosen if x), "cpus": placed,
                "tcp_bps": bps, "ping_avg_us": rtt}
    finally:
        lab.terminate(name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--policies", default="none,with,apart")
    a = ap.parse_args()
    policies = a.policies.split(",")
    load0 = os.getloadavg()
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="wanlab-bench-cpus-") as home:
        lab = Lab(home)
        try:
            k = 0
            for rep in range(a.repeats):
                for pol in policies:            # interleaved: every repeat runs each policy
                    k += 1
                    r = one(lab, pol, a.seconds, k)
                    r["repeat"] = rep
                    runs.append(r)
                    print(json.dumps(r), flush=True)
        finally:
            lab.close()
    load1 = os.getloadavg()

    def med(pol, key):
        xs = [r[key] for r in runs if r["policy"] == pol and r[key] is not None]
        return statistics.median(xs) if xs else None

    cmd = "sudo python3 bench/node_cpus.py " + " ".join(sys.argv[1:])
    md = ["# Nodes on cores: placement policies on a two-thread engine", "",
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs; "
          f"load average {load0[0]:.1f} at the start, {load1[0]:.1f} at the end.",
          f"Command: `{cmd.strip()}`", "",
          f"Chain a - b - c, 2 engine partitions, {a.repeats} interleaved repeats; medians "
          "(every repeat's figure in brackets).", "",
          "| policy | chosen | node CPUs (first run) | TCP a->c (Mb/s) | ping avg (µs) |",
          "|---|---|---|---|---|"]
    for pol in policies:
        mine = [r for r in runs if r["policy"] == pol]
        tcp = ", ".join("–" if r["tcp_bps"] is None else f"{r['tcp_bps'] / 1e6:.0f}"
                        for r in mine)
        ping = ", ".join("–" if r["ping_avg_us"] is None else f"{r['ping_avg_us']:.0f}"
                         for r in mine)
        m_tcp, m_ping = med(pol, "tcp_bps"), med(pol, "ping_avg_us")
        cpus = " ".join(f"{n}:{c}" for n, c in sorted(mine[0]["cpus"].items()))
        md.append(f"| {pol} | {','.join(mine[0]['chosen']) or '-'} | {cpus} | "
                  f"{'–' if m_tcp is None else f'{m_tcp / 1e6:.0f}'} ({tcp}) | "
                  f"{'–' if m_ping is None else f'{m_ping:.0f}'} ({ping}) |")
    path = save_results(os.path.join(ROOT, "bench", "results"), "node-cpus",
                        "\n".join(md) + "\n", {"runs": runs, "load": [load0, load1]})
    print("\n".join(md))
    print(f"written {path}")


if __name__ == "__main__":
    main()
