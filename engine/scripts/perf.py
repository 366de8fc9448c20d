#!/usr/bin/env python3
"""Engine performance check against veth and kernel-router baselines, same run.

Uses bench/netlab.py and bench/measure.py (read-only) but names its namespaces ``wlp-*``.
  sudo python3 engine/scripts/perf.py [--engine PATH] [--reps 3] [--what tcp,pps,rtt,idle]
        [--paths veth,router,engine] [--engine-args "--busy-poll"]
Prints medians and ratios (engine / veth, engine / router) and one JSON line at the end.
"""
import argparse
import json
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import netlab  # noqa: E402
import measure as M  # noqa: E402


class Lab(netlab.Lab):
    def ns_name(self, suffix):
        return f"wlp-{self.tag}-{suffix}"


def ping_rtts(topo, n=500):
    out = netlab.sh(netlab.ns_cmd(topo.ns_a, ["ping", "-i", "0.01", "-c", str(n), "-q" if False else "-n", topo.ip_b]),
                    timeout=n * 0.05 + 30, check=False)
    v = [float(x) for x in re.findall(r"time=([0-9.]+) ms", out)]
    v.sort()
    if not v:
        return None
    return {"p50_us": 1000 * v[len(v) // 2], "p90_us": 1000 * v[int(len(v) * 0.9)], "n": len(v)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default=netlab.ENGINE)
    ap.add_argument("--engine-args", default="")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--what", default="tcp,pps,rtt,idle")
    ap.add_argument("--paths", default="veth,router,engine")
    ap.add_argument("--tdur", type=int, default=3)
    ap.add_argument("--shaped", default="", help="bandwidth_bps for the engine link (default unlimited)")
    a = ap.parse_args()
    netlab.ENGINE = a.engine
    what = a.what.split(",")
    lab = Lab(f"{os.getpid()}")
    res = {}
    try:
        for kind in a.paths.split(","):
            if kind == "veth":
                t = netlab.VethTopo(lab)
            elif kind == "router":
                t = netlab.RouterTopo(lab)
            else:
                t = netlab.EngineTopo(lab, engine_args=a.engine_args.split())
                if a.shaped:
                    t.set(bandwidth_bps=int(a.shaped))
            r = res.setdefault(kind, {})
            if "tcp" in what:
                for par in (1, 8):
                    vals = [M.iperf(lab, t, par, a.tdur) for _ in range(a.reps)]
                    r[f"tcp{par}"] = statistics.median(vals)
                    print(f"{kind} TCP -P{par}: " + " ".join(f"{v/1e9:.2f}" for v in vals) + " Gbit/s", flush=True)
            if "pps" in what:
                vals = []
                for _ in range(a.reps):
                    s, k, _ = M.stream(lab, t, 64, 2.0, max_rate=True)
                    vals.append(k["pps"])
                r["pps"] = statistics.median(vals)
                print(f"{kind} 64B: " + " ".join(f"{v/1e6:.3f}" for v in vals) + " Mpps", flush=True)
            if "rtt" in what:
                ps = [ping_rtts(t) for _ in range(a.reps)]
                r["p50_us"] = statistics.median(p["p50_us"] for p in ps)
                r["p90_us"] = statistics.median(p["p90_us"] for p in ps)
                print(f"{kind} ping p50/p90: " + " ".join(f"{p['p50_us']:.0f}/{p['p90_us']:.0f}" for p in ps) + " us", flush=True)
            if "idle" in what and kind == "engine":
                time.sleep(0.5)
                c0 = t.engine.cpu_ticks()
                time.sleep(5)
                r["idle_cpu_pct"] = (t.engine.cpu_ticks() - c0) / os.sysconf("SC_CLK_TCK") / 5 * 100
                print(f"engine idle CPU: {r['idle_cpu_pct']:.1f} %", flush=True)
            t.close()
        e = res.get("engine", {})
        for base in ("veth", "router"):
            b = res.get(base, {})
            for key in ("tcp1", "tcp8", "pps"):
                if key in e and key in b:
                    print(f"ratio engine/{base} {key}: {e[key]/b[key]:.2f}")
            if "p50_us" in e and "p50_us" in b:
                print(f"delta engine-{base} p50: {e['p50_us']-b['p50_us']:+.0f} us, p90: {e['p90_us']-b['p90_us']:+.0f} us")
        print(json.dumps(res))
    finally:
        lab.close()


if __name__ == "__main__":
    main()
