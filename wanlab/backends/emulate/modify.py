"""Applying a changed description to a live experiment, touching only what changed.

:func:`wanlab.plan.diff.diff` says what changed (a pure function); :func:`apply` makes
it so, in three steps:

1. **remove**: removed or changed networks leave the engine with their ports (the engine
   deletes their TAPs); removed nodes lose their namespace and every process in it, and
   kept nodes whose start command changed lose the old command's process. All of it goes
   through the store's records and the registry of resource kinds.
2. **build**: the swap-in stages (:mod:`wanlab.backends.emulate.stages`) run over what
   the diff adds: namespaces, TAPs and addresses of added nodes and networks, the route
   tables and hosts files that changed, and the start commands to run. A failed stage
   undoes what this step built.
3. **set**: kept links and LANs whose parameters changed get the engine's ``set``,
   without reordering (:func:`param_requests`); kept nodes whose limits changed get them
   in their cgroups (:func:`wanlab.backends.emulate.cgroups.update`).

Processes on untouched nodes keep running, and traffic on untouched links is never
interrupted.
"""

from __future__ import annotations

from wanlab.backends.emulate import cgroups, egress, engine, resources, stages
from wanlab.backends.emulate.stages import Build, Progress
from wanlab.engine import encode, in_force
from wanlab.engine.client import socket_of
from wanlab.engine.protocol import Set
from wanlab.errors import WanlabError
from wanlab.model.ir import Experiment
from wanlab.plan.diff import Diff, diff
from wanlab.plan.plan import make_plan
from wanlab.store.db import ExperimentRow, Store

# the swap-in stages a modify runs (the engine, FRR and the clock run already)
MODIFY_STAGES = ("folder", "roots", "namespaces", "cgroups", "taps", "cpus", "addresses",
                 "routes", "startcmds")


def param_requests(d: Diff) -> list[Set]:
    """The engine's ``set`` patches for the diff's parameter changes (one per direction):
    only the fields the description changed, so a run-time change to another field (by
    tevc or the API) stays."""
    return [Set(target=p.network, dir=p.dir, params=encode.params_patch(p.old, p.params),
                member=p.member) for p in d.params]


def apply(store: Store, row: ExperimentRow, new: Experiment, say: Progress,
          build: tuple[stages.Stage, ...] | None = None) -> dict[str, int]:
    """Change the live experiment ``row`` into ``new``; returns counts of what changed.
    ``build``: the stages run over what the diff adds (default: emulation's
    :data:`MODIFY_STAGES`; the life cycle passes its own, a cluster part's with its
    tunnels)."""
    if egress.edge_key(row.ir) != egress.edge_key(new):
        raise WanlabError("modify cannot change the edge of a running experiment (egress, "
                          "forwards, uplink, WireGuard; its shaping can change): swap it out "
                          "and in again (docs/edge.md)")
    old_plan = make_plan(row.ir, row.short)
    new_plan = make_plan(new, row.short)
    d = diff(old_plan, new_plan)
    sock = socket_of(store.folder(row.name))

    # 1. remove
    live = store.resources(row.id)
    if d.networks_removed:
        say(f"removing {len(d.networks_removed)} links/LANs")
        with engine.Client(sock) as c:
            c.send(encode.remove(old_plan, d.networks_removed))
        gone_taps = {resources.tap_name(old_plan.nodes[i.node].netns, i.ifname)
                     for i in stages.engine_ports(old_plan, d.networks_removed)}
        resources.remove(store, row.id, [r.id for r in live
                                         if r.kind == "tap" and r.name in gone_taps])
    doomed = []
    for n in d.nodes_removed:
        ns = old_plan.nodes[n].netns
        doomed += [r.id for r in live if r.detail.get("node") == n
                   or (r.kind == "netns" and r.name == ns)]
    doomed += [r.id for r in live if r.kind == "process"
               and r.name in {f"startcmd-{n}" for n in d.startcmds}]
    if doomed:
        if d.nodes_removed:
            say(f"removing {len(d.nodes_removed)} nodes")
        resources.remove(store, row.id, doomed)

    # 2. build what the diff adds, through the swap-in stages
    b = Build(store, row, new, new_plan, say, nodes=d.nodes_added,
              networks=d.networks_added, routes=d.routes, hosts=d.hosts,
              startcmds=d.startcmds, swapin=False)
    stages.run(list(build) if build is not None else
               [s for s in stages.STAGES if s.name in MODIFY_STAGES], b,
               f"modify of {row.name!r}")

    # 3. parameters of kept networks
    reqs = param_requests(d)
    if reqs:
        with engine.Client(sock) as c:
            c.send_all(reqs)
    in_force.rebase(store.folder(row.name), row.ir, new, new_plan.port_map(),
                    d.networks_removed)
    # 4. limits of kept nodes (their cgroups)
    was = {n.name: cgroups.limits_of(n) for n in row.ir.nodes}
    redo = [n for n in new.nodes if n.name in was and cgroups.limits_of(n) != was[n.name]]
    groups = {r.detail["node"]: r.detail["dirs"] for r in store.resources(row.id)
              if r.kind == "cgroup" and r.detail.get("node")}
    if redo:
        say(f"changing the limits of {len(redo)} nodes")
    for n in redo:
        if n.name in groups:
            cgroups.update(groups[n.name], n, cgroups.has_swap())
        elif cgroups.asks_for_limits(n):
            raise WanlabError(f"node {n.name} has no cgroup (none on this host), so its limits "
                              f"cannot be set")
    if redo:                # a node that gave up its own ``cpus`` is placed again
        stages.place_cpus(b)
    return {**d.counts(), "limits_changed": len(redo)}
