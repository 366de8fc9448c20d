"""A command on a new pseudo-terminal: what a node's console runs (the portal's, here or
relayed by a cluster machine's agent).

The command is started by ``setsid -c`` so the terminal is its controlling terminal (job
control, Ctrl-C). Ending it gives its process group SIGHUP, then SIGKILL, and reaps it.
It gets a clean environment (:data:`CLEAN_ENV`), never its starter's: the portal's or an
agent's variables are not the console user's to read.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import signal
import struct
import subprocess
import termios

# all a console's shell gets of its starter's environment
CLEAN_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "HOME": "/root", "LANG": "C.UTF-8", "TERM": "xterm-256color"}


def set_size(fd: int, cols: int, rows: int) -> None:
    """The terminal's window size (clamped to sane bounds)."""
    cols, rows = max(10, min(int(cols), 1000)), max(2, min(int(rows), 500))
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def start(argv: list[str]) -> tuple[subprocess.Popen, int]:
    """Start ``argv`` on a new pseudo-terminal; returns the process and the master fd
    (non-blocking)."""
    master, slave = pty.openpty()
    try:
        set_size(master, 100, 30)
        env = dict(CLEAN_ENV)
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
    """End the command's session (its process group) and reap it; blocking, at most
    ~2 s."""
    with contextlib.suppress(OSError):
        os.close(master)
    for sig, wait_s in ((signal.SIGHUP, 1.0), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait_s)
