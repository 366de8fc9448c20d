"""netem's impairments in virtual time: the engine does what the encoder asks, at the rates
asked (99 % binomial intervals), and the same on any number of threads."""

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
  - {nodes: [h0, r0], bandwidth: 100Mb, delay: 1ms}
  - name: mid
    nodes: [r0, r1]
    bandwidth: 20Mb
    delay: 20ms
    jitter: {value: 2ms, distribution: pareto}
    duplicate: 5%
    corrupt: 2%
    reorder: {probability: 10%, gap: 2}
    loss: {model: gilbert-elliott, p: 1%, r: 25%, h: 0.1}
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
    exp = load(str(d / "exp.yaml"))
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
