"""A node's shell in the browser: a pseudo-terminal bridged to a WebSocket.

The command is the one ``wanlab shell`` runs (``Lab.node_argv(name, node, [SHELL])``: the
node's namespaces and confinement), started by ``setsid -c`` so the terminal is the shell's
controlling terminal (job control, Ctrl-C). Frames from the page: binary or text = keys;
a text frame ``{"resize": [cols, rows]}`` sets the window size. Frames to the page: binary
terminal output. When the page goes away the shell's process group gets SIGHUP, then
SIGKILL, and is reaped; when the shell exits the socket closes.

A node of a cluster experiment: on the local test cluster its machine's agent gives the
argv and it runs here as above (the machines' namespaces are this host's); a machine
elsewhere runs the terminal itself and the portal relays it (:func:`relay`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading

from starlette.websockets import WebSocket, WebSocketDisconnect

from wanlab.errors import WanlabError
from wanlab.run.terminal import set_size, start, stop

SHELL = "/bin/bash"         # not the portal's $SHELL: what a node (its image) has
READ_CHUNK = 65536


async def bridge(ws: WebSocket, argv: list[str]) -> None:
    """Run ``argv`` on a terminal and carry bytes both ways until either side ends."""
    loop = asyncio.get_running_loop()
    proc, master = start(argv)
    out: asyncio.Queue[bytes | None] = asyncio.Queue()

    def readable() -> None:
        try:
            data = os.read(master, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:          # EIO: the shell and everything on the terminal exited
            data = b""
        if not data:
            loop.remove_reader(master)
            out.put_nowait(None)
        else:
            out.put_nowait(data)

    loop.add_reader(master, readable)

    async def to_page() -> None:
        while (data := await out.get()) is not None:
            await ws.send_bytes(data)

    async def from_page() -> None:
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                return
            data = msg.get("bytes")
            if data is None:
                text = msg.get("text") or ""
                if text.startswith('{"resize"'):
                    # a bad frame (1e999 columns: int() overflows) leaves the terminal as is
                    with contextlib.suppress(ValueError, TypeError, KeyError, OverflowError,
                                             OSError):
                        cols, rows = json.loads(text)["resize"]
                        set_size(master, cols, rows)
                    continue
                data = text.encode()
            with contextlib.suppress(BlockingIOError):
                os.write(master, data)

    tasks = [asyncio.create_task(to_page()), asyncio.create_task(from_page())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            loop.remove_reader(master)
        await asyncio.to_thread(stop, proc, master)
        with contextlib.suppress(Exception):
            await ws.close()


RELAY_WAIT_S = 0.25     # the longest one relayed call waits for output


class SharedSession:
    """One Ray session for every relayed console open in this process: the first to
    open enters it, the last to close leaves it (a session per console would end under
    the others: Ray's driver is the process's)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.stack: contextlib.ExitStack | None = None

    def enter(self, session) -> None:
        """``session``: a context manager that attaches to Ray (an ``OnCluster``)."""
        with self.lock:
            if self.users == 0:
                stack = contextlib.ExitStack()
                stack.enter_context(session)
                self.stack = stack
            self.users += 1

    def leave(self) -> None:
        with self.lock:
            self.users -= 1
            if self.users == 0 and self.stack is not None:
                self.stack.close()
                self.stack = None


RAY = SharedSession()


async def relay(ws: WebSocket, remote, then=lambda: None) -> None:
    """Carry a terminal a cluster machine's agent runs (``remote``:
    :class:`wanlab.cluster.control.Relayed`) to the page: one call at a time waits for
    its output (returning at the first byte), and each key from the page is sent by a call
    of its own, until the terminal ends or the page goes. Then, in a thread of its own (so
    a cancelled handler still does it), the terminal is closed and ``then`` called."""

    async def to_page() -> None:
        alive = True
        while alive:
            try:
                out, alive = await asyncio.to_thread(remote.io, b"", RELAY_WAIT_S)
            except WanlabError as e:            # the machine or its agent went away
                out, alive = f"\r\nwanlab: {e}\r\n".encode(), False
            if out:
                await ws.send_bytes(out)

    async def from_page() -> None:
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                return
            data = msg.get("bytes")
            if data is None:
                text = msg.get("text") or ""
                if text.startswith('{"resize"'):
                    with contextlib.suppress(ValueError, TypeError, KeyError, OverflowError,
                                             WanlabError):
                        cols, rows = json.loads(text)["resize"]
                        await asyncio.to_thread(remote.resize, int(cols), int(rows))
                    continue
                data = text.encode()
            try:        # only written: the waiting call brings the echo
                await asyncio.to_thread(remote.io, data, 0.0)
            except WanlabError:
                return                          # ended: to_page says why

    tasks = [asyncio.create_task(to_page()), asyncio.create_task(from_page())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        for t in tasks:
            t.cancel()
        threading.Thread(target=_end, args=(remote, then), daemon=True).start()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await ws.close()


def _end(remote, then) -> None:
    try:
        with contextlib.suppress(Exception):
            remote.close()
    finally:
        then()
