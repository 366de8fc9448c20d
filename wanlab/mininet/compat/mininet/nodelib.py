"""Mininet's node library: ``NAT`` (in a node of the network) and ``LinuxBridge``."""

from mininet.node import LinuxBridge, Node
from wanlab.mininet.refuse import refuse


class NAT(Node):
    """A node that masquerades ``subnet`` (behind ``localIntf``) out of its other
    interfaces: iptables in its own namespace. A NAT to the host's own network
    (``inNamespace=False``, ``net.addNAT()``) is refused: that is wanlab's edge gateway
    (docs/edge.md), not mapped from Mininet yet."""

    def __init__(self, name, subnet="10.0/8", localIntf=None, flush=False, **params):
        if params.get("inNamespace") is False:
            raise refuse(f"NAT({name!r}, inNamespace=False)", "a NAT to the host's network "
                         "is wanlab's edge gateway (docs/edge.md), not mapped from Mininet yet")
        params.pop("inetIntf", None)
        super().__init__(name, **params)
        self.subnet, self.localIntf, self.flush = subnet, localIntf, flush

    def config(self, **params):
        r = super().config(**params)
        local = self.localIntf or self.defaultIntf()
        if self.flush:
            self.cmd("iptables -F; iptables -t nat -F")
        self.cmd(f"iptables -I FORWARD -i {local} -d {self.subnet} -j DROP")
        self.cmd(f"iptables -A FORWARD -i {local} -s {self.subnet} -j ACCEPT")
        self.cmd(f"iptables -A FORWARD -o {local} -d {self.subnet} -j ACCEPT")
        self.cmd(f"iptables -t nat -A POSTROUTING -s {self.subnet} '!' -d {self.subnet} "
                 f"-j MASQUERADE")
        self.cmd("sysctl -q net.ipv4.ip_forward=1")
        return r


__all__ = ["NAT", "LinuxBridge"]
