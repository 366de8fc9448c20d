import math

import pytest

from wanlab.errors import SpecError
from wanlab.frontends import units


@pytest.mark.parametrize("s,bps", [
    ("10Mb", 10_000_000), ("1.5Mb", 1_500_000), ("100kb", 100_000), ("1Gb", 10**9),
    ("56kb", 56_000), ("10Mbps", 10_000_000), ("100kbps", 100_000), ("1000", 1000),
    ("1.5Gb", 1_500_000_000), ("10Mbit", 10_000_000), ("1MB", 8_000_000), (2000, 2000),
    ("0", 0), ("100Kb", 100_000),
])
def test_bandwidth(s, bps):
    assert units.parse_bandwidth(s) == bps


@pytest.mark.parametrize("s,sec", [
    ("20ms", 0.02), ("1.5s", 1.5), ("500us", 0.0005), ("10ns", 1e-8), ("2", 2.0),
    (0.5, 0.5), ("0ms", 0.0),
])
def test_delay(s, sec):
    assert math.isclose(units.parse_delay(s), sec)


@pytest.mark.parametrize("bad", ["10Xb", "fast", "", "-1Mb", "10 M b"])
def test_bad_bandwidth(bad):
    with pytest.raises(SpecError, match="bandwidth"):
        units.parse_bandwidth(bad, file="x.tcl", line=3)


def test_bad_delay_message_has_location_and_example():
    with pytest.raises(SpecError) as e:
        units.parse_delay("10parsecs", file="x.tcl", line=7)
    assert str(e.value).startswith("x.tcl:7: ") and "20ms" in str(e.value)


def test_loss():
    assert units.parse_loss("0.01") == 0.01
    assert units.parse_loss("1%") == 0.01
    for bad in ("1.5", "-0.1", "lots"):
        with pytest.raises(SpecError):
            units.parse_loss(bad)


def test_lan_half_composes():
    from wanlab.model.ir import lan_half
    d, half = lan_half(0.02, 0.19)
    assert d == 0.01 and math.isclose(1 - (1 - half) ** 2, 0.19)


@pytest.mark.parametrize("fn,bad,what", [
    (units.parse_bandwidth, "-5Mb", "bandwidth"), (units.parse_bandwidth, " -1", "bandwidth"),
    (units.parse_delay, "-10ms", "delay"), (units.parse_loss, "-0.1", "loss"),
])
def test_negative_values_are_refused_with_the_field(fn, bad, what):
    with pytest.raises(SpecError) as e:
        fn(bad, field="links.l0.ab")
    assert f"{what} '{bad}' is negative" in str(e.value) and "links.l0.ab" in str(e.value)


def test_bandwidth_zero_warns_unlimited():
    notes = []
    assert units.parse_bandwidth("0", warn=notes.append) == 0
    assert units.parse_bandwidth("0Mb", warn=notes.append) == 0
    assert len(notes) == 2 and all("unlimited" in n for n in notes)
    units.parse_bandwidth("10Mb", warn=notes.append)
    assert len(notes) == 2


def test_delay_without_unit_warns_seconds():
    notes = []
    assert units.parse_delay("20", warn=notes.append) == 20.0
    assert notes == ["delay 20 has no unit: ns-2 reads it as 20 seconds (write 20ms for "
                     "milliseconds)"]
    for ok in ("20ms", "0", "1.5s"):
        units.parse_delay(ok, warn=notes.append)
    assert len(notes) == 1


def test_small_plain_bandwidth_warns_bits():
    notes = []
    assert units.parse_bandwidth("100", warn=notes.append) == 100
    assert notes == ["bandwidth 100 has no unit: read as 100 bit/s (write 100Mb for Mbit/s)"]
    for ok in ("100Mb", "1000000", "56kb"):
        units.parse_bandwidth(ok, warn=notes.append)
    assert len(notes) == 1


def test_ns_script_gets_the_unit_warnings_with_lines(tcl):
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        $ns duplex-link $a $b 0 2 DropTail
        $ns run
    """)
    j = "\n".join(e.warnings)
    assert "t.tcl:5: bandwidth 0: 0 means unlimited" in j
    assert "t.tcl:5: delay 2 has no unit: ns-2 reads it as 2 seconds" in j
    with pytest.raises(SpecError, match=r"t.tcl:5: bandwidth '-5Mb' is negative"):
        tcl("set a [$ns node]\nset b [$ns node]\n$ns duplex-link $a $b -5Mb 1ms DropTail\n"
            "$ns run\n")
