"""Starting ``wanlab-engine`` for an experiment and talking to it (docs/engine-protocol.md).

Each experiment has its own engine process, so experiments share nothing:
a frame of one can never reach another's TAPs. The engine runs detached
from the CLI (its own session), logs to the experiment's folder and listens
on ``<folder>/engine.sock``.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import time
from typing import Any

from wanlab.engine.binary import engine_binary
from wanlab.errors import EngineError

def start(folder: str, seed: int) -> subprocess.Popen:
    """Spawn the engine; returns once its socket answers ``hello``."""
    sock = os.path.join(folder, "engine.sock")
    if os.path.exists(sock):
        os.unlink(sock)
    log = open(os.path.join(folder, "engine.log"), "ab")
    proc = subprocess.Popen([engine_binary(), "--socket", sock, "--seed", str(seed)],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            start_new_session=True, close_fds=True, umask=0o077)
    log.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EngineError(f"the engine exited at start (code {proc.returncode}); see "
                              f"{os.path.join(folder, 'engine.log')}")
        if os.path.exists(sock):
            try:
                with Client(sock) as c:
                    c.call("hello")
                return proc
            except (OSError, EngineError):
                pass
        time.sleep(0.005)
    proc.kill()
    raise EngineError("the engine did not answer within 10 s")


class Client:
    """A connection to an engine's control socket: one JSON request, one JSON reply."""

    def __init__(self, path: str, timeout: float = 30.0):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
        except OSError as e:
            self.sock.close()
            raise EngineError(f"cannot reach the engine at {path}: {e.strerror}") from None
        self.file = self.sock.makefile("rwb")
        self.ids = itertools.count(1)

    def call(self, cmd: str, **args: Any) -> dict[str, Any]:
        """Send one request; return the reply, or raise EngineError with the engine's message."""
        rid = next(self.ids)
        self.file.write(json.dumps({"id": rid, "cmd": cmd, **args}).encode() + b"\n")
        self.file.flush()
        while True:
            line = self.file.readline()
            if not line:
                raise EngineError(f"the engine closed the connection during {cmd!r}")
            reply = json.loads(line)
            if reply.get("id") == rid:
                break           # anything else is a pushed event for a subscriber
        if not reply.get("ok"):
            raise EngineError(f"engine refused {cmd}: {reply.get('error', 'no reason given')}")
        return reply

    def close(self) -> None:
        try:
            self.file.close()
        finally:
            self.sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
