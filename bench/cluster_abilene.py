"""VINI's Abilene failure experiment spread over a local cluster, against one machine.

    python3 bench/cluster_abilene.py [--machines 3] [--repeats 1]

Runs examples/abilene/abilene.tcl (11 PoPs on FRR OSPF; Washington pings Seattle every
100 ms; Denver-Kansas City fails at 12 s and is restored at 38 s) in pairs of runs, one
after the other, ``--repeats`` times (the cluster is up during both: the load is the same):
on this machine (``Lab.run``), then placed over a local test cluster of N machines
(``wanlab create --cluster``: the timeline's link events go to the machines holding the
link's ends, the pinger to Washington's machine, and every part's clock starts at one
moment). Both are compared with the configured paths' delay sums before, during and after
the failure (goal: within 1 %, as examples/abilene/run.py), and with each other, with the
time to reroute and to restore.

Results: bench/results/cluster-abilene.md and .json.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import wl  # noqa: E402

TCL = os.path.join(ROOT, "examples", "abilene", "abilene.tcl")
NAME = "abilene-ping"


def _example():
    spec = importlib.util.spec_from_file_location(
        "abilene_run", os.path.join(ROOT, "examples", "abilene", "run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def phases(ab, exp, folder: str) -> dict:
    """RTT medians per phase, reroute and restore times, losses, from the pinger's output
    in ``folder`` (a part's or a single machine's experiment folder)."""
    t0 = float(open(os.path.join(folder, "t0")).read())
    samples = ab.ping_samples(os.path.join(folder, "programs", "pinger", "run-1.out"), t0)
    _, d_normal = ab.expected_path(exp)
    _, d_detour = ab.expected_path(exp, without=ab.FAILED)
    windows = {"before": (1.0, ab.FAIL_AT), "during": (ab.FAIL_AT + 2, ab.RESTORE_AT),
               "after": (ab.RESTORE_AT + 2, ab.END)}
    expect = {"before": 2 * d_normal, "during": 2 * d_detour, "after": 2 * d_normal}
    out: dict = {"phases": {}}
    for ph, (lo, hi) in windows.items():
        med = statistics.median(r for t, r, _ in samples if lo <= t < hi)
        exp_ms = expect[ph] * 1e3
        out["phases"][ph] = {"median_ms": med, "expected_ms": exp_ms,
                             "error_pct": (med - exp_ms) / exp_ms * 100}
    mid = (d_normal + d_detour) * 1e3
    out["reroute_ms"] = (min(t for t, r, _ in samples if t >= ab.FAIL_AT) - ab.FAIL_AT) * 1e3
    out["restore_ms"] = (min(t for t, r, _ in samples if t >= ab.RESTORE_AT and r < mid)
                         - ab.RESTORE_AT) * 1e3
    sent = max(s for _, _, s in samples)
    out["sent"], out["answered"] = sent, len(samples)
    return out


def _median_of(results) -> dict:
    """Each phase's median RTT (and the other numbers) over repeated runs: the median."""
    rs = list(results)
    out: dict = {"phases": {}}
    for ph in rs[0]["phases"]:
        med = statistics.median(r["phases"][ph]["median_ms"] for r in rs)
        exp_ms = rs[0]["phases"][ph]["expected_ms"]
        out["phases"][ph] = {"median_ms": med, "expected_ms": exp_ms,
                             "error_pct": (med - exp_ms) / exp_ms * 100}
    for k in ("reroute_ms", "restore_ms", "sent", "answered"):
        out[k] = statistics.median(r[k] for r in rs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--machines", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=1,
                    help="pairs of runs (one machine, then the cluster), interleaved; "
                         "the tables give each phase's median over them")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args()
    ab = _example()
    from wanlab.frontends import ns
    from wanlab.lifecycle import Lab
    exp = ns.parse(TCL, params={"TRAFFIC": "ping"}, name=NAME)
    tmp = tempfile.mkdtemp(prefix="wanlab-bench-abilene-")
    home = os.path.join(tmp, "home")
    out: dict = {"load_start": os.getloadavg()[0]}
    out["runs"] = []
    try:
        wl(home, "cluster", "up", "--local", str(a.machines))
        for _ in range(a.repeats):
            run: dict = {}
            # one machine (the baseline, in the same run: the load changes)
            run["load_one_machine"] = os.getloadavg()[0]
            lab = Lab(home)
            try:
                s = lab.run(exp)
                run["one_machine"] = phases(ab, exp, s["folder"])
                lab.terminate(NAME)
            finally:
                lab.close()
            # the same over the cluster
            run["load_cluster"] = os.getloadavg()[0]
            t0 = time.monotonic()
            wl(home, "create", TCL, "--cluster", "--name", NAME, "-p", "TRAFFIC=ping")
            out["cluster_create_s"] = time.monotonic() - t0
            where = json.loads(wl(home, "show", NAME, "--json").stdout)["machine_of"]
            out["machine_of"] = where
            out["cut_links"] = sorted(l.name for l in exp.links if where[l.a] != where[l.b])
            time.sleep(ab.END + 3)
            part = os.path.join(home, "machines", where["washington"], "exps", NAME)
            run["cluster"] = phases(ab, exp, part)
            log = json.loads(wl(home, "events", NAME, "--json").stdout)
            out["failed_link_events"] = [(e["machine"], e["action"], round(e["fired_s"], 4))
                                         for e in log if e["target"] == ab.FAILED]
            wl(home, "terminate", NAME)
            out["runs"].append(run)
        out["one_machine"] = _median_of(r["one_machine"] for r in out["runs"])
        out["cluster"] = _median_of(r["cluster"] for r in out["runs"])
    finally:
        env = {**os.environ, "WANLAB_HOME": home, "PYTHONPATH": ROOT}
        for args in (["cluster", "down"], ["cleanup", "--all"]):
            subprocess.run([sys.executable, "-m", "wanlab.cli", *args], env=env,
                           capture_output=True, check=False, timeout=900)
        shutil.rmtree(tmp, ignore_errors=True)
    out["load_end"] = os.getloadavg()[0]
    print(json.dumps(out, indent=2))
    if a.no_save:
        return
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    res = os.path.join(ROOT, "bench", "results")
    with open(os.path.join(res, "cluster-abilene.json"), "w") as f:
        json.dump({"when": stamp, **out}, f, indent=2)
    one, clu = out["one_machine"], out["cluster"]
    per = {m: sorted(n for n, x in out["machine_of"].items() if x == m and
                     not n.startswith("lan:"))
           for m in sorted(set(out["machine_of"].values()))}
    lines = [f"# Abilene over {a.machines} machines against one machine ({stamp})", "",
             f"`python3 bench/cluster_abilene.py --machines {a.machines} --repeats "
             f"{a.repeats}`; load average {out['load_start']:.1f} at the start, "
             f"{out['load_end']:.1f} at the end (2 cores shared by every machine and by "
             f"other work); at the start of each run (one machine / cluster): "
             + ", ".join(f"{r['load_one_machine']:.1f} / {r['load_cluster']:.1f}"
                         for r in out["runs"])
             + f". Medians of Washington -> Seattle pings (every 100 ms) per phase, then "
             f"the median over the {a.repeats} interleaved pairs of runs.", "",
             "Placement: " + "; ".join(f"{m}: {', '.join(ns_)}" for m, ns_ in per.items()),
             f"  \nLinks cut between machines ({len(out['cut_links'])}): "
             f"{', '.join(out['cut_links'])}", "",
             f"Events on {ab.FAILED} (machine, action, fired at t): "
             f"{out['failed_link_events']}", "",
             "| phase | expected RTT | one machine | error | cluster | error | goal (≤ 1 %) "
             "| cluster against one machine (goal ≤ 1 %) |",
             "|---|---|---|---|---|---|---|---|"]
    for ph in ("before", "during", "after"):
        o, c = one["phases"][ph], clu["phases"][ph]
        ok = abs(c["error_pct"]) <= 1
        vs = (c["median_ms"] - o["median_ms"]) / o["median_ms"] * 100
        lines.append(f"| {ph} | {o['expected_ms']:.3f} ms | {o['median_ms']:.3f} ms | "
                     f"{o['error_pct']:+.2f} % | {c['median_ms']:.3f} ms | "
                     f"{c['error_pct']:+.2f} % | {'PASS' if ok else 'MISS'} | "
                     f"{vs:+.2f} % {'PASS' if abs(vs) <= 1 else 'MISS'} |")
    if len(out["runs"]) > 1:
        lines += ["", "Each run (phase medians, ms; one machine / cluster):", ""]
        for i, r in enumerate(out["runs"]):
            lines.append(f"- run {i + 1}: " + "; ".join(
                f"{ph} {r['one_machine']['phases'][ph]['median_ms']:.3f} / "
                f"{r['cluster']['phases'][ph]['median_ms']:.3f}"
                for ph in ("before", "during", "after")))
    lines += ["", "| | one machine | cluster |", "|---|---|---|",
              f"| time to reroute (first answer after the failure) | {one['reroute_ms']:.0f} ms"
              f" | {clu['reroute_ms']:.0f} ms |",
              f"| time to restore (first answer on the normal path) | "
              f"{one['restore_ms']:.0f} ms | {clu['restore_ms']:.0f} ms |",
              f"| pings answered / sent | {one['answered']} / {one['sent']} | "
              f"{clu['answered']} / {clu['sent']} |",
              f"| create (swap-in, OSPF converged) | - | {out['cluster_create_s']:.1f} s |"]
    with open(os.path.join(res, "cluster-abilene.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
