"""An experiment whose real-time engine runs on two partitions (``engine_threads=2``).

A 3-node chain: each link's two ports are placed on different partitions, so every frame
of a ping or a TCP connection is read by one partition's thread and written by it straight
to the other end's TAP, and the directions of each link run on different threads. Checked:
ping and TCP across both links, statistics merged from both partitions in the usual shape,
a link change made at run time reaching the partition that runs that direction, the
placement in ``wanlab show``, and the thread count from YAML and ns.
"""

import subprocess
from dataclasses import replace

from conftest import chain, needs_root, ping_rtts

from wanlab.backends.emulate.engine import threads_for
from wanlab.frontends import yaml_spec
from wanlab.model.ir import LinkParams, validate


def _chain2(delay=0.002):
    return validate(replace(chain(3, delay=delay), engine_threads=2))


@needs_root
def test_two_partitions_forward_ping_and_tcp_and_merge_stats(lab):
    lab.create(_chain2())
    rtts = ping_rtts(lab, "chain", "n0", "n2-l1", count=5)
    # two links of 2 ms each way
    assert len(rtts) == 5 and 7.9 <= min(rtts) <= 10.0, rtts
    server = subprocess.Popen(lab.node_argv("chain", "n2", ["iperf3", "-s", "-1"]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ok = False
        for _ in range(50):
            r = lab.exec("chain", "n0", ["sh", "-c", "iperf3 -c n2-l1 -n 2M >/dev/null "
                                                      "&& echo iperf-ok"],
                         capture_output=True, text=True)
            if "iperf-ok" in r.stdout:
                ok = True
                break
        assert ok, r.stderr
    finally:
        server.kill()
        server.wait()
    info = lab.show("chain")
    stats = info["stats"]
    parts = stats["partitions"]
    assert [p["partition"] for p in parts] == [0, 1]
    # each partition reads some of the four ports, and the two ends of a link differ
    owner = {port: p["partition"] for p in parts for port in p["ports"]}
    assert len(owner) == 4 and set(owner.values()) == {0, 1}, parts
    # both directions of both links counted (2 MB of TCP one way, its ACKs the other)
    for link in ("l0", "l1"):
        ab, ba = stats["links"][link]["ab"], stats["links"][link]["ba"]
        assert ab["out_pkts"] >= 500 and ba["out_pkts"] >= 20, (link, ab, ba)
    rt = stats["realtime"]
    assert rt["timer_events"] == sum(p["timer_events"] for p in parts), (rt, parts)


@needs_root
def test_a_link_change_reaches_the_partition_that_runs_it(lab):
    exp = _chain2(delay=0.001)
    lab.create(exp)
    assert 3.9 <= min(ping_rtts(lab, "chain", "n0", "n2-l1", count=3)) <= 6.0
    slow = LinkParams(delay_s=0.010)
    links = (replace(exp.links[0], ab=slow), exp.links[1])
    lab.modify("chain", validate(replace(exp, links=links)))
    rtts = ping_rtts(lab, "chain", "n0", "n2-l1", count=3)
    # l0 ab now 10 ms: 10 + 1 + 1 + 1
    assert 12.9 <= min(rtts) <= 15.0, rtts


def test_thread_count_from_the_description():
    exp = yaml_spec.loads("name: t\nengine: {threads: 2}\nnodes: [a, b]\n"
                          "links: [{name: l, nodes: [a, b]}]\n")
    assert exp.engine_threads == 2
    assert threads_for(exp.engine_threads, 1) == 2
    assert threads_for(0, 10) == 1
    auto = yaml_spec.loads("name: t\nengine: {threads: auto}\nnodes: [a, b]\n")
    assert auto.engine_threads == -1
    assert threads_for(-1, 1) == 1
