"""A node's kernel network settings, applied in one netlink batch per namespace.

What a node gets: forwarding on and IPv6 autoconfiguration off (sysctls),
``lo`` up (with the router id, under dynamic routing), each TAP's MAC, MTU,
address and up, and its routes. pyroute2's requests each cost about a
millisecond of asyncio (150 µs of it encoding the message), and a 1 000-node
swap-in makes some 12 000 of them; so here a node's requests are packed with
``struct`` into the very rtnetlink messages pyroute2 sends for
``link("set")``, ``addr("add")``, ``route("replace")`` and ``route("del")``
(tests/test_netconf.py compares the bytes with pyroute2's), sent a batch at a
time on one socket opened in the node's namespace, and every acknowledgement
is read back, so an error still names the request that failed. Interface
indexes come from the engine's reply (it created the TAPs), else from one
dump of the namespace: never one lookup per interface.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
from dataclasses import dataclass

from wanlab.backends.emulate import netns
from wanlab.errors import WanlabError
from wanlab.plan.routes import RouteEntry
from wanlab.plan.types import Interface, NodePlan

# rtnetlink's numbers (linux/netlink.h, linux/rtnetlink.h: kernel ABI), written here rather
# than imported from pyroute2, whose import costs every CLI command ~0.2 s; tests/test_netconf.py
# compares the messages with pyroute2's own
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
NLM_F_REPLACE, NLM_F_EXCL, NLM_F_CREATE = 0x100, 0x200, 0x400
NLMSG_ERROR = 0x2
RTM_NEWLINK, RTM_NEWADDR, RTM_NEWROUTE, RTM_DELROUTE = 16, 20, 24, 25

LOOPBACK = 1          # the kernel gives every namespace's lo index 1
IFF_UP = 1
MTU = 1500
BATCH = 128           # requests per send: their acks (one skb each) fit the receive buffer

# attribute numbers (linux/if_link.h, if_addr.h, rtnetlink.h)
IFLA_ADDRESS, IFLA_MTU = 1, 4
IFA_ADDRESS, IFA_LOCAL, IFA_FLAGS = 1, 2, 8
IFA_F_NODAD = 0x02
RTA_DST, RTA_OIF, RTA_GATEWAY = 1, 4, 5
RT_TABLE_MAIN, RTPROT_STATIC, RTN_UNICAST = 254, 4, 1

# kernel settings of a fresh node: forwarding on (any node may route), no IPv6 router
# solicitations or DAD delays (they would only add chatter and start-up lag)
SYSCTLS = (("net/ipv4/ip_forward", b"1"),
           ("net/ipv6/conf/all/forwarding", b"1"),
           ("net/ipv6/conf/default/router_solicitations", b"0"),
           ("net/ipv6/conf/default/dad_transmits", b"0"),
           ("net/ipv6/conf/default/accept_ra", b"0"))


def apply_sysctls() -> None:
    """Write :data:`SYSCTLS` in the calling thread's namespace (/proc/sys/net follows it)."""
    for key, val in SYSCTLS:
        fd = os.open("/proc/sys/" + key, os.O_WRONLY)
        try:
            os.write(fd, val)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class Request:
    """One rtnetlink request: its message (sequence number 0 until sent), what it does
    in words, and errnos that count as done (None: any)."""

    kind: int
    flags: int
    body: bytes
    what: str
    ignore: frozenset[int] | None = frozenset()


def _attr(kind: int, payload: bytes) -> bytes:
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind) + payload + b"\0" * (-n % 4)


def _ip(addr: str) -> bytes:
    """An address in network order: 4 bytes, or 16 for IPv6."""
    return socket.inet_pton(socket.AF_INET6, addr) if ":" in addr else socket.inet_aton(addr)


def _family(addr: str) -> int:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def link_set(index: int, mac: str | None = None, mtu: int | None = None,
             up: bool = False, what: str = "") -> Request:
    """RTM_NEWLINK on an existing interface: MAC, MTU and/or up (MAC and MTU are applied
    before the flags, so one message does what ``set address, mtu`` then ``up`` do)."""
    flag = IFF_UP if up else 0
    body = struct.pack("=BxHiII", 0, 0, index, flag, flag)
    if mac is not None:
        body += _attr(IFLA_ADDRESS, bytes.fromhex(mac.replace(":", "")))
    if mtu is not None:
        body += _attr(IFLA_MTU, struct.pack("=I", mtu))
    return Request(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, body,
                   what or f"set interface {index}")


def addr_add(index: int, ip: str, prefixlen: int, what: str = "") -> Request:
    """Add an address; an IPv6 one without duplicate address detection (every address of
    an experiment is unique by construction, and DAD would hold it back a second)."""
    if ":" in ip:
        body = (struct.pack("=BBBBI", socket.AF_INET6, prefixlen, 0, 0, index)
                + _attr(IFA_ADDRESS, _ip(ip)) + _attr(IFA_FLAGS, struct.pack("=I", IFA_F_NODAD)))
    else:
        body = (struct.pack("=BBBBI", socket.AF_INET, prefixlen, 0, 0, index)
                + _attr(IFA_ADDRESS, _ip(ip)) + _attr(IFA_LOCAL, _ip(ip)))
    return Request(RTM_NEWADDR, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, body,
                   what or f"add address {ip}/{prefixlen}")


def _dst(dst: str) -> tuple[int, bytes]:
    if dst in ("default", "0.0.0.0/0", "::/0"):
        return 0, b""
    net, _, plen = dst.partition("/")
    return int(plen or (128 if ":" in net else 32)), _attr(RTA_DST, _ip(net))


def route_replace(dst: str, via: str, oif: int, what: str = "") -> Request:
    """Add or replace the route to ``dst`` (its family is its next hop's)."""
    plen, attr = _dst(dst)
    body = (struct.pack("=BBBBBBBBI", _family(via), plen, 0, 0, RT_TABLE_MAIN,
                        RTPROT_STATIC, 0, RTN_UNICAST, 0)
            + attr + _attr(RTA_GATEWAY, _ip(via)) + _attr(RTA_OIF, struct.pack("=I", oif)))
    return Request(RTM_NEWROUTE, NLM_F_REQUEST | NLM_F_ACK | NLM_F_REPLACE | NLM_F_CREATE,
                   body, what or f"add route {dst} via {via}")


def route_del(dst: str, what: str = "", v6: bool = False) -> Request:
    """Delete the main table's route to ``dst`` (whatever its next hop; ``v6``: the IPv6
    table's); a missing one is no error."""
    plen, attr = _dst(dst)
    family = socket.AF_INET6 if v6 or ":" in dst else socket.AF_INET
    body = struct.pack("=BBBBBBBBI", family, plen, 0, 0, RT_TABLE_MAIN,
                       0, 0, 0, 0) + attr
    return Request(RTM_DELROUTE, NLM_F_REQUEST | NLM_F_ACK, body,
                   what or f"delete route {dst}", ignore=None)


def encode(req: Request, seq: int) -> bytes:
    return struct.pack("=IHHII", 16 + len(req.body), req.kind, req.flags, seq, 0) + req.body


def send(sock: socket.socket, reqs: list[Request]) -> None:
    """Send ``reqs`` in order and read every acknowledgement; raise OSError naming the
    first request that failed (the kernel goes on with the rest of a batch)."""
    failed: tuple[Request, int] | None = None
    for start in range(0, len(reqs), BATCH):
        chunk = reqs[start:start + BATCH]
        sock.send(b"".join(encode(r, start + k + 1) for k, r in enumerate(chunk)))
        waiting = set(range(start + 1, start + len(chunk) + 1))
        while waiting:
            data = sock.recv(1 << 16)
            off = 0
            while off + 16 <= len(data):
                length, kind, _, seq, _ = struct.unpack_from("=IHHII", data, off)
                if kind == NLMSG_ERROR and seq in waiting:
                    waiting.discard(seq)
                    (err,) = struct.unpack_from("=i", data, off + 16)
                    req = reqs[seq - 1]
                    if err < 0 and failed is None and \
                            not (req.ignore is None or -err in req.ignore):
                        failed = (req, -err)
                off += max(16, (length + 3) & ~3)
        if failed:
            req, err = failed
            raise OSError(err, f"cannot {req.what}: {os.strerror(err)}")


def rtnl(ns: str) -> socket.socket:
    """A route netlink socket bound to namespace ``ns`` (the caller closes it)."""
    with netns.entered(ns):
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    sock.settimeout(30.0)     # the kernel answers at once; this only bounds a wait gone wrong
    sock.bind((0, 0))
    return sock


def ifindexes(ns: str) -> dict[str, int]:
    """Interface name → index in namespace ``ns``, from one dump."""
    with netns.entered(ns):
        return {name: idx for idx, name in socket.if_nameindex()}


def route_requests(np_: NodePlan, index: dict[str, int],
                   old: list[RouteEntry] = ()) -> list[Request]:
    """Make the node's routes ``np_.routes``: delete those of ``old`` no longer wanted."""
    out = [route_del(r.dst, v6=r.v6) for r in old if r not in np_.routes]
    for r in np_.routes:
        if r.dev not in index:
            raise WanlabError(f"node {np_.name}: route {r.dst} via {r.via} leaves by "
                              f"{r.dev!r}, which the node does not have")
        out.append(route_replace(r.dst, r.via, index[r.dev],
                                 f"add route {r.dst} via {r.via} dev {r.dev}"))
    return out


def _index(np_: NodePlan, interfaces: list[Interface],
           known: dict[str, int]) -> dict[str, int]:
    """ifname -> ifindex of ``interfaces`` from ``known`` (port -> ifindex, as the engine
    reported them), else from one dump of the node."""
    if all(i.port in known for i in interfaces):
        return {i.ifname: known[i.port] for i in interfaces}
    return ifindexes(np_.netns)


def configure(np_: NodePlan, interfaces: list[Interface], known: dict[str, int],
              lo: bool = True) -> None:
    """One batch: ``lo`` up with the node's router id (with ``lo``: a fresh node), and each
    of ``interfaces`` (TAPs the engine made) with its MAC, MTU and address, up.
    ``known``: port -> ifindex as the engine reported them."""
    index = _index(np_, interfaces, known)
    reqs = []
    if lo:
        reqs.append(link_set(LOOPBACK, up=True, what="bring lo up"))
        if np_.loopback and np_.ipv4:
            reqs.append(addr_add(LOOPBACK, np_.loopback, 32, f"add {np_.loopback}/32 to lo"))
        if np_.loopback6:
            reqs.append(addr_add(LOOPBACK, np_.loopback6, 128,
                                 f"add {np_.loopback6}/128 to lo"))
    for i in interfaces:
        k = index[i.ifname]
        reqs.append(link_set(k, mac=i.mac, mtu=MTU, up=True, what=f"set up {i.ifname}"))
        # no address (addressing "none"): the node's own commands address it
        for ip, plen in ((i.ip, i.prefixlen), (i.ip6, i.prefixlen6)):
            if ip:
                reqs.append(addr_add(k, ip, plen, f"add {ip}/{plen} to {i.ifname}"))
    _run(np_, reqs)


def install_routes(np_: NodePlan, old: list[RouteEntry],
                   known: dict[str, int] | None = None) -> None:
    """Make the node's routes ``np_.routes`` in one batch, deleting those of ``old`` no
    longer wanted. ``known``: port -> ifindex, if the engine reported them."""
    _run(np_, route_requests(np_, _index(np_, np_.interfaces, known or {}), old))


def _run(np_: NodePlan, reqs: list[Request]) -> None:
    try:
        with contextlib.closing(rtnl(np_.netns)) as sock:
            send(sock, reqs)
    except OSError as e:
        raise WanlabError(f"node {np_.name}: {e.strerror}") from None
