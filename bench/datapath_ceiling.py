#!/usr/bin/env python3
"""Ceilings of the datapaths a user-space forwarder can use, each a relay with nothing in
between, measured in one run beside a plain veth pair (ratios to it).

Paths (two namespaces ``a`` and ``b``, addressed 10.77.0.1 and .2):

* ``veth``: a veth pair between them (the kernel's own path; offloads on).
* ``veth-nocsum``: the same with transmit checksum and segmentation offloads off, what the
  AF_XDP path needs (a frame copied out by XDP carries no checksum the kernel left for later,
  and a UMEM frame holds at most 2 KB): the fair baseline for ``xdp``.
* ``tap``: ``engine/examples/tap_relay.rs``, every frame read from one TAP and written to the
  other (vnet headers, offloads: the engine's TAPs), up to 64 reads per wake-up.
* ``tap-uring``: ``engine/examples/uring_relay.rs --io uring``, the same TAPs moved with
  io_uring: 64 reads in flight on each TAP into registered buffers, each completed read
  written to the other TAP from the same buffer, one ``io_uring_enter`` per batch.
* ``tap-mq2``: ``uring_relay --queues 2``, multi-queue TAPs (``IFF_MULTI_QUEUE``) with two
  queues and one thread per queue pair, each pinned to its CPU, each running ``tap``'s loop.
  The sending kernel picks a queue per flow: the one-flow 64-byte flood uses one queue, the
  eight TCP streams both.
* ``tap-mq2-uring``: the same two queue pairs, each thread with its own io_uring.
* ``xdp``: ``engine/examples/xdp_relay.rs``, two veth pairs whose far ends sit in a relay
  namespace; an XDP program on each (native on veth) redirects every frame to an AF_XDP
  socket (copy mode) and the relay copies it into the other socket's transmit ring.
* ``engine``: one wanlab-engine link with no impairment (the engine's TAP path).

Per path and repeat: 64-byte frames/s (``wanlab-gen send --max`` from ``a``, counted by the
sink in ``b``), one and eight TCP streams (iperf3), and the relay's CPU per frame (its
utime + stime over the 64-byte flood, divided by the frames received). Repeats interleave
the paths; the table gives medians. Other work on the machine shifts every path alike in a
run, so read the ratios, not the absolute numbers. Below the table: each batched TAP path
and ``xdp`` against ``tap``, the ratio a new datapath must reach (1.3x on frames/s or TCP)
to be worth adopting.

    sudo python3 bench/datapath_ceiling.py [--repeats 3] [--duration 3] [--no-save]

Writes bench/results/datapath-ceiling-YYYYMMDD-HHMM.{md,json}. Needs root and ethtool.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import measure as M  # noqa: E402
from netlab import (  # noqa: E402
    MTU,
    RELAY,
    ROOT,
    EngineTopo,
    Lab,
    RelayTopo,
    Topo,
    VethTopo,
    ns_cmd,
    sh,
    static_neigh,
)

XDP_RELAY = os.path.join(ROOT, "target", "release", "examples", "xdp_relay")
URING_RELAY = os.path.join(ROOT, "target", "release", "examples", "uring_relay")
RESULTS = os.path.join(ROOT, "bench", "results")
# The batched TAP relays: path -> (uring_relay's options, TAP/namespace suffix).
BATCHED = {"tap-uring": (["--io", "uring"], "u"),
           "tap-mq2": (["--queues", "2"], "m"),
           "tap-mq2-uring": (["--queues", "2", "--io", "uring"], "q")}
PATHS = ["veth", "veth-nocsum", "tap", *BATCHED, "xdp", "engine"]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def offloads_off(ns, dev):
    """Transmit checksum and segmentation offloads off: every frame leaves complete."""
    sh(ns_cmd(ns, ["ethtool", "-K", dev, "tx", "off", "tso", "off", "gso", "off"]))


class NoCsumVethTopo(VethTopo):
    name = "veth-nocsum"

    def __init__(self, lab):
        super().__init__(lab, suffix="n")
        offloads_off(self.ns_a, "wlbna")
        offloads_off(self.ns_b, "wlbnb")


class XdpTopo(Topo):
    """a -- veth -- [relay namespace: xdp_relay] -- veth -- b."""
    name = "xdp"

    def __init__(self, lab, suffix="x"):
        self.ns_a, self.ns_b = lab.add_ns(suffix + "a"), lab.add_ns(suffix + "b")
        ns_r = lab.add_ns(suffix + "r")
        self.ip_a, self.ip_b = "10.77.0.1", "10.77.0.2"
        ends = []
        for ns, ip, side in ((self.ns_a, self.ip_a, "a"), (self.ns_b, self.ip_b, "b")):
            dev, far = f"wlb{suffix}{side}", f"wlb{suffix}r{side}"
            sh(["ip", "link", "add", dev, "netns", ns, "type", "veth", "peer", "name", far,
                "netns", ns_r])
            sh(ns_cmd(ns, ["ip", "addr", "add", ip + "/24", "dev", dev]))
            sh(ns_cmd(ns, ["ip", "link", "set", dev, "mtu", str(MTU), "up"]))
            sh(ns_cmd(ns_r, ["ip", "link", "set", far, "mtu", str(MTU), "up"]))
            offloads_off(ns, dev)
            ends.append((ns, dev, ip, far))
        static_neigh(self.ns_a, ends[0][1], self.ip_a, self.ns_b, ends[1][1], self.ip_b)
        self.proc = lab.popen([XDP_RELAY, ends[0][3], ends[1][3]], ns=ns_r)
        if self.proc.stdout.readline().strip() != "ready":
            self.proc.wait(timeout=5)
            raise RuntimeError(f"xdp_relay: {self.proc.stderr.read().strip()}")

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=5)


def build(lab, kind):
    if kind == "veth":
        return VethTopo(lab)
    if kind == "veth-nocsum":
        return NoCsumVethTopo(lab)
    if kind == "tap":
        return RelayTopo(lab)
    if kind in BATCHED:
        opts, suffix = BATCHED[kind]
        return RelayTopo(lab, suffix=suffix, relay=[URING_RELAY, *opts])
    if kind == "xdp":
        return XdpTopo(lab)
    return EngineTopo(lab)


def pid_of(topo):
    if isinstance(topo, EngineTopo):
        return topo.engine.pid
    p = getattr(topo, "proc", None)
    return p.pid if p else None


def cpu_s(pid):
    """utime + stime of ``pid`` in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(lab, topo, dur):
    pid = pid_of(topo)
    c0 = cpu_s(pid) if pid else None
    _, k, _ = M.stream(lab, topo, 64, dur, max_rate=True)
    c1 = cpu_s(pid) if pid else None
    pps = k.get("pps")
    per_frame = ((c1 - c0) / (pps * dur) * 1e6) if pid and pps else None
    return {"pps": pps, "cpu_us_per_frame": per_frame,
            "tcp1": M.iperf(lab, topo, 1, dur), "tcp8": M.iperf(lab, topo, 8, dur)}


def table(res, meta):
    med = {p: {m: M.median([r[m] for r in rs]) for m in ("pps", "tcp1", "tcp8",
                                                         "cpu_us_per_frame")}
           for p, rs in res.items() if rs}
    v = med.get("veth", {})

    def ratio(p, m):
        a, b = med[p].get(m), v.get(m)
        return f"{a / b:.2f}x" if a and b else "-"

    def num(x, scale, nd):
        return f"{x / scale:.{nd}f}" if x is not None else "-"
    L = ["# Datapath ceilings (relays with nothing in between; ratios to veth in the same run)",
         "",
         f"{meta['date']} · kernel {meta['kernel']} · {meta['cpus']} CPUs · git {meta['git']} · "
         f"{meta['repeats']} repeats of {meta['duration']} s, medians · load average "
         f"{meta['load_start']:.1f} at start, {meta['load_end']:.1f} at end", "",
         "| path | 64 B Mframes/s | ratio | TCP 1 stream Gbit/s | ratio | TCP 8 streams Gbit/s "
         "| ratio | relay CPU µs/frame |", "|---|---|---|---|---|---|---|---|"]
    for p in PATHS:
        if p not in med:
            continue
        m = med[p]
        L.append(f"| {p} | {num(m['pps'], 1e6, 3)} | {ratio(p, 'pps')} | "
                 f"{num(m['tcp1'], 1e9, 2)} | {ratio(p, 'tcp1')} | {num(m['tcp8'], 1e9, 2)} | "
                 f"{ratio(p, 'tcp8')} | {num(m['cpu_us_per_frame'], 1, 2)} |")
    t = med.get("tap")
    if t:
        for p in (*BATCHED, "xdp"):
            x = med.get(p)
            if not x:
                continue
            r = {name: x[m] / t[m] for name, m in
                 (("64 B frames/s", "pps"), ("TCP 1", "tcp1"), ("TCP 8", "tcp8")) if x[m] and t[m]}
            over = [name for name, v in r.items() if v >= 1.3]
            cpu = (x["cpu_us_per_frame"] / t["cpu_us_per_frame"]
                   if x["cpu_us_per_frame"] and t["cpu_us_per_frame"] else None)
            L += ["", f"{p} / tap: " + ", ".join(f"{name} {v:.2f}x" for name, v in r.items())
                  + (f" (>= 1.3x: {', '.join(over)})" if over else " (none >= 1.3x)")
                  + (f"; relay CPU per 64 B frame {cpu:.2f}x" if cpu else "")]
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--out", default=RESULTS)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        log("datapath_ceiling.py must run as root (network namespaces, XDP)")
        return 1
    r = subprocess.run(["cargo", "build", "--release", "-p", "wanlab-engine", "--example",
                        "tap_relay", "--example", "xdp_relay", "--example", "uring_relay"],
                       cwd=ROOT)
    if r.returncode != 0 or not os.path.exists(RELAY):
        return 1
    paths = [p for p in args.paths.split(",") if p]
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "kernel": os.uname().release, "cpus": os.cpu_count(), "repeats": args.repeats,
            "duration": args.duration, "load_start": os.getloadavg()[0],
            "git": sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], check=False).strip()}
    lab = Lab()
    res = {p: [] for p in paths}
    try:
        topos = {}
        for p in paths:
            try:
                topos[p] = build(lab, p)
            except Exception as e:
                log(f"{p}: cannot set up: {e}")
        for i in range(args.repeats):
            for p, t in topos.items():
                try:
                    row = measure(lab, t, args.duration)
                except Exception as e:
                    log(f"{p} repeat {i + 1}: {e}")
                    continue
                res[p].append(row)
                log(f"{p} repeat {i + 1}: {row['pps'] / 1e6:.3f} Mpps, tcp1 "
                    f"{row['tcp1'] / 1e9:.2f}, tcp8 {row['tcp8'] / 1e9:.2f} Gbit/s, load "
                    f"{os.getloadavg()[0]:.1f}")
                time.sleep(0.2)
        for t in topos.values():
            t.close()
    finally:
        lab.close()
    meta["load_end"] = os.getloadavg()[0]
    md = table(res, meta)
    print(md)
    if not args.no_save:
        os.makedirs(args.out, exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M")
        with open(os.path.join(args.out, f"datapath-ceiling-{stamp}.md"), "w") as f:
            f.write(md)
        with open(os.path.join(args.out, f"datapath-ceiling-{stamp}.json"), "w") as f:
            json.dump({"meta": meta, "runs": res}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
