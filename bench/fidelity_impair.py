"""The fidelity suite's impairment rows: each netem-style impairment of one engine link,
measured on the wire between two namespaces against its definition (docs/impairments.md),
with the error bound it is held to.

* jitter (normal and uniform, reordering allowed so that the samples are the
  distribution's own): the mean and standard deviation of wanlab-gen's one-way delays
  against a stream in the other direction, without jitter, at the same time; bound: 2.576
  standard errors (99 %) plus 200 us for the host's scheduling;
* loss, per frame (ping's sequence numbers): correlated Bernoulli (rate inside its 99 %
  interval widened by the correlation's (1 + c) / (1 - c), mean burst against
  1 / ((1 - c)(1 - p))) and Gilbert-Elliott (mean burst against 1 / r), bursts within
  2.576 standard errors of the geometric length;
* duplicate and corrupt (a corrupted frame is dropped by the receiver's checksums): counts
  of a UDP stream inside their 99 % binomial intervals;
* reorder: the replies whose request skipped the link's delay, inside the 99 % interval
  (and how many overtook an earlier one, for information);
* trace: a saturating UDP stream over a Mahimahi cellular trace, the engine's delivered
  frame bytes over a window (read with the engine's own clock) against the trace's
  opportunities in the same window; bound: 1 % plus two opportunities around the
  capacity, for every start of the trace between the engine's clock read just before and
  just after the request that set it.
"""

import math
import os
import re
import sys
import threading
import time

import measure as M
from netlab import ROOT, link_params, ns_cmd, sh

# every impairment at its default: the engine merges a set's PARAMS into the old ones
CLEAR = {"jitter_us": 0, "jitter_dist": "uniform", "jitter_corr": 0.0, "jitter_reorder": False,
         "duplicate": 0.0, "corrupt": 0.0, "reorder": 0.0, "reorder_gap": 1,
         "trace": {"ms": []}}
Z = 2.576
SLACK_US = 200.0
TRACES = ("Verizon-LTE-short.down", "TMobile-LTE-short.down")
# the cellular traces beside the checkout (a worktree is one level deeper), or WANLAB_TRACES
TRACE_DIRS = [d for d in (os.environ.get("WANLAB_TRACES"),
                          os.path.join(ROOT, "..", "shared", "traces", "cellular"),
                          os.path.join(ROOT, "..", "..", "shared", "traces", "cellular")) if d]
OPP = 1500


def _set(t, delay_ms=10, dir="both", loss=None, **impair):
    p = {**link_params(delay_us=delay_ms * 1000, queue=10000), **CLEAR, **impair}
    if loss is not None:
        p["loss"] = loss
    t.engine.set(t.link, p, dir=dir)
    time.sleep(0.05)


def _ping(t, n, interval=0.002):
    """(replies [(seq, rtt_ms)] in arrival order) of ``n`` pings a -> b."""
    out = sh(ns_cmd(t.ns_a, ["ping", "-n", "-c", str(n), "-i", str(interval), "-W", "2",
                             t.ip_b]), check=False, timeout=n * interval * 4 + 60)
    return [(int(s), float(v)) for s, v in
            re.findall(r"icmp_seq=(\d+) ttl=\d+ time=([\d.]+) ms", out)]


def _bursts(replies, n):
    got = {s for s, _ in replies}
    lost = "".join("1" if s not in got else "0" for s in range(1, n + 1))
    return lost.count("1"), [len(m) for m in re.findall("1+", lost)]


def _row(rows, name, measured, goal, ok, **extra):
    rows.append({"row": name, "measured": measured, "goal": goal, "ok": bool(ok), **extra})
    log(f"  {name}: {measured} (goal {goal}) {'PASS' if ok else 'MISS'}")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class _Reverse:
    """The link's other direction as a topology for the measure helpers (b -> a)."""

    def __init__(self, t):
        self.ns_a, self.ns_b, self.ip_a, self.ip_b = t.ns_b, t.ns_a, t.ip_b, t.ip_a


def _both_ways(lab, t, frame, dur, rate):
    """The sink reports of two streams at once, a -> b and b -> a: the second, over the
    direction left alone, is the first's baseline under the same host load."""
    out = {}

    def one(key, topo):
        out[key] = M.stream(lab, topo, frame, dur, rate=rate)[1]
    th = threading.Thread(target=one, args=("ba", _Reverse(t)))
    th.start()
    one("ab", t)
    th.join()
    return out["ab"], out["ba"]


def jitter_rows(lab, t, rows, quick):
    dur, rate = (2.0, 1000) if quick else (4.0, 1000)
    for dist, value_us, sd_us in (("normal", 4000, 4000.0),
                                  ("uniform", 6000, 6000 / math.sqrt(3))):
        _set(t, delay_ms=20)
        _set(t, delay_ms=20, dir="ab", jitter_us=value_us, jitter_dist=dist,
             jitter_reorder=True)
        k, base = _both_ways(lab, t, 128, dur, rate)
        n = k["owd_n"]
        want_sd = math.sqrt(sd_us ** 2 + base["owd_stdev_us"] ** 2)
        d_mean = k["owd_avg_us"] - base["owd_avg_us"]
        b_m = Z * want_sd / math.sqrt(n) + SLACK_US
        # the sample sd's standard error: sigma / sqrt(2n) for a normal, sigma * sqrt(0.2 / n)
        # for a uniform (its fourth moment is 9/5 sigma^4)
        se = want_sd / math.sqrt(2 * (n - 1)) if dist == "normal" else \
            want_sd * math.sqrt(0.2 / n)
        b_s = Z * se + SLACK_US
        ok = abs(d_mean) <= b_m and abs(k["owd_stdev_us"] - want_sd) <= b_s
        _row(rows, f"jitter {dist} {value_us / 1000:g} ms",
             f"mean {d_mean:+.0f} us, sd {k['owd_stdev_us']:.0f} us ({n} frames; the other "
             f"direction's sd {base['owd_stdev_us']:.0f} us)",
             f"mean 0 ± {b_m:.0f} us, sd {want_sd:.0f} ± {b_s:.0f} us", ok,
             mean_us=d_mean, sd_us=k["owd_stdev_us"], base_sd_us=base["owd_stdev_us"], n=n)
    _set(t)


def loss_rows(lab, t, rows, quick):
    n = 2500 if quick else 5000
    p, c = 0.05, 0.5
    _set(t, dir="ab", loss={"kind": "bernoulli", "p": p, "corr": c})
    rep = _ping(t, n)
    _set(t)
    lost, bursts = _bursts(rep, n)
    half = Z * math.sqrt((1 + c) / (1 - c) * n * p * (1 - p))
    q = 1 - (1 - c) * (1 - p)             # a burst goes on with probability q
    mean_b = sum(bursts) / max(1, len(bursts))
    b_b = Z * math.sqrt(q) / (1 - q) / math.sqrt(max(1, len(bursts)))
    ok = abs(lost - n * p) <= half and abs(mean_b - 1 / (1 - q)) <= b_b
    _row(rows, f"loss Bernoulli {p:.0%} correlation {c:.0%}",
         f"{lost}/{n} lost, mean burst {mean_b:.3f} ({len(bursts)} bursts)",
         f"{n * p - half:.0f}..{n * p + half:.0f}, burst {1 / (1 - q):.3f} ± {b_b:.3f}", ok,
         lost=lost, n=n, mean_burst=mean_b)
    gp, gr = 0.02, 0.3
    _set(t, dir="ab", loss={"kind": "gilbert", "p": gp, "r": gr, "h": 0.0, "k": 1.0})
    rep = _ping(t, n)
    _set(t)
    lost, bursts = _bursts(rep, n)
    mean_b = sum(bursts) / max(1, len(bursts))
    b_b = Z * math.sqrt(1 - gr) / gr / math.sqrt(max(1, len(bursts)))
    _row(rows, f"loss Gilbert-Elliott p {gp} r {gr} (burst length)",
         f"mean burst {mean_b:.3f} ({len(bursts)} bursts, {lost}/{n} lost)",
         f"1/r = {1 / gr:.3f} ± {b_b:.3f}", abs(mean_b - 1 / gr) <= b_b,
         lost=lost, n=n, mean_burst=mean_b)


def dup_corrupt_rows(lab, t, rows, quick):
    dur, rate = (2.0, 1000) if quick else (4.0, 1000)
    for what, p in (("duplicate", 0.1), ("corrupt", 0.05)):
        _set(t, dir="ab", **{what: p})
        _, k, _ = M.stream(lab, t, 256, dur, rate=rate)
        _set(t)
        n = k["expected"]
        got = k["duplicates"] if what == "duplicate" else k["lost"]
        lo, hi = M.binom_interval(n, p)
        _row(rows, f"{what} {p:.0%}" + (" (dropped by checksums)" if what == "corrupt" else ""),
             f"{got}/{n}", f"{lo}..{hi} (99 %)", lo <= got <= hi, count=got, n=n)


def reorder_rows(lab, t, rows, quick):
    n = 1500 if quick else 3000
    _set(t)
    base = min(r for _, r in _ping(t, 50, 0.01))
    p = 0.1
    _set(t, dir="ab", reorder=p, reorder_gap=1)
    rep = _ping(t, n)
    _set(t)
    early = sum(1 for _, r in rep if r < base - 5)
    lowest, overtook = math.inf, 0
    for s, _ in reversed(rep):          # a reply overtook when a lower one arrives later
        overtook += s > lowest
        lowest = min(lowest, s)
    lo, hi = M.binom_interval(len(rep), p)
    _row(rows, f"reorder {p:.0%} (requests that skipped the 10 ms delay)",
         f"{early}/{len(rep)}, {overtook} overtook an earlier frame", f"{lo}..{hi} (99 %)",
         lo <= early <= hi, count=early, n=len(rep), overtook=overtook)


def trace_rows(lab, t, rows, quick):
    folder = next((d for d in TRACE_DIRS if os.path.isdir(d)), TRACE_DIRS[0])
    dur = 5.0 if quick else 10.0
    for name in TRACES:
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            log(f"  no trace {path}: row skipped")
            continue
        ms = [int(x) for x in open(path).read().split()]
        peak = max(sum(1 for m in ms[:200000] if b <= m < b + 100)
                   for b in range(0, min(ms[-1], 20000), 100))
        offered = peak * OPP * 8 * 10 * 1.3
        _set(t, delay_ms=0)       # out_bytes counts frames as they start serializing
        t.engine.set(t.link, {"queue": {"kind": "droptail", "limit": 2000, "in_bytes": False}},
                     dir="ab")
        clock = []        # engine times (ns): around the set, then the window's two ends

        def now():
            return t.engine.request({"cmd": "stats", "target": t.link})

        def during(clock=clock, ms=ms):
            time.sleep(0.3)
            clock.append(now()["now_ns"])
            t.engine.set(t.link, {"trace": {"ms": ms, "offset_ms": 0, "loop": True}},
                         dir="ab")
            clock.append(now()["now_ns"])
            for pause in (1.2, dur - 1.7):
                time.sleep(pause)
                r = now()
                clock.append((r["now_ns"], r["links"][t.link]["ab"]["out_bytes"]))
        M.stream(lab, t, 1500, dur, bitrate=offered, during=during)
        _set(t)
        e0, e1, (n1, b1), (n2, b2) = clock
        period = ms[-1]

        def capacity(s, ms=ms, period=period):
            """Bytes of the opportunities in the first ``s`` seconds of the looped trace."""
            whole, rest = divmod(s * 1000, period)
            return (int(whole) * len(ms) + sum(1 for m in ms if m < rest)) * OPP
        # the trace began when the engine took the set, between e0 and e1
        caps = [capacity((n2 - o) / 1e9) - capacity((n1 - o) / 1e9)
                for o in (e0 + (e1 - e0) * i / 10 for i in range(11))]
        lo, hi = min(caps) * 0.99 - 2 * OPP, max(caps) * 1.01 + 2 * OPP
        mid = (min(caps) + max(caps)) / 2
        got, span = b2 - b1, (n2 - n1) / 1e9
        err = (got - mid) / mid * 100
        _row(rows, f"trace {name} (saturating UDP, {span:.1f} s)",
             f"{got * 8 / span / 1e6:.3f} Mbit/s delivered, {err:+.3f} % of the trace",
             f"{lo * 8 / span / 1e6:.3f}..{hi * 8 / span / 1e6:.3f} Mbit/s (1 % and two "
             f"opportunities around the trace's {mid * 8 / span / 1e6:.3f}; its start known "
             f"to {(e1 - e0) / 1e6:.1f} ms)", lo <= got <= hi, error_pct=err,
             delivered_bytes=got, capacity_bytes=mid, start_uncertainty_ms=(e1 - e0) / 1e6)


def run(suite):
    """The impairment rows into ``suite.res["impair"]``."""
    t = suite.topo("engine")
    rows = suite.res.setdefault("impair", [])
    for part in (jitter_rows, loss_rows, dup_corrupt_rows, reorder_rows, trace_rows):
        try:
            part(suite.lab, t, rows, suite.quick)
        except Exception as e:
            suite.error(f"impair {part.__name__}", e)
    try:
        t.set()
        t.engine.set(t.link, CLEAR)
    except Exception as e:
        suite.error("impair reset", e)
