"""The cluster against one machine, in the same run (issue 13's "Shows").

1. Swap-in of a 300-node chain with a 20-host LAN at its end (static routes), on this
   machine and placed over a local test cluster of 3 machines; the end-to-end RTT of both.
2. A cut link's fidelity: a—b at 10 ms, 10 Mbit/s, 1 % loss each way, once on one machine
   and once with a and b pinned to two machines (the link tunnelled engine to engine):
   RTT (min/median, 500 pings), ping loss (both directions: ~2 %), TCP throughput (iperf3,
   10 s), and the RTT the cut adds.

    python3 bench/cluster.py [--machines 3] [--chain 300]

Results: bench/results/cluster-latest.md and .json. The machine's load is recorded: on
this 2-core VM every "machine" shares the same two cores.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def wl(home: str, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANLAB_HOME": home, "PYTHONPATH": ROOT}
    p = subprocess.run([sys.executable, "-m", "wanlab.cli", *args], capture_output=True,
                       text=True, env=env, timeout=timeout, check=False)
    if p.returncode != 0:
        raise SystemExit(f"wanlab {' '.join(args)} failed: {p.stdout.strip()[-300:]} "
                         f"{p.stderr.strip()}")
    return p


def chain_spec(n: int, hosts: int) -> str:
    nodes = [f"n{i}" for i in range(n)] + [f"h{i}" for i in range(hosts)]
    lines = [f"name: big\nrouting: static\nnodes: [{', '.join(nodes)}]\nlinks:"]
    lines += [f"  - {{name: l{i}, nodes: [n{i}, n{i + 1}], bandwidth: 100Mb, delay: 1ms}}"
              for i in range(n - 1)]
    lines.append(f"lans:\n  - {{name: lan0, nodes: [n{n - 1}, "
                 f"{', '.join(f'h{i}' for i in range(hosts))}], bandwidth: 100Mb}}")
    return "\n".join(lines) + "\n"


PAIR = """name: cut
routing: static
nodes: [a, b]
links:
  - {name: l0, nodes: [a, b], bandwidth: 10Mb, delay: 10ms, loss: 0.01}
"""


def ping_stats(out: str) -> dict:
    loss = float(re.search(r"([\d.]+)% packet loss", out).group(1))
    m = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms", out)
    return {"loss_pct": loss, "rtt_min_ms": float(m.group(1)), "rtt_avg_ms": float(m.group(2))}


def pair_measure(home: str, name: str) -> dict:
    p = wl(home, "exec", name, "a", "--", "ping", "-q", "-c", "500", "-i", "0.01", "b")
    res = ping_stats(p.stdout)
    wl(home, "exec", name, "b", "--", "iperf3", "-s", "-1", "-D")
    time.sleep(0.5)
    perf = json.loads(wl(home, "exec", name, "a", "--", "iperf3", "-c", "b", "-t", "10",
                         "-J").stdout)
    res["tcp_mbps"] = perf["end"]["sum_received"]["bits_per_second"] / 1e6
    return res


GEN = os.environ.get("WANLAB_GEN") or os.path.join(ROOT, "target", "release", "wanlab-gen")
FRAME_OVERHEAD = 42          # Ethernet + IP + UDP headers of a frame the engine counts


def _udp(home: str, name: str, a: str, b: str, args: list[str], port: int,
         seconds: float) -> dict:
    """A UDP stream a -> b through wanlab-gen; the sink's report (it runs in b's own
    /tmp-backed shell in the background and ends 2 s after the stream)."""
    ip = wl(home, "exec", name, a, "--", "getent", "hosts", b).stdout.split()[0]
    wl(home, "exec", name, b, "--", "sh", "-c",
       f"{GEN} sink --bind 0.0.0.0:{port} --idle-exit 60 --fin-exit 0.5 --duration "
       f"{seconds + 90} --json "
       f"> /tmp/sink-{port}.json 2>&1 &")
    time.sleep(0.5)
    wl(home, "exec", name, a, "--", GEN, "send", "--dst", f"{ip}:{port}", *args,
       "--duration", str(seconds), "--json")
    for _ in range(60):
        time.sleep(1)
        text = wl(home, "exec", name, b, "--", "cat", f"/tmp/sink-{port}.json").stdout
        if text.strip():
            return json.loads(text.strip().splitlines()[-1])
    raise SystemExit(f"no sink report from {b}")


def link_fidelity(home: str, name: str, link: str, a: str, b: str,
                  base: dict | None) -> dict:
    """The fidelity suite's three checks on one link of a running experiment, changed with
    tevc: RTT at 10 ms (goal: within max(0.5 %, 50 us) of 20 ms plus what one machine's
    engine adds at 0 ms: ``base``, the RTT at 0 ms of a link inside one machine, else this
    link's own), throughput at 10 Mbit/s (1514-byte frames offered at 103 %; goal 0.5 %),
    and 2.5 % loss (64-byte frames, 20 000; goal: inside the 99 % binomial interval).
    a -> b is the direction measured (a cut link's: shaped by a's machine). The RTT is
    judged by its mean (the suite's measure) and by its minimum (on a loaded host the
    mean also measures the scheduler)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from measure import binom_interval

    def tevc(*args: str) -> None:
        wl(home, "tevc", "-w", name, "now", link, *args)

    def ping() -> dict:
        return ping_stats(wl(home, "exec", name, a, "--", "ping", "-q", "-c", "300", "-i",
                             "0.01", b).stdout)
    res: dict = {"link": link, "a": a, "b": b}
    tevc("delay", "0ms")
    r = ping()
    res["rtt_0ms_avg_ms"], res["rtt_0ms_min_ms"] = r["rtt_avg_ms"], r["rtt_min_ms"]
    tevc("delay", "10ms")
    r = ping()
    res["rtt_10ms_avg_ms"], res["rtt_10ms_min_ms"] = r["rtt_avg_ms"], r["rtt_min_ms"]
    base = base or res
    for k in ("avg", "min"):
        err = (res[f"rtt_10ms_{k}_ms"] - base[f"rtt_0ms_{k}_ms"]) * 1e3 - 20000.0
        res[f"rtt_{k}_error_us"] = err
        res[f"rtt_{k}_goal"] = abs(err) <= max(0.005 * 20000.0, 50.0)
    tevc("delay", "0ms")
    tevc("bandwidth", "10Mb")
    k = _udp(home, name, a, b, ["--size", str(1514 - FRAME_OVERHEAD), "--bitrate",
                                str(int(10e6 * 1.03))], 31001, 5.0)
    res["bw_measured_bps"] = k["bps_frame"]
    res["bw_error_pct"] = (k["bps_frame"] - 10e6) / 10e6 * 100
    res["bw_goal"] = abs(res["bw_error_pct"]) <= 0.5
    tevc("bandwidth", "100Mb")
    tevc("plr", "0.025")
    k = _udp(home, name, a, b, ["--size", str(64 - FRAME_OVERHEAD), "--rate", "2000"],
             31002, 10.0)
    lo, hi = binom_interval(k["expected"], 0.025)
    res.update(loss_expected=k["expected"], loss_lost=k["lost"], loss_lo=lo, loss_hi=hi,
               loss_measured=k["lost"] / k["expected"] if k["expected"] else None,
               loss_goal=lo <= k["lost"] <= hi)
    tevc("plr", "0")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--machines", type=int, default=3)
    ap.add_argument("--chain", type=int, default=300)
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="wanlab-bench-cluster-")
    home = os.path.join(tmp, "home")
    out: dict = {"load_start": os.getloadavg()[0]}
    try:
        spec = os.path.join(tmp, "big.yaml")
        with open(spec, "w") as f:
            f.write(chain_spec(a.chain, a.hosts))
        t0 = time.monotonic()
        wl(home, "create", spec)
        out["one_machine_swapin_s"] = time.monotonic() - t0
        # IP's TTL (at most 255) bounds a ping's hops: aim at the middle of the chain
        mid = min(a.chain - 1, 150)
        last = f"n{mid}"
        # ... and the replies too: the target's own TTL is 64 unless raised
        wl(home, "exec", "big", last, "--", "sysctl", "-q", "-w", "net.ipv4.ip_default_ttl=255")
        out["one_machine_ping"] = ping_stats(wl(home, "exec", "big", "n0", "--", "ping", "-q",
                                                "-c", "8", "-i", "0.2", "-w", "30", "-t", "255",
                                                last).stdout)
        wl(home, "terminate", "big")
        t0 = time.monotonic()
        wl(home, "cluster", "up", "--local", str(a.machines))
        out["cluster_up_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        wl(home, "create", spec, "--cluster")
        out["cluster_swapin_s"] = time.monotonic() - t0
        where = json.loads(wl(home, "show", "big", "--json").stdout)["machine_of"]
        out["cluster_nodes_per_machine"] = {m: sum(1 for v in where.values() if v == m)
                                            for m in sorted(set(where.values()))}
        wl(home, "exec", "big", last, "--", "sysctl", "-q", "-w", "net.ipv4.ip_default_ttl=255")
        out["cluster_ping"] = ping_stats(wl(home, "exec", "big", "n0", "--", "ping", "-q",
                                            "-c", "8", "-i", "0.2", "-w", "30", "-t", "255",
                                                last).stdout)
        # the fidelity checks on a link cut between machines and on a link inside one, in
        # the running 300-node experiment (changed with tevc)
        chain = [(f"l{i}", f"n{i}", f"n{i + 1}") for i in range(a.chain - 1)]
        cut = next(x for x in chain if where[x[1]] != where[x[2]])
        inside = next(x for x in chain if where[x[1]] == where[x[2]])
        out["fidelity_inside"] = link_fidelity(home, "big", *inside, None)
        out["fidelity_cut"] = link_fidelity(home, "big", *cut, out["fidelity_inside"])
        wl(home, "terminate", "big")
        pair = os.path.join(tmp, "cut.yaml")
        with open(pair, "w") as f:
            f.write(PAIR)
        wl(home, "create", pair)
        out["pair_one_machine"] = pair_measure(home, "cut")
        wl(home, "terminate", "cut")
        # the same pair with a and b pinned to two machines (in-process: pins are Python's)
        from wanlab.cluster import experiment
        from wanlab.frontends import load
        from wanlab.store.db import Store
        store = Store(home)
        try:
            experiment.create(store, load(pair), pair, say=lambda m: None,
                              fixed={"a": "m0", "b": "m1"})
        finally:
            store.close()
        out["pair_cut"] = pair_measure(home, "cut")
        wl(home, "terminate", "cut")
    finally:
        # whatever happened: the cluster's experiments and the cluster, then this
        # machine's experiments, all through the store's records, before the folder goes
        env = {**os.environ, "WANLAB_HOME": home, "PYTHONPATH": ROOT}
        for args in (["cluster", "down"], ["cleanup", "--all"]):
            subprocess.run([sys.executable, "-m", "wanlab.cli", *args], env=env,
                           capture_output=True, check=False, timeout=900)
        shutil.rmtree(tmp, ignore_errors=True)
    out["load_end"] = os.getloadavg()[0]
    out["added_rtt_ms"] = (out["pair_cut"]["rtt_min_ms"]
                           - out["pair_one_machine"]["rtt_min_ms"])
    print(json.dumps(out, indent=2))
    if a.no_save:
        return
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    res = os.path.join(ROOT, "bench", "results")
    with open(os.path.join(res, "cluster-latest.json"), "w") as f:
        json.dump({"when": stamp, **out}, f, indent=2)
    po, pc = out["pair_one_machine"], out["pair_cut"]
    with open(os.path.join(res, "cluster-latest.md"), "w") as f:
        f.write(f"# Cluster against one machine ({stamp})\n\n`python3 bench/cluster.py "
                f"--machines {a.machines} --chain {a.chain}`; load average "
                f"{out['load_start']:.1f} at the start, {out['load_end']:.1f} at the end "
                f"(2 cores shared by every machine).\n\n"
                f"| {a.chain}-node chain + {a.hosts}-host LAN | one machine | "
                f"{a.machines} machines |\n|---|---|---|\n"
                f"| swap-in | {out['one_machine_swapin_s']:.1f} s | "
                f"{out['cluster_swapin_s']:.1f} s (cluster up: {out['cluster_up_s']:.0f} s) |\n"
                f"| ping n0 -> n{mid}, min RTT (configured "
                f"{2 * mid} ms) | {out['one_machine_ping']['rtt_min_ms']:.1f} ms | "
                f"{out['cluster_ping']['rtt_min_ms']:.1f} ms |\n"
                f"| nodes per machine | all | {out['cluster_nodes_per_machine']} |\n\n"
                f"| a-b, 10 ms, 10 Mbit/s, 1 % loss each way | one machine | cut between "
                f"two machines |\n|---|---|---|\n"
                f"| RTT min / mean (configured 20 ms) | {po['rtt_min_ms']:.2f} / "
                f"{po['rtt_avg_ms']:.2f} ms | {pc['rtt_min_ms']:.2f} / "
                f"{pc['rtt_avg_ms']:.2f} ms |\n"
                f"| ping loss, 500 pings (expected ~2 %) | {po['loss_pct']:.1f} % | "
                f"{pc['loss_pct']:.1f} % |\n"
                f"| TCP, iperf3 10 s | {po['tcp_mbps']:.2f} Mbit/s | {pc['tcp_mbps']:.2f} "
                f"Mbit/s |\n\nThe cut adds {out['added_rtt_ms']:.3f} ms of RTT over the same "
                f"link on one machine (each frame crosses with its due time and the "
                f"receiving engine holds it until then, so the path between the machines "
                f"is hidden inside the link's delay).\n")
        f.write(fidelity_table(out["fidelity_inside"], out["fidelity_cut"], a.chain))


def fidelity_table(fi: dict, fc: dict, chain: int) -> str:
    """The fidelity checks on a cut link against a link inside one machine, as markdown."""
    def ok(x: bool) -> str:
        return "PASS" if x else "MISS"
    rows = [
        ("RTT at 10 ms each way, mean of 300 (goal: 20 ms + one machine's engine at 0 ms "
         f"[mean {fi['rtt_0ms_avg_ms'] * 1e3:.0f} µs] ± max(0.5 %, 50 µs) = ± 100 µs)",
         lambda r: f"{r['rtt_10ms_avg_ms']:.3f} ms ({r['rtt_avg_error_us']:+.0f} µs) "
                   f"{ok(r['rtt_avg_goal'])}"),
        ("the same, minimum of 300 (one machine's engine at 0 ms: minimum "
         f"{fi['rtt_0ms_min_ms'] * 1e3:.0f} µs)",
         lambda r: f"{r['rtt_10ms_min_ms']:.3f} ms ({r['rtt_min_error_us']:+.0f} µs) "
                   f"{ok(r['rtt_min_goal'])}"),
        ("RTT at 0 ms, mean / minimum", lambda r: f"{r['rtt_0ms_avg_ms'] * 1e3:.0f} / "
                                                  f"{r['rtt_0ms_min_ms'] * 1e3:.0f} µs"),
        ("10 Mbit/s, 1514-byte frames offered at 103 % (goal ± 0.5 %)",
         lambda r: f"{r['bw_measured_bps'] / 1e6:.4f} Mbit/s ({r['bw_error_pct']:+.2f} %) "
                   f"{ok(r['bw_goal'])}"),
        ("2.5 % loss, 64-byte frames (goal: inside the 99 % binomial interval)",
         lambda r: f"{r['loss_lost']} of {r['loss_expected']} "
                   f"({(r['loss_measured'] or 0) * 100:.2f} %; [{r['loss_lo']}, "
                   f"{r['loss_hi']}]) {ok(r['loss_goal'] and bool(r['loss_expected']))}")]
    out = [f"\n## The fidelity checks on a cut link of the running {chain}-node experiment\n",
           f"Changed with tevc; measured a -> b. Inside one machine: {fi['link']} "
           f"({fi['a']}-{fi['b']}); cut between machines: {fc['link']} "
           f"({fc['a']}-{fc['b']}).\n", "| check | inside one machine | cut |",
           "|---|---|---|"]
    out += [f"| {label} | {fmt(fi)} | {fmt(fc)} |" for label, fmt in rows]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
