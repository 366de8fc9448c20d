"""Soak: does a long-running experiment keep its engine's memory, fds and threads flat?

One small experiment (client -- router -- server, 100 Mb / 1 ms and 10 Mb / 10 ms
links) runs for ``--minutes`` (default 60) with mixed traffic:

* TCP: iperf3 client -> server in 30 s runs, one after the other (``-b 5M`` so the
  bench does not starve a shared machine);
* CBR: the spec's ns-2 CBR agent (1 Mbit/s of 1000-byte UDP packets, router -> server);
* link events: every second a ``tevc`` (through the experiment's event scheduler) flips
  the bottleneck's delay between 10 ms and 20 ms;
* captures: the bottleneck is captured to a new pcap in the experiment's folder,
  rotated every 10 s (stop, start a new file, remove the old one).

Every ``--sample`` seconds (default 10) it samples the engine process's RSS, open fds
and threads (/proc/PID) and the ``realtime`` section of the engine's ``stats``
(timer events, late events, max lateness). The verdict: memory and fds are *flat*
when the least-squares slope after a warm-up (the first 20 % of the run, at least one
minute) stays below ``--rss-slope-kib-per-h`` (default 1024 KiB/h) and
``--fd-slope-per-h`` (default 1 fd/h).

Results: bench/results/soak-YYYYMMDD-HHMM.md and .json (and soak-latest.*).

    python3 bench/soak.py                  # the documented 1-hour run
    python3 bench/soak.py --minutes 10     # a short one
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
sys.path.insert(0, ROOT)

from wanlab.frontends import load  # noqa: E402
from wanlab.lifecycle import Lab  # noqa: E402

SPEC = """\
# soak: client -- router -- server, a CBR from the router, TCP driven from outside
set ns [new Simulator]
source tb_compat.tcl
set client [$ns node]
set router [$ns node]
set server [$ns node]
$ns duplex-link $client $router 100Mb 1ms DropTail
set bottleneck [$ns duplex-link $router $server 10Mb 10ms DropTail]
set udp0 [new Agent/UDP]
$ns attach-agent $router $udp0
set null0 [new Agent/Null]
$ns attach-agent $server $null0
$ns connect $udp0 $null0
set cbr0 [new Application/Traffic/CBR]
$cbr0 set packetSize_ 1000
$cbr0 set rate_ 1Mb
$cbr0 attach-agent $udp0
$ns at 0.5 "$cbr0 start"
$ns run
"""


def proc_sample(pid: int) -> dict:
    """RSS (KiB), threads and open fds of ``pid`` from /proc."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k == "VmRSS":
                out["rss_kib"] = int(v.split()[0])
            elif k == "Threads":
                out["threads"] = int(v)
    # the fewest of three reads 20 ms apart: a control connection that is just opening
    # or closing is not a leak
    fds = []
    for _ in range(3):
        fds.append(len(os.listdir(f"/proc/{pid}/fd")))
        time.sleep(0.02)
    out["fds"] = min(fds)
    return out


def slope_per_hour(ts: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over ts (seconds), per hour; 0 for fewer than 2 points."""
    n = len(ts)
    if n < 2:
        return 0.0
    mt, my = sum(ts) / n, sum(ys) / n
    den = sum((t - mt) ** 2 for t in ts)
    if den == 0:
        return 0.0
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / den * 3600


def verdict(samples: list[dict], minutes: float, rss_limit: float, fd_limit: float) -> dict:
    warm = max(60.0, 0.2 * minutes * 60)
    steady = [s for s in samples if s["t_s"] >= warm] or samples
    ts = [s["t_s"] for s in steady]
    rss = slope_per_hour(ts, [s["rss_kib"] for s in steady])
    fds = slope_per_hour(ts, [s["fds"] for s in steady])
    thr = slope_per_hour(ts, [s["threads"] for s in steady])
    return {"warmup_s": warm, "steady_samples": len(steady),
            "rss_slope_kib_per_h": round(rss, 1), "fd_slope_per_h": round(fds, 3),
            "thread_slope_per_h": round(thr, 3),
            "rss_limit_kib_per_h": rss_limit, "fd_limit_per_h": fd_limit,
            "flat": abs(rss) < rss_limit and abs(fds) < fd_limit}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--rss-slope-kib-per-h", type=float, default=1024.0)
    ap.add_argument("--fd-slope-per-h", type=float, default=1.0)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("soak: must run as root", file=sys.stderr)
        return 1
    home = tempfile.mkdtemp(prefix="wanlab-soak-")
    spec = os.path.join(home, "soak.tcl")
    with open(spec, "w") as f:
        f.write(SPEC)
    lab = Lab(home)
    samples: list[dict] = []
    errors: list[str] = []
    counts = {"link_events": 0, "link_event_failures": 0, "iperf_runs": 0,
              "iperf_failures": 0, "capture_rotations": 0}
    started = datetime.datetime.now(datetime.UTC)
    try:
        row = lab.create(load(spec))
        name = row.name
        folder = lab.show(name)["folder"]
        eng = next(r for r in lab.store.resources(row.id) if r.kind == "engine")
        pid = eng.detail["pid"]
        server = subprocess.Popen(lab.node_argv(name, "server", ["iperf3", "-s"]),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        client: subprocess.Popen | None = None
        cap_n, cap_path = 0, None
        t0 = time.monotonic()
        end = t0 + a.minutes * 60
        next_event = next_sample = t0
        next_capture = t0
        delay_hi = False
        while time.monotonic() < end:
            now = time.monotonic()
            if client is None or client.poll() is not None:
                if client is not None:
                    counts["iperf_runs"] += 1
                    counts["iperf_failures"] += client.returncode != 0
                client = subprocess.Popen(
                    lab.node_argv(name, "client", ["iperf3", "-c", "server", "-t", "30",
                                                   "-b", "5M"]),
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if now >= next_event:
                delay_hi = not delay_hi
                try:
                    lab.tevc(name, "now", "bottleneck", "delay",
                             ["20ms" if delay_hi else "10ms"])
                    counts["link_events"] += 1
                except Exception as e:  # noqa: BLE001 - counted and reported
                    counts["link_event_failures"] += 1
                    errors.append(f"tevc: {e}")
                next_event += 1.0
            if now >= next_capture:
                new = os.path.join(folder, f"soak-{cap_n}.pcap")
                cap_n += 1
                try:
                    with lab.engine(name) as c:
                        if cap_path:
                            c.call("capture_stop", target="bottleneck")
                        c.call("capture_start", target="bottleneck", dir="both", path=new,
                               snaplen=96)
                    if cap_path:
                        os.unlink(cap_path)
                    cap_path = new
                    counts["capture_rotations"] += 1
                except Exception as e:  # noqa: BLE001
                    errors.append(f"capture: {e}")
                next_capture += 10.0
            if now >= next_sample:
                s = {"t_s": round(now - t0, 1), **proc_sample(pid)}
                with lab.engine(name) as c:
                    rt = c.call("stats").get("realtime", {})
                s.update({k: rt.get(k) for k in ("timer_events", "late_events",
                                                 "max_late_us", "behind")})
                samples.append(s)
                print(f"soak: t={s['t_s']:7.1f} s rss {s['rss_kib']} KiB fds {s['fds']} "
                      f"threads {s['threads']} late {s['late_events']}/{s['timer_events']} "
                      f"max {s['max_late_us']} us", flush=True)
                next_sample += a.sample
            time.sleep(0.05)
        for p in (client, server):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(timeout=10)
    except KeyboardInterrupt:
        errors.append("interrupted")
    finally:
        for r in lab.list():
            lab.terminate(r.name)
        lab.close()
        shutil.rmtree(home, ignore_errors=True)
    v = verdict(samples, a.minutes, a.rss_slope_kib_per_h, a.fd_slope_per_h)
    first, last = (samples[0], samples[-1]) if samples else ({}, {})
    result = {"started": started.isoformat(timespec="seconds"), "minutes": a.minutes,
              "sample_s": a.sample, "counts": counts, "errors": errors[:20],
              "n_errors": len(errors), "verdict": v, "samples": samples}
    late_share = (100.0 * last["late_events"] / last["timer_events"]
                  if last.get("timer_events") else 0.0)
    lines = [
        f"# Soak: {a.minutes:g} minutes of mixed traffic ({result['started']})", "",
        (f"`python3 bench/soak.py --minutes {a.minutes:g}` (the documented run is "
         "`python3 bench/soak.py`, 60 minutes)"), "",
        ("Traffic: iperf3 TCP client -> server (5 Mbit/s, 30 s runs), 1 Mbit/s CBR agent, "
         "a `tevc` delay change on the bottleneck every second, a capture of the "
         "bottleneck rotated every 10 s."), "",
        "| | first sample | last sample | slope after warm-up | limit |",
        "|---|---|---|---|---|",
        (f"| engine RSS (KiB) | {first.get('rss_kib')} | {last.get('rss_kib')} | "
         f"{v['rss_slope_kib_per_h']} KiB/h | {v['rss_limit_kib_per_h']:g} KiB/h |"),
        (f"| engine fds | {first.get('fds')} | {last.get('fds')} | "
         f"{v['fd_slope_per_h']} /h | {v['fd_limit_per_h']:g} /h |"),
        (f"| engine threads | {first.get('threads')} | {last.get('threads')} | "
         f"{v['thread_slope_per_h']} /h | |"),
        (f"| timer events later than 1 ms | {first.get('late_events')} | "
         f"{last.get('late_events')} of {last.get('timer_events')} ({late_share:.1f} %) | | |"),
        f"| max lateness (µs) | | {last.get('max_late_us')} | | |", "",
        (f"Work done: {counts['link_events']} link events ({counts['link_event_failures']} "
         f"failed), {counts['iperf_runs']} iperf3 runs ({counts['iperf_failures']} failed), "
         f"{counts['capture_rotations']} capture rotations; {len(samples)} samples, warm-up "
         f"{v['warmup_s']:g} s; load average at the end {os.getloadavg()[0]:.1f} "
         f"on {os.cpu_count()} cores."), "",
        f"**Verdict: {'FLAT' if v['flat'] else 'NOT FLAT'}** (memory and fds).", ""]
    if errors:
        lines += ["Errors (first 20):", ""] + [f"- {e}" for e in errors[:20]] + [""]
    text = "\n".join(lines)
    print(text)
    if not a.no_save:
        out = os.path.join(ROOT, "bench", "results")
        stamp = started.strftime("%Y%m%d-%H%M")
        for base in (f"soak-{stamp}", "soak-latest"):
            with open(os.path.join(out, base + ".md"), "w") as f:
                f.write(text)
            with open(os.path.join(out, base + ".json"), "w") as f:
                json.dump(result, f, indent=1)
    return 0 if v["flat"] and samples else 1


if __name__ == "__main__":
    sys.exit(main())
