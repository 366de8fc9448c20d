"""The clock probes of a cluster's host agents (``wanlab/cluster/clock.py``), on loopback:
the offset of a clock that runs ahead or behind is found within half the round trip."""

from __future__ import annotations

import socket

import pytest

from wanlab.cluster import clock


@pytest.mark.parametrize("skew_ms", [7.0, -3.0, 0.0])
def test_an_offset_clock_is_measured_within_half_the_round_trip(skew_ms):
    r = clock.Responder("127.0.0.1", 0, skew_ns=int(skew_ms * 1e6))
    try:
        got = clock.offset_to("127.0.0.1", r.port)
    finally:
        r.close()
    assert got is not None
    offset_ns, rtt_ns = got
    assert 0 < rtt_ns < 50e6
    assert abs(offset_ns - skew_ms * 1e6) <= rtt_ns / 2 + 0.2e6, (offset_ns, rtt_ns)


def test_no_answer_is_none_and_junk_gets_no_answer():
    r = clock.Responder("127.0.0.1", 0)
    port = r.port
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(0.3)
            s.connect(("127.0.0.1", port))
            for junk in (b"", b"x" * 12, b"nope" + bytes(8), b"y" * 64):
                s.send(junk)
            with pytest.raises(TimeoutError):
                s.recv(64)
        # and it still answers a probe after the junk
        assert clock.offset_to("127.0.0.1", port, probes=2) is not None
    finally:
        r.close()
    assert clock.offset_to("127.0.0.1", port, probes=3, timeout=0.05) is None
