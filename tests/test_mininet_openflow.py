"""OpenFlow Mininet scripts: when a network is OpenFlow, how it maps (pure), and real runs:
Open vSwitch on the userspace datapath in the switches' node, with ``ovs-testcontroller`` for
Mininet's ``Controller`` and, for a ``RemoteController``, a controller this test runs on the
host's loopback. Mininet's own OpenFlow examples run in tests/test_mininet_run.py."""

import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

from wanlab.errors import SpecError
from wanlab.mininet import openflow
from wanlab.mininet.build import MnIntf, MnLink, Shaping

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- when, and how it maps (pure) ----------------------------------------------------------

class _C:
    def __init__(self, name):
        self.name = name


def _ctl(cls_name, module):
    cls = type(cls_name, (_C,), {"__module__": module})
    return cls("c0")


def test_what_makes_a_network_openflow():
    ref = _ctl("Controller", "mininet.node")
    assert openflow.reason([ref], "net.pingAll()") is None
    assert openflow.reason([ref, _ctl("RemoteController", "mininet.node")], "") == \
        "RemoteController c0"
    assert openflow.reason([_ctl("POX", "__main__")], "") == "controller class POX"
    assert openflow.reason([_ctl("Ryu", "mininetlab")], "") == "controller class Ryu"
    assert openflow.reason([ref], "s1.cmd('ovs-vsctl show')") == "the script runs ovs-vsctl"
    assert openflow.reason([], "s1.dpctl('dump-flows')") == "the script runs dpctl"
    assert openflow.reason([], "# ovs-vsctlx") is None


def _link(a, ai, b, bi, sa=None, sb=None):
    return MnLink(MnIntf(a, ai, sa or Shaping()), MnIntf(b, bi, sb or Shaping()))


def test_switch_ports_are_engine_links_into_the_switches_node():
    links = [_link("h1", "h1-eth0", "s1", "s1-eth1", sa=Shaping(delay_s=0.005)),
             _link("h2", "h2-eth0", "s1", "s1-eth9"),
             _link("s1", "s1-eth10", "s2", "s2-eth1", sa=Shaping(delay_s=0.02),
                   sb=Shaping(bandwidth_bps=10**6)),
             _link("h3", "h3-eth0", "s2", "s2-eth2", sb=Shaping(bandwidth_bps=10**7))]
    numbers = {("s1", "s1-eth1"): 1, ("s1", "s1-eth9"): 9, ("s1", "s1-eth10"): 10,
               ("s2", "s2-eth1"): 1, ("s2", "s2-eth2"): 2}
    m, lay = openflow.build("x", {h: {} for h in ("h1", "h2", "h3")}, ["s1", "s2"], links,
                            numbers)
    assert lay.node == "openflow"
    assert {n.name for n in m.experiment.nodes} == {"h1", "h2", "h3", "openflow"}
    assert not m.experiment.lans
    assert [(p.name, p.number) for p in lay.ports["s1"]] == \
        [("s1-eth1", 1), ("s1-eth9", 9), ("s1-eth10", 10)]
    assert [(p.name, p.number) for p in lay.ports["s2"]] == [("s2-eth1", 1), ("s2-eth2", 2)]
    w = m.where[("h1", "h1-eth0")]
    assert (w.kind, w.ifname, w.out_dir) == ("link", "eth0", "ab")
    assert m.where[("s1", "s1-eth1")].ifname == "s1-eth1"
    assert m.where[("s1", "s1-eth1")].out_dir == "ba"
    by = {lk.name: lk for lk in m.experiment.links}
    h1 = by[w.target]
    assert (h1.a, h1.b) == ("h1", "openflow")
    assert h1.ab.delay_s == 0.005 and h1.ba.delay_s == 0
    h3 = by[m.where[("h3", "h3-eth0")].target]
    assert h3.ba.bandwidth_bps == 10**7 and h3.ab.bandwidth_bps == 0
    # a link between two switches: an engine link from the node to itself, its ends the
    # two switch interfaces, each direction shaped by the interface that sends into it
    w1, w2 = m.where[("s1", "s1-eth10")], m.where[("s2", "s2-eth1")]
    assert (w1.kind, w1.ifname, w1.out_dir, w2.ifname, w2.out_dir) == \
        ("link", "s1-eth10", "ab", "s2-eth1", "ba")
    trunk = by[w1.target]
    assert w2.target == trunk.name
    assert (trunk.a, trunk.b, trunk.ifnames) == ("openflow", "openflow",
                                                 ("s1-eth10", "s2-eth1"))
    assert (trunk.ab.delay_s, trunk.ab.bandwidth_bps) == (0.02, 0)
    assert (trunk.ba.delay_s, trunk.ba.bandwidth_bps) == (0, 10**6)


def test_loops_of_openflow_switches_are_refused():
    ring = [_link("s1", "s1-eth1", "s2", "s2-eth1"), _link("s2", "s2-eth2", "s3", "s3-eth1"),
            _link("s3", "s3-eth2", "s1", "s1-eth2")]
    nums = {(lk.a.node, lk.a.name): 1 for lk in ring} | {(lk.b.node, lk.b.name): 1
                                                          for lk in ring}
    with pytest.raises(SpecError, match=r"s3-eth2<->s1-eth2 closes a loop"):
        openflow.build("x", {}, ["s1", "s2", "s3"], ring, nums)


# -- real runs -----------------------------------------------------------------------------

needs = pytest.mark.skipif(
    os.geteuid() != 0 or not all(shutil.which(x) for x in (
        "ovs-vswitchd", "ovsdb-server", "ovs-vsctl", "ovs-testcontroller")),
    reason="needs root and Open vSwitch (openvswitch-switch, openvswitch-testcontroller)")


def run(script, home, *args, timeout=180):
    env = {**os.environ, "WANLAB_HOME": str(home), "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, "-m", "wanlab.mininet.main", str(script), *args],
                          capture_output=True, text=True, env=env, timeout=timeout)


def left_in(home):
    env = {**os.environ, "WANLAB_HOME": str(home), "PYTHONPATH": ROOT}
    out = subprocess.run([sys.executable, "-m", "wanlab.cli", "list"], capture_output=True,
                         text=True, env=env).stdout
    return [ln.split()[0] for ln in out.splitlines()[1:] if ln.strip()]


def gone(procs_line):
    """True when none of the processes printed as ``pid:start`` runs any more."""
    from wanlab.backends.emulate import procs
    pairs = [tuple(int(x) for x in p.split(":")) for p in procs_line.split()]
    assert pairs
    return not any(procs.alive(pid, st) for pid, st in pairs)


SCRIPT = r'''
import os, re, sys
from mininet.link import TCLink
from mininet.net import Mininet
from mininet.node import Controller, OVSSwitch, RemoteController
from mininet.topo import Topo
from mininet.log import setLogLevel

setLogLevel("info")
remote = RemoteController("c1", ip="127.0.0.1", port=int(sys.argv[1]))

class Two(Topo):
    """LinearTopo(2), its switch-to-switch link shaped (s2-eth2 <-> s1-eth2)."""
    def build(self):
        h1, s1, h2, s2 = (self.addHost("h1"), self.addSwitch("s1"), self.addHost("h2"),
                          self.addSwitch("s2"))
        self.addLink(h1, s1)
        self.addLink(h2, s2)
        self.addLink(s2, s1, cls=TCLink, delay="20ms", bw=10)

def rtt(h1, h2):
    """The lowest RTT of a few pings (ms), or the number of replies when none came."""
    out = h1.cmd("LANG=C ping -c3 -i0.2 -W2 %s" % h2.IP())
    m = re.search(r"rtt min/avg/max/mdev = ([\d.]+)", out)
    return float(m.group(1)) if m else out.count("bytes from")

class Split(OVSSwitch):
    """s1 on Mininet's Controller (c0), s2 on the test's controller on the host (c1)."""
    def start(self, controllers):
        OVSSwitch.start(self, controllers if self.name == "s1" else [remote])

net = Mininet(topo=Two(), switch=Split, controller=Controller, waitConnected=True)
net.start()
s1, s2, h1, h2 = net.get("s1", "s2", "h1", "h2")
procs = net._fabric.ovs.procs
print("PROCS", " ".join(f"{e['pid']}:{e['started']}" for e in procs))
print("WHAT", ",".join(e["what"] for e in procs))
print("MODE", oct(os.stat(net._fabric.ovs.dir).st_mode & 0o777))
print("CONNECTED", s1.connected(), s2.connected())
print("LOSS", net.pingAll())
print("IPERF", net.iperf(seconds=1))
print("FLOWS1", s1.cmd("ovs-ofctl dump-flows s1").replace("\n", " | "))
print("FLOWS2", s2.dpctl("dump-flows").replace("\n", " | "))
print("OFPORT", s1.cmd("ovs-vsctl get Interface s1-eth2 ofport").strip())
print("PORTADDR", s1.cmd("ip -o addr show dev s1-eth1").strip() or "none")
print("TRUNKPORTS", s1.cmd("ovs-vsctl list-ports s1").split(), s2.cmd(
    "ovs-vsctl get Interface s2-eth2 ofport").strip())
# the shaped switch-to-switch link: 20 ms each way, then what s1 sends 100 ms
net.exp.tevc("s2-s1", "trace", "start", wait=True)
print("RTT", rtt(h1, h2))
net.exp.tevc("s2-s1", "trace", "stop", wait=True)
stats = net.exp.stats("s2-s1")["links"]["s2-s1"]
print("COUNTED", stats["ab"]["in_pkts"], stats["ba"]["in_pkts"])
traces = os.path.join(os.environ["WANLAB_HOME"], "exps", net.exp.name, "traces")
print("CAPTURED", sorted((f, os.path.getsize(os.path.join(traces, f)) > 24 + 3 * 98)
                         for f in os.listdir(traces)))
s1.intf("s1-eth2").config(delay="100ms")
print("\nRTT2", rtt(h1, h2))      # (after config's own "(100ms delay) ")
net.configLinkStatus("s1", "s2", "down")
print("DOWN", h1.cmd("ping -c2 -i0.3 -W1 %s" % h2.IP()).count("bytes from"))
net.configLinkStatus("s2", "s1", "up")
print("UP", rtt(h1, h2))
sys.exit(3)      # no net.stop(): what the script leaves is terminated at its end
'''


@pytest.fixture(scope="module")
def openflow_run(tmp_path_factory):
    """One run: s1 on ovs-testcontroller (Mininet's Controller) in the switches' node, s2 on
    a RemoteController the test runs on the host's loopback."""
    d = tmp_path_factory.mktemp("of")
    (d / "of.py").write_text(SCRIPT)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    (d / "ctl").mkdir()
    ctl = subprocess.Popen(["ovs-testcontroller", f"ptcp:{port}:127.0.0.1"],
                           env={**os.environ, "OVS_RUNDIR": str(d / "ctl")},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = run(d / "of.py", d / "home", str(port))
    finally:
        ctl.terminate()
        ctl.wait(timeout=10)
    return r, d / "home"


def value(r, key):
    m = re.search(rf"^{key} (.*)$", r.stdout, re.M)
    assert m, r.stdout[-3000:] + r.stderr[-3000:]
    return m.group(1)


@needs
def test_both_controllers_connect_and_the_switches_forward_ping_and_tcp(openflow_run):
    r, _ = openflow_run
    assert r.returncode == 3, r.stdout[-2000:] + r.stderr[-2000:]
    assert "OpenFlow switches (RemoteController c1)" in r.stdout
    assert value(r, "CONNECTED") == "True True"
    assert value(r, "LOSS") == "0.0"
    rates = re.findall(r"([\d.]+) ([KMG])bits/sec", value(r, "IPERF"))
    assert len(rates) == 2 and all(float(x) > 0 for x, _ in rates), r.stdout


@needs
def test_each_controller_installed_flows_and_ports_have_mininet_s_numbers(openflow_run):
    r, _ = openflow_run
    # the exact-match flows the controllers installed, the iperf connection's among them,
    # carrying its packets (s1: h1 on port 1, s2 on port 2; s2: h2 on port 1, s1 on port 2)
    for key, inp, out in (("FLOWS1", 1, 2), ("FLOWS2", 2, 1)):
        flows = value(r, key)
        m = re.search(rf"n_packets=(\d+),[^|]*tcp,in_port={inp},[^|]*tp_dst=5001 "
                      rf"actions=output:{out}", flows)
        assert m and int(m.group(1)) > 100, flows
    assert value(r, "OFPORT") == "2"
    # a switch port has no address of its own node's
    assert value(r, "PORTADDR") == "none"


@needs
def test_a_link_between_openflow_switches_is_shaped_by_the_engine(openflow_run):
    r, _ = openflow_run
    # its ends are the two bridges' ports 2, named as Mininet names them
    assert value(r, "TRUNKPORTS") == "['s1-eth1', 's1-eth2'] 2"
    # TCLink(delay='20ms') each way: at least 40 ms round trip
    assert 35 < float(value(r, "RTT")), r.stdout[-2000:]
    # counted and captured as any link (three pings: 98-byte frames each way)
    assert all(int(x) > 0 for x in value(r, "COUNTED").split())
    assert value(r, "CAPTURED") == "[('s2-s1-ab.pcap', True), ('s2-s1-ba.pcap', True)]"
    # config(delay='100ms') on s1-eth2: what s1 sends into the link, 120 ms round trip
    assert 110 < float(value(r, "RTT2")), r.stdout[-2000:]
    assert value(r, "DOWN") == "0"
    assert float(value(r, "UP")) > 110


@needs
def test_ovs_processes_are_recorded_private_and_stopped(openflow_run):
    r, home = openflow_run
    assert value(r, "WHAT") == "ovsdb-server,ovs-vswitchd,controller c0"
    assert value(r, "MODE") == "0o700"
    assert gone(value(r, "PROCS"))
    assert left_in(home) == []


# free-standing nodes and links (Mininet's low-level API, as its scratchnet example uses):
# their own network, built at the first command; the root-namespace nodes' shells are in
# the switches' node, with Mininet's `controller` program and `ovs-vsctl add-br` mapped
FREE = r'''
from mininet.link import Link
from mininet.node import Node
from mininet.util import quietRun

ctl, sw = Node("c0", inNamespace=False), Node("s0", inNamespace=False)
a, b = Node("h0"), Node("h1")
Link(a, sw)
Link(b, sw)
a.setIP("192.168.9.1/24")
b.setIP("192.168.9.2/24")
ctl.cmd("controller ptcp: &")
sw.cmd("ovs-vsctl add-br br9")
for i in sw.intfs.values():
    sw.cmd("ovs-vsctl add-port br9 %s" % i)
sw.cmd("ovs-vsctl set-controller br9 tcp:127.0.0.1:6633")
print("DPTYPE", sw.cmd("ovs-vsctl get bridge br9 datapath_type").strip())
print("LISTEN", ctl.cmd("ss -Hltn 'sport = :6633' | wc -l").strip())
print("PING", a.cmd("LANG=C ping -c3 -i0.3 -W5 %s" % b.IP()).count("bytes from"))
print("HOSTVIEW", quietRun("ovs-vsctl list-br").split())
print("POPEN", sw.pexec("ovs-vsctl", "list-ports", "br9")[0].split())
ctl.cmd("kill %controller; wait")
print("KILLED", ctl.cmd("ss -Hltn 'sport = :6633' | wc -l").strip())
'''


@needs
def test_free_standing_nodes_and_links_make_an_openflow_network(tmp_path):
    (tmp_path / "free.py").write_text(FREE)
    r = run(tmp_path / "free.py", tmp_path / "home")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert value(r, "DPTYPE") == "netdev"
    assert value(r, "LISTEN") == "1"         # ovs-testcontroller on the old port, 6633
    assert int(value(r, "PING")) >= 2, r.stdout
    assert value(r, "HOSTVIEW") == "['br9']"
    assert value(r, "POPEN") == "['s0-eth0', 's0-eth1']"
    assert value(r, "KILLED") == "0"
    assert left_in(tmp_path / "home") == []
