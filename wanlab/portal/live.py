"""The live view's stream: once a second, an experiment's engine statistics, its state and
the event-log rows written since the last message, as one JSON message on a WebSocket.

The engine's counters are cumulative (docs/engine-protocol.md, *Statistics*); the page turns
two samples into rates (utilisation, drops per second). One engine connection serves a
stream for its whole life; blocking calls (engine socket, store) run in a worker thread so
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
import json
import time
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocket, WebSocketDisconnect

from wanlab import site as sites
from wanlab.engine.client import Client, socket_of
from wanlab.errors import WanlabError
from wanlab.lifecycle import ACTIVE
from wanlab.store.db import Store

INTERVAL_S = 1.0
STAT_KEYS = ("links", "lans", "routers", "hosts", "agents")


class Sampler:
    """Reads one experiment's state, statistics and new events; lives in worker threads
    (its store connection may be used from any one thread at a time)."""

    def __init__(self, home: str, name: str):
        self.home, self.name = home, name
        self.store: Store | None = None
        self.client: Client | None = None
        self.last_event = 0
        self.cluster: Any = None            # the cluster's control, for a cluster experiment
        self.seen: set[tuple[str, int]] = set()

    def sample(self) -> dict[str, Any]:
        if self.store is None:
            self.store = Store(self.home, shared=True, create=False)
        store = self.store
        row = store.find(self.name)
        if row is None:
            return {"state": "terminated", "at": time.time()}
        msg: dict[str, Any] = {"state": row.state, "error": row.error, "at": time.time()}
        if self.cluster is not None or sites.placed(store, row.name):
            return self._sample_cluster(row, msg)
        if row.state == ACTIVE:
            try:
                if self.client is None:
                    self.client = Client(socket_of(store.folder(row.name)), timeout=5)
                stats = self.client.call("stats")
                msg.update({k: stats.get(k, {}) for k in STAT_KEYS})
                msg["now_ns"] = stats.get("now_ns")
            except (WanlabError, OSError) as e:
                self._drop_client()
                msg["stats_error"] = str(e)
        else:
            self._drop_client()
        rows = store.db.execute(
            "SELECT * FROM event_log WHERE exp_id = ? AND id > ? ORDER BY id DESC LIMIT 200",
            (row.id, self.last_event)).fetchall()
        if rows:
            self.last_event = rows[0]["id"]
        msg["events"] = [{**dict(r), "args": json.loads(r["args"])} for r in reversed(rows)]
        return msg

    def _sample_cluster(self, row: Any, msg: dict[str, Any]) -> dict[str, Any]:
        from wanlab.lifecycle import Lab
        if self.cluster is None:
            self.cluster = sites.of(Lab(self.home, create=False), row.name)
        msg["events"] = []
        if row.state != ACTIVE:
            return msg
        try:
            stats = self.cluster.stats(row.name)
            msg.update({k: stats.get(k, {}) for k in STAT_KEYS})
            log = self.cluster.events(row.name)
        except WanlabError as e:
            msg["stats_error"] = str(e)
            return msg
        new = [e for e in log if (e["machine"], e["id"]) not in self.seen]
        self.seen.update((e["machine"], e["id"]) for e in new)
        msg["events"] = new[-200:]
        return msg

    def _drop_client(self) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.close()
            self.client = None

    def close(self) -> None:
        self._drop_client()
        if self.cluster is not None:
            self.cluster.lab.close()
        if self.store is not None:
            self.store.close()


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
