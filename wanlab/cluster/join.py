"""A cluster given by address: a Ray cluster the researcher started on real machines
(``ray start --head`` on one, ``ray start --address HEAD:PORT`` on the others), joined with
``wanlab cluster up --address HEAD:PORT``.

wanlab starts nothing of Ray's here. It attaches as a driver, takes every live Ray node
that offers CPUs as a machine (named ``m0``, ``m1``, ... in the order of their addresses; a
head started with ``--num-cpus=0`` only heads), starts one host agent per machine pinned
to it by node affinity, measures the paths between the machines
(:mod:`wanlab.cluster.measure`) and records all of it. ``down`` removes exactly that: the
experiments placed on the cluster, the agents (``ray.kill``) and their machines' folders;
the Ray cluster itself keeps running.

Each machine needs wanlab installed (``make install``) and importable by its Ray worker,
and the controller (the ``wanlab`` command) runs on a machine of the cluster, the head's
usually: a Ray driver needs a local Ray node.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import secrets
import shutil
import socket
from collections.abc import Callable

from wanlab.cluster import agent as agents
from wanlab.cluster import connect, measure
from wanlab.cluster.info import ClusterInfo, MachineInfo, current, node_of, pinned
from wanlab.errors import WanlabError
from wanlab.store import cluster as rec
from wanlab.store.db import Store

CALL_TIMEOUT_S = 300.0
_ADDRESS = re.compile(r"^(?P<host>[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:]+\]):(?P<port>\d{1,5})$")


def check_address(address: str) -> str:
    """``HOST:PORT`` of a Ray head (GCS), checked; refused with the reason otherwise."""
    m = _ADDRESS.match(address or "")
    if not m or not 0 < int(m.group("port")) < 65536:
        raise WanlabError(f"cluster up: {address!r} is not HOST:PORT of a Ray head "
                          f"(e.g. 10.0.0.1:6379, as 'ray start --head' printed it)")
    return address


def _sort_key(node: dict) -> tuple:
    addr = node.get("NodeManagerAddress", "")
    try:
        return (0, ipaddress.ip_address(addr), node["NodeID"])
    except ValueError:
        return (1, addr, node["NodeID"])


def wide_area_names(machines: list[MachineInfo], spec: str | None) -> set[str]:
    """Which machines ``--wide-area`` names: ``all``, or names/addresses, comma-separated;
    an unknown one is refused."""
    if not spec:
        return set()
    if spec.strip() == "all":
        return {m.name for m in machines}
    out = set()
    for w in (x.strip() for x in spec.split(",") if x.strip()):
        m = next((m for m in machines if w in (m.name, m.address)), None)
        if m is None:
            raise WanlabError(f"--wide-area: no machine {w!r} in the cluster (machines: "
                              + ", ".join(f"{m.name} {m.address}" for m in machines) + ")")
        out.add(m.name)
    return out


def up_address(store: Store, address: str, wide_area: str | None = None,
               say: Callable[[str], None] = print) -> ClusterInfo:
    """Join the Ray cluster whose head is at ``address`` (refused if a cluster is up). On
    failure what was recorded stays recorded: the caller takes the cluster down."""
    if current(store) is not None:
        raise WanlabError("a cluster is already up in this store: 'wanlab cluster down' "
                          "first (or 'wanlab cluster status')")
    check_address(address)
    host, port = address.rsplit(":", 1)
    try:        # a quick answer for a wrong address (Ray itself retries for minutes)
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as e:
        raise WanlabError(f"cluster up: nothing answers at {address} ({e.strerror or e}): "
                          f"is Ray's head started there (ray start --head)?") from None
    try:
        import ray
    except ImportError as e:
        raise WanlabError("the cluster needs Ray: run 'make install' (pip install "
                          "'ray[default]')") from e
    cid = secrets.token_hex(2)
    probe = ClusterInfo(cid, address, (), False)
    with connect.session(probe):
        nodes = sorted((n for n in ray.nodes() if n.get("Alive") and
                        n.get("Resources", {}).get("CPU", 0) > 0), key=_sort_key)
        if not nodes:
            raise WanlabError(f"the Ray cluster at {address} has no live node offering CPUs "
                              f"to run wanlab's host agents on")
        machines = [_machine(f"m{i}", n) for i, n in enumerate(nodes)]
        wide = wide_area_names(machines, wide_area)
        machines = [dataclasses.replace(m, wide_area=m.name in wide) for m in machines]
        top = rec.record(store, "cluster", cid, id=cid, head=address, local=False,
                         machines=[m.__dict__ for m in machines])
        info = current(store)
        assert info is not None
        for m in machines:
            _start_agent(store, info, m, say)
        record_matrix(store, info, say)
        rec.update(store, top, "created")
    say(f"cluster {cid}: joined {address}, {len(machines)} machines up")
    return info


def _machine(name: str, node: dict) -> MachineInfo:
    return MachineInfo(name, node["NodeManagerAddress"], None, float(node["Resources"]["CPU"]),
                       node_id=node["NodeID"], hostname=node.get("NodeManagerHostname"))


def _start_agent(store: Store, info: ClusterInfo, m: MachineInfo,
                 say: Callable[[str], None]) -> None:
    """Machine ``m``'s agent, recorded before it starts (inside a session)."""
    import ray
    assert m.node_id is not None
    say(f"cluster {info.id}: machine {m.name} at {m.address} (Ray node {m.node_id[:12]}, "
        f"{m.cores:g} cores" + (", wide-area)" if m.wide_area else ")"))
    rid = rec.record(store, "agent", f"agent-{m.name}", machine=m.name,
                     namespace=f"wanlab-{info.id}")
    h = ray.get(agents.agent(info, m, agents.machine_home(store.home, m.name))
                .hello.remote(), timeout=CALL_TIMEOUT_S)
    rec.update(store, rid, "created", pid=h["pid"])


def join_address(store: Store, wide_area: str | None = None,
                 say: Callable[[str], None] = print) -> list[str]:
    """``cluster join`` on a cluster joined by address: every live Ray node offering CPUs
    that is none of the cluster's machines (by node id, address or host name: a machine
    that came back is re-pinned, not added) becomes the next machine ``mN``, with its
    agent; only the new machines' pairs are measured. ``wide_area``: which of the new
    machines are wide-area. Returns the new machines' names."""
    import ray
    info = current(store)
    if info is None:
        raise WanlabError("cluster join: no cluster is up ('wanlab cluster up' first)")
    if info.local:
        raise WanlabError("cluster join: this is a local test cluster; 'wanlab cluster "
                          "join --local' adds a machine to it")
    with connect.session(info):
        repin(store, info, say)
        info = current(store)
        assert info is not None
        taken = {node_of(m) for m in info.machines}
        nodes = sorted((n for n in ray.nodes() if n.get("Alive") and n["NodeID"] not in
                        taken and n.get("Resources", {}).get("CPU", 0) > 0), key=_sort_key)
        if not nodes:
            raise WanlabError(f"cluster join: no Ray node has joined {info.head} since "
                              f"'cluster up' (machines: " + ", ".join(
                                  f"{m.name} {m.address}" for m in info.machines)
                              + "); start one with 'ray start --address " + info.head + "'")
        first = len(info.machines)
        new = [_machine(f"m{first + k}", n) for k, n in enumerate(nodes)]
        wide = wide_area_names(new, wide_area)
        new = [dataclasses.replace(m, wide_area=m.name in wide) for m in new]
        _set_machines(store, [*info.machines, *new])
        info = current(store)
        assert info is not None
        for m in new:
            _start_agent(store, info, m, say)
        record_matrix(store, info, say, keep=matrix(store))
    say(f"cluster {info.id}: joined " + ", ".join(m.name for m in new)
        + f"; {len(info.machines)} machines up")
    return [m.name for m in new]


def _set_machines(store: Store, machines: list[MachineInfo]) -> None:
    """The cluster's record of its machines, now ``machines``."""
    top = rec.live(store, "cluster")[-1]
    rec.update(store, top.id, machines=[m.__dict__ for m in machines])


def repin(store: Store, info: ClusterInfo, say: Callable[[str], None] = print) -> list[str]:
    """A cluster joined by address: record the new Ray node of each machine that came back
    as one (found by :func:`wanlab.cluster.info.node_of`: its address, or its host name),
    so its agent is pinned there. Returns the machines re-pinned (inside a session)."""
    import ray
    if info.local:
        return []
    nodes = ray.nodes()
    moved = {m.name: node_of(m, nodes) for m in info.machines
             if m.node_id and node_of(m, nodes) != m.node_id}
    if not moved:
        return []
    for name, node in moved.items():
        m = next(x for x in info.machines if x.name == name)
        say(f"cluster {info.id}: machine {name} ({m.address}) came back as Ray node "
            f"{node[:12]} (was {(m.node_id or '')[:12]}); its agent is pinned there")
    _set_machines(store, [dataclasses.replace(m, node_id=moved.get(m.name, m.node_id))
                          for m in info.machines])
    return sorted(moved)


def record_matrix(store: Store, info: ClusterInfo, say: Callable[[str], None],
                  keep: dict | None = None) -> None:
    """Measure the paths between the machines and record them with the cluster, in place
    of an earlier matrix (inside a session). ``keep``: that earlier matrix, whose pairs
    are kept (only the pairs of machines it does not have are measured)."""
    wide = [m.name for m in info.machines if m.wide_area]
    fresh = [m.name for m in info.machines if not keep or m.name not in keep["machines"]]
    say(f"cluster {info.id}: measuring delay between {len(info.machines)} machines"
        + (f" (the pairs of {', '.join(fresh)})" if keep else "")
        + (f" and bandwidth between the {len(wide)} wide-area ones" if len(wide) > 1 else ""))
    mx = measure.measure(info, wide, keep=keep)
    for r in rec.live(store, "matrix"):
        rec.removed(store, r.id)
    rid = rec.record(store, "matrix", info.id, **mx)
    rec.update(store, rid, "created")


def remeasure(store: Store, say: Callable[[str], None] = print) -> dict:
    """``cluster measure``: every pair of the current cluster measured again, while it
    is up (experiments keep running; the paths their cut links cross were checked
    against their delays when they were made)."""
    info = current(store)
    if info is None:
        raise WanlabError("cluster measure: no cluster is up")
    with connect.session(info):
        repin(store, info, say)
        info = current(store)
        assert info is not None
        record_matrix(store, info, say)
    mx = matrix(store)
    assert mx is not None
    return mx


def matrix(store: Store) -> dict | None:
    """The current cluster's measured matrix (see :func:`wanlab.cluster.measure.measure`)."""
    rows = rec.live(store, "matrix")
    return rows[-1].detail if rows else None


def _forget(home: str) -> None:
    shutil.rmtree(home, ignore_errors=True)


def remove_agents(store: Store, info: ClusterInfo, records: list[rec.Record],
                  say: Callable[[str], None] = print) -> int:
    """Kill the recorded agents (and remove their machines' folders); Ray stays up. A
    cluster that no longer answers has taken its agents with it: they are only forgotten."""
    try:
        with connect.session(info):
            _kill_agents(store, info, records)
    except WanlabError as e:
        say(f"warning: {e}; its agents went with it, forgotten here")
    for r in records:
        rec.removed(store, r.id)
    return len(records)


def _kill_agents(store: Store, info: ClusterInfo, records: list[rec.Record]) -> None:
    import ray
    by_name = {m.name: m for m in info.machines}
    for r in records:
        m = by_name.get(r.detail.get("machine"))
        try:
            ray.kill(ray.get_actor(r.name, namespace=r.detail["namespace"]),
                     no_restart=True)
        except ValueError:          # not there (never started, or its machine is gone)
            pass
        if m is not None:
            try:
                ray.get(ray.remote(num_cpus=0)(_forget).options(**pinned(m)).remote(
                    agents.machine_home(store.home, m.name)), timeout=CALL_TIMEOUT_S)
            except Exception:        # a lost machine keeps its folder
                pass
