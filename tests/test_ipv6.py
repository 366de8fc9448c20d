"""IPv6 on real namespaces: dual-stack static routes, OSPFv3 rerouting on an IPv6-only
ring, BGP carrying IPv6 unicast (each pinging and moving TCP over IPv6 by the nodes' names,
the hosts file's AAAA entries), and IPv6 frames through a latency-matrix LAN, a link's
capture and the traffic agents of an IPv6-only experiment. One experiment per test."""

import json
import os
import re
import struct
import subprocess
import time

from conftest import needs_root

from wanlab.frontends.builder import ExperimentBuilder

pytestmark = needs_root


def ping6(lab, exp, src, dst, count=3):
    """RTTs in ms of IPv6 pings from node ``src`` to ``dst`` (a name or an address)."""
    out = lab.exec(exp, src, ["ping", "-6", "-n", "-c", str(count), "-i", "0.05", "-W", "2",
                              dst], capture_output=True, text=True)
    return [float(x) for x in re.findall(r"time=([\d.]+) ms", out.stdout)]


def iperf6(lab, exp, server, client, dst):
    """Bytes a one-second iperf3 TCP transfer over IPv6 moved from ``client`` to ``dst``
    (``server``'s name), and the address the client reached."""
    srv = subprocess.Popen(lab.node_argv(exp, server, ["iperf3", "-s", "-1", "-6"]),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            out = lab.exec(exp, client, ["iperf3", "-6", "-c", dst, "-t", "1", "-J"],
                           capture_output=True, text=True)
            r = json.loads(out.stdout or "{}")
            if "sum_received" in r.get("end", {}):
                break
            time.sleep(0.1)       # the server is not listening yet
        assert "sum_received" in r.get("end", {}), out.stdout[-3000:]
        return r["end"]["sum_received"]["bytes"], r["start"]["connected"][0]["remote_host"]
    finally:
        srv.kill()
        srv.wait()


def test_dual_stack_static_routes_ping6_tcp_show_and_routes(lab):
    b = ExperimentBuilder("dual")
    b.ipv6(True)
    for n in ("a", "r", "c", "d"):
        b.node(n)
    b.link("a", "r", delay="2ms", name="ar", ip6_a="fd00:aa::10")
    b.lan(["r", "c", "d"], delay="2ms", name="lan")
    lab.create(b.build())
    show = lab.show("dual")["nodes"]
    a0 = show["a"]["interfaces"][0]
    assert a0["ip6"] == "fd00:aa::10/64" and a0["ip"].startswith("10.")
    # the portal's view lists both families
    from wanlab.portal.app import topology
    view = {n["name"]: n["addresses"] for n in topology(lab, "dual")["nodes"]}
    assert view["a"][:2] == [a0["ip"], "fd00:aa::10/64"], view
    # and `wanlab show`'s text: the IPv6 address under the IPv4 one, routes of both
    from wanlab.site.show_text import local_lines
    text = "\n".join(local_lines(lab.show("dual")))
    assert re.search(rf"^    eth0 +{re.escape(a0['ip'])} .*\n +fd00:aa::10/64$", text,
                     re.M), text
    assert re.search(r"^    route default via fd\S+ dev eth0$", text, re.M), text
    c_ip6 = show["c"]["interfaces"][0]["ip6"].split("/")[0]
    # the names resolve to both families (A and AAAA); c is two hops away
    hosts = lab.exec("dual", "a", ["getent", "ahostsv6", "c-lan"], capture_output=True,
                     text=True).stdout
    assert c_ip6 in hosts, hosts
    rtts = ping6(lab, "dual", "a", "c-lan")
    assert len(rtts) == 3 and min(rtts) >= 5.9, rtts       # 2 ms + 1 ms + 1 ms, each way
    assert ping6(lab, "dual", "a", "d-lan", count=1)
    # IPv4 still works beside it
    v4 = lab.exec("dual", "a", ["ping", "-4", "-n", "-c", "1", "-W", "2", "c-lan"],
                  capture_output=True, text=True)
    assert v4.returncode == 0, v4.stdout
    sent, peer = iperf6(lab, "dual", "c", "a", "c-lan")
    assert sent > 0 and peer == c_ip6
    # both families' kernel tables: a's routes towards the LAN go via r's addresses
    table = lab.routes("dual", "a")["a"]
    r_ip6 = show["r"]["interfaces"][0]["ip6"].split("/")[0]
    assert re.search(rf"^default via {re.escape(r_ip6)} dev eth0", table, re.M), table
    assert re.search(r"^default via 10\.", table, re.M), table
    # a hop-limited ping from a expires at r: ICMPv6 time exceeded from r
    out = lab.exec("dual", "a", ["ping", "-6", "-n", "-c", "1", "-t", "1", "-W", "2",
                                 c_ip6], capture_output=True, text=True).stdout
    assert "Time exceeded" in out and r_ip6 in out, out
    # modify: e behind a on a new link (the LAN after it is renumbered and rebuilt): e's
    # addresses come from the experiment's prefix, and both families' routes reach it
    b.node("e")
    b.link("a", "e", delay="1ms", name="ae")
    lab.modify("dual", b.build())
    show = lab.show("dual")["nodes"]
    e_ip6 = show["e"]["interfaces"][0]["ip6"]
    assert e_ip6.split(":")[:3] == c_ip6.split(":")[:3] and e_ip6.endswith("/64"), e_ip6
    rtts = ping6(lab, "dual", "c", "e")            # 1 + 1 + 2 + 1 ms each way
    assert len(rtts) == 3 and min(rtts) >= 9.9, rtts
    v4 = lab.exec("dual", "c", ["ping", "-4", "-n", "-c", "1", "-W", "2", "e"],
                  capture_output=True, text=True)
    assert v4.returncode == 0, v4.stdout


def test_ipv6_only_ospf3_ring_reroutes_after_link_down(lab):
    # a-b-c-d-a, the d-a link dear: a reaches d through b and c until b-c fails
    b = ExperimentBuilder("ring6")
    b.ipv6("only")
    b.routing("ospf")
    b.ospf_timers(1, 3)
    for n in "abcd":
        b.node(n)
    for x, y in ("ab", "bc", "cd"):
        b.link(x, y, delay="5ms", name=x + y)
    b.link("d", "a", delay="20ms", name="da", cost=10)
    lab.create(b.build())
    show = lab.show("ring6")["nodes"]
    assert all(":" in i["ip"] for n in show.values() for i in n["interfaces"])
    out = lab.exec("ring6", "a", ["vtysh", "-c", "show ipv6 ospf6 neighbor"],
                   capture_output=True, text=True).stdout
    assert out.count("Full") == 2, out
    table = lab.routes("ring6", "a")["a"]
    assert "proto ospf" in table and not re.search(r"^\d+\.\d+", table, re.M), table
    # d's name is its loopback /128, learnt by OSPFv3: a-b-c-d, 3 x 5 ms each way
    rtts = ping6(lab, "ring6", "a", "d")
    assert len(rtts) == 3 and min(rtts) >= 29.9, rtts
    sent, _ = iperf6(lab, "ring6", "d", "a", "d")
    assert sent > 0
    lab.tevc("ring6", "now", "bc", "down", wait=True)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        rtts = ping6(lab, "ring6", "a", "d", count=1)
        if rtts and rtts[0] >= 39.9:
            break
        time.sleep(0.2)
    assert rtts and rtts[0] >= 39.9, rtts          # over the 20 ms link, each way


def test_bgp_carries_ipv6_unicast(lab):
    b = ExperimentBuilder("bgp6")
    b.ipv6(True)
    b.routing("bgp")
    for n, asn in (("a", 65001), ("b", 65002), ("c", 65003)):
        b.node(n)
        b.bgp_as(n, asn)
    b.link("a", "b", delay="2ms", name="ab")
    b.link("b", "c", delay="2ms", name="bc")
    b.bgp_session("a", "b")
    b.bgp_session("b", "c")
    lab.create(b.build())
    out = lab.exec("bgp6", "b", ["vtysh", "-c", "show bgp ipv6 unicast summary"],
                   capture_output=True, text=True).stdout
    assert "65001" in out and "65003" in out, out
    table = lab.routes("bgp6", "a")["a"]
    assert re.search(r"^fd\S+ nhid \d+ via \S+ dev eth0 proto bgp|^fd\S+ via \S+ dev eth0 "
                     r"proto bgp", table, re.M), table
    # c's IPv6 loopback, announced by c and carried through AS 65002
    rtts = ping6(lab, "bgp6", "a", "c")
    assert len(rtts) == 3 and min(rtts) >= 7.9, rtts
    sent, _ = iperf6(lab, "bgp6", "c", "a", "c")
    assert sent > 0


MATRIX6 = """\
name: mx6
ipv6: only
nodes: [a, b, c, d]
lans:
  - name: wan
    nodes: [a, b, c]
    matrix:
      delay: [[0, 3ms, 12ms], [3ms, 0, 6ms], [12ms, 6ms, 0]]
links:
  - {name: cd, nodes: [c, d], delay: 1ms}
agents:                   # wanlab-gen's UDP and iperf3's TCP over IPv6, d to a
  - {name: udp0, kind: Agent/UDP, node: d, peer: null0}
  - {name: null0, kind: Agent/Null, node: a, peer: udp0}
  - {name: cbr0, kind: Application/Traffic/CBR, attached: udp0,
     params: {packetSize_: 500, rate_: 400kb}}
  - {name: tcp0, kind: Agent/TCP, node: d, peer: sink0}
  - {name: sink0, kind: Agent/TCPSink, node: a, peer: tcp0}
  - {name: ftp0, kind: Application/FTP, attached: tcp0}
events:
  - {at: 0.2, target: cbr0, action: start}
  - {at: 0.2, target: ftp0, action: start}
  - {at: 4, target: cbr0, action: stop}
  - {at: 4, target: ftp0, action: stop}
"""


def test_ipv6_frames_cross_matrix_channels_and_captures(lab):
    from wanlab.frontends import yaml_spec
    lab.create(yaml_spec.loads(MATRIX6))
    # neighbour discovery (multicast) and the pings cross each pair's own channel (the FTP
    # flow from d to a fills the queues it crosses meanwhile: a ping there may be dropped)
    for x, y, one_way in (("a", "b", 3), ("a", "c", 12), ("b", "c", 6)):
        rtts = ping6(lab, "mx6", x, f"{y}-wan", count=5)
        assert len(rtts) >= 3 and 2 * one_way - 0.1 <= min(rtts) <= 2 * one_way * 1.05 + 4, \
            (x, y, rtts)
    # a link's capture holds the IPv6 frames that crossed it (routed a -> c -> d)
    lab.tevc("mx6", "now", "cd", "trace", ["start"], wait=True)
    assert len(ping6(lab, "mx6", "a", "d-cd", count=5)) >= 3
    lab.tevc("mx6", "now", "cd", "trace", ["stop"], wait=True)
    folder = lab.show("mx6")["folder"]
    frames = []
    for name in os.listdir(os.path.join(folder, "traces")):
        data = open(os.path.join(folder, "traces", name), "rb").read()
        off = 24                                   # pcap file header, then records
        while off + 16 <= len(data):
            incl = struct.unpack_from("<I", data, off + 8)[0]
            frames.append(data[off + 16:off + 16 + incl])
            off += 16 + incl
    six = [f for f in frames if f[12:14] == b"\x86\xdd"]
    assert len(six) >= 6 and not [f for f in frames if f[12:14] == b"\x08\x00"], len(frames)
    deadline = time.monotonic() + 30
    while len(lab.flows("mx6")) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    flows = {f["agent"]: f["result"] for f in lab.flows("mx6")}
    # the datagrams arrived (how many were sent depends on the machine's load; the FTP flow
    # beside them fills whatever buffer is narrowest, so one may be dropped there)
    cbr = flows["cbr0"]
    assert cbr["packets"] > 0 and cbr["packets"] >= 0.95 * cbr["sent_packets"], cbr
    assert flows["ftp0"]["bytes"] > 0, flows["ftp0"]


def test_ipv6_only_through_a_simulated_router(lab):
    # a —2 ms— R (simulated, inside the engine) —2 ms— b, IPv6 only: R answers neighbour
    # discovery and echo, forwards with the hop limit, and sends ICMPv6 errors; the
    # simulated host h behind R answers too
    bld = ExperimentBuilder("sim6")
    bld.ipv6("only")
    bld.node("a")
    bld.node("R", kind="simulated")
    bld.node("b")
    bld.link("a", "R", delay="2ms", name="aR")
    bld.link("R", "b", delay="2ms", name="Rb")
    bld.node("h", kind="simulated")
    bld.link("R", "h", delay="1ms", name="Rh")
    lab.create(bld.build())
    show = lab.show("sim6")["nodes"]
    r_near = show["R"]["interfaces"][0]["ip6"].split("/")[0]
    r_far = show["R"]["interfaces"][1]["ip6"].split("/")[0]
    b_ip6 = show["b"]["interfaces"][0]["ip6"].split("/")[0]
    h_ip6 = show["h"]["interfaces"][0]["ip6"].split("/")[0]
    for dst, least in ((r_near, 3.9), (r_far, 3.9), ("b", 7.9), (h_ip6, 5.9)):
        rtts = ping6(lab, "sim6", "a", dst)
        assert len(rtts) == 3 and min(rtts) >= least, (dst, rtts)
    out = lab.exec("sim6", "a", ["ping", "-6", "-n", "-c", "1", "-t", "1", "-W", "2", b_ip6],
                   capture_output=True, text=True).stdout
    assert "Time exceeded" in out and r_near in out, out
    # a's default route is R: R has no route to another prefix and says so
    out = lab.exec("sim6", "a", ["ping", "-6", "-n", "-c", "1", "-W", "2", "fd7f:dead::1"],
                   capture_output=True, text=True).stdout
    assert "Destination unreachable" in out and r_near in out, out
    sent, peer = iperf6(lab, "sim6", "b", "a", "b")
    assert sent > 0 and peer == b_ip6
