"""The host agent: one long-lived Ray actor per machine, pinned to it by the machine's
custom resource. It runs in the machine's own network namespace (where the machine's
Ray worker runs), owns that machine's share of every cluster experiment (a plain
single-machine experiment in the machine's own store, built and removed by the same life
cycle as any other) and answers the controller's questions about the machine.

Besides Ray, the agent answers part operations on a Unix socket in its machine's folder
(``<home>/machines/mI/agent.sock``, JSON lines: ``{"op", "name", "args"}`` in, ``{"ok",
"result"}`` or ``{"ok": false, "error"}`` out). On the local test cluster the machines'
folders are this host's, so a command that only sends events or reads logs reaches the
agent there without attaching to Ray (importing Ray alone takes seconds;
``bench/cluster_cli.py``). Only root in the host's or the agent's own network namespace
is answered: never a process inside a node.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import threading
from typing import Any

from wanlab.cluster.info import ClusterInfo, MachineInfo, pinned
from wanlab.errors import WanlabError
from wanlab.run.scheduler import peer_refused

SOCKET = "agent.sock"


class HostAgent:
    """The body of the actor (wrapped with ``ray.remote`` by :func:`agent`)."""

    def __init__(self, machine: str, home: str, controller_netns: int | None = None):
        """``controller_netns``: the network namespace (inode) of the controller that
        started the agent (the host's), whose processes the socket answers."""
        # a Ray worker starts in the folder of whoever started the cluster or the agent (a
        # user's, maybe under /tmp, which nodes see as their own); the agent and every
        # child it starts (holders, engines, node commands, which re-enter their caller's
        # folder by path) run from /, which exists for them and for every node
        os.chdir("/")
        self.machine = machine
        self.home = home
        self.lock = threading.Lock()
        self.receiving: dict[str, Any] = {}     # image layers arriving, by transfer
        self.netns = {os.stat("/proc/self/ns/net").st_ino, controller_netns}
        threading.Thread(target=self._serve, daemon=True).start()
        # the clocks of the machines its parts tunnel to, told to their engines
        from wanlab.cluster import clock
        self.clock_error = ""
        try:
            self.responder: clock.Responder | None = clock.Responder()
        except OSError as e:            # said by ``clocks``; the peers' probes go unanswered
            self.responder = None
            self.clock_error = f"clock responder on UDP {clock.CLOCK_PORT}: {e}"
        self.keeper = clock.Keeper(home)

    def _serve(self) -> None:
        """Answer part operations on ``<home>/agent.sock`` (one thread per connection)."""
        from wanlab.store.db import make_private_dir
        make_private_dir(self.home)
        path = os.path.join(self.home, SOCKET)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)                 # an earlier agent's, gone with it
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            server.bind(path)
        finally:
            os.umask(old)
        server.listen(16)
        while True:
            conn, _ = server.accept()
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as f:
            refused = peer_refused(conn, self.netns, "the controller's")
            line = f.readline()         # read whatever was sent, refused or not
            if refused:
                reply: dict[str, Any] = {"ok": False, "error": refused}
            else:
                try:
                    req = json.loads(line or b"{}")
                    reply = {"ok": True, "result": self.run_part(
                        req["op"], req["name"], *req.get("args", []))}
                except WanlabError as e:
                    reply = {"ok": False, "error": str(e)}
                except Exception as e:  # noqa: BLE001 - the agent's fault, said in one line
                    reply = {"ok": False, "fault": True,
                             "error": f"{type(e).__name__}: {e}"}
            with contextlib.suppress(OSError):
                f.write(json.dumps(reply, default=str).encode() + b"\n")
                f.flush()

    def hello(self) -> dict[str, Any]:
        """Who and where the agent is: its machine, pid, network namespace and resources."""
        with open("/proc/meminfo") as f:
            mem = int(re.search(r"MemTotal:\s+(\d+)", f.read()).group(1)) * 1024
        return {"machine": self.machine, "pid": os.getpid(),
                "netns_inode": os.stat("/proc/self/ns/net").st_ino,
                "cores": len(os.sched_getaffinity(0)), "memory_bytes": mem,
                "home": self.home}

    def rtt_to(self, address: str, count: int = 5) -> float | None:
        """Minimum round-trip time to another machine, in seconds (None if unreachable):
        on a loaded machine the mean measures the load as much as the path."""
        p = subprocess.run(["ping", "-n", "-q", "-c", str(count), "-i", "0.2", "-W", "2",
                            address], capture_output=True, text=True, check=False)
        m = re.search(r"= ([\d.]+)/", p.stdout)
        return float(m.group(1)) / 1e3 if m else None

    def clocks(self) -> dict[str, Any]:
        """The last measured offset of each machine this one's parts tunnel to (peer
        address -> ``offset_ns``, ``rtt_ns``, ``at``), and what went wrong, if anything."""
        errors = ([self.clock_error] if self.clock_error else []) + self.keeper.errors
        return {"offsets": dict(self.keeper.offsets), "errors": errors,
                "told": {k: dict(v) for k, v in self.keeper.told.items()}}

    def simulate_part(self, run: str, scenario: str, argv: list[str]) -> dict[str, Any]:
        """Run this machine's engine of a simulation over several machines."""
        from wanlab.cluster import sim_engine
        return sim_engine.run_engine_here(self.home, run, scenario, argv)

    # -- images, received by digest from the controller (wanlab/cluster/layers.py)
    def _images(self):
        from wanlab.backends.emulate import images
        return images.Images(images.images_dir(self.home))

    def image_missing(self, digests: list[str]) -> list[str]:
        """Those of the layer ``digests`` this machine holds no layer of."""
        from wanlab.backends.emulate import images
        return images.missing(self._images(), digests)

    def image_put(self, xfer: str, digest: str, data: bytes | None, last: bool) -> None:
        """The next piece of transfer ``xfer``: layer ``digest``'s tar stream; ``last``:
        it is whole (kept if its digest matches); ``data`` None: the sender gave up."""
        from wanlab.backends.emulate import images
        with self.lock:
            r = self.receiving.get(xfer)
            if r is None and data is not None:
                r = self.receiving[xfer] = images.Receiver(self._images(), digest)
        if r is None:
            return
        if data is None:
            self.receiving.pop(xfer, None)
            r.abort()
            return
        try:
            r.feed(data)
            if last:
                self.receiving.pop(xfer, None)
                r.finish()
        except BaseException:
            self.receiving.pop(xfer, None)
            r.abort()
            raise

    def image_adopt(self, record: dict[str, Any]) -> None:
        """Record an image over layers this machine received."""
        from wanlab.backends.emulate import images
        images.adopt(self._images(), record)

    def run_part(self, op: str, name: str, *args: Any) -> Any:
        """Run one life-cycle operation on this machine's share of an experiment."""
        from wanlab.cluster import part
        return part.operate(self.home, op, name, *args)


def agent(info: ClusterInfo, m: MachineInfo, home: str):
    """The machine's agent (created on first use, then found by name). Call inside
    :func:`wanlab.cluster.connect.session`."""
    import ray
    cls = ray.remote(num_cpus=0)(HostAgent)
    return cls.options(name=f"agent-{m.name}", lifetime="detached", get_if_exists=True,
                       max_concurrency=4, **pinned(m)).remote(
                           m.name, home, os.stat("/proc/self/ns/net").st_ino)


def machine_home(store_home: str, machine: str) -> str:
    """Where a machine keeps its share of the experiments. On the local test cluster the
    machines share this host's disk, so each gets a folder of the controller's store."""
    return os.path.join(store_home, "machines", machine)


class NoAgentHere(Exception):
    """No agent listens in that machine folder (not this host's, or an agent from before
    the socket): the caller goes through Ray. Nothing was sent."""


def call(home: str, op: str, name: str, *args: Any, timeout: float = 600.0) -> Any:
    """Part operation ``op`` through the agent's socket in machine folder ``home``; raises
    :class:`NoAgentHere` when nobody listens there."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(os.path.join(home, SOCKET))
        except OSError as e:
            raise NoAgentHere(str(e)) from None
        try:
            with sock.makefile("rwb") as f:
                f.write(json.dumps({"op": op, "name": name, "args": list(args)}).encode()
                        + b"\n")
                f.flush()
                line = f.readline()
        except OSError as e:
            raise WanlabError(f"the agent at {home}: {e}") from None
    if not line:
        raise WanlabError(f"the agent at {home} closed the connection")
    reply = json.loads(line)
    if not reply.get("ok"):
        raise WanlabError(reply["error"] if not reply.get("fault") else
                          f"a machine's agent failed: {reply['error']}")
    return reply["result"]
