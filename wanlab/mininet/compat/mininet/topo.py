"""Mininet's ``Topo``: a graph of hosts, switches and links with their parameters."""

from mininet.util import irange


class MultiGraph:
    def __init__(self):
        self.node = {}
        self.edge = {}

    def add_node(self, node, attr_dict=None, **attrs):
        self.node[node] = {**(attr_dict or {}), **attrs}

    def add_edge(self, src, dst, key=None, attr_dict=None, **attrs):
        attr = {**(attr_dict or {}), **attrs}
        self.node.setdefault(src, {})
        self.node.setdefault(dst, {})
        entry = self.edge.setdefault(src, {}).setdefault(dst, {})
        self.edge.setdefault(dst, {}).setdefault(src, entry)
        if key is None:
            key = len(entry)
        entry[key] = attr
        return key

    def nodes(self, data=False):
        return list(self.node.items()) if data else list(self.node)

    def edges_iter(self, data=False, keys=False):
        seen = set()
        for src, d in self.edge.items():
            for dst, ks in d.items():
                for k, attr in ks.items():
                    ident = (frozenset((src, dst)), k)
                    if ident in seen:
                        continue
                    seen.add(ident)
                    t = (src, dst, k, attr) if keys and data else (src, dst, k) if keys \
                        else (src, dst, attr) if data else (src, dst)
                    yield t

    def edges(self, data=False, keys=False):
        return list(self.edges_iter(data=data, keys=keys))

    def __getitem__(self, node):
        return self.edge.get(node, {})

    def convertTo(self, cls, data=False, keys=False):
        g = cls()
        for n, a in self.node.items():
            g.add_node(n, a)
        for e in self.edges(data=data, keys=keys):
            g.add_edge(*e)
        return g


class Topo:
    """Data center network representation for structured multi-trees."""

    def __init__(self, *args, **params):
        self.g = MultiGraph()
        self.hopts = params.pop("hopts", {})
        self.sopts = params.pop("sopts", {})
        self.lopts = params.pop("lopts", {})
        self.ports = {}
        self.build(*args, **params)

    def build(self, *args, **params):
        pass

    def addNode(self, name, **opts):
        self.g.add_node(name, **opts)
        return name

    def addHost(self, name, **opts):
        if not opts and self.hopts:
            opts = self.hopts
        return self.addNode(name, **opts)

    def addSwitch(self, name, **opts):
        if not opts and self.sopts:
            opts = self.sopts
        return self.addNode(name, isSwitch=True, **opts)

    def addLink(self, node1, node2, port1=None, port2=None, key=None, **opts):
        if not opts and self.lopts:
            opts = self.lopts
        port1, port2 = self.addPort(node1, node2, port1, port2)
        opts = dict(opts)
        opts.update(node1=node1, node2=node2, port1=port1, port2=port2)
        return self.g.add_edge(node1, node2, key, opts)

    def nodes(self, sort=True):
        return self.sorted(self.g.nodes()) if sort else self.g.nodes()

    def isSwitch(self, n):
        return self.g.node[n].get("isSwitch", False)

    def switches(self, sort=True):
        return [n for n in self.nodes(sort) if self.isSwitch(n)]

    def hosts(self, sort=True):
        return [n for n in self.nodes(sort) if not self.isSwitch(n)]

    def iterLinks(self, withKeys=False, withInfo=False):
        for _src, _dst, key, info in self.g.edges_iter(data=True, keys=True):
            node1, node2 = info["node1"], info["node2"]
            if withKeys:
                yield (node1, node2, key, info) if withInfo else (node1, node2, key)
            else:
                yield (node1, node2, info) if withInfo else (node1, node2)

    def links(self, sort=False, withKeys=False, withInfo=False):
        links = list(self.iterLinks(withKeys, withInfo))
        if not sort:
            return links
        return sorted(links, key=lambda lk: tuple(naturalSeq(x) for x in lk[:2]))

    def addPort(self, src, dst, sport=None, dport=None):
        ports = self.ports
        base = {True: 1, False: 0}
        src_base = base[self.isSwitch(src)] if src in self.g.node else 0
        dst_base = base[self.isSwitch(dst)] if dst in self.g.node else 0
        if sport is None:
            sport = len(ports.get(src, {})) + src_base
        if dport is None:
            dport = len(ports.get(dst, {})) + dst_base
        ports.setdefault(src, {})[sport] = (dst, dport)
        ports.setdefault(dst, {})[dport] = (src, sport)
        return sport, dport

    def port(self, src, dst):
        out = [(sp, dp) for sp, (d, dp) in self.ports.get(src, {}).items() if d == dst]
        return out[0] if len(out) == 1 else out

    def linkInfo(self, src, dst, key=None):
        entry = self.g.edge[src][dst]
        if key is None:
            key = min(entry)
        return entry[key]

    def setlinkInfo(self, src, dst, info, key=None):
        entry = self.g.edge[src][dst]
        entry[key if key is not None else min(entry)] = info

    def nodeInfo(self, name):
        return dict(self.g.node[name])

    def setNodeInfo(self, name, info):
        self.g.node[name] = info

    def convertTo(self, cls, data=True, keys=True):
        return self.g.convertTo(cls, data=data, keys=keys)

    @staticmethod
    def sorted(items):
        return sorted(items, key=naturalSeq)


def naturalSeq(t):
    import re
    return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", str(t))]


class SingleSwitchTopo(Topo):
    "Single switch connected to k hosts."

    def build(self, k=2, **_opts):
        self.k = k
        switch = self.addSwitch("s1")
        for h in irange(1, k):
            host = self.addHost(f"h{h}")
            self.addLink(host, switch)


class SingleSwitchReversedTopo(Topo):
    "Single switch connected to k hosts, with reversed ports."

    def build(self, k=2):
        self.k = k
        switch = self.addSwitch("s1")
        for h in irange(1, k):
            host = self.addHost(f"h{h}")
            self.addLink(host, switch, port1=0, port2=(k - h + 1))


class MinimalTopo(SingleSwitchTopo):
    "Minimal topology with two hosts and one switch"

    def build(self):
        return SingleSwitchTopo.build(self, k=2)


class LinearTopo(Topo):
    "Linear topology of k switches, with n hosts per switch."

    def build(self, k=2, n=1, **_opts):
        self.k, self.n = k, n
        if n == 1:
            def genHostName(i, j):
                return f"h{i}"
        else:
            def genHostName(i, j):
                return f"h{j}s{i}"
        lastSwitch = None
        for i in irange(1, k):
            switch = self.addSwitch(f"s{i}")
            for j in irange(1, n):
                host = self.addHost(genHostName(i, j))
                self.addLink(host, switch)
            if lastSwitch:
                self.addLink(switch, lastSwitch)
            lastSwitch = switch
