"""Typed requests of the engine's control protocol, one per command (docs/engine-protocol.md).

Each request is a frozen dataclass with the command's name in ``cmd`` and its arguments
as fields; :meth:`Request.to_json` gives the wire object (fields left None are omitted,
which is the protocol's "default"). PARAMS objects are partial: a ``Set`` carries only
the fields that change, and the engine merges them into the current values (inside
``queue`` field by field; ``loss`` as a whole).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypedDict


class QueueParams(TypedDict, total=False):
    kind: str                 # droptail | red
    limit: int
    in_bytes: bool
    mean_pktsize: int
    thresh: float
    maxthresh: float
    q_weight: float
    linterm: float
    gentle: bool


class Loss(TypedDict, total=False):
    kind: str                 # none | bernoulli | gilbert | state | ordinals
    p: float
    corr: float
    p13: float
    p31: float
    p32: float
    p23: float
    p14: float
    r: float
    k: float
    h: float
    drop: list[int]


class Params(TypedDict, total=False):
    """PARAMS of one direction; every field optional."""

    bandwidth_bps: int
    delay_us: float
    jitter_us: float
    jitter_dist: str
    jitter_reorder: bool
    queue: QueueParams
    loss: Loss
    duplicate: float
    corrupt: float
    jitter_corr: float
    reorder: float
    reorder_gap: int
    overhead: int
    cellsize: int
    cell_overhead: int
    trace: dict[str, Any]       # {"ms": [...], "offset_ms", "loop"}; {"ms": []}: none


@dataclass(frozen=True)
class Request:
    cmd: ClassVar[str] = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cmd": self.cmd}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None:
                out[f.name] = v
        return out


@dataclass(frozen=True)
class Hello(Request):
    cmd: ClassVar[str] = "hello"


@dataclass(frozen=True)
class Apply(Request):
    cmd: ClassVar[str] = "apply"
    ports: list[dict[str, Any]] = field(default_factory=list)
    links: list[dict[str, Any]] = field(default_factory=list)
    lans: list[dict[str, Any]] = field(default_factory=list)
    routers: list[dict[str, Any]] = field(default_factory=list)
    patches: list[dict[str, Any]] = field(default_factory=list)
    hosts: list[dict[str, Any]] = field(default_factory=list)
    agents: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        # empty lists are the protocol's default: leave them out (the batch simulator
        # refuses even an empty ``ports``)
        return {k: v for k, v in super().to_json().items() if v != []}


@dataclass(frozen=True)
class Remove(Request):
    cmd: ClassVar[str] = "remove"
    links: list[str] = field(default_factory=list)
    lans: list[str] = field(default_factory=list)
    routers: list[str] = field(default_factory=list)
    ports: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Set(Request):
    """Merge ``params`` into one or every direction of a link, or of a LAN's members."""

    cmd: ClassVar[str] = "set"
    target: str = ""
    params: Params = field(default_factory=Params)
    dir: str | None = None              # ab | ba | to_lan | from_lan | both (None = both)
    member: str | None = None           # a LAN member's port (None = every member)
    to: str | None = None               # with member: the pair channel member -> to


@dataclass(frozen=True)
class Down(Request):
    cmd: ClassVar[str] = "down"
    target: str = ""
    member: str | None = None


@dataclass(frozen=True)
class Up(Request):
    cmd: ClassVar[str] = "up"
    target: str = ""
    member: str | None = None


@dataclass(frozen=True)
class Stats(Request):
    cmd: ClassVar[str] = "stats"
    target: str | None = None


@dataclass(frozen=True)
class CaptureStart(Request):
    cmd: ClassVar[str] = "capture_start"
    target: str = ""
    path: str = ""
    dir: str | None = None
    member: str | None = None
    snaplen: int | None = None
    nanos: bool | None = None


@dataclass(frozen=True)
class CaptureStop(Request):
    cmd: ClassVar[str] = "capture_stop"
    target: str | None = None
    dir: str | None = None
    member: str | None = None


@dataclass(frozen=True)
class CaptureSnapshot(Request):
    cmd: ClassVar[str] = "capture_snapshot"
    target: str | None = None
    dir: str | None = None
    member: str | None = None


@dataclass(frozen=True)
class Subscribe(Request):
    cmd: ClassVar[str] = "subscribe"
    interval_ms: int | None = None
    target: str | None = None


@dataclass(frozen=True)
class AgentAction(Request):
    """``agent``: start or stop a simulated traffic source."""

    cmd: ClassVar[str] = "agent"
    agent: str = ""
    action: str = "start"


@dataclass(frozen=True)
class Trace(Request):
    cmd: ClassVar[str] = "trace"
    agent: str = ""
    clear: bool | None = None


@dataclass(frozen=True)
class TunnelClock(Request):
    """``tunnel_clock``: how far the clock of the engine across tunnel port ``port`` is
    ahead of this engine's (ns), so the due times it stamps are read on this clock."""

    cmd: ClassVar[str] = "tunnel_clock"
    port: str = ""
    offset_ns: int = 0


@dataclass(frozen=True)
class Shutdown(Request):
    cmd: ClassVar[str] = "shutdown"
