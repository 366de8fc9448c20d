"""A cluster experiment: placed over the machines, one part per machine, driven through
the machines' host agents (``wanlab create FILE --cluster``).

The controller plans the whole experiment once (addresses, static routes, hosts file),
places its nodes with :func:`wanlab.plan.placement.assign` (a LAN stays whole, on the
machine of most of its members), and gives each machine a part: its own nodes, with
their addresses fixed to the global plan's and their routes as manual routes; its links
and LANs; and for every link cut between machines, a stub of the neighbour across the
cut. A cut link's direction is shaped on the machine that sends it, with the measured
one-way delay between the two machines subtracted from its delay (refused when the
machines' own path is already longer than the configured delay), and carried to the
other machine by VXLAN (:mod:`wanlab.cluster.part`). The controller's store keeps the
experiment and, in the ``cluster`` table, where each part is (recorded before it is
made), so ``terminate`` and ``cleanup`` reach exactly those.

With dynamic routing each machine runs FRR in its own nodes (never in the stubs), with
every node's loopback fixed to the whole plan's, so OSPF meets across the tunnels.

Not yet across machines (refused or warned, by name): BGP, simulated nodes, traffic
agents and timeline events whose objects span machines.
"""

from __future__ import annotations

import dataclasses
import secrets
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from wanlab.cluster import agent as agents
from wanlab.cluster import connect, local
from wanlab.cluster.info import ClusterInfo
from wanlab.errors import WanlabError
from wanlab.model.ir import (
    Experiment,
    LinkParams,
    Node,
    Route,
    validate,
)
from wanlab.plan.placement import Machine, Placement, assign
from wanlab.plan.plan import make_plan
from wanlab.plan.types import Plan
from wanlab.store import cluster as rec
from wanlab.store.db import Store

CALL_TIMEOUT_S = 600.0
HELLO_TIMEOUT_S = 15.0


def _get(ref: Any, timeout: float = CALL_TIMEOUT_S) -> Any:
    """``ray.get``, with an agent's WanlabError raised as itself (Ray wraps it with the
    agent's traceback, which is no message for a user)."""
    import ray
    try:
        return ray.get(ref, timeout=timeout)
    except ray.exceptions.RayTaskError as e:
        cause = getattr(e, "cause", None)
        if isinstance(cause, WanlabError):
            raise WanlabError(str(cause)) from None
        # a fault of the agent, not of the user: one line here, the whole of it in Ray's log
        raise WanlabError(f"a machine's agent failed: {type(cause).__name__}: "
                          f"{str(cause).strip().splitlines()[-1] if str(cause).strip() else ''}"
                          ) from None


def parts_of(store: Store, name: str) -> list[rec.Record]:
    return [r for r in rec.live(store, "part") if r.detail.get("experiment") == name]


def is_cluster_experiment(store: Store, name: str) -> bool:
    return bool(parts_of(store, name))


def _cluster(store: Store) -> ClusterInfo:
    info = local.current(store)
    if info is None:
        raise WanlabError("no cluster is up: 'wanlab cluster up --local N' first")
    return info


def _refuse_unsupported(exp: Experiment) -> list[str]:
    if exp.rtproto == "bgp" or exp.bgp_sessions:
        raise WanlabError("--cluster: BGP across machines is not built yet; use static "
                          "routes or OSPF ($ns rtproto Session)")
    sim = [n.name for n in exp.nodes if n.kind != "emulated"]
    if sim:
        raise WanlabError(f"--cluster: simulated nodes are not placed on clusters yet "
                          f"({', '.join(sim[:5])})")
    return []


def _keep_lans_whole(exp: Experiment, p: Placement) -> None:
    """Move every LAN's members to the machine of most of them (a LAN is one switch)."""
    for lan in exp.lans:
        count: dict[str, int] = {}
        for m in lan.members:
            count[p.machine_of[m.node]] = count.get(p.machine_of[m.node], 0) + 1
        home = max(sorted(count), key=lambda k: count[k])
        p.machine_of[f"lan:{lan.name}"] = home
        for m in lan.members:
            p.machine_of[m.node] = home


def _ips(plan: Plan, network: str) -> dict[str, str]:
    return {i.node: i.ip for np_ in plan.nodes.values() for i in np_.interfaces
            if i.network == network}


def _shorter(p: LinkParams, by: float) -> LinkParams:
    return dataclasses.replace(p, delay_s=max(0.0, p.delay_s - by))


def split(exp: Experiment, plan: Plan, where: dict[str, str], one_way: dict[tuple[str, str],
          float], vnis: dict[str, int], addresses: dict[str, str]) -> dict[str, tuple[
              Experiment, dict[str, Any]]]:
    """Each machine's part of ``exp`` and the tunnels it needs; ``where``: node -> machine,
    ``one_way``: (machine, machine) -> measured one-way delay, ``vnis``: cut link -> VXLAN
    id, ``addresses``: machine -> its underlay address."""
    warnings: list[str] = []
    machines = sorted(set(where.values()))
    parts: dict[str, tuple[Experiment, dict[str, Any]]] = {}
    for m in machines:
        local_nodes = [n for n in exp.nodes if where[n.name] == m]
        if not local_nodes:
            continue
        mine = {n.name for n in local_nodes}
        stubs: dict[str, Node] = {}
        links, tunnels = [], []
        for l in exp.links:
            ips = _ips(plan, l.name)
            prefix = str(plan.subnets[l.name].prefixlen)
            fixed = dict(ip_a=ips[l.a], ip_b=ips[l.b], netmask=prefix)
            if l.a in mine and l.b in mine:
                links.append(dataclasses.replace(l, **fixed))
                continue
            if l.a not in mine and l.b not in mine:
                continue
            near, far = (l.a, l.b) if l.a in mine else (l.b, l.a)
            path = one_way[(m, where[far])]
            out = l.ab if near == l.a else l.ba
            if 0 < out.delay_s < path:
                raise WanlabError(f"--cluster: link {l.name} ({l.a}-{l.b}) asks for "
                                  f"{out.delay_s * 1e3:.3f} ms, less than the "
                                  f"{path * 1e3:.3f} ms between machines {m} and "
                                  f"{where[far]} it is placed across")
            shaped, passed = _shorter(out, path), LinkParams()
            ab, ba = (shaped, passed) if near == l.a else (passed, shaped)
            links.append(dataclasses.replace(l, ab=ab, ba=ba, **fixed))
            stubs[far] = Node(far, kind="remote")
            # the stub's TAP on this link: the k-th interface of the stub in the part's plan
            tunnels.append({"stub": far, "link": l.name, "vni": vnis[l.name],
                            "peer": addresses[where[far]], "local": addresses[m]})
        lans = []
        for lan in exp.lans:
            if where[f"lan:{lan.name}"] != m:
                continue
            ips = _ips(plan, lan.name)
            lans.append(dataclasses.replace(
                lan, netmask=str(plan.subnets[lan.name].prefixlen),
                members=tuple(dataclasses.replace(mm, ip=ips[mm.node])
                              for mm in lan.members)))
        dynamic = exp.rtproto not in ("static", "manual")
        nodes = []
        for n in local_nodes:
            # static: the whole plan's routes, as manual routes; dynamic: FRR finds them,
            # with every node's loopback (its router id and name) as in the whole plan
            if dynamic:
                nodes.append(dataclasses.replace(n, loopback=plan.nodes[n.name].loopback))
            else:
                nodes.append(dataclasses.replace(n, routes=tuple(
                    Route(r.dst, r.via) for r in plan.nodes[n.name].routes)))
        nodes += [dataclasses.replace(stubs[k], loopback=plan.nodes[k].loopback if dynamic
                                      else None) for k in sorted(stubs)]
        programs = tuple(p for p in exp.programs if p.node in mine)
        agents_ = tuple(a for a in exp.agents if a.node in mine and
                        (a.peer is None or a.peer in {x.name for x in exp.agents
                                                      if x.node in mine}))
        part = dataclasses.replace(
            exp, nodes=tuple(nodes), links=tuple(links), lans=tuple(lans), programs=programs,
            agents=agents_, events=(), timelines=(), groups=(),
            rtproto=exp.rtproto if dynamic else "manual", warnings=())
        parts[m] = (part, {"tunnels": tunnels, "hosts": plan.hosts, "machine": m})
    if exp.events or exp.timelines:
        warnings.append("timeline events are not played on cluster experiments yet")
    dropped = {a.name for a in exp.agents} - {a.name for p, _ in parts.values()
                                               for a in p.agents}
    if dropped:
        warnings.append(f"traffic agents across machines are not realised yet: "
                        f"{', '.join(sorted(dropped))}")
    for _, spec in parts.values():
        spec["warnings"] = warnings
    return parts


def _ifname_of_stub(part: Experiment, short_plan: Plan, stub: str, link: str) -> str:
    for i in short_plan.nodes[stub].interfaces:
        if i.network == link:
            return i.ifname
    raise WanlabError(f"internal: stub {stub} has no interface on {link}")


def create(store: Store, exp: Experiment, source_path: str | None,
           say=print, fixed: dict[str, str] | None = None) -> dict[str, Any]:
    """Place ``exp`` on the current cluster and build every part; returns the placement.
    ``fixed`` pins nodes to machines (``tb-fix-node``)."""
    import ray
    info = _cluster(store)
    validate(exp)
    _refuse_unsupported(exp)
    if store.find(exp.name) is not None:
        raise WanlabError(f"an experiment named {exp.name!r} exists already")
    plan = make_plan(exp, "0000")
    with connect.session(info):
        handles = {m.name: agents.agent(info, m, agents.machine_home(store.home, m.name))
                   for m in info.machines}
        hellos = dict(zip(handles, ray.get([h.hello.remote() for h in handles.values()],
                                           timeout=CALL_TIMEOUT_S), strict=True))
        machines = [Machine(m.name, m.cores, hellos[m.name]["memory_bytes"])
                    for m in info.machines]
        placement = assign(exp, machines, fixed=fixed)
        _keep_lans_whole(exp, placement)
        where = {n.name: placement.machine_of[n.name] for n in exp.nodes}
        where.update({k: v for k, v in placement.machine_of.items() if k.startswith("lan:")})
        addresses = {m.name: m.address for m in info.machines}
        cut = [l for l in exp.links if where[l.a] != where[l.b]]
        pairs = sorted({tuple(sorted((where[l.a], where[l.b]))) for l in cut})
        one_way: dict[tuple[str, str], float] = {}
        for a, b in pairs:
            rtt = ray.get(handles[a].rtt_to.remote(addresses[b]), timeout=CALL_TIMEOUT_S)
            if rtt is None:
                raise WanlabError(f"--cluster: machine {a} cannot reach {b} "
                                  f"({addresses[b]})")
            one_way[(a, b)] = one_way[(b, a)] = rtt / 2
        used = {r.detail.get("vnis", {}).get(k) for r in rec.live(store, "part")
                for k in r.detail.get("vnis", {})}
        vnis: dict[str, int] = {}
        for l in cut:
            v = secrets.randbelow(1 << 24 - 1) + 1
            while v in used:
                v = secrets.randbelow(1 << 24 - 1) + 1
            used.add(v)
            vnis[l.name] = v
        parts = split(exp, plan, where, one_way, vnis, addresses)
        # the stubs' interface names come from each part's own plan
        for part, spec in parts.values():
            pplan = make_plan(part, "0000")
            for t in spec["tunnels"]:
                t["ifname"] = _ifname_of_stub(part, pplan, t["stub"], t["link"])
        row = store.add_experiment(exp, source_path)
        recs = {m: rec.record(store, "part", f"{exp.name}@{m}", experiment=exp.name,
                              machine=m, vnis={t["link"]: t["vni"] for t in spec["tunnels"]},
                              nodes=[n.name for n in part.nodes if n.kind != "remote"])
                for m, (part, spec) in parts.items()}
        say(f"placing {exp.name} on {len(parts)} machines: " + ", ".join(
            f"{m} {sum(1 for n in where.values() if n == m)} nodes" for m in sorted(parts))
            + f"; {len(cut)} links cut")
        for w in next(iter(parts.values()))[1]["warnings"] if parts else []:
            say(f"warning: {w}")
        try:
            with ThreadPoolExecutor(len(parts)) as pool:
                futs = {m: pool.submit(_get, handles[m].run_part.remote(
                    "create", exp.name, part.to_json(), spec))
                    for m, (part, spec) in parts.items()}
                for m, f in futs.items():
                    f.result()
                    rec.update(store, recs[m], "created")
        except BaseException as e:
            say("creating the parts failed; removing them")
            _remove_parts(store, info, exp.name, handles, "cleanup")
            store.delete_experiment(row.id)
            if isinstance(e, WanlabError):
                raise
            raise WanlabError(f"--cluster: creating {exp.name} failed: {e}") from e
        store.set_state(row.id, "active", "swapped in on the cluster")
        return {"machine_of": where, "cut_links": [l.name for l in cut],
                "one_way_s": {f"{a}-{b}": v for (a, b), v in one_way.items()}}


def _remove_parts(store: Store, info: ClusterInfo, name: str, handles: dict[str, Any],
                  op: str) -> list[str]:
    """``terminate`` (or ``cleanup``) every recorded part; a part whose machine does not
    answer stays recorded (removed when it returns); returns those machines."""
    import ray
    lost = []
    for r in parts_of(store, name):
        m = r.detail["machine"]
        try:
            # a lost machine is found out quickly, not after the long call's deadline
            ray.get(handles[m].hello.remote(), timeout=HELLO_TIMEOUT_S)
            _get(handles[m].run_part.remote(op, name))
            rec.removed(store, r.id)
        except WanlabError as e:        # the agent answered: say what it said
            lost.append(f"{m} ({e})")
        except Exception:               # a lost machine: Ray raises many kinds
            lost.append(m)
    return sorted(set(lost))


def terminate(store: Store, name: str, op: str = "terminate", say=print) -> None:
    """Remove every part of ``name`` on its machine, then the experiment."""
    info = _cluster(store)
    with connect.session(info):
        handles = {m.name: agents.agent(info, m, agents.machine_home(store.home, m.name))
                   for m in info.machines}
        lost = _remove_parts(store, info, name, handles, "cleanup" if op == "cleanup"
                             else "terminate")
    if lost:
        raise WanlabError(f"{name}: machines {', '.join(lost)} did not remove their parts, "
                          f"which stay recorded: 'wanlab cleanup {name}' when they are back")
    row = store.find(name)
    if row is not None:
        store.delete_experiment(row.id)
    say(f"{name}: terminated on the cluster")


def check(store: Store, name: str):
    """Ask every machine running a part of ``name`` whether it is there; if one is lost,
    the experiment becomes ``degraded`` (once), naming the machines and their nodes. The
    other parts keep running. Returns the experiment's row."""
    import ray
    row = store.get(name)
    info = local.current(store)
    if info is None:
        lost = sorted({r.detail["machine"] for r in parts_of(store, name)})
    else:
        lost = []
        with connect.session(info):
            for r in parts_of(store, name):
                m = r.detail["machine"]
                try:
                    ray.get(_handle(store, info, m).hello.remote(), timeout=HELLO_TIMEOUT_S)
                except Exception:       # dead actor, dead node, timeout: Ray says it many ways
                    lost.append(m)
    if not lost:
        return row
    where = _machine_of(store, name)
    parts = []
    for m in sorted(set(lost)):
        nodes = ", ".join(sorted(n for n, mm in where.items() if mm == m))
        parts.append(f"machine {m} lost (nodes {nodes})")
    why = "; ".join(parts)
    store.set_state(row.id, "degraded", "health check", error=why)
    return store.get(name)


def _machine_of(store: Store, name: str) -> dict[str, str]:
    return {n: r.detail["machine"] for r in parts_of(store, name) for n in r.detail["nodes"]}


def _handle(store: Store, info: ClusterInfo, machine: str):
    m = next((x for x in info.machines if x.name == machine), None)
    if m is None:
        raise WanlabError(f"machine {machine} is not in the current cluster")
    return agents.agent(info, m, agents.machine_home(store.home, machine))


def show(store: Store, name: str) -> dict[str, Any]:
    """Where each node runs, and each part's own ``show`` (from its machine)."""
    import ray
    info = _cluster(store)
    row = store.get(name)
    out: dict[str, Any] = {"name": name, "state": row.state,
                           "machine_of": _machine_of(store, name), "parts": {}}
    with connect.session(info):
        for r in parts_of(store, name):
            m = r.detail["machine"]
            try:
                out["parts"][m] = ray.get(_handle(store, info, m).run_part.remote(
                    "show", name), timeout=CALL_TIMEOUT_S)
            except Exception as e:      # a lost machine: Ray raises many kinds
                out["parts"][m] = {"error": f"machine {m} lost: {type(e).__name__}"}
    return out


def exec_(store: Store, name: str, node: str, argv: list[str]) -> tuple[int, str, str]:
    """Run ``argv`` on ``node`` through its machine's agent."""
    info = _cluster(store)
    machine = _machine_of(store, name).get(node)
    if machine is None:
        raise WanlabError(f"{name} has no node {node!r}")
    with connect.session(info):
        return tuple(_get(_handle(store, info, machine).run_part.remote(
            "exec", name, [node, *argv])))
