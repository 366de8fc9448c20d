"""The terminal a cluster machine's agent relays (wanlab/cluster/console.py), driven here
as the controller drives it through the agent: keys in, output back, the size, the end and
its exit status, and the relay to this process's own terminal (``wanlab shell``). No Ray
and no root: a real shell on a real pseudo-terminal."""

from __future__ import annotations

import base64
import os

import pytest

from wanlab.cluster import console
from wanlab.errors import WanlabError


class Here:
    """What :class:`wanlab.cluster.control.Relayed` does through an agent, in-process."""

    def __init__(self, argv):
        self.tid = console.open_terminal(argv)
        self.code = None

    def io(self, keys: bytes, wait_s: float):
        r = console.io(self.tid, base64.b64encode(keys).decode(), wait_s)
        self.code = r["code"]
        return base64.b64decode(r["out"]), r["alive"]

    def resize(self, cols, rows):
        console.resize(self.tid, cols, rows)

    def close(self):
        console.close(self.tid)


def read_until(term, text: bytes, keys: bytes = b"") -> bytes:
    got, alive = term.io(keys, 1.0)
    for _ in range(50):
        if text in got or not alive:
            break
        more, alive = term.io(b"", 1.0)
        got += more
    return got


def test_keys_go_in_output_comes_back_and_the_end_is_reported_with_its_status():
    term = Here(["/bin/sh"])
    term.resize(91, 33)
    got = read_until(term, b"33 91\r\n", b"stty size\n")
    assert b"33 91\r\n" in got, got
    got, alive = term.io(b"exit 7\n", 1.0)
    while alive:
        more, alive = term.io(b"", 1.0)
        got += more
    assert term.code == 7
    # ended and forgotten: a further call is refused by name, a close is nothing
    with pytest.raises(WanlabError, match="no console"):
        term.io(b"", 0.1)
    term.close()


def test_a_terminal_left_idle_is_ended_at_the_next_call(monkeypatch):
    left = Here(["/bin/sh"])
    proc = console._terminals[left.tid].proc
    monkeypatch.setattr(console, "IDLE_S", 0.0)
    other = Here(["/bin/sh"])           # opening one ends the idle ones
    assert proc.poll() is not None and left.tid not in console._terminals
    monkeypatch.setattr(console, "IDLE_S", 60.0)
    other.close()


def test_attach_carries_a_pipe_to_the_terminal_and_returns_the_far_status():
    keys_r, keys_w = os.pipe()
    out_r, out_w = os.pipe()
    os.write(keys_w, b"echo $((6 * 7))\nexit 3\n")
    os.close(keys_w)
    code = console.attach(Here(["/bin/sh"]), stdin=keys_r, stdout=out_w, wait_s=0.2)
    os.close(out_w)
    shown = b""
    while chunk := os.read(out_r, 4096):
        shown += chunk
    os.close(keys_r)
    os.close(out_r)
    assert code == 3
    assert b"42\r\n" in shown, shown
