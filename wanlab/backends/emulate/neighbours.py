"""Room in the kernel's ARP table for an experiment's nodes.

The IPv4 neighbour table is one table for the whole host: every namespace's entries count
against ``net.ipv4.neigh.default.gc_thresh3`` (1 024 by default), which only the host's
own namespace can set. A LAN of N members needs up to N·(N−1) entries once every pair has
spoken, so a 50-member LAN (2 450) overflows it: the kernel logs "neighbor table
overflow", new ARP entries fail, and a ping waits seconds for ARP retries (the latency
matrix bench measured 2 s "RTTs" this way). Before the nodes talk, the thresholds are
raised to fit the experiment, never lowered (other experiments, or the host, may need
what is set), and what was changed is said in the swap-in log.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable

from wanlab.plan.types import Plan

GC_THRESH = "/proc/sys/net/ipv4/neigh/default/gc_thresh{}"
HEADROOM = 1024       # entries left for the host and other experiments beyond our need


def needed(plan: Plan) -> int:
    """ARP entries the experiment's namespaces may hold at once: for each network, every
    member may learn every other member."""
    members = Counter(i.network for np_ in plan.nodes.values() if not np_.simulated
                      for i in np_.interfaces)
    return sum(m * (m - 1) for m in members.values())


def _read(level: int) -> int:
    with open(GC_THRESH.format(level)) as f:
        return int(f.read().split()[0])


def _write(level: int, value: int) -> None:
    fd = os.open(GC_THRESH.format(level), os.O_WRONLY)
    try:
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)


def make_room(plan: Plan, say: Callable[[str], None] | None = None) -> dict[int, int]:
    """Raise gc_thresh2 (where garbage collection starts) above the experiment's need and
    gc_thresh3 (the hard limit) above it with :data:`HEADROOM`; return what was changed
    (level → new value). Only the host's network namespace has these settings; elsewhere
    nothing is changed."""
    need = needed(plan)
    if not os.path.exists(GC_THRESH.format(3)):
        return {}                 # not the host's namespace (a local cluster's machine)
    want = {2: need + HEADROOM // 2, 3: need + HEADROOM}
    changed: dict[int, int] = {}
    for level in (2, 3):          # thresh2 <= thresh3 holds at every step when raising
        if _read(level) < want[level]:
            _write(level, want[level])
            changed[level] = want[level]
    if changed and say:
        say("raised the host's ARP table limits for %d neighbour entries: %s" % (
            need, ", ".join(f"gc_thresh{k}={v}" for k, v in sorted(changed.items()))))
    return changed
