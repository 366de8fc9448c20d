"""Mininet's interfaces and links. A ``TCIntf``'s shaping (bw, delay, jitter, loss,
max_queue_size) is done by the engine on the direction the interface sends into, exactly;
``intf.config(...)`` at run time changes it there (docs/mininet.md)."""

from mininet.log import info
from wanlab.mininet.build import shaping
from wanlab.mininet.refuse import refuse


class Intf:
    """One interface of a node (a wanlab node's interface, renamed to Mininet's name)."""

    def __init__(self, name, node=None, port=None, link=None, mac=None, **params):
        self.node, self.name, self.link = node, name, link
        self.mac, self.ip, self.prefixLen = mac, None, None
        self.up = True
        self.params = {}
        if node is not None:
            node.addIntf(self, port=port)
        self.config(mac=mac, **params)

    def _live(self):
        return getattr(self.node, "shell", None) is not None

    def cmd(self, *args, **kwargs):
        return self.node.cmd(*args, **kwargs)

    def ifconfig(self, *args):
        if args and args[0] in ("up", "down"):
            self.up = args[0] == "up"
        return self.cmd("ifconfig", self.name, *args)

    def setIP(self, ipstr, prefixLen=None):
        if "/" in str(ipstr):
            self.ip, p = str(ipstr).split("/")
            self.prefixLen = int(p)
        else:
            if prefixLen is None:
                raise Exception(f"No prefix length set for IP address {ipstr}")
            self.ip, self.prefixLen = str(ipstr), int(prefixLen)
        if self._live():
            return self.cmd(f"ip addr flush dev {self.name} && "
                            f"ip addr add {self.ip}/{self.prefixLen} dev {self.name}")
        return ""

    def setMAC(self, macstr):
        self.mac = str(macstr)
        if self._live():
            return self.cmd(f"ip link set dev {self.name} down && ip link set dev {self.name} "
                            f"address {self.mac} && ip link set dev {self.name} up")
        return ""

    def IP(self):
        return self.ip

    def MAC(self):
        return self.mac

    def prefix(self):
        return self.prefixLen

    def isUp(self, setUp=False):
        if setUp:
            self.ifconfig("up")
        return self.up

    def rename(self, newname):
        raise refuse(f"{self.name}.rename", "wanlab keeps Mininet's interface names")

    def setParam(self, results, method, **param):
        name, value = list(param.items())[0]
        if value is None:
            return None
        r = getattr(self, method)(value)
        results[name] = r
        return r

    def config(self, mac=None, ip=None, ifconfig=None, up=True, **params):
        r = {}
        self.setParam(r, "setMAC", mac=mac)
        self.setParam(r, "setIP", ip=ip)
        self.setParam(r, "isUp", up=up)
        self.params.update(params)
        return r

    def delete(self):
        pass

    def status(self):
        return "OK" if self.up else "MISSING"

    def __repr__(self):
        return f"<{self.__class__.__name__} {self.name}>"

    def __str__(self):
        return self.name


class TCIntf(Intf):
    """An interface with traffic shaping, done by the engine (no tc, no netem)."""

    TC_KEYS = ("bw", "delay", "jitter", "loss", "max_queue_size")

    def config(self, bw=None, delay=None, jitter=None, loss=None, gro=False, txo=True,
               rxo=True, speedup=0, use_hfsc=False, use_tbf=False, latency_ms=None,
               enable_ecn=False, enable_red=False, max_queue_size=None, use_htb=None,
               **params):
        r = Intf.config(self, **params)
        self.tc = {"bw": bw, "delay": delay, "jitter": jitter, "loss": loss,
                   "max_queue_size": max_queue_size}
        # checked now, so that a bad value is an error naming the interface and the key
        shaping({k: v for k, v in self.tc.items() if v is not None}, self.name)
        if enable_ecn or enable_red:
            info(f"*** {self.name}: RED/ECN queue: the engine's RED is used without ECN\n")
        stuff = []
        if bw is not None:
            stuff.append(f"{float(bw):.2f}Mbit")
        if delay is not None:
            stuff.append(f"{delay} delay")
        if jitter is not None:
            stuff.append(f"{jitter} jitter")
        if loss is not None:
            stuff.append(f"{float(loss):.5f}% loss")
        if max_queue_size is not None:
            stuff.append(f"{max_queue_size} max queue")
        if stuff:
            info("(" + " ".join(stuff) + ") ")
        net = getattr(self.node, "net", None)
        if net is not None and net.exp is not None:
            net._reshape(self)
        r["tcoutputs"] = []
        return r


class OVSIntf(Intf):
    pass


class Link:
    """A link between two nodes' interfaces."""

    def __init__(self, node1, node2, port1=None, port2=None, intfName1=None, intfName2=None,
                 addr1=None, addr2=None, intf=Intf, cls1=None, cls2=None, params1=None,
                 params2=None, fast=True, **params):
        net = getattr(node1, "net", None) or getattr(node2, "net", None)
        implicit = net is None or getattr(net, "free_standing", False)
        if implicit:
            # free-standing nodes: their own network, built at their first command
            from mininet.net import ImplicitNet, _source
            net = ImplicitNet.get()
            net.linking = True      # the interfaces' own set-up waits for the build
        try:
            self._make(net, node1, node2, port1, port2, intfName1, intfName2, addr1, addr2,
                       intf, cls1, cls2, params1, params2, fast, params)
        finally:
            net.linking = False
        if implicit:
            net.adopt(node1)
            net.adopt(node2)
            self._source = _source()
            net.links.append(self)

    def _make(self, net, node1, node2, port1, port2, intfName1, intfName2, addr1, addr2,
              intf, cls1, cls2, params1, params2, fast, params):
        if net.exp is not None:
            raise refuse(f"Link({node1}, {node2}) after the network started",
                         "wanlab builds the whole network at once; add links before "
                         "build()/start()")
        p1, p2 = dict(params1 or {}), dict(params2 or {})
        for k, v in params.items():
            p1.setdefault(k, v)
            p2.setdefault(k, v)
        if port1 is None:
            port1 = node1.newPort()
        if port2 is None:
            port2 = node2.newPort()
        if not intfName1:
            intfName1 = f"{node1.name}-eth{port1}"
        if not intfName2:
            intfName2 = f"{node2.name}-eth{port2}"
        self.fast = fast
        cls1 = cls1 or intf
        cls2 = cls2 or intf
        self.intf1 = cls1(name=intfName1, node=node1, port=port1, link=self, mac=addr1, **p1)
        self.intf2 = cls2(name=intfName2, node=node2, port=port2, link=self, mac=addr2, **p2)
        self.net = net

    def intfName(self, node, n):
        return f"{node.name}-eth{n}"

    def delete(self):
        raise refuse("Link.delete", "wanlab does not remove links from a running network; "
                     "use net.configLinkStatus(a, b, 'down')")

    def stop(self):
        pass

    def status(self):
        return f"({self.intf1.status()} {self.intf2.status()})"

    def __str__(self):
        return f"{self.intf1}<->{self.intf2}"


class TCLink(Link):
    """A link whose two interfaces are shaped (TCIntf)."""

    def __init__(self, node1, node2, port1=None, port2=None, intfName1=None, intfName2=None,
                 addr1=None, addr2=None, **params):
        Link.__init__(self, node1, node2, port1=port1, port2=port2, intfName1=intfName1,
                      intfName2=intfName2, cls1=TCIntf, cls2=TCIntf, addr1=addr1,
                      addr2=addr2, params1=params, params2=params)


class TCULink(TCLink):
    pass


OVSLink = Link
