"""Static routes: the array-based computation gives exactly the routes of the plain
Dijkstra it replaced (kept here as the reference), on random graphs with ties."""

from __future__ import annotations

import heapq
import ipaddress
import random
from collections import defaultdict

import pytest

from wanlab.plan.routes import (
    Attachment,
    RouteEntry,
    _cidrs,
    _collapse,
    _table,
    shortest_path_routes,
)

# -- the reference: per-node Dijkstra over names (the implementation before arrays) -------

def reference_routes(nodes: list[str],
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
    for edges in adj.values():
        edges.sort(key=lambda e: (e[1], e[2]))
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
        routes[src] = _ref_table(groups, compress)
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


def _ref_table(groups, compress):
    if compress:
        groups = {k: _collapse(v) for k, v in groups.items()}
    return _table(groups, compress)


# -- random experiments ----------------------------------------------------------------

def _random_networks(rng: random.Random, n_nodes: int, overlap: bool = False):
    letters = "abcdefghij"
    names = rng.sample([f"{rng.choice(letters)}{i}" for i in range(n_nodes)], n_nodes)
    nets: dict[str, tuple[ipaddress.IPv4Network, list[Attachment], int]] = {}
    # consecutive subnets of mixed sizes, declared in shuffled order, so that merging
    # meets siblings, gaps and neighbours with other next hops
    subnets = []
    base = int(ipaddress.IPv4Address("10.0.0.0"))
    for _ in range(n_nodes * 2):
        plen = rng.choice([24, 24, 24, 30, 29, 23])
        size = 1 << (32 - plen)
        base = (base + size - 1) // size * size + (size if rng.random() < 0.1 else 0)
        subnets.append(ipaddress.IPv4Network((base, plen)))
        base += size
    rng.shuffle(subnets)
    if overlap:
        # (addressing refuses this; the routes then fall back to merging prefix by prefix)
        subnets[1] = ipaddress.IPv4Network((int(subnets[0].network_address), 32))
    k = 0
    def add(members):
        nonlocal k
        net = f"{rng.choice(letters)}net{k}"
        subnet = subnets[k]
        # (a small subnet may hold fewer hosts than the LAN has members: the routes do
        # not care, they only need distinct addresses)
        atts = [Attachment(m, net, f"eth{k}", str(subnet.network_address + 1 + j))
                for j, m in enumerate(members)]
        nets[net] = (subnet, atts, rng.choice([1, 1, 1, 2, 3]))
        k += 1
    # a random tree for connectivity (sometimes a forest), then extra links and LANs
    for i in range(1, n_nodes):
        if rng.random() < 0.9:
            add([names[i], names[rng.randrange(i)]])
    while k < len(subnets) - 1 and rng.random() < 0.8:
        if rng.random() < 0.6:
            a, b = rng.sample(names, 2)
            add([a, b])                       # may be parallel to an existing link
        else:
            add(rng.sample(names, rng.randint(1, min(5, n_nodes))))
    return names, nets


@pytest.mark.parametrize("dense", [True, False], ids=["floyd-warshall", "dijkstra"])
@pytest.mark.parametrize("seed", range(40))
def test_routes_equal_the_reference_on_random_graphs(seed, dense, monkeypatch):
    from wanlab.plan import routes
    monkeypatch.setattr(routes, "DENSE_MAX", 10**9 if dense else 0)
    rng = random.Random(seed)
    names, nets = _random_networks(rng, rng.randint(2, 25), overlap=seed % 10 == 9)
    for compress in (True, False):
        assert shortest_path_routes(names, nets, compress) == \
            reference_routes(names, nets, compress)


def test_routes_equal_the_reference_on_a_grid_full_of_ties():
    # a 6x6 grid of unit costs: many equally short paths, broken by name
    names = [f"g{r}{c}" for r in range(6) for c in range(6)]
    nets = {}
    k = 0
    for r in range(6):
        for c in range(6):
            for dr, dc in ((0, 1), (1, 0)):
                if r + dr < 6 and c + dc < 6:
                    subnet = ipaddress.IPv4Network(f"10.{k // 256}.{k % 256}.0/24")
                    a, b = f"g{r}{c}", f"g{r + dr}{c + dc}"
                    net = f"x{k}"
                    nets[net] = (subnet, [Attachment(a, net, "e", str(subnet[1])),
                                          Attachment(b, net, "f", str(subnet[2]))], 1)
                    k += 1
    assert shortest_path_routes(names, nets) == reference_routes(names, nets)


def test_cidrs_of_a_range_are_what_collapse_makes():
    rng = random.Random(7)
    for _ in range(200):
        lo = rng.randrange(0, 1 << 20) << 8
        n = rng.randint(1, 40)
        prefixes = [(lo + 256 * i, 24) for i in range(n)]
        assert _cidrs(lo, lo + 256 * n) == _collapse(prefixes)


@pytest.mark.parametrize("seed", range(10))
def test_routes_equal_the_reference_when_distances_come_in_small_blocks(seed, monkeypatch):
    # a tiny row budget: sources, neighbours and LAN members come a few rows at a time
    from wanlab.plan import routes
    monkeypatch.setattr(routes, "ROW_BUDGET", 40)
    monkeypatch.setattr(routes, "DENSE_MAX", 0)
    rng = random.Random(1000 + seed)
    names, nets = _random_networks(rng, rng.randint(10, 40))
    assert shortest_path_routes(names, nets) == reference_routes(names, nets)


@pytest.mark.parametrize("seed", range(10))
def test_routes_equal_the_reference_when_components_share_small_bins(seed, monkeypatch):
    # forests of many components: single-network ones skipped, the others searched a few
    # to a bin (or one too big for a bin alone)
    from wanlab.plan import routes
    monkeypatch.setattr(routes, "BIN_VERTICES", 6)
    rng = random.Random(2000 + seed)
    names, nets = _random_networks(rng, rng.randint(10, 40))
    # cut the forest further: drop a third of the networks
    nets = {k: v for k, v in nets.items() if rng.random() < 0.66}
    for compress in (True, False):
        assert shortest_path_routes(names, nets, compress) == \
            reference_routes(names, nets, compress)
