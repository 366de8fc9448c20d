"""The engine's control socket at the size of a large simulation: request lines far above
the old 16 MiB limit are read whole, and a client learns at once when the engine could not
read its line (an error reply without id), instead of waiting out its timeout."""

from __future__ import annotations

import json
import os
import socket
import threading

import pytest
from conftest import needs_root

from wanlab.backends.emulate import engine as eng
from wanlab.engine.client import Client, socket_of
from wanlab.errors import EngineError


@needs_root
def test_a_request_line_of_40_mb_is_read_and_answered(tmp_path):
    # (the apply of 100 000 simulated nodes is about 35 MB)
    proc = eng.start(str(tmp_path), seed=1)
    try:
        with Client(socket_of(str(tmp_path)), timeout=60) as c:
            with pytest.raises(EngineError, match="pad"):
                # read whole: refused for its unknown field, under its own id
                c.call("hello", pad="x" * (40 << 20))
            assert c.call("hello")["ok"]          # the connection is still usable
    finally:
        proc.kill()
        proc.wait()


def test_an_error_reply_without_id_fails_the_request_at_once(tmp_path):
    path = os.path.join(tmp_path, "fake.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)

    def serve():
        conn, _ = srv.accept()
        with conn, conn.makefile("rwb") as f:
            f.readline()
            # what the engine answers to a line it discards (too long, or not JSON)
            f.write(json.dumps({"id": None, "ok": False,
                                "error": "request line longer than 268435456 bytes; "
                                         "discarded"}).encode() + b"\n")
            f.flush()
            f.readline()        # no reply with the request's id ever comes

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        with Client(path, timeout=20) as c:
            with pytest.raises(EngineError, match="longer than"):
                c.call("apply", links=[])
    finally:
        srv.close()
