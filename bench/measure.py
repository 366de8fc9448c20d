"""Measurement primitives shared by the benches: RTT probes, UDP streams
(wanlab-gen) and TCP throughput (iperf3) between the two endpoints of a
topology from ``netlab``, plus the small statistics helpers the tables use.
"""

import datetime
import itertools
import json
import math
import os
import statistics
import time

from netlab import GEN, LabError, ns_cmd, sh, wait_json

FRAME_OVERHEAD = 42  # Ethernet 14 + IPv4 20 + UDP 8
IPV6_EXTRA = 20      # an IPv6 header is 40 bytes
_ports = itertools.count(20000)


def payload_for_frame(frame, ipv6=False):
    """UDP payload size that yields an Ethernet frame of ``frame`` bytes (over IPv6:
    ``ipv6``)."""
    return frame - FRAME_OVERHEAD - (IPV6_EXTRA if ipv6 else 0)


def hostport(ip, port):
    """``IP:PORT``, an IPv6 address in brackets."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def _v6(topo):
    return ":" in (topo.ip_b or "")


def rtt(lab, topo, frame, rate, duration, wait=None):
    """Round trip a->b->a with wanlab-gen ping/echo; returns the ping report."""
    port = next(_ports)
    idle = 2.0 + duration + (wait or 1.0)
    echo = lab.popen([GEN, "echo", "--bind", hostport(topo.ip_b, port), "--idle-exit", str(idle)],
                     ns=topo.ns_b)
    time.sleep(0.15)
    ping = lab.popen([GEN, "ping", "--dst", hostport(topo.ip_b, port), "--size",
                      str(payload_for_frame(frame, _v6(topo))),
                      "--rate", str(rate), "--duration", str(duration), "--wait", str(wait or 1.0),
                      "--json"],
                     ns=topo.ns_a)
    rep = wait_json(ping, duration + (wait or 1.0) + 30)
    echo.terminate()
    try:
        echo.wait(timeout=5)
    except Exception:
        echo.kill()
        echo.wait(timeout=5)
    return rep


def stream(lab, topo, frame, duration, rate=None, bitrate=None, max_rate=False, extra_wait=0.0,
           interval=None, during=None):
    """One-way UDP stream a->b. Returns (send report, sink report, during-result).

    ``during`` is an optional callable run while the stream is in progress
    (e.g. sampling engine counters); its return value is passed back.
    """
    port = next(_ports)
    idle = 2.0 + extra_wait
    sink_cmd = [GEN, "sink", "--bind", hostport(topo.ip_b, port), "--idle-exit", str(idle),
                "--fin-exit", str(0.2 + extra_wait), "--duration",
                str(duration + 10 + 2 * extra_wait), "--json"]
    if interval:
        sink_cmd += ["--interval", str(interval)]
    sink = lab.popen(sink_cmd, ns=topo.ns_b)
    time.sleep(0.15)
    cmd = [GEN, "send", "--dst", hostport(topo.ip_b, port), "--size",
           str(payload_for_frame(frame, _v6(topo))),
           "--duration", str(duration), "--json"]
    if max_rate:
        cmd.append("--max")
    elif bitrate:
        cmd += ["--bitrate", str(int(bitrate))]
    else:
        cmd += ["--rate", str(rate)]
    snd = lab.popen(cmd, ns=topo.ns_a)
    extra = during() if during else None
    srep = wait_json(snd, duration + 30)
    krep = wait_json(sink, duration + 30 + 2 * extra_wait)
    return srep, krep, extra


def iperf(lab, topo, parallel, duration):
    """TCP throughput a->b with iperf3; returns received bits/s."""
    port = next(_ports)
    srv = lab.popen(["iperf3", "-s", "-1", "-B", topo.ip_b, "-p", str(port)], ns=topo.ns_b)
    time.sleep(0.3)
    out = sh(ns_cmd(topo.ns_a, ["iperf3", "-c", topo.ip_b, "-p", str(port), "-t", str(duration),
                                "-P", str(parallel), "-J"]), timeout=duration + 30, check=False)
    try:
        srv.wait(timeout=10)
    except Exception:
        srv.kill()
    try:
        j = json.loads(out)
    except ValueError:
        raise LabError(f"iperf3 gave no JSON: {out[:300]!r}") from None
    if "error" in j:
        raise LabError(f"iperf3: {j['error']}")
    return j["end"]["sum_received"]["bits_per_second"]


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def binom_interval(n, p, conf=0.99):
    """Two-sided ``conf`` acceptance interval [lo, hi] for the number of
    successes of Binomial(n, p), from the exact CDF (summed in log space)."""
    if n <= 0:
        return 0, 0
    alpha = (1 - conf) / 2
    lp, lq = math.log(p), math.log1p(-p)
    mean = n * p
    sd = math.sqrt(n * p * (1 - p))
    lo_k = max(0, int(mean - 8 * sd) - 1)
    hi_k = min(n, int(mean + 8 * sd) + 1)
    lgn = math.lgamma(n + 1)
    pmf = [math.exp(lgn - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lp + (n - k) * lq)
           for k in range(lo_k, hi_k + 1)]
    cdf, acc = [], 0.0
    for x in pmf:
        acc += x
        cdf.append(acc)
    lo = next(lo_k + i for i, c in enumerate(cdf) if c >= alpha)
    hi = next(lo_k + i for i, c in enumerate(cdf) if c >= 1 - alpha)
    return lo, hi


def fmt(x, nd=3):
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    return f"{x:.{nd}f}"


def save_results(out, prefix, md, res):
    """Write ``md`` and ``res`` as ``<prefix>-<stamp>`` and ``<prefix>-latest`` (.md and
    .json) in ``out``; return the stamped .md path."""
    os.makedirs(out, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M")
    for name in (f"{prefix}-{stamp}", f"{prefix}-latest"):
        with open(os.path.join(out, name + ".md"), "w") as f:
            f.write(md)
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(res, f, indent=1)
    return os.path.join(out, f"{prefix}-{stamp}.md")
