"""Mininet's nodes over wanlab nodes: a host's shell runs in its wanlab node (its network
namespace and cgroup); switches are the engine's learning switches, or Open vSwitch bridges
in a network that asks for OpenFlow (wanlab.mininet.openflow; docs/mininet.md)."""

import os
import re
import shlex
import subprocess
import time

from mininet.log import debug, error, info, warn
from wanlab.mininet.refuse import refuse


class Node:
    """A node with a persistent shell (once its network has started)."""

    portBase = 0
    outToNode = {}
    inToNode = {}

    def __init__(self, name, inNamespace=True, **params):
        self.name = params.get("name", name)
        self.inNamespace = inNamespace
        self.params = params
        self.intfs = {}
        self.ports = {}
        self.nameToIntf = {}
        self.net = None
        self.shell = None
        self.stdin = self.stdout = None
        self.pid = None
        self.lastPid = None
        self.lastCmd = None
        self.waiting = False
        self.readbuf = ""
        self.early = []
        self.execed = False

    # -- the shell ----------------------------------------------------------------------
    def _started(self, shell):
        self.shell = shell
        self.pid = shell.pid
        self.stdout = self.stdin = os.fdopen(os.dup(shell.fileno()), "rb", buffering=0)
        Node.outToNode[self.stdout.fileno()] = self
        Node.inToNode[self.stdout.fileno()] = self
        self.shell.send("set +m; unset HISTFILE")
        self.shell.read_until_prompt(30)

    def _free_standing(self):
        """A node outside any ``Mininet`` once the script made free-standing links: it
        joins their network (mininet.net.ImplicitNet), which is built now. True when the
        node then has its shell."""
        import sys
        mod = sys.modules.get("mininet.net")
        imp = mod.Mininet.implicit if mod else None
        if imp is None or imp.linking or (self.net is not None and self.net is not imp):
            return False
        imp.adopt(self)
        imp.bring_up()
        return self.shell is not None

    def _need_shell(self, what):
        if self.shell is None and self._free_standing():
            return
        if self.shell is None:
            raise refuse(f"{self.name}.{what}", "this node is not part of a started wanlab "
                         "network (wanlab builds nodes when their Mininet is built)")

    def write(self, data):
        self._need_shell("write")
        self.shell.write(data)

    def read(self, size=1024):
        self._need_shell("read")
        out, done = self.shell.read_some(None)
        if done:
            self.waiting = False
        return out

    def readline(self):
        while "\n" not in self.readbuf:
            self.readbuf += self.read()
        line, self.readbuf = self.readbuf.split("\n", 1)
        return line

    def sendCmd(self, *args, **kwargs):
        """Send a command; read its output with ``waitOutput`` or ``monitor``."""
        cmd = " ".join(str(a) for a in args) if len(args) > 1 or not isinstance(
            args[0], list) else " ".join(str(a) for a in args[0])
        _refuse_reference_switch(cmd)
        if self.shell is None and not self._free_standing():
            # before the network exists (a Host subclass's __init__): run at its start
            self.early.append(cmd)
            return
        assert not self.waiting, f"{self.name}: sendCmd while a command is running"
        if cmd.rstrip().endswith("&"):
            cmd = cmd.rstrip() + " printf '\\001%d\\n' $! "
        self.lastCmd = cmd
        self.shell.send(cmd)
        self.waiting = True

    def sendInt(self, intr="\x03"):
        self.write(intr)

    def monitor(self, timeoutms=None, findPid=True):
        """What the running command printed so far (waits up to ``timeoutms``)."""
        self._need_shell("monitor")
        out, done = self.shell.read_some(None if timeoutms is None else timeoutms / 1000.0)
        if done:
            self.waiting = False
        if findPid and "\x01" in out:
            m = re.search(r"\x01(\d+)\n", out)
            if m:
                self.lastPid = int(m.group(1))
                out = out.replace(m.group(0), "")
        return out

    def waitReadable(self, timeoutms=None):
        from wanlab.mininet.shell import readable
        fd = self.shell.fileno()
        return [fd] if readable(fd, None if timeoutms is None else timeoutms / 1000.0) \
            else []

    def waitOutput(self, verbose=False, findPid=True):
        out = []
        while self.waiting:
            data = self.monitor(findPid=findPid)
            out.append(data)
            if verbose:
                info(data)
        return "".join(out)

    def cmd(self, *args, **kwargs):
        """Run a command in the node's shell; its output."""
        verbose = kwargs.get("verbose", False)
        self.sendCmd(*args, **kwargs)
        if self.shell is None:      # kept for the network's start
            return ""
        return self.waitOutput(verbose)

    def cmdPrint(self, *args):
        return self.cmd(*args, verbose=True)

    def popen(self, *args, **kwargs):
        """A ``subprocess.Popen`` of a command in the node (its output on pipes)."""
        self._need_shell("popen")
        if len(args) == 1 and isinstance(args[0], list):
            argv = [str(a) for a in args[0]]
        elif len(args) == 1:
            argv = ["sh", "-c", str(args[0])] if kwargs.pop("shell", False) else \
                shlex.split(str(args[0]))
        else:
            argv = [str(a) for a in args]
        kwargs.pop("mncmd", None)
        kw = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        kw.update(kwargs)
        if self in self.net.roots:      # a root-namespace node: the switches' node
            f = self.net._fabric
            return subprocess.Popen(f.ovs.enter + argv, env=f.ovs.env, **kw)
        return subprocess.Popen(self.net._argv(self.name) + argv, **kw)

    def pexec(self, *args, **kwargs):
        """Run a command in the node; ``(out, err, exitcode)``."""
        p = self.popen(*args, **kwargs)
        out, err = p.communicate()
        from mininet.util import decode
        return decode(out), decode(err), p.returncode

    # -- interfaces ---------------------------------------------------------------------
    def newPort(self):
        return max(self.ports.values(), default=self.portBase - 1) + 1

    def addIntf(self, intf, port=None, moveIntfFn=None):
        if port is None:
            port = self.newPort()
        self.intfs[port] = intf
        self.ports[intf] = port
        self.nameToIntf[intf.name] = intf

    def delIntf(self, intf):
        port = self.ports.pop(intf, None)
        self.intfs.pop(port, None)
        self.nameToIntf.pop(intf.name, None)

    def defaultIntf(self):
        ports = self.intfs.keys()
        return self.intfs[min(ports)] if ports else None

    def intf(self, intf=None):
        if not intf:
            return self.defaultIntf()
        if isinstance(intf, str):
            return self.nameToIntf.get(intf)
        return intf

    def intfList(self):
        return [self.intfs[p] for p in sorted(self.intfs)]

    def intfNames(self):
        return [str(i) for i in self.intfList()]

    def connectionsTo(self, node):
        out = []
        for intf in self.intfList():
            link = intf.link
            if link:
                a, b = link.intf1, link.intf2
                if a.node is self and b.node is node:
                    out.append((a, b))
                elif b.node is self and a.node is node:
                    out.append((b, a))
        return out

    def deleteIntfs(self, checkName=True):
        for i in list(self.intfList()):
            self.delIntf(i)

    # -- addresses ----------------------------------------------------------------------
    def setMAC(self, mac, intf=None):
        i = self.intf(intf)
        return i.setMAC(mac) if i else None

    def setIP(self, ip, prefixLen=8, intf=None, **kwargs):
        i = self.intf(intf)
        if i is None:
            return None
        if "/" not in str(ip):
            ip = f"{ip}/{prefixLen}"
        return i.setIP(ip)

    def IP(self, intf=None):
        i = self.intf(intf)
        return i.IP() if i else None

    def MAC(self, intf=None):
        i = self.intf(intf)
        return i.MAC() if i else None

    def intfIsUp(self, intf=None):
        i = self.intf(intf)
        return i.isUp() if i else False

    def setARP(self, ip, mac):
        return self.cmd(f"ip neigh replace {ip} lladdr {mac} dev {self.defaultIntf()}")

    def setHostRoute(self, ip, intf):
        return self.cmd(f"ip route replace {ip} dev {intf}")

    def setDefaultRoute(self, intf=None):
        if isinstance(intf, str) and " " in intf:
            params = intf
        else:
            params = f"dev {self.intf(intf) or self.defaultIntf()}"
        self.cmd("ip route del default 2>/dev/null")
        return self.cmd(f"ip route add default {params}")

    def setParam(self, results, method, **param):
        name, value = list(param.items())[0]
        if value is None:
            return None
        f = getattr(self, method)
        r = f(*value) if isinstance(value, (list, tuple)) else \
            f(**value) if isinstance(value, dict) else f(value)
        results[name] = r
        return r

    def config(self, mac=None, ip=None, defaultRoute=None, lo="up", **_params):
        """Mininet's per-node configuration, run once the node's interfaces exist."""
        r = {}
        self.setParam(r, "setMAC", mac=mac)
        self.setParam(r, "setIP", ip=ip)
        self.setParam(r, "setDefaultRoute", defaultRoute=defaultRoute)
        self.cmd("ip link set dev lo " + lo)
        return r

    def configDefault(self, **moreParams):
        self.params.update(moreParams)
        self.config(**self.params)

    def linkTo(self, node, link=None):
        from mininet.link import Link
        return (link or Link)(self, node)

    # -- life cycle ---------------------------------------------------------------------
    def terminate(self):
        if self.shell is not None:
            Node.outToNode.pop(self.stdout.fileno(), None)
            Node.inToNode.pop(self.stdout.fileno(), None)
            self.shell.close()
            try:
                self.stdout.close()
            except OSError:
                pass
            self.shell = None

    def stop(self, deleteIntfs=False):
        self.terminate()

    def cleanup(self):
        pass

    def checkSetup(self):
        pass

    @classmethod
    def setup(cls):
        pass

    def __repr__(self):
        return f"<{self.__class__.__name__} {self.name}: " + ",".join(
            f"{i.name}:{i.IP()}" for i in self.intfList()) + f" pid={self.pid}> "

    def __str__(self):
        return self.name


class Host(Node):
    """A host (a wanlab node)."""


class CPULimitedHost(Host):
    """A host with a CPU time limit: ``cpu`` is its share of the machine's CPU (0.5: half of
    all cores), as in Mininet; wanlab's node cgroup (cpu.max) enforces it."""

    def __init__(self, name, sched="cfs", **params):
        super().__init__(name, **params)
        self.sched = sched
        if sched == "rt":
            warn(f"*** {name}: sched='rt' (real-time group scheduling) is not used by wanlab: "
                 "its CPU limit is cfs bandwidth (cpu.max, cpu.cfs_quota_us)\n")
        self.cgroup = f"cpu,cpuacct,cpuset:/{name}"

    def cpu_cores(self):
        cpu = self.params.get("cpu")
        if cpu is None or cpu < 0:
            return None
        return max(0.01, float(cpu) * (os.cpu_count() or 1))

    def setCPUFrac(self, f, sched=None):
        if self.net is not None and self.net.exp is not None:
            warn("*** setCPUFrac after the network is built is not applied by wanlab\n")
        self.params["cpu"] = f

    def setCPUs(self, cores=None, mems=0):
        pass

    def config(self, cpu=-1, cores=None, **params):
        r = Host.config(self, **params)
        return r


REFERENCE_SWITCH = re.compile(r"(^|[;&|(]\s*)(ofdatapath|ofprotocol)\b")


def _refuse_reference_switch(cmd):
    m = REFERENCE_SWITCH.search(cmd)
    if m:
        raise refuse(f"cmd({m.group(2)} ...)", "Mininet's reference user-space switch "
                     "(ofdatapath, ofprotocol) is not packaged in Debian; wanlab's OpenFlow "
                     "switches are Open vSwitch (OVSSwitch, ovs-vsctl: docs/mininet.md)")


ASK_OPENFLOW = ("; a script gets Open vSwitch and OpenFlow with a RemoteController, a controller "
                "class of its own, or ovs-vsctl/ovs-ofctl/dpctl in its text (docs/mininet.md)")


class Switch(Node):
    """A switch: in the engine (an engine learning switch), not a process."""

    portBase = 1
    dpidLen = 16

    def __init__(self, name, dpid=None, opts="", listenPort=None, **params):
        super().__init__(name, inNamespace=False, **params)
        self.dpid = dpid or f"{int(re.sub(r'[^0-9]', '', name) or 0):016x}"
        self.opts = opts
        self.listenPort = listenPort

    def defaultDpid(self, dpid=None):
        return self.dpid

    def _fabric(self):
        return getattr(self.net, "_fabric", None)

    def cmd(self, *args, **kwargs):
        c = " ".join(str(a) for a in args)
        if self._fabric() is not None:
            # an OpenFlow switch: in the switches' node, with its Open vSwitch
            return self._fabric().shell(c)
        if re.match(r"\s*(ovs-|dpctl|ovs_)", c):
            raise refuse(f"{self.name}.cmd({c.split()[0]} ...)",
                         "this network's switches are the engine's learning switches, not "
                         "Open vSwitch" + ASK_OPENFLOW)
        # a switch is no process: its commands run on the host, as Mininet's root-namespace
        # switches' do
        r = subprocess.run(["sh", "-c", c], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        return r.stdout

    def sendCmd(self, *args, **kwargs):
        self._last = self.cmd(*args)
        self.waiting = True

    def waitOutput(self, verbose=False, findPid=True):
        self.waiting = False
        return getattr(self, "_last", "")

    def monitor(self, timeoutms=None, findPid=True):
        return self.waitOutput()

    def popen(self, *args, **kwargs):
        argv = args[0] if len(args) == 1 and isinstance(args[0], list) else \
            shlex.split(args[0]) if len(args) == 1 else [str(a) for a in args]
        kw = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        kw.update({k: v for k, v in kwargs.items() if k != "mncmd"})
        f = self._fabric()
        if f is not None:
            return subprocess.Popen(f.ovs.enter + list(argv), env=f.ovs.env, **kw)
        return subprocess.Popen(argv, **kw)

    def start(self, controllers):
        f = self._fabric()
        if f is not None:
            for c in controllers or []:
                if not isinstance(c, RemoteController):
                    f.run_controller(c)
            f.connect(self.name, [f.target(c) for c in controllers or []])
            return
        for c in controllers or []:
            if isinstance(c, RemoteController):
                raise refuse(f"{self.name}.start([{c.name}]) with RemoteController",
                             "a RemoteController made after the network was built; wanlab's "
                             "switches "
                             "are learning switches (as under Mininet's default controller)")

    def stop(self, deleteIntfs=True):
        pass

    def connected(self):
        f = self._fabric()
        return f.connected(self.name) if f is not None else True

    def attach(self, intf):
        if self._fabric() is not None:
            self.cmd(f"ovs-vsctl add-port {self.name} {intf} -- set Interface {intf} "
                     f"ofport_request={self.ports[intf]}")
            return
        raise refuse(f"{self.name}.attach({intf})", "moving a link to another switch port at "
                     "run time is not supported by wanlab's learning switches (an OpenFlow "
                     "network's are Open vSwitch: docs/mininet.md)")

    def detach(self, intf):
        if self._fabric() is not None:
            self.cmd(f"ovs-vsctl del-port {self.name} {intf}")
            return
        self.attach(intf)

    def dpctl(self, *args):
        if self._fabric() is not None:
            return self.cmd("ovs-ofctl", args[0], self.name, *args[1:])
        raise refuse(f"{self.name}.dpctl", "this network's switches are the engine's learning "
                     "switches, with no flow table" + ASK_OPENFLOW)

    def setIP(self, *a, **k):
        return None

    def IP(self, intf=None):
        return "127.0.0.1"

    def MAC(self, intf=None):
        return None

    def config(self, **params):
        return {}

    def terminate(self):
        pass

    def __repr__(self):
        return f"<{self.__class__.__name__} {self.name}: " + ",".join(
            i.name for i in self.intfList()) + " pid=None> "


class OVSSwitch(Switch):
    """Asked for Open vSwitch: with Mininet's default controller it behaves as a learning
    switch, which is what wanlab gives it. In a network that asks for OpenFlow
    (wanlab.mininet.openflow) it is an Open vSwitch bridge, userspace datapath."""

    def __init__(self, name, failMode="secure", datapath="kernel", inband=False,
                 protocols=None, reconnectms=1000, stp=False, batch=False, **params):
        super().__init__(name, **params)
        self.failMode, self.datapath, self.stp = failMode, datapath, stp
        self.protocols = protocols

    @classmethod
    def batchStartup(cls, switches, run=None):
        return switches

    @classmethod
    def batchShutdown(cls, switches, run=None):
        return switches

    def isOldOVS(self):
        return False


OVSKernelSwitch = OVSSwitch
OVSLegacyKernelSwitch = OVSSwitch


class OVSBridge(OVSSwitch):
    pass


class UserSwitch(Switch):
    pass


class IVSSwitch(Switch):
    pass


class LinuxBridge(Switch):
    """Mininet's Linux bridge; ``stp=True`` makes its network's loops allowed (a spanning
    tree, computed when the network is built)."""

    def __init__(self, name, stp=False, prio=None, **params):
        super().__init__(name, **params)
        self.stp, self.prio = stp, prio


class Controller(Node):
    """Mininet's reference controller makes switches learning switches: in wanlab that is
    the engine's switch itself, so a Controller runs nothing, except in an OpenFlow network
    (``ovs-testcontroller``, or the class's own command, in the switches' node)."""

    def __init__(self, name, inNamespace=False, command="controller", cargs="-v ptcp:%d",
                 cdir=None, ip="127.0.0.1", port=6653, protocol="tcp", **params):
        super().__init__(name, inNamespace=inNamespace, **params)
        self.ip, self.port, self.protocol = ip, port, protocol
        self.command, self.cargs = command, cargs
        Controller.made.append(self)

    made = []      # every controller the script constructed (wanlab.mininet.openflow.reason)

    def _fabric(self):
        return getattr(self.net, "_fabric", None)

    def start(self):
        f = self._fabric()
        if f is not None and not isinstance(self, RemoteController):
            f.run_controller(self)

    def stop(self, *args, **kwargs):
        pass

    def checkListening(self):
        pass

    def IP(self, intf=None):
        return self.ip

    def isAvailable(self):
        return True

    def cmd(self, *args, **kwargs):
        f = self._fabric()
        if f is None:
            return ""
        # a controller of OpenFlow switches runs in their node (Mininet's root namespace)
        return f.shell(" ".join(str(a) for a in args))

    def __repr__(self):
        return f"<{self.__class__.__name__} {self.name}: {self.ip}:{self.port} pid=None> "


class OVSController(Controller):
    pass


class NOX(Controller):
    pass


class Ryu(Controller):
    pass


class RemoteController(Controller):
    """A controller the switches would talk OpenFlow to: refused when a switch uses it."""

    def __init__(self, name, ip="127.0.0.1", port=None, **kwargs):
        super().__init__(name, ip=ip, port=port or 6653, **kwargs)


def DefaultController(name, **kwargs):
    return Controller(name, **kwargs)


NullController = Controller

__all__ = ["Node", "Host", "CPULimitedHost", "Switch", "OVSSwitch", "OVSKernelSwitch",
           "UserSwitch", "OVSBridge", "Controller", "RemoteController", "DefaultController",
           "debug", "error", "time"]
