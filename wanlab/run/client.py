"""Talking to an experiment's event scheduler: tevc and event subscription.

The scheduler's socket uses the engine client's JSON-lines transport
(:class:`wanlab.engine.client.LineSocket`); events travel typed (IR Event JSON).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any, Self

from wanlab.engine.client import LineSocket
from wanlab.errors import WanlabError
from wanlab.model.ir import Event


def events_socket(folder: str) -> str:
    """The event scheduler's socket of the experiment in ``folder``."""
    return os.path.join(folder, "events.sock")


class EventClient(LineSocket):
    """A connection to ``<folder>/events.sock`` (waits up to ``wait_s`` for it to appear)."""

    def __init__(self, folder: str, wait_s: float = 10.0,
                 alive: Callable[[], bool] | None = None):
        """``alive``: whether the scheduler process still lives (no waiting for a dead one)."""
        super().__init__(events_socket(folder), wait_s=wait_s, error=WanlabError,
                         unreachable="the experiment's event scheduler is not running (see "
                                     f"{os.path.join(folder, 'scheduler.log')})", alive=alive)

    def request(self, req: dict[str, Any]) -> dict[str, Any]:
        self.write(req)
        reply = self.read()
        if reply is None:
            raise WanlabError("the event scheduler closed the connection")
        return reply

    def event(self, time_spec: str, event: Event, wait: bool = False,
              origin: str = "tevc") -> dict[str, Any]:
        """Schedule a typed event at ``time_spec`` (now, +S, S); ``origin`` as the log
        says it (``sequence``: a step of a sequence played from outside)."""
        reply = self.request({"cmd": "event", "time": time_spec, "event": event.to_json(),
                              "wait": wait, **({"origin": origin} if origin != "tevc"
                                               else {})})
        if "error" in reply and not reply.get("ok"):
            raise WanlabError(reply["error"])
        return reply

    def follow(self) -> Iterator[dict[str, Any]]:
        reply = self.request({"cmd": "subscribe"})
        if not reply.get("ok"):
            raise WanlabError(reply.get("error", "subscribe refused"))
        yield from self.objects()

    def __enter__(self) -> Self:
        return self
