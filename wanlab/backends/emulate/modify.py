"""Applying a changed description to a live experiment, touching only what changed.

The old and new plans are compared, and only the difference is applied:

* **links and LANs.** A network whose interfaces (node, ifname, address, MAC)
  are unchanged keeps running; if its parameters changed, they change in place
  with the engine's ``set``, without reordering. A network that is removed,
  or whose membership or addressing changed, is removed from the engine with
  its ports, whose TAPs go with them. The new version is then added with
  ``apply``.
* **nodes.** Removed nodes lose their processes and their namespace. Added
  nodes get a namespace and their start command. Kept nodes keep their
  processes.
* **routes and hosts.** Routes are replaced on each node whose table changed,
  and the hosts file is rewritten where its contents changed.

Processes on untouched nodes keep running, and traffic on untouched links is
never interrupted.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any


from wanlab.model.ir import Experiment
from wanlab.plan.plan import Interface, Plan, make_plan
from wanlab.backends.emulate import engine, netns, nodes, procs, swap
from wanlab.store.db import ExperimentRow, Store


def _net_ifaces(plan: Plan) -> dict[str, tuple[Interface, ...]]:
    out: dict[str, list[Interface]] = {}
    for np_ in plan.nodes.values():
        for i in np_.interfaces:
            out.setdefault(i.network, []).append(i)
    return {k: tuple(v) for k, v in out.items()}


def _engine_objects(plan: Plan) -> dict[str, dict[str, Any]]:
    objs = {l["link"]: l for l in plan.engine["links"]}
    objs.update({l["lan"]: l for l in plan.engine["lans"]})
    return objs


def apply_diff(store: Store, row: ExperimentRow, new: Experiment, say) -> dict[str, int]:
    """Change the live experiment ``row`` into ``new``; returns counts of what changed."""
    old_plan = make_plan(row.ir, row.short)
    new_plan = make_plan(new, row.short)
    old_nets, new_nets = _net_ifaces(old_plan), _net_ifaces(new_plan)
    old_objs, new_objs = _engine_objects(old_plan), _engine_objects(new_plan)
    kinds = {l.name: "link" for l in new.links} | {l.name: "lan" for l in new.lans}
    old_kinds = {l.name: "link" for l in row.ir.links} | {l.name: "lan" for l in row.ir.lans}

    gone_nets = [n for n in old_nets if n not in new_nets or old_nets[n] != new_nets[n]
                 or old_kinds.get(n) != kinds.get(n)]
    added_nets = [n for n in new_nets if n not in old_nets or n in gone_nets]
    kept_nets = [n for n in new_nets if n in old_nets and n not in gone_nets]
    gone_nodes = [n for n in old_plan.nodes if n not in new_plan.nodes]
    added_nodes = [n for n in new_plan.nodes if n not in old_plan.nodes]
    folder = nodes.folder_of(store, row.name)
    sock = os.path.join(folder, "engine.sock")
    counts = {"networks_removed": len(gone_nets), "networks_added": len(added_nets),
              "nodes_removed": len(gone_nodes), "nodes_added": len(added_nodes),
              "parameters_changed": 0, "route_tables_changed": 0}
    live = {(r.kind, r.name): r for r in store.resources(row.id)}

    with engine.Client(sock) as c:
        # 1. remove changed/removed networks and their ports
        if gone_nets:
            say(f"removing {len(gone_nets)} links/LANs")
            c.call("remove", links=[n for n in gone_nets if old_kinds[n] == "link"],
                   lans=[n for n in gone_nets if old_kinds[n] == "lan"],
                   ports=[i.port for n in gone_nets for i in old_nets[n]])
            store.mark_removed([live[("tap", f"{old_plan.nodes[i.node].netns}/{i.ifname}")].id
                                for n in gone_nets for i in old_nets[n]
                                if ("tap", f"{old_plan.nodes[i.node].netns}/{i.ifname}") in live])
        # 2. removed nodes: processes, then namespace
        for n in gone_nodes:
            ns = old_plan.nodes[n].netns
            res = live.get(("netns", ns))
            if res and res.detail.get("inode") and netns.inode(ns) == res.detail["inode"]:
                for pid in netns.pids_in(res.detail["inode"]):
                    procs.kill(pid, procs.start_time(pid))
            netns.delete(ns)
            ids = [r.id for (k, name), r in live.items()
                   if (k == "netns" and name == ns) or (r.detail.get("node") == n)]
            store.mark_removed(ids)
        # 3. added nodes
        if added_nodes:
            say(f"adding {len(added_nodes)} nodes")
            store.record_many(row.id, [("netns", new_plan.nodes[n].netns, {"node": n})
                                       for n in added_nodes])
            recs = {r.name: r.id for r in store.resources(row.id) if r.kind == "netns"}
            inodes = {}
            for n in added_nodes:
                np_ = new_plan.nodes[n]
                inodes[recs[np_.netns]] = {"inode": netns.create(np_.netns)}
                os.makedirs(os.path.join(folder, "nodes", n), exist_ok=True)
                swap.prepare_namespace(np_.netns)
            store.update_resources("created", inodes)
        # 4. added networks: ports (TAPs) and links/LANs in one apply
        if added_nets:
            say(f"adding {len(added_nets)} links/LANs")
            ifaces = [i for n in added_nets for i in new_nets[n]]
            store.record_many(row.id, [("tap", f"{new_plan.nodes[i.node].netns}/{i.ifname}",
                                        {"node": i.node, "ifname": i.ifname,
                                         "netns": new_plan.nodes[i.node].netns})
                                       for i in ifaces])
            wanted = {i.port for i in ifaces}
            c.call("apply", ports=[p for p in new_plan.engine["ports"] if p["port"] in wanted],
                   links=[l for l in new_plan.engine["links"] if l["link"] in added_nets],
                   lans=[l for l in new_plan.engine["lans"] if l["lan"] in added_nets])
            for n in {i.node for i in ifaces}:
                with contextlib.closing(netns.netlink(new_plan.nodes[n].netns)) as ipr:
                    for i in ifaces:
                        if i.node == n:
                            swap.configure_interface(ipr, i)
            store.update_resources("created", {r.id: {} for r in store.resources(row.id)
                                               if r.kind == "tap" and r.state == "planned"})
        # 5. parameter changes on kept networks
        for n in kept_nets:
            o, w = old_objs[n], new_objs[n]
            if kinds[n] == "link":
                for d in ("ab", "ba"):
                    if o[d] != w[d]:
                        c.call("set", target=n, dir=d, params=w[d])
                        counts["parameters_changed"] += 1
            else:
                for mo, mw in zip(o["members"], w["members"]):
                    for d in ("to_lan", "from_lan"):
                        if mo[d] != mw[d]:
                            c.call("set", target=n, member=mw["port"], dir=d, params=mw[d])
                            counts["parameters_changed"] += 1

    # 6. routes and hosts on every remaining node
    for n, np_ in new_plan.nodes.items():
        old = old_plan.nodes.get(n)
        if n in added_nodes or old is None or old.routes != np_.routes \
                or [i for i in old.interfaces] != [i for i in np_.interfaces]:
            swap.install_routes(np_, old.routes if old and n not in added_nodes else [])
            counts["route_tables_changed"] += 1
        if n in added_nodes or old_plan.hosts != new_plan.hosts:
            swap.write_hosts(np_.netns, new_plan.hosts)
    # 7. start commands of added nodes
    for node in new.nodes:
        if node.name in added_nodes and node.startcmd:
            nodes.start_command(store, row, new_plan, node.name, node.startcmd, folder)
    return counts


