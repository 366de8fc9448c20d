"""Is an active experiment still whole? The health check behind ``show``, ``list`` and
``swapin --repair``.

An experiment is *broken* when a part it cannot run without is gone: its engine
process (recorded by pid and start time) exited or its control socket refuses
connections; its event scheduler process exited or its socket refuses; a node's
namespace vanished; a routing daemon wanlab started (FRR, recorded with role "routing")
exited, so that node no longer routes (a node's ``reboot`` event starts them again); a
node's holder (the init of its PID namespace, role "holder") exited, and every process of
the node with it (a ``reboot`` ends it on purpose, its record first).
A part that is alive but slow to answer (a busy engine applying a large change) is only
*slow*: reported, never counted as broken, so a loaded machine does not turn healthy
experiments into degraded ones.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field

from wanlab.backends.emulate import netns, procs
from wanlab.engine.protocol import Hello
from wanlab.store.db import Store

ANSWER_TIMEOUT_S = 2.0


@dataclass
class Health:
    broken: list[str] = field(default_factory=list)   # parts gone: the experiment is degraded
    slow: list[str] = field(default_factory=list)     # parts alive that did not answer in time

    @property
    def ok(self) -> bool:
        return not self.broken


def _answers(path: str, request: bytes, timeout: float) -> str | None:
    """None if the socket at ``path`` answers a line to ``request``; else what went wrong:
    "refused" (nobody listens) or "silent" (connected, no answer in time)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        try:
            s.connect(path)
        except OSError:
            return "refused"
        try:
            s.sendall(request)
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(4096)
                if not chunk:
                    return "refused"
                data += chunk
            json.loads(data)
            return None
        except TimeoutError:
            return "silent"
        except (OSError, ValueError):
            return "refused"
    finally:
        s.close()


def check(store: Store, exp_id: int, folder: str,
          timeout: float = ANSWER_TIMEOUT_S) -> Health:
    """Check every recorded engine, scheduler, routing daemon and namespace of the
    experiment."""
    h = Health()
    for r in store.resources(exp_id):
        if r.state != "created":
            continue
        if r.kind in ("engine", "scheduler"):
            pid, started = r.detail.get("pid"), r.detail.get("started")
            if pid is None:
                continue
            what = "engine" if r.kind == "engine" else "event scheduler"
            if not procs.alive(pid, started):
                h.broken.append(f"{what} {procs.exit_reason(pid) or 'process gone'}")
                continue
            if r.kind == "engine":
                path = r.detail.get("socket") or os.path.join(folder, "engine.sock")
                req = (json.dumps({"id": 1, **Hello().to_json()}) + "\n").encode()
            else:
                path, req = os.path.join(folder, "events.sock"), b'{"cmd":"status"}\n'
            got = _answers(path, req, timeout)
            if got == "refused":
                h.broken.append(f"{what} does not accept connections on {path}")
            elif got == "silent":
                h.slow.append(f"{what} did not answer within {timeout:g} s")
        elif r.kind == "process" and r.detail.get("role") in ("routing", "holder") and \
                r.detail.get("pid") and not procs.alive(r.detail["pid"], r.detail.get("started")):
            why = procs.exit_reason(r.detail["pid"]) or "process gone"
            if r.detail["role"] == "routing":
                h.broken.append(f"routing daemon {r.detail.get('daemon', r.name)} of node "
                                f"{r.detail.get('node')} {why}")
            else:       # the node's init: every process of the node ended with it
                h.broken.append(f"node {r.detail.get('node')}'s holder (the init of its "
                                f"processes) {why}")
        elif r.kind == "netns" and r.detail.get("inode") and \
                netns.inode(r.name) != r.detail["inode"]:
            h.broken.append(f"namespace {r.name} of node {r.detail.get('node')} is gone")
    return h

