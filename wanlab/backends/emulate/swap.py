"""Swap-in and teardown: the named stages that build and remove an experiment.

Swap-in stages, in order (each resource is recorded in the store *before*
it is created, so a crash at any point leaves a record of everything that
may exist):

  1. ``folder``     the experiment's folder (kept across swaps: results live there)
  2. ``engine``     the experiment's own ``wanlab-engine`` process
  3. ``namespaces`` one network namespace per node, loopback up, forwarding on
  4. ``taps``       the engine creates every TAP (``apply``) directly inside its node's
                    namespace as ``ethN``; each gets its MAC, address and MTU, and is
                    brought up (TAPs die with the engine process or the namespace)
  5. ``routes``     static/manual routes, per-node ``/etc/netns/<ns>/hosts``
  6. ``startcmds``  ``tb-set-node-startcmd`` commands, output and exit code kept in
                    ``<folder>/nodes/<node>/``
  7. ``clock``      the event scheduler (started with the engine, so its start-up
                    overlaps the building) is told to start: this is t = 0

Teardown removes exactly the recorded resources, in reverse order, and is
idempotent: what is already gone is skipped.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable

from pyroute2.netlink.exceptions import NetlinkError

from wanlab.errors import WanlabError
from wanlab.model.ir import Experiment
from wanlab.plan.plan import Interface, NodePlan, Plan, make_plan
from wanlab.plan.routes import RouteEntry
from wanlab.backends.emulate import engine, frr, netns, procs
from wanlab.backends.emulate.nodes import folder_of, start_command
from wanlab.store.db import ExperimentRow, Store, make_private_dir

Progress = Callable[[str], None]


def swap_in(store: Store, row: ExperimentRow, progress: Progress | None = None) -> Plan:
    """Build every resource of ``row``; on failure remove what was built and raise."""
    say = progress or (lambda msg: None)
    exp = row.ir
    plan = make_plan(exp, row.short)
    try:
        _build(store, row, exp, plan, say)
    except BaseException as e:
        say("swap-in failed; removing what was built")
        teardown(store, row.id)
        if isinstance(e, (WanlabError, KeyboardInterrupt)):
            raise
        raise WanlabError(f"swap-in of {row.name!r} failed: {e}") from e
    return plan


def _build(store: Store, row: ExperimentRow, exp: Experiment, plan: Plan, say: Progress) -> None:
    from wanlab.run import scheduler     # run/ builds on realize/: import at use
    folder = folder_of(store, row.name)
    make_private_dir(folder)            # 0700: specs, commands and logs are root's only
    os.makedirs(os.path.join(folder, "nodes"), exist_ok=True)

    say("starting the engine")
    eid = store.record(row.id, "engine", f"engine-{row.short}",
                       socket=os.path.join(folder, "engine.sock"))
    proc = engine.start(folder, exp.seed)
    store.update_resource(eid, "created", pid=proc.pid, started=procs.start_time(proc.pid))
    # the event scheduler starts now so its start-up overlaps the building; t = 0 comes last
    scheduler.start(store, row, folder)

    emulated = [np_ for np_ in plan.nodes.values() if not np_.simulated]
    say(f"creating {len(emulated)} node namespaces")
    store.record_many(row.id, [("netns", np_.netns, {"node": np_.name}) for np_ in emulated])
    ns_res = {r.name: r.id for r in store.resources(row.id) if r.kind == "netns"}
    inodes: dict[int, int] = {}
    for np_ in emulated:
        inodes[ns_res[np_.netns]] = netns.create(np_.netns)
        os.makedirs(os.path.join(folder, "nodes", np_.name), exist_ok=True)
        prepare_namespace(np_.netns)
    store.update_resources("created", {rid: {"inode": ino} for rid, ino in inodes.items()})

    ports = [i for np_ in emulated for i in np_.interfaces]
    n_sim = len(plan.nodes) - len(emulated)
    say(f"wiring {len(ports)} interfaces into the engine"
        + (f" ({n_sim} simulated routers inside it)" if n_sim else ""))
    store.record_many(row.id, [("tap", f"{plan.nodes[i.node].netns}/{i.ifname}",
                                {"node": i.node, "ifname": i.ifname,
                                 "netns": plan.nodes[i.node].netns}) for i in ports])
    with engine.Client(os.path.join(folder, "engine.sock")) as c:
        c.call("apply", **plan.engine)

    say("configuring addresses and routes")
    for np_ in emulated:
        with contextlib.closing(netns.netlink(np_.netns)) as ipr:
            lo = ipr.link_lookup(ifname="lo")[0]
            ipr.link("set", index=lo, state="up")
            if np_.loopback:
                ipr.addr("add", index=lo, address=np_.loopback, prefixlen=32)
            for i in np_.interfaces:
                configure_interface(ipr, i)
        install_routes(np_, [])
        write_hosts(np_.netns, plan.hosts)
    store.update_resources("created", {r.id: {} for r in store.resources(row.id)
                                       if r.kind == "tap"})

    if exp.rtproto in frr.DYNAMIC:
        frr.start(store, row, exp, plan, folder, say)
        took = frr.wait_converged(plan, timeout=60 + 3 * exp.ospf_dead_s,
                                  settle=max(1.0, float(exp.ospf_hello_s)), say=say)
        say(f"routing converged in {took:.1f} s")

    starts = [n for n in exp.nodes if n.startcmd and not plan.nodes[n.name].simulated]
    if starts:
        say(f"running {len(starts)} start commands")
    for n in starts:
        start_command(store, row, plan, n.name, n.startcmd or "", folder)

    say("starting the clock (t = 0)")
    scheduler.go(folder)


def prepare_namespace(ns: str) -> None:
    """Kernel settings of a fresh node: forwarding on (any node may route), no IPv6
    router solicitations or DAD delays (they would only add chatter and start-up lag)."""
    with netns.entered(ns):
        for key, val in (("net/ipv4/ip_forward", "1"),
                         ("net/ipv6/conf/default/router_solicitations", "0"),
                         ("net/ipv6/conf/default/dad_transmits", "0"),
                         ("net/ipv6/conf/default/accept_ra", "0")):
            with open("/proc/sys/" + key, "w") as f:
                f.write(val)


def configure_interface(ipr, i: Interface) -> None:
    """MAC, MTU, address and up for a TAP the engine created in the node (``ipr`` is
    a netlink socket in that node)."""
    idx = ipr.link_lookup(ifname=i.ifname)[0]
    ipr.link("set", index=idx, address=i.mac, mtu=1500)
    ipr.addr("add", index=idx, address=i.ip, prefixlen=i.prefixlen)
    ipr.link("set", index=idx, state="up")


def install_routes(np_: NodePlan, old: list[RouteEntry]) -> None:
    """Make the node's routes ``np_.routes``: delete those of ``old`` no longer wanted."""
    with contextlib.closing(netns.netlink(np_.netns)) as ipr:
        index = {i.ifname: ipr.link_lookup(ifname=i.ifname)[0] for i in np_.interfaces}
        for r in old:
            if r not in np_.routes:
                with contextlib.suppress(NetlinkError):
                    ipr.route("del", dst="0.0.0.0/0" if r.dst == "default" else r.dst)
        for r in np_.routes:
            dst = "0.0.0.0/0" if r.dst == "default" else r.dst
            try:
                ipr.route("replace", dst=dst, gateway=r.via, oif=index[r.dev])
            except NetlinkError as e:
                raise WanlabError(f"node {np_.name}: cannot add route {r.dst} via {r.via} "
                                  f"dev {r.dev}: {e.args[1] if len(e.args) > 1 else e}") from None


def write_hosts(ns: str, hosts: str) -> None:
    etc = os.path.join(netns.NETNS_ETC_DIR, ns)
    os.makedirs(etc, exist_ok=True)
    with open(os.path.join(etc, "hosts"), "w") as f:
        f.write(hosts)


def teardown(store: Store, exp_id: int, progress: Progress | None = None) -> None:
    """Remove every recorded, not yet removed resource of the experiment, newest first."""
    say = progress or (lambda msg: None)
    res = store.resources(exp_id)
    if not res:
        return
    say(f"removing {len(res)} resources")
    removed: list[int] = []
    # 0. the event scheduler first: on SIGTERM it stops its agents and programs, so
    #    their flows are recorded
    for r in res:
        if r.kind == "scheduler":
            if "pid" in r.detail:
                procs.kill(r.detail["pid"], r.detail.get("started"), grace=15.0)
            removed.append(r.id)
    # the scheduler's threads may have recorded processes (e.g. a traffic agent preparing
    # its next flow) after the list above was read; it is gone now: read again
    res = store.resources(exp_id)
    # 1. processes: the recorded ones, then anything else living in our namespaces
    for r in reversed(res):
        if r.kind == "process":
            if "pid" in r.detail:
                procs.kill(r.detail["pid"], r.detail.get("started"))
            removed.append(r.id)
    for r in res:
        if r.kind == "netns" and r.detail.get("inode"):
            if netns.inode(r.name) == r.detail["inode"]:
                for pid in netns.pids_in(r.detail["inode"]):
                    procs.kill(pid, procs.start_time(pid))
    # 2. the engine (its TAPs vanish with it)
    for r in res:
        if r.kind == "engine":
            sock = r.detail.get("socket")
            pid, started = r.detail.get("pid"), r.detail.get("started")
            if pid and procs.alive(pid, started):
                with contextlib.suppress(Exception):
                    with engine.Client(sock, timeout=2) as c:
                        c.call("shutdown")
                procs.kill(pid, started, grace=2.0)
            if sock:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(sock)
            removed.append(r.id)
    # 3. TAPs are not persistent: they went with the engine's fds (and live only inside
    #    our namespaces, removed next)
    removed.extend(r.id for r in res if r.kind == "tap")
    # 4. namespaces (interfaces inside go with them)
    for r in reversed(res):
        if r.kind == "netns":
            ino = r.detail.get("inode")
            current = netns.inode(r.name)
            if current is not None and (ino is None or current == ino):
                netns.delete(r.name)
            elif current is None:
                netns.delete(r.name)   # clears a stale /etc/netns folder, if any
            removed.append(r.id)
    store.mark_removed(removed)
    leftover = [r for r in store.resources(exp_id)]
    if leftover:
        print(f"wanlab: {len(leftover)} resources left recorded after teardown "
              f"({', '.join(sorted({r.kind for r in leftover}))})",
              file=sys.stderr)
