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
from wanlab.plan.addressing import (
    NetworkSpec,
    assign,
    assign6,
    experiment_prefix,
    interface_groups,
    loopback6,
)
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
    v4, v6 = exp.ipv6 != "only", exp.ipv6 != "off"
    specs: list[NetworkSpec] = []
    fixed6: dict[str, tuple[str | None, ...]] = {}
    members: dict[str, list[str]] = {}
    costs: dict[str, int] = {}
    for l in exp.links:
        specs.append(NetworkSpec(l.name, (l.a, l.b), (l.ip_a, l.ip_b), l.netmask))
        fixed6[l.name] = (l.ip6_a, l.ip6_b)
        members[l.name] = [l.a, l.b]
        costs[l.name] = l.cost
    for lan in exp.lans:
        specs.append(NetworkSpec(lan.name, tuple(m.node for m in lan.members),
                                 tuple(m.ip for m in lan.members), lan.netmask))
        fixed6[lan.name] = tuple(m.ip6 for m in lan.members)
        members[lan.name] = [m.node for m in lan.members]
        costs[lan.name] = lan.cost
    src_of = {x.name: x.source for x in (*exp.links, *exp.lans)}
    if exp.ipv6_source.file:
        src_of.setdefault("ipv6_prefix", exp.ipv6_source)

    def located(msg: str, net: str) -> None:
        src = src_of.get(net)
        where = f"{src.file}:{src.line}: " if src and src.file and src.line else \
            (f"{src.file}: " if src and src.file else "")
        warnings.append(where + msg)

    def placed(fn, *args):
        """``fn(*args)``, its error naming the line that declared the network (addressing
        knows only its name) or the experiment's."""
        try:
            return fn(*args)
        except SpecError as e:
            src = src_of.get(e.field or "") or exp.source
            if e.file or not src.file:
                raise
            raise SpecError(e.message, file=src.file, line=src.line, field=e.field) from None
    if exp.addressing == "none" and (any(n.routes for n in exp.nodes) or any(
            n.kind == "simulated" for n in exp.nodes)):
        raise SpecError("links without addresses (a containerlab file's) allow neither "
                        "routes given to wanlab nor simulated nodes")
    # interface names the description gives (a containerlab file's); the rest are ethN
    # (by network and member: a link's two ends may be at one node)
    named: dict[tuple[str, int], str] = {}
    taken_names: dict[str, set[str]] = {}
    for l in exp.links:
        for k, (node, ifname) in enumerate(zip((l.a, l.b), l.ifnames, strict=True)):
            if ifname:
                named[(l.name, k)] = ifname
                taken_names.setdefault(node, set()).add(ifname)
    for lan in exp.lans:
        for k, m in enumerate(lan.members):
            if m.ifname:
                named[(lan.name, k)] = m.ifname
                taken_names.setdefault(m.node, set()).add(m.ifname)
    # addressing "none" (a containerlab file's): the nodes' own commands address them
    auto = exp.addressing == "auto"
    # a link from a node to itself joins two of its ports (OpenFlow switches sharing a
    # node): its ends get no addresses, so no route crosses it
    looped = {l.name for l in exp.links if l.a == l.b}
    addressed = [x for x in specs if x.name not in looped]
    addrs = placed(assign, addressed, located) if v4 and auto else {}
    prefix6 = experiment_prefix(exp.name, exp.ipv6_prefix) if v6 and auto else None
    addrs6 = placed(assign6, [replace(x, fixed=fixed6[x.name]) for x in addressed],
                    prefix6) if prefix6 else {}

    port_no = 0
    atts: dict[str, list[Attachment]] = {}
    atts6: dict[str, list[Attachment]] = {}
    ports_of: dict[str, list[Interface]] = {}
    none = [None] * max((len(x.members) for x in specs), default=0)
    for spec in specs:
        subnet, ips = addrs.get(spec.name, (None, none))
        subnet6, ips6 = addrs6.get(spec.name, (None, none))
        for member, (node, ip, ip6) in enumerate(zip(spec.members, ips, ips6, strict=False)):
            np_ = nodes[node]
            np_.ipv4 = v4
            ifname = named.get((spec.name, member))
            if ifname is None:
                k = len(np_.interfaces)
                while f"eth{k}" in taken_names.get(node, ()):
                    k += 1
                ifname = f"eth{k}"
                taken_names.setdefault(node, set()).add(ifname)
            hi, lo = port_no >> 8 & 0xFF, port_no & 0xFF
            iface = Interface(node=node, ifname=ifname, network=spec.name, ip=ip,
                              prefixlen=subnet.prefixlen if subnet else 0,
                              mac=f"02:{short[:2]}:{short[2:4]}:{port_no >> 16 & 0xFF:02x}:"
                                  f"{hi:02x}:{lo:02x}",
                              port=f"{node}:{ifname}", ip6=ip6,
                              prefixlen6=subnet6.prefixlen if subnet6 else 64)
            port_no += 1
            np_.interfaces.append(iface)
            ports_of.setdefault(spec.name, []).append(iface)
            if ip:
                atts.setdefault(spec.name, []).append(Attachment(node, spec.name, ifname, ip))
            if ip6:
                atts6.setdefault(spec.name, []).append(Attachment(node, spec.name, ifname,
                                                                  ip6))

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
        # IPv6: the same routine on the same graph, over the networks' /64s
        nets6 = {n: (addrs6[n][0], atts6[n], costs[n]) for n in atts6 if n != edge_lan}
        for name, entries in shortest_path_routes(list(nodes), nets6).items() if nets6 \
                else ():
            nodes[name].routes.extend(entries)
    for n in exp.nodes:
        for r in n.routes:
            nodes[n.name].routes.extend(_manual_route(n.name, r.dst, r.via, nodes, addrs,
                                                      addrs6))

    if exp.edge and egress:
        gw = next(i for i in nodes[exp.edge.gateway].interfaces if i.network == edge_lan)
        for n in sorted(egress):
            mine = next(i for i in nodes[n].interfaces if i.network == edge_lan)
            # (an IPv6 default is no reason to skip: the edge carries IPv4 only)
            if not any(r.dst == "default" and not r.v6 for r in nodes[n].routes):
                nodes[n].routes.append(RouteEntry("default", gw.ip, mine.ifname))

    # With dynamic routing every node also gets a loopback address (10.255.0.0/16, in
    # declaration order), advertised by OSPF: a router's name then stays reachable
    # whichever of its links fail, as on a real backbone.
    # (IPv6-only, the IPv4 loopback is only the router id, which OSPFv3 and BGP still need)
    if exp.rtproto in ("session", "ospf", "bgp"):
        if len(nodes) > 65534:
            raise SpecError("too many nodes for the 10.255.0.0/16 loopback range")
        fixed = {n.name: n.loopback for n in exp.nodes if n.loopback}
        fixed6 = {n.name: n.loopback6 for n in exp.nodes if n.loopback6}
        for k, np_ in enumerate(nodes.values(), start=1):
            np_.loopback = fixed.get(np_.name) or f"10.255.{k >> 8}.{k & 0xFF}"
            np_.ipv4 = v4
            if prefix6:
                np_.loopback6 = fixed6.get(np_.name) or loopback6(prefix6, k)

    # hosts file: node name → its loopback, else its first interface; node-network → each
    # interface; each name to its IPv4 address (A) and its IPv6 one (AAAA)
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    for np_ in nodes.values():
        for lo_ip in (np_.loopback if v4 else None, np_.loopback6):
            if lo_ip:
                lines.append(f"{lo_ip}\t{np_.name}")
        for i, iface in enumerate(np_.interfaces):
            names = f"{np_.name}-{iface.network}"
            if i == 0 and not np_.loopback:
                names = f"{np_.name} " + names
            lines += [f"{ip}\t{names}" for ip in (iface.ip, iface.ip6) if ip]
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
        mine = list(zip(lan.members, ports_of[lan.name], strict=True))
        port = {m.node: i.port for m, i in mine}
        lans.append(LanPlan(lan.name, tuple(
            LanMemberPlan(m.node, i.port, m.to_lan, m.from_lan, m.switch) for m, i in mine),
            tuple(LanPairPlan(port[p.src], port[p.dst], p.params) for p in lan.pairs),
            lan.switches, lan.trunks, lan.blocked))
    # simulated nodes are the engine's own hosts and routers (ports without TAPs), and
    # applications between simulated nodes its traffic agents
    simulated = {n for n, np_ in nodes.items() if np_.simulated}
    for n in simulated:
        if is_host(nodes[n]):
            nodes[n].gateway = gateway(nodes[n])
            nodes[n].gateway6 = gateway(nodes[n], v6=True)
    plan = Plan(short=short, nodes=nodes, subnets={k: v[0] for k, v in addrs.items()},
                hosts=hosts, warnings=warnings, exp=exp, ports=ports, links=links, lans=lans,
                subnets6={k: v[0] for k, v in addrs6.items()})
    if simulated:
        plan.flows = sim_flows(exp, plan, simulated)
    return plan


def _manual_route(node: str, dst: str, via: str, nodes: dict[str, NodePlan],
                  addrs: dict, addrs6: dict) -> list[RouteEntry]:
    """Resolve ``$node add-route DST NEXTHOP`` to routes.

    DST is a node (its first address), a link or LAN (its subnet, as Emulab's
    ``add-route $link``), a prefix or ``default``; NEXTHOP a neighbour node or
    an address on one of the node's networks. A prefix or an address says the family;
    names alone give a route in each family the experiment has."""
    me = nodes[node]
    where = f"nodes.{node}.routes"
    if dst in addrs or dst in addrs6:
        if any(i.network == dst for i in me.interfaces):
            raise SpecError(f"route on {node}: {dst!r} is one of its own networks (no "
                            f"route needed)", field=where)
    families = []
    for fam, table in ((4, addrs), (6, addrs6)):
        if dst in nodes or dst in table or dst == "default":
            families.append(fam)
    if not families and dst not in addrs and dst not in addrs6:
        try:
            families = [ipaddress.ip_network(dst, strict=False).version]
        except ValueError:
            raise SpecError(f"route on {node}: destination {dst!r} is neither a node, a "
                            f"link, a LAN nor a prefix", field=where) from None
    if via not in nodes:
        try:
            hop_family = ipaddress.ip_address(via).version
        except ValueError:
            raise SpecError(f"route on {node}: next hop {via!r} is neither a node nor an "
                            f"address", field=where) from None
        if hop_family not in families:
            raise SpecError(f"route on {node}: next hop {via} is not of the destination's "
                            f"address family", field=where)
        families = [hop_family]
    have = [f for f in families if (addrs if f == 4 else addrs6)]
    if not have:
        raise SpecError(f"route on {node}: the experiment has no IPv{families[0]} addresses "
                        f"(ipv6: {'false' if families[0] == 6 else 'only'})", field=where)
    return [_route_of(node, dst, via, nodes, addrs if f == 4 else addrs6, f) for f in have]


def _route_of(node: str, dst: str, via: str, nodes: dict[str, NodePlan], addrs: dict,
              family: int) -> RouteEntry:
    """One family's route of :func:`_manual_route`."""
    me = nodes[node]
    where = f"nodes.{node}.routes"

    def addr(i) -> str:
        return i.ip if family == 4 else i.ip6

    if dst in nodes:
        if not nodes[dst].interfaces:
            raise SpecError(f"route on {node}: destination node {dst!r} has no interfaces")
        dst = addr(nodes[dst].interfaces[0]) + ("/32" if family == 4 else "/128")
    elif dst in addrs:
        dst = str(addrs[dst][0])
    dst_net = ipaddress.ip_network(dst, strict=False) if dst != "default" else None
    if via in nodes:
        shared = [(i, j) for i in me.interfaces for j in nodes[via].interfaces
                  if i.network == j.network]
        if not shared:
            raise SpecError(f"route on {node}: next hop {via!r} is not a neighbour",
                            field=where)
        mine, theirs = shared[0]
        return RouteEntry(str(dst_net) if dst_net else "default", addr(theirs), mine.ifname)
    hop = ipaddress.ip_address(via)
    for i in me.interfaces:
        if addr(i) and hop in ipaddress.ip_network(
                f"{addr(i)}/{i.prefixlen if family == 4 else i.prefixlen6}", strict=False):
            return RouteEntry(str(dst_net) if dst_net else "default", str(hop), i.ifname)
    raise SpecError(f"route on {node}: next hop {via} is on none of its networks",
                    field=where)
