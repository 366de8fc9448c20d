"""``wanlab modify NAME FILE`` of a cluster experiment: a new description applied part by
part, each part changed by its machine's own ``modify`` (:mod:`wanlab.lifecycle`), so
what is unchanged keeps running there (its nodes' processes, its links' traffic).

Placement. Nodes that stay keep their machines (a running node does not move: its
processes would not survive); added nodes are placed by the same METIS placement as
``create`` with those pinned (``tb-fix-node`` of an added node honoured, of a kept node
refused when it names another machine), a LAN whole with its members. So a LAN joining
running nodes of two machines cannot be placed and is refused by name.

Parts. The new description is split as at ``create``: a machine that keeps nodes gets a
``modify`` of its part (with the tunnels of the cut links it gains; the part removes the
tunnels of the cut links it loses), a machine that gains its first nodes gets a new part
(recorded before it is asked for, its clock started at the experiment's t = 0, so its
share of the timeline's past events fire at once), and a machine left with no node has
its part removed, last. A link cut before keeps its VXLAN id; a newly cut one draws an
id no recorded part uses; a new pair of machines is measured (a link cut across it that
asks for less delay than its one-way delay is refused, as at ``create``).

Failure. If a machine's modify or create fails, every machine is put back: the parts
that changed are modified back to their previous share, the new parts removed, and the
records restored; the error names the machine. The failed part itself rolls back as a
single-machine modify does.
"""

from __future__ import annotations

import dataclasses
import secrets
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from wanlab.cluster import connect, experiment, layers
from wanlab.cluster.experiment import _get, _handles, parts_of, split
from wanlab.errors import SpecError, WanlabError
from wanlab.model.ir import Experiment, LinkParams, validate
from wanlab.model.states import ACTIVE, DEGRADED, SWAPPED
from wanlab.plan.placement import Machine, assign, pieces
from wanlab.plan.plan import make_plan
from wanlab.store import cluster as rec
from wanlab.store.db import Store


def _shape(exp: Experiment) -> tuple:
    """What placement depends on: nodes, the ends of links, LAN members."""
    return (sorted(n.name for n in exp.nodes), sorted((x.name, x.a, x.b) for x in exp.links),
            sorted((x.name, tuple(sorted(m.node for m in x.members))) for x in exp.lans))


def _wide_area(old: Experiment, new: Experiment) -> Experiment:
    """``new`` with its wanlinks unshaped, as at create (wanassign placed the wide-area
    nodes for the paths they asked for: they cannot come or go by a modify)."""
    was = sorted(n.name for n in old.nodes if n.wide_area)
    now = sorted(n.name for n in new.nodes if n.wide_area)
    if was != now:
        raise WanlabError(f"modify of cluster experiment {new.name}: its wide-area nodes "
                          f"({', '.join(was) or 'none'}) cannot change (to "
                          f"{', '.join(now) or 'none'}): wanassign placed them for the "
                          f"paths their wanlinks ask for; terminate it and create it again")
    wide = set(now)
    return dataclasses.replace(new, links=tuple(
        dataclasses.replace(l, ab=LinkParams(), ba=LinkParams())
        if l.a in wide and l.b in wide else l for l in new.links))


def _kept(name: str, new: Experiment, before: dict[str, str]) -> dict[str, str]:
    """The machine of each node ``new`` keeps; refused when its pin says another."""
    kept = {n.name: before[n.name] for n in new.nodes if n.name in before}
    for n in new.nodes:
        if n.name in kept and n.fixed and n.fixed != kept[n.name]:
            raise WanlabError(f"modify of cluster experiment {name}: node {n.name} runs on "
                              f"machine {kept[n.name]} and is fixed to {n.fixed}; a running "
                              f"node does not move (tb-fix-node it to {kept[n.name]})")
    return kept


def _place(name: str, new: Experiment, handles: dict[str, Any], info,
           before: dict[str, str]) -> dict[str, str]:
    """Where every node (and ``lan:NAME``) of ``new`` goes: kept nodes where they run."""
    kept = _kept(name, new, before)
    hello = experiment.hellos(info, handles, f"modify of {name}")
    machines = [Machine(m.name, m.cores, hello[m.name]["memory_bytes"])
                for m in info.machines]
    try:
        placement = assign(new, machines, fixed=kept, together=pieces(new))
    except SpecError as e:
        raise WanlabError(f"modify of cluster experiment {name}: {e.message} (the nodes it "
                          f"keeps stay on their machines)") from None
    where = {n.name: placement.machine_of[n.name] for n in new.nodes}
    where.update({k: v for k, v in placement.machine_of.items() if k.startswith("lan:")})
    return where


def _vnis(store: Store, new: Experiment, where: dict[str, str],
          had: dict[str, int]) -> dict[str, int]:
    """A link cut before keeps its VXLAN id (even with other ends: each machine's part
    keeps both descriptions' tunnels by link and stub, so a failed modify rebuilds the
    one before with the same id on both sides); a newly cut link draws one."""
    cut = [l for l in new.links if where[l.a] != where[l.b]]
    keep = {l.name: had[l.name] for l in cut if l.name in had}
    return {**keep, **experiment.draw_vnis(store, [l.name for l in cut
                                                   if l.name not in keep])}


def _detail(part: Experiment, spec: dict[str, Any], one_way: dict) -> dict[str, Any]:
    return {"nodes": [n.name for n in part.nodes if n.kind != "remote"],
            "lans": [lan.name for lan in part.lans],
            "vnis": {t["link"]: t["vni"] for t in spec["tunnels"]},
            "one_way": {f"{a}|{b}": v for (a, b), v in one_way.items()}}


def modify(store: Store, name: str, new: Experiment, say=print) -> None:
    """Apply ``new`` to cluster experiment ``name`` (active or swapped), machine by
    machine; see the module's docstring."""
    row = store.get(name)
    new = dataclasses.replace(new, name=name)
    validate(new)
    if row.state not in (ACTIVE, SWAPPED):
        raise WanlabError(f"experiment {name!r} is {row.state}: modify takes an active or "
                          f"swapped one" + (f" ('wanlab swapin --repair {name}' first)"
                                            if row.state == DEGRADED else ""))
    # as at create: OCI images pulled on the controller, their config folded in
    from wanlab.backends.emulate import images, oci
    new = oci.apply(new, images.Images(images.images_dir(store.home)), say)
    new = _wide_area(row.ir, new)
    info = experiment._cluster(store)
    at = experiment.where_of(store, name)
    _kept(name, new, at.machine_of)
    records = {r.detail["machine"]: r for r in parts_of(store, name)}
    had = {k: v for r in records.values() for k, v in r.detail.get("vnis", {}).items()}
    addresses = {m.name: m.address for m in info.machines}
    with connect.session(info):
        handles = _handles(store, info)
        if _shape(new) == _shape(row.ir):
            where, one_way, vnis = at.machine_of, at.one_way, had
        else:
            where = _place(name, new, handles, info, at.machine_of)
            one_way = experiment.measure(handles, addresses, new, where, at.one_way)
            vnis = _vnis(store, new, where, had)
        parts = split(new, make_plan(new, "0000"), where, one_way, vnis, addresses)
        olds = split(row.ir, make_plan(row.ir, "0000"), at.machine_of, at.one_way, had,
                     addresses)
        for w in next(iter(parts.values()))[1]["warnings"] if parts else []:
            say(f"warning: {w}")
        changed = sorted(set(parts) & set(records))
        added = sorted(set(parts) - set(records))
        dropped = sorted(set(records) - set(parts))
        # recorded before anything is made: a kept part's record holds both descriptions'
        # nodes and VXLAN ids while it changes; a new part is planned
        for m in changed:
            now, was = _detail(*parts[m], one_way), records[m].detail
            rec.update(store, records[m].id, nodes=sorted({*was["nodes"], *now["nodes"]}),
                       lans=sorted({*was.get("lans", []), *now["lans"]}),
                       vnis={**was.get("vnis", {}), **now["vnis"]}, one_way=now["one_way"])
        new_ids = {}
        for m in added:
            parts[m][1]["token"] = secrets.token_hex(8)
            new_ids[m] = rec.record(store, "part", f"{name}@{m}", experiment=name,
                                    machine=m, token=parts[m][1]["token"],
                                    **_detail(*parts[m], one_way))
        if added or dropped:
            say(f"modifying {name}: " + ", ".join(
                [f"{m} changes" for m in changed] + [f"{m} joins" for m in added] +
                [f"{m} leaves" for m in dropped]))
        # images its nodes now name reach their machines first
        layers.send(store, handles, {m: parts[m][0] for m in (*changed, *added)}, _get, say)
        calls = [(m, "modify", (parts[m][0].to_json(), parts[m][1])) for m in changed]
        calls += [(m, "create", (parts[m][0].to_json(), parts[m][1])) for m in added]
        done, errors = _run(handles, name, calls)
        if not errors and row.state == SWAPPED and added:
            # a create swaps in: a new part of a swapped experiment is swapped out again
            _, errors = _run(handles, name, [(m, "swapout", ()) for m in added])
        if errors:
            _undo(store, handles, name, row.state, done, olds, records, new_ids, say)
            raise WanlabError(f"modify of {name}: " + "; ".join(errors) + " (every machine "
                              "put back to the previous description)")
        for m in added:
            rec.update(store, new_ids[m], "created")
        if row.state == ACTIVE and added:
            t0 = next((r.detail["t0"] for r in records.values() if "t0" in r.detail), None)
            if t0 is not None:
                _run(handles, name, [(m, "go", (t0,)) for m in added])
                for m in added:
                    rec.update(store, new_ids[m], t0=t0)
        for m in changed:
            rec.update(store, records[m].id, **_detail(*parts[m], one_way))
        lost = [m for m in dropped if not _drop(store, handles, name, records[m])]
    store.set_ir(row.id, new)
    say(f"{name}: modified on {len(parts)} machines" + (
        f" ({len(added)} joined, {len(dropped)} left)" if added or dropped else ""))
    if lost:
        raise WanlabError(f"{name}: modified, but machines {', '.join(lost)} did not remove "
                          f"their parts, which stay recorded: 'wanlab cleanup {name}' "
                          f"removes them")


def _run(handles: dict[str, Any], name: str, calls: list[tuple[str, str, tuple]]
         ) -> tuple[list[tuple[str, str]], list[str]]:
    """Each (machine, op, args) at once; returns the (machine, op) that succeeded and an
    error per one that did not."""
    done, errors = [], []
    with ThreadPoolExecutor(max(1, len(calls))) as pool:
        futs = {(m, op): pool.submit(_get, handles[m].run_part.remote(op, name, *args))
                for m, op, args in calls}
        for (m, op), f in futs.items():
            try:
                f.result()
                done.append((m, op))
            except Exception as e:      # noqa: BLE001 - said with its machine
                errors.append(f"machine {m}: {e}")
    return done, errors


def _undo(store: Store, handles: dict[str, Any], name: str, state: str,
          done: list[tuple[str, str]], olds: dict, records: dict, new_ids: dict,
          say) -> None:
    """Every machine back to the previous description (the failed ones rolled back on
    their own); the records as they were."""
    say(f"modify of {name} failed; putting every machine back")
    back = [(m, "modify", (olds[m][0].to_json(), olds[m][1])) for m, op in done
            if op == "modify"]
    _, errors = _run(handles, name, back)
    for r in records.values():
        rec.update(store, r.id, **{k: r.detail[k] for k in ("nodes", "lans", "vnis",
                                                            "one_way") if k in r.detail})
    for rid in new_ids.values():
        r = next(x for x in rec.live(store, "part") if x.id == rid)
        _drop(store, handles, name, r, "cleanup")
    for e in errors:
        say(f"warning: putting back {e}")


def _drop(store: Store, handles: dict[str, Any], name: str, r: rec.Record,
          op: str = "terminate") -> bool:
    """Remove one part on its machine; False (the part stays recorded) when the machine
    does not answer."""
    try:
        _get(handles[r.detail["machine"]].run_part.remote(op, name, r.detail.get("token")))
    except Exception:       # noqa: BLE001 - a lost machine: cleanup reaches it later
        return False
    rec.removed(store, r.id)
    return True
