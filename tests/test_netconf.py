"""Node network settings: the batched requests are the bytes pyroute2 would send, and a
batch applies and reports errors by request (the last in a real namespace)."""

from __future__ import annotations

import contextlib
import os
import struct

import pytest
from pyroute2 import IPBatch

from wanlab.backends.emulate import netconf, netns
from wanlab.errors import WanlabError
from wanlab.plan.routes import RouteEntry
from wanlab.plan.types import Interface, NodePlan


def _bodies(data: bytes) -> list[tuple[int, int, bytes]]:
    """(type, flags, payload) of each message (sequence numbers and pids aside)."""
    out, off = [], 0
    while off < len(data):
        length, kind, flags, _, _ = struct.unpack_from("=IHHII", data, off)
        out.append((kind, flags, data[off + 16:off + length]))
        off += length
    return out


def _pyroute2(call) -> list[tuple[int, int, bytes]]:
    ipb = IPBatch()
    call(ipb)
    return _bodies(bytes(ipb.batch))


def _ours(*reqs) -> list[tuple[int, int, bytes]]:
    return _bodies(b"".join(netconf.encode(r, 1) for r in reqs))


@pytest.mark.parametrize("ours, theirs", [
    (netconf.route_replace("10.1.2.0/24", "10.1.0.2", 2),
     lambda b: b.route("replace", dst="10.1.2.0/24", gateway="10.1.0.2", oif=2)),
    (netconf.route_replace("10.1.2.4/30", "10.1.0.2", 7),
     lambda b: b.route("replace", dst="10.1.2.4/30", gateway="10.1.0.2", oif=7)),
    (netconf.route_replace("default", "10.1.0.2", 3),
     lambda b: b.route("replace", dst="0.0.0.0/0", gateway="10.1.0.2", oif=3)),
    (netconf.route_del("10.1.2.0/24"), lambda b: b.route("del", dst="10.1.2.0/24")),
    (netconf.route_del("default"), lambda b: b.route("del", dst="0.0.0.0/0")),
    (netconf.addr_add(2, "10.1.0.1", 24),
     lambda b: b.addr("add", index=2, address="10.1.0.1", prefixlen=24)),
    (netconf.addr_add(1, "10.255.0.1", 32),
     lambda b: b.addr("add", index=1, address="10.255.0.1", prefixlen=32)),
    (netconf.route_replace("fd00:1::/64", "fd00:2::1", 2),
     lambda b: b.route("replace", dst="fd00:1::/64", gateway="fd00:2::1", oif=2)),
    (netconf.route_replace("default", "fd00:2::1", 3),
     lambda b: b.route("replace", dst="::/0", gateway="fd00:2::1", oif=3)),
    (netconf.route_del("default", v6=True), lambda b: b.route("del", dst="::/0", family=10)),
    (netconf.addr_add(2, "fd00:1::1", 64),
     lambda b: b.addr("add", index=2, address="fd00:1::1", prefixlen=64, flags=2)),
    (netconf.link_set(5, mac="02:ab:cd:00:01:02", mtu=1500),
     lambda b: b.link("set", index=5, address="02:ab:cd:00:01:02", mtu=1500)),
    (netconf.link_set(1, up=True), lambda b: b.link("set", index=1, state="up")),
])
def test_requests_are_the_bytes_pyroute2_sends(ours, theirs):
    assert _ours(ours) == _pyroute2(theirs)


def test_one_message_sets_mac_mtu_and_up():
    (kind, _, body), = _ours(netconf.link_set(4, mac="02:00:00:00:00:01", mtu=1500, up=True))
    _, index, flags, change = struct.unpack_from("=BxxxiII", body)
    assert (kind, index, flags, change) == (16, 4, 1, 1)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a network namespace)")
def test_a_batch_configures_a_namespace_and_names_the_failing_request():
    name = f"wl-test-netconf-{os.getpid()}"
    netns.create_many([name], setup=netconf.apply_sysctls)
    try:
        with netns.entered(name), open("/proc/sys/net/ipv4/ip_forward") as f:
            assert f.read().strip() == "1"
        with contextlib.closing(netns.netlink(name)) as ipr:
            ipr.link("add", ifname="v0", kind="veth", peer="v1")
        node = NodePlan("x", name, loopback="10.255.0.9", routes=[
            RouteEntry("default", "10.1.0.3", "v0"), RouteEntry("10.9.0.0/16", "10.1.0.2", "v0")])
        node.interfaces.append(Interface("x", "v0", "n", "10.1.0.1", 24, "02:00:00:00:00:07",
                                         "x:v0"))
        netconf.configure(node, node.interfaces, {})     # no index given: one dump finds it
        netconf.install_routes(node, [])
        with contextlib.closing(netns.netlink(name)) as ipr:
            link = ipr.get_links(ifname="v0")[0]
            assert link.get("IFLA_ADDRESS") == "02:00:00:00:00:07"
            assert link.get("IFLA_MTU") == 1500 and link["flags"] & 1
            addrs = {(a.get("IFA_ADDRESS"), a["prefixlen"]) for a in ipr.get_addr(family=2)}
            assert {("10.1.0.1", 24), ("10.255.0.9", 32)} <= addrs
            routes = {(r["dst_len"], r.get("RTA_DST"), r.get("RTA_GATEWAY"))
                      for r in ipr.get_routes(family=2, table=254)}
        assert {(0, None, "10.1.0.3"), (16, "10.9.0.0", "10.1.0.2")} <= routes
        # a changed table: the old /16 goes, a route whose gateway is on no link is refused
        # and named, and the kernel still applies the requests after it
        old = node.routes
        node.routes = [RouteEntry("10.8.0.0/16", "192.168.77.1", "v0"),
                       RouteEntry("10.7.0.0/16", "10.1.0.2", "v0")]
        with pytest.raises(WanlabError, match=r"node x: cannot add route 10\.8\.0\.0/16 "
                                              r"via 192\.168\.77\.1 dev v0: "):
            netconf.install_routes(node, old)
        with contextlib.closing(netns.netlink(name)) as ipr:
            routes = {(r["dst_len"], r.get("RTA_DST"))
                      for r in ipr.get_routes(family=2, table=254)}
        assert (16, "10.9.0.0") not in routes and (16, "10.7.0.0") in routes
    finally:
        netns.delete(name)
