"""Dynamic routing with real daemons: FRR's zebra and ospfd in every node (ospf6d for
IPv6, OSPFv3, with the same settings; bgpd where nodes have AS numbers).

This is used for ``$ns rtproto Session`` and ``$ns rtproto ospf`` (YAML
``routing: ospf``). Every node runs zebra and ospfd in its own namespace.
Their configuration is generated from the topology:

* every interface goes in area 0;
* links are OSPF point-to-point networks, and LANs are broadcast networks;
* an interface's cost is its link's ``$ns cost``;
* the hello and dead intervals come from ``tb-set-ospf-timers`` (default
  1 s / 4 s);
* every node has a loopback address in 10.255.0.0/16, which OSPF advertises,
  which is the router id, and which the node's name resolves to.

Where the files live, per node, so the daemons of different nodes never
meet:

* ``/etc/netns/<ns>/frr/`` holds zebra.conf, ospfd.conf and vtysh.conf.
  ``ip netns exec`` bind-mounts it over ``/etc/frr`` for every command run
  in the node.
* ``/etc/netns/<ns>/frr/run/`` holds the daemons' sockets and pid files.
  The node's command wrapper (:func:`wanlab.backends.emulate.nodes.node_argv`)
  bind-mounts it over ``/run/frr``, so a plain ``vtysh -c 'show ip ospf
  neighbor'`` run with ``wanlab exec`` reaches that node's own daemons.
* The daemons' logs go to ``<folder>/nodes/<node>/{zebra,ospfd}.log``.
  Each node's route changes, with timestamps (``ip monitor route``), go to
  ``<folder>/nodes/<node>/routes.log``.

Link failures reach the daemons as carrier loss on the interface (the
engine's ``down``), so OSPF reconverges without any change to its
configuration.
"""

from __future__ import annotations

import contextlib
import grp
import ipaddress
import os
import pwd
import subprocess
import time

from wanlab.backends.emulate import idmap, netns, nodefiles, nodes, procs, rootfs
from wanlab.errors import WanlabError
from wanlab.model.ir import Experiment, image_routing_refused
from wanlab.plan.types import NodePlan, Plan

FRR_BIN = "/usr/lib/frr"
# a capability a node's commands lack that FRR's daemons ask for at start (network namespaces
# for VRFs) and refuse to run without; only these wanlab-started daemons keep it (they run as
# user frr, which a node's processes cannot ptrace; docs/security.md)
FRR_CAPS = ("sys_admin",)
DYNAMIC = ("session", "ospf", "bgp")


def etc_dir(ns: str) -> str:
    return os.path.join(netns.NETNS_ETC_DIR, ns, "frr")


def configs(exp: Experiment, plan: Plan, np_: NodePlan, logdir: str) -> dict[str, str]:
    """The node's zebra.conf, ospfd.conf (unless routing is bgp only), bgpd.conf (if it has
    an AS number) and vtysh.conf."""
    costs = {l.name: l.cost for l in exp.links} | {l.name: l.cost for l in exp.lans}
    p2p = {l.name for l in exp.links}
    zebra = [f"hostname {np_.name}", f"log file {logdir}/zebra.log", "!"]
    ospf = [f"hostname {np_.name}", f"log file {logdir}/ospfd.log", "!"]
    for i in np_.interfaces:
        ospf += [f"interface {i.ifname}",
                 *([" ip ospf network point-to-point"] if i.network in p2p else []),
                 f" ip ospf cost {costs[i.network]}",
                 f" ip ospf hello-interval {exp.ospf_hello_s}",
                 f" ip ospf dead-interval {exp.ospf_dead_s}", "!"]
    rid = np_.loopback or (np_.interfaces[0].ip if np_.interfaces else "10.255.255.255")
    ospf += ["router ospf", f" ospf router-id {rid}",
             # Failures are noticed at once (carrier) or after the dead interval; what follows
             # should not add seconds. SPF runs 0 ms after a change, backing off to 1 s;
             # LSAs may be re-originated and accepted without FRR's default 5 s / 1 s
             # minimum intervals (which made start-up convergence ~10 s).
             " timers throttle spf 0 50 1000",
             " timers throttle lsa all 0",
             " timers lsa min-arrival 0"]
    for i in np_.interfaces:
        if i.ip:
            net = ipaddress.IPv4Network(f"{i.ip}/{i.prefixlen}", strict=False)
            ospf.append(f" network {net} area 0.0.0.0")
    if np_.loopback:
        ospf.append(f" network {np_.loopback}/32 area 0.0.0.0")
    ospf.append("!")
    out = {"zebra.conf": "\n".join(zebra) + "\n",
           "vtysh.conf": "! wanlab: per-node vtysh configuration\n"}
    if exp.rtproto != "bgp" and exp.ipv6 != "only":
        out["ospfd.conf"] = "\n".join(ospf) + "\n"
    if exp.rtproto != "bgp" and exp.ipv6 != "off":
        out["ospf6d.conf"] = ospf6_config(exp, np_, logdir, rid)
    bgp = bgp_config(exp, plan, np_, logdir, rid)
    if bgp:
        out["bgpd.conf"] = bgp
    return out


def ospf6_config(exp: Experiment, np_: NodePlan, logdir: str, rid: str) -> str:
    """ospf6d.conf (OSPFv3, IPv6): the same areas, costs, network types and timers as
    ospfd's; the loopback's /128 is in area 0 as well."""
    costs = {l.name: l.cost for l in exp.links} | {l.name: l.cost for l in exp.lans}
    p2p = {l.name for l in exp.links}
    lines = [f"hostname {np_.name}", f"log file {logdir}/ospf6d.log", "!"]
    for i in np_.interfaces:
        lines += [f"interface {i.ifname}", " ipv6 ospf6 area 0.0.0.0",
                  *([" ipv6 ospf6 network point-to-point"] if i.network in p2p else []),
                  f" ipv6 ospf6 cost {costs[i.network]}",
                  f" ipv6 ospf6 hello-interval {exp.ospf_hello_s}",
                  f" ipv6 ospf6 dead-interval {exp.ospf_dead_s}", "!"]
    if np_.loopback6:
        lines += ["interface lo", " ipv6 ospf6 area 0.0.0.0", "!"]
    # as for ospfd: SPF at once after a change, LSAs without minimum intervals
    lines += ["router ospf6", f" ospf6 router-id {rid}", " timers throttle spf 0 50 1000",
              " timers lsa min-arrival 0", "!"]
    return "\n".join(lines) + "\n"


def bgp_config(exp: Experiment, plan: Plan, np_: NodePlan, logdir: str, rid: str) -> str:
    """bgpd.conf: one neighbour per declared session, addressed on the shared network;
    connected networks (and the loopback) are announced."""
    asn = dict(exp.asns)
    if np_.name not in asn:
        return ""
    lines = [f"hostname {np_.name}", f"log file {logdir}/bgpd.log", "!",
             f"router bgp {asn[np_.name]}", f" bgp router-id {rid}",
             # sessions between emulated routers carry everything: no policy is needed,
             # and connect retries must not wait FRR's default 120 s
             " no bgp ebgp-requires-policy", " no bgp network import-check"]
    # each family its own sessions, between the neighbours' addresses of that family
    lines.append(" no bgp default ipv4-unicast")
    mine = {i.network: i for i in np_.interfaces}
    peers: dict[int, list[str]] = {4: [], 6: []}
    for sess in exp.bgp_sessions:
        if np_.name not in (sess.a, sess.b):
            continue
        peer = sess.b if sess.a == np_.name else sess.a
        shared = next(i for i in plan.nodes[peer].interfaces if i.network in mine)
        for family, addr in ((4, shared.ip), (6, shared.ip6)):
            if addr:
                peers[family].append(addr)
                lines += [f" neighbor {addr} remote-as {asn[peer]}",
                          f" neighbor {addr} timers connect 1",
                          f" neighbor {addr} advertisement-interval 0"]
    for family, name in ((4, "ipv4"), (6, "ipv6")):
        if family == 4 and not np_.ipv4 or family == 6 and exp.ipv6 == "off":
            continue
        lines += [" !", f" address-family {name} unicast", "  redistribute connected",
                  *(f"  neighbor {addr} activate" for addr in peers[family]),
                  " exit-address-family"]
    lines.append("!")
    return "\n".join(lines) + "\n"


def _frr_ids(folder: str, node: str, base: int) -> tuple[int, int]:
    """The host uid and gid of FRR's user and group in the node: its image's (a node with
    an image), else the host's, shifted into the node's uid range ``base``."""
    if rootfs.has_root(folder, node):
        ids = idmap.image_ids(rootfs.root_path(folder, node), "frr")
        if ids is None:
            raise WanlabError(f"node {node}: dynamic routing runs FRR, and its image has no "
                              f"user and group frr (install frr in the image)")
        return base + ids[0], base + ids[1]
    return base + pwd.getpwnam("frr").pw_uid, base + grp.getgrnam("frr").gr_gid


def _chown_frr(path: str, ids: tuple[int, int]) -> None:
    """FRR's user and group (:func:`_frr_ids`) own ``path`` (a link: the link itself)."""
    os.chown(path, *ids, follow_symlinks=False)


def check_installed() -> None:
    if not os.path.exists(os.path.join(FRR_BIN, "ospfd")):
        raise WanlabError("rtproto Session/ospf needs FRR: run 'make install' "
                          "(apt package frr)")


def start(store, row, exp: Experiment, plan: Plan, folder: str, say) -> None:
    """Write every node's configuration and start its zebra and ospfd (recorded first)."""
    check_installed()
    what = " + ".join(_daemons(exp, None))
    routers = _routers(plan)
    bases = nodes.uid_bases(store, row, [np_.name for np_ in routers])
    for np_ in routers:
        _refuse_on_host(exp, np_.name, bases[np_.name])
    say(f"starting FRR ({what}) in {len(routers)} nodes")
    for np_ in routers:
        etc = etc_dir(np_.netns)
        run = os.path.join(etc, "run")
        os.makedirs(run, exist_ok=True)
        logdir = os.path.join(folder, "nodes", np_.name)
        os.makedirs(logdir, exist_ok=True)
        ids = _frr_ids(folder, np_.name, bases[np_.name])
        for d in (etc, run, logdir):
            _chown_frr(d, ids)
        # /etc/frr in the node: its FRR (and root) may leave links there; written beneath
        # the folder, never through one
        for name, text in configs(exp, plan, np_, logdir).items():
            with os.fdopen(nodefiles.open_output(etc, name, 0o640, ids), "w") as f:
                f.truncate(0)
                f.write(text)
    # every node's files are in place: build the nodes' confinement (in parallel) now
    nodes.ensure_holders(store, row, [(np_.netns, np_.name) for np_ in routers])
    for np_ in routers:
        start_daemons(store, row, exp, np_, folder)


def start_daemons(store, row, exp: Experiment, np_: NodePlan, folder: str) -> None:
    """Start one node's daemons (its files written by :func:`start`), each recorded first
    with ``role`` "routing" (the health check's), and its route monitor. Also used when a
    node reboots."""
    _refuse_on_host(exp, np_.name, nodes.uid_bases(store, row, [np_.name])[np_.name])
    logdir = os.path.join(folder, "nodes", np_.name)
    run = os.path.join(etc_dir(np_.netns), "run")
    daemons = _daemons(exp, np_.name)
    # a killed zebra's socket: not a live one (the folder is the node's FRR's: no link)
    with contextlib.suppress(OSError):
        rfd = os.open(run, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink("zserv.api", dir_fd=rfd)
        finally:
            os.close(rfd)
    for daemon in daemons:
        argv = [os.path.join(FRR_BIN, daemon), "-f", f"/etc/frr/{daemon}.conf",
                "-i", f"/run/frr/{daemon}.pid", "-P", "0", "-u", "frr", "-g", "frr"]
        _spawn(store, row, np_, f"frr-{daemon}-{np_.name}", argv,
               os.path.join(logdir, f"{daemon}.out"), inside=True, role="routing",
               daemon=daemon)
        if daemon == "zebra":
            _wait_socket(os.path.join(run, "zserv.api"))
    _spawn(store, row, np_, f"route-monitor-{np_.name}",
           ["ip", "-n", np_.netns, "-ts", "monitor", "route"],
           os.path.join(logdir, "routes.log"))


def _daemons(exp: Experiment, node: str | None) -> list[str]:
    """The FRR daemons a node runs (``node`` None: any node): zebra; ospfd for IPv4 and
    ospf6d for IPv6 unless routing is BGP only; bgpd with an AS number."""
    igp = exp.rtproto != "bgp"
    return ["zebra"] + (["ospfd"] if igp and exp.ipv6 != "only" else []) + (
        ["ospf6d"] if igp and exp.ipv6 != "off" else []) + (
        ["bgpd"] if exp.asns and (node is None or node in dict(exp.asns)) else [])


def _refuse_on_host(exp: Experiment, node: str, base: int) -> None:
    """The daemons keep FRR_CAPS: from files a node could have written (its layer) only
    in its user namespace (``base``: its range), where SYS_ADMIN reaches nothing of the
    host's; never as root of the host's."""
    n = next((n for n in exp.nodes if n.name == node), None)
    if n is not None and n.image is not None and not base:
        raise WanlabError(image_routing_refused(node))


def _spawn(store, row, np_: NodePlan, name: str, argv: list[str], out: str,
           inside: bool = False, **detail) -> None:
    """Start ``argv`` (``inside`` the node as a daemon keeping FRR_CAPS, else on the host),
    recorded first."""
    rid = store.record(row.id, "process", name, node=np_.name, **detail)
    kw = dict(stdin=subprocess.DEVNULL, start_new_session=True)
    # in the node's folder, which the node may change: never opened through its links
    with os.fdopen(nodefiles.open_output(os.path.dirname(out), os.path.basename(out),
                                         0o600), "ab") as f:
        if inside:
            p = nodes.popen(store, row, np_.netns, np_.name, argv, keep=FRR_CAPS, stdout=f,
                            stderr=f, **kw)
        else:
            p = subprocess.Popen(argv, stdout=f, stderr=f, **kw)
    store.update_resource(rid, "created", pid=p.pid, started=procs.start_time(p.pid))


def _wait_socket(path: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise WanlabError(f"zebra did not start (no {path}); see the node's zebra.log")
        time.sleep(0.01)


def _routers(plan: Plan) -> list:
    """The nodes that run FRR: not the stubs of a cluster's neighbours on other machines
    (wanlab/cluster/part.py), whose namespace only carries a tunnelled link."""
    return [np_ for np_ in plan.nodes.values() if not np_.remote]


def _tables(plan: Plan) -> dict[str, set[tuple[str, str]]]:
    """Each router's routes (destination, next hop) in the families the plan has."""
    families = ([2] if plan.subnets else []) + ([10] if plan.subnets6 else [])
    out = {}
    for np_ in _routers(plan):
        name = np_.name
        with contextlib.closing(netns.netlink(np_.netns)) as ipr:
            out[name] = {(str(ipaddress.ip_network(f"{r.get_attr('RTA_DST')}/"
                                                   f"{r['dst_len']}")),
                          str(r.get_attr("RTA_GATEWAY") or r.get_attr("RTA_MULTIPATH") or ""))
                         for family in families
                         for r in ipr.get_routes(family=family, table=254)
                         if r.get_attr("RTA_DST")}
    return out


def wait_converged(plan: Plan, timeout: float, settle: float, say) -> float:
    """Wait until every node has a route to every subnet and no table has changed for
    ``settle`` seconds; return the seconds until the last change."""
    t0 = time.monotonic()
    def loopbacks(np_) -> set[str]:
        return ({f"{np_.loopback}/32"} if np_.loopback and plan.subnets else set()) | (
            {f"{np_.loopback6}/128"} if np_.loopback6 else set())
    subnets = {str(n) for n in (*plan.subnets.values(), *plan.subnets6.values())}
    subnets |= {x for np_ in plan.nodes.values() for x in loopbacks(np_)}
    say("waiting for routing to converge")
    own = {np_.name: loopbacks(np_) for np_ in _routers(plan)}
    last, last_change = None, t0
    while True:
        tables = _tables(plan)
        now = time.monotonic()
        if tables != last:
            last, last_change = tables, now
        complete = all(subnets - own[n] <= {dst for dst, _ in t} for n, t in tables.items())
        if complete and now - last_change >= settle:
            return last_change - t0
        if now - t0 > timeout:
            missing = ", ".join(sorted(n for n, t in tables.items()
                                       if not subnets - own[n] <= {dst for dst, _ in t}))
            why = f"nodes missing routes: {missing}" if missing else "routes keep changing"
            raise WanlabError(f"routing did not converge within {timeout:g} s ({why}); see the "
                              f"nodes' ospfd.log")
        time.sleep(0.05)
