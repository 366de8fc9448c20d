"""Mininet scripts and ``wanlab mn`` on real namespaces: one script of ours exercising the API
(persistent shells, addresses, run-time shaping, link state, popen), the mn command, and
Mininet's own examples from Debian's ``mininet`` package, run unchanged.

The examples are fetched at test time (``apt-get download mininet``, extracted with
``dpkg-deb -x`` into a temporary folder): Mininet is never installed, nor its files kept in
this repository.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")


def run(args, home, stdin="", timeout=180, cwd=None):
    env = {**os.environ, "WANLAB_HOME": str(home), "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, "-m", "wanlab.mininet.main", *args], input=stdin,
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)


def left_in(home):
    """Experiments the store still has (each run must terminate its own)."""
    env = {**os.environ, "WANLAB_HOME": str(home), "PYTHONPATH": ROOT}
    out = subprocess.run([sys.executable, "-m", "wanlab.cli", "list"], capture_output=True,
                         text=True, env=env).stdout
    return [ln.split()[0] for ln in out.splitlines()[1:] if ln.strip()]


SCRIPT = r'''
import re
import subprocess
import sys
import time
from mininet.net import Mininet
from mininet.topo import Topo
from mininet.link import TCLink
from mininet.node import LinuxBridge

class T(Topo):
    def build(self):
        s1, s2 = self.addSwitch("s1"), self.addSwitch("s2")
        h1, h2, h3 = self.addHost("h1"), self.addHost("h2"), self.addHost("h3")
        self.addLink(h1, s1, cls=TCLink, delay="5ms")
        self.addLink(h2, s1)
        self.addLink(s1, s2, cls=TCLink, delay="10ms", bw=10)
        self.addLink(h3, s2)
        self.addLink(self.addHost("h4"), s2)

def rtt(a, b):
    out = a.cmd("ping -c3 -i0.2", b.IP())
    m = re.search(r"= ([\d.]+)/", out)
    return float(m.group(1)) if m else -1.0

net = Mininet(topo=T(), autoSetMacs=True, autoStaticArp=True)
net.start()
h1, h2, h3 = net.get("h1", "h2", "h3")
h1.cmd("cd /proc; X=42")
print("SHELL", h1.cmd("echo $PWD $X").strip())
print("ADDR", h1.IP(), h3.IP(), h1.MAC(), h1.intfNames(), net["s1"].intfNames())
print("LINK", h1.cmd("ip -o addr show dev h1-eth0").split()[3])
print("RTT13", rtt(h1, h3))
h4 = net.get("h4")
# two UDP flows of 15 Mbit/s each cross the 10 Mbit/s trunk s1 -> s2: they share it
srv = [h.popen(["iperf", "-u", "-s"]) for h in (h3, h4)]
time.sleep(0.5)
cli = [a.popen(["iperf", "-u", "-f", "m", "-c", b.IP(), "-b", "15M", "-t", "2"])
       for a, b in ((h1, h3), (h2, h4))]
outs = [p.communicate()[0].decode() for p in cli]
for p in srv:
    p.terminate()
    p.wait()
print("SHARED", *[re.findall(r"([\d.]+) Mbits/sec", o.split("Server Report")[-1])[0]
                  for o in outs])
# run-time changes on the trunk: its s1 side now sends with 40 ms; then down and up
net["s1"].connectionsTo(net["s2"])[0][0].config(delay="40ms")
print("RTT13T", rtt(h1, h3))
net.configLinkStatus("s1", "s2", "down")
print("TDOWN", net.ping([h1, h3], timeout=1), net.ping([h1, h2], timeout=1))
net.configLinkStatus("s2", "s1", "up")
print("TUP", net.ping([h1, h3]))
show = subprocess.run([sys.executable, "-m", "wanlab.cli", "show", net.exp.name],
                      capture_output=True, text=True).stdout
print("SHOW", " | ".join(ln.strip() for ln in show.splitlines()
                         if ln.strip().startswith(("switches:", "trunk "))))
h1.intf().config(delay="25ms")
print("RTT12", rtt(h1, h2))
net.configLinkStatus("h2", "s1", "down")
print("DOWN", net.ping([h1, h2], timeout=1))
net.configLinkStatus("h2", "s1", "up")
print("UP", net.ping([h1, h2]))
print("PEXEC", h2.pexec("sh", "-c", "echo out; echo err >&2; exit 3"))
p = h3.popen("ip -o link show h3-eth0")
print("POPEN", p.communicate()[0].decode().split()[1])
h1.sendCmd("sleep 0.3; echo later")
print("SEND", h1.waitOutput().strip())
print("BG", h2.cmd("sleep 30 & echo $!").split()[-1])
net.stop()

class Ring(Topo):
    def build(self):
        s = [self.addSwitch(f"s{i}", stp=True) for i in (1, 2, 3)]
        for i in range(3):
            self.addLink(s[i], s[(i + 1) % 3])
            self.addLink(self.addHost(f"h{i + 1}"), s[i])

def tree(net):
    show = subprocess.run([sys.executable, "-m", "wanlab.cli", "show", net.exp.name],
                          capture_output=True, text=True).stdout
    return " | ".join(ln.strip() for ln in show.splitlines()
                      if "spanning tree" in ln or ln.strip().startswith("down:"))

ring = Mininet(topo=Ring(), switch=LinuxBridge)
ring.start()
print("RING", ring.pingAll(timeout=1))
print("BLOCKED", tree(ring))
# s1-s2 down: the tree moves to the link it blocked, the switches learn the hosts again
ring.configLinkStatus("s1", "s2", "down")
print("RINGDOWN", ring.pingAll(timeout=1))
print("BLOCKEDDOWN", tree(ring))
ring.configLinkStatus("s2", "s1", "up")
print("RINGUP", ring.pingAll(timeout=1))
print("BLOCKEDUP", tree(ring))
ring.stop()
'''


@pytest.fixture(scope="module")
def own_script(tmp_path_factory):
    d = tmp_path_factory.mktemp("mnscript")
    (d / "script.py").write_text(SCRIPT)
    r = run([str(d / "script.py")], d / "home")
    return r, d / "home"


def value(r, key):
    m = re.search(rf"^{key} (.*)$", r.stdout, re.M)
    assert m, f"no {key} in:\n{r.stdout}\n{r.stderr}"
    return m.group(1)


def test_a_node_s_shell_keeps_its_folder_and_variables(own_script):
    r, _ = own_script
    assert r.returncode == 0, r.stderr
    assert value(r, "SHELL") == "/proc 42"


def test_hosts_have_mininet_s_names_addresses_and_macs(own_script):
    r, _ = own_script
    assert value(r, "ADDR") == ("10.0.0.1 10.0.0.3 00:00:00:00:00:01 ['h1-eth0'] "
                                "['s1-eth1', 's1-eth2', 's1-eth3']")
    assert value(r, "LINK") == "10.0.0.1/8"


def test_link_delays_add_up_across_a_tree_of_switches(own_script):
    # h1 -> s1 5 ms, s1 -> s2 10 ms, and back: 30 ms (the engine adds nothing measurable)
    assert 30 <= float(value(own_script[0], "RTT13")) < 40


def test_flows_crossing_a_shaped_trunk_share_it(own_script):
    # 2 x 15 Mbit/s offered into one 10 Mbit/s trunk: about 10 in all (per-pair channels
    # would give each flow its own 10, about 20 in all)
    a, b = (float(x) for x in value(own_script[0], "SHARED").split())
    assert a > 1 and b > 1 and a + b < 13.5, (a, b)


def test_trunk_config_and_status_change_at_run_time(own_script):
    r, _ = own_script
    # s1 -> s2 now 40 ms (bandwidth cleared, as Mininet's config), s2 -> s1 still 10 ms
    assert 60 <= float(value(r, "RTT13T")) < 70
    # the trunk down cuts h1 from h3 only; up again
    assert value(r, "TDOWN") == "100.0 0.0"
    assert float(value(r, "TUP")) == 0.0
    assert value(r, "SHOW") == ("switches: s1 (h1 h2)  s2 (h3 h4) | trunk s1 <-> s2  "
                                "[s1->s2: 10Mb, 10 ms, loss 0]  [s2->s1: 10Mb, 10 ms, loss 0]")


def test_a_ring_of_stp_switches_forwards_over_its_spanning_tree(own_script):
    r, _ = own_script
    # no broadcast storm: every ping answers; s2-s3 is blocked at s3 (s1 is the root)
    assert float(value(r, "RING")) == 0.0
    assert value(r, "BLOCKED") == "blocked by the spanning tree: s3-eth1 (to s2-eth2)"


def test_a_ring_of_stp_switches_moves_its_tree_when_a_link_goes_down_and_up(own_script):
    r, _ = own_script
    # s1-s2 down: h1 <-> h2 over s1-s3-s2, through the port that was blocked; no loop left
    assert float(value(r, "RINGDOWN")) == 0.0
    assert value(r, "BLOCKEDDOWN") == "down: s1-eth1 <-> s2-eth1"
    # up again: 802.1D's first tree, s2-s3 blocked at s3 again
    assert float(value(r, "RINGUP")) == 0.0
    assert value(r, "BLOCKEDUP") == "blocked by the spanning tree: s3-eth1 (to s2-eth2)"


def test_intf_config_reshapes_at_run_time(own_script):
    # h1's interface now sends with 25 ms; s1's side still 5 ms
    assert 30 <= float(value(own_script[0], "RTT12")) < 40


def test_link_down_and_up(own_script):
    r, _ = own_script
    assert float(value(r, "DOWN")) == 100.0
    assert float(value(r, "UP")) == 0.0


def test_pexec_popen_and_send_cmd(own_script):
    r, _ = own_script
    assert value(r, "PEXEC") == "('out\\n', 'err\\n', 3)"
    assert value(r, "POPEN") == "h3-eth0:"
    assert value(r, "SEND") == "later"


def test_stop_leaves_nothing(own_script):
    r, home = own_script
    assert left_in(home) == []
    # what a node's shell started in the background went with the node's cgroup
    pid = int(value(r, "BG"))
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            assert f.read() != b"sleep\x0030\x00"
    except FileNotFoundError:
        pass


def test_mn_builds_a_tree_and_ends_at_the_mininet_prompt(tmp_path):
    cli = ("pingall\nh1 ping -c1 h2\nlink s2 h1 down\nh1 ping -c1 -W1 h2\n"
           "link s2 h1 up\nh1 ping -c1 h2\nnet\nexit\n")
    r = run(["mn", "--topo", "tree,depth=2,fanout=2", "--link", "tc,delay=10ms", "--mac"],
            tmp_path / "home", stdin=cli)
    assert r.returncode == 0, r.stderr
    assert "*** Results: 0% dropped (12/12 received)" in r.stdout
    assert "mininet> " in r.stdout
    outs = re.findall(r"(\d+) received", r.stdout)
    assert outs[-3:] == ["1", "0", "1"], r.stdout
    # h1 -> s2 -> h2 and back: 4 x 10 ms
    assert re.search(r"icmp_seq=1 ttl=64 time=(4\d|[5-9]\d)\.", r.stdout), r.stdout
    assert "s2 s2-eth1:h1-eth0 s2-eth2:h2-eth0 s2-eth3:s1-eth1" in r.stdout
    assert left_in(tmp_path / "home") == []


# -- Mininet's examples, unchanged ---------------------------------------------------------

@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        pytest.skip("needs apt-get and dpkg-deb")
    d = tmp_path_factory.mktemp("mininet-deb")
    os.chmod(d, 0o755)      # apt's download user may write here
    r = subprocess.run(["apt-get", "download", "mininet"], cwd=d, capture_output=True,
                       text=True, timeout=300)
    debs = list(d.glob("mininet_*.deb"))
    if r.returncode != 0 or not debs:
        pytest.skip(f"apt-get download mininet failed: {r.stderr.strip()[-200:]}")
    subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(d / "root")], check=True)
    ex = d / "root/usr/share/doc/mininet/examples"
    assert (ex / "simpleperf.py").is_file()
    return ex


# name: (arguments, CLI input, what its output must show)
RUNS = {
    "simpleperf": (["testmode"], "", [r"h1 h1-eth0:s1-eth1",
                                     r"\*\*\* Results: \['10M', '(9\.\d+|10\.\d) Mbits/sec'"]),
    "natnet": ([], "h1 ping -c1 h0\nh1 ping -c1 -W1 192.168.2.100\nexit\n",
               [r"from 10\.0\.0\.1: icmp_seq=1 ttl=63",
                r"From 192\.168\.1\.1 icmp_seq=1 Destination Net Unreachable"]),
    # two links from each host into s1: four ports of one switch
    "multilink": ([], "net\nh2 ping -c1 h1\nexit\n",
                  [r"s1 s1-eth1:h1-eth0 s1-eth2:h2-eth0 s1-eth3:h1-eth1 s1-eth4:h2-eth1",
                   r"1 packets transmitted, 1 received"]),
    "linuxrouter": ([], "h1 ping -c1 h3\nexit\n",
                    [r"192\.168\.1\.0 .*r0-eth1", r"from 10\.0\.0\.100: icmp_seq=1 ttl=63"]),
    # OpenFlow: Open vSwitch in the switches' node (tests/test_mininet_openflow.py)
    "numberedports": ([], "", [r"(?s)(Validated\..*){5}", r"0% dropped \(20/20 received\)"]),
    "controllers": ([], "pingall\nexit\n", [r"s1 s2 s3 \n", r"0% dropped \(12/12 received\)"]),
}
REFUSED = {
    "scratchnetuser": r"scratchnetuser\.py:56: cmd\(ofdatapath \.\.\.\): Mininet's reference "
                      r"user-space switch \(ofdatapath, ofprotocol\) is not packaged in Debian",
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_mininet_example_runs(examples, tmp_path, name):
    args, stdin, want = RUNS[name]
    r = run([f"{name}.py", *args], tmp_path / "home", stdin=stdin, cwd=examples)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    for w in want:
        assert re.search(w, r.stdout), f"{w!r} not in:\n{r.stdout}"


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_mininet_example_refused_with_one_line(examples, tmp_path, name):
    r = run([f"{name}.py"], tmp_path / "home", stdin="exit\n", cwd=examples)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and re.search(REFUSED[name], err[0]), r.stderr
    assert left_in(tmp_path / "home") == []


def test_wanlab_mininet_runs_a_module_with_wanlab_s_mininet_first(tmp_path):
    (tmp_path / "mnmod.py").write_text(
        "import sys, mininet.net\nprint('FROM', mininet.net.__file__, sys.argv[1:])\n")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{tmp_path}"}
    r = subprocess.run([sys.executable, "-m", "wanlab.cli", "--home", str(tmp_path / "h"),
                        "mininet", "-m", "mnmod", "a1", "--x"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"FROM {ROOT}/wanlab/mininet/compat/mininet/net.py "
                               "['a1', '--x']")
