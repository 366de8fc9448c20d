#!/usr/bin/env python3
"""wanlab against Mininet 2.3 (Debian's package), one Mininet script run on both.

Mininet is never installed: Debian's ``mininet`` package is fetched (``apt-get download
mininet``) and extracted (``dpkg-deb -x``) into a temporary folder, and its ``mininet``
package and ``mnexec`` are used from there. Its switches are Open vSwitch bridges with the
userspace (netdev) datapath (``OVSBridge(datapath='user')``, standalone: MAC learning,
no controller): this kernel has no openvswitch module. Each Mininet run takes place in a
network namespace of the bench's own (``wlb-mnvs-<pid>-<k>``, Mininet's "root" namespace
there), with an ``ovsdb-server``/``ovs-vswitchd`` of its own (state in the temporary
folder, ``OVS_RUNDIR``); deleting the namespace removes whatever the run made, even when
it timed out. That needs
Debian's ``openvswitch-switch`` (``apt-get install --no-install-recommends
openvswitch-switch``); without it only wanlab is measured.

The same script (below) runs under ``python3`` with Debian's Mininet first on the path and
under ``wanlab mininet``, where ``OVSBridge`` is the engine's learning switch. Per case it
prints one JSON line: build (``Mininet(topo)`` + ``start()``), ``pingAll`` and ``stop()``
times, and for the fidelity cases the ping RTT over ``TCLink`` links.

Cases (``--full``: the sizes of the issue, 1024 and 100 hosts; default a quarter of them):

* ``tree,depth=2,fanout=F`` and ``linear,N``: build, pingall, teardown;
* ``single,2`` unshaped: the ping RTT each adds by itself;
* ``single,2`` with ``TCLink(delay='10ms')`` on both links: the RTT should be 40 ms
  (4 link crossings). Mininet's ``tc netem`` fails here (the kernel has no ``sch_netem``):
  what it prints is recorded;
* ``single,2`` with ``TCLink(bw=10)``: 5 s of TCP ``iperf`` (Mininet's ``htb`` works here);
* ``single,2`` with ``TCLink(bw=10, delay='10ms', loss=1)`` on both links (``mn --link
  tc,bw=10,delay=10ms,loss=1``): 2000 pings at 100/s (``--loss-pings``), RTT and loss
  against what the links make (40 ms; a ping crosses four interfaces that each lose 1 %:
  1 - 0.99^4 = 3.94 % of round trips, with a 99 % Wilson interval of the count), then 5 s
  of UDP offered at 12 Mbit/s and 5 s of TCP.

A pingAll of n hosts is n(n-1) pings (a million for 1024 hosts, on both tools): above
``--sample-above`` hosts (128) the ``topo`` case pings among a sample, every k-th host
(k = n/32 rounded up: one per edge switch of ``tree,2,32``) and the second host (the
first's neighbour on its switch): 33 hosts, 1056 pings. ``linear,100`` gets its full
pingAll (9900 pings).

Usage: ``sudo python3 bench/mininet_vs.py [--full] [--runs N] [--only CASE...] [--no-save]``. Writes
bench/results/mininet-vs-DATE.{md,json} and mininet-vs-latest.{md,json}.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")

# One script for both: argv = case, topology arguments; prints one JSON line.
SCRIPT = r'''
import json, os, re, sys, time
from functools import partial
from mininet.net import Mininet
from mininet.node import OVSBridge
from mininet.link import TCLink
from mininet.topo import SingleSwitchTopo, LinearTopo
from mininet.topolib import TreeTopo
from mininet.log import setLogLevel

setLogLevel("warning")
case, arg = sys.argv[1], sys.argv[2]
switch = partial(OVSBridge, datapath="user")
out = {"case": case, "arg": arg}
if case == "topo":
    kind, *nums = arg.split(",")
    topo = (TreeTopo(depth=int(nums[0]), fanout=int(nums[1])) if kind == "tree"
            else LinearTopo(k=int(nums[0]), n=1))
    t0 = time.time()
    net = Mininet(topo=topo, switch=switch, controller=None, autoSetMacs=True)
    net.start()
    t1 = time.time()
    out["hosts"] = len(net.hosts)
    # a pingAll of n hosts is n(n-1) pings: above MAX hosts, a sample of them (every k-th,
    # one per edge switch of a tree, and the first's neighbour, which shares its switch)
    MAX = int(os.environ.get("MNVS_SAMPLE_ABOVE", "128"))
    hosts = net.hosts
    if len(hosts) > MAX:
        k = -(-len(hosts) // 32)
        hosts = hosts[::k] + ([hosts[1]] if k > 1 else [])
    out["pinged_hosts"] = len(hosts)
    out["loss_pct"] = net.ping(hosts=hosts, timeout=2)
    t2 = time.time()
    net.stop()
    t3 = time.time()
    out.update(build_s=t1 - t0, pingall_s=t2 - t1, stop_s=t3 - t2)
else:
    params = {"plain": {}, "delay": {"delay": "10ms"}, "bw": {"bw": 10},
              "tc": {"bw": 10, "delay": "10ms", "loss": 1}}[case]
    link = partial(TCLink, **params) if params else None
    kw = {"link": link} if link else {}
    net = Mininet(topo=SingleSwitchTopo(2), switch=switch, controller=None,
                  autoSetMacs=True, autoStaticArp=True, **kw)
    net.start()
    h1, h2 = net.get("h1", "h2")
    h1.cmd("ping -c2 -i0.2", h2.IP())
    if case == "tc":
        # mn --link tc,bw=10,delay=10ms,loss=1: every interface sends with those
        p = h1.cmd("ping -q -c", arg, "-i0.01", h2.IP())
        m = re.search(r"(\d+) packets transmitted, (\d+) received", p)
        out["pings"] = [int(m.group(1)), int(m.group(2))] if m else None
        m = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+)", p)
        out["rtt_ms"] = [float(x) for x in m.groups()] if m else None
        h2.cmd("iperf -s -u -p 5002 > /dev/null 2>&1 &")
        h2.cmd("iperf -s -p 5001 > /dev/null 2>&1 &")
        time.sleep(1)
        o = h1.cmd("iperf -u -f m -b 12M -t 5 -p 5002 -c", h2.IP())
        m = re.findall(r"([\d.]+) Mbits/sec.*?\(([\d.e+-]+)%\)", o.split("Server Report")[-1])
        out["udp"] = [float(m[-1][0]), float(m[-1][1])] if m else o.strip()[-80:]
        o = h1.cmd("iperf -f m -t 5 -p 5001 -c", h2.IP())
        m = re.findall(r"([\d.]+) Mbits/sec", o)
        out["tcp"] = float(m[-1]) if m else o.strip()[-80:]
        h2.cmd("kill %1 %2")
    elif case == "bw":
        # iperf by hand: Mininet's net.iperf waits for the server with telnet
        h2.cmd("iperf -s -p 5001 > /dev/null 2>&1 &")
        time.sleep(1)
        o = h1.cmd("iperf -f m -t 5 -p 5001 -c", h2.IP())
        m = re.findall(r"([\d.]+) Mbits/sec", o)
        out["iperf"] = [m[-1] + " Mbits/sec"] if m else [o.strip()[-80:]]
        h2.cmd("kill %iperf")
    else:
        p = h1.cmd("ping -c", arg, "-i0.05", h2.IP())
        m = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+)", p)
        out["rtt_ms"] = [float(x) for x in m.groups()] if m else None
    net.stop()
print("RESULT " + json.dumps(out), flush=True)
'''

OVS_NEEDS = ("ovsdb-server", "ovs-vswitchd", "ovsdb-tool", "ovs-vsctl")


def fetch_mininet(tmp: str) -> str:
    """Debian's mininet package, extracted (never installed): the extracted root."""
    subprocess.run(["apt-get", "download", "mininet"], cwd=tmp, check=True,
                   capture_output=True)
    deb = glob.glob(os.path.join(tmp, "mininet_*.deb"))[0]
    root = os.path.join(tmp, "mn")
    subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
    return root


class MininetRoom:
    """A network namespace of the bench's own (``wlb-mnvs-<pid>-<k>``) where one Mininet run
    takes the host's place: its switches' interfaces and an ``ovsdb-server``/``ovs-vswitchd``
    of our own (state in ``d``) live there, so deleting it takes everything the run made,
    even after a timeout. The daemons are stopped by the PIDs they wrote."""

    def __init__(self, d: str, k: int):
        self.d, self.ns = d, f"wlb-mnvs-{os.getpid()}-{k}"
        os.makedirs(d, exist_ok=True)
        self.env = {**os.environ, "OVS_RUNDIR": d, "OVS_DBDIR": d, "OVS_LOGDIR": d}

    def cmd(self, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns, *args]

    def __enter__(self) -> "MininetRoom":
        d, env = self.d, self.env
        subprocess.run(["ip", "netns", "add", self.ns], check=True)
        try:
            subprocess.run(self.cmd("ip", "link", "set", "lo", "up"), check=True)
            subprocess.run(["ovsdb-tool", "create", f"{d}/conf.db",
                            "/usr/share/openvswitch/vswitch.ovsschema"], check=True, env=env)
            subprocess.run(self.cmd("ovsdb-server", f"{d}/conf.db",
                                    f"--remote=punix:{d}/db.sock", f"--pidfile={d}/ovsdb.pid",
                                    "--detach", f"--log-file={d}/ovsdb.log",
                                    f"--unixctl={d}/ovsdb.ctl"), check=True, env=env)
            subprocess.run(["ovs-vsctl", "--no-wait", "init"], check=True, env=env)
            subprocess.run(self.cmd("ovs-vswitchd", f"--pidfile={d}/vswitchd.pid", "--detach",
                                    f"--log-file={d}/vswitchd.log",
                                    f"--unixctl={d}/vswitchd.ctl"), check=True, env=env)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        for name in ("vswitchd", "ovsdb"):
            try:
                with open(f"{self.d}/{name}.pid") as f:
                    os.kill(int(f.read().strip()), 15)
            except (OSError, ValueError):
                pass
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        shutil.rmtree(self.d, ignore_errors=True)


def run_one(cmd: list[str], env: dict[str, str], timeout: float) -> dict:
    t0 = time.time()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    wall = time.time() - t0
    for ln in p.stdout.splitlines():
        if ln.startswith("RESULT "):
            r = json.loads(ln[7:])
            r["wall_s"] = wall
            lines = (p.stdout + p.stderr).splitlines()
            # what the kernel refused first (netem), then other complaints
            errs = [x for x in lines if "qdisc" in x] + \
                [x for x in lines if "rror" in x and "qdisc" not in x]
            if errs:
                r["messages"] = errs[:3]
            return r
    tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
    return {"error": " | ".join(tail) or f"exit status {p.returncode}"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true", help="tree,2,32 and linear,100")
    ap.add_argument("--topos", nargs="*", help="e.g. tree,2,8 linear,25 (default by --full)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--pings", type=int, default=50)
    ap.add_argument("--loss-pings", type=int, default=2000,
                    help="pings (100/s) of the loss case")
    ap.add_argument("--only", nargs="*", choices=("topo", "plain", "delay", "bw", "tc"),
                    help="only these cases")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    ap.add_argument("--sample-above", type=int, default=128, metavar="N",
                    help="pingall of a sample when a topology has more than N hosts")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("mininet_vs: must run as root", file=sys.stderr)
        return 1
    topos = a.topos or (["tree,2,32", "linear,100"] if a.full else ["tree,2,8", "linear,25"])
    cases = [("topo", t) for t in topos] + [("plain", str(a.pings)),
                                            ("delay", str(a.pings)), ("bw", "0"),
                                            ("tc", str(a.loss_pings))]
    if a.only:
        cases = [c for c in cases if c[0] in a.only]
    # a SIGTERM (timeout, kill) ends the bench through its finally clauses
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    os.environ["MNVS_SAMPLE_ABOVE"] = str(a.sample_above)
    tmp = tempfile.mkdtemp(prefix="wlb-mnvs-")
    results: dict[str, list] = {"wanlab": [], "mininet": []}
    try:
        script = os.path.join(tmp, "mnbench.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        wl_env = {**os.environ, "PYTHONPATH": ROOT}
        systems = {"wanlab": ([sys.executable, "-m", "wanlab.mininet.main", script], wl_env)}
        missing = [x for x in OVS_NEEDS if not shutil.which(x)]
        why = None
        if missing:
            why = (f"Open vSwitch is not installed ({', '.join(missing)} missing): "
                   f"apt-get install --no-install-recommends openvswitch-switch")
        else:
            mn = fetch_mininet(tmp)
            mn_env = {"PYTHONPATH": os.path.join(mn, "usr/lib/python3/dist-packages"),
                      "PATH": os.path.join(mn, "usr/bin") + ":" + os.environ["PATH"]}
            systems["mininet"] = ([sys.executable, script], mn_env)
        k = 0
        for case, arg in cases:
            for name, (cmd, env) in systems.items():
                for _ in range(a.runs):
                    if name == "mininet":
                        k += 1
                        with MininetRoom(os.path.join(tmp, f"ovs{k}"), k) as room:
                            r = run_one(room.cmd(*cmd, case, arg), {**room.env, **env},
                                        timeout=a.timeout)
                    else:
                        r = run_one([*cmd, case, arg], env, timeout=a.timeout)
                    r.setdefault("case", case)
                    r.setdefault("arg", arg)
                    results[name].append(r)
                    print(name, json.dumps(r), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    md = table(results, why)
    print(md)
    if not a.no_save:
        os.makedirs(RESULTS, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M")
        for base in (f"mininet-vs-{stamp}", "mininet-vs-latest"):
            with open(os.path.join(RESULTS, base + ".md"), "w") as f:
                f.write(md)
            with open(os.path.join(RESULTS, base + ".json"), "w") as f:
                json.dump({"results": results, "mininet_missing": why}, f, indent=1)
    return 0


def _med(rs: list[dict], key: str) -> str:
    xs = [r[key] for r in rs if isinstance(r.get(key), (int, float))]
    return f"{statistics.median(xs):.2f}" if xs else "-"


# the loss case: 1 % on every interface; a ping crosses four (h1's, s1's towards h2, h2's,
# s1's towards h1), each dropping independently
LOSS_CROSSINGS = 4
LOSS_EXPECTED = 1 - 0.99 ** LOSS_CROSSINGS        # 3.94 % of round trips


def wilson(lost: int, n: int, z: float = 2.576) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (99 % by default)."""
    if n == 0:
        return 0.0, 1.0
    p = lost / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return c - h, c + h


def _tc_cell(r: dict) -> str:
    out = []
    if r.get("pings"):
        n, got = r["pings"]
        lo, hi = wilson(n - got, n)
        inside = "holds" if lo <= LOSS_EXPECTED <= hi else "misses"
        out.append(f"loss {100 * (n - got) / n:.2f} % of {n} pings (99 % interval "
                   f"{100 * lo:.2f}-{100 * hi:.2f} %, {inside} {100 * LOSS_EXPECTED:.2f} %)")
    if r.get("rtt_ms"):
        out.append(f"RTT avg {r['rtt_ms'][1]:.3f} ms (mdev {r['rtt_ms'][3]:.3f})")
    udp, tcp = r.get("udp"), r.get("tcp")
    out.append(f"UDP {udp[0]:.2f} Mbit/s, {udp[1]:g} % lost" if isinstance(udp, list)
               else "UDP fails: " + " ".join(str(udp).split())[:60])
    out.append(f"TCP {tcp:.2f} Mbit/s" if isinstance(tcp, float)
               else "TCP fails: " + " ".join(str(tcp).split())[:60])
    if r.get("messages"):
        out.append("says: " + r["messages"][0][:100])
    return "; ".join(out)


def _cell(rs: list[dict], what: str) -> str:
    if not rs:
        return "not run"
    if all("error" in r for r in rs):
        return "fails: " + rs[0]["error"][:120]
    ok = [r for r in rs if "error" not in r]
    if what == "topo":
        r0 = ok[0]
        pinged = r0.get("pinged_hosts", r0.get("hosts"))
        of = "" if pinged == r0.get("hosts") else \
            f" of {pinged} hosts ({pinged * (pinged - 1)} pings)"
        return (f"build {_med(ok, 'build_s')} s, pingall{of} {_med(ok, 'pingall_s')} s "
                f"({r0.get('loss_pct', 0):.2f} % lost), stop {_med(ok, 'stop_s')} s")
    if what == "tc":
        return " / ".join(_tc_cell(r) for r in ok)
    if what == "bw":
        got = " / ".join(ok[0].get("iperf") or ["-"])
        if "Mbits/sec" not in got:
            return "TCP iperf fails: " + " ".join(got.split())[:80]
        return "iperf " + got
    rtts = [r["rtt_ms"] for r in ok if r.get("rtt_ms")]
    if not rtts:
        return "no ping result"
    mn, avg, mx, mdev = (statistics.median(x[i] for x in rtts) for i in range(4))
    s = f"RTT min/avg/max/mdev {mn:.3f}/{avg:.3f}/{mx:.3f}/{mdev:.3f} ms"
    msgs = ok[0].get("messages")
    if msgs:
        s += " — says: " + msgs[0][:100]
    return s


def table(results: dict[str, list], why: str | None) -> str:
    rows = ["# wanlab against Mininet 2.3 (Debian), the same script", "",
            "| case | wanlab | Mininet 2.3 (OVS, userspace datapath) |", "|---|---|---|"]
    seen = []
    for r in results["wanlab"] + results["mininet"]:
        k = (r["case"], r["arg"])
        if k not in seen:
            seen.append(k)
    label = {"plain": "single,2 unshaped, {} pings",
             "delay": "single,2, TCLink(delay='10ms') (40 ms expected), {} pings",
             "bw": "single,2, TCLink(bw=10), TCP iperf{}", "topo": "{}: build/pingall/stop",
             "tc": "single,2, mn --link tc,bw=10,delay=10ms,loss=1: {} pings at 100/s "
                   "(expected: RTT 40 ms, loss 3.94 %: four 1 % crossings), 5 s UDP at "
                   "12 Mbit/s (expected 9.53: 10 Mbit/s of 1512-byte frames carrying 1470, "
                   "2 crossings lose 1.99 %), 5 s TCP (with the host's congestion control, below)"}
    for case, arg in seen:
        cells = [_cell([r for r in results[s] if (r["case"], r["arg"]) == (case, arg)], case)
                 for s in ("wanlab", "mininet")]
        shown = "" if case == "bw" else arg
        rows.append(f"| {label[case].format(shown)} | {cells[0]} | {cells[1]} |")
    rows += ["", f"Machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at "
             f"the end; both tools' hosts use the host's TCP congestion control, "
             f"{_sysctl('net/ipv4/tcp_congestion_control')} here (BBR is not bound by loss "
             f"as Reno and CUBIC are). pingall: `ping -c1 -W 2` to each other host, one after "
             f"another."]
    if why:
        rows += ["", f"Mininet not run: {why}."]
    return "\n".join(rows) + "\n"


def _sysctl(name: str) -> str:
    try:
        with open("/proc/sys/" + name) as f:
            return f.read().strip()
    except OSError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
