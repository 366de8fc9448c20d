"""Terminals a machine's agent relays: a console on a node of a machine that is not the
controller's host.

On the local test cluster a node's namespaces are the host's, so the portal runs the
node's argv itself. A machine elsewhere runs the terminal in its agent instead: ``open``
starts the node's argv (the one ``wanlab shell`` runs) on a pseudo-terminal there, and the
controller then carries keys and output with ``io`` calls (one call sends keys and waits a
moment for output), ``resize`` and ``close``, through the agent as any part operation (its
socket or Ray). A terminal nobody has asked about for ``IDLE_S`` (its portal gone without
closing it) is ended at the agent's next console call.

:func:`attach` carries such a terminal to this process's own (``wanlab shell`` on a node
of a machine elsewhere).
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import select
import subprocess
import threading
import time
from dataclasses import dataclass, field

from wanlab.errors import WanlabError
from wanlab.run.terminal import set_size, start, stop

IDLE_S = 60.0
READ_MAX = 1 << 16
WAIT_MAX_S = 1.0


@dataclass
class _Terminal:
    proc: subprocess.Popen
    master: int
    used: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)          # reading
    write_lock: threading.Lock = field(default_factory=threading.Lock)
    ended: bool = False


_terminals: dict[str, _Terminal] = {}
_guard = threading.Lock()


def open_terminal(argv: list[str]) -> str:
    """Start ``argv`` on a new terminal here; returns its id."""
    _end_idle()
    proc, master = start(argv)
    tid = secrets.token_hex(8)
    with _guard:
        _terminals[tid] = _Terminal(proc, master)
    return tid


def io(tid: str, keys: str, wait_s: float) -> dict[str, object]:
    """Send ``keys`` (base64) to terminal ``tid``, then return what it wrote (base64),
    waiting up to ``wait_s`` for the first output; ``alive`` is false once it ended, and
    ``code`` is then its command's exit status. A call with ``wait_s`` 0 only writes, so
    a relay keeps one call waiting for output (it returns at the first byte: a key's echo)
    and sends each key as it comes by another."""
    t = _get(tid)
    t.used = time.monotonic()
    data = base64.b64decode(keys)
    with t.write_lock:
        while data and not t.ended:
            try:
                data = data[os.write(t.master, data):]
            except BlockingIOError:
                select.select([], [t.master], [], 0.1)
            except OSError:
                t.ended = True
    if wait_s <= 0:
        return {"out": "", "alive": not t.ended, "code": None}
    t.lock.acquire()
    try:
        out = b""
        ready, _, _ = select.select([t.master], [], [], min(wait_s, WAIT_MAX_S))
        while ready and not t.ended and len(out) < READ_MAX:
            try:
                chunk = os.read(t.master, READ_MAX)
            except BlockingIOError:
                break
            except OSError:         # EIO: everything on the terminal exited
                chunk = b""
            if not chunk:
                t.ended = True
            out += chunk
        alive = not t.ended
    finally:
        t.lock.release()
    if not alive:
        close(tid)
    return {"out": base64.b64encode(out).decode(), "alive": alive,
            "code": None if alive else t.proc.returncode}


def resize(tid: str, cols: int, rows: int) -> None:
    set_size(_get(tid).master, cols, rows)


def close(tid: str) -> None:
    """End terminal ``tid`` (its process group) and forget it; nothing if it is gone."""
    with _guard:
        t = _terminals.pop(tid, None)
    if t is not None:
        with t.lock:                    # not under a call still reading it
            stop(t.proc, t.master)


def _get(tid: str) -> _Terminal:
    with _guard:
        t = _terminals.get(tid)
    if t is None:
        raise WanlabError(f"no console {tid!r} on this machine (ended, or idle for more "
                          f"than {IDLE_S:g} s)")
    return t


def _end_idle() -> None:
    now = time.monotonic()
    with _guard:
        idle = [k for k, t in _terminals.items() if now - t.used > IDLE_S]
    for k in idle:
        close(k)


def attach(term, stdin: int = 0, stdout: int = 1, wait_s: float = 0.25) -> int:
    """Carry relayed terminal ``term`` (:class:`wanlab.cluster.control.Relayed`) to this
    process's: keys from ``stdin`` (in raw mode if it is a terminal, its size given to the
    far one), output to ``stdout`` by a thread that keeps one call waiting for it, until
    the far command ends; an end of ``stdin`` is sent as Ctrl-D. Returns the command's
    exit status."""
    import termios
    import tty
    saved = termios.tcgetattr(stdin) if os.isatty(stdin) else None
    ended = threading.Event()

    def output() -> None:
        try:
            alive = True
            while alive:
                out, alive = term.io(b"", wait_s)
                if out:
                    os.write(stdout, out)
        finally:
            ended.set()
    reader = threading.Thread(target=output, daemon=True)
    try:
        if saved is not None:
            tty.setraw(stdin)
            size = os.get_terminal_size(stdin)
            term.resize(size.columns, size.lines)
        reader.start()
        eof = False
        while not ended.is_set():
            if eof:
                ended.wait(0.1)
                continue
            if not select.select([stdin], [], [], 0.1)[0]:
                continue
            keys = os.read(stdin, 4096)
            if not keys:
                keys, eof = b"\x04", True
            with contextlib.suppress(WanlabError):      # ended meanwhile
                term.io(keys, 0.0)
    finally:
        if saved is not None:
            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        if not ended.is_set():
            term.close()
        reader.join(timeout=5)
    return term.code if term.code is not None else 1
