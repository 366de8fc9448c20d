"""What changes between two plans of one experiment (``modify``): a pure function.

:func:`diff` compares the old and the new plan and says, without touching anything:

* **networks** (links and LANs) removed, and added. A network whose interfaces (node,
  ifname, address, MAC) or kind changed counts as removed and added again; one that only
  changed its parameters is kept, with a :class:`ParamChange` per changed direction (in
  the IR's units: the engine's patch is made by :func:`wanlab.engine.encode.params_patch`).
* **nodes** removed and added.
* **routes**: the nodes whose route table is (re)written, with the routes it replaces;
  **hosts**: the nodes whose hosts file is written.
* **start commands**: the nodes whose start command runs: added nodes that have one,
  and kept nodes whose command changed.

:mod:`wanlab.backends.emulate.modify` applies a diff.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wanlab.model.ir import LinkParams
from wanlab.plan.routes import RouteEntry
from wanlab.plan.types import Interface, Plan


@dataclass(frozen=True)
class ParamChange:
    """New parameters for one direction of a kept link (``dir`` ab/ba) or of one LAN
    member's half (``member`` = its port, ``dir`` to_lan/from_lan)."""
    network: str
    dir: str
    params: LinkParams
    member: str | None = None
    old: LinkParams = field(default_factory=LinkParams)   # what was configured before


@dataclass
class Diff:
    networks_removed: list[str] = field(default_factory=list)
    networks_added: list[str] = field(default_factory=list)
    nodes_removed: list[str] = field(default_factory=list)
    nodes_added: list[str] = field(default_factory=list)
    params: list[ParamChange] = field(default_factory=list)
    routes: dict[str, list[RouteEntry]] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    startcmds: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """How much changed, for the transition's reason and the user."""
        return {"networks_removed": len(self.networks_removed),
                "networks_added": len(self.networks_added),
                "nodes_removed": len(self.nodes_removed),
                "nodes_added": len(self.nodes_added),
                "parameters_changed": len(self.params),
                "route_tables_changed": len(self.routes),
                "start_commands_run": len(self.startcmds)}


def _net_ifaces(plan: Plan) -> dict[str, tuple[Interface, ...]]:
    out: dict[str, list[Interface]] = {}
    for np_ in plan.nodes.values():
        for i in np_.interfaces:
            out.setdefault(i.network, []).append(i)
    return {k: tuple(v) for k, v in out.items()}


def _kinds(plan: Plan) -> dict[str, str]:
    exp = plan.exp
    assert exp is not None
    return {l.name: "link" for l in exp.links} | {l.name: "lan" for l in exp.lans}


def diff(old: Plan, new: Plan) -> Diff:
    """The difference from ``old`` to ``new`` (plans of the same experiment id)."""
    assert old.exp is not None and new.exp is not None
    old_nets, new_nets = _net_ifaces(old), _net_ifaces(new)
    old_kinds, new_kinds = _kinds(old), _kinds(new)
    d = Diff()
    # a network whose pair channels or rules changed is rebuilt (not changed in place)
    old_pairs = {l.name: l.pairs for l in old.lans} | {l.name: l.rules for l in old.links}
    new_pairs = {l.name: l.pairs for l in new.lans} | {l.name: l.rules for l in new.links}
    d.networks_removed = [n for n in old_kinds if n not in new_kinds
                          or old_nets.get(n) != new_nets.get(n)
                          or old_kinds[n] != new_kinds[n]
                          or old_pairs.get(n) != new_pairs.get(n)]
    gone = set(d.networks_removed)
    d.networks_added = [n for n in new_kinds if n not in old_kinds or n in gone]
    d.nodes_removed = [n for n in old.nodes if n not in new.nodes]
    d.nodes_added = [n for n in new.nodes if n not in old.nodes]

    old_links = {l.name: l for l in old.links}
    new_links = {l.name: l for l in new.links}
    old_lans = {l.name: l for l in old.lans}
    new_lans = {l.name: l for l in new.lans}
    for n in new_kinds:
        if n in gone or n not in old_kinds:
            continue
        if new_kinds[n] == "link":
            o, w = old_links[n], new_links[n]
            d.params += [ParamChange(n, k, getattr(w, k), old=getattr(o, k))
                         for k in ("ab", "ba") if getattr(o, k) != getattr(w, k)]
        else:
            for mo, mw in zip(old_lans[n].members, new_lans[n].members, strict=True):
                d.params += [ParamChange(n, k, getattr(mw, k), member=mw.port,
                                         old=getattr(mo, k))
                             for k in ("to_lan", "from_lan") if getattr(mo, k) != getattr(mw, k)]

    added = set(d.nodes_added)
    for n, np_ in new.nodes.items():
        if np_.simulated:
            continue
        was = old.nodes.get(n)
        if n in added or was is None or was.simulated:
            d.routes[n] = []
        elif was.routes != np_.routes or was.interfaces != np_.interfaces \
                or any(i.network in gone for i in np_.interfaces):
            # (a rebuilt network's TAP is new: the kernel dropped the routes through it)
            d.routes[n] = list(was.routes)
        if n in added or old.hosts != new.hosts:
            d.hosts.append(n)

    old_cmds = {n.name: n.startcmd for n in old.exp.nodes}
    for n in new.exp.nodes:
        if not n.startcmd or new.nodes[n.name].simulated:
            continue
        if n.name in added or old_cmds.get(n.name) != n.startcmd:
            d.startcmds.append(n.name)
    return d
