"""Talking to an experiment's event scheduler: tevc and event subscription."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

from wanlab.errors import WanlabError


class EventClient:
    """A connection to ``<folder>/events.sock`` (waits up to ``wait_s`` for it to appear)."""

    def __init__(self, folder: str, wait_s: float = 10.0,
                 alive: Callable[[], bool] | None = None):
        """``alive``: whether the scheduler process still lives (no waiting for a dead one)."""
        path = os.path.join(folder, "events.sock")
        deadline = time.monotonic() + wait_s
        refused_until = None
        while True:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self.sock.connect(path)
                break
            except OSError as e:
                self.sock.close()
                # a socket file nobody listens on: the scheduler died (or is between bind
                # and listen, which takes far less than a second): do not wait it out
                if isinstance(e, ConnectionRefusedError) and refused_until is None:
                    refused_until = time.monotonic() + 1.0
                if time.monotonic() > min(deadline, refused_until or deadline) or (
                        alive is not None and not alive()):
                    raise WanlabError("the experiment's event scheduler is not running (see "
                                      f"{os.path.join(folder, 'scheduler.log')})") from None
                time.sleep(0.02)
        self.file = self.sock.makefile("rwb")

    def request(self, req: dict[str, Any]) -> dict[str, Any]:
        self.file.write(json.dumps(req).encode() + b"\n")
        self.file.flush()
        line = self.file.readline()
        if not line:
            raise WanlabError("the event scheduler closed the connection")
        return json.loads(line)

    def event(self, time_spec: str, target: str, action: str, args: list[str],
              wait: bool = False) -> dict[str, Any]:
        reply = self.request({"cmd": "event", "time": time_spec, "target": target,
                              "action": action, "args": args, "wait": wait})
        if "error" in reply and not reply.get("ok"):
            raise WanlabError(reply["error"])
        return reply

    def follow(self) -> Iterator[dict[str, Any]]:
        reply = self.request({"cmd": "subscribe"})
        if not reply.get("ok"):
            raise WanlabError(reply.get("error", "subscribe refused"))
        for line in self.file:
            yield json.loads(line)

    def close(self) -> None:
        try:
            self.file.close()
        finally:
            self.sock.close()

    def __enter__(self) -> "EventClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
