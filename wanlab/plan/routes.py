"""Static routes: shortest paths by ``$ns cost``, as ``$ns rtproto Static``.

The graph has a vertex per node and per LAN (a LAN vertex avoids N² edges
for big LANs: node→LAN costs the LAN's cost, LAN→node costs 0). For every
node, Dijkstra gives the first hop towards every other node; each network
(subnet) not attached to the node is routed towards its nearest member. Ties
break by name, so routes are deterministic.

To keep the table small at scale, routes with the same next hop are merged
where their prefixes are exact siblings (never covering another next hop's
prefix), and the next hop carrying the most prefixes becomes the default
route.
"""

from __future__ import annotations

import heapq
import ipaddress
from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class Attachment:
    """A node's interface on a network."""

    node: str
    network: str
    ifname: str
    ip: str


@dataclass(frozen=True)
class RouteEntry:
    """One route on a node: ``dst`` (CIDR, or 'default') via ``via`` out of ``dev``."""

    dst: str
    via: str
    dev: str


def shortest_path_routes(nodes: list[str],
                         networks: dict[str, tuple[ipaddress.IPv4Network, list[Attachment], int]],
                         compress: bool = True) -> dict[str, list[RouteEntry]]:
    """Routes for every node. ``networks``: name → (subnet, attachments, cost)."""
    # adjacency: vertex -> list of (cost, neighbour vertex, network)
    adj: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
    is_lan: dict[str, bool] = {}
    for name, (_, atts, cost) in networks.items():
        if len(atts) == 2:
            a, b = atts
            adj["n:" + a.node].append((cost, "n:" + b.node, name))
            adj["n:" + b.node].append((cost, "n:" + a.node, name))
            is_lan[name] = False
        else:
            is_lan[name] = True
            for m in atts:
                adj["n:" + m.node].append((cost, "l:" + name, name))
                adj["l:" + name].append((0, "n:" + m.node, name))
    for v in adj:
        adj[v].sort(key=lambda e: (e[1], e[2]))
    addr: dict[tuple[str, str], Attachment] = {}
    for name, (_, atts, _) in networks.items():
        for a in atts:
            addr[(a.node, name)] = a

    prefix = {name: (int(subnet.network_address), subnet.prefixlen)
              for name, (subnet, _, _) in networks.items()}
    attached_to: dict[str, set[str]] = defaultdict(set)
    for (n, net) in addr:
        attached_to[n].add(net)
    routes: dict[str, list[RouteEntry]] = {}
    for src in nodes:
        first = _first_hops(adj, "n:" + src)
        attached = attached_to[src]
        groups: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
        # only networks with a reachable member can have a route (the choice below is a
        # minimum, so the order of this set does not matter)
        reachable = {net for v in first for net in attached_to[v[2:]]}
        for name in reachable:
            _, atts, _ = networks[name]
            if name in attached:
                continue
            best = None
            for m in atts:
                hop = first.get("n:" + m.node)
                if hop is not None and (best is None or (hop[0], m.node) < best[0]):
                    best = ((hop[0], m.node), hop)
            if best is None:
                continue
            _, (_, nbr, net) = best
            groups[(addr[(nbr[2:], net)].ip, addr[(src, net)].ifname)].append(prefix[name])
        routes[src] = _table(groups, compress)
    return routes


def _first_hops(adj, start: str) -> dict[str, tuple[int, str, str]]:
    """Dijkstra: vertex → (distance, first-hop node vertex, network of the first hop)."""
    dist: dict[str, int] = {start: 0}
    hop: dict[str, tuple[int, str, str]] = {}
    heap: list[tuple[int, str, str, str]] = [(0, start, "", "")]
    done: set[str] = set()
    while heap:
        d, v, fnode, fnet = heapq.heappop(heap)
        if v in done:
            continue
        done.add(v)
        if v != start and v.startswith("n:"):
            hop[v] = (d, fnode, fnet)
        for cost, w, net in adj.get(v, ()):
            nd = d + cost
            if w in done or nd > dist.get(w, nd):
                continue
            if v == start:
                nf, nn = (w, net) if w.startswith("n:") else ("", net)
            elif fnode == "" and v.startswith("l:"):
                nf, nn = w, fnet      # leaving the source's own LAN: w is the first hop
            else:
                nf, nn = fnode, fnet
            dist[w] = nd
            heapq.heappush(heap, (nd, w, nf, nn))
    return hop


def _table(groups: dict[tuple[str, str], list[tuple[int, int]]],
           compress: bool) -> list[RouteEntry]:
    """Route entries from prefixes grouped by (via, dev), optionally compressed."""
    if not groups:
        return []
    def entry(a: int, p: int, k: tuple[str, str]) -> RouteEntry:
        return RouteEntry(f"{ipaddress.IPv4Address(a)}/{p}", k[0], k[1])
    if not compress:
        return [entry(a, p, k) for k in sorted(groups) for a, p in sorted(groups[k])]
    merged = {k: _collapse(v) for k, v in groups.items()}
    default = max(sorted(merged), key=lambda k: len(merged[k]))
    out = [RouteEntry("default", default[0], default[1])]
    for k in sorted(merged):
        if k != default:
            out.extend(entry(a, p, k) for a, p in merged[k])
    return out


def _collapse(prefixes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge sibling prefixes (a/p + a'/p → a/p-1) and drop covered ones; ints for speed."""
    stack: list[tuple[int, int]] = []
    for addr, plen in sorted(set(prefixes)):
        if stack:
            top, tlen = stack[-1]
            if plen >= tlen and (addr >> (32 - tlen)) == (top >> (32 - tlen)):
                continue                      # covered by the previous prefix
        stack.append((addr, plen))
        while len(stack) >= 2:
            (a1, p1), (a2, p2) = stack[-2], stack[-1]
            size = 1 << (32 - p1)
            if p1 == p2 and p1 > 0 and a1 % (2 * size) == 0 and a2 == a1 + size:
                stack[-2:] = [(a1, p1 - 1)]
            else:
                break
    return stack
