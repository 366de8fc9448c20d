"""Counting an experiment's traffic for the idle watcher, the same way on every site."""

from __future__ import annotations

from typing import Any


def frames_of(stats: dict[str, Any]) -> int:
    """Frames delivered by every link and LAN direction in an engine ``stats`` reply (or a
    cluster's merged one)."""
    total = 0

    def walk(x: Any) -> None:
        nonlocal total
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "out_pkts" and isinstance(v, int):
                    total += v
                else:
                    walk(v)
    walk({k: stats.get(k) for k in ("links", "lans")})
    return total
