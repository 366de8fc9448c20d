"""Shaped paths between the local test cluster's machines, so that wide-area mapping can be
tried for real on one host (``cluster up --local N --wan-delay 2ms,18ms,40ms`` or
``--wan-matrix FILE``).

The kernel here has no delaying qdisc (no netem, fq or etf), so the delay comes from
wanlab's own engine: each machine gets a second leg, ``eth1`` (a veth), on a data network
of its own /24, and the host ends of those veths are the ``external`` interfaces of an
ordinary wanlab experiment, the *underlay*: one node per machine on a latency-matrix LAN
(per-pair channels). ``--wan-delay`` gives each machine an access delay, so the one-way
delay between machines i and j is ``d_i + d_j``; a matrix file gives every pair its own
(``delay, m0, m1, ...`` rows, docs/yaml.md). A machine's address (Ray's node address, the
tunnels' underlay, what ``measure`` pings) is its ``eth1`` address; the bridge stays the
unshaped control network to Ray's head, and the host reaches each machine's data address
through its bridge address (a /32 route that goes with the bridge).

The underlay lives in its own store (``<home>/cluster-underlay``), recorded in the
cluster table before it is created, and is terminated by ``cluster down`` before the
machines' namespaces go (its nodes hold their veths' other ends).
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

from wanlab.cluster.info import MachineInfo
from wanlab.errors import SpecError, WanlabError
from wanlab.store import cluster as rec
from wanlab.store.db import Store


def request(n: int, wan_delay: str | None, wan_matrix: str | None) -> dict[str, Any] | None:
    """The shaping asked for, checked (None: none): ``{"delay": rows}`` or ``{"csv": path}``."""
    if wan_delay is None and wan_matrix is None:
        return None
    if wan_delay is not None and wan_matrix is not None:
        raise WanlabError("cluster up: give --wan-delay or --wan-matrix, not both")
    if wan_matrix is not None:
        if not os.path.isfile(wan_matrix):
            raise WanlabError(f"--wan-matrix {wan_matrix}: no such file")
        from pathlib import Path

        from wanlab.frontends import matrix
        # read now, so a wrong file is refused before anything is made (errors name its line)
        matrix.read_csv([f"m{i}" for i in range(n)], Path(wan_matrix).resolve(),
                        where="--wan-matrix")
        return {"csv": os.path.abspath(wan_matrix)}
    from wanlab.frontends import units
    parts = [x.strip() for x in wan_delay.split(",")]
    if len(parts) != n:
        raise WanlabError(f"--wan-delay: {len(parts)} delays for {n} machines (one each, "
                          f"e.g. --wan-delay {','.join(['10ms'] * n)})")
    try:
        d = [units.parse_delay(p, field=f"--wan-delay[{i}]") for i, p in enumerate(parts)]
    except SpecError as e:
        raise WanlabError(f"--wan-delay: {e.message}") from None
    return {"delay": [["0" if i == j else f"{(d[i] + d[j]) * 1e6:.0f}us"
                       for j in range(n)] for i in range(n)]}


def _run(argv: list[str]) -> None:
    p = subprocess.run(argv, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise WanlabError(f"{' '.join(argv)}: {p.stderr.strip() or p.returncode}")


def build(store: Store, cid: str, machines: Sequence[MachineInfo], controls: Sequence[str],
          data: ipaddress.IPv4Network, bridge: str, shaped: dict[str, Any],
          say: Callable[[str], None]) -> None:
    """Give each machine its data leg and start the underlay joining them."""
    from wanlab.frontends.builder import ExperimentBuilder
    from wanlab.lifecycle import Lab
    legs = []
    for i, (m, control) in enumerate(zip(machines, controls, strict=True)):
        assert m.netns
        leg = f"wlc{cid}-w{i}"
        # the veth lives as long as the machine's namespace (recorded) holds its peer
        _run(["ip", "link", "add", leg, "type", "veth", "peer", "name", "eth1",
              "netns", m.netns])
        _run(["ip", "-n", m.netns, "addr", "add", f"{m.address}/{data.prefixlen}",
              "dev", "eth1"])
        _run(["ip", "-n", m.netns, "link", "set", "eth1", "up"])
        _run(["ip", "route", "add", f"{m.address}/32", "via", control, "dev", bridge])
        legs.append(leg)
    b = ExperimentBuilder(f"wan{cid}")
    names = [b.node(m.name, external=leg) for m, leg in zip(machines, legs, strict=True)]
    b.lan(names, name="wan", matrix=shaped)
    exp = b.build()
    home = os.path.join(store.home, "cluster-underlay")
    rid = rec.record(store, "underlay", exp.name, home=home)
    say(f"cluster {cid}: shaping the paths between machines (underlay experiment "
        f"{exp.name})")
    lab = Lab(home)
    try:
        lab.create(exp)
    finally:
        lab.close()
    rec.update(store, rid, "created")


def remove(r: rec.Record) -> None:
    """Terminate the recorded underlay (its external interfaces go back to the host, where
    the machines' namespaces, deleted next, take them)."""
    from wanlab.lifecycle import Lab
    home = r.detail["home"]
    if not os.path.isdir(home):
        return
    lab = Lab(home)
    try:
        if lab.store.find(r.name) is not None:
            try:
                lab.terminate(r.name)
            except WanlabError:
                lab.cleanup(r.name)
    finally:
        lab.close()
