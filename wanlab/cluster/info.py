"""What the controller knows of a cluster: its head and its machines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wanlab.store.db import Store

MACHINE_RESOURCE = "wanlab-machine:"     # + machine name: pins an actor to that machine


@dataclass(frozen=True)
class MachineInfo:
    name: str
    address: str
    netns: str | None        # the local test cluster's namespace; None on a real machine
    cores: float
    node_id: str | None = None   # Ray's node id on a cluster joined by address (pinning)
    wide_area: bool = False      # a wide-area machine: wanassign may place wide-area nodes
    hostname: str | None = None  # Ray's node host name (by address: found again by it)


@dataclass(frozen=True)
class ClusterInfo:
    id: str
    head: str                # ADDRESS:PORT of Ray's head
    machines: tuple[MachineInfo, ...]
    local: bool


def pinned(m: MachineInfo) -> dict[str, Any]:
    """Ray options that run an actor or task on machine ``m``: by node affinity on a
    cluster joined by address (its nodes offer no resource of ours), by the machine's
    custom resource on the local test cluster."""
    if m.node_id:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_of(m),
                                                                      soft=False)}
    return {"resources": {MACHINE_RESOURCE + m.name: 0.001}}


def node_of(m: MachineInfo, nodes: list[dict[str, Any]] | None = None) -> str:
    """The live Ray node that is machine ``m`` (of a cluster joined by address): the node
    recorded at ``up`` while it lives; once it is gone, the live node at the machine's
    address (or, failing that, its one live node of the same host name), which is the
    machine come back after a crash or a reboot as a new Ray node. With none, the
    recorded node (calls to it fail as to a lost machine). ``nodes``: ``ray.nodes()``,
    read here when not given (inside a session)."""
    assert m.node_id is not None
    if nodes is None:
        import ray
        if not ray.is_initialized():
            return m.node_id
        nodes = ray.nodes()
    alive = [n for n in nodes if n.get("Alive")]
    if any(n["NodeID"] == m.node_id for n in alive):
        return m.node_id
    same = [n for n in alive if n.get("NodeManagerAddress") == m.address]
    if not same and m.hostname:
        same = [n for n in alive if n.get("NodeManagerHostname") == m.hostname]
    return same[0]["NodeID"] if len(same) == 1 else m.node_id


def alive(m: MachineInfo) -> bool:
    """Whether Ray counts machine ``m``'s node alive (inside a session): by its recorded
    node (or the node come back at its address) on a cluster joined by address, by the
    machine's custom resource on the local test cluster."""
    import ray
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if m.node_id:
        return any(n["NodeID"] == node_of(m, nodes) for n in nodes)
    return any(MACHINE_RESOURCE + m.name in (n.get("Resources") or {}) for n in nodes)


def current(store: Store) -> ClusterInfo | None:
    """The store's current cluster, or None."""
    from wanlab.store import cluster as rec
    heads = rec.live(store, "cluster")
    if not heads:
        return None
    d = heads[-1].detail
    return ClusterInfo(d["id"], d["head"], tuple(
        MachineInfo(m["name"], m["address"], m.get("netns"), m["cores"], m.get("node_id"),
                    m.get("wide_area", False), m.get("hostname"))
        for m in d["machines"]), d.get("local", True))
