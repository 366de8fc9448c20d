"""Mininet's node library: ``NAT`` and ``LinuxBridge``."""

from mininet.node import LinuxBridge, Node
from wanlab.mininet.refuse import refuse


class NAT(Node):
    """A NAT to the host's network: wanlab's edge gateway does that (docs/edge.md); not
    mapped from Mininet yet, so refused when made."""

    def __init__(self, name, subnet="10.0/8", localIntf=None, flush=False, **params):
        raise refuse(f"NAT({name!r})", "a NAT to the host's network is wanlab's edge "
                     "gateway (docs/edge.md), not mapped from Mininet yet")


__all__ = ["NAT", "LinuxBridge"]
