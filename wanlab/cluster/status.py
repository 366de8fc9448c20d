"""Whether each machine of the cluster answers: its agent's hello, with a deadline."""

from __future__ import annotations

from typing import Any

from wanlab.cluster import agent, connect
from wanlab.cluster.info import ClusterInfo
from wanlab.store.db import Store

HELLO_TIMEOUT_S = 30.0


def status(store: Store, info: ClusterInfo) -> list[dict[str, Any]]:
    """One row per machine: ``up`` with its agent's pid and the clock offsets it last
    measured to the machines its parts tunnel to, or ``lost`` with why. On a
    cluster joined by address a machine that came back as a new Ray node is re-pinned
    first (:func:`wanlab.cluster.join.repin`)."""
    import ray

    from wanlab.cluster import join
    from wanlab.cluster.info import current
    rows = []
    with connect.session(info):
        if join.repin(store, info):         # a machine came back as a new Ray node
            info = current(store) or info
        for m in info.machines:
            row: dict[str, Any] = {"machine": m.name, "address": m.address, "cores": m.cores}
            try:
                h = ray.get(agent.agent(info, m, agent.machine_home(store.home, m.name))
                            .hello.remote(), timeout=HELLO_TIMEOUT_S)
                row.update(state="up", agent_pid=h["pid"], netns_inode=h["netns_inode"])
                try:
                    row["clocks"] = ray.get(agent.agent(info, m, agent.machine_home(
                        store.home, m.name)).clocks.remote(), timeout=HELLO_TIMEOUT_S)
                except Exception as e:      # noqa: BLE001 - said, the machine is still up
                    row["clocks"] = {"errors": [f"{type(e).__name__}: {e}"[:200]]}
            except Exception as e:     # a lost machine: Ray says why in many ways
                row.update(state="lost", error=f"{type(e).__name__}: {e}"[:200])
            rows.append(row)
    return rows
