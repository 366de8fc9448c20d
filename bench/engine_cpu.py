#!/usr/bin/env python3
"""Engine CPU cost, idle and under light traffic, with the delay error of the same run.

One wanlab-engine carries 10 links (10 Mbit/s, 10 ms one-way, 100-frame droptail queue),
each between its own pair of namespaces. Per repeat, for each engine binary compared:

* idle: engine CPU (utime + stime from /proc/PID/stat) over a window with no traffic;
* quiet probe: a 64-byte, 200 packets/s probe b->a on every link, nothing else; its one-way
  delay (sink-measured, CLOCK_MONOTONIC stamps) minus the configured delay + serialization
  is the reference delay error; the engine's CPU and wake-ups in that window are its cost
  at low rates;
* busy: a 1518-byte UDP stream a->b at 1.03 x 10 Mbit/s on every link (the "10 links x 10
  Mbit/s" load of the fidelity suite) plus the same probes b->a (an otherwise idle direction,
  so the probe sees no queue); engine CPU over the window and the probes' delay error. So
  that moving work out of the engine (``--rps``) is not mistaken for removing it, the same
  window also records the host's softirq time (/proc/stat: the receive processing steered
  to other cores runs there) and the CPU of the lab's senders and sinks, and the engine's
  wake-ups per second (``stats`` "realtime": sleeps, and how many ended by timer / by I/O);
* floor: right after the busy window, ``engine/examples/wake_floor.rs`` sleeps and wakes the
  way the engine does, as often as the engine woke in the busy window, and does nothing else:
  its CPU is what the wake-ups alone cost on this machine (kernel and hypervisor), which no
  work inside the engine removes. The engine's CPU minus the floor is its own work.

Results are medians over the repeats. Writes bench/results/engine-cpu-YYYYMMDD-HHMM.{md,json}
and engine-cpu-latest.{md,json}. Run as root; see bench/README.md.

    python3 bench/engine_cpu.py                       # this worktree's engine, 3 repeats
    python3 bench/engine_cpu.py --engine old=/path/to/wanlab-engine --engine new=target/...
    python3 bench/engine_cpu.py --engine new=target/... --engine new-rps=target/...,--rps
"""

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import measure as M  # noqa: E402
from netlab import (  # noqa: E402
    ENGINE,
    MTU,
    ROOT,
    Engine,
    Lab,
    link_params,
    ns_cmd,
    sh,
    static_neigh,
)

RESULTS = os.path.join(ROOT, "bench", "results")
FLOOR = os.path.join(ROOT, "target", "release", "examples", "wake_floor")
LINKS = 10
RATE_BPS = 10_000_000
DELAY_US = 10_000
PROBE_FRAME = 64
PROBE_PPS = 200
GOAL_CPU_PCT = 10.0
GOAL_IDLE_PCT = 1.0


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def cpu_pct(eng, window):
    """Engine CPU over ``window`` seconds, % of one core."""
    return cpu_window(eng, window)["cpu"]


def lab_ticks(eng):
    """utime + stime of this script's children other than the engine (the senders and
    sinks: ``ip netns exec`` execs them) and the host's softirq ticks."""
    me, tot = os.getpid(), 0
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == eng.pid:
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(st[1]) == me:
            tot += int(st[11]) + int(st[12])
    with open("/proc/stat") as f:
        softirq = int(f.readline().split()[7])
    return tot, softirq


def cpu_window(eng, window):
    """Over ``window`` seconds, % of one core: the engine's CPU (and its system part), the
    host's softirq time, the lab's senders and sinks; the engine's wake-ups per second."""
    hz = os.sysconf("SC_CLK_TCK")

    def engine():
        with open(f"/proc/{eng.pid}/stat") as f:
            st = f.read().rsplit(")", 1)[1].split()
        return int(st[11]), int(st[12])

    def rt():
        return eng.request({"cmd": "stats"}).get("realtime", {})
    e0, l0, r0, w0 = engine(), lab_ticks(eng), rt(), time.monotonic()
    time.sleep(window)
    e1, l1, r1, w1 = engine(), lab_ticks(eng), rt(), time.monotonic()
    pct = 100 / hz / (w1 - w0)
    out = {"cpu": (sum(e1) - sum(e0)) * pct, "sys": (e1[1] - e0[1]) * pct,
           "softirq": (l1[1] - l0[1]) * pct, "lab": (l1[0] - l0[0]) * pct}
    for k in ("sleeps", "woken_by_timer", "woken_by_io"):
        if k in r1:  # an older engine has no wake-up counters
            out[k] = (r1[k] - r0.get(k, 0)) / (w1 - w0)
    return out


class Pair:
    """Endpoints of one link for the measure helpers (``a`` sends to ``b``)."""

    def __init__(self, ns_a, ns_b, ip_a, ip_b, link):
        self.ns_a, self.ns_b, self.ip_a, self.ip_b, self.link = ns_a, ns_b, ip_a, ip_b, link

    def reversed(self):
        return Pair(self.ns_b, self.ns_a, self.ip_b, self.ip_a, self.link)


def build(lab, binary, label, args=()):
    """An engine with LINKS links and a namespace pair on each."""
    eng = Engine(lab, extra_args=args, binary=binary)
    tag = lab.tag[-4:] + label[:2]
    p = link_params(bandwidth_bps=RATE_BPS, delay_us=DELAY_US, queue=100)
    ports, links = [], []
    for i in range(LINKS):
        ports += [{"port": f"p{i}{e}", "tap": f"wc{tag}{i}{e}"} for e in "ab"]
        links.append({"link": f"l{i}", "a": f"p{i}a", "b": f"p{i}b", "ab": p, "ba": p})
    eng.request({"cmd": "apply", "ports": ports, "links": links}, timeout=120)
    pairs = []
    for i in range(LINKS):
        na, nb = lab.add_ns(f"{label[:2]}{i}a"), lab.add_ns(f"{label[:2]}{i}b")
        ia, ib = "10.78.0.1", "10.78.0.2"
        for ns, dev, ip in ((na, f"wc{tag}{i}a", ia), (nb, f"wc{tag}{i}b", ib)):
            sh(["ip", "link", "set", dev, "netns", ns])
            sh(ns_cmd(ns, ["ip", "addr", "add", ip + "/24", "dev", dev]))
            sh(ns_cmd(ns, ["ip", "link", "set", dev, "mtu", str(MTU), "up"]))
        static_neigh(na, f"wc{tag}{i}a", ia, nb, f"wc{tag}{i}b", ib)
        pairs.append(Pair(na, nb, ia, ib, f"l{i}"))
    return eng, pairs


def run_all(jobs):
    """Run callables in threads; return their results (exceptions as values)."""
    out = [None] * len(jobs)

    def one(i):
        try:
            out[i] = jobs[i]()
        except Exception as e:  # reported by the caller
            out[i] = e
    ths = [threading.Thread(target=one, args=(i,)) for i in range(len(jobs))]
    [t.start() for t in ths]
    [t.join() for t in ths]
    return out


def probe_error(reports):
    """Median over links of (one-way delay p50 - configured delay - serialization), µs,
    and the largest p99 excess."""
    expected = DELAY_US + PROBE_FRAME * 8 / RATE_BPS * 1e6
    ok = [r[1] for r in reports if isinstance(r, tuple) and r[1].get("owd_p50_us") is not None]
    p50 = [k["owd_p50_us"] - expected for k in ok]
    p99 = [k["owd_p99_us"] - expected for k in ok]
    return (statistics.median(p50) if p50 else None, max(p99) if p99 else None,
            len(reports) - len(p50))


def one_repeat(lab, binary, label, dur, args=()):
    eng, pairs = build(lab, binary, label, args)
    try:
        time.sleep(1.0)
        row = {"idle_cpu_pct": cpu_pct(eng, dur)}
        probes = [lambda p=p: M.stream(lab, p.reversed(), PROBE_FRAME, dur, rate=PROBE_PPS)
                  for p in pairs]
        quiet = {}

        def quiet_during():
            time.sleep(0.5)
            quiet.update(cpu_window(eng, dur - 1.0))
        row["quiet_err_p50_us"], row["quiet_err_p99_us"], qfail = probe_error(
            run_all(probes + [quiet_during])[:LINKS])
        row["quiet_cpu_pct"] = quiet.get("cpu")
        row["quiet_sleeps_per_s"] = quiet.get("sleeps")
        sample = {}

        def during():
            time.sleep(1.0)
            sample.update(cpu_window(eng, dur - 1.5))
        streams = [lambda p=p: M.stream(lab, p, 1518, dur, bitrate=RATE_BPS * 1.03,
                                        extra_wait=0.05) for p in pairs]
        res = run_all(streams + probes + [during])
        row["busy_cpu_pct"] = sample.get("cpu")
        row["busy_sys_pct"] = sample.get("sys")
        row["busy_softirq_pct"] = sample.get("softirq")
        row["busy_lab_pct"] = sample.get("lab")
        for k in ("sleeps", "woken_by_timer", "woken_by_io"):
            if k in sample:
                row[f"busy_{k}_per_s"] = sample[k]
        row["busy_err_p50_us"], row["busy_err_p99_us"], bfail = probe_error(
            res[LINKS:2 * LINKS])
        bw = [(r[1]["bps_frame"] - RATE_BPS) / RATE_BPS * 100 for r in res[:LINKS]
              if isinstance(r, tuple)]
        row["bw_max_abs_err_pct"] = max(abs(e) for e in bw) if bw else None
        row["failures"] = qfail + bfail + LINKS - len(bw)
        row["realtime"] = eng.request({"cmd": "stats"}).get("realtime", {})
        row.update(wake_floor(row.get("busy_sleeps_per_s"), dur - 1.5))
        return row
    finally:
        eng.close()
        for p in pairs:
            lab.del_ns(p.ns_a)
            lab.del_ns(p.ns_b)


def wake_floor(rate, window):
    """CPU (% of a core) of ``wake_floor`` waking ``rate`` times a second for ``window`` s."""
    if not rate or not os.path.exists(FLOOR):
        return {}
    r = subprocess.run([FLOOR, f"{rate:.0f}", f"{window}"], stdout=subprocess.PIPE, text=True,
                       timeout=window + 30)
    f = json.loads(r.stdout)
    return {"floor_cpu_pct": f["cpu_seconds"] / f["seconds"] * 100,
            "floor_wakes_per_s": f["wakes"] / f["seconds"]}


def fmt(x, nd=1):
    return "n/a" if x is None else f"{x:.{nd}f}"


def markdown(res):
    m = res["meta"]
    out = ["# wanlab engine CPU under light traffic", "",
           f"{m['time']} · {m['cpus']} CPUs · git {m['git']} · {m['repeats']} repeats of "
           f"{m['window_s']} s windows · load average at start/end {m['load_start']}/"
           f"{m['load_end']} (other work on the host adds noise)", "",
           f"{LINKS} links, {RATE_BPS // 1_000_000} Mbit/s, {DELAY_US // 1000} ms one-way, "
           f"100-frame queue. Busy = 1518-byte UDP at 1.03 x rate a->b on every link. Delay "
           f"error = one-way delay of a {PROBE_FRAME}-byte, {PROBE_PPS} pps probe b->a minus "
           f"(configured delay + serialization), median over links; p99 column = worst link.",
           "", f"Goals: busy CPU <= {GOAL_CPU_PCT:.0f} % of a core; idle <= {GOAL_IDLE_PCT:.0f} %; "
           "busy delay error about the quiet one (fidelity.py --quick holds the delay goals).", "",
           "Engine arguments: " + "; ".join(f"{k}: {' '.join(v) or '(defaults)'}"
                                            for k, v in m.get("args", {}).items()), "",
           "| engine | idle CPU % | quiet CPU % (sleeps/s) | busy CPU % | "
           "quiet error p50 / p99 (µs) | busy error p50 / p99 (µs) | "
           "bandwidth max abs error % | failures | goal |",
           "|---|---|---|---|---|---|---|---|---|"]
    for label, v in res["variants"].items():
        md = v["median"]
        ok = (md.get("busy_cpu_pct") is not None and md["busy_cpu_pct"] <= GOAL_CPU_PCT
              and md.get("idle_cpu_pct") is not None and md["idle_cpu_pct"] <= GOAL_IDLE_PCT)
        out.append(f"| {label} | {fmt(md.get('idle_cpu_pct'), 2)} | "
                   f"{fmt(md.get('quiet_cpu_pct'))} ({fmt(md.get('quiet_sleeps_per_s'), 0)}) | "
                   f"{fmt(md.get('busy_cpu_pct'))} | "
                   f"{fmt(md.get('quiet_err_p50_us'))} / {fmt(md.get('quiet_err_p99_us'))} | "
                   f"{fmt(md.get('busy_err_p50_us'))} / {fmt(md.get('busy_err_p99_us'))} | "
                   f"{fmt(md.get('bw_max_abs_err_pct'), 3)} | {fmt(md.get('failures'), 0)} | "
                   f"{'PASS' if ok else 'MISS'} |")
    out += ["", "Where the busy window's CPU went (% of one core; softirq and the senders/sinks "
            "are host-wide and lab-wide, other work on the host adds to softirq), and the "
            "engine's wake-ups:", "",
            "| engine | engine CPU % (system part) | host softirq % | lab senders+sinks % | "
            "sleeps/s | ended by timer/s | ended by I/O/s | floor CPU % at that rate | "
            "engine − floor |", "|---|---|---|---|---|---|---|---|---|"]
    for label, v in res["variants"].items():
        md = v["median"]
        own = (md["busy_cpu_pct"] - md["floor_cpu_pct"]
               if md.get("busy_cpu_pct") is not None and md.get("floor_cpu_pct") else None)
        out.append(f"| {label} | {fmt(md.get('busy_cpu_pct'))} ({fmt(md.get('busy_sys_pct'))}) | "
                   f"{fmt(md.get('busy_softirq_pct'))} | {fmt(md.get('busy_lab_pct'))} | "
                   f"{fmt(md.get('busy_sleeps_per_s'), 0)} | "
                   f"{fmt(md.get('busy_woken_by_timer_per_s'), 0)} | "
                   f"{fmt(md.get('busy_woken_by_io_per_s'), 0)} | "
                   f"{fmt(md.get('floor_cpu_pct'))} | {fmt(own)} |")
    out += ["", "Floor: `engine/examples/wake_floor.rs`, run right after each busy window, "
            "sleeping in epoll_pwait2 (timer slack 1 ns) as often as the engine woke and "
            "doing nothing else: what the wake-ups alone cost here. The engine's CPU minus "
            "the floor is its own work (reading, shaping, writing frames, timers).", ""]
    out += ["", "Per repeat (busy CPU %): " + "; ".join(
        f"{k}: " + ", ".join(fmt(r.get("busy_cpu_pct")) for r in v["repeats"])
        for k, v in res["variants"].items()), ""]
    if res["errors"]:
        out += ["## Errors", ""] + [f"- {e}" for e in res["errors"]] + [""]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", action="append", default=[], metavar="LABEL=PATH[,ARG...]",
                    help="engine binary to measure, with extra engine arguments after commas "
                         "(e.g. rps=target/release/wanlab-engine,--rps; repeatable; default: "
                         "this worktree's)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--window", type=float, default=5.0, help="seconds per measured window")
    ap.add_argument("--out", default=RESULTS)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        log("engine_cpu.py must run as root (network namespaces)")
        return 1
    variants, extra = {}, {}
    for spec in args.engine or [f"engine={ENGINE}"]:
        label, _, rest = spec.partition("=")
        path, *eargs = rest.split(",")
        if not path or not os.path.exists(path):
            log(f"--engine {spec}: expected LABEL=PATH[,ARG...] with PATH an existing binary")
            return 1
        variants[label] = os.path.abspath(path)
        extra[label] = eargs
    git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                         stdout=subprocess.PIPE, text=True).stdout.strip()
    res = {"meta": {"time": datetime.datetime.now().isoformat(timespec="seconds"),
                    "cpus": os.cpu_count(), "git": git, "repeats": args.repeats,
                    "window_s": args.window, "load_start": os.getloadavg()[0],
                    "binaries": variants, "args": extra},
           "variants": {k: {"repeats": []} for k in variants}, "errors": []}
    if not os.path.exists(FLOOR):
        subprocess.run(["cargo", "build", "--release", "-p", "wanlab-engine", "--example",
                        "wake_floor"], cwd=ROOT)
    lab = Lab()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        for rep in range(args.repeats):
            for label, path in variants.items():  # interleaved: load drifts hit all alike
                log(f"== {label} repeat {rep + 1}/{args.repeats}")
                try:
                    row = one_repeat(lab, path, label, args.window, extra[label])
                    log("  " + ", ".join(f"{k} {fmt(v, 2)}" for k, v in row.items()
                                         if isinstance(v, (int, float))))
                    res["variants"][label]["repeats"].append(row)
                except Exception as e:
                    res["errors"].append(f"{label} repeat {rep + 1}: {type(e).__name__}: {e}")
                    log("  ERROR", res["errors"][-1])
    except KeyboardInterrupt:
        return 130
    finally:
        lab.close()
    res["meta"]["load_end"] = os.getloadavg()[0]
    for v in res["variants"].values():
        keys = [k for k in (v["repeats"][0] if v["repeats"] else {})
                if isinstance(v["repeats"][0][k], (int, float))]
        v["median"] = {k: statistics.median([r[k] for r in v["repeats"] if r.get(k) is not None]
                                            or [0]) for k in keys}
    md = markdown(res)
    print(md)
    if not args.no_save:
        log(f"saved to {M.save_results(args.out, 'engine-cpu', md, res)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
