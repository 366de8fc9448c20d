"""The one JSON-lines client: one JSON object per line over a Unix stream socket.

:class:`LineSocket` is the transport (connect, optionally waiting for the socket to
appear; write one object; read one). :class:`Client` speaks the engine's protocol on it
(request ids, replies, errors as :class:`~wanlab.errors.EngineError`); the event
scheduler's client (:mod:`wanlab.run.client`) uses the same transport.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any, Self

from wanlab.engine.protocol import Request
from wanlab.errors import EngineError, WanlabError


class LineSocket:
    """A connection to ``path``; ``wait_s`` > 0 waits that long for the socket to accept.

    Failures raise ``error`` (a WanlabError subclass) with ``unreachable`` as the message
    when the socket cannot be reached."""

    def __init__(self, path: str, *, timeout: float | None = None, wait_s: float = 0.0,
                 error: type[WanlabError] = EngineError, unreachable: str | None = None,
                 alive: Callable[[], bool] | None = None):
        """``alive``: whether the server process still lives (no waiting for a dead one)."""
        self.path, self.error = path, error
        deadline = time.monotonic() + wait_s
        refused_until = None
        while True:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            try:
                self.sock.connect(path)
                break
            except OSError as e:
                self.sock.close()
                # a socket file nobody listens on: the server died (or is between bind
                # and listen, which takes far less than a second): do not wait it out
                if isinstance(e, ConnectionRefusedError) and refused_until is None:
                    refused_until = time.monotonic() + 1.0
                if time.monotonic() >= min(deadline, refused_until or deadline) or (
                        alive is not None and not alive()):
                    raise error(unreachable or f"cannot reach the engine at {path}: "
                                f"{e.strerror or e}") from None
                time.sleep(0.02)
        self.file = self.sock.makefile("rwb")

    def write(self, obj: dict[str, Any]) -> None:
        self.file.write(json.dumps(obj).encode() + b"\n")
        self.file.flush()

    def read(self) -> dict[str, Any] | None:
        """The next object, or None when the peer closed the connection."""
        line = self.file.readline()
        return json.loads(line) if line else None

    def objects(self) -> Iterator[dict[str, Any]]:
        for line in self.file:
            yield json.loads(line)

    def close(self) -> None:
        try:
            self.file.close()
        finally:
            self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Client(LineSocket):
    """A connection to an engine's control socket: one request, one reply."""

    def __init__(self, path: str, timeout: float = 30.0):
        super().__init__(path, timeout=timeout, error=EngineError)
        self.ids = itertools.count(1)

    def send(self, req: Request) -> dict[str, Any]:
        """Send a typed request; return the reply, or raise EngineError with the engine's
        message."""
        body = req.to_json()
        return self.call(body.pop("cmd"), **body)

    def send_all(self, reqs: list[Request]) -> None:
        for r in reqs:
            self.send(r)

    def call(self, cmd: str, **args: Any) -> dict[str, Any]:
        """Any request by name (docs/engine-protocol.md)."""
        rid = next(self.ids)
        self.write({"id": rid, "cmd": cmd, **args})
        while True:
            reply = self.read()
            if reply is None:
                raise EngineError(f"the engine closed the connection during {cmd!r}")
            if reply.get("id") == rid:
                break
            if "ok" in reply and reply.get("id") is None:
                # a line the engine could not read (too long, not JSON) has no id: it was
                # this request's, and no reply with its id will come
                raise EngineError(f"engine refused {cmd}: {reply.get('error', 'no reason')}")
            # anything else is a pushed event for a subscriber
        if not reply.get("ok"):
            raise EngineError(f"engine refused {cmd}: {reply.get('error', 'no reason given')}")
        return reply

    def __enter__(self) -> Self:
        return self


def socket_of(folder: str) -> str:
    """The engine socket of the experiment in ``folder``."""
    return os.path.join(folder, "engine.sock")
