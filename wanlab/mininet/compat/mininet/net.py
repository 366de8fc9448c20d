"""``Mininet``: one wanlab experiment per network, created when the network is built and
terminated by ``stop()`` (docs/mininet.md)."""

import atexit
import os
import re
import shlex
import time

from mininet.link import Intf, Link
from mininet.log import error, info, output
from mininet.node import ASK_OPENFLOW, Controller, Host, Node, OVSSwitch, Switch
from mininet.util import ipAdd, macColonHex, netParse
from wanlab.errors import SpecError
from wanlab.mininet import build as mapping
from wanlab.mininet import openflow, spanning
from wanlab.mininet.refuse import refuse
from wanlab.mininet.shell import Shell

VERSION = "2.3.0 (wanlab)"


class Mininet:
    """A Mininet network realised as a wanlab experiment."""

    live = []
    _count = 0
    implicit = None     # free-standing nodes and links (ImplicitNet), when a script has some

    def __init__(self, topo=None, switch=OVSSwitch, host=Host, controller=Controller,
                 link=Link, intf=Intf, build=True, xterms=False, cleanup=False,
                 ipBase="10.0.0.0/8", inNamespace=False, autoSetMacs=False,
                 autoStaticArp=False, autoPinCpus=False, listenPort=None,
                 waitConnected=False):
        self.topo = topo
        self.switch, self.host, self.controller = switch, host, controller
        self.link, self.intf = link, intf
        self.ipBase = ipBase
        self.ipBaseNum, self.prefixLen = netParse(ipBase)
        hostIP = (0xFFFFFFFF >> self.prefixLen) & self.ipBaseNum
        self.nextIP = hostIP if hostIP > 0 else 1
        self.autoSetMacs, self.autoStaticArp = autoSetMacs, autoStaticArp
        self.waitConn = waitConnected
        self.hosts, self.switches, self.controllers, self.links = [], [], [], []
        self.nameToNode = {}
        self.exp = None
        self.mapped = None
        self._trees = {}    # looped switched networks: their trees at run time
        self._fabric = self._layout = None     # OpenFlow switches (wanlab.mininet.openflow)
        self.roots = []     # free-standing nodes in the root namespace (ImplicitNet)
        self.built = False
        if xterms:
            raise refuse("Mininet(xterms=True)", "wanlab opens no terminals; use 'wanlab "
                         "shell EXPERIMENT NODE'")
        if topo and build:
            self.build()

    # -- declarations -------------------------------------------------------------------
    def _check_open(self, what):
        if self.exp is not None:
            raise refuse(f"{what} after the network was built", "wanlab builds the whole "
                         "network at once: add nodes and links before build()/start()")

    def addHost(self, name, cls=None, **params):
        self._check_open(f"addHost({name!r})")
        defaults = {"ip": ipAdd(self.nextIP, ipBaseNum=self.ipBaseNum,
                                prefixLen=self.prefixLen) + f"/{self.prefixLen}"}
        if self.autoSetMacs:
            defaults["mac"] = macColonHex(self.nextIP)
        self.nextIP += 1
        defaults.update(params)
        h = (cls or self.host)(name, **defaults)
        h.net = self
        self.hosts.append(h)
        self.nameToNode[name] = h
        h._source = _source()
        return h

    def addSwitch(self, name, cls=None, **params):
        self._check_open(f"addSwitch({name!r})")
        s = (cls or self.switch)(name, **params)
        s.net = self
        self.switches.append(s)
        self.nameToNode[name] = s
        return s

    def addController(self, name="c0", controller=None, **params):
        if isinstance(name, Controller):
            c = name
        else:
            cls = controller or self.controller
            if not cls:
                return None
            c = cls(name, **params)
        self.controllers.append(c)
        self.nameToNode[c.name] = c
        return c

    def addNAT(self, name="nat0", connect=True, inNamespace=False, **params):
        raise refuse("addNAT", "a NAT to the host's network is wanlab's edge gateway "
                     "(docs/edge.md), not mapped from Mininet yet")

    def addLink(self, node1, node2, port1=None, port2=None, cls=None, **params):
        n1 = node1 if not isinstance(node1, str) else self[node1]
        n2 = node2 if not isinstance(node2, str) else self[node2]
        self._check_open(f"addLink({n1}, {n2})")
        options = dict(params)
        if port1 is not None:
            options["port1"] = port1
        if port2 is not None:
            options["port2"] = port2
        options.setdefault("intf", self.intf)
        lk = (cls or self.link)(n1, n2, **options)
        lk._source = _source()
        self.links.append(lk)
        return lk

    def delLinkBetween(self, node1, node2, index=0, allLinks=False):
        raise refuse("delLinkBetween", "wanlab does not remove links from a network")

    def delNode(self, node, nodes=None):
        raise refuse("delNode", "wanlab does not remove nodes from a network")

    delHost = delSwitch = delController = delNode

    def addNode(self, name, cls=Node, **params):   # Mininet's Topo-free variant
        return self.addHost(name, cls=cls, **params)

    # -- lookups ------------------------------------------------------------------------
    def getNodeByName(self, *args):
        if len(args) == 1:
            return self.nameToNode[args[0]]
        return [self.nameToNode[n] for n in args]

    def get(self, *args):
        return self.getNodeByName(*args)

    def __getitem__(self, key):
        return self.nameToNode[key]

    def __contains__(self, item):
        return item in self.nameToNode

    def keys(self):
        return list(self.nameToNode)

    def values(self):
        return [self[k] for k in self.nameToNode]

    def items(self):
        return [(k, self[k]) for k in self.nameToNode]

    def __iter__(self):
        return iter(self.nameToNode)

    def __len__(self):
        return len(self.nameToNode)

    def linksBetween(self, node1, node2):
        return [lk for lk in self.links if {lk.intf1.node, lk.intf2.node} == {node1, node2}]

    # -- building -----------------------------------------------------------------------
    def buildFromTopo(self, topo=None):
        topo = topo or self.topo
        if not self.controllers and self.controller:
            self.addController("c0")
        for hostName in topo.hosts():
            self.addHost(hostName, **topo.nodeInfo(hostName))
        for switchName in topo.switches():
            params = topo.nodeInfo(switchName)
            cls = params.pop("cls", self.switch)
            self.addSwitch(switchName, cls=cls, **params)
        for srcName, dstName, params in topo.links(sort=True, withKeys=False, withInfo=True):
            params = dict(params)
            src, dst = self[srcName], self[dstName]
            params.pop("node1", None)
            params.pop("node2", None)
            self.addLink(src, dst, **params)

    def build(self):
        """Make the network: the experiment is created here (Mininet makes its nodes here)."""
        if self.topo and not self.hosts and not self.switches:
            self.buildFromTopo(self.topo)
        self.built = True
        if self.hosts and self.exp is None:
            self._create()

    def _graph(self):
        hosts, links, shaped = {}, [], {}
        for h in self.hosts:
            cores = h.cpu_cores() if hasattr(h, "cpu_cores") else None
            hosts[h.name] = {"cpu_cores": cores, "source": getattr(h, "_source", None)}

        def end(intf):
            tc = getattr(intf, "tc", None) or {}
            s = mapping.shaping({k: v for k, v in tc.items() if v is not None}, intf.name)
            shaped[(intf.node.name, intf.name)] = s
            return mapping.MnIntf(intf.node.name, intf.name, s)
        for lk in self.links:
            links.append(mapping.MnLink(end(lk.intf1), end(lk.intf2),
                                        getattr(lk, "_source", None) or _ir_source()))
        # root-namespace nodes hold their link ends where the OpenFlow switches do
        return hosts, [s.name for s in self.switches + self.roots], links, shaped

    def _create(self):
        from wanlab.api import Experiment
        Mininet._count += 1
        name = f"mn{os.getpid()}-{Mininet._count}"
        hosts, switches, links, shaped = self._graph()
        # the switches that run a spanning tree, with their bridge ids (the datapath id)
        stp = {s.name: _bridge_id(s, k) for k, s in enumerate(self.switches)
               if getattr(s, "stp", False)}
        why = openflow.reason(Controller.made, _script_text())
        if self.roots and not why:
            r = self.roots[0]
            raise refuse(f"Node({r.name!r}, inNamespace=False) with links", "wanlab maps "
                         "free-standing root-namespace nodes only as the switches' node of an "
                         "OpenFlow network" + ASK_OPENFLOW)
        if why:
            from wanlab.backends.emulate import ovs
            if ovs.missing():
                raise refuse("OpenFlow network", f"{why}, which needs Open vSwitch: "
                             f"{', '.join(ovs.missing())} not found (apt-get install "
                             f"openvswitch-switch openvswitch-testcontroller)")
        try:
            if why:
                numbers = {(s.name, i.name): p for s in self.switches + self.roots
                           for p, i in s.intfs.items()}
                self.mapped, self._layout = openflow.build(name, hosts, switches, links,
                                                           numbers)
            else:
                self.mapped = mapping.build(name, hosts, switches, links, stp)
        except SpecError as e:
            raise refuse("Mininet network", e.message) from None
        info("*** Creating network (wanlab experiment %s)\n" % name)
        exp = Experiment(self.mapped.experiment)
        try:
            exp.create()        # rolled back by the life cycle if it fails
        except BaseException:
            exp.lab.close()
            raise
        self.exp = exp
        Mininet.live.append(self)
        self._prepare_argv()
        self._trees = {lan: spanning.Tree(lan, sws, lks, stp)
                       for lan, (sws, lks) in getattr(self.mapped, "spanning", {}).items()}
        for req in mapping.jitter_requests(self.mapped, shaped):
            self.exp.engine_call("set", **req)
        info("*** Adding hosts:\n")
        for h in self.hosts:
            h._started(Shell(self._argv(h.name), h.name))
            info(h.name + " ")
        info("\n*** Adding switches:\n" + " ".join(s.name for s in self.switches))
        info("\n*** Adding links:\n" + " ".join(f"({lk.intf1.node}, {lk.intf2.node})"
                                                  for lk in self.links) + "\n")
        info("*** Configuring hosts\n")
        for h in self.hosts:
            self._configure(h)
            info(h.name + " ")
        info("\n")
        if self.autoStaticArp:
            self.staticArp()
        if why:
            self._start_openflow(why)

    def _start_openflow(self, why):
        """Open vSwitch in the switches' node, a netdev bridge per switch."""
        from wanlab.backends.emulate import netns
        from wanlab.plan.plan import make_plan
        info(f"*** OpenFlow switches ({why}): Open vSwitch, userspace datapath\n")
        lab = self.exp.lab
        row = lab.store.get(self.exp.name)
        plan = make_plan(row.ir, row.short)
        node = self._layout.node
        self._fabric = openflow.Fabric(self._layout, lab.store.folder(self.exp.name),
                                       self._argv(node), netns.path(plan.nodes[node].netns))
        self._fabric.start()
        for h in self.hosts:
            # the userspace datapath forwards what it gets: TCP needs checksums filled in
            names = " ".join(i.name for i in h.intfList())
            if names:
                h.cmd(f"for i in {names}; do ethtool -K $i tx off >/dev/null 2>&1; done")
        for s in self.switches:
            self._fabric.add_switch(s.name, s.dpid, getattr(s, "failMode", "secure"),
                                    getattr(s, "protocols", None), getattr(s, "stp", False))
        for r in self.roots:
            self._root_shell(r)

    def _root_shell(self, node):
        """A root-namespace node's shell: in the switches' node, which stands in for
        Mininet's root namespace, talking to its Open vSwitch (wanlab.mininet.openflow)."""
        f = self._fabric
        env = [f"{k}={f.ovs.env[k]}" for k in ("OVS_RUNDIR", "OVS_DBDIR", "OVS_LOGDIR",
                                                "OVS_SYSCONFDIR")]
        node._started(Shell(self._argv(self._layout.node) + ["env", *env], node.name))
        node.cmd(f"source {shlex.quote(openflow.write_rc(f.ovs.dir))}")

    def _prepare_argv(self):
        from wanlab.backends.emulate import cgroups, netns
        from wanlab.plan.plan import make_plan
        lab = self.exp.lab
        row = lab.store.get(self.exp.name)
        plan = make_plan(row.ir, row.short)
        folder = lab.store.folder(self.exp.name)
        self._argvs = {n: cgroups.join_argv(folder, n, [
            "nsenter", f"--net={netns.path(plan.nodes[n].netns)}"]) for n in plan.nodes}
        self._netns = {n: plan.nodes[n].netns for n in plan.nodes}

    def _argv(self, node):
        return list(self._argvs[node])

    def _configure(self, h):
        """Rename the node's interfaces to Mininet's, set their addresses and MACs, run what
        the node's class asked before it existed, then its ``config``."""
        ifs = [(self.mapped.where[(h.name, i.name)].ifname, i) for i in h.intfList()]
        steps = []
        for k, (eth, _) in enumerate(ifs):
            steps.append(f"ip link set dev {eth} down && ip addr flush dev {eth} && "
                         f"ip link set dev {eth} name mn-tmp{k}")
        for k, (_, i) in enumerate(ifs):
            steps.append(f"ip link set dev mn-tmp{k} name {i.name}")
            if i.mac:
                steps.append(f"ip link set dev {i.name} address {i.mac}")
            steps.append(f"ip link set dev {i.name} up")
            if i.ip:
                steps.append(f"ip addr add {i.ip}/{i.prefixLen} dev {i.name}")
        if steps:
            out = h.cmd(" && ".join(steps) + " && echo mn-ok")
            if "mn-ok" not in out:
                raise RuntimeError(f"{h.name}: configuring interfaces failed: {out.strip()}")
        macs = h.cmd("ip -o link show")
        for i in h.intfList():
            m = re.search(rf"\d+: {re.escape(i.name)}[@:].*?link/ether ([0-9a-f:]+)", macs)
            if m:
                i.mac = m.group(1)
        for c in h.early:
            h.cmd(c)
        h.early = []
        intf = h.defaultIntf()
        if intf:
            h.configDefault()
        else:
            h.configDefault(ip=None, mac=None)

    def staticArp(self):
        for src in self.hosts:
            cmds = [f"ip neigh replace {dst.IP()} lladdr {dst.MAC()} dev {src.defaultIntf()}"
                    for dst in self.hosts if src is not dst and dst.IP() and dst.MAC()
                    and src.defaultIntf()]
            if cmds:
                src.cmd(" ; ".join(cmds))

    def configHosts(self):
        pass

    def configureControlNetwork(self):
        pass

    # -- run time -----------------------------------------------------------------------
    def start(self):
        if not self.built or self.exp is None:
            self.build()
        if self.exp is None:
            raise refuse("Mininet.start()", "a network without hosts has nothing for wanlab "
                         "to build")
        info("*** Starting controller\n" + " ".join(c.name for c in self.controllers) + "\n")
        for c in self.controllers:
            c.net = self
            c.start()
        info("*** Starting %s switches\n" % len(self.switches))
        for s in self.switches:
            s.start(self.controllers)
            info(s.name + " ")
        info("\n")
        if self.waitConn:
            self.waitConnected()

    def waitConnected(self, timeout=None, delay=0.5):
        info("*** Waiting for switches to connect\n")
        remaining = list(self.switches)
        end = time.time() + (timeout if timeout is not None else 60)
        while True:
            for s in list(remaining):
                if s.connected():
                    info(f"{s} ")
                    remaining.remove(s)
            if not remaining or time.time() > end:
                break
            time.sleep(delay)
        info("\n")
        if remaining:
            error(f"*** Timed out after {time.time() - end + (timeout or 60):.0f} seconds; "
                  f"not connected: {' '.join(str(s) for s in remaining)}\n")
        return not remaining

    def stop(self):
        """Terminate the experiment: nothing of it is left behind (even when saying so
        fails, e.g. on a closed standard output)."""
        try:
            info("*** Stopping %i controllers\n" % len(self.controllers))
            info("*** Stopping %i links\n" % len(self.links))
            info("*** Stopping %i switches\n" % len(self.switches))
            info("*** Stopping %i hosts\n" % len(self.hosts))
        finally:
            self._teardown()
        info("\n*** Done\n")

    def _teardown(self):
        for h in self.hosts + self.roots:
            try:
                h.terminate()
            except Exception as e:  # a subclass's terminate failing must not leave the rest
                error(f"*** {h.name}: terminate: {e}\n")
        if self._fabric is not None:
            fabric, self._fabric = self._fabric, None
            try:
                fabric.stop()
            except Exception as e:  # the experiment's teardown below ends its cgroup anyway
                error(f"*** OpenFlow switches: stop: {e}\n")
        if self.exp is not None:
            exp, self.exp = self.exp, None
            if self in Mininet.live:
                Mininet.live.remove(self)
            try:
                exp.terminate()
            finally:
                exp.lab.close()

    @classmethod
    def stopAll(cls):
        for net in list(cls.live):
            net.stop()

    def run(self, test, *args, **kwargs):
        self.start()
        try:
            return test(*args, **kwargs)
        finally:
            self.stop()

    @classmethod
    def init(cls):
        pass

    def staticArpAll(self):
        self.staticArp()

    # -- shaping and link state ---------------------------------------------------------
    def _where(self, intf):
        w = self.mapped.where.get((intf.node.name, intf.name))
        if w is None:
            raise refuse(f"{intf.name}: run-time change", self._unbuilt())
        return w

    def _unbuilt(self):
        """Why a link has no engine object to change."""
        if self._fabric is not None:
            return ("it was moved to another OpenFlow switch at run time: wanlab's engine "
                    "knows it by the name it was built with")
        return ("it is between learning switches that no host is plugged into: wanlab "
                "builds no engine LAN or trunk for them")

    def _reshape(self, intf):
        """Apply an interface's TCIntf parameters now: the whole set replaces the old one,
        as Mininet's ``config`` rebuilds its qdiscs."""
        w = self._where(intf)
        s = mapping.shaping({k: v for k, v in intf.tc.items() if v is not None}, intf.name)
        params = {"bandwidth_bps": s.bandwidth_bps, "delay_us": s.delay_s * 1e6,
                  "jitter_us": s.jitter_s * 1e6,
                  "loss": {"kind": "bernoulli", "p": s.loss} if s.loss else {"kind": "none"}}
        if s.limit:
            params["queue"] = {"limit": s.limit}
        req = {"target": w.target, "dir": w.out_dir, "params": params}
        if w.member:
            req["member"] = w.member
        self.exp.engine_call("set", **req)

    def configLinkStatus(self, src, dst, status):
        if src not in self.nameToNode or dst not in self.nameToNode:
            error("src or dst not in network\n")
            return
        a, b = self[src], self[dst]
        conns = a.connectionsTo(b)
        if not conns:
            error(f"src and dst not connected: {src} {dst}\n")
            return
        if status not in ("up", "down"):
            error(f"unknown link status: {status}\n")
            return
        trees, changed = {}, set()
        for ia, ib in conns:
            w = self.mapped.where.get((ia.node.name, ia.name)) or \
                self.mapped.where.get((ib.node.name, ib.name))
            if w is None:
                raise refuse(f"link {src} {dst} {status}", self._unbuilt())
            if w.spanning:      # between switches of a loop: the tree decides
                ends = (ia.node.name, ia.name), (ib.node.name, ib.name)
                tree = next(t for t in self._trees.values() if t.index(*ends) is not None)
                left, joined = tree.change(tree.index(*ends), status == "up")
                spanning.apply(tree, left, joined, self.mapped.where, self.exp.engine_call)
                trees[tree.lan] = tree
                if left or joined:
                    changed.add(tree.lan)
            else:
                # a trunk has a patch port at each end: both follow (so either side's name
                # brings it back)
                ws = [w, self.mapped.where[(ib.node.name, ib.name)]] if w.kind == "trunk" \
                    else [w]
                for w in ws:
                    req = {"target": w.target}
                    if w.member:
                        req["member"] = w.member
                    self.exp.engine_call(status, **req)
            ia.up = ib.up = status == "up"
        if changed:
            self._topology_changed(changed)
        if trees:
            spanning.save(self.exp.lab.store.folder(self.exp.name), self._trees)

    def _topology_changed(self, lans):
        """After a spanning tree changed: each host on those networks announces itself, so
        every switch learns it again on the new tree (wanlab.mininet.spanning)."""
        ports = [(self._netns[h.name], i.name) for h in self.hosts for i in h.intfList()
                 if (w := self.mapped.where.get((h.name, i.name))) is not None
                 and w.kind == "lan" and any(w.target == lan or
                                             w.target.startswith(lan + "/") for lan in lans)]
        spanning.announce(ports)

    # -- tests --------------------------------------------------------------------------
    @staticmethod
    def _parsePing(out):
        m = re.search(r"(\d+) packets transmitted, (\d+)( packets)? received", out)
        if not m:
            error(f"*** Error: could not parse ping output: {out}\n")
            return 1, 0
        return int(m.group(1)), int(m.group(2))

    @staticmethod
    def _parsePingFull(out):
        sent, recv = Mininet._parsePing(out)
        m = re.search(r"rtt min/avg/max/mdev = ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+)", out)
        if not m:
            return sent, recv, 0, 0, 0, 0
        return (sent, recv, *[float(x) for x in m.groups()])

    def ping(self, hosts=None, timeout=None):
        """Ping between every pair of ``hosts``; the percentage lost."""
        hosts = hosts or self.hosts
        lost = sent = 0
        output("*** Ping: testing ping reachability\n")
        opts = f"-W {timeout}" if timeout else ""
        for node in hosts:
            output(f"{node.name} -> ")
            dests = [d for d in hosts if d is not node]
            outs = self._pings(node, [d.IP() for d in dests if d.IP()], opts)
            for dest in dests:
                if dest.IP():
                    s, rc = self._parsePing(next(outs))
                else:
                    s, rc = 0, 0
                sent += s
                lost += s - rc
                output(f"{dest.name if rc else 'X'} ")
            output("\n")
        ploss = 100.0 * lost / sent if sent else 0
        output(f"*** Results: {round(ploss)}% dropped ({sent - lost}/{sent} received)\n")
        return ploss

    PING_BATCH = 64     # pings per shell command

    @staticmethod
    def _pings(node, ips, opts):
        """The output of ``ping -c1`` from ``node`` to each of ``ips``, one after another
        as Mininet runs them, but up to PING_BATCH of them per command of the node's shell:
        one round trip to the shell per batch, not per ping."""
        for k in range(0, len(ips), Mininet.PING_BATCH):
            batch = ips[k:k + Mininet.PING_BATCH]
            out = node.cmd("; ".join(f"LANG=C ping -c1 {opts} {ip}; printf '\\036\\n'"
                                     for ip in batch))
            parts = out.split("\036\n")
            yield from parts[:len(batch)]
            # a batch cut short (the shell interrupted): the rest have no output
            yield from [""] * (len(batch) - len(parts[:len(batch)]))

    def pingFull(self, hosts=None, timeout=None):
        hosts = hosts or self.hosts
        out = []
        output("*** Ping: testing ping reachability\n")
        for node in hosts:
            output(f"{node.name} -> ")
            for dest in hosts:
                if node is dest:
                    continue
                r = node.cmd(f"LANG=C ping -c1 {dest.IP()}")
                res = self._parsePingFull(r)
                out.append((node, dest, res))
                output(f"{dest.name if res[1] else 'X'} ")
            output("\n")
        output("*** Results: \n")
        for src, dest, res in out:
            s, r, rttmin, rttavg, rttmax, rttdev = res
            output(f" {src}->{dest}: {s}/{r}, rtt min/avg/max/mdev {rttmin:0.3f}/"
                   f"{rttavg:0.3f}/{rttmax:0.3f}/{rttdev:0.3f} ms\n")
        return out

    def pingAll(self, timeout=None):
        return self.ping(timeout=timeout)

    def pingPair(self):
        return self.ping(self.hosts[:2])

    def pingAllFull(self):
        return self.pingFull()

    def pingPairFull(self):
        return self.pingFull(self.hosts[:2])

    @staticmethod
    def _iperfVal(out, default="0"):
        r = r"([\d\.]+ \w+/sec)"
        m = re.findall(r, out)
        return m[-1] if m else default

    def iperf(self, hosts=None, l4Type="TCP", udpBw="10M", fmt=None, seconds=5, port=5001):
        """iperf (v2) between two hosts; ``[server's, client's]`` rates."""
        hosts = hosts or [self.hosts[0], self.hosts[-1]]
        assert len(hosts) == 2
        client, server = hosts
        output(f"*** Iperf: testing {l4Type} bandwidth between {client} and {server} \n")
        # (no `killall iperf` as Mininet's: a node's shell sees the host's processes, and
        # other people's iperf are none of ours; the server started here ends with ^C below)
        iperfArgs = f"iperf -p {port} "
        bwArgs = ""
        if l4Type == "UDP":
            iperfArgs += "-u "
            bwArgs = f"-b {udpBw} "
        if fmt:
            iperfArgs += f"-f {fmt} "
        server.sendCmd(iperfArgs + "-s")
        if l4Type == "TCP":
            self._waitListening(server, port)
        cliout = client.cmd(iperfArgs + f"-t {seconds} -c {server.IP()} " + bwArgs)
        servout = ""
        count = 1      # (Mininet's 2 counts its listening probe's connection; ours is ss)
        end = time.time() + seconds + 10
        while len(re.findall(r"/sec", servout)) < count and time.time() < end:
            servout += server.monitor(timeoutms=5000)
        server.sendInt()
        servout += server.waitOutput()
        result = [self._iperfVal(servout), self._iperfVal(cliout)]
        if l4Type == "UDP":
            result.insert(0, udpBw)
        output(f"*** Results: {result}\n")
        return result

    def _waitListening(self, server, port):
        from subprocess import run
        for _ in range(100):
            r = run(self._argv(server.name) + ["ss", "-Hltn", f"sport = :{port}"],
                    capture_output=True, text=True)
            if r.stdout.strip():
                return
            time.sleep(0.1)

    def runCpuLimitTest(self, cpu, duration=5):
        """Busy loops in every host for ``duration`` s; each host's CPU use (percent of one
        core per second, as Mininet reports it)."""
        pct = cpu * 100
        info(f"*** Testing CPU {pct:.0f}% bandwidth limit\n")
        hosts = self.hosts
        for h in hosts:
            h.cmd("while true; do a=1; done &")
        pids = [h.cmd("echo $!").strip() for h in hosts]
        before = [self._cputime(h) for h in hosts]
        time.sleep(duration)
        after = [self._cputime(h) for h in hosts]
        for h in hosts:
            h.cmd("kill %while")
        # percent of the machine's CPU, as Mininet reports it
        ncpu = os.cpu_count() or 1
        cpu_fractions = [(b - a) / 1e6 / duration / ncpu * 100
                         for a, b in zip(before, after, strict=True)]
        output(f"*** Results: {cpu_fractions}\n")
        del pids
        return cpu_fractions

    def _cputime(self, h):
        """The node's CPU time so far, µs (its cgroup's)."""
        from wanlab.backends.emulate import cgroups
        dirs = cgroups.noted(self.exp.lab.store.folder(self.exp.name), h.name)
        return cgroups.usage(dirs).get("cpu_usec") or 0

    def interact(self):
        from mininet.cli import CLI
        self.start()
        CLI(self)
        self.stop()

    def randMac(self):
        import random
        return macColonHex(random.randint(1, 2 ** 48 - 1) & 0xfeffffffffff | 0x020000000000)

    def __repr__(self):
        return f"<Mininet {self.exp.name if self.exp else '(not built)'}>"


def _source():
    import sys

    from wanlab.mininet.refuse import _PKG
    from wanlab.model import ir
    f = sys._getframe(1)
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(_PKG + os.sep):
        f = f.f_back
    return ir.Source(f.f_code.co_filename, f.f_lineno) if f else ir.Source()


def _script_text():
    """The running script's text (its ``ovs-*`` commands make a network OpenFlow)."""
    import sys
    path = sys.argv[0] if sys.argv else ""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _ir_source():
    from wanlab.model import ir
    return ir.Source()


class MininetWithControlNet(Mininet):
    pass


class ImplicitNet(Mininet):
    """The network of a script's free-standing nodes and links (``Link(h0, s0)`` outside a
    ``Mininet``, as Mininet's scratchnet builds one): one wanlab experiment, built when the
    script first runs a command in one of its nodes. Nodes in their own namespace are hosts;
    nodes with ``inNamespace=False`` stand for Mininet's root namespace, which is the
    switches' node of an OpenFlow network (wanlab.mininet.openflow)."""

    free_standing = True
    linking = False     # a Link is being made: its interfaces' commands wait for the build

    @classmethod
    def get(cls):
        if Mininet.implicit is None:
            Mininet.implicit = cls(build=False)
        return Mininet.implicit

    def adopt(self, node):
        """Make a free-standing node part of this network."""
        if node.net is not None:
            return
        if self.exp is not None and node.inNamespace:
            raise refuse(f"{type(node).__name__}({node.name!r})", "a free-standing node made "
                         "after its network was built (by the first command run in one of "
                         "its nodes): wanlab builds the whole network at once")
        node.net = self
        self.nameToNode[node.name] = node
        if isinstance(node, Controller):
            self.controllers.append(node)
        elif isinstance(node, Switch):
            self.switches.append(node)
        elif not node.inNamespace:
            self.roots.append(node)
            if self._fabric is not None:
                self._root_shell(node)
        else:
            node._source = _source()
            self.hosts.append(node)

    def bring_up(self):
        """Build the network now (a first command in one of its nodes)."""
        if self.exp is None:
            info("*** Building the free-standing nodes' network\n")
            self.build()
            if self.exp is None:
                raise refuse("a free-standing node's command", "its network has no host to "
                             "build")


atexit.register(Mininet.stopAll)


def _bridge_id(switch, k):
    """A switch's bridge id for the spanning tree: its datapath id (Mininet's is hex),
    else its place among the switches."""
    try:
        return int(str(switch.dpid), 16)
    except (TypeError, ValueError):
        return k
