#!/usr/bin/env python3
"""Fidelity under contention: every core busy with the nodes' own programs; the engine at
normal priority, at real-time priority, and at real-time priority on a core of its own (what
wanlab does by default on a machine with two CPUs or more), in the same run.

Load (the nodes' programs): one busy loop per core, each in a node namespace, plus an
iperf3 TCP flow between two more namespaces over a veth pair; with ``--cgroup`` (default
when this host has cgroups) they all run in a cgroup at wanlab's nodes weight
(``cpu.weight`` 50 / ``cpu.shares`` 512, as ``wanlab/`` gets). Variants:

* ``normal``: the engine at normal priority; ``rt``: with ``--rt-priority 10``; both
  unpinned, the load on every CPU;
* ``rt-core`` (two CPUs or more): ``--rt-priority 10 --cpus LAST`` and the load (busy loops,
  TCP flow, measuring endpoints) confined to the other CPUs, as wanlab's nodes' cgroups are
  (docs/resources.md, "The engine's cores").

Under that load, per variant and repeat:

* the paced flow: 50 Mbit/s UDP, 1 200-byte frames, on a 100 Mbit/s, 10 ms link with a
  200-packet queue, split in two parts:
  - what the engine controls: each frame's departure lateness against its schedule, by the
    engine's own clock (``stats.realtime.departure``, the difference over the flow): p50,
    p99, max (bucket upper bounds);
  - what the application sees: one-way delay p50/p99/max (sink-measured) and its error
    against the ideal 10 ms + 96 µs of serialization, loss;
  - the receiving stack's share: the same flow over a plain veth pair under the same load
    and placement (its one-way delay is all stack and scheduling);
* the delay goal of the fidelity suite: 64-byte RTT at 0 and 10 ms one-way; the adjusted
  error (RTT at 10 ms minus RTT at 0, minus 20 ms) within max(0.5 %, 50 us);
* the bandwidth goal: 1518-byte UDP at 1.03 x 10 and 100 Mbit/s (50 ms of queue), the rate
  received within 0.5 %;
* the loss goal: 2.5 % Bernoulli loss, 64-byte frames at 25 000 pps; the loss seen inside
  the 99 % binomial interval.

The measuring endpoints (wanlab-gen) run at ``--tools-nice`` (default -10), so that what is
measured is the engine rather than the probes' own wait for a CPU among the load.

Results: medians over repeats; bench/results/contention-YYYYMMDD-HHMM.{md,json} and
contention-latest.{md,json}. Run as root:

    python3 bench/contention.py                  # 3 repeats, both variants interleaved
    python3 bench/contention.py --repeats 1 --duration 5
"""

import argparse
import datetime
import os
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import measure as M  # noqa: E402
from netlab import ROOT, EngineTopo, Lab, VethTopo, ns_cmd  # noqa: E402

RESULTS = os.path.join(ROOT, "bench", "results")
RT_PRIORITY = 10
VARIANTS = ("normal", "rt", "rt-core")
PACED = {"bw": 100_000_000, "delay_us": 10_000, "frame": 1200, "rate": 50_000_000}
IDEAL_MS = PACED["delay_us"] / 1e3 + PACED["frame"] * 8 / PACED["bw"] * 1e3
CGROUP_V1 = "/sys/fs/cgroup/cpu"
NODES_SHARES = 512     # wanlab.backends.emulate.cgroups.NODES_CPU_SHARES


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def placement(variant):
    """(engine arguments, the CPUs of the load and the measuring endpoints or None) of a
    variant; ``rt-core``: the engine on the last CPU, everything else on the others."""
    cpus = sorted(os.sched_getaffinity(0))
    if variant == "normal":
        return [], None
    rt = ["--rt-priority", str(RT_PRIORITY)]
    if variant == "rt":
        return rt, None
    return rt + ["--cpus", str(cpus[-1])], cpus[:-1]


def confine(pid, cpus):
    """Every thread of ``pid`` and of its descendants on ``cpus`` (threads started later
    inherit it), as a node cgroup's cpuset would; None: every CPU."""
    want = set(cpus) if cpus else os.sched_getaffinity(0)
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tids:
            try:
                os.sched_setaffinity(int(t), want)
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(c) for c in f.read().split()]
            except OSError:
                pass


class Load:
    """Busy loops (one per core) and an iperf3 flow, in node namespaces."""

    def __init__(self, lab, use_cgroup):
        self.lab, self.procs, self.cgroup = lab, [], None
        if use_cgroup and os.path.isdir(CGROUP_V1):
            self.cgroup = os.path.join(CGROUP_V1, f"wlb-contention-{lab.tag}")
            os.mkdir(self.cgroup)
            with open(os.path.join(self.cgroup, "cpu.shares"), "w") as f:
                f.write(str(NODES_SHARES))
        self.ns = [lab.add_ns(f"busy{i}") for i in range(os.cpu_count() or 1)]
        self.veth = VethTopo(lab, suffix="ip")

    def _run(self, ns, argv):
        if self.cgroup:
            argv = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', self.cgroup, *argv]
        p = subprocess.Popen(ns_cmd(ns, argv), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def start(self):
        for ns in self.ns:
            self._run(ns, ["sh", "-c", "while :; do :; done"])
        self._run(self.veth.ns_b, ["iperf3", "-s", "-B", self.veth.ip_b, "-p", "5299"])
        time.sleep(0.3)
        self._run(self.veth.ns_a, ["iperf3", "-c", self.veth.ip_b, "-p", "5299", "-t", "100000"])
        time.sleep(1.0)

    def place(self, cpus):
        for p in self.procs:
            confine(p.pid, cpus)

    def stop(self):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait(timeout=10)
        self.procs = []

    def close(self):
        self.stop()
        if self.cgroup:
            for _ in range(100):
                try:
                    os.rmdir(self.cgroup)
                    break
                except OSError:
                    time.sleep(0.05)


class Tools:
    """The measuring endpoints (wanlab-gen) at ``nice`` (the figures are then the engine's,
    not the probes' own wait for a CPU among the load) and, per variant, on the CPUs of the
    nodes (:meth:`place`)."""

    def __init__(self, lab, nice):
        self.gen, self.nice = M.GEN, int(nice)
        self.path = os.path.join("/tmp", f"wlb-gen-{lab.tag}")
        lab.files.append(self.path)
        M.GEN = self.path
        self.place(None)

    def place(self, cpus):
        pin = f"taskset -c {','.join(map(str, cpus))} " if cpus else ""
        nice = f"nice -n {self.nice} " if self.nice else ""
        with open(self.path + ".new", "w") as f:
            f.write(f'#!/bin/sh\nexec {pin}{nice}{self.gen} "$@"\n')
        os.chmod(self.path + ".new", 0o755)
        os.replace(self.path + ".new", self.path)


def departures(engine):
    """The engine's departure distribution so far: {bucket upper bound us: count}."""
    rt = engine.request({"cmd": "stats"}).get("realtime") or {}
    return {b: c for b, c in ((rt.get("departure") or {}).get("buckets") or [])}


def dist_between(before, after):
    """p50/p99/max (us, bucket upper bounds; 0: under 1 us) and count of the frames that
    departed between two :func:`departures`."""
    diff = sorted((b, after[b] - before.get(b, 0)) for b in after
                  if after[b] > before.get(b, 0))
    n = sum(c for _, c in diff)
    out = {"dep_frames": n}
    for q, k in ((0.5, "dep_p50_us"), (0.99, "dep_p99_us"), (1.0, "dep_max_us")):
        rank, seen = max(1, -(-int(q * n * 1000) // 1000)), 0
        out[k] = None
        for b, c in diff:
            seen += c
            if seen >= rank:
                out[k] = 0.0 if b <= 1.0 else b
                break
    return out


def paced_flow(lab, t, dur):
    t.set(bandwidth_bps=PACED["bw"], delay_us=PACED["delay_us"], queue=200)
    time.sleep(0.1)
    before = departures(t.engine)
    _, k, _ = M.stream(lab, t, PACED["frame"], dur, bitrate=PACED["rate"], extra_wait=0.05)
    row = {"owd_p50_ms": k["owd_p50_us"] / 1e3, "owd_p99_ms": k["owd_p99_us"] / 1e3,
           "owd_max_ms": k["owd_max_us"] / 1e3, "lost": k["lost"], "expected": k["expected"]}
    for q in ("p50", "p99", "max"):
        row[f"err_{q}_ms"] = row[f"owd_{q}_ms"] - IDEAL_MS
    row.update(dist_between(before, departures(t.engine)))
    return row


def veth_flow(lab, v, dur):
    """The paced flow over a plain veth pair: what the receiving stack and its scheduling
    add under the same load."""
    _, k, _ = M.stream(lab, v, PACED["frame"], dur, bitrate=PACED["rate"], extra_wait=0.05)
    return {"veth_p50_ms": k["owd_p50_us"] / 1e3, "veth_p99_ms": k["owd_p99_us"] / 1e3,
            "veth_max_ms": k["owd_max_us"] / 1e3}


def delay_goal(lab, t, dur):
    rtts = {}
    for d in (0, 10):
        t.set(delay_us=d * 1000, queue=10000)
        time.sleep(0.05)
        r = M.rtt(lab, t, 64, 100, dur, wait=1.0 + 2 * d / 1000)
        rtts[d] = r["rtt_avg_us"]
    err = rtts[10] - rtts[0] - 20_000
    return {"rtt0_us": rtts[0], "rtt10_us": rtts[10], "delay_err_us": err,
            "delay_goal": abs(err) <= max(0.005 * 20_000, 50.0)}


def bandwidth_goal(lab, t, dur):
    out = {}
    for rate in (10e6, 100e6):
        t.set(bandwidth_bps=rate, queue=max(100, int(rate * 0.05 / (1518 * 8))))
        time.sleep(0.05)
        _, k, _ = M.stream(lab, t, 1518, dur, bitrate=rate * 1.03)
        out[f"bw{int(rate / 1e6)}_err_pct"] = (k["bps_frame"] - rate) / rate * 100
    out["bw_goal"] = all(abs(v) <= 0.5 for v in out.values())
    return out


def loss_goal(lab, t, dur):
    p = 0.025
    t.set(loss=p, queue=10000)
    time.sleep(0.05)
    _, k, _ = M.stream(lab, t, 64, dur, rate=25_000)
    n, lost = k["expected"], k["lost"]
    lo, hi = M.binom_interval(n, p)
    return {"loss_pct": lost / n * 100 if n else None, "loss_goal": lo <= lost <= hi}


def one(lab, args, variant, load, tools, veth):
    engine_args, cpus = placement(variant)
    load.place(cpus)
    tools.place(cpus)
    t = EngineTopo(lab, engine_args=engine_args, suffix="c")
    try:
        row = {}
        row.update(paced_flow(lab, t, args.duration))
        row.update(veth_flow(lab, veth, args.duration))
        if not args.paced_only:
            row.update(delay_goal(lab, t, min(args.duration, 5.0)))
            row.update(bandwidth_goal(lab, t, args.duration))
            row.update(loss_goal(lab, t, args.duration))
        st = t.engine.request({"cmd": "stats"})
        rt = st.get("realtime", {})
        row["rt_priority"] = rt.get("rt_priority")
        row["late_events"] = rt.get("late_events")
        row["engine_cpu"] = (st.get("partitions") or [{}])[0].get("core")
        return row
    finally:
        t.close()
        lab.del_ns(t.ns_a)
        lab.del_ns(t.ns_b)


def fmt(x, nd=2):
    if isinstance(x, bool):
        return "yes" if x else "NO"
    return "n/a" if x is None else f"{x:.{nd}f}"


COLS = [("dep_p50_us", "engine departure p50 us", 0), ("dep_p99_us", "p99 us", 0),
        ("dep_max_us", "max us", 0),
        ("err_p50_ms", "app one-way error p50 ms", 3), ("err_p99_ms", "p99 ms", 3),
        ("err_max_ms", "max ms", 3),
        ("veth_p50_ms", "veth one-way p50 ms", 3), ("veth_p99_ms", "p99 ms", 3),
        ("veth_max_ms", "max ms", 3),
        ("lost", "lost", 0), ("delay_err_us", "delay error us (goal)", 1),
        ("bw10_err_pct", "bw 10M err %", 3), ("bw100_err_pct", "bw 100M err %", 3),
        ("loss_pct", "loss % (2.5)", 3), ("late_events", "engine late events", 0)]


def markdown(res):
    m = res["meta"]
    out = ["# wanlab fidelity under contention", "",
           f"{m['time']} · {m['cpus']} CPUs · git {m['git']} · {m['repeats']} repeats · "
           f"{m['duration_s']} s per flow · load average at start/end {m['load_start']:.2f}/"
           f"{m['load_end']:.2f} (other work on the host adds noise) · node load in a cgroup at "
           f"cpu.shares {NODES_SHARES}: {m['cgroup']} · measuring endpoints at nice "
           f"{m['tools_nice']}", "",
           f"Command: `{m['command']}`", "",
           "Load: one busy loop per core in node namespaces plus an iperf3 TCP flow between two "
           "more over a veth pair. Variants: normal priority; rt (SCHED_RR 10); rt-core (RT "
           "and `--cpus` the last CPU, the load and the measuring endpoints on the others, "
           "as wanlab's default places nodes). Paced flow: 50 Mbit/s UDP, 1200-byte frames, "
           "100 Mbit/s, 10 ms, 200-packet queue: the engine's departure lateness against its "
           "schedule (its own clock, bucket upper bounds: what the engine controls), the "
           "application's one-way error against 10 ms + 96 us of serialization, and the same "
           "flow's one-way delay over a plain veth pair under the same load and placement "
           "(what the receiving stack and its scheduling add). Goals (fidelity suite): delay "
           "adjusted error within "
           "max(0.5 %, 50 us) = 100 us at 10 ms one-way; bandwidth within 0.5 %; loss inside "
           "the 99 % binomial interval.", "",
           "| engine | " + " | ".join(c[1] for c in COLS) + " | delay / bw / loss goal |",
           "|---" * (len(COLS) + 2) + "|"]
    for label, v in res["variants"].items():
        md = v["median"]
        goals = " / ".join(fmt(v["all"].get(k)) for k in ("delay_goal", "bw_goal", "loss_goal"))
        out.append(f"| {label} | " + " | ".join(fmt(md.get(k), nd) for k, _, nd in COLS)
                   + f" | {goals} |")
    per = "; ".join(f"{k}: " + ", ".join(
        f"{fmt(r.get('dep_p99_us'), 0)}/{fmt(r.get('dep_max_us'), 0)} us, "
        f"{fmt(r.get('err_p99_ms'))}/{fmt(r.get('err_max_ms'))} ms, "
        f"{fmt(r.get('veth_p99_ms'))}/{fmt(r.get('veth_max_ms'))} ms" for r in v["repeats"])
        for k, v in res["variants"].items())
    out += ["", "Goals: yes only if met in every repeat. Per repeat (engine departure p99/max; "
            "app one-way error p99/max; veth one-way p99/max): " + per, ""]
    if res["errors"]:
        out += ["## Errors", ""] + [f"- {e}" for e in res["errors"]] + [""]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per flow")
    ap.add_argument("--no-cgroup", action="store_true",
                    help="run the node load in the root cgroup")
    ap.add_argument("--tools-nice", type=int, default=-10,
                    help="nice of the measuring endpoints (0: as the load)")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help="comma-separated, of " + ", ".join(VARIANTS))
    ap.add_argument("--paced-only", action="store_true",
                    help="only the paced flow (no delay, bandwidth and loss goals)")
    ap.add_argument("--out", default=RESULTS)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    if not variants or set(variants) - set(VARIANTS):
        log(f"--variants: a comma-separated list of {', '.join(VARIANTS)}")
        return 2
    if "rt-core" in variants and len(os.sched_getaffinity(0)) < 2:
        log("rt-core needs two CPUs: left out")
        variants.remove("rt-core")
    if os.geteuid() != 0:
        log("contention.py must run as root (network namespaces)")
        return 1
    git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                         stdout=subprocess.PIPE, text=True).stdout.strip()
    res = {"meta": {"time": datetime.datetime.now().isoformat(timespec="seconds"),
                    "cpus": os.cpu_count(), "git": git, "repeats": args.repeats,
                    "duration_s": args.duration, "load_start": os.getloadavg()[0],
                    "command": "python3 bench/contention.py " + " ".join(sys.argv[1:])},
           "variants": {k: {"repeats": []} for k in variants}, "errors": []}
    lab = Lab()
    tools = Tools(lab, args.tools_nice)
    res["meta"]["tools_nice"] = args.tools_nice
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    load = None
    try:
        load = Load(lab, not args.no_cgroup)
        res["meta"]["cgroup"] = load.cgroup is not None
        load.start()
        veth = VethTopo(lab, suffix="w")
        for rep in range(args.repeats):
            for label in variants:     # interleaved: load drifts hit them all
                log(f"== {label} repeat {rep + 1}/{args.repeats}")
                try:
                    row = one(lab, args, label, load, tools, veth)
                    log("  " + ", ".join(f"{k} {fmt(v)}" for k, v in row.items()))
                    res["variants"][label]["repeats"].append(row)
                except Exception as e:
                    res["errors"].append(f"{label} repeat {rep + 1}: {type(e).__name__}: {e}")
                    log("  ERROR", res["errors"][-1])
    except KeyboardInterrupt:
        return 130
    finally:
        if load:
            load.close()
        lab.close()
    res["meta"]["load_end"] = os.getloadavg()[0]
    for v in res["variants"].values():
        reps = v["repeats"]
        v["median"] = {k: statistics.median([r[k] for r in reps if r.get(k) is not None])
                       for k, _, _ in COLS if any(r.get(k) is not None for r in reps)}
        v["all"] = {k: (bool(reps) and all(r.get(k) for r in reps))
                    if any(k in r for r in reps) else None
                    for k in ("delay_goal", "bw_goal", "loss_goal")}
    md = markdown(res)
    print(md)
    if not args.no_save:
        log(f"saved to {M.save_results(args.out, 'contention', md, res)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
