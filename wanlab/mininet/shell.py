"""A node's persistent shell, as Mininet has one: ``cd`` and variables persist between calls.

The shell is an interactive ``bash`` on a pseudo-terminal, in the node's network namespace
and cgroup (so teardown of the node's cgroup ends it and everything it started), with the
host's file system, as a Mininet host's shell is. Its prompt is a single DEL byte (0x7f):
the end of a command's output is the next prompt. Commands run by a Mininet script are the
script's own, run as root like the script itself; ``wanlab exec``/``shell`` keep their
confinement (docs/mininet.md).
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import termios
import time

SENTINEL = b"\x7f"


def pty_pair() -> tuple[int, int]:
    """A pseudo-terminal without echo or CR/LF translation: output reads as the program
    wrote it."""
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.ONLCR                       # oflag
    attrs[3] &= ~(termios.ECHO | termios.ICANON | termios.ECHOCTL)   # lflag
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    return master, slave



def readable(fd: int, timeout: float | None) -> bool:
    """Whether ``fd`` has something to read within ``timeout`` seconds (None: wait). By
    poll, not select: a network of a thousand hosts holds more than 1024 descriptors."""
    p = select.poll()
    p.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(p.poll(None if timeout is None else max(0, int(timeout * 1000))))

class Shell:
    """``bash`` inside a node; :meth:`send` a command, :meth:`read` its output."""

    def __init__(self, argv: list[str], name: str):
        self.master, slave = pty_pair()
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
               "HOME": os.environ.get("HOME", "/root"), "TERM": "dumb",
               "PS1": SENTINEL.decode(), "PS2": "", "HISTFILE": "/dev/null",
               "MININET_NODE": name}
        self.proc = subprocess.Popen(
            [*argv, "bash", "--norc", "--noprofile", "--noediting", "-i"],
            stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
            close_fds=True)
        os.close(slave)
        self.pid = self.proc.pid
        self.waiting = False
        self._buf = b""
        self.read_until_prompt(timeout=30.0)

    def fileno(self) -> int:
        return self.master

    def write(self, data: str) -> None:
        b = data.encode()
        while b:
            n = os.write(self.master, b)
            b = b[n:]

    def send(self, cmd: str) -> None:
        # a trailing empty line would print a second prompt
        self.write(cmd.rstrip("\n") + "\n")
        self.waiting = True

    def read_some(self, timeout: float | None) -> tuple[str, bool]:
        """What the shell has written within ``timeout`` (None: block until something is
        there), and whether the prompt came (the command is over)."""
        if not readable(self.master, timeout):
            return "", False
        try:
            data = os.read(self.master, 65536)
        except OSError:
            data = b""
        if not data:
            self.waiting = False
            return "", True
        done = SENTINEL in data
        if done:
            data = data.replace(SENTINEL, b"")
            self.waiting = False
        return data.decode(errors="replace"), done

    def read_until_prompt(self, timeout: float | None = None) -> str:
        out = []
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if end is None else max(0.0, end - time.monotonic())
            chunk, done = self.read_some(left if left is None else min(left, 1.0))
            out.append(chunk)
            if done:
                return "".join(out)
            if end is not None and time.monotonic() >= end:
                raise TimeoutError("no prompt from the node's shell")

    def interrupt(self) -> None:
        """^C to the command in progress."""
        self.write("\x03")

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.close(self.master)
        except OSError:
            pass
