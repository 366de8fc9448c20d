"""Attaching to a cluster has a deadline: a head that accepts connections but never
answers (as a head on a machine loaded far beyond its cores may) gives a clear error in
time, and the command exits, where ``ray.init`` alone waits for ever."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT

pytestmark = pytest.mark.skipif(not __import__("importlib").util.find_spec("ray"),
                                reason="ray is installed by make install")

SILENT_HEAD = """
import socket, sys, threading
from wanlab.cluster import connect
from wanlab.cluster.info import ClusterInfo
from wanlab.errors import WanlabError
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
held = []
def accept():
    while True:
        held.append(s.accept()[0])      # accepted, never answered
threading.Thread(target=accept, daemon=True).start()
connect.DEADLINE_S = float(sys.argv[1])
info = ClusterInfo(id="dead", head="127.0.0.1:%d" % s.getsockname()[1], machines=(), local=True)
try:
    with connect.session(info):
        print("attached")
except WanlabError as e:
    print("error:", e)
    sys.exit(2)
"""


def test_a_head_that_never_answers_is_an_error_within_the_deadline():
    p = subprocess.run([sys.executable, "-c", SILENT_HEAD, "3"], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
    assert p.returncode == 2, p.stdout + p.stderr
    assert "error: the cluster's head at 127.0.0.1:" in p.stdout, p.stdout
    assert "did not answer within 3 s" in p.stdout, p.stdout
    assert "Traceback" not in p.stderr, p.stderr
