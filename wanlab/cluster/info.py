"""What the controller knows of a cluster: its head and its machines."""

from __future__ import annotations

from dataclasses import dataclass

MACHINE_RESOURCE = "wanlab-machine:"     # + machine name: pins an actor to that machine


@dataclass(frozen=True)
class MachineInfo:
    name: str
    address: str
    netns: str | None        # the local test cluster's namespace; None on a real machine
    cores: float


@dataclass(frozen=True)
class ClusterInfo:
    id: str
    head: str                # ADDRESS:PORT of Ray's head
    machines: tuple[MachineInfo, ...]
    local: bool
