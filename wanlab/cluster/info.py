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
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(m.node_id, soft=False)}
    return {"resources": {MACHINE_RESOURCE + m.name: 0.001}}


def current(store: Store) -> ClusterInfo | None:
    """The store's current cluster, or None."""
    from wanlab.store import cluster as rec
    heads = rec.live(store, "cluster")
    if not heads:
        return None
    d = heads[-1].detail
    return ClusterInfo(d["id"], d["head"], tuple(
        MachineInfo(m["name"], m["address"], m.get("netns"), m["cores"], m.get("node_id"),
                    m.get("wide_area", False))
        for m in d["machines"]), d.get("local", True))
