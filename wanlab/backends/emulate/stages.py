"""Swap-in as named stages, each with a build and an undo.

A :class:`Build` says what one run of the stages makes: at swap-in everything
(:meth:`Build.everything`), at ``modify`` only what the new description adds
(:mod:`wanlab.backends.emulate.modify`). :func:`run` builds the stages in order. Every
resource a stage makes is recorded in the store before it is created, and :func:`run`
notes which records each stage added; if a stage fails, the stages built so far (the
failed one first) are undone in reverse order, each removing exactly its own records
through the registry of resource kinds (:mod:`wanlab.backends.emulate.resources`).

The emulation stages, in swap-in order (:data:`STAGES`):

  ``folder``      the experiment's folder and ``nodes/<node>/`` (kept on undo: results live there)
  ``roots``       each node that names an image: its overlay root over the image and its own
                  writable layer (kept across swap-outs), its tarfiles and packages once
                  (:mod:`wanlab.backends.emulate.rootfs`); the default image is built on
                  first use
  ``engine``      the experiment's own ``wanlab-engine``, on the CPUs reserved for it
                  (:func:`wanlab.backends.emulate.cpuplace.engine_cores`), logged and noted
                  on its record
  ``namespaces``  one network namespace per node; forwarding on, no IPv6 chatter
  ``cgroups``     the experiment's cgroup and one per node with its limits (cpu, memory,
                  pids, pinning; :mod:`wanlab.backends.emulate.cgroups`), which the node's
                  holder and every command entering the node join
  ``taps``        the engine creates each TAP (``apply``) inside its node's namespace, and
                  the links, LANs and simulated nodes between them
  ``cpus``        each node's cgroup on the CPUs the engine's placement suggests (nodes
                  off the engine's reserved or pinned cores, or with the partition that reads
                  their TAPs; :mod:`wanlab.backends.emulate.cpuplace`), logged, and noted
                  on the node's cgroup record; a node's own ``cpus`` is kept
  ``addresses``   loopback, and each TAP's MAC, MTU and address; up
  ``routes``      static and manual routes, and each node's ``/etc/netns/<ns>/hosts``
  ``edge``        the edge gateway's uplink and nftables rules (egress, port forwards,
                  WireGuard; :mod:`wanlab.backends.emulate.egress`)
  ``routing``     FRR daemons in every node, for dynamic routing; waits for convergence
  ``confine``     the holder of each node that runs something: its confinement (state
                  hidden, own /tmp, /run, /dev, host files read-only, fewer capabilities;
                  docs/security.md), built once, entered by every later command (FRR
                  builds its nodes' holders itself; an idle node's comes with its first
                  command)
  ``startcmds``   start commands (``tb-set-node-startcmd``), output in ``nodes/<node>/``

The run layer adds its own two (:mod:`wanlab.run.stages`): ``scheduler`` right after
``engine`` (its start-up overlaps the building) and ``clock`` last (t = 0). The life
cycle puts the list together (:func:`insert_after`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from wanlab.backends.emulate import (
    cgroups,
    cpuplace,
    egress,
    engine,
    external,
    frr,
    idmap,
    images,
    neighbours,
    netconf,
    netns,
    procs,
    resources,
    rootfs,
    userns,
)
from wanlab.backends.emulate.nodes import ensure_holders, start_command
from wanlab.engine import encode, in_force
from wanlab.engine.client import socket_of
from wanlab.engine.protocol import Apply, Stats
from wanlab.errors import WanlabError
from wanlab.model.ir import Experiment, cpuset_members
from wanlab.plan.routes import RouteEntry
from wanlab.plan.types import Interface, Plan
from wanlab.store.db import ExperimentRow, Store, make_private_dir

Progress = Callable[[str], None]


@dataclass
class Build:
    """One run of the stages: where, and what to make."""

    store: Store
    row: ExperimentRow
    exp: Experiment
    plan: Plan
    say: Progress
    nodes: list[str]                  # emulated nodes to create (namespace, folder)
    networks: list[str]               # links and LANs to add to the engine, with their TAPs
    routes: dict[str, list[RouteEntry]]   # nodes whose routes are set -> routes to replace
    hosts: list[str]                  # nodes whose hosts file is written
    startcmds: list[str]              # nodes whose start command runs
    swapin: bool = True               # a whole swap-in; False: a modify adds to a running one
    recorded: dict[str, list[int]] = field(default_factory=dict)   # stage -> resource ids
    ifindex: dict[str, int] = field(default_factory=dict)   # port -> TAP index (engine's reply)

    @property
    def folder(self) -> str:
        return self.store.folder(self.row.name)

    @property
    def socket(self) -> str:
        return socket_of(self.folder)

    @classmethod
    def everything(cls, store: Store, row: ExperimentRow, plan: Plan, say: Progress) -> Build:
        emulated = [n for n, np_ in plan.nodes.items() if not np_.simulated]
        exp = row.ir
        return cls(store, row, exp, plan, say, nodes=emulated,
                   networks=[*(l.name for l in exp.links), *(l.name for l in exp.lans)],
                   routes={n: [] for n in emulated}, hosts=emulated,
                   startcmds=[n.name for n in exp.nodes if n.startcmd and n.name in emulated])


@dataclass(frozen=True)
class Stage:
    name: str
    build: Callable[[Build], None]
    undo: Callable[[Build], None] | None = None     # default: remove what ``build`` recorded


def undo_recorded(b: Build, stage: str) -> None:
    """Remove, through the registry of kinds, the resources that ``stage`` recorded."""
    ids = b.recorded.get(stage, [])
    if ids:
        resources.remove(b.store, b.row.id, ids)


def keep(b: Build) -> None:
    """An undo that keeps what was built (the folder: results of earlier runs live there)."""


def run(stages: Sequence[Stage], b: Build, what: str = "swap-in") -> None:
    """Build ``stages`` in order; on failure undo what was built, newest first, and raise
    (a WanlabError as it is, anything else as a WanlabError naming ``what`` and the stage)."""
    built: list[Stage] = []
    try:
        for st in stages:
            before = {r.id for r in b.store.resources(b.row.id)}
            built.append(st)
            try:
                st.build(b)
            finally:
                b.recorded[st.name] = [r.id for r in b.store.resources(b.row.id)
                                       if r.id not in before]
    except BaseException as e:
        b.say(f"stage {built[-1].name} failed; undoing {', '.join(s.name for s in built)}")
        for st in reversed(built):
            try:
                if st.undo:
                    st.undo(b)
                else:
                    undo_recorded(b, st.name)
            except Exception as e2:     # go on: the later records are still there for cleanup
                b.say(f"undoing stage {st.name} failed: {e2}")
        if isinstance(e, (WanlabError, KeyboardInterrupt)):
            raise
        raise WanlabError(f"{what} failed at stage {built[-1].name}: {e}") from e


def insert_after(stages: Sequence[Stage], name: str, *new: Stage) -> tuple[Stage, ...]:
    """``stages`` with ``new`` right after the stage called ``name``."""
    names = [s.name for s in stages]
    if name not in names:
        raise WanlabError(f"no stage {name!r}; stages are {', '.join(names)}")
    k = names.index(name) + 1
    return (*stages[:k], *new, *stages[k:])


# -- the emulation stages -------------------------------------------------------------

def _folder(b: Build) -> None:
    make_private_dir(b.folder)          # 0700: specs, commands and logs are root's only
    for n in b.nodes:
        os.makedirs(os.path.join(b.folder, "nodes", n), exist_ok=True)
    os.makedirs(os.path.join(b.folder, "nodes"), exist_ok=True)


def _roots(b: Build) -> None:
    mine = set(b.nodes)
    want = [n for n in b.exp.nodes if n.image and n.name in mine]
    if not want:
        return
    store = images.Images(images.images_dir(b.store.home))
    layer_ids = {name: list(store.ensure(name, b.say).layers)
                 for name in sorted({n.image for n in want if n.image})}
    lowers = {name: [store.layer_path(x) for x in ids] for name, ids in layer_ids.items()}
    # in the experiment's user namespace (its netns's owner), each layer mounted idmapped
    base = userns.base_of(b.store, b.row.id)
    ufd = userns.owner_fd(netns.path(b.plan.nodes[want[0].name].netns)) \
        if base is not None else None
    try:
        _roots_in(b, want, store, layer_ids, lowers, base or 0, ufd)
    finally:
        if ufd is not None:
            os.close(ufd)


def _idmapped_lowers(b: Build, store: images.Images, layer_ids: dict[str, list[str]],
                     ufd: int) -> dict[str, list[str]]:
    """Each image's layers as the experiment's idmapped mounts (``lowers/<id>``, recorded
    first; those a modify finds mounted already are kept)."""
    folder = b.folder
    have = {r.name for r in b.store.resources(b.row.id)
            if r.kind == "idmap" and r.state == "created"}
    todo = sorted({x for ids in layer_ids.values() for x in ids
                   if idmap.lowers_path(folder, x) not in have})
    if todo:
        os.makedirs(os.path.join(folder, "lowers"), mode=0o700, exist_ok=True)
        b.store.record_many(b.row.id, [("idmap", idmap.lowers_path(folder, x),
                                        {"layer": store.layer_path(x)}) for x in todo])
        rec = {r.name: r.id for r in b.store.resources(b.row.id)
               if r.kind == "idmap" and r.state == "planned"}
        for x in todo:
            target = idmap.lowers_path(folder, x)
            os.makedirs(target, mode=0o755, exist_ok=True)
            idmap.mount_idmapped(store.layer_path(x), target, ufd)
            b.store.update_resource(rec[target], "created")
    return {name: [idmap.lowers_path(folder, x) for x in ids]
            for name, ids in layer_ids.items()}


def _roots_in(b: Build, want: list, store: images.Images, layer_ids: dict[str, list[str]],
              lowers: dict[str, list[str]], base: int, ufd: int | None) -> None:
    folder = b.folder
    mounted = lowers if ufd is None else _idmapped_lowers(b, store, layer_ids, ufd)
    spec = {n.name: dict(node=n.name, upper=os.path.join(rootfs.layer_path(folder, n.name),
                                                         "upper"))
            for n in want}
    b.store.record_many(b.row.id, [("overlay", rootfs.root_path(folder, n.name),
                                    spec[n.name]) for n in want])
    rec = {r.detail.get("node"): r.id for r in b.store.resources(b.row.id)
           if r.kind == "overlay" and r.state == "planned"}
    b.say(f"mounting {len(want)} node roots")       # recorded first, then mounted
    done: dict[int, dict] = {}
    try:
        for n in want:
            upper, work, _new = rootfs.prepare_layer(folder, n.name)
            idmap.own_layer(folder, n.name, base)
            root = rootfs.root_path(folder, n.name)
            rootfs.mount_root(mounted[n.image or ""], upper, work, root)
            done[rec[n.name]] = {}
    finally:
        if done:
            b.store.update_resources("created", done)
    for n in want:
        root = rootfs.root_path(folder, n.name)
        rootfs.personalize(root, n.name, base)
        marker = os.path.join(rootfs.layer_path(folder, n.name), "setup.json")
        key = rootfs.setup_key(n, lowers[n.image or ""])
        try:
            with open(marker) as f:
                old = f.read()
        except FileNotFoundError:
            old = None
        if old == key:
            continue
        if old is not None and json.loads(old).get("image") != lowers[n.image or ""]:
            b.say(f"warning: node {n.name}: its kept layer was made over another build of "
                  f"image {n.image}; it now lies over the current one")
        if n.tarfiles or n.packages:
            rootfs.setup(folder, n, root, b.say, ufd)
        with open(marker, "w") as f:
            f.write(key)


def _engine(b: Build) -> None:
    if not b.swapin:
        return
    threads = engine.threads_for(b.exp.engine_threads, len(b.exp.links) + len(b.exp.lans),
                                 b.exp.engine_cores)
    mine, why = cpuplace.engine_cores(b.exp.engine_cores, threads, cpuplace.allowed_of(None),
                                      cpuplace.forced())
    cpus = cpuplace.cpulist(mine)
    b.say(f"starting the engine ({threads} thread{'s' if threads > 1 else ''}) "
          + (f"on CPUs {cpus} ({why})" if cpus else f"with no CPU of its own ({why})"))
    eid = b.store.record(b.row.id, "engine", f"engine-{b.row.short}", socket=b.socket,
                         cpus=cpus, cpus_why=why)
    proc = engine.start(b.folder, b.exp.seed, threads, cpus)
    b.store.update_resource(eid, "created", pid=proc.pid, started=procs.start_time(proc.pid))


def _namespaces(b: Build) -> None:
    if not b.nodes:
        return
    b.say(f"creating {len(b.nodes)} node namespaces")
    nps = [b.plan.nodes[n] for n in b.nodes]
    b.store.record_many(b.row.id, [("netns", np_.netns, {"node": np_.name}) for np_ in nps])
    wanted = {np_.netns for np_ in nps}
    ns_res = {r.name: r.id for r in b.store.resources(b.row.id)
              if r.kind == "netns" and r.name in wanted and r.state == "planned"}
    neighbours.make_room(b.plan, b.say)
    base = None
    if userns.available():          # owned by the experiment's user namespace (recorded)
        uid, base = userns.claim(b.store, b.row.id)
    made = netns.create_many([np_.netns for np_ in nps], setup=netconf.apply_sysctls,
                             uid_base=base)
    done = {ns_res[np_.netns]: {"inode": ino} for np_, ino in zip(nps, made, strict=True)}
    if base is not None:
        done[uid] = {}
    b.store.update_resources("created", done)


def _cgroups(b: Build) -> None:
    nodes = [n for n in b.exp.nodes if n.name in set(b.nodes)]
    if not nodes:
        return
    asked = [n.name for n in nodes if cgroups.asks_for_limits(n)]
    h = cgroups.hierarchy()
    if h is None:
        if asked:
            raise WanlabError(f"node {asked[0]} asks for cpu/memory/pids limits, but this host "
                              f"has no usable cgroups (the cpu, memory and pids controllers; "
                              f"docs/resources.md)")
        return              # no limits asked: the nodes run without cgroups
    b.say(f"placing {len(nodes)} nodes in cgroups")
    mine = [r for r in b.store.resources(b.row.id)
            if r.kind == "cgroup" and r.detail.get("node") is None]
    if mine:                # a modify adds nodes to the running experiment's cgroup
        top = mine[0].detail["dirs"]
    else:
        top = h.dirs(f"{b.row.short}-{b.row.name}")
        rid = b.store.record(b.row.id, "cgroup", f"exp-{b.row.short}", dirs=top,
                             note=cgroups.note_file(b.folder))
        try:
            cgroups.make_experiment(h, top)
        except cgroups.Exists:
            b.store.mark_removed([rid])         # not ours: never remove it
            raise
        except (WanlabError, OSError) as e:
            if asked:
                raise WanlabError(f"node {asked[0]} asks for cpu/memory/pids limits, but "
                                  f"wanlab cannot make cgroups here: {e}") from None
            # e.g. a container whose cgroups are read-only: the nodes run without
            resources.remove(b.store, b.row.id, [rid])
            b.say(f"nodes run without cgroups here ({e})")
            return
        cgroups.note(b.folder, top)
        b.store.update_resource(rid, "created")
    dirs = {n.name: {c: os.path.join(d, n.name) for c, d in top.items()} for n in nodes}
    b.store.record_many(b.row.id, [
        ("cgroup", f"node-{n.name}", {"node": n.name, "dirs": dirs[n.name]}) for n in nodes])
    swap = cgroups.has_swap()
    for n in nodes:
        cgroups.make_node(h, dirs[n.name], n, swap)
    names = {f"node-{n.name}" for n in nodes}
    b.store.update_resources("created", {r.id: {} for r in b.store.resources(b.row.id)
                                         if r.kind == "cgroup" and r.name in names
                                         and r.state == "planned"})


def engine_ports(plan: Plan, networks: Sequence[str]) -> list[Interface]:
    """The interfaces of ``networks`` that are TAPs (on emulated nodes)."""
    nets = set(networks)
    return [i for np_ in plan.nodes.values() if not np_.simulated
            for i in np_.interfaces if i.network in nets]


def apply_timeout(taps: int, req: Apply) -> float:
    """Seconds to wait for the engine's reply to ``req``: the engine makes each TAP inside
    its namespace (about a millisecond each) and builds each simulated object (tens of
    microseconds each, after parsing the request): allow twenty times that on a busy
    machine, so that no fixed limit fails a large topology (100 000 simulated nodes take
    seconds)."""
    objects = sum(len(v) for v in (req.ports, req.links, req.lans, req.routers, req.hosts,
                                    req.agents))
    return 30 + 0.02 * taps + 0.001 * objects


def _taps(b: Build) -> None:
    ports = engine_ports(b.plan, b.networks)
    everything = b.swapin
    if not ports and not everything:
        return
    n_sim = sum(np_.simulated for np_ in b.plan.nodes.values()) if everything else 0
    b.say(f"wiring {len(ports)} interfaces into the engine"
          + (f" ({n_sim} simulated routers inside it)" if n_sim else ""))
    b.store.record_many(b.row.id, [
        ("tap", resources.tap_name(b.plan.nodes[i.node].netns, i.ifname),
         {"node": i.node, "ifname": i.ifname, "netns": b.plan.nodes[i.node].netns})
        for i in ports])
    req = encode.apply(b.plan, networks=None if everything else b.networks)
    with engine.Client(b.socket, timeout=apply_timeout(len(ports), req)) as c:
        reply = c.send(req)
        for hold in encode.hold_blocked(b.plan, None if everything else b.networks):
            c.send(hold)
    b.ifindex.update({p: v["ifindex"] for p, v in reply.get("ports", {}).items()
                      if "ifindex" in v})
    if everything:          # the engine has the description's values, on these ports
        in_force.reset(b.folder, b.plan.port_map())
    b.store.update_resources("created", {r.id: {} for r in b.store.resources(b.row.id)
                                         if r.kind == "tap" and r.state == "planned"})


def place_cpus(b: Build) -> None:
    """Place every node's cgroup on CPUs by the engine's placement (once its ``apply`` has
    placed the ports); a modify places them all again (ports placed stay where they are)."""
    groups = {r.detail["node"]: r for r in b.store.resources(b.row.id)
              if r.kind == "cgroup" and r.detail.get("node")}
    top = next((r.detail["dirs"] for r in b.store.resources(b.row.id)
                if r.kind == "cgroup" and r.detail.get("node") is None), None)
    if not groups or top is None or "cpuset" not in top:
        return
    own = {n.name for n in b.exp.nodes if n.cpus is not None}
    ports = {n: [i.port for i in b.plan.nodes[n].interfaces]
             for n in groups if n not in own and n in b.plan.nodes}
    with engine.Client(b.socket, timeout=30) as c:
        parts = c.send(Stats()).get("partitions") or []
    mine = next((r.detail.get("cpus") for r in b.store.resources(b.row.id)
                 if r.kind == "engine"), None)
    d = cpuplace.decide(parts, ports, cpuplace.allowed_of(cgroups.cpus_of(top)),
                        cpuplace.forced(), cpuset_members(mine) if mine else ())
    b.say(f"nodes on CPUs: {d.policy} ({d.why})")
    for n in ports:
        cpus = d.cpus.get(n)
        want = cpuplace.cpulist(cpus) if cpus else cgroups.cpus_of(top) or ""
        cgroups.place_cpus(groups[n].detail["dirs"], n, want)
        b.store.update_resource(groups[n].id, cpus=want, cpus_policy=d.policy)
    if own:
        b.say(f"nodes on their own CPUs: {', '.join(sorted(own))}")


def _addresses(b: Build) -> None:
    ports = engine_ports(b.plan, b.networks)
    touched = list(dict.fromkeys([*b.nodes, *(i.node for i in ports)]))
    if not touched:
        return
    b.say("configuring addresses")
    by_node: dict[str, list[Interface]] = {}
    for i in ports:
        by_node.setdefault(i.node, []).append(i)
    new_nodes = set(b.nodes)
    for n in touched:       # one netlink batch per node
        netconf.configure(b.plan.nodes[n], by_node.get(n, []), b.ifindex, lo=n in new_nodes)


def _routes(b: Build) -> None:
    if b.routes:
        b.say(f"installing routes in {len(b.routes)} nodes")
    for n, old in b.routes.items():
        netconf.install_routes(b.plan.nodes[n], old, b.ifindex)
    write_hosts([b.plan.nodes[n].netns for n in b.hosts], b.plan.hosts)


def _externals(b: Build) -> None:
    """Host interfaces into the nodes that hold one (``wanlab bridge``), each recorded
    with what it changes before it moves (kind ``iface``)."""
    made = set(b.nodes)
    for n in b.exp.nodes:
        if not n.external or n.name not in made:
            continue
        np_ = b.plan.nodes[n.name]
        b.say(f"bridging host interface {n.external} into node {n.name}")
        state = external.host_state(n.external)
        rid = b.store.record(b.row.id, "iface", n.external, netns=np_.netns, node=n.name,
                             **state)
        external.attach(n.external, np_.netns, np_.interfaces[0].ifname)
        b.store.update_resource(rid, "created")


def _edge(b: Build) -> None:
    """The edge gateway's uplink and rules (egress, forwards; docs/edge.md), when the
    gateway is made."""
    e = b.exp.edge
    if e is not None and e.gateway in set(b.nodes):
        egress.build(b.store, b.row, b.exp, b.plan, b.folder, b.say)


def _routing(b: Build) -> None:
    if b.exp.rtproto not in frr.DYNAMIC or not b.swapin:
        return
    frr.start(b.store, b.row, b.exp, b.plan, b.folder, b.say)
    took = frr.wait_converged(b.plan, timeout=60 + 3 * b.exp.ospf_dead_s,
                              settle=max(1.0, float(b.exp.ospf_hello_s)), say=b.say)
    b.say(f"routing converged in {took:.1f} s")


def _confine(b: Build) -> None:
    # nodes that will run something (start command, Program, traffic agent) get their
    # holder now, in parallel, so the timeline never waits for one; the others get it at
    # their first command (``wanlab exec``)
    busy = {n.name for n in b.exp.nodes if n.startcmd} | {p.node for p in b.exp.programs} | \
        {a.node for a in b.exp.agents if a.node}
    todo = [n for n in b.nodes if n in busy]
    if todo:
        b.say(f"confining {len(todo)} nodes")
    ensure_holders(b.store, b.row, [(b.plan.nodes[n].netns, n) for n in todo])


def _startcmds(b: Build) -> None:
    cmds = {n.name: n.startcmd for n in b.exp.nodes if n.startcmd}
    todo = [n for n in b.startcmds if cmds.get(n)]
    if todo:
        b.say(f"running {len(todo)} start commands")
    for n in todo:
        start_command(b.store, b.row, b.plan, n, cmds[n] or "", b.folder)


STAGES: tuple[Stage, ...] = (
    Stage("folder", _folder, keep),
    Stage("engine", _engine),
    Stage("namespaces", _namespaces),
    Stage("cgroups", _cgroups),
    Stage("roots", _roots),             # after cgroups: setup runs in the node's cgroup
    Stage("taps", _taps),
    Stage("cpus", place_cpus, keep),
    Stage("addresses", _addresses),
    Stage("routes", _routes),
    Stage("externals", _externals),
    Stage("edge", _edge),
    Stage("routing", _routing),
    Stage("confine", _confine),
    Stage("startcmds", _startcmds),
)


# -- what the stages do inside a node --------------------------------------------------

def write_hosts(namespaces: list[str], hosts: str) -> None:
    """``/etc/netns/<ns>/hosts`` of each namespace. The file lists every node, so N copies
    would cost N² bytes: a new one is a hard link to the first written; one that exists is
    written in place (a confined node has it bind-mounted), each inode once. The content
    is the experiment's, the same for every node, so sharing an inode is harmless."""
    written: set[int] = set()
    first = None
    for ns in namespaces:
        etc = os.path.join(netns.NETNS_ETC_DIR, ns)
        os.makedirs(etc, exist_ok=True)
        path = os.path.join(etc, "hosts")
        try:
            ino = os.stat(path).st_ino
        except FileNotFoundError:
            ino = None
        if ino is None and first is not None:
            os.link(first, path)
            continue
        if ino not in written:
            with open(path, "w") as f:
                f.write(hosts)
            # the node's /etc/hosts: every user in the node reads it (wanlab's umask is 077)
            os.chmod(path, 0o644)
            written.add(os.stat(path).st_ino)
        first = first or path
