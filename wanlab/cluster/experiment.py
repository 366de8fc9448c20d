"""A cluster experiment: placed over the machines, one part per machine, driven through
the machines' host agents (``wanlab create FILE --cluster``).

The controller plans the whole experiment once (addresses, static routes, hosts file),
places its nodes with :func:`wanlab.plan.placement.assign` (a LAN, and each connected
piece of simulated nodes, placed whole on one machine), and gives each machine a part:
its own nodes, with their addresses fixed to the global plan's and their routes as
manual routes; its links and LANs; and for every link cut between machines, a stub of
the neighbour across the cut. A cut link's direction is shaped on the machine that sends
it and carried to the other machine by VXLAN (:mod:`wanlab.cluster.part`), each frame
with the instant it is due there, where that machine's engine holds it until then (refused
when the machines' measured path is already longer than the configured delay). The controller's
store keeps the experiment and, in the ``cluster`` table, where each part is (recorded
before it is made), so ``terminate`` and ``cleanup`` reach exactly those.

With dynamic routing each machine runs FRR in its own nodes (never in the stubs), with
every node's loopback fixed to the whole plan's, so OSPF meets across the tunnels; a
BGP session whose two ends are on two machines is one bgpd on each, talking over the
cut link's tunnel as over any link.

Events (the timeline and ``tevc``) go to the machines that own their objects
(:mod:`wanlab.cluster.events`), and every part's clock starts at one moment, so t = 0 is
the same everywhere; what no one part can play (a sequence over several machines, ns
swapout/terminate) is the conductor's (:mod:`wanlab.cluster.conductor`). ``swapout`` and
``swapin`` act on every part through its machine's life cycle, and so does ``modify``
(:mod:`wanlab.cluster.modify`, which may also add and remove parts).

Simulated nodes run in their machine's engine as on one machine (their routes are the
whole plan's static ones); a link from one to a node on another machine is a cut link
like any other. A traffic agent's flow between simulated nodes runs in that engine too:
placement keeps its two ends on one machine, whose part plays its events and reports it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from wanlab.backends.emulate import oplock
from wanlab.cluster import agent as agents
from wanlab.cluster import connect, events, layers, local
from wanlab.cluster.info import ClusterInfo, alive
from wanlab.errors import WanlabError
from wanlab.model.ir import (
    Experiment,
    LinkParams,
    Node,
    Route,
    validate,
)
from wanlab.model.states import ACTIVATING, ACTIVE, DEGRADED, SWAPPED, SWAPPING_OUT
from wanlab.plan.placement import Machine, assign, pieces
from wanlab.plan.plan import make_plan
from wanlab.plan.types import Plan
from wanlab.store import cluster as rec
from wanlab.store import lock
from wanlab.store.db import Store

CALL_TIMEOUT_S = 600.0
# An agent's hello is asked again every HELLO_TIMEOUT_S while Ray counts its machine's node
# alive (a machine loaded far beyond its cores answers late), up to HELLO_PATIENCE_S; a
# machine whose node is dead is lost at once.
HELLO_TIMEOUT_S = 15.0
HELLO_PATIENCE_S = 180.0


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


def hello(info: ClusterInfo, machine: str, handle: Any, ref: Any = None) -> dict[str, Any]:
    """Machine ``machine``'s agent's ``hello`` (``ref``: one already asked). Raises as Ray
    does for a lost machine: at once when the actor or its node is dead; after
    HELLO_PATIENCE_S when the node lives but the agent never answers."""
    import ray
    ref = handle.hello.remote() if ref is None else ref
    m = next(x for x in info.machines if x.name == machine)
    deadline = time.monotonic() + HELLO_PATIENCE_S
    while True:
        try:
            return ray.get(ref, timeout=HELLO_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            if time.monotonic() >= deadline or not alive(m):
                raise


def hellos(info: ClusterInfo, handles: dict[str, Any], op: str) -> dict[str, dict[str, Any]]:
    """Each machine's agent's ``hello``; a machine whose agent does not answer is named
    (Ray's own exception is no message for a user)."""
    refs = {m: h.hello.remote() for m, h in handles.items()}
    out, silent = {}, []
    for m, ref in refs.items():
        try:
            out[m] = hello(info, m, handles[m], ref)
        except Exception:               # noqa: BLE001 - Ray raises many kinds for a lost agent
            silent.append(m)
    if silent:
        raise WanlabError(f"{op}: the agent of machine {', '.join(silent)} does not answer "
                          f"('wanlab cluster status' says which machines are up)")
    return out


def parts_of(store: Store, name: str) -> list[rec.Record]:
    """The parts of ``name`` that run it (not one moved off a lost machine)."""
    return [r for r in rec.live(store, "part") if r.detail.get("experiment") == name
            and not r.detail.get("moved_to")]


def moved_of(store: Store, name: str) -> list[rec.Record]:
    """Parts of ``name`` left on a lost machine when they were moved (kept recorded for
    ``terminate``/``cleanup`` to remove once the machine is back)."""
    return [r for r in rec.live(store, "part") if r.detail.get("experiment") == name
            and r.detail.get("moved_to")]


def is_cluster_experiment(store: Store, name: str) -> bool:
    return any(r.detail.get("experiment") == name for r in rec.live(store, "part"))


def _cluster(store: Store) -> ClusterInfo:
    info = local.current(store)
    if info is None:
        raise WanlabError("no cluster is up: 'wanlab cluster up --local N' first")
    return info


def _ips(plan: Plan, network: str, v6: bool = False) -> dict[str, str | None]:
    return {i.node: i.ip6 if v6 else i.ip for np_ in plan.nodes.values()
            for i in np_.interfaces if i.network == network}


def _fixed(plan: Plan, network: str, ends: tuple[str, str]) -> dict[str, Any]:
    """A link's addresses in the whole plan (each family it has), to keep in a part."""
    ips, ips6 = _ips(plan, network), _ips(plan, network, v6=True)
    out: dict[str, Any] = dict(ip6_a=ips6[ends[0]], ip6_b=ips6[ends[1]])
    if network in plan.subnets:
        out.update(ip_a=ips[ends[0]], ip_b=ips[ends[1]],
                   netmask=str(plan.subnets[network].prefixlen))
    return out


def split(exp: Experiment, plan: Plan, where: dict[str, str], one_way: dict[tuple[str, str],
          float], vnis: dict[str, int], addresses: dict[str, str]) -> dict[str, tuple[
              Experiment, dict[str, Any]]]:
    """Each machine's part of ``exp`` and the tunnels it needs; ``where``: node -> machine,
    ``one_way``: (machine, machine) -> measured one-way delay, ``vnis``: cut link -> VXLAN
    id, ``addresses``: machine -> its underlay address."""
    warnings: list[str] = []
    # a simulated router's traffic agents live on an endpoint host next to it: made here
    # from the whole plan (its addresses and routes), not again by a part's own plan
    exp, where, ep_links = _with_endpoints(exp, where)
    machines = sorted(set(where.values()))
    parts: dict[str, tuple[Experiment, dict[str, Any]]] = {}
    agents_by_name = {a.name: a for a in exp.agents}
    flows = _flow_agents(exp)
    for m in machines:
        local_nodes = [n for n in exp.nodes if where[n.name] == m]
        if not local_nodes:
            continue
        mine = {n.name for n in local_nodes}
        stubs: dict[str, Node] = {}
        links, tunnels = [], []
        for l in exp.links:
            fixed = _fixed(plan, l.name, (l.a, l.b))
            if l.a in mine and l.b in mine:
                links.append(dataclasses.replace(l, name=ep_links.get(l.name, l.name),
                                                 **fixed))
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
            # shaped here whole: the frames cross with their due time, and the far engine
            # holds each until then (so the path between the machines costs nothing)
            shaped, passed = out, LinkParams()
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
            ips, ips6 = _ips(plan, lan.name), _ips(plan, lan.name, v6=True)
            lans.append(dataclasses.replace(
                lan, netmask=str(plan.subnets[lan.name].prefixlen) if lan.name in
                plan.subnets else None,
                members=tuple(dataclasses.replace(mm, ip=ips[mm.node], ip6=ips6[mm.node])
                              for mm in lan.members)))
        dynamic = exp.rtproto not in ("static", "manual")
        nodes = []
        for n in local_nodes:
            # static: the whole plan's routes, as manual routes; dynamic: FRR finds them,
            # with every node's loopback (its router id and name) as in the whole plan
            if dynamic:
                nodes.append(dataclasses.replace(n, loopback=plan.nodes[n.name].loopback,
                                                 loopback6=plan.nodes[n.name].loopback6))
            else:
                nodes.append(dataclasses.replace(n, routes=tuple(
                    Route(r.dst, r.via) for r in plan.nodes[n.name].routes)))
        programs = tuple(p for p in exp.programs if p.node in mine)
        # every application with its agents goes to every part (a part numbers them in
        # order: the same order everywhere gives a flow the same port on both machines);
        # an end on another machine is a stub here, and each part runs its own end
        agents_ = tuple(a for a in exp.agents if a.name in flows or a.node in mine and
                        (a.peer is None or agents_by_name.get(a.peer) is not None and
                         agents_by_name[a.peer].node in mine))
        for a in agents_:
            if a.node and a.node not in mine:
                stubs.setdefault(a.node, Node(a.node, kind="remote"))
        nodes += [dataclasses.replace(stubs[k], loopback=plan.nodes[k].loopback if dynamic
                                      else None,
                                      loopback6=plan.nodes[k].loopback6 if dynamic else None)
                  for k in sorted(stubs)
                  if k not in {n.name for n in nodes}]
        # BGP: the part's own nodes' sessions (a session is between neighbours, so its
        # other end is here or a stub across a cut link: bgpd runs only in its own nodes,
        # and meets the far end's over the tunnel) and the AS numbers of the nodes here
        present = {n.name for n in nodes}
        part = dataclasses.replace(
            exp, nodes=tuple(nodes), links=tuple(links), lans=tuple(lans), programs=programs,
            agents=agents_, events=(), timelines=(), groups=(),
            rtproto=exp.rtproto if dynamic else "manual", warnings=(),
            asns=tuple((n, a) for n, a in exp.asns if n in present),
            bgp_sessions=tuple(x for x in exp.bgp_sessions if x.a in mine or x.b in mine))
        parts[m] = (part, {"tunnels": tunnels, "hosts": plan.hosts, "machine": m})
    # each part plays its share of the timeline (a cut link's event on both machines)
    at = events.Where(where, one_way)
    dropped = {a.name for a in exp.agents if a.role == "application" and a.traffic} - {
        a.name for p, _ in parts.values() for a in p.agents}
    shares = events.split(exp, at, exp.events)
    tls = events.timelines(exp, at)
    for m, (part, spec) in parts.items():
        kinds = part.kinds()
        mine = tuple(e for e in shares.get(m, []) if e.target in kinds)
        mine_tl = tuple(dataclasses.replace(t, events=tuple(e for e in t.events
                                                            if e.target in kinds))
                        for t in tls.get(m, ()))
        parts[m] = (dataclasses.replace(part, events=mine, timelines=mine_tl), spec)
    if dropped:
        warnings.append(f"applications not realised on the cluster: "
                        f"{', '.join(sorted(dropped))}")
    for _, spec in parts.values():
        spec["warnings"] = warnings
    return parts


def _with_endpoints(exp: Experiment, where: dict[str, str]) -> tuple[
        Experiment, dict[str, str], dict[str, str]]:
    """``exp`` with the endpoint hosts the plan gives simulated routers that carry traffic
    agents (:func:`wanlab.plan.sim_nodes.with_endpoints`), each on its router's machine;
    and a name for each endpoint's link in a part (the plan names it as its endpoint
    host, which a description may not: a part is one)."""
    from wanlab.plan.sim_nodes import with_endpoints
    out = with_endpoints(exp, {n.name for n in exp.nodes if n.kind == "simulated"})
    if out is exp:
        return exp, where, {}
    added = {l.b: l.a for l in out.links[len(exp.links):]}    # endpoint -> its router
    taken = set(out.kinds())
    names = {}
    for ep in added:
        name = f"{ep}-link"
        while name in taken:
            name += "x"
        taken.add(name)
        names[ep] = name
    return out, {**where, **{ep: where[router] for ep, router in added.items()}}, names


def _flow_agents(exp: Experiment) -> set[str]:
    """Every realised application, its transport agent and the agent that is its peer."""
    by_name = {a.name: a for a in exp.agents}
    out = set()
    for a in exp.agents:
        if a.role != "application" or a.traffic is None:
            continue
        out.add(a.name)
        transport = by_name.get(a.attached or "")
        if transport is not None:
            out.add(transport.name)
            if transport.peer:
                out.add(transport.peer)
    return out


def measure(handles: dict[str, Any], addresses: dict[str, str], exp: Experiment,
            where: dict[str, str], known: dict[tuple[str, str], float] | None = None
            ) -> dict[tuple[str, str], float]:
    """The one-way delay between every two machines a link of ``exp`` is cut across
    (half the RTT one pings), besides those ``known`` already."""
    import ray
    one_way = dict(known or {})
    pairs = sorted({tuple(sorted((where[l.a], where[l.b]))) for l in exp.links
                    if where[l.a] != where[l.b]} - set(one_way))
    for a, b in pairs:
        rtt = ray.get(handles[a].rtt_to.remote(addresses[b]), timeout=CALL_TIMEOUT_S)
        if rtt is None:
            raise WanlabError(f"--cluster: machine {a} cannot reach {b} ({addresses[b]})")
        one_way[(a, b)] = one_way[(b, a)] = rtt / 2
    return one_way


def draw_vnis(store: Store, links: list[str]) -> dict[str, int]:
    """A VXLAN id for each of ``links`` that no recorded part uses (a machine's underlay
    holds each id once)."""
    used = {v for r in rec.live(store, "part") for v in r.detail.get("vnis", {}).values()}
    vnis: dict[str, int] = {}
    for name in links:
        v = secrets.randbelow(1 << 24 - 1) + 1
        while v in used:
            v = secrets.randbelow(1 << 24 - 1) + 1
        used.add(v)
        vnis[name] = v
    return vnis


def create(store: Store, exp: Experiment, source_path: str | None,
           say=print, fixed: dict[str, str] | None = None) -> dict[str, Any]:
    """Place ``exp`` on the current cluster and build every part; returns the placement.
    ``fixed`` pins nodes to machines (``tb-fix-node``)."""
    for lan in exp.lans:
        if lan.switches:        # its trunks are patches between LANs of one engine
            raise WanlabError(f"--cluster: LAN {lan.name} is a tree of switches joined by "
                              f"trunks, which runs on one machine")
    info = _cluster(store)
    validate(exp)
    if store.find(exp.name) is not None:
        raise WanlabError(f"an experiment named {exp.name!r} exists already")
    # OCI images pulled on the controller (its machines get their layers by digest)
    from wanlab.backends.emulate import images, oci
    exp = oci.apply(exp, images.Images(images.images_dir(store.home)), say)
    # wide-area nodes first: wanassign pins them to measured machines (cluster/wide.py)
    from wanlab.cluster import wide
    exp, fixed = wide.place(store, info, exp, fixed, say)
    plan = make_plan(exp, "0000")
    with connect.session(info):
        handles = {m.name: agents.agent(info, m, agents.machine_home(store.home, m.name))
                   for m in info.machines}
        hello = hellos(info, handles, f"create of {exp.name}")
        machines = [Machine(m.name, m.cores, hello[m.name]["memory_bytes"])
                    for m in info.machines]
        # a LAN (one switch) and a piece of simulated nodes (one engine's) stay whole
        placement = assign(exp, machines, fixed=fixed, together=pieces(exp))
        where = {n.name: placement.machine_of[n.name] for n in exp.nodes}
        where.update({k: v for k, v in placement.machine_of.items() if k.startswith("lan:")})
        addresses = {m.name: m.address for m in info.machines}
        cut = [l for l in exp.links if where[l.a] != where[l.b]]
        one_way = measure(handles, addresses, exp, where)
        vnis = draw_vnis(store, [l.name for l in cut])
        parts = split(exp, plan, where, one_way, vnis, addresses)
        # each machine gets the images its nodes name first, by digest from here
        layers.send(store, handles, {m: p for m, (p, _) in parts.items()}, _get, say)
        row = store.add_experiment(exp, source_path)
        # held until every part is built, as a swap-in holds it: an operation that must
        # not wait (cluster down) sees the create and names it
        with _held(store, exp.name):
            one_way_rec = {f"{a}|{b}": v for (a, b), v in one_way.items()}
            # a part's token: a removal that overtakes its create (this controller killed
            # between the two) leaves it on the machine, which then refuses that create
            for _, spec in parts.values():
                spec["token"] = secrets.token_hex(8)
            recs = {m: rec.record(store, "part", f"{exp.name}@{m}", experiment=exp.name,
                                  token=spec["token"],
                                  machine=m, vnis={t["link"]: t["vni"] for t in spec["tunnels"]},
                                  nodes=[n.name for n in part.nodes if n.kind != "remote"
                                         and n.name in where],      # not endpoint hosts
                                  lans=[lan.name for lan in part.lans], one_way=one_way_rec)
                    for m, (part, spec) in parts.items()}
            say(f"placing {exp.name} on {len(parts)} machines: " + ", ".join(
                f"{m} {sum(1 for n in exp.nodes if where[n.name] == m)} nodes"
                for m in sorted(parts)) + f"; {len(cut)} links cut")
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
                _start_clocks(handles, exp.name, sorted(parts), store)
            except BaseException as e:
                say("creating the parts failed; removing them")
                _remove_parts(store, info, exp.name, handles, "cleanup")
                store.delete_experiment(row.id)
                lock.forget(store, exp.name)
                if isinstance(e, (WanlabError, KeyboardInterrupt)):     # Ctrl-C: rolled back
                    raise
                raise WanlabError(f"--cluster: creating {exp.name} failed: {e}") from e
            store.set_state(row.id, ACTIVE, "swapped in on the cluster")
        return {"machine_of": where, "cut_links": [l.name for l in cut],
                "one_way_s": {f"{a}-{b}": v for (a, b), v in one_way.items()}}


@contextlib.contextmanager
def _held(store: Store, name: str) -> Iterator[None]:
    """Hold ``name``'s lock, named as this process's (as the life cycle's operations do,
    :mod:`wanlab.backends.emulate.oplock`)."""
    with lock.holding(store, name) as (_row, fd):
        oplock.claim(fd)
        try:
            yield
        finally:
            oplock.release(fd)


def _remove_parts(store: Store, info: ClusterInfo, name: str, handles: dict[str, Any],
                  op: str) -> list[str]:
    """``terminate`` (or ``cleanup``) every recorded part; a part whose machine does not
    answer stays recorded (removed when it returns); returns those machines."""
    lost = []
    for r in parts_of(store, name) + moved_of(store, name):
        m = r.detail["machine"]
        try:
            # a lost machine is found out quickly, not after the long call's deadline
            hello(info, m, handles[m])
            _get(handles[m].run_part.remote(op, name, r.detail.get("token")))
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
    # the controller's own folder: a run's summary and plots (wanlab run --cluster)
    shutil.rmtree(store.folder(name), ignore_errors=True)
    say(f"{name}: terminated on the cluster")


def check(store: Store, name: str):
    """Ask every machine running a part of ``name`` how its part is (its own health
    check: engine, scheduler, namespaces). If a machine is lost, or a part is broken,
    the experiment becomes ``degraded`` (once), naming the machines, the parts' faults
    and their nodes; the other parts keep running. Returns the experiment's row. The
    caller holds the experiment's lock (a swap-out under way is not a fault)."""
    row = store.get(name)
    faults = faults_of(store, name)
    if not faults:
        return row
    store.set_state(row.id, DEGRADED, "health check", error="; ".join(faults))
    return store.get(name)


def faults_of(store: Store, name: str) -> list[str]:
    """What :func:`check` finds broken in ``name``'s parts (nothing is changed)."""
    info = local.current(store)
    machines = sorted({r.detail["machine"] for r in parts_of(store, name)})
    found = ({m: None for m in machines} if info is None
             else _part_states(store, info, name, machines))
    faults = []
    where = _machine_of(store, name)
    for m, state in sorted(found.items()):
        nodes = ", ".join(sorted(n for n, mm in where.items() if mm == m))
        if state is None:
            faults.append(f"machine {m} lost (nodes {nodes})")
        elif state["state"] != ACTIVE or state["broken"]:
            why = "; ".join(state["broken"]) or state["error"] or state["state"]
            faults.append(f"part on {m} broken: {why} (nodes {nodes})")
    return faults


def _part_states(store: Store, info: ClusterInfo, name: str, machines: list[str]
                 ) -> dict[str, dict[str, Any] | None]:
    """Each machine's answer to ``state`` for its part of ``name`` (None: the machine did
    not answer), by the agent's socket on this host, else through Ray."""
    out: dict[str, dict[str, Any] | None] = {}
    by_ray = []
    for m in machines:
        try:
            if not info.local:
                raise agents.NoAgentHere(m)
            out[m] = agents.call(agents.machine_home(store.home, m), "state", name,
                                 timeout=HELLO_TIMEOUT_S)
        except (agents.NoAgentHere, WanlabError):   # Ray tells a lost machine from an error
            by_ray.append(m)
    if by_ray:
        with connect.session(info):
            for m in by_ray:
                try:
                    handle = _handle(store, info, m)
                    hello(info, m, handle)
                    out[m] = _get(handle.run_part.remote("state", name))
                except WanlabError as e:        # the agent answered: its part is not well
                    out[m] = {"state": "unknown", "broken": [str(e)], "error": str(e)}
                except Exception:       # dead actor, dead node, timeout: Ray says it many ways
                    out[m] = None
    return out


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


# -- the clock, events and the life cycle of a placed experiment ------------------------
CLOCK_LEAD_S = 1.0      # every part's clock starts this long after the controller asks
SYNC_LEAD_S = 0.5       # an event for several machines fires this long after tevc asks


def _start_clocks(handles: dict[str, Any], name: str, machines: list[str],
                  store: Store | None = None) -> None:
    """t = 0 on every machine at one moment (wall clock: the machines' clocks are assumed
    synchronised, as they are on the local test cluster, which shares this host's); the
    moment is kept in the parts' records (tevc times events on several machines by it)."""
    at = time.time() + CLOCK_LEAD_S
    t0s = _each(handles, machines, "go", name, at)
    for r in parts_of(store, name) if store is not None else []:
        rec.update(store, r.id, t0=at)
    if store is not None:
        _conduct(store, handles, name, t0s)


def _conduct(store: Store, handles: dict[str, Any], name: str, t0s: dict[str, float]
             ) -> None:
    """Start the conductor (:mod:`wanlab.cluster.conductor`) on the first machine, for
    what no one part's timeline can play: sequences over several machines, ns
    swapout/terminate."""
    import ray
    items = events.conducted(store.get(name).ir, where_of(store, name))
    if not items:
        return
    first = sorted(t0s)[0]
    controller = {"node_id": ray.get_runtime_context().get_node_id(), "home": store.home}
    _get(handles[first].run_part.remote("conduct", name, t0s[first], items, handles,
                                        controller))


def _shared_time(store: Store, name: str, time_spec: str) -> str:
    """``now`` or ``+S`` as one time since t = 0 for every machine, a little ahead (the
    parts would otherwise each fire at the moment the request reached them)."""
    t0 = next((r.detail["t0"] for r in parts_of(store, name) if "t0" in r.detail), None)
    if t0 is None or not (time_spec == "now" or time_spec.startswith("+")):
        return time_spec
    try:
        offset = 0.0 if time_spec == "now" else float(time_spec[1:])
    except ValueError:
        return time_spec            # the parts' schedulers say what is wrong with it
    return f"{time.time() - t0 + SYNC_LEAD_S + max(offset, 0.0):.6f}"


def _each(handles: dict[str, Any], machines: list[str], op: str, name: str,
          *args: Any) -> dict[str, Any]:
    """``op`` on every machine's part at once; their answers by machine (the first
    machine's error is raised once every call is over)."""
    with ThreadPoolExecutor(max(1, len(machines))) as pool:
        futs = {m: pool.submit(_get, handles[m].run_part.remote(op, name, *args))
                for m in machines}
        out, errors = {}, []
        for m, f in futs.items():
            try:
                out[m] = f.result()
            except Exception as e:      # noqa: BLE001 - said with its machine below
                errors.append(f"machine {m}: {e}")
    if errors:
        raise WanlabError(f"{name}: " + "; ".join(errors))
    return out


def where_of(store: Store, name: str) -> events.Where:
    """Where the parts of ``name`` are, from their records."""
    machine_of: dict[str, str] = {}
    one_way: dict[tuple[str, str], float] = {}
    for r in parts_of(store, name):
        m = r.detail["machine"]
        machine_of.update({n: m for n in r.detail["nodes"]})
        machine_of.update({f"lan:{x}": m for x in r.detail.get("lans", [])})
        for k, v in r.detail.get("one_way", {}).items():
            a, b = k.split("|")
            one_way[(a, b)] = v
    return events.Where(machine_of, one_way)


def _handles(store: Store, info: ClusterInfo) -> dict[str, Any]:
    return {m.name: agents.agent(info, m, agents.machine_home(store.home, m.name))
            for m in info.machines}


def _machines(store: Store, name: str) -> list[str]:
    return sorted({r.detail["machine"] for r in parts_of(store, name)})


def join_halves(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The k-th send half of an agent's flows with its k-th receive half: what was
    received from the receiver's, what was sent (and TCP's window and RTT) from the
    sender's. ``machine`` becomes SENDER->RECEIVER."""
    whole = [f for f in rows if not f["result"].get("half")]
    halves: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for f in rows:
        if f["result"].get("half"):
            halves.setdefault((f["agent"], f["result"]["half"]), []).append(f)
    for agent in sorted({a for a, _ in halves}):
        sends, recvs = halves.get((agent, "send"), []), halves.get((agent, "receive"), [])
        for k in range(max(len(sends), len(recvs))):
            s = sends[k] if k < len(sends) else None
            r = recvs[k] if k < len(recvs) else None
            result = dict(s["result"]) if s else {}
            if r is not None:
                result.update({key: v for key, v in r["result"].items()
                               if v not in (None, [], {})})
            result.pop("half", None)
            row = {**(r or s), "result": result,
                   "machine": f"{s['machine'] if s else '?'}->{r['machine'] if r else '?'}"}
            whole.append(row)
    return sorted(whole, key=lambda f: (f.get("started_s") or 0.0, f["agent"]))


def routes(store: Store, name: str, node: str | None = None) -> dict[str, str]:
    """Each node's routing table, from the machine that runs it (not the stubs')."""
    where = _machine_of(store, name)
    if node is not None and node not in where:
        raise WanlabError(f"experiment {name!r} has no node {node!r}")
    machines = [where[node]] if node is not None else _machines(store, name)
    info = _cluster(store)
    with connect.session(info):
        got = _each(_handles(store, info), machines, "routes", name, node)
    return {n: t for m, tables in got.items() for n, t in sorted(tables.items())
            if where.get(n) == m}


def swapout(store: Store, name: str, say=print, reason: str = "swap-out") -> None:
    """Swap every part out on its machine (each keeps its own state: its nodes' writable
    layers, its event log, its flows); the experiment becomes ``swapped``. ``reason``:
    recorded in its state history (the facility's ``idle swap``)."""
    row = store.get(name)
    if row.state not in (ACTIVE, DEGRADED):
        raise WanlabError(f"experiment {name!r} is {row.state}, not active")
    info = _cluster(store)
    store.set_state(row.id, SWAPPING_OUT, reason)
    try:
        with connect.session(info):
            _each(_handles(store, info), _machines(store, name), "swapout", name)
    except WanlabError as e:
        store.set_state(row.id, DEGRADED, "swap-out failed", error=str(e))
        raise
    store.set_state(row.id, SWAPPED, "swapped out on the cluster")
    say(f"{name}: swapped out on {len(_machines(store, name))} machines")


def swapin(store: Store, name: str, say=print, fresh: bool = False) -> None:
    """Swap every part in again on the machine that held it, then start their clocks
    together. If one machine fails, the parts built are swapped out again. ``fresh``:
    each machine drops its nodes' writable layers first."""
    row = store.get(name)
    if row.state != SWAPPED:
        raise WanlabError(f"experiment {name!r} is {row.state}; only swapped cluster "
                          f"experiments can be swapped in")
    info = _cluster(store)
    machines = _machines(store, name)
    store.set_state(row.id, ACTIVATING, "swap-in")
    with connect.session(info):
        handles = _handles(store, info)
        try:
            _each(handles, machines, "swapin", name, fresh)
            _start_clocks(handles, name, machines, store)
        except BaseException as e:      # Ctrl-C too: no part is left running
            say(f"swap-in failed ({e or type(e).__name__}); swapping the parts out again")
            for m in machines:
                try:
                    _get(handles[m].run_part.remote("swapout", name))
                except WanlabError:
                    pass        # a part that never came in
            store.set_state(row.id, SWAPPED, "swap-in failed",
                            error=str(e) or type(e).__name__)
            raise
    store.set_state(row.id, ACTIVE, "swapped in on the cluster")
    say(f"{name}: active on {len(machines)} machines")


def node_argv(store: Store, name: str, node: str, argv: list[str]) -> list[str]:
    """An argv that runs ``argv`` in ``node`` from this host: only on the local test
    cluster, whose machines' namespaces are this host's (``wanlab shell``)."""
    info = _cluster(store)
    machine = _machine_of(store, name).get(node)
    if machine is None:
        raise WanlabError(f"{name} has no node {node!r}")
    if not info.local:
        raise WanlabError(f"node {node} runs on machine {machine}: a shell there needs a "
                          f"login on that machine; 'wanlab exec {name} {node} -- CMD' runs "
                          f"commands through its agent")
    with connect.session(info):
        return list(_get(_handle(store, info, machine).run_part.remote(
            "node_argv", name, node, argv)))
