"""A node's shell in the browser: a pseudo-terminal bridged to a WebSocket.

The command is the one ``wanlab shell`` runs (``Lab.node_argv(name, node, [$SHELL])``: the
node's namespaces and confinement), started by ``setsid -c`` so the terminal is the shell's
controlling terminal (job control, Ctrl-C). Frames from the page: binary or text = keys;
a text frame ``{"resize": [cols, rows]}`` sets the window size. Frames to the page: binary
terminal output. When the page goes away the shell's process group gets SIGHUP, then
SIGKILL, and is reaped; when the shell exits the socket closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import pty
import signal
import struct
import subprocess
import termios

from starlette.websockets import WebSocket, WebSocketDisconnect

SHELL = os.environ.get("SHELL", "/bin/bash")
READ_CHUNK = 65536


def _set_size(fd: int, cols: int, rows: int) -> None:
    cols, rows = max(10, min(int(cols), 1000)), max(2, min(int(rows), 500))
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def start(argv: list[str]) -> tuple[subprocess.Popen, int]:
    """Start ``argv`` on a new pseudo-terminal; returns the process and the master fd."""
    master, slave = pty.openpty()
    try:
        _set_size(master, 100, 30)
        env = {**os.environ, "TERM": "xterm-256color"}
        proc = subprocess.Popen(["setsid", "-c", *argv], stdin=slave, stdout=slave,
                                stderr=slave, env=env, close_fds=True)
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    os.set_blocking(master, False)
    return proc, master


def stop(proc: subprocess.Popen, master: int) -> None:
    """End the shell's session (its process group) and reap it; blocking, at most ~2 s."""
    with contextlib.suppress(OSError):
        os.close(master)
    for sig, wait_s in ((signal.SIGHUP, 1.0), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait_s)


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
                    with contextlib.suppress(ValueError, TypeError, KeyError, OSError):
                        cols, rows = json.loads(text)["resize"]
                        _set_size(master, cols, rows)
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
