"""The spanning tree of a looped Mininet network at run time.

A switched network with a loop is built with every link between its switches (the ones
802.1D blocks held down, :func:`wanlab.engine.encode.hold_blocked`). When a link between
its switches goes down or up (``configLinkStatus``, the CLI's ``link``), the tree is
computed again over the links that are up (:func:`wanlab.mininet.build.spanning_tree`,
each set of switches still joined having its own root): the links that leave the tree are
taken down in the engine first, then those that join it brought up, so no frame ever circles.

802.1D ends a topology change by flushing the switches' learned addresses. The engine has
no request that forgets them, and ``down``/``up`` of a port keeps them (a learned address
is forgotten only when it ages out, 300 s after its station was last heard, or relearned
when the station speaks from elsewhere). So after the tree changed, each host sends one
broadcast frame from each of its ports on the network (three copies, local experimental
EtherType 0x88B5, which hosts ignore): every switch it reaches learns the host again on the
port of the new tree, which is what the flush and the next frames achieve on 802.1D.

What is blocked and what is down is written to the experiment's folder for ``wanlab show``
(:mod:`wanlab.engine.spanning`).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from wanlab.engine import spanning as record
from wanlab.mininet import build as mapping

ETHERTYPE = 0x88B5          # IEEE 802 local experimental: no host's stack takes it
COPIES = 3


class Tree:
    """The run-time state of one looped network's links: which the script took down,
    which forward (the tree), the rest blocked."""

    def __init__(self, lan: str, switches: list[str], links: list[mapping.MnLink],
                 bid: dict[str, int]):
        self.lan, self.switches, self.links, self.bid = lan, switches, links, bid
        self.down: set[int] = set()
        self.forwarding = self._tree()

    def index(self, a: tuple[str, str], b: tuple[str, str]) -> int | None:
        """The link joining interfaces ``a`` and ``b`` (node, name), if it is one of ours."""
        for k, lk in enumerate(self.links):
            if {(lk.a.node, lk.a.name), (lk.b.node, lk.b.name)} == {a, b}:
                return k
        return None

    def _tree(self) -> set[int]:
        up = [lk for k, lk in enumerate(self.links) if k not in self.down]
        tree, _ = mapping.spanning_tree(self.switches, up, self.bid)
        return {k for k, lk in enumerate(self.links) if any(lk is t for t in tree)}

    def change(self, k: int, up: bool) -> tuple[set[int], set[int]]:
        """Link ``k`` goes up or down: the links that leave the tree and those that join."""
        (self.down.discard if up else self.down.add)(k)
        want = self._tree()
        left, joined = self.forwarding - want, want - self.forwarding
        self.forwarding = want
        return left, joined

    def describe(self) -> dict[str, Any]:
        """The blocked ports (as ``show`` names them) and the links down."""
        up = [lk for k, lk in enumerate(self.links) if k not in self.down]
        _, off = mapping.spanning_tree(self.switches, up, self.bid)
        blocked = []
        for lk, at_a in off:
            port, peer = (lk.a, lk.b) if at_a else (lk.b, lk.a)
            blocked.append({"switch": port.node, "port": port.name, "peer": peer.name})
        return {"blocked": blocked,
                "down": [{"a": self.links[k].a.name, "b": self.links[k].b.name}
                         for k in sorted(self.down)]}


def apply(tree: Tree, left: set[int], joined: set[int], where: dict[Any, mapping.Where],
          call: Callable[..., Any]) -> None:
    """Take the links that left the tree down at both ends, then bring those that joined
    it up (``call(cmd, **request)``: the engine)."""
    for ks, cmd in ((left, "down"), (joined, "up")):
        for k in sorted(ks):
            lk = tree.links[k]
            for e in (lk.a, lk.b):
                w = where[(e.node, e.name)]
                call(cmd, target=w.target, member=w.member)


def save(folder: str, trees: dict[str, Tree]) -> None:
    record.save(folder, {lan: t.describe() for lan, t in trees.items()})


def announce(ports: list[tuple[str, str]]) -> int:
    """Send the broadcast frames of a topology change from each (network namespace,
    interface); returns how many ports sent (a port whose carrier is off sends none)."""
    from wanlab.backends.emulate import netns
    sent = 0
    for ns, ifname in ports:
        try:
            with netns.entered(ns):
                s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            with s:
                s.bind((ifname, 0))
                mac = s.getsockname()[4]
                frame = b"\xff" * 6 + mac + ETHERTYPE.to_bytes(2, "big") + bytes(46)
                for _ in range(COPIES):
                    s.send(frame)
            sent += 1
        except OSError:
            continue
    return sent
