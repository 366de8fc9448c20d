"""netem's impairments in virtual time: the engine does what the encoder asks, at the rates
asked (99 % binomial intervals; the 4-state chain's rate and loss runs against its
stationary values), and the same on any number of threads."""

import filecmp
import math

import pytest

from wanlab.backends.simulate.runner import simulate
from wanlab.frontends import load

# h0 - r0 - r1 - h1 with a long impaired middle link; 2 Mbit/s of 500-byte datagrams
# for 4 s: 2000 frames cross it each way they are sent
SPEC = """name: impsim
nodes:
  - {name: h0, kind: simulated}
  - {name: r0, kind: simulated}
  - {name: r1, kind: simulated}
  - {name: h1, kind: simulated}
links:
  # a trace with room for the stream, and a schedule of the middle's delay: the same on
  # any thread count too
  - {nodes: [h0, r0], bandwidth: 100Mb, delay: 1ms, ab: {bandwidth: {trace: fast.trace}}}
  - name: mid
    nodes: [r0, r1]
    bandwidth: 20Mb
    delay: 20ms
    jitter: {value: 2ms, distribution: pareto}
    duplicate: 5%
    corrupt: 2%
    reorder: {probability: 10%, gap: 2}
    loss: {model: gilbert-elliott, p: 1%, r: 25%, h: 0.1}
    ab: {schedule: {csv: delay.csv, interpolate: linear, loop: true}}
  - {nodes: [r1, h1], bandwidth: 100Mb, delay: 1ms}
agents:
  - {kind: Agent/UDP, node: h0, name: udp, peer: sink}
  - {kind: Agent/Null, node: h1, name: sink, peer: udp}
  - {kind: Application/Traffic/CBR, name: cbr, attached: udp,
     params: {packetSize_: 500, rate_: 2Mb}}
events:
  - {at: 0.5, target: cbr, action: start}
  - {at: 4.5, target: cbr, action: stop}
"""


def within(k: float, n: float, p: float, z: float = 2.576) -> bool:
    """k successes of n inside the 99 % normal interval of Binomial(n, p)."""
    return abs(k - n * p) <= z * math.sqrt(n * p * (1 - p)) + 1


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("impsim")
    (d / "exp.yaml").write_text(SPEC)
    # 36 Mbit/s in bursts: two opportunities each ms, four every third
    (d / "fast.trace").write_text("".join(f"{ms}\n" * (4 if ms % 3 == 0 else 2)
                                          for ms in range(1, 301)))
    (d / "delay.csv").write_text("time,delay\n0,18ms\n700ms,22ms\n1.3s,18ms\n")
    exp = load(str(d / "exp.yaml"))
    assert exp.links[0].ab.trace is not None and exp.links[1].ab.schedule is not None
    return {t: (simulate(exp, str(d / f"t{t}"), seed=5, threads=t), d / f"t{t}")
            for t in (1, 3)}


def test_rates_are_the_configured_ones(runs):
    s, _ = runs[1]
    c = s["links"]["mid"]["ab"]
    n = c["in_pkts"]
    assert 1900 <= n <= 2100, c
    # the loss stage sees every frame that crossed; duplication and corruption only those
    # it kept
    kept = n - c["drop_loss"]
    pi_bad = 0.01 / (0.01 + 0.25)
    assert within(c["drop_loss"], n, pi_bad * 0.9), c
    assert within(c["duplicated"], kept, 0.05), c
    assert within(c["corrupted"], kept, 0.02), c
    # reorder with gap 2: after each reordered frame one is always delayed, then each
    # frame goes first with 10 %: a renewal of mean 1 + 1/0.1 frames
    assert within(c["reordered"], n, 1 / 11), c
    # (the run ends as the source stops: the last ~25 ms of frames are still in flight)
    assert kept + c["duplicated"] - 100 <= c["out_pkts"] <= kept + c["duplicated"]


def test_same_result_on_any_thread_count(runs):
    (_, a), (_, b) = runs[1], runs[3]
    assert filecmp.cmp(a / "result.json", b / "result.json", shallow=False)


# a link whose a -> b capacity is a trace: 3, 0, 1, 2, 0 ... opportunities a millisecond,
# written here; 20 Mbit/s of 1000-byte frames saturate it (its mean is 14.4 Mbit/s)
TRACE_SPEC = """name: tracesim
nodes: [h0, h1]
links:
  - name: cell
    nodes: [h0, h1]
    bandwidth: 100Mb
    queue: {limit: 5000}
    ab: {bandwidth: {trace: small.trace}}
agents:
  - {kind: Agent/UDP, node: h0, name: udp, peer: sink}
  - {kind: Agent/Null, node: h1, name: sink, peer: udp}
  - {kind: Application/Traffic/CBR, name: cbr, attached: udp,
     params: {packetSize_: 958, rate_: 20Mb}}
events:
  - {at: 0.2, target: cell, action: trace, args: [start]}
  - {at: 0.1, target: cbr, action: start}
  - {at: 1.3, target: cbr, action: stop}
  - {at: 1.2, target: cell, action: trace, args: [stop]}
"""
PATTERN = [3, 0, 1, 2, 0]


def pcap_times(path):
    """(time ns, captured bytes) of each record of a nanosecond or microsecond pcap."""
    import struct
    data = path.read_bytes()
    magic = struct.unpack("<I", data[:4])[0]
    scale = 1 if magic == 0xA1B23C4D else 1000
    out, i = [], 24
    while i + 16 <= len(data):
        s, frac, incl, orig = struct.unpack("<IIII", data[i:i + 16])
        out.append((s * 1_000_000_000 + frac * scale, orig))
        i += 16 + incl
    return out


def test_trace_replay_delivers_the_capacity_every_100_ms(tmp_path):
    lines = [str(ms + 1) for ms in range(1000) for _ in range(PATTERN[ms % 5])]
    (tmp_path / "small.trace").write_text("\n".join(lines) + "\n")
    (tmp_path / "exp.yaml").write_text(TRACE_SPEC)
    exp = load(str(tmp_path / "exp.yaml"))
    simulate(exp, str(tmp_path / "out"), seed=1, threads=1)
    (pcap,) = (tmp_path / "out" / "traces").glob("cell-ab*.pcap")
    recs = pcap_times(pcap)
    # every frame leaves at an opportunity: a whole millisecond after the trace's start
    assert recs and all(t % 1_000_000 == 0 for t, _ in recs)
    # per 100 ms: 1500 bytes an opportunity (6 a 5 ms), within one frame
    bins = {}
    for t, n in recs:
        bins[t // 100_000_000] = bins.get(t // 100_000_000, 0) + n
    full = [b for k, b in sorted(bins.items()) if 3 <= k <= 10]
    cap = 100 // 5 * 6 * 1500
    assert len(full) == 8 and all(abs(b - cap) <= 1000 for b in full), (full, cap)


def test_a_schedule_changes_the_bandwidth_at_its_times(tmp_path):
    # 8 Mbit/s, 2 Mbit/s from 0.5 s, 4 Mbit/s from 0.8 s (looped every 1.2 s)
    (tmp_path / "bw.csv").write_text("time,bandwidth\n0,8Mb\n500ms,2Mb\n0.8,4Mb\n1.2,4Mb\n")
    spec = TRACE_SPEC.replace("ab: {bandwidth: {trace: small.trace}}",
                              "ab: {schedule: {csv: bw.csv, loop: true}}")
    (tmp_path / "exp.yaml").write_text(spec)
    simulate(load(str(tmp_path / "exp.yaml")), str(tmp_path / "out"), seed=1, threads=1)
    (pcap,) = (tmp_path / "out" / "traces").glob("cell-ab*.pcap")
    bins = {}
    for t, n in pcap_times(pcap):
        bins[t // 100_000_000] = bins.get(t // 100_000_000, 0) + n * 8 * 10   # bit/s
    got = [round(bins.get(k, 0) / 1e6, 1) for k in range(3, 12)]
    want = [8, 8, 2, 2, 2, 4, 4, 4, 4]
    assert all(abs(g - w) <= 0.1 for g, w in zip(got, want, strict=True)), got


def test_framing_overhead_and_cells_set_the_serialization(tmp_path):
    """netem's rate ... packetoverhead cellsize celloverhead: a saturated 8 Mbit/s
    direction sends a 1000-byte frame as (1000 + 24) bytes in 48-byte cells of 53 bytes
    on the wire: 22 cells, 1166 bytes, one frame every 1.166 ms."""
    spec = TRACE_SPEC.replace(
        "ab: {bandwidth: {trace: small.trace}}",
        "ab: {bandwidth: 8Mb, overhead: 24, cellsize: 48, cell_overhead: 5}")
    (tmp_path / "exp.yaml").write_text(spec)
    simulate(load(str(tmp_path / "exp.yaml")), str(tmp_path / "out"), seed=1, threads=1)
    (pcap,) = (tmp_path / "out" / "traces").glob("cell-ab*.pcap")
    times = [t for t, n in pcap_times(pcap) if n == 1000]
    gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False))
    assert len(gaps) > 500 and gaps[len(gaps) // 2] == 1_166_000, gaps[len(gaps) // 2]


# netem's 4-state model on one link: bursts (1 -> 3, ending with p31) and isolated losses
# (1 -> 4, then always a reception); 100-byte datagrams every 50 us for 3 s
STATE_SPEC = """name: statesim
nodes:
  - {name: h0, kind: simulated}
  - {name: h1, kind: simulated}
links:
  - name: mid
    nodes: [h0, h1]
    bandwidth: 100Mb
    delay: 5ms
    ab: {loss: {model: 4-state, p13: 2%, p31: 40%, p32: 0, p23: 1, p14: 1%}}
agents:
  - {kind: Agent/UDP, node: h0, name: udp, peer: sink}
  - {kind: Agent/Null, node: h1, name: sink, peer: udp}
  - {kind: Application/Traffic/CBR, name: cbr, attached: udp,
     params: {packetSize_: 100, rate_: 16Mb}}
events:
  - {at: 0.05, target: mid, action: trace, args: [start]}
  - {at: 0.1, target: cbr, action: start}
  - {at: 3.1, target: cbr, action: stop}
  - {at: 3.2, target: mid, action: trace, args: [stop]}
"""


def test_four_state_loss_rate_and_bursts_in_virtual_time(tmp_path):
    """The 4-state chain's stationary loss rate and its loss runs, read from the gaps
    between the frames a capture after the loss stage saw (constant spacing, no queue)."""
    (tmp_path / "exp.yaml").write_text(STATE_SPEC)
    s = simulate(load(str(tmp_path / "exp.yaml")), str(tmp_path / "out"), seed=3, threads=1)
    c = s["links"]["mid"]["ab"]
    n = c["in_pkts"]
    assert 59_000 <= n <= 61_000, c
    p13, p31, p14 = 0.02, 0.4, 0.01
    pi1 = 1 / (1 + p13 / p31 + p14)      # 3 is entered from 1 and left with p31; 4 for one
    rate = pi1 * (p13 / p31 + p14)
    assert abs(c["drop_loss"] / n - rate) <= 0.15 * rate, (c, rate)
    (pcap,) = (tmp_path / "out" / "traces").glob("mid-ab*.pcap")
    # the datagrams (not ARP), once the first ones held for ARP are through
    times = [t for t, size in pcap_times(pcap) if size == 142]
    times = [t for t in times if t >= times[0] + 20_000_000]
    gaps = [round((b - a) / 50_000) for a, b in zip(times, times[1:], strict=False)]
    assert min(gaps) == 1 and len(gaps) > 50_000, (min(gaps), len(gaps))
    runs = [g - 1 for g in gaps if g > 1]        # the lengths of the loss runs
    assert abs(sum(runs) / sum(gaps) - rate) <= 0.15 * rate, (sum(runs) / sum(gaps), rate)
    # a run starts from state 1 with p13 (a burst, geometric of mean 1 / p31) or p14 (one)
    mean = (p13 / p31 + p14) / (p13 + p14)
    single = (p13 * p31 + p14) / (p13 + p14)
    assert abs(sum(runs) / len(runs) - mean) <= 0.25, (sum(runs) / len(runs), mean)
    assert abs(runs.count(1) / len(runs) - single) <= 0.07, (runs.count(1) / len(runs))
    # runs of bursts reach well past what independent losses at that rate would give
    assert max(runs) >= 8, max(runs)
