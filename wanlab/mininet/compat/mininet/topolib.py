"""Mininet's library topologies: trees (and TreeNet)."""

from mininet.net import Mininet
from mininet.topo import Topo
from mininet.util import irange


class TreeTopo(Topo):
    "Topology for a tree network with a given depth and fanout."

    def build(self, depth=1, fanout=2):
        self.hostNum = 1
        self.switchNum = 1
        self.addTree(depth, fanout)

    def addTree(self, depth, fanout):
        isSwitch = depth > 0
        if isSwitch:
            node = self.addSwitch(f"s{self.switchNum}")
            self.switchNum += 1
            for _ in range(fanout):
                child = self.addTree(depth - 1, fanout)
                self.addLink(node, child)
        else:
            node = self.addHost(f"h{self.hostNum}")
            self.hostNum += 1
        return node


def TreeNet(depth=1, fanout=2, **kwargs):
    "Convenience function for creating tree networks."
    topo = TreeTopo(depth, fanout)
    return Mininet(topo, **kwargs)


class TorusTopo(Topo):
    "A 2-D torus: it has loops, which need switches with stp=True (a spanning tree)."

    def build(self, x, y, n=1):
        for i in irange(1, x):
            for j in irange(1, y):
                self.addSwitch(f"s{i}x{j}")
                for k in irange(1, n):
                    h = self.addHost(f"h{i}x{j}" + (f"-{k}" if n > 1 else ""))
                    self.addLink(h, f"s{i}x{j}")
        for i in irange(1, x):
            for j in irange(1, y):
                self.addLink(f"s{i}x{j}", f"s{i % x + 1}x{j}")
                self.addLink(f"s{i}x{j}", f"s{i}x{j % y + 1}")
