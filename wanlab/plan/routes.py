"""Static routes: shortest paths by ``$ns cost``, as ``$ns rtproto Static``.

The graph has a vertex per node and per LAN (a LAN vertex avoids N² edges
for big LANs: node→LAN costs the LAN's cost, LAN→node costs 0). Each network
(subnet) not attached to a node is routed towards its nearest member (ties:
the member's name), through the first hop of a shortest path to that member.
Among equally short paths the first hop is the smallest (neighbour name,
network name), so routes are deterministic.

That first hop needs no search per node: neighbour ``m`` (reached over a
link of cost ``c``) is a first hop from ``s`` towards ``w`` exactly when
``c + D[m, w] == D[s, w]``, and through one of ``s``'s LANs the first hop is
the LAN's smallest-named member nearest to ``w``. So all that is searched is
the distance matrix ``D``, computed in compiled code (SciPy's Dijkstra) a
block of rows at a time, or for small graphs all at once by Floyd-Warshall in
numpy; the rest is array arithmetic per node. (Distances
are doubled inside so that the LAN→node edge is not 0, which sparse graphs
cannot hold: every path's length doubles, so every comparison is unchanged.)

Only a node's own connected component can be reached from it, so the graph is cut into
components first: a component with a single network (two simulated hosts on a link, say)
needs no routes at all, and the others are searched in bins of about
:data:`BIN_VERTICES` vertices, so that the work grows with the number of nodes times the
size of their component, not with the square of the whole experiment's.

The routine is the same for both address families: the networks' subnets and the
attachments' addresses are either all IPv4 or all IPv6 (the plan calls it once per family),
and only the prefixes written at the end differ.

To keep the table small at scale, routes with the same next hop are merged
where their prefixes are exact siblings (never covering another next hop's
prefix), and the next hop carrying the most prefixes becomes the default
route.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:     # imported where it is used: most CLI commands, which import
    import numpy as np  # RouteEntry, never route (numpy is a sixth of their start)

# rows of the distance matrix held at once (8 bytes each): ~200 MB
ROW_BUDGET = 25_000_000
# up to this many vertices, all distances at once by Floyd-Warshall in numpy (faster than
# importing SciPy, which takes about half a second); beyond, SciPy's Dijkstra by rows
DENSE_MAX = 300
# components are searched together until a bin holds this many vertices (one big
# component is searched alone)
BIN_VERTICES = 2000


@dataclass(frozen=True)
class Attachment:
    """A node's interface on a network."""

    node: str
    network: str
    ifname: str
    ip: str


Subnet = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class RouteEntry:
    """One route on a node: ``dst`` (CIDR, or 'default') via ``via`` out of ``dev``; an
    IPv6 route when its next hop is an IPv6 address."""

    dst: str
    via: str
    dev: str

    @property
    def v6(self) -> bool:
        return ":" in self.via


def shortest_path_routes(nodes: list[str],
                         networks: dict[str, tuple[Subnet, list[Attachment], int]],
                         compress: bool = True) -> dict[str, list[RouteEntry]]:
    """Routes for every node. ``networks``: name → (subnet, attachments, cost ≥ 1)."""
    disjoint = _disjoint(networks)
    routes: dict[str, list[RouteEntry]] = {}
    for part_nodes, part_nets in _bins(nodes, networks):
        g = _Graph(part_nodes, part_nets, disjoint)
        for s, ds, rows in g.sources():
            groups = g.groups(s, ds, rows, merge=compress)
            routes[g.names[s]] = _table(groups, compress)
    return {n: routes.get(n, []) for n in nodes}


def _disjoint(networks: dict[str, tuple[Subnet, list[Attachment], int]]
              ) -> bool:
    """Whether the subnets of the networks that have members are disjoint (addressing
    makes them so; overlapping ones are merged prefix by prefix, never as ranges)."""
    spans = sorted((int(s.network_address), int(s.broadcast_address))
                   for s, atts, _ in networks.values() if atts)
    return all(lo > prev_hi for (_, prev_hi), (lo, _) in zip(spans, spans[1:], strict=False))


def _bins(nodes: list[str],
          networks: dict[str, tuple[Subnet, list[Attachment], int]]):
    """(nodes, networks) of groups of connected components, in the order of ``nodes``;
    components with one network (whose every node is attached to it) are left out: none
    of their nodes has anything to route to."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for _, atts, _ in networks.values():
        if atts:
            r = root(atts[0].node)
            for a in atts[1:]:
                q = root(a.node)
                if q != r:
                    parent[q] = r
    nets_of: dict[str, list[str]] = defaultdict(list)
    size: dict[str, int] = defaultdict(int)       # vertices: nodes and networks
    for k, (_, atts, _) in networks.items():
        if atts:
            nets_of[root(atts[0].node)].append(k)
            size[root(atts[0].node)] += 1 + len(atts)
    nodes_of: dict[str, list[str]] = defaultdict(list)
    for n in dict.fromkeys(nodes):
        if n in parent and len(nets_of[root(n)]) > 1:
            nodes_of[root(n)].append(n)
    part_nodes: list[str] = []
    part_nets: dict[str, tuple[Subnet, list[Attachment], int]] = {}
    held = 0
    for r, members in nodes_of.items():
        part_nodes.extend(members)
        part_nets.update((k, networks[k]) for k in nets_of[r])
        held += size[r]
        if held >= BIN_VERTICES:
            yield part_nodes, part_nets
            part_nodes, part_nets, held = [], {}, 0
    if part_nodes:
        yield part_nodes, part_nets


class _Graph:
    """Nodes, networks and attachments as integer arrays, and the routing graph."""

    def __init__(self, nodes: list[str],
                 networks: dict[str, tuple[Subnet, list[Attachment], int]],
                 disjoint: bool):
        import numpy as np
        names = list(dict.fromkeys(list(nodes) + [a.node for _, atts, _ in networks.values()
                                                  for a in atts]))
        self.names = names
        self.wanted = len(dict.fromkeys(nodes))
        idx = {n: i for i, n in enumerate(names)}
        n = self.n = len(names)
        # networks that have members: links first (two members: the nearest is one of a
        # pair), then LANs; the order inside is internal, the routes do not depend on it
        nets = [k for k, (_, atts, _) in networks.items() if len(atts) == 2] + \
            [k for k, (_, atts, _) in networks.items() if atts and len(atts) != 2]
        self.pairs = sum(1 for k in networks if len(networks[k][1]) == 2)
        self.nets = nets
        # attachments ranked by (node name, network name): the first-hop tie-break
        atts = sorted(((a.node, net, a) for net in nets for a in networks[net][1]),
                      key=lambda t: (t[0], t[1]))
        self.att = [a for _, _, a in atts]
        rank = {(a.node, a.network): r for r, a in enumerate(self.att)}
        self.none = len(self.att)                 # "no first hop"
        self.dev = {(a.node, a.network): a.ifname for a in self.att}

        # the graph, in doubled costs; parallel links keep their cheapest
        edges: dict[tuple[int, int], int] = {}
        self.link_nbrs: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
        self.lans_of: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        self.attached: list[list[int]] = [[] for _ in range(n)]
        self.lan_members: list[np.ndarray] = []
        self.lan_ranks: list[np.ndarray] = []
        v = n
        for k, net in enumerate(nets):
            _, members, cost = networks[net]
            if cost < 1:
                raise ValueError(f"network {net!r}: cost {cost} must be at least 1")
            for a in members:
                self.attached[idx[a.node]].append(k)
            if len(members) == 2:
                a, b = (idx[m.node] for m in members)
                for x, y, far in ((a, b, members[1]), (b, a, members[0])):
                    edges[(x, y)] = min(edges.get((x, y), 2 * cost), 2 * cost)
                    self.link_nbrs[x].append((y, 2 * cost, rank[(far.node, net)]))
            else:
                lan = len(self.lan_members)
                ms = sorted(members, key=lambda m: m.node)
                self.lan_members.append(np.array([idx[m.node] for m in ms], dtype=np.int64))
                self.lan_ranks.append(np.array([rank[(m.node, net)] for m in ms],
                                               dtype=np.int64))
                for m in members:
                    edges[(idx[m.node], v)] = cost
                    edges[(v, idx[m.node])] = cost
                    self.lans_of[idx[m.node]].append((lan, 2 * cost))
                v += 1
        self.vertices = v
        self.edges = edges
        self._dense: np.ndarray | None = None
        self._sparse = None
        self._lan_cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}

        # members by name: of a link's two (pair_a < pair_b), and of each LAN, grouped
        pairs = [sorted(idx[a.node] for a in networks[net][1]) for net in nets[:self.pairs]]
        pairs = [(a, b) if names[a] < names[b] else (b, a) for a, b in pairs]
        self.pair_a = np.array([a for a, _ in pairs], dtype=np.int64)
        self.pair_b = np.array([b for _, b in pairs], dtype=np.int64)
        lans = [sorted(idx[a.node] for a in networks[net][1]) for net in nets[self.pairs:]]
        lans = [sorted(m, key=lambda i: names[i]) for m in lans]
        self.lan_node = np.array([i for m in lans for i in m], dtype=np.int64)
        counts = np.array([len(m) for m in lans], dtype=np.int64)
        self.lan_start = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
        self.lan_count = counts
        self.lan_slot = np.arange(len(self.lan_node), dtype=np.int64)

        # networks in address order, and whether each begins where the previous ends
        pre = [(int(networks[net][0].network_address), networks[net][0].prefixlen)
               for net in nets]
        self.prefix = pre
        self.bits = next((s.max_prefixlen for s, _, _ in networks.values()), 32)
        self.addr_order = np.array(sorted(range(len(nets)), key=lambda k: pre[k]),
                                   dtype=np.int64)
        self.touching = np.zeros(len(nets), dtype=bool)
        if self.bits == 32:
            lo = np.array([pre[k][0] for k in self.addr_order], dtype=np.int64)
            hi = lo + np.array([1 << (32 - pre[k][1]) for k in self.addr_order],
                               dtype=np.int64)
            self.lo, self.hi = lo, hi
            self.touching[1:] = lo[1:] == hi[:-1]
        # overlapping subnets (which addressing refuses) would break run merging; judged
        # over the whole experiment, so that a bin merges as the whole graph would. IPv6
        # addresses do not fit numpy's integers: its prefixes merge one by one (_collapse)
        self.disjoint = disjoint and self.bits == 32

    def _rows(self, vertices: list[int]) -> np.ndarray:
        """Distances from ``vertices`` to every node (doubled costs; exact: integers)."""
        import numpy as np
        at = np.array(vertices, dtype=np.int64)
        if self.vertices <= DENSE_MAX:
            if self._dense is None:
                d = np.full((self.vertices, self.vertices), np.inf)
                np.fill_diagonal(d, 0.0)
                for (a, b), w in self.edges.items():
                    d[a, b] = w
                for k in range(self.vertices):
                    np.minimum(d, d[:, k, None] + d[None, k, :], out=d)
                self._dense = d
            return self._dense[at, :self.n]
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import dijkstra
        if self._sparse is None:
            e = self.edges
            self._sparse = csr_matrix(
                (np.fromiter(e.values(), dtype=np.float64, count=len(e)),
                 (np.fromiter((k[0] for k in e), dtype=np.int64, count=len(e)),
                  np.fromiter((k[1] for k in e), dtype=np.int64, count=len(e)))),
                shape=(self.vertices, self.vertices))
        return dijkstra(self._sparse, directed=True, indices=at)[:, :self.n]

    def sources(self):
        """(node, its distance row, the block of rows holding its neighbours) per node."""
        per_block = max(16, ROW_BUDGET // max(1, self.n))
        s = 0
        while s < self.wanted:
            block: dict[int, None] = {}
            first = s
            while s < self.wanted and len(block) < per_block:
                block[s] = None
                for m, _, _ in self.link_nbrs[s]:
                    block[m] = None
                s += 1
            verts = list(block)
            d = self._rows(verts)
            rows = {v: d[i] for i, v in enumerate(verts)}
            for x in range(first, s):
                yield x, rows[x], rows

    def _lan(self, lan: int) -> tuple[np.ndarray, np.ndarray]:
        """For LAN ``lan``: per node, the distance of its nearest member, and the smallest
        attachment rank among the members that near."""
        import numpy as np
        if lan in self._lan_cache:
            return self._lan_cache[lan]
        members, ranks = self.lan_members[lan], self.lan_ranks[lan]
        best = np.full(self.n, np.inf)
        rank = np.full(self.n, self.none, dtype=np.int64)
        step = max(1, ROW_BUDGET // max(1, self.n))
        for i in range(0, len(members), step):
            d = self._rows(list(members[i:i + step]))
            near = d.min(axis=0)
            r = np.where(d == near, ranks[i:i + step, None], self.none).min(axis=0)
            better = near < best
            rank = np.where(better, r, np.where(near == best, np.minimum(rank, r), rank))
            best = np.minimum(best, near)
        self._lan_cache[lan] = (best, rank)
        return best, rank

    def groups(self, s: int, ds: np.ndarray, rows: dict[int, np.ndarray],
               merge: bool) -> dict[tuple[str, str], list[tuple[int, int]]]:
        """Prefixes per (via, dev) of node ``s`` (``merge``: merged, as :func:`_collapse`)."""
        import numpy as np
        # the nearest member of each network (smallest distance, then name): the target
        da, db = ds[self.pair_a], ds[self.pair_b]
        target = np.where(db < da, self.pair_b, self.pair_a)
        near = np.minimum(da, db)
        if len(self.lan_node):
            dm = ds[self.lan_node]
            near_m = np.minimum.reduceat(dm, self.lan_start)
            first = np.minimum.reduceat(np.where(dm == np.repeat(near_m, self.lan_count),
                                                 self.lan_slot, len(self.lan_slot)),
                                        self.lan_start)
            target = np.concatenate((target, self.lan_node[first]))
            near = np.concatenate((near, near_m))
        # left out: networks attached to s, and unreachable ones
        far = np.isfinite(near)
        far[self.attached[s]] = False
        if not far.any():
            return {}
        # the first hop (attachment rank) towards each target
        dt = ds[target]
        hop = np.full(len(target), self.none, dtype=np.int64)
        for m, c, r in self.link_nbrs[s]:
            hop[(rows[m][target] + c == dt) & (hop > r)] = r
        for lan, c in self.lans_of[s]:
            near_l, rank_l = self._lan(lan)
            r = rank_l[target]
            better = (near_l[target] + c == dt) & (r < hop)
            hop[better] = r[better]
        label = np.where(far, hop, self.none)
        return self._prefixes(s, label, merge)

    def _prefixes(self, s: int, label: np.ndarray,
                  merge: bool) -> dict[tuple[str, str], list[tuple[int, int]]]:
        """Prefixes grouped by next hop, given each network's first-hop label."""
        import numpy as np
        out: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
        keys: dict[int, tuple[str, str]] = {}

        def key(r: int) -> tuple[str, str]:
            if r not in keys:
                a = self.att[r]
                keys[r] = (a.ip, self.dev[(self.names[s], a.network)])
            return keys[r]

        lab = label[self.addr_order]
        ok = lab != self.none
        if not merge or not self.disjoint:
            for k in np.flatnonzero(ok):
                out[key(int(lab[k]))].append(self.prefix[int(self.addr_order[k])])
            return {k: _collapse(v, self.bits) for k, v in out.items()} if merge else out
        # runs of address-adjacent networks with the same next hop merge into ranges
        cont = np.zeros(len(lab), dtype=bool)
        cont[1:] = (lab[1:] == lab[:-1]) & self.touching[1:] & ok[:-1]
        starts = np.flatnonzero(ok & ~cont)
        ends = np.flatnonzero(np.append(~cont[1:], True))
        last = ends[np.searchsorted(ends, starts)]
        for a, b in zip(starts.tolist(), last.tolist(), strict=True):
            k = key(int(lab[a]))
            if a == b:
                out[k].append(self.prefix[int(self.addr_order[a])])
            else:
                out[k].extend(_cidrs(int(self.lo[a]), int(self.hi[b])))
        return out


def _cidrs(lo: int, hi: int) -> list[tuple[int, int]]:
    """The largest aligned blocks covering [lo, hi), in order (what _collapse makes of it)."""
    out = []
    while lo < hi:
        size = lo & -lo if lo else 1 << 32
        while size > hi - lo:
            size >>= 1
        out.append((lo, 33 - size.bit_length()))
        lo += size
    return out


def _table(groups: dict[tuple[str, str], list[tuple[int, int]]],
           compress: bool) -> list[RouteEntry]:
    """Route entries from prefixes grouped by (via, dev), optionally compressed
    (``groups`` then already holds each group's merged prefixes, in order)."""
    if not groups:
        return []
    def entry(a: int, p: int, k: tuple[str, str]) -> RouteEntry:
        if ":" in k[0]:
            return RouteEntry(f"{ipaddress.IPv6Address(a)}/{p}", k[0], k[1])
        return RouteEntry(f"{a >> 24}.{a >> 16 & 255}.{a >> 8 & 255}.{a & 255}/{p}", k[0], k[1])
    if not compress:
        return [entry(a, p, k) for k in sorted(groups) for a, p in sorted(groups[k])]
    merged = groups
    default = max(sorted(merged), key=lambda k: len(merged[k]))
    out = [RouteEntry("default", default[0], default[1])]
    for k in sorted(merged):
        if k != default:
            out.extend(entry(a, p, k) for a, p in merged[k])
    return out


def _collapse(prefixes: list[tuple[int, int]], bits: int = 32) -> list[tuple[int, int]]:
    """Merge sibling prefixes (a/p + a'/p → a/p-1) and drop covered ones; ints for speed
    (``bits``: the family's address length)."""
    stack: list[tuple[int, int]] = []
    for addr, plen in sorted(set(prefixes)):
        if stack:
            top, tlen = stack[-1]
            if plen >= tlen and (addr >> (bits - tlen)) == (top >> (bits - tlen)):
                continue                      # covered by the previous prefix
        stack.append((addr, plen))
        while len(stack) >= 2:
            (a1, p1), (a2, p2) = stack[-2], stack[-1]
            size = 1 << (bits - p1)
            if p1 == p2 and p1 > 0 and a1 % (2 * size) == 0 and a2 == a1 + size:
                stack[-2:] = [(a1, p1 - 1)]
            else:
                break
    return stack
