"""Wide-area nodes on a cluster: Netbed's wanassign in front of placement.

An experiment's wide-area nodes (``tb-set-node-wide-area``, YAML ``wide_area: true``,
``b.node(..., wide_area=True)``) go one per wide-area machine, chosen by the genetic
algorithm of :mod:`wanlab.plan.wanassign` so that the cluster's *measured* one-way delay
(and bandwidth, when asked) between their machines matches what their wanlinks (links
between two wide-area nodes) ask for. A wanlink is then carried over that real path, not
shaped by an engine: its delay and bandwidth are the path's, and the error of every
requested pair is said at ``create``, stored with the cluster (record ``wanmap``) and
shown by ``show``. A site's own network (nodes that reach the rest only through one
wide-area node) goes on that node's machine; the other nodes are placed as usual, with
the wide-area ones pinned.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from wanlab.cluster.info import ClusterInfo
from wanlab.errors import WanlabError
from wanlab.model.ir import Experiment, LinkParams
from wanlab.plan.wanassign import WanMapping, map_request, wide_area_request
from wanlab.store import cluster as rec
from wanlab.store.db import Store


def place(store: Store, info: ClusterInfo, exp: Experiment, fixed: dict[str, str] | None,
          say: Callable[[str], None] = print) -> tuple[Experiment, dict[str, str] | None]:
    """``exp`` with its wanlinks unshaped (the real path carries them) and ``fixed`` with
    each wide-area node pinned to its machine; ``exp`` unchanged without wide-area nodes."""
    req = wide_area_request(exp)
    if req is None:
        return exp, fixed
    from wanlab.cluster import join
    sites = [m.name for m in info.machines if m.wide_area]
    if len(sites) < len(req.nodes):
        raise WanlabError(f"--cluster: {len(req.nodes)} wide-area nodes "
                          f"({', '.join(req.nodes)}) but the cluster has {len(sites)} "
                          f"wide-area machines (cluster up --wide-area, or --local N "
                          f"--wan-delay)")
    mx = join.matrix(store)
    if mx is None:
        raise WanlabError("--cluster: the cluster's paths were not measured; take it down "
                          "and up again")
    index = {n: i for i, n in enumerate(mx["machines"])}
    pick = [index[s] for s in sites]
    one_way = np.array(mx["one_way_s"], dtype=float)[np.ix_(pick, pick)]
    bw = None
    if mx.get("bandwidth_bps"):
        bw = np.array([[np.nan if v is None else v for v in row]
                       for row in mx["bandwidth_bps"]], dtype=float)[np.ix_(pick, pick)]
    for n in req.nodes:
        if (fixed or {}).get(n) or exp.node(n).fixed:
            raise WanlabError(f"--cluster: node {n} is wide-area and fixed to a machine "
                              f"(tb-fix-node); wanassign places wide-area nodes: drop one")
    mapping = map_request(req, sites, one_way, bw, seed=exp.seed)
    report(mapping, say)
    forget(store, exp.name)                     # an earlier experiment of that name
    rid = rec.record(store, "wanmap", exp.name, **as_record(mapping))
    rec.update(store, rid, "created")
    wide = set(req.nodes)
    links = tuple(dataclasses.replace(l, ab=LinkParams(), ba=LinkParams())
                  if l.a in wide and l.b in wide else l for l in exp.links)
    pins = {**site_networks(exp, mapping.site_of), **(fixed or {}), **mapping.site_of}
    return dataclasses.replace(exp, links=links), pins


def site_networks(exp: Experiment, site_of: dict[str, str]) -> dict[str, str]:
    """Nodes that reach the rest of the experiment only through one wide-area node (a
    site's own network: hosts behind a wide-area router) go on that node's machine; the
    placer would otherwise be free to put them across a path longer than their links."""
    wide = set(site_of)
    adj: dict[str, set[str]] = {n.name: set() for n in exp.nodes}
    for l in exp.links:
        adj[l.a].add(l.b)
        adj[l.b].add(l.a)
    for lan in exp.lans:
        names = [m.node for m in lan.members]
        for x in names:
            adj[x].update(y for y in names if y != x)
    out: dict[str, str] = {}
    seen: set[str] = set()
    for start in adj:
        if start in wide or start in seen:
            continue
        comp, touches, todo = [], set(), [start]
        seen.add(start)
        while todo:
            x = todo.pop()
            comp.append(x)
            for y in adj[x]:
                if y in wide:
                    touches.add(y)
                elif y not in seen:
                    seen.add(y)
                    todo.append(y)
        if len(touches) == 1:
            (w,) = touches
            out.update({x: site_of[w] for x in comp if not exp.node(x).fixed})
    return out


def as_record(m: WanMapping) -> dict[str, Any]:
    return {"site_of": m.site_of, "total_error": m.total_error,
            "generations": m.generations, "seconds": m.seconds,
            "pairs": [dataclasses.asdict(p) for p in m.pairs]}


def lines(d: dict[str, Any]) -> list[str]:
    """The mapping as text: where each wide-area node went, and each pair's error."""
    out = ["wide-area nodes (wanassign): " + ", ".join(
        f"{n} on {m}" for n, m in sorted(d["site_of"].items()))]
    for p in d["pairs"]:
        if p["metric"] == "delay":
            out.append(f"  {p['a']} -> {p['b']}: delay asked {p['want'] * 1e3:.2f} ms, "
                       f"path {p['got'] * 1e3:.2f} ms, error {p['error'] * 100:.1f} %")
        else:
            out.append(f"  {p['a']} -> {p['b']}: bandwidth asked {p['want'] / 1e6:.3g} "
                       f"Mbit/s, path {p['got'] / 1e6:.3g} Mbit/s, shortfall "
                       f"{p['error'] * 100:.1f} %")
    return out


def report(m: WanMapping, say: Callable[[str], None]) -> None:
    for line in lines(as_record(m)):
        say(line)


def stored(store: Store, name: str) -> dict[str, Any] | None:
    """The wide-area mapping stored for experiment ``name``, if any."""
    rows = [r for r in rec.live(store, "wanmap") if r.name == name]
    return rows[-1].detail if rows else None


def forget(store: Store, name: str) -> None:
    """The stored mapping of ``name`` goes (with the experiment)."""
    for r in rec.live(store, "wanmap"):
        if r.name == name:
            rec.removed(store, r.id)
