#!/usr/bin/env python3
"""A cellular downlink replayed from a Mahimahi trace, under a saturating TCP flow (iperf3)
and a file transfer (HTTP) at the same time; prints the bytes the link delivered each
second against the trace's capacity in that second (docs/impairments.md).

    sudo python3 examples/cellular.py [TRACE] [--seconds 10]

TRACE defaults to Verizon-LTE-short.down from the cellular traces beside the checkout
(``../shared/traces/cellular``; they are not part of the project). The flows start first;
once the downlink's queue is full the trace starts again (``set_link``), with the engine's
clock read around it, so each second's capacity is the trace's own.
"""

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from wanlab import api  # noqa: E402
from wanlab.frontends.builder import ExperimentBuilder  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TRACE_DIRS = [os.path.join(HERE, *[".."] * k, "shared", "traces", "cellular") for k in (2, 3)]
OPP = 1500          # bytes a delivery opportunity carries
FILE_BYTES = 2_000_000
QUEUE = 400        # frames: a cellular base station buffers deeply
LEAD_S = 2.0       # the flows fill the queue for this long before the trace starts
# the server's file, made in memory (a node may see its own /tmp), served over HTTP
SERVE = ("import http.server, random, sys\n"
         "data = random.Random(1).randbytes(int(sys.argv[2]))\n"
         "class H(http.server.BaseHTTPRequestHandler):\n"
         "    def do_GET(self):\n"
         "        self.send_response(200)\n"
         "        self.send_header('Content-Length', str(len(data)))\n"
         "        self.end_headers()\n"
         "        self.wfile.write(data)\n"
         "http.server.HTTPServer((sys.argv[1], 8000), H).serve_forever()\n")
# the phone's download: the file's SHA-256 and how long it took
FETCH = ("import hashlib, sys, time, urllib.request\n"
         "t = time.monotonic()\n"
         "d = urllib.request.urlopen(sys.argv[1], timeout=60).read()\n"
         "print(hashlib.sha256(d).hexdigest(), time.monotonic() - t)")


def default_trace() -> str:
    for d in TRACE_DIRS:
        p = os.path.join(os.path.normpath(d), "Verizon-LTE-short.down")
        if os.path.exists(p):
            return p
    raise SystemExit("no cellular trace found: give its path")


def experiment(trace: str):
    b = ExperimentBuilder("cellular")
    b.node("server")
    b.node("phone")
    b.link("server", "phone", name="radio", bandwidth="100Mb", delay="20ms",
           queue={"limit": QUEUE})
    b.direction("radio", "server", bandwidth={"trace": trace})     # the downlink
    return b.build()


def capacity(ms: list[int], s: float) -> int:
    """Bytes of the opportunities in the first ``s`` seconds of the looped trace."""
    whole, rest = divmod(s * 1000, ms[-1])
    return (int(whole) * len(ms) + sum(1 for m in ms if m < rest)) * OPP


def run(trace: str, seconds: int, home: str | None = None, file_bytes: int = FILE_BYTES,
        lead_s: float = LEAD_S) -> dict:
    """Replay ``trace`` for ``seconds`` under iperf3 and a file transfer; the per-second
    delivered and capacity bytes, the flows' own results and the file's check."""
    ms = [int(x) for x in open(trace).read().split()]
    data = random.Random(1).randbytes(file_bytes)
    with api.Experiment(experiment(trace), home=home) as exp:
        ip = {n: exp.show()["nodes"][n]["interfaces"][0]["ip"].split("/")[0]
              for n in ("server", "phone")}
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        procs = [exp.popen("server", ["python3", "-c", SERVE, ip["server"], str(file_bytes)],
                           **quiet),
                 exp.popen("phone", ["iperf3", "-s", "-1", "-B", ip["phone"]], **quiet)]
        try:
            time.sleep(0.5)
            # the flows first, so that the radio's queue is full when the trace starts
            span = str(round(lead_s + seconds + 2))     # iperf3 outlasts the samples
            tcp = exp.popen("server", ["iperf3", "-c", ip["phone"], "-t", span, "-J"],
                            stdout=subprocess.PIPE, text=True)
            fetch = exp.popen("phone", ["python3", "-c", FETCH,
                                        f"http://{ip['server']}:8000/video.bin"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs += [tcp, fetch]
            time.sleep(lead_s)
            # the trace starts again now, on the downlink only (as `wanlab tevc cellular
            # now radio bandwidth trace FILE ab` does through the event scheduler): between
            # these two reads of the engine's clock
            t0 = exp.stats("radio")["now_ns"]
            exp.set_link("radio", "ab", bandwidth={"trace": trace})
            t1 = exp.stats("radio")["now_ns"]
            origin = (t0 + t1) / 2
            samples, start = [], time.monotonic()
            for k in range(1, seconds + 2):
                ab = exp.stats("radio")
                samples.append((ab["now_ns"], ab["links"]["radio"]["ab"]["out_bytes"],
                                ab["links"]["radio"]["ab"].get("drop_queue", 0)))
                time.sleep(max(0.0, start + k - time.monotonic()))
            tcp_out, _ = tcp.communicate(timeout=seconds + 60)
            fetch_out, fetch_err = fetch.communicate(timeout=120)
            words = fetch_out.split()
            same = len(words) == 2 and words[0] == hashlib.sha256(data).hexdigest()
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
                    p.wait(timeout=10)
    rows = []
    for (n1, b1, _), (n2, b2, _) in zip(samples, samples[1:], strict=False):
        cap = capacity(ms, (n2 - origin) / 1e9) - capacity(ms, (n1 - origin) / 1e9)
        rows.append({"from_s": (n1 - origin) / 1e9, "to_s": (n2 - origin) / 1e9,
                     "delivered_bytes": b2 - b1, "capacity_bytes": cap})
    # the whole window's capacity for every start of the trace the clock reads allow
    (n1, _, _), (n2, _, _) = samples[0], samples[-1]
    caps = [capacity(ms, (n2 - o) / 1e9) - capacity(ms, (n1 - o) / 1e9)
            for o in (t0 + (t1 - t0) * i / 10 for i in range(11))]
    j = json.loads(tcp_out)
    return {"trace": os.path.basename(trace), "rows": rows,
            "start_uncertainty_ms": (t1 - t0) / 1e6,
            "delivered_bytes": samples[-1][1] - samples[0][1],
            "capacity_bytes": (min(caps), max(caps)),
            "iperf3_bps": j["end"]["sum_received"]["bits_per_second"],
            "retransmits": j["end"]["sum_sent"].get("retransmits"),
            "queue_drops": samples[-1][2] - samples[0][2],
            "file_bytes": file_bytes, "file_intact": same,
            "file_seconds": float(words[1]) if same else float("nan"),
            "file_error": fetch_err.strip()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", nargs="?")
    ap.add_argument("--seconds", type=int, default=10)
    a = ap.parse_args()
    r = run(a.trace or default_trace(), a.seconds)
    print(f"{r['trace']} on the downlink (its start known to {r['start_uncertainty_ms']:.1f} "
          f"ms): delivered / trace capacity, Mbit/s")
    for row in r["rows"]:
        span = row["to_s"] - row["from_s"]
        print(f"{row['from_s']:6.2f}-{row['to_s']:6.2f} s  "
              f"{row['delivered_bytes'] * 8 / span / 1e6:7.3f}  "
              f"{row['capacity_bytes'] * 8 / span / 1e6:7.3f}")
    d, (lo, hi) = r["delivered_bytes"], r["capacity_bytes"]
    print(f"total: {d} bytes delivered; the trace's capacity {lo}..{hi} bytes "
          f"({(d - hi) / hi * 100:+.2f}..{(d - lo) / lo * 100:+.2f} %); iperf3 received "
          f"{r['iperf3_bps'] / 1e6:.3f} Mbit/s; the {r['file_bytes']} byte file took "
          f"{r['file_seconds']:.2f} s, intact: {r['file_intact']}"
          + (f" ({r['file_error']})" if r["file_error"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
