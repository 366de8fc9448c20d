"""The live view's stream: once a second, an experiment's engine statistics, its state and
the event-log rows written since the last message, as one JSON message on a WebSocket.

The engine's counters are cumulative (docs/engine-protocol.md, *Statistics*); the page turns
two samples into rates (utilisation, drops per second). With them come the links' and LANs'
values in force (changed at run time by tevc, the timeline or a link change; the configured
value where it differs), as ``wanlab show`` prints them. Both come from the experiment's
site (:mod:`wanlab.site`); blocking calls (engine sockets, store) run in a worker thread so
the server's event loop never waits on them. The stream ends when the page goes away; while
the experiment is not active it still reports the state (and no statistics), so a page
sees a swap-in or swap-out happen.

A cluster experiment's sample is every machine's (its site, :mod:`wanlab.site`): its
engines' counters merged (a cut link's direction from the machine that shapes it) and the
new rows of every machine's log, each naming its machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocket, WebSocketDisconnect

from wanlab import site as sites
from wanlab.errors import WanlabError
from wanlab.lifecycle import ACTIVE, Lab

INTERVAL_S = 1.0
STAT_KEYS = ("links", "lans", "routers", "hosts", "agents")
MAX_EVENTS = 200        # rows in one message (a page opened late gets the latest)


class Sampler:
    """Reads one experiment's state, statistics, values in force and new events; lives in
    worker threads (its store connection may be used from any one thread at a time).
    Statistics and values in force come from the experiment's site, so this host's and a
    cluster's experiments answer alike."""

    def __init__(self, home: str, name: str):
        self.home, self.name = home, name
        self.lab: Lab | None = None
        self.site: Any = None
        self.last_state: str | None = None
        self.seen: set[tuple[str | None, int]] = set()      # (machine, id) of rows sent

    def sample(self) -> dict[str, Any]:
        if self.lab is None:
            self.lab = Lab(self.home, create=False, shared=True)
        store = self.lab.store
        row = store.find(self.name)
        if row is None:
            return {"state": "terminated", "at": time.time()}
        if self.site is None:
            self.site = sites.of(self.lab, row.name)
        msg: dict[str, Any] = {"state": row.state, "error": row.error, "at": time.time(),
                               "events": []}
        if row.state == ACTIVE:
            try:
                stats = self.site.stats(row.name)
                msg.update({k: stats.get(k, {}) for k in STAT_KEYS})
                # the engine's clock for rates; a cluster's engines have one each: this
                # sampler's then (every machine is asked at once)
                msg["now_ns"] = stats.get("now_ns") or time.monotonic_ns()
                msg["in_force"] = self.site.in_force(row.name)
            except (WanlabError, OSError) as e:
                msg["stats_error"] = str(e)
        # the log's new rows (a cluster's: every machine's, each naming its machine), while
        # it runs and once more when its state changes (the rows a swap-out wrote)
        if row.state == ACTIVE or row.state != self.last_state:
            with contextlib.suppress(WanlabError):
                msg["events"] = self._new_events(row.name)
        self.last_state = row.state
        return msg

    def _new_events(self, name: str) -> list[dict[str, Any]]:
        """The rows of the experiment's log (its latest run's) not sent yet."""
        new = [e for e in self.site.events(name)
               if (e.get("machine"), e["id"]) not in self.seen]
        self.seen.update((e.get("machine"), e["id"]) for e in new)
        return new[-MAX_EVENTS:]

    def close(self) -> None:
        if self.lab is not None:
            self.lab.close()


async def stream(ws: WebSocket, home: str, name: str,
                 interval_s: float = INTERVAL_S) -> None:
    """Send a sample every ``interval_s`` until the peer goes away."""
    sampler = Sampler(home, name)
    gone = asyncio.Event()

    async def watch() -> None:
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):
            while True:
                await ws.receive_text()
        gone.set()

    watcher = asyncio.create_task(watch())
    try:
        while not gone.is_set():
            started = time.monotonic()
            msg = await run_in_threadpool(sampler.sample)
            try:
                await ws.send_json(msg)
            except (WebSocketDisconnect, RuntimeError):
                break
            if msg["state"] == "terminated":
                break
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(gone.wait(),
                                       max(0.05, interval_s - (time.monotonic() - started)))
    finally:
        watcher.cancel()
        await run_in_threadpool(sampler.close)
        with contextlib.suppress(Exception):
            await ws.close()
