"""The clocks of a cluster's machines, kept in step for the cut links' due times.

A frame on a cut link carries the Unix time it is due at the far end (stamped by the
sending engine, ``engine/src/wire/stamp.rs``), and the receiving engine holds it until its
own clock reads that time. An offset between the two machines' clocks would add to (or
take from) that direction's delay, so each machine's host agent runs:

* a **responder**: a UDP socket on :data:`CLOCK_PORT` that answers a probe with this
  machine's ``CLOCK_REALTIME``;
* a **keeper**: a thread that every :data:`PERIOD_S` probes each machine its active parts
  tunnel to (the tunnel's own peer address, so the probe takes the tunnel's path) and tells
  each part's engine, per tunnel port, how far that machine's clock is ahead
  (``tunnel_clock``).

The offset is NTP's: of :data:`PROBES` probes, the one with the smallest round trip, its
remote reading less the midpoint of its send and receive times here. Its error is at most
half that round trip, and an asymmetric path biases it by half the asymmetry (as NTP).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import threading
import time
from typing import Any

CLOCK_PORT = 4791           # beside VXLAN's 4789, on each machine's underlay address
PERIOD_S = 2.0              # how often the keeper measures and tells the engines
PROBES = 16                 # probes per measurement; the fastest one counts
PROBE_TIMEOUT_S = 0.2
MAGIC = b"WLck"
_PROBE = struct.Struct("<4sQ")          # magic, sequence number
_ANSWER = struct.Struct("<4sQq")        # magic, sequence number, Unix time in ns


class Responder:
    """Answers clock probes on ``(address, port)`` in a daemon thread. ``skew_ns`` is added
    to every answer: a clock that far ahead, for the tests of :func:`offset_to`."""

    def __init__(self, address: str = "0.0.0.0", port: int = CLOCK_PORT, skew_ns: int = 0):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, port))
        self.port = self.sock.getsockname()[1]
        self.skew_ns = skew_ns
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                data, peer = self.sock.recvfrom(64)
            except OSError:
                return                  # closed
            if len(data) != _PROBE.size:
                continue                # not a probe: no answer
            magic, seq = _PROBE.unpack(data)
            if magic != MAGIC:
                continue
            with contextlib.suppress(OSError):
                self.sock.sendto(_ANSWER.pack(MAGIC, seq, time.time_ns() + self.skew_ns),
                                 peer)

    def close(self) -> None:
        self.sock.close()


def offset_to(address: str, port: int = CLOCK_PORT, probes: int = PROBES,
              timeout: float = PROBE_TIMEOUT_S) -> tuple[int, int] | None:
    """(how far the clock at ``address`` is ahead of this one's, the round trip of the
    probe that measured it), in ns; None if no probe was answered."""
    best: tuple[int, int] | None = None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.connect((address, port))
        for seq in range(probes):
            t0 = time.time_ns()
            try:
                s.send(_PROBE.pack(MAGIC, seq))
                while True:
                    data = s.recv(64)
                    t1 = time.time_ns()
                    if len(data) == _ANSWER.size:
                        magic, got, remote = _ANSWER.unpack(data)
                        if magic == MAGIC and got == seq:
                            break
            except (TimeoutError, OSError):
                continue
            rtt = t1 - t0
            if best is None or rtt < best[1]:
                best = (remote - (t0 + t1) // 2, rtt)
    return best


class Keeper:
    """Every :data:`PERIOD_S`, the offset to each machine this machine's active parts
    tunnel to, told to each part's engine. ``offsets`` holds the last measurement of each
    peer address: ``{"offset_ns", "rtt_ns", "at"}``; ``told`` what each part's engine
    last accepted: part -> tunnel port -> offset."""

    def __init__(self, home: str, period_s: float = PERIOD_S, port: int = CLOCK_PORT):
        self.home = home
        self.period_s = period_s
        self.port = port
        self.offsets: dict[str, dict[str, Any]] = {}
        self.told: dict[str, dict[str, int]] = {}
        self.errors: list[str] = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                self.round()
            except Exception as e:      # noqa: BLE001 - the keeper outlives any one round
                self.errors = (self.errors + [f"{type(e).__name__}: {e}"])[-5:]
            time.sleep(self.period_s)

    def round(self) -> None:
        """One measurement of every peer of the active parts, told to their engines."""
        from wanlab.cluster.part import PartLab, spec_path
        from wanlab.model.states import ACTIVE
        from wanlab.plan.plan import make_plan
        if not os.path.exists(os.path.join(self.home, "wanlab.db")):
            return
        lab = PartLab(self.home)
        try:
            todo: list[tuple[str, str, str]] = []      # (part, engine port, peer)
            for row in lab.store.list():
                if row.state != ACTIVE:
                    continue
                try:
                    with open(spec_path(lab.store, row.name)) as f:
                        tunnels = json.load(f).get("tunnels", [])
                except (OSError, ValueError):
                    continue            # not a cluster part, or being made
                plan = make_plan(row.ir, row.short)
                for t in tunnels:
                    np_ = plan.nodes.get(t["stub"])
                    port = np_ and next((i.port for i in np_.interfaces
                                         if i.network == t["link"]), None)
                    if port:
                        todo.append((row.name, port, t["peer"]))
            measured = {}
            for peer in sorted({p for _, _, p in todo}):
                got = offset_to(peer, self.port)
                if got is not None:
                    measured[peer] = got
                    self.offsets[peer] = {"offset_ns": got[0], "rtt_ns": got[1],
                                          "at": time.time()}
            from wanlab.engine import protocol
            by_part: dict[str, list[tuple[str, int]]] = {}
            for name, port, peer in todo:
                if peer in measured:
                    by_part.setdefault(name, []).append((port, measured[peer][0]))
            for name, ports in by_part.items():
                try:
                    with lab.engine(name) as c:
                        for port, off in ports:
                            c.send(protocol.TunnelClock(port=port, offset_ns=off))
                            self.told.setdefault(name, {})[port] = off
                except Exception:       # noqa: BLE001 - swapped out meanwhile: next round
                    continue
            for gone in set(self.told) - {n for n, _, _ in todo}:
                del self.told[gone]
        finally:
            lab.close()
