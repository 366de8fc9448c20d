"""Moving a lost machine's part of a cluster experiment to a live machine
(``swapin --repair`` when a machine does not answer).

The lost machine's nodes (and LANs) go, whole, to a live machine that runs no part of the
experiment (one added with ``cluster join`` will do), the one with the most cores; the
experiment is split again with that placement (:func:`wanlab.cluster.experiment.split`,
the same addresses, VXLAN ids and timeline), and:

* the new machine builds its part, recorded before it is asked for, and its clock joins
  the others' t = 0 (its timeline's past events fire at once, late in its log);
* every other part with a link to the moved nodes points that tunnel at the new machine
  (``retunnel``: the VXLAN device's remote replaced, what it had learned of the lost
  machine forgotten) and is modified in place; the path to the new machine is measured
  now, and a cut link asking for less delay than it is refused, as at create;
* the lost machine's part stays recorded, marked ``moved_to``: no command sends it
  anything, and ``terminate``/``cleanup`` remove it once the machine is back, as they
  would have.

Not moved (refused by name): wide-area nodes (wanassign mapped them to that machine's
measured paths) and a part with no live machine free of the experiment to go to.
A ``tb-fix-node`` pin to the lost machine is not honoured (said so).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from wanlab.cluster import experiment as ex
from wanlab.cluster import layers
from wanlab.cluster.info import ClusterInfo
from wanlab.errors import WanlabError
from wanlab.plan.plan import make_plan
from wanlab.store import cluster as rec
from wanlab.store.db import Store


def targets(info: ClusterInfo, name: str, lost: list[str], busy: set[str],
            answers: Callable[[str], bool]) -> dict[str, str]:
    """A live machine for each lost one: none running a part of ``name`` (``busy``),
    most cores first, then by name; ``answers(machine)``: whether its agent is up."""
    free = sorted((m for m in info.machines if m.name not in busy and m.name not in lost),
                  key=lambda m: (-m.cores, m.name))
    out: dict[str, str] = {}
    for m in lost:
        while free and not answers(free[0].name):
            free.pop(0)
        if not free:
            raise WanlabError(
                f"swapin --repair of {name}: machine {m} is lost and no live machine runs "
                f"no part of {name} to move its part to ('wanlab cluster join' adds one, "
                f"or bring {m} back and 'swapin --repair' again)")
        out[m] = free.pop(0).name
    return out


def move_lost(store: Store, name: str, lost: list[str],
              say: Callable[[str], None] = print) -> dict[str, str]:
    """Move the parts of ``name`` on the ``lost`` machines to live ones (inside a Ray
    session); returns lost machine -> the machine its part now runs on."""
    import ray
    info = ex._cluster(store)
    row = store.get(name)
    exp = row.ir
    records = ex.parts_of(store, name)
    gone = [r for r in records if r.detail["machine"] in lost]
    wide = sorted(n for r in gone for n in r.detail["nodes"]
                  if exp.node(n).wide_area)
    if wide:
        raise WanlabError(f"swapin --repair of {name}: wide-area nodes {', '.join(wide)} "
                          f"are on lost machines {', '.join(lost)}; they are not moved "
                          f"(wanassign mapped them to those machines' paths)")
    handles: dict[str, Any] = {}

    def answers(m: str) -> bool:
        try:
            handles[m] = ex._handle(store, info, m)
            ex.hello(info, m, handles[m])
            return True
        except Exception:           # noqa: BLE001 - a lost machine: Ray says it many ways
            return False

    to = targets(info, name, lost, {r.detail["machine"] for r in records}, answers)
    at = ex.where_of(store, name)
    where = {k: to.get(m, m) for k, m in at.machine_of.items()}
    for n in exp.nodes:
        if n.fixed and n.fixed in to:
            say(f"warning: {name}: node {n.name} is pinned to {n.fixed} (tb-fix-node), "
                f"which is lost; it moves to {to[n.fixed]}")
    addresses = {m.name: m.address for m in info.machines}
    kept = [r for r in records if r.detail["machine"] not in lost]
    for r in kept:
        handles.setdefault(r.detail["machine"], ex._handle(store, info, r.detail["machine"]))
    # the paths the moved part's cut links now cross, measured as at create
    one_way = {k: v for k, v in at.one_way.items() if k[0] not in lost and k[1] not in lost}
    for link in exp.links:
        a, b = where[link.a], where[link.b]
        if a != b and (a, b) not in one_way:
            rtt = ray.get(handles[a].rtt_to.remote(addresses[b]), timeout=ex.CALL_TIMEOUT_S)
            if rtt is None:
                raise WanlabError(f"swapin --repair of {name}: machine {a} cannot reach "
                                  f"{b} ({addresses[b]})")
            one_way[(a, b)] = one_way[(b, a)] = rtt / 2
    vnis = {k: v for r in records for k, v in r.detail.get("vnis", {}).items()}
    parts = ex.split(exp, make_plan(exp, "0000"), where, one_way, vnis, addresses)
    one_way_rec = {f"{a}|{b}": v for (a, b), v in one_way.items()}
    t0 = next((r.detail["t0"] for r in kept if "t0" in r.detail), None)
    for lost_m, m in sorted(to.items()):
        part, spec = parts[m]
        nodes = [n.name for n in part.nodes if n.kind != "remote"]
        say(f"{name}: moving the part of lost machine {lost_m} (nodes {', '.join(nodes)}) "
            f"to {m}")
        spec["token"] = secrets.token_hex(8)
        rid = rec.record(store, "part", f"{name}@{m}", experiment=name, token=spec["token"],
                         machine=m, vnis={t["link"]: t["vni"] for t in spec["tunnels"]},
                         nodes=nodes, lans=[lan.name for lan in part.lans],
                         one_way=one_way_rec, **({"t0": t0} if t0 is not None else {}))
        try:
            layers.send(store, handles, {m: part}, ex._get, say)
            ex._get(handles[m].run_part.remote("create", name, part.to_json(), spec))
            ex._get(handles[m].run_part.remote("go", name, 0.0, t0))
        except BaseException:
            # its machine's removal of what it made; the record goes once that is done
            try:
                ex._get(handles[m].run_part.remote("cleanup", name, spec["token"]))
                rec.removed(store, rid)
            except Exception:           # noqa: BLE001 - stays recorded for cleanup
                pass
            raise
        rec.update(store, rid, "created")
        for r in gone:
            if r.detail["machine"] == lost_m:
                rec.update(store, r.id, moved_to=m)
    # the parts that stay: their tunnels to the new machine
    for r in kept:
        m = r.detail["machine"]
        part, spec = parts[m]
        spec["token"] = r.detail.get("token")
        if ex._get(handles[m].run_part.remote("retunnel", name, spec)):
            ex._get(handles[m].run_part.remote("modify", name, part.to_json()))
        rec.update(store, r.id, one_way=one_way_rec)
    return to


def placement_lines(store: Store, name: str) -> list[str]:
    """``machine mI: nodes`` for each part of ``name``, as ``show`` prints them."""
    by: dict[str, list[str]] = {}
    for n, m in sorted(ex._machine_of(store, name).items()):
        by.setdefault(m, []).append(n)
    return [f"machine {m}: {', '.join(ns)}" for m, ns in sorted(by.items())]

