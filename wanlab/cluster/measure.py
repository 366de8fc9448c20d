"""Measuring the paths between a cluster's machines: one-way delay for every pair (half the
minimum ping RTT) and, between wide-area machines, bandwidth each way (iperf3 for a
second). Each probe is a Ray task pinned to the machine it runs on, so it runs where that
machine's Ray worker runs (in its network namespace on the local test cluster).

The result is the cluster's matrix (stored with the cluster, shown by ``cluster status``)
on which wanassign maps wide-area nodes.
"""

from __future__ import annotations

import re
import secrets
import subprocess
import time
from typing import Any

from wanlab.cluster.info import ClusterInfo, MachineInfo, pinned
from wanlab.errors import WanlabError

PING_COUNT = 5
IPERF_SECONDS = 1
CALL_TIMEOUT_S = 300.0
SERVER_WAIT_S = 90.0


def _ping_min_rtt(address: str, count: int) -> float | None:
    """Minimum RTT to ``address`` in seconds (None: unreachable). The minimum, not the
    mean: on a loaded machine the mean measures the load as much as the path."""
    p = subprocess.run(["ping", "-n", "-q", "-c", str(count), "-i", "0.2", "-W", "2",
                        address], capture_output=True, text=True, check=False)
    m = re.search(r"= ([\d.]+)/", p.stdout)
    return float(m.group(1)) / 1e3 if m else None


def _pings(addresses: list[str], count: int) -> list[float | None]:
    return [_ping_min_rtt(a, count) for a in addresses]


def _iperf_server(address: str, port: int, timeout_s: float) -> bool:
    """One iperf3 test served on ``address:port``, then exit (``-1``)."""
    try:
        p = subprocess.run(["iperf3", "-s", "-1", "-B", address, "-p", str(port)],
                           capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return False
    return p.returncode == 0


def _iperf_client(address: str, port: int, seconds: int) -> float | None:
    """Received bit/s of a ``seconds`` TCP test to ``address:port`` (None: no test)."""
    import json
    # the server task may not listen yet: on a loaded machine Ray may take many seconds
    # to start the worker that runs it
    deadline = time.monotonic() + SERVER_WAIT_S
    while time.monotonic() < deadline:
        p = subprocess.run(["iperf3", "-c", address, "-p", str(port), "-t", str(seconds),
                            "-J"], capture_output=True, text=True, check=False,
                           timeout=seconds + 60)
        if p.returncode == 0:
            try:
                return float(json.loads(p.stdout)["end"]["sum_received"]["bits_per_second"])
            except (ValueError, KeyError):
                return None
        time.sleep(0.5)
    return None


def measure(info: ClusterInfo, bandwidth_between: list[str] | None = None,
            keep: dict[str, Any] | None = None) -> dict[str, Any]:
    """The cluster's matrix: ``one_way_s[i][j]`` for every pair of machines (symmetric:
    half the minimum RTT) and, for the machines named in ``bandwidth_between``,
    ``bandwidth_bps[i][j]`` each way (None elsewhere). ``keep``: an earlier matrix whose
    pairs are kept as they were (a machine joined: only its own pairs are measured).
    Call inside a session."""
    import ray
    ms = list(info.machines)
    n = len(ms)
    index = {m.name: i for i, m in enumerate(ms)}
    old = {name: k for k, name in enumerate(keep["machines"])} if keep else {}

    def kept(a: str, b: str) -> bool:
        return a in old and b in old

    ping = ray.remote(num_cpus=0)(_pings)
    todo = {m.name: [x for x in ms[i + 1:] if not kept(m.name, x.name)]
            for i, m in enumerate(ms)}
    # a task on every machine, even one with nothing to ping: the bandwidth tests after
    # find a Ray worker started there (without, iperf3 to a 3rd wide-area machine failed
    # in tests/test_cluster_wan.py, not understood)
    refs = {m.name: ping.options(**pinned(m)).remote([x.address for x in todo[m.name]],
                                                     PING_COUNT)
            for m in ms}
    one_way: list[list[float | None]] = [[0.0] * n for _ in range(n)]
    for i, a in enumerate(ms):
        for b in ms[i + 1:]:
            if kept(a.name, b.name):
                one_way[i][index[b.name]] = one_way[index[b.name]][i] = \
                    keep["one_way_s"][old[a.name]][old[b.name]]
    for name, ref in refs.items():
        i = index[name]
        for far, rtt in zip(todo[name], ray.get(ref, timeout=CALL_TIMEOUT_S), strict=True):
            if rtt is None:
                raise WanlabError(f"cluster: machine {name} ({ms[i].address}) cannot reach "
                                  f"{far.name} ({far.address}) by ping")
            one_way[i][index[far.name]] = one_way[index[far.name]][i] = rtt / 2
    out: dict[str, Any] = {"machines": [m.name for m in ms], "one_way_s": one_way,
                           "bandwidth_bps": None, "measured": time.time()}
    wide = [m for m in ms if m.name in set(bandwidth_between or ())]
    if len(wide) >= 2:
        bw: list[list[float | None]] = [[None] * n for _ in range(n)]
        old_bw = (keep or {}).get("bandwidth_bps")
        # one direction at a time: tests running together would share the paths' capacity
        for a in wide:
            for b in wide:
                if a is b:
                    continue
                was = old_bw[old[a.name]][old[b.name]] if old_bw and kept(
                    a.name, b.name) else None
                bw[index[a.name]][index[b.name]] = was if was is not None else \
                    _bandwidth(a, b)
        out["bandwidth_bps"] = bw
    return out


def _bandwidth(src: MachineInfo, dst: MachineInfo) -> float:
    import ray
    port = 20000 + secrets.randbelow(30000)
    server = ray.remote(num_cpus=0)(_iperf_server).options(**pinned(dst)).remote(
        dst.address, port, 120.0)
    bps = ray.get(ray.remote(num_cpus=0)(_iperf_client).options(**pinned(src)).remote(
        dst.address, port, IPERF_SECONDS), timeout=CALL_TIMEOUT_S)
    ray.get(server, timeout=CALL_TIMEOUT_S)
    if bps is None:
        raise WanlabError(f"cluster: iperf3 from {src.name} to {dst.name} "
                          f"({dst.address}) failed")
    return bps
