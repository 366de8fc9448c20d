"""The realization plan: names, interfaces, addresses, routes and the engine topology
(its ports, links and LANs, typed and in the IR's units: :mod:`wanlab.plan.types`).

Naming (every kernel object carries the experiment's 4-hex-digit short id):
  * node namespace ``wl-<short>-<node>``;
  * TAP devices ``eth0``, ``eth1``… created by the engine directly inside the
    node's namespace (never in the root namespace), in the order the node's
    links and LANs were declared;
  * MAC ``02:<short>:<n>`` (locally administered, unique per experiment).
Engine objects are named after the IR's links and LANs; a port is
``<node>:<ifname>``.

The plan is a pure function of the IR and the short id.
"""

from __future__ import annotations

import ipaddress
from dataclasses import replace

from wanlab.errors import SpecError
from wanlab.model.gc_pause import gc_paused
from wanlab.model.ir import Experiment
from wanlab.plan.addressing import NetworkSpec, assign, interface_groups
from wanlab.plan.routes import Attachment, RouteEntry, shortest_path_routes
from wanlab.plan.sim_flows import sim_flows
from wanlab.plan.sim_nodes import gateway, is_host, with_endpoints
from wanlab.plan.types import (
    Interface,
    LanMemberPlan,
    LanPairPlan,
    LanPlan,
    LinkPlan,
    NodePlan,
    Plan,
    Port,
)


def netns_name(short: str, node: str) -> str:
    return f"wl-{short}-{node}"


@gc_paused
def make_plan(exp: Experiment, short: str, simulate_all: bool = False) -> Plan:
    """The plan of ``exp``; with ``simulate_all`` every node is simulated in the engine
    (pure simulation: no namespaces, dynamic routing replaced by static routes)."""
    warnings: list[str] = []
    exp = with_endpoints(exp, {n.name for n in exp.nodes
                               if simulate_all or n.kind == "simulated"})
    nodes = {n.name: NodePlan(n.name, netns_name(short, n.name), simulated=simulate_all or
                              n.kind == "simulated", remote=n.kind == "remote")
             for n in exp.nodes}
    if simulate_all and exp.rtproto != "static":
        warnings.append(f"routing {exp.rtproto!r} is simulated with static shortest-path "
                        f"routes (no routing daemons run in simulation)")
        exp = replace(exp, rtproto="static")
    # (manual: a cluster's part, whose routes are the whole plan's static ones)
    if any(np_.simulated for np_ in nodes.values()) and exp.rtproto not in ("static",
                                                                             "manual"):
        raise SpecError(f"simulated nodes (make-simulated) are routers inside the engine with "
                        f"static routes; routing {exp.rtproto!r} needs every node emulated")

    # networks in declaration order: links, then LANs
    specs: list[NetworkSpec] = []
    members: dict[str, list[str]] = {}
    costs: dict[str, int] = {}
    for l in exp.links:
        specs.append(NetworkSpec(l.name, (l.a, l.b), (l.ip_a, l.ip_b), l.netmask))
        members[l.name] = [l.a, l.b]
        costs[l.name] = l.cost
    for lan in exp.lans:
        specs.append(NetworkSpec(lan.name, tuple(m.node for m in lan.members),
                                 tuple(m.ip for m in lan.members), lan.netmask))
        members[lan.name] = [m.node for m in lan.members]
        costs[lan.name] = lan.cost
    src_of = {x.name: x.source for x in (*exp.links, *exp.lans)}

    def located(msg: str, net: str) -> None:
        src = src_of.get(net)
        where = f"{src.file}:{src.line}: " if src and src.file and src.line else \
            (f"{src.file}: " if src and src.file else "")
        warnings.append(where + msg)
    if exp.addressing == "none" and (any(n.routes for n in exp.nodes) or any(
            n.kind == "simulated" for n in exp.nodes)):
        raise SpecError("links without addresses (a containerlab file's) allow neither "
                        "routes given to wanlab nor simulated nodes")
    # interface names the description gives (a containerlab file's); the rest are ethN
    named: dict[tuple[str, str], str] = {}
    for l in exp.links:
        for node, ifname in zip((l.a, l.b), l.ifnames, strict=True):
            if ifname:
                named[(l.name, node)] = ifname
    for lan in exp.lans:
        for m in lan.members:
            if m.ifname:
                named[(lan.name, m.node)] = m.ifname
    taken_names: dict[str, set[str]] = {}
    for (_net, node), ifname in named.items():
        taken_names.setdefault(node, set()).add(ifname)
    try:
        addrs = assign(specs, warn=located) if exp.addressing == "auto" else \
            {s.name: (ipaddress.IPv4Network("0.0.0.0/32"), [""] * len(s.members))
             for s in specs}
    except SpecError as e:
        # name the line that declared the network (addressing knows only its name)
        src = src_of.get(e.field or "")
        if src is None or e.file:
            raise
        raise SpecError(e.message, file=src.file, line=src.line, field=e.field) from None

    port_no = 0
    atts: dict[str, list[Attachment]] = {}
    ports_of: dict[str, list[Interface]] = {}
    for spec in specs:
        subnet, ips = addrs[spec.name]
        for node, ip in zip(spec.members, ips, strict=True):
            np_ = nodes[node]
            ifname = named.get((spec.name, node))
            if ifname is None:
                k = len(np_.interfaces)
                while f"eth{k}" in taken_names.get(node, ()):
                    k += 1
                ifname = f"eth{k}"
                taken_names.setdefault(node, set()).add(ifname)
            hi, lo = port_no >> 8 & 0xFF, port_no & 0xFF
            iface = Interface(node=node, ifname=ifname, network=spec.name, ip=ip,
                              prefixlen=subnet.prefixlen,
                              mac=f"02:{short[:2]}:{short[2:4]}:{port_no >> 16 & 0xFF:02x}:"
                                  f"{hi:02x}:{lo:02x}",
                              port=f"{node}:{ifname}")
            port_no += 1
            np_.interfaces.append(iface)
            ports_of.setdefault(spec.name, []).append(iface)
            atts.setdefault(spec.name, []).append(Attachment(node, spec.name, ifname, ip))

    # routes
    # session/ospf: routes come from the nodes' OSPF daemons (wanlab/backends/emulate/frr.py)
    proto = exp.rtproto
    # the edge LAN (docs/edge.md) carries no experiment traffic: it is left out of the
    # shortest paths, and each egress node's default route leads to the gateway
    edge_lan = exp.edge.lan if exp.edge else None
    egress = {n.name for n in exp.nodes if n.egress}
    if proto == "static":
        nets = {}
        for n in atts:
            if n == edge_lan:
                continue
            groups = interface_groups([x.ip for x in atts[n]], addrs[n][0].prefixlen)
            if len(groups) == 1:
                nets[n] = (addrs[n][0], atts[n], costs[n])
                continue
            # addresses given in several subnets: only the interfaces of one subnet reach
            # each other (a route via an address off the node's subnets would not install)
            for k, (sub, idx) in enumerate(groups.items()):
                key = f"{n}#{k}"
                nets[key] = (sub, [replace(atts[n][i], network=key) for i in idx], costs[n])
        table = shortest_path_routes(list(nodes), nets)
        if egress:      # their default is the gateway's: every experiment prefix explicit
            full = shortest_path_routes(sorted(egress), nets, compress=False)
            table.update({n: full[n] for n in egress})
        for name, entries in table.items():
            nodes[name].routes.extend(entries)
    for n in exp.nodes:
        for r in n.routes:
            nodes[n.name].routes.append(_manual_route(n.name, r.dst, r.via, nodes, addrs))

    if exp.edge and egress:
        gw = next(i for i in nodes[exp.edge.gateway].interfaces if i.network == edge_lan)
        for n in sorted(egress):
            mine = next(i for i in nodes[n].interfaces if i.network == edge_lan)
            if not any(r.dst == "default" for r in nodes[n].routes):
                nodes[n].routes.append(RouteEntry("default", gw.ip, mine.ifname))

    # With dynamic routing every node also gets a loopback address (10.255.0.0/16, in
    # declaration order), advertised by OSPF: a router's name then stays reachable
    # whichever of its links fail, as on a real backbone.
    if exp.rtproto in ("session", "ospf", "bgp"):
        if len(nodes) > 65534:
            raise SpecError("too many nodes for the 10.255.0.0/16 loopback range")
        fixed = {n.name: n.loopback for n in exp.nodes if n.loopback}
        for k, np_ in enumerate(nodes.values(), start=1):
            np_.loopback = fixed.get(np_.name) or f"10.255.{k >> 8}.{k & 0xFF}"

    # hosts file: node name → its loopback, else its first interface; node-network → each
    # interface
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    for np_ in nodes.values():
        if np_.loopback:
            lines.append(f"{np_.loopback}\t{np_.name}")
        for i, iface in enumerate(np_.interfaces):
            names = f"{np_.name}-{iface.network}"
            if i == 0 and not np_.loopback:
                names = f"{np_.name} " + names
            if iface.ip:            # (none with addressing "none")
                lines.append(f"{iface.ip}\t{names}")
    hosts = "\n".join(lines) + "\n"

    # engine topology
    # a remote node's (a cluster part's stub) TAPs are the tunnels to the other machines'
    # engines: frames carry their due time across (engine/src/wire/stamp.rs)
    ports = [Port(i.port, i.node, i.network, i.ifname,
                  None if nodes[i.node].simulated else nodes[i.node].netns,
                  tunnel=nodes[i.node].remote)
             for ifs in ports_of.values() for i in ifs]
    links = []
    for l in exp.links:
        a, b = ports_of[l.name]
        links.append(LinkPlan(l.name, a.port, b.port, l.ab, l.ba, l.rules))
    lans = []
    for lan in exp.lans:
        port = {m.node: i.port for m, i in zip(lan.members, ports_of[lan.name], strict=True)}
        lans.append(LanPlan(lan.name, tuple(
            LanMemberPlan(m.node, port[m.node], m.to_lan, m.from_lan) for m in lan.members),
            tuple(LanPairPlan(port[p.src], port[p.dst], p.params) for p in lan.pairs)))
    # simulated nodes are the engine's own hosts and routers (ports without TAPs), and
    # applications between simulated nodes its traffic agents
    simulated = {n for n, np_ in nodes.items() if np_.simulated}
    for n in simulated:
        if is_host(nodes[n]):
            nodes[n].gateway = gateway(nodes[n])
    plan = Plan(short=short, nodes=nodes,
                subnets={k: v[0] for k, v in addrs.items()} if exp.addressing == "auto" else {},
                hosts=hosts, warnings=warnings, exp=exp, ports=ports, links=links, lans=lans)
    if simulated:
        plan.flows = sim_flows(exp, plan, simulated)
    return plan


def _manual_route(node: str, dst: str, via: str, nodes: dict[str, NodePlan],
                  addrs: dict) -> RouteEntry:
    """Resolve ``$node add-route DST NEXTHOP`` to a route.

    DST is a node (its first address), a link or LAN (its subnet, as Emulab's
    ``add-route $link``), a prefix or ``default``; NEXTHOP a neighbour node or
    an address on one of the node's networks."""
    me = nodes[node]
    if dst in nodes:
        if not nodes[dst].interfaces:
            raise SpecError(f"route on {node}: destination node {dst!r} has no interfaces")
        dst = nodes[dst].interfaces[0].ip + "/32"
    elif dst in addrs:
        if any(i.network == dst for i in me.interfaces):
            raise SpecError(f"route on {node}: {dst!r} is one of its own networks (no "
                            f"route needed)", field=f"nodes.{node}.routes")
        dst = str(addrs[dst][0])
    try:
        dst_net = ipaddress.IPv4Network(dst, strict=False) if dst != "default" else None
    except ValueError:
        raise SpecError(f"route on {node}: destination {dst!r} is neither a node, a link, a "
                        f"LAN nor a prefix", field=f"nodes.{node}.routes") from None
    if via in nodes:
        shared = [(i, j) for i in me.interfaces for j in nodes[via].interfaces
                  if i.network == j.network]
        if not shared:
            raise SpecError(f"route on {node}: next hop {via!r} is not a neighbour",
                            field=f"nodes.{node}.routes")
        mine, theirs = shared[0]
        return RouteEntry(str(dst_net) if dst_net else "default", theirs.ip, mine.ifname)
    try:
        hop = ipaddress.IPv4Address(via)
    except ValueError:
        raise SpecError(f"route on {node}: next hop {via!r} is neither a node nor an "
                        f"address", field=f"nodes.{node}.routes") from None
    for i in me.interfaces:
        if hop in ipaddress.IPv4Network(f"{i.ip}/{i.prefixlen}", strict=False):
            return RouteEntry(str(dst_net) if dst_net else "default", str(hop), i.ifname)
    raise SpecError(f"route on {node}: next hop {via} is on none of its networks",
                    field=f"nodes.{node}.routes")

