"""The edge: egress through a masquerading gateway, ingress port forwards (docs/edge.md).

The live tests build a stand-in "outside" namespace (198.51.100.1) joined by a veth to the
experiment's uplink; no test routes anything to this machine's real network.
"""

import json
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import needs_root

from wanlab.backends.emulate import egress
from wanlab.errors import SpecError, WanlabError
from wanlab.frontends import ns
from wanlab.frontends.builder import ExperimentBuilder
from wanlab.frontends.yaml_spec import loads
from wanlab.model import ir
from wanlab.plan.plan import make_plan

SPEC = """\
name: eg
nodes:
  - {name: a, egress: true}
  - b
  - web
links:
  - {nodes: [a, b]}
  - {nodes: [b, web]}
forwards: [{node: web, port: 80, listen: 8080}]
edge: {delay: 20ms, uplink: {interface: IFACE, address: 198.51.100.2/24, via: 198.51.100.1}}
"""


def spec(iface="vout0"):
    return SPEC.replace("IFACE", iface)


def test_yaml_egress_and_forwards_become_a_gateway_on_a_shaped_lan():
    exp = loads(spec(), file="e.yaml")
    assert exp.edge is not None and exp.edge.gateway == "edge"
    assert [n.name for n in exp.nodes] == ["a", "b", "web", "edge"]
    lan = next(l for l in exp.lans if l.name == "edge-lan")
    assert [m.node for m in lan.members] == ["a", "web", "edge"]
    assert lan.delay_s == pytest.approx(0.02)
    assert lan.members[0].to_lan.delay_s == pytest.approx(0.01)     # each half D/2
    assert exp.edge.forwards == (ir.Forward("web", 80, "tcp", 8080, exp.edge.forwards[0].source),)
    # the IR's JSON form round-trips
    assert ir.Experiment.from_json(json.loads(exp.dumps())) == exp
    # no egress, no forward: no edge at all
    assert loads("nodes: [a, b]\nlinks: [{nodes: [a, b]}]\n").edge is None


def test_egress_node_routes_out_through_the_gateway_and_the_edge_lan_is_no_transit():
    b = ExperimentBuilder("t")
    b.ipv6(True)                 # dual stack: the edge carries IPv4 only (docs/edge.md)
    for n in ("a", "b", "c"):
        b.node(n, egress=n != "b")
    b.link("a", "b")
    b.link("b", "c")
    plan = make_plan(b.build(), "00aa")
    gw_ip = next(i.ip for i in plan.nodes["edge"].interfaces)
    routes = {r.dst: r.via for r in plan.nodes["a"].routes if not r.v6}
    assert routes["default"] == gw_ip
    # c's subnet goes through b, not across the edge LAN (a and c are both on it)
    b_ip = next(i.ip for i in plan.nodes["b"].interfaces if i.network == "link0")
    c_net = str(plan.subnets["link1"])
    assert routes[c_net] == b_ip
    assert plan.nodes["edge"].routes == []
    # b has no egress: its routes never name the gateway
    assert gw_ip not in {r.via for r in plan.nodes["b"].routes}
    # IPv6: the edge LAN is addressed like every LAN, but no node routes through it (no
    # NAT66, no routed prefix): a reaches c's /64 through b (the one way it has)
    gw_ip6 = next(i.ip6 for i in plan.nodes["edge"].interfaces)
    assert gw_ip6 and gw_ip6 not in {r.via for n in plan.nodes.values() for r in n.routes}
    six = {r.dst: r.via for r in plan.nodes["a"].routes if r.v6}
    b_ip6 = next(i.ip6 for i in plan.nodes["b"].interfaces if i.network == "link0")
    assert six.get(str(plan.subnets6["link1"]), six.get("default")) == b_ip6, six


@pytest.mark.parametrize("text, field, words", [
    ("nodes: [{name: a, egress: maybe}]\n", "nodes[0].egress", "boolean"),
    ("nodes: [a]\nforwards: [{node: ghost, port: 80}]\n", "forwards[0].node", "not a node"),
    ("nodes: [a]\nforwards: [{node: a, port: 70000}]\n", "forwards[0].port", "port number"),
    ("nodes: [a]\nforwards: [{node: a, port: 80, proto: sctp}]\n", "forwards[0].proto", "sctp"),
    ("nodes: [a]\nforwards: [{node: a, port: 80, listen: 0}]\n", "forwards[0].listen",
     "port number"),
    ("nodes: [a, b]\nforwards: [{node: a, port: 80}, {node: b, port: 81, listen: 80}]\n",
     "forwards[1].listen", "already forwarded"),
    ("nodes: [{name: s, kind: simulated, egress: true}]\n", "nodes.s.egress", "emulated"),
    ("nodes: [{name: a, egress: true}, edge]\n", "edge.gateway", "already the name"),
    ("nodes: [{name: a, egress: true}]\nedge: {uplink: {interface: x, address: 1.2.3.4, "
     "via: 1.2.3.1}}\n", "edge.uplink.address", "prefix length"),
    ("nodes: [{name: a, egress: true}]\nedge: {uplink: {interface: x, address: 1.2.3.4/24, "
     "via: 9.9.9.9}}\n", "edge.uplink.via", "not another address"),
    ("nodes: [{name: a, egress: true}]\nedge: {dealy: 1ms}\n", "edge.dealy", "unknown key"),
    ("nodes: [{name: a, egress: true}]\nrouting: ospf\n", "edge", "static or manual"),
    ("ipv6: only\nnodes: [{name: a, egress: true}]\n", "edge", "not with ipv6 only"),
])
def test_bad_edge_input_is_an_error_naming_the_file_line_and_field(text, field, words):
    with pytest.raises(SpecError) as e:
        loads(text, file="e.yaml")
    assert e.value.file == "e.yaml" and e.value.line, str(e.value)
    assert e.value.field == field, str(e.value)
    assert words in str(e.value)


def test_ns_extensions_mean_the_same_as_yaml(tmp_path):
    script = tmp_path / "e.tcl"
    script.write_text(textwrap.dedent("""\
        set ns [new Simulator]
        source tb_compat.tcl
        set a [$ns node]
        set b [$ns node]
        set web [$ns node]
        set link0 [$ns duplex-link $a $b 10Mb 0ms DropTail]
        set link1 [$ns duplex-link $b $web 10Mb 0ms DropTail]
        tb-set-node-egress $a 1
        tb-set-node-forward $web 80 tcp 8080
        tb-set-edge-params 20ms
        tb-set-edge-uplink vout0 198.51.100.2/24 198.51.100.1
        $ns rtproto Static
        $ns run
        """))
    a, b = ns.parse(script), loads(spec(), file="e.yaml")
    assert a.edge is not None and b.edge is not None
    strip = ir.Source()
    assert [ir.Forward(f.node, f.port, f.proto, f.listen, strip) for f in a.edge.forwards] == \
        [ir.Forward(f.node, f.port, f.proto, f.listen, strip) for f in b.edge.forwards]
    assert (a.edge.interface, a.edge.address, a.edge.via) == \
        (b.edge.interface, b.edge.address, b.edge.via)
    assert [n.egress for n in a.nodes] == [n.egress for n in b.nodes]
    la, lb = (next(l for l in x.lans if l.name == "edge-lan") for x in (a, b))
    assert la.members == lb.members and la.delay_s == lb.delay_s
    script.write_text(script.read_text().replace("tcp 8080", "tcp 99999"))
    with pytest.raises(SpecError) as e:
        ns.parse(script)
    assert e.value.line == 9 and "tb-set-node-forward" in str(e.value)


def test_the_gateway_ruleset_masquerades_only_egress_and_forwards_exactly():
    exp = loads(spec(), file="e.yaml")
    text = egress.ruleset("00aa", exp.edge, "vout0", "eth0", ["10.1.2.1"],
                          {"web": "10.1.2.2", "a": "10.1.2.1"})
    assert text.startswith("table ip wanlab-00aa {")
    assert 'iifname "vout0" tcp dport 8080 dnat to 10.1.2.2:80' in text
    assert 'oifname "vout0" ip saddr { 10.1.2.1 } masquerade' in text
    assert "policy drop;" in text
    # no egress node: no masquerade out, nothing forwarded out
    none = egress.ruleset("00aa", exp.edge, "vout0", "eth0", [], {"web": "10.1.2.2"})
    assert 'oifname "vout0"' not in none
    host, gw = egress.host_pair("ffff")
    assert str(host) == "100.67.255.253/30" and str(gw) == "100.67.255.254/30"


# -- live ----------------------------------------------------------------------------------

def ip(*args, check=True):
    p = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {p.stderr}")
    return p.stdout


@pytest.fixture
def outside():
    """The outside world: namespace O holding 198.51.100.1, and a veth whose host end
    (the experiment's uplink interface) leads there."""
    tag = f"{os.getpid() % 100000}"
    o, end = f"wltO{tag}", f"wltu{tag}"
    try:
        ip("netns", "add", o)
        ip("link", "add", end, "type", "veth", "peer", "name", "out0", "netns", o)
        ip("-n", o, "addr", "add", "198.51.100.1/24", "dev", "out0")
        ip("-n", o, "link", "set", "out0", "up")
        ip("-n", o, "link", "set", "lo", "up")
        yield o, end
    finally:
        ip("link", "del", end, check=False)
        ip("netns", "del", o, check=False)


def nft_tables(netns=None):
    argv = ["nft", "list", "tables"]
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]
    return subprocess.run(argv, capture_output=True, text=True).stdout


# the outside's server: accepts one TCP connection, answers with the address it came from
PEER_SERVER = ("import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, "
               "socket.SO_REUSEADDR, 1); s.bind(('198.51.100.1', 7000)); s.listen(); "
               "print('ready', flush=True); c, a = s.accept(); c.sendall(a[0].encode()); "
               "c.close()")
CLIENT = ("import socket, sys; c = socket.create_connection((sys.argv[1], int(sys.argv[2])), "
          "timeout=10); print(c.recv(100).decode())")


@needs_root
def test_egress_masquerades_a_chosen_node_and_forwards_reach_a_service(tmp_path, outside):
    from wanlab.lifecycle import Lab
    o, end = outside
    lab = Lab(str(tmp_path / "h"))
    try:
        row = lab.create(loads(spec(end), file="e.yaml"))
        gwns = f"wl-{row.short}-edge"
        assert f"table ip wanlab-{row.short}" in nft_tables(gwns)

        def ping(node):
            r = lab.exec("eg", node, ["ping", "-n", "-c", "3", "-i", "0.2", "-W", "3",
                                      "198.51.100.1"], capture_output=True, text=True)
            return [float(x) for x in re.findall(r"time=([\d.]+) ms", r.stdout)]
        rtts = ping("a")
        assert len(rtts) >= 2, rtts
        assert min(rtts) >= 40.0        # 20 ms each way on the edge LAN, shaped by the engine
        assert ping("b") == []          # no egress: not even through its neighbour a
        # TCP out: the outside sees the gateway's uplink address (masquerade)
        srv = subprocess.Popen(["ip", "netns", "exec", o, sys.executable, "-c", PEER_SERVER],
                               stdout=subprocess.PIPE, text=True)
        try:
            assert srv.stdout.readline().strip() == "ready"
            r = lab.exec("eg", "a", ["python3", "-c", CLIENT, "198.51.100.1", "7000"],
                         capture_output=True, text=True, timeout=30)
            assert r.stdout.strip() == "198.51.100.2", r.stderr
        finally:
            srv.kill()
            srv.wait()
        # ingress: the outside reaches web's port 80 at the gateway's port 8080
        web = lab.popen("eg", "web", ["python3", "-c", PEER_SERVER.replace(
            "'198.51.100.1', 7000", "'0.0.0.0', 80")], stdout=subprocess.PIPE, text=True)
        try:
            assert web.stdout.readline().strip() == "ready"
            r = subprocess.run(["ip", "netns", "exec", o, sys.executable, "-c", CLIENT,
                                "198.51.100.2", "8080"], capture_output=True, text=True,
                               timeout=30)
            # web sees the gateway's edge address: its reply goes back through the gateway
            plan = make_plan(lab.get("eg").ir, row.short)
            gw_edge = next(i.ip for i in plan.nodes["edge"].interfaces)
            assert r.stdout.strip() == gw_edge, r.stderr
        finally:
            web.kill()
            web.wait()
        # the edge LAN is an ordinary LAN: tevc changes its delay (node to gateway, one way)
        lab.tevc("eg", "now", "edge-lan", "delay", ["60ms"], wait=True)
        rtts = ping("a")
        assert len(rtts) >= 2 and min(rtts) >= 120.0, rtts
        # modify cannot change the edge in place: refused, the experiment as it was
        with pytest.raises(WanlabError, match="cannot change the edge"):
            lab.modify("eg", loads(spec(end).replace("listen: 8080", "listen: 8081"),
                                   file="e.yaml"))
        assert lab.get("eg").state == "active"
        # engine counters
        with lab.engine("eg") as c:
            stats = c.call("stats", target="edge-lan")
        assert "edge-lan" in json.dumps(stats)
        lab.terminate("eg")
        # nothing left: namespace (with its table) gone, the interface back, host untouched
        assert not os.path.exists(f"/run/netns/{gwns}")
        assert os.path.exists(f"/sys/class/net/{end}")
        assert f"wanlab-{row.short}" not in nft_tables()
    finally:
        lab.close()


@needs_root
def test_a_bad_uplink_fails_the_swap_in_and_leaves_nothing(tmp_path):
    from wanlab.lifecycle import Lab
    lab = Lab(str(tmp_path / "h"))

    def gateways():
        return {p for p in os.listdir("/run/netns") if re.fullmatch(r"wl-[0-9a-f]{4}-edge", p)}
    before = gateways()
    try:
        with pytest.raises(WanlabError, match="no network interface 'wltnone0'"):
            lab.create(loads(spec("wltnone0"), file="e.yaml"))
        assert gateways() <= before
        assert lab.list() == []
    finally:
        lab.close()


@needs_root
def test_the_default_uplink_is_refused_where_the_host_does_not_forward(tmp_path):
    """Without an uplink interface the gateway's way out is a veth into the machine wanlab
    runs in, which must forward IPv4 already: wanlab never turns forwarding on for a whole
    machine. A stand-in machine (namespace H, forwarding off as in any new namespace) runs
    the CLI under nsenter; the swap-in is refused and leaves nothing."""
    from conftest import ROOT
    h = f"wltF{os.getpid() % 100000}"
    (tmp_path / "d.yaml").write_text("name: d\nnodes: [{name: a, egress: true}]\n")
    try:
        ip("netns", "add", h)
        p = subprocess.run(["nsenter", f"--net=/run/netns/{h}", sys.executable, "-m",
                            "wanlab.cli", "--home", str(tmp_path / "h"), "create",
                            str(tmp_path / "d.yaml")], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": ROOT}, timeout=300)
        assert p.returncode != 0 and "net.ipv4.ip_forward=1" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr
        assert ip("-n", h, "-o", "link").count("\n") == 1        # only its loopback
        from wanlab.lifecycle import Lab
        lab = Lab(str(tmp_path / "h"))
        try:
            assert lab.list() == []
        finally:
            lab.close()
    finally:
        ip("netns", "del", h, check=False)


@needs_root
def test_wireguard_client_reaches_a_node_through_the_tunnel(tmp_path, outside):
    """The outside namespace is a WireGuard client (its own wireguard-go device, configured
    from the client.conf wanlab wrote) and reaches web's service at web's edge address."""
    from wanlab.lifecycle import Lab
    o, end = outside
    text = spec(end).replace("edge: {delay: 20ms,", "edge: {delay: 5ms, wireguard: 51999,")
    lab = Lab(str(tmp_path / "h"))
    dev = f"wltc{os.getpid() % 100000}"
    client = None
    try:
        row = lab.create(loads(text, file="e.yaml"))
        folder = lab.store.folder("eg")
        conf = os.path.join(folder, "wireguard", "client.conf")
        for f in ("gateway.key", "client.key", "client.conf"):
            assert os.stat(os.path.join(folder, "wireguard", f)).st_mode & 0o777 == 0o600
        info = lab.show("eg")["edge"]
        assert "51999" in info["wireguard"]
        lines = open(conf).read().splitlines()
        assert "Endpoint = 198.51.100.2:51999" in lines
        # the client: wireguard-go in the outside namespace, wg setconf without wg-quick's
        # Address line, the address and the allowed prefix by hand
        client = subprocess.Popen(["ip", "netns", "exec", o, "wireguard-go", "-f", dev],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sock = f"/var/run/wireguard/{dev}.sock"
        for _ in range(500):
            if os.path.exists(sock):
                break
            time.sleep(0.02)
        bare = tmp_path / "wg.conf"
        bare.write_text("\n".join(x for x in lines if not x.startswith("Address")) + "\n")
        subprocess.run(["ip", "netns", "exec", o, "wg", "setconf", dev, str(bare)], check=True)
        allowed = next(x.split("=", 1)[1].strip() for x in lines if x.startswith("AllowedIPs"))
        ip("-n", o, "addr", "add", "100.96.0.2/32", "dev", dev)
        ip("-n", o, "link", "set", dev, "up")
        ip("-n", o, "route", "add", allowed, "dev", dev)
        plan = make_plan(lab.get("eg").ir, row.short)
        web_ip = next(i.ip for i in plan.nodes["web"].interfaces if i.network == "edge-lan")
        gw_edge = next(i.ip for i in plan.nodes["edge"].interfaces)
        web = lab.popen("eg", "web", ["python3", "-c", PEER_SERVER.replace(
            "'198.51.100.1', 7000", "'0.0.0.0', 80")], stdout=subprocess.PIPE, text=True)
        try:
            assert web.stdout.readline().strip() == "ready"
            r = subprocess.run(["ip", "netns", "exec", o, sys.executable, "-c", CLIENT,
                                web_ip, "80"], capture_output=True, text=True, timeout=60)
            assert r.stdout.strip() == gw_edge, r.stderr
        finally:
            web.kill()
            web.wait()
        # cleanup (as after a crash) removes exactly the records: endpoint, table, the
        # uplink given back; the keys stay with the experiment until terminate
        lab.cleanup("eg")
        assert not os.path.exists(f"/var/run/wireguard/wl{row.short}wg.sock")
        assert not os.path.exists(f"/run/netns/wl-{row.short}-edge")
        assert os.path.exists(f"/sys/class/net/{end}")
        assert os.path.exists(conf)
        lab.terminate("eg")
        assert not os.path.exists(folder)
    finally:
        if client is not None:
            client.terminate()
            client.wait(timeout=10)
        lab.close()


@needs_root
def test_the_default_uplink_masquerades_through_a_stand_in_host(tmp_path):
    """The default uplink (a veth into the machine wanlab runs in) with a stand-in for the
    machine: the whole life cycle runs under nsenter in namespace H (IPv4 forwarding on,
    default route to the outside namespace O), so nothing touches the real host."""
    from conftest import ROOT
    tag = f"{os.getpid() % 100000}"
    h, o = f"wltH{tag}", f"wltP{tag}"
    home = str(tmp_path / "h")
    (tmp_path / "d.yaml").write_text("name: d\nnodes: [{name: a, egress: true}, b]\n"
                                     "links: [{nodes: [a, b]}]\nedge: {delay: 10ms}\n")
    env = {**os.environ, "PYTHONPATH": ROOT}

    def cli(*args):
        return subprocess.run(["nsenter", f"--net=/run/netns/{h}", sys.executable, "-m",
                               "wanlab.cli", "--home", home, *args], capture_output=True,
                              text=True, env=env, timeout=300)
    try:
        ip("netns", "add", h)
        ip("netns", "add", o)
        ip("-n", h, "link", "add", "hup0", "type", "veth", "peer", "name", "out0", "netns", o)
        ip("-n", h, "addr", "add", "198.51.100.254/24", "dev", "hup0")
        ip("-n", o, "addr", "add", "198.51.100.1/24", "dev", "out0")
        for ns_, dev in ((h, "hup0"), (o, "out0"), (h, "lo"), (o, "lo")):
            ip("-n", ns_, "link", "set", dev, "up")
        ip("-n", h, "route", "add", "default", "via", "198.51.100.1")
        subprocess.run(["ip", "netns", "exec", h, "sysctl", "-qw", "net.ipv4.ip_forward=1"],
                       check=True)
        p = cli("create", str(tmp_path / "d.yaml"))
        assert p.returncode == 0, p.stderr
        p = cli("show", "d")
        m = re.search(r"edge: gateway edge on edge-lan, reached from outside at (\S+) "
                      r"\(uplink veth (wlx[0-9a-f]{4})\)", p.stdout)
        assert m, p.stdout
        veth = m.group(2)
        assert veth in ip("-n", h, "link")
        p = cli("exec", "d", "a", "--", "ping", "-n", "-c", "3", "-i", "0.2", "-W", "3",
                "198.51.100.1")
        rtts = [float(x) for x in re.findall(r"time=([\d.]+) ms", p.stdout)]
        assert len(rtts) >= 2 and min(rtts) >= 20.0, p.stdout + p.stderr
        p = cli("exec", "d", "b", "--", "ping", "-n", "-c", "1", "-W", "2", "198.51.100.1")
        assert p.returncode != 0            # b has no egress
        # the outside saw H's address: the host table masqueraded the gateway's /30
        srv = subprocess.Popen(["ip", "netns", "exec", o, sys.executable, "-c", PEER_SERVER],
                               stdout=subprocess.PIPE, text=True)
        try:
            assert srv.stdout.readline().strip() == "ready"
            p = cli("exec", "d", "a", "--", "python3", "-c", CLIENT, "198.51.100.1", "7000")
            assert p.stdout.strip() == "198.51.100.254", p.stderr
        finally:
            srv.kill()
            srv.wait()
        p = cli("terminate", "d")
        assert p.returncode == 0, p.stderr
        assert veth not in ip("-n", h, "link")
        assert "wanlab-" not in subprocess.run(["ip", "netns", "exec", h, "nft", "list",
                                                "tables"], capture_output=True,
                                               text=True).stdout
    finally:
        cli("cleanup", "--all")
        ip("netns", "del", o, check=False)
        ip("netns", "del", h, check=False)


def test_the_example_parses():
    from conftest import ROOT
    exp = loads(open(os.path.join(ROOT, "examples", "edge.yaml")).read(),
                file="examples/edge.yaml")
    assert exp.edge is not None and exp.edge.wireguard_port == 51820
    assert [m.node for m in exp.lans[-1].members] == ["client", "web", "edge"]
