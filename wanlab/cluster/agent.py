"""The host agent: one long-lived Ray actor per machine, pinned to it by the machine's
custom resource. It runs in the machine's own network namespace (where the machine's
Ray worker runs), owns that machine's share of every cluster experiment (a plain
single-machine experiment in the machine's own store, built and removed by the same life
cycle as any other) and answers the controller's questions about the machine.
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

from wanlab.cluster.info import ClusterInfo, MachineInfo, pinned


class HostAgent:
    """The body of the actor (wrapped with ``ray.remote`` by :func:`agent`)."""

    def __init__(self, machine: str, home: str):
        self.machine = machine
        self.home = home

    def hello(self) -> dict[str, Any]:
        """Who and where the agent is: its machine, pid, network namespace and resources."""
        with open("/proc/meminfo") as f:
            mem = int(re.search(r"MemTotal:\s+(\d+)", f.read()).group(1)) * 1024
        return {"machine": self.machine, "pid": os.getpid(),
                "netns_inode": os.stat("/proc/self/ns/net").st_ino,
                "cores": len(os.sched_getaffinity(0)), "memory_bytes": mem,
                "home": self.home}

    def rtt_to(self, address: str, count: int = 5) -> float | None:
        """Median-ish round-trip time to another machine, in seconds (None if unreachable)."""
        p = subprocess.run(["ping", "-n", "-q", "-c", str(count), "-i", "0.2", "-W", "2",
                            address], capture_output=True, text=True, check=False)
        m = re.search(r"= [\d.]+/([\d.]+)/", p.stdout)
        return float(m.group(1)) / 1e3 if m else None

    def simulate_part(self, run: str, scenario: str, argv: list[str]) -> dict[str, Any]:
        """Run this machine's engine of a simulation over several machines."""
        from wanlab.cluster import sim_engine
        return sim_engine.run_engine_here(self.home, run, scenario, argv)

    def run_part(self, op: str, name: str, *args: Any) -> Any:
        """Run one life-cycle operation on this machine's share of an experiment."""
        from wanlab.cluster import part
        return part.operate(self.home, op, name, *args)


def agent(info: ClusterInfo, m: MachineInfo, home: str):
    """The machine's agent (created on first use, then found by name). Call inside
    :func:`wanlab.cluster.connect.session`."""
    import ray
    cls = ray.remote(num_cpus=0)(HostAgent)
    return cls.options(name=f"agent-{m.name}", lifetime="detached", get_if_exists=True,
                       max_concurrency=4, **pinned(m)).remote(m.name, home)


def machine_home(store_home: str, machine: str) -> str:
    """Where a machine keeps its share of the experiments. On the local test cluster the
    machines share this host's disk, so each gets a folder of the controller's store."""
    return os.path.join(store_home, "machines", machine)
