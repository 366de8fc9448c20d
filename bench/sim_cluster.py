"""Parallel simulation across machines: one engine against 2 and 3 machines, each machine's
engine on 1 or more threads.

A ring of S sites (a router and H hosts each, 100 Mbit/s 1 ms access links; the site
routers joined by 100 Mbit/s 10 ms links), with bulk TCP NewReno flows from every host to
the same host of the site half the ring away and a 2 Mbit/s CBR flow per site to the next
one, simulated for T seconds in virtual time. Run once on one engine (``wanlab run
--simulate``), with ``--threads N``, and on local test clusters of M machines (``wanlab
run --simulate --cluster --threads T``: T threads in each machine's engine; the cluster is
started and removed for each M). Every run's result.json is compared byte for byte with
the single engine's.

Reported per run: the command's wall time (process start, JSON, Ray, everything), the
coordinating engine's own run time (after the engines connected), events, windows and
lookahead (between the engines), and the engine run time against the single engine's
(same bench run). On this 2-core VM every "machine" shares the same two cores (and other
work): the figures show the synchronisation's cost, not the speed-up real machines would
give.

    python3 bench/sim_cluster.py [--sites 12] [--hosts 8] [--duration 10]
                                 [--machines 2,3] [--threads 2] [--cluster-threads 1,2]

Results: bench/results/sim-cluster-latest.md and .json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ring(sites: int, hosts: int, duration: float) -> str:
    """The ns-2 script of the benchmark topology."""
    out = ["set ns [new Simulator]", "source tb_compat.tcl"]
    for i in range(sites):
        out.append(f"set r({i}) [$ns node]")
        for j in range(hosts):
            out.append(f"set h({i},{j}) [$ns node]")
            out.append(f"$ns duplex-link $h({i},{j}) $r({i}) 100Mb 1ms DropTail")
    for i in range(sites):
        out.append(f"$ns duplex-link $r({i}) $r({(i + 1) % sites}) 100Mb 10ms DropTail")
    k = 0
    for i in range(sites):
        for j in range(hosts):
            d = (i + sites // 2) % sites
            out += [f"set t{k} [new Agent/TCP/Newreno]", f"$t{k} set packetSize_ 1000",
                    f"$ns attach-agent $h({i},{j}) $t{k}", f"set s{k} [new Agent/TCPSink]",
                    f"$ns attach-agent $h({d},{j}) $s{k}", f"$ns connect $t{k} $s{k}",
                    f"set f{k} [new Application/FTP]", f"$f{k} attach-agent $t{k}",
                    f'$ns at {0.01 * (k % 50):.2f} "$f{k} start"',
                    f'$ns at {duration:g} "$f{k} stop"']
            k += 1
        n = (i + 1) % sites
        out += [f"set u{i} [new Agent/UDP]", f"$ns attach-agent $h({i},0) $u{i}",
                f"set z{i} [new Agent/Null]", f"$ns attach-agent $h({n},{hosts - 1}) $z{i}",
                f"$ns connect $u{i} $z{i}", f"set c{i} [new Application/Traffic/CBR]",
                f"$c{i} set packetSize_ 500", f"$c{i} set rate_ 2Mb",
                f"$c{i} attach-agent $u{i}", f'$ns at 0.1 "$c{i} start"',
                f'$ns at {duration:g} "$c{i} stop"']
    out.append("$ns run")
    return "\n".join(out) + "\n"


def wl(home: str, *args: str, timeout: float = 3600) -> tuple[subprocess.CompletedProcess,
                                                              float]:
    env = {**os.environ, "WANLAB_HOME": home, "PYTHONPATH": ROOT}
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "wanlab.cli", *args], capture_output=True,
                       text=True, env=env, timeout=timeout, check=False)
    if p.returncode != 0:
        raise SystemExit(f"wanlab {' '.join(args)} failed:\n{p.stdout}\n{p.stderr}")
    return p, time.monotonic() - t0


def run_sim(home: str, spec: str, out: str, *extra: str) -> dict:
    _, wall = wl(home, "run", spec, "--simulate", "--seed", "1", "--out", out, *extra)
    with open(os.path.join(out, "summary.json")) as f:
        e = json.load(f)["engine"]
    with open(os.path.join(out, "result.json"), "rb") as f:
        data = f.read()
    return {"command_wall_s": round(wall, 2), "engine_run_s": e.get("run_wall_s"),
            "events": e.get("events"), "windows": e.get("windows"),
            "lookahead_ms": (e.get("lookahead_ns") or 0) / 1e6 or None,
            "engines": e.get("engines") or 1, "partitions": e.get("threads") or 1,
            "result_bytes": len(data), "_data": data}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sites", type=int, default=12)
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--machines", default="2,3")
    ap.add_argument("--threads", default="2", help="of the single engine")
    ap.add_argument("--cluster-threads", default="1,2", help="of each machine's engine")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="wl-simcluster-")
    home = os.path.join(tmp, "home")
    spec = os.path.join(tmp, "ring.tcl")
    with open(spec, "w") as f:
        f.write(ring(args.sites, args.hosts, args.duration))
    load = os.getloadavg()[0]
    rows: list[dict] = []
    failed: list[str] = []
    try:
        one = run_sim(home, spec, os.path.join(tmp, "one"))
        rows.append({"how": "1 engine, 1 thread", **one})
        for t in [int(x) for x in args.threads.split(",") if x]:
            r = run_sim(home, spec, os.path.join(tmp, f"t{t}"), "--threads", str(t))
            rows.append({"how": f"1 engine, --threads {t}", **r})
        for m in [int(x) for x in args.machines.split(",") if x]:
            try:
                wl(home, "cluster", "up", "--local", str(m), timeout=1800)
            except SystemExit as e:     # e.g. Ray timing out on a loaded machine: say so
                print(str(e)[-2000:], file=sys.stderr)
                failed.append(f"{m} machines: cluster up failed ({str(e).splitlines()[-1]})")
                continue
            try:
                for t in [int(x) for x in args.cluster_threads.split(",") if x]:
                    r = run_sim(home, spec, os.path.join(tmp, f"m{m}t{t}"), "--cluster",
                                "--threads", str(t))
                    rows.append({"how": f"{m} machines (--cluster --threads {t})", **r})
            finally:
                wl(home, "cluster", "down", timeout=600)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for r in rows:
        r["identical"] = r.pop("_data") == one["_data"]
        r["run_vs_one"] = round(r["engine_run_s"] / one["engine_run_s"], 2) \
            if r["engine_run_s"] and one["engine_run_s"] else None
    nodes = args.sites * (args.hosts + 1)
    doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "sites": args.sites, "hosts_per_site": args.hosts, "nodes": nodes,
           "tcp_flows": args.sites * args.hosts, "cbr_flows": args.sites,
           "virtual_s": args.duration, "load_before": round(load, 1),
           "load_after": round(os.getloadavg()[0], 1), "runs": rows, "failed": failed}
    lines = [f"# Parallel simulation across machines ({doc['date']})", "",
             f"`python3 bench/sim_cluster.py --sites {args.sites} --hosts {args.hosts} "
             f"--duration {args.duration:g} --machines {args.machines} --threads "
             f"{args.threads} --cluster-threads {args.cluster_threads}`", "",
             f"Ring of {args.sites} sites ({nodes} nodes), {doc['tcp_flows']} TCP + "
             f"{doc['cbr_flows']} CBR flows, {args.duration:g} s virtual. Load average "
             f"{doc['load_before']} before, {doc['load_after']} after (2-core VM shared "
             "with other work; every local machine shares the same 2 cores).", "",
             "| how | engines | threads in all | command wall s | engine run s | run vs 1 "
             "engine | events | windows | lookahead ms | result.json identical |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['how']} | {r['engines']} | {r['partitions']} | "
                     f"{r['command_wall_s']} | {r['engine_run_s']} | {r['run_vs_one']}x | "
                     f"{r['events']} | {r['windows'] or '-'} | {r['lookahead_ms'] or '-'} | "
                     f"{'yes' if r['identical'] else 'NO'} |")
    lines += [f"\nNot measured: {f}" for f in failed]
    out = os.path.join(ROOT, "bench", "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "sim-cluster-latest.json"), "w") as f:
        json.dump(doc, f, indent=1)
    with open(os.path.join(out, "sim-cluster-latest.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if not all(r["identical"] for r in rows):
        raise SystemExit("a run's result.json differs from the single engine's")


if __name__ == "__main__":
    main()
