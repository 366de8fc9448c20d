"""Network-namespace lab helpers for wanlab benches.

Builds the three topologies the fidelity suite compares, all between two
namespaces addressed 10.77.x.x (traffic never leaves namespaces we create):

* ``VethTopo``   -- a plain veth pair between two namespaces (baseline).
* ``RouterTopo`` -- two host namespaces joined through a third namespace
  acting as kernel IP router (two veth pairs, ip_forward=1).
* ``EngineTopo`` -- two namespaces joined by ONE wanlab-engine link: the
  engine creates two TAPs, each TAP is moved into its own namespace.

Every namespace name starts with ``wlb-``; ``Lab`` remembers everything it
created (namespaces, processes, sockets) and removes it in ``close()``, which
``fidelity.py`` calls from a ``finally`` block and an atexit/signal handler.
"""

import json
import os
import shlex
import signal
import socket
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# WANLAB_ENGINE / WANLAB_GEN: a copy of the binaries (a long run that a rebuild must not
# change under it)
GEN = os.environ.get("WANLAB_GEN") or os.path.join(ROOT, "target", "release", "wanlab-gen")
ENGINE = os.environ.get("WANLAB_ENGINE") or os.path.join(ROOT, "target", "release",
                                                         "wanlab-engine")
# The capacity baseline of a TAP forwarder with nothing in it (engine/examples/tap_relay.rs).
RELAY = os.path.join(ROOT, "target", "release", "examples", "tap_relay")


# Interface MTU used on every measured device: 1504 lets a 1518-byte Ethernet
# frame (the engine's accounting: 14-byte header + IP packet, no FCS) through
# without IP fragmentation.
MTU = 1504


class LabError(RuntimeError):
    pass


def sh(cmd, check=True, timeout=60, capture=True):
    """Run a command (list or string) and return stdout; raise LabError on failure."""
    if isinstance(cmd, str):
        cmd = shlex.split(cmd)
    r = subprocess.run(cmd, stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.PIPE if capture else None, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise LabError(f"command failed ({r.returncode}): "
                       f"{' '.join(cmd)}\n{(r.stderr or '').strip()}")
    return r.stdout or ""


def ns_cmd(ns, cmd):
    """Prefix a command list so that it runs inside namespace ``ns`` (None = root)."""
    return (["ip", "netns", "exec", ns] if ns else []) + list(cmd)


class Lab:
    """Owner of namespaces and child processes; ``close()`` removes them all."""

    def __init__(self, tag=None):
        self.tag = tag or str(os.getpid())
        self.namespaces = []
        self.procs = []
        self.files = []

    def ns_name(self, suffix):
        return f"wlb-{self.tag}-{suffix}"

    def add_ns(self, suffix):
        name = self.ns_name(suffix)
        sh(["ip", "netns", "add", name])
        self.namespaces.append(name)
        sh(ns_cmd(name, ["ip", "link", "set", "lo", "up"]))
        # keep IPv6 autoconf/MLD chatter off the measured links
        sh(ns_cmd(name, ["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]), check=False)
        sh(ns_cmd(name, ["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"]), check=False)
        return name

    def del_ns(self, name):
        sh(["ip", "netns", "del", name], check=False)
        if name in self.namespaces:
            self.namespaces.remove(name)

    def popen(self, cmd, ns=None, **kw):
        p = subprocess.Popen(ns_cmd(ns, cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, **kw)
        self.procs.append(p)
        return p

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)
                    p.wait(timeout=3)
                except Exception:
                    try:
                        p.kill()
                        p.wait(timeout=3)
                    except Exception:
                        pass
        self.procs = []
        for ns in list(self.namespaces):
            self.del_ns(ns)
        for f in self.files:
            try:
                os.unlink(f)
            except OSError:
                pass
        self.files = []


def wait_json(p, timeout):
    """Wait for a child that prints one JSON object; return it parsed."""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise LabError(f"timed out: {' '.join(p.args)}") from None
    if p.returncode != 0:
        raise LabError(f"{' '.join(p.args)} exited {p.returncode}: {err.strip()}")
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if not lines:
        raise LabError(f"no JSON from {' '.join(p.args)}: {out!r} {err!r}")
    return json.loads(lines[-1])


def mac_of(ns, dev):
    out = sh(ns_cmd(ns, ["cat", f"/sys/class/net/{dev}/address"]))
    return out.strip()


def static_neigh(ns_a, dev_a, ip_a, ns_b, dev_b, ip_b):
    """Install permanent ARP entries both ways so no ARP crosses the link mid-test."""
    ma, mb = mac_of(ns_a, dev_a), mac_of(ns_b, dev_b)
    sh(ns_cmd(ns_a, ["ip", "neigh", "replace", ip_b, "lladdr", mb, "dev", dev_a, "nud",
                     "permanent"]))
    sh(ns_cmd(ns_b, ["ip", "neigh", "replace", ip_a, "lladdr", ma, "dev", dev_b, "nud",
                     "permanent"]))


class Topo:
    """Two endpoints: ``ns_a`` sends to ``ip_b`` in ``ns_b`` (and back to ``ip_a``)."""
    name = "?"
    ns_a = ns_b = None
    ip_a = ip_b = None

    def close(self):
        pass


class VethTopo(Topo):
    name = "veth"

    def __init__(self, lab, suffix="v"):
        self.ns_a = lab.add_ns(suffix + "a")
        self.ns_b = lab.add_ns(suffix + "b")
        da, db = f"wlb{suffix}a", f"wlb{suffix}b"
        sh(["ip", "link", "add", da, "netns", self.ns_a, "type", "veth", "peer", "name", db,
            "netns", self.ns_b])
        self.ip_a, self.ip_b = "10.77.0.1", "10.77.0.2"
        for ns, dev, ip in ((self.ns_a, da, self.ip_a), (self.ns_b, db, self.ip_b)):
            sh(ns_cmd(ns, ["ip", "addr", "add", ip + "/24", "dev", dev]))
            sh(ns_cmd(ns, ["ip", "link", "set", dev, "mtu", str(MTU), "up"]))
        static_neigh(self.ns_a, da, self.ip_a, self.ns_b, db, self.ip_b)


class RouterTopo(Topo):
    name = "router"

    def __init__(self, lab, suffix="r"):
        self.ns_a = lab.add_ns(suffix + "a")
        self.ns_r = lab.add_ns(suffix + "r")
        self.ns_b = lab.add_ns(suffix + "b")
        self.ip_a, self.ip_b = "10.77.1.1", "10.77.2.1"
        pairs = [(self.ns_a, f"wlb{suffix}a", "10.77.1.1", f"wlb{suffix}ra", "10.77.1.254"),
                 (self.ns_b, f"wlb{suffix}b", "10.77.2.1", f"wlb{suffix}rb", "10.77.2.254")]
        for ns, dev, ip, rdev, rip in pairs:
            sh(["ip", "link", "add", dev, "netns", ns, "type", "veth", "peer", "name", rdev,
                "netns", self.ns_r])
            sh(ns_cmd(ns, ["ip", "addr", "add", ip + "/24", "dev", dev]))
            sh(ns_cmd(ns, ["ip", "link", "set", dev, "mtu", str(MTU), "up"]))
            sh(ns_cmd(self.ns_r, ["ip", "addr", "add", rip + "/24", "dev", rdev]))
            sh(ns_cmd(self.ns_r, ["ip", "link", "set", rdev, "mtu", str(MTU), "up"]))
            sh(ns_cmd(ns, ["ip", "route", "add", "default", "via", rip]))
            static_neigh(ns, dev, ip, self.ns_r, rdev, rip)
        sh(ns_cmd(self.ns_r, ["sysctl", "-qw", "net.ipv4.ip_forward=1"]))


class EngineError(RuntimeError):
    pass


class Engine:
    """A running wanlab-engine with its control socket (protocol v1)."""

    def __init__(self, lab, extra_args=(), seed=1, binary=None, wrap=()):
        """``wrap``: a command the engine runs under (``taskset -c 0``: the CPUs it may use,
        which its partitions are pinned among)."""
        self.lab = lab
        self.path = f"/tmp/wlb-{lab.tag}-{len(lab.files)}.sock"
        if os.path.exists(self.path):
            os.unlink(self.path)
        lab.files.append(self.path)
        self.proc = lab.popen([*wrap, binary or ENGINE, "--socket", self.path, "--seed",
                               str(seed), *extra_args])
        deadline = time.time() + 10
        while True:             # the socket file appears just before the engine listens
            if self.proc.poll() is not None:
                raise EngineError(f"engine exited {self.proc.returncode}: "
                                  f"{self.proc.stderr.read().strip()}")
            if time.time() > deadline:
                raise EngineError("engine did not answer on its control socket within 10 s")
            if os.path.exists(self.path):
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    self.sock.connect(self.path)
                    break
                except ConnectionRefusedError:
                    self.sock.close()
            time.sleep(0.02)
        self.rfile = self.sock.makefile("r")
        self.next_id = 1

    @property
    def pid(self):
        return self.proc.pid

    def request(self, msg, timeout=60):
        msg = dict(msg)
        msg.setdefault("id", self.next_id)
        self.next_id += 1
        self.sock.settimeout(timeout)
        self.sock.sendall((json.dumps(msg) + "\n").encode())
        line = self.rfile.readline()
        if not line:
            raise EngineError(f"engine closed the control socket (exit {self.proc.poll()})")
        resp = json.loads(line)
        if not resp.get("ok"):
            raise EngineError(f"{msg.get('cmd')}: {resp.get('error', resp)}")
        return resp

    def stats(self, link):
        return self.request({"cmd": "stats", "target": link})["links"][link]

    def set(self, link, params, dir="both"):
        return self.request({"cmd": "set", "target": link, "dir": dir, "params": params})

    def cpu_ticks(self):
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime (fields 14, 15)

    def close(self):
        try:
            self.request({"cmd": "shutdown"}, timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def link_params(bandwidth_bps=0, delay_us=0, loss=0.0, queue=1000, in_bytes=False):
    return {
        "bandwidth_bps": int(bandwidth_bps),
        "delay_us": delay_us,
        "queue": {"kind": "droptail", "limit": int(queue), "in_bytes": in_bytes},
        "loss": {"kind": "bernoulli", "p": loss} if loss > 0 else {"kind": "none"},
    }


class EngineTopo(Topo):
    """Two namespaces joined by link ``l`` of a wanlab-engine."""
    name = "engine"

    def __init__(self, lab, engine_args=(), suffix="e", params=None, ipv6=False):
        """``ipv6``: the two ends are addressed fd77::1/64 and fd77::2/64 (and nothing else),
        so the measurements cross the link as IPv6 frames."""
        self.lab = lab
        self.v6 = ipv6
        self.engine = Engine(lab, engine_args)
        self.link = "l"
        ta, tb = f"wlb{lab.tag[-5:]}{suffix}a", f"wlb{lab.tag[-5:]}{suffix}b"
        p = params or link_params()
        self.engine.request({"cmd": "apply",
                             "ports": [{"port": "a", "tap": ta}, {"port": "b", "tap": tb}],
                             "links": [{"link": self.link, "a": "a", "b": "b", "ab": p, "ba": p}]})
        self.ns_a = lab.add_ns(suffix + "a")
        self.ns_b = lab.add_ns(suffix + "b")
        self.ip_a, self.ip_b = ("fd77::1", "fd77::2") if ipv6 else ("10.77.0.1", "10.77.0.2")
        for ns, dev, ip in ((self.ns_a, ta, self.ip_a), (self.ns_b, tb, self.ip_b)):
            sh(["ip", "link", "set", dev, "netns", ns])
            if ipv6:        # no router solicitations or DAD: nothing but the test crosses
                # (the lab's namespaces have IPv6 off: on for this interface only)
                for key in ("disable_ipv6", "router_solicitations", "dad_transmits"):
                    sh(ns_cmd(ns, ["sysctl", "-qw", f"net.ipv6.conf.{dev}.{key}=0"]))
                sh(ns_cmd(ns, ["ip", "addr", "add", ip + "/64", "dev", dev, "nodad"]))
            else:
                sh(ns_cmd(ns, ["ip", "addr", "add", ip + "/24", "dev", dev]))
            sh(ns_cmd(ns, ["ip", "link", "set", dev, "mtu", str(MTU), "up"]))
        static_neigh(self.ns_a, ta, self.ip_a, self.ns_b, tb, self.ip_b)

    def set(self, **kw):
        self.engine.set(self.link, link_params(**kw))

    def close(self):
        self.engine.close()


class RelayTopo(Topo):
    """Two namespaces joined by ``tap_relay``: the engine's TAP reads and writes with nothing
    between them, the ceiling of any forwarder built on TAPs (a capacity baseline).
    ``relay``: another relay's command (its TAP names are appended), the same way set up."""
    name = "relay"

    def __init__(self, lab, suffix="y", relay=(RELAY,)):
        ta, tb = f"wlb{lab.tag[-5:]}{suffix}a", f"wlb{lab.tag[-5:]}{suffix}b"
        self.proc = lab.popen([*relay, ta, tb])
        if self.proc.stdout.readline().strip() != "ready":
            self.proc.wait(timeout=5)
            raise RuntimeError(f"tap_relay: {self.proc.stderr.read().strip()}")
        self.ns_a = lab.add_ns(suffix + "a")
        self.ns_b = lab.add_ns(suffix + "b")
        self.ip_a, self.ip_b = "10.77.0.1", "10.77.0.2"
        for ns, dev, ip in ((self.ns_a, ta, self.ip_a), (self.ns_b, tb, self.ip_b)):
            sh(["ip", "link", "set", dev, "netns", ns])
            sh(ns_cmd(ns, ["ip", "addr", "add", ip + "/24", "dev", dev]))
            sh(ns_cmd(ns, ["ip", "link", "set", dev, "mtu", str(MTU), "up"]))
        static_neigh(self.ns_a, ta, self.ip_a, self.ns_b, tb, self.ip_b)

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def engine_help():
    """Engine --help text ('' if it cannot run)."""
    try:
        r = subprocess.run([ENGINE, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=5)
        return r.stdout
    except Exception:
        return ""
