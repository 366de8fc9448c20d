"""Unprivileged checks of the bench's statistics and report rendering
(run with `python3 -m pytest bench/test_bench_math.py`)."""

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import measure as M  # noqa: E402
import report  # noqa: E402


def test_binom_interval_matches_normal_approx():
    lo, hi = M.binom_interval(100_000, 0.008)
    mean, sd = 800, math.sqrt(100_000 * 0.008 * 0.992)
    assert abs(lo - (mean - 2.576 * sd)) <= 2
    assert abs(hi - (mean + 2.576 * sd)) <= 2
    assert M.binom_interval(0, 0.1) == (0, 0)


def test_binom_interval_coverage_tail():
    # the 99 % interval must be wider than the 90 % one
    a = M.binom_interval(200_000, 0.12, 0.99)
    b = M.binom_interval(200_000, 0.12, 0.90)
    assert a[0] < b[0] and a[1] > b[1]


def test_payload_for_frame():
    assert M.payload_for_frame(64) == 22
    assert M.payload_for_frame(1518) == 1476


def test_markdown_renders_all_sections():
    res = {
        "meta": {"quick": True, "loadavg_start": [1.0], "loadavg_end": [2.0]},
        "delay": [{"path": "engine", "delay_ms": 0, "frame": 64, "rtt_us": 30.0, "stdev_us": 5.0,
                   "adj_rtt_us": 0.0, "base_goal": True, "veth_rtt_us": 28.0},
                  {"path": "engine", "delay_ms": 5, "frame": 64, "rtt_us": 10030.0, "stdev_us": 5.0,
                   "error_pct": 0.3, "adj_rtt_us": 10000.0, "adj_error_pct": 0.0, "goal": True}],
        "bandwidth": [{"rate_bps": 56e3, "frame": 64, "offered_bps": 57e3, "measured_bps": 56e3,
                       "error_pct": 0.0,
                       "engine_bps": 56e3, "engine_error_pct": 0.0, "goal": True}],
        "loss": [{"p": 0.008, "frame": 64, "expected": 100000, "lost": 800, "measured": 0.008,
                  "lo": 0.0073,
                  "hi": 0.0087, "inside": True, "engine_measured": 0.008, "engine_inside": True,
                  "engine_drop_queue": 0}],
        "capacity": [{"path": "veth", "pps_median": 2e5, "tx_pps_median": 2e5, "loss_median": 0.0,
                      "ratio_veth": 1.0, "ratio_router": 1.2}],
        "tcp": [{"path": "veth", "parallel": 1, "bps_median": 1e10, "ratio_veth": 1.0,
                 "ratio_router": None}],
        "scale": {"links": 1000, "taps": 2000, "active": 10, "idle_cpu_pct": 0.0,
                  "idle_goal": True},
        "errors": ["x: y"],
    }
    md = report.markdown(res)
    for h in ["## Delay", "## Bandwidth", "## Loss", "## Capacity", "## TCP", "## Scale",
              "## Errors"]:
        assert h in md
    assert "| engine | 1000 | 5 | 64 | 10.0300 |" in md
    assert "56 kbit/s" in md


def test_payload_for_frame_over_ipv6_and_hostport():
    assert M.payload_for_frame(82, ipv6=True) == 20
    assert M.payload_for_frame(1518, ipv6=True) == 1456
    assert M.hostport("fd77::2", 5) == "[fd77::2]:5"
    assert M.hostport("10.77.0.2", 5) == "10.77.0.2:5"


def test_low_rate_rows_hold_the_base_and_delay_goals():
    import fidelity
    ping = {"rtt_avg_us": 110.0, "rtt_stdev_us": 9.0, "rtt_p50_us": 105.0, "rtt_min_us": 90.0,
            "rtt_max_us": 150.0, "lost": 0, "rtt_n": 10}
    base = fidelity.low_rate_row(ping, 0, 64, 5, None, {"rtt_avg_us": 70.0})
    assert base["rate_pps"] == 5 and base["veth_rtt_us"] == 70.0
    assert base["base_goal"] is False       # 40 us over veth at the same rate
    far = dict(ping, rtt_avg_us=20_110.0 + 60)
    row = fidelity.low_rate_row(far, 10, 64, 5, 110.0, None)
    assert row["adj_error_us"] == 60.0 and row["goal"] is True   # 60 us <= 0.5 % of 20 ms
    late = dict(ping, rtt_avg_us=20_110.0 + 101)
    assert fidelity.low_rate_row(late, 10, 64, 5, 110.0, None)["goal"] is False
    # no base measured: no adjusted error, no goal claimed
    assert "goal" not in fidelity.low_rate_row(far, 10, 64, 5, None, None)


def test_low_rate_rows_note_the_relay_and_render_side_by_side():
    import fidelity
    ping = {"rtt_avg_us": 110.0, "rtt_stdev_us": 9.0, "rtt_p50_us": 105.0, "rtt_min_us": 90.0,
            "rtt_max_us": 150.0, "lost": 0, "rtt_n": 10}
    base = fidelity.low_rate_row(ping, 0, 64, 5, None, {"rtt_avg_us": 70.0},
                                 {"rtt_avg_us": 100.0})
    assert base["relay_rtt_us"] == 100.0 and base["base_goal"] is False
    base["wakeups_per_rtt"] = 2.0
    far = fidelity.low_rate_row(dict(ping, rtt_avg_us=20_140.0), 10, 64, 5, 110.0, None)
    far["wakeups_per_rtt"] = 4.0
    rows = [{"path": "veth", "delay_ms": 0, "frame": 64, "rate_pps": 5, "rtt_us": 70.0},
            {"path": "relay", "delay_ms": 0, "frame": 64, "rate_pps": 5, "rtt_us": 100.0},
            base, far]
    md = "\n".join(report.low_rate_table(rows))
    assert "| 5 | 70.0 | 100.0 | 110.0 | 10.0 | 2.0 | 30.0 | 4.0 |" in md
    assert report.low_rate_table([{"path": "engine", "delay_ms": 0, "rtt_us": 1.0}]) == []
