"""Mininet's utilities that scripts use (``quietRun``, ``irange``, ``custom``, ``pmonitor``...)."""

import os
import re
import select
import subprocess
import time
from functools import partial

from mininet.log import output


def decode(s):
    return s.decode(errors="replace") if isinstance(s, bytes) else s


def encode(s):
    return s.encode() if isinstance(s, str) else s


def run(cmd):
    """Run ``cmd`` (a string is split on spaces) on the host; its output."""
    return subprocess.run(cmd.split() if isinstance(cmd, str) else cmd,
                          capture_output=True, text=True).stdout


OVS_TOOLS = ("ovs-vsctl", "ovs-ofctl", "ovs-appctl", "ovs-dpctl")


def _fabric_of(cmd):
    """The Open vSwitch of the one running OpenFlow network, when ``cmd`` is one of its
    tools: on the host, Mininet's scripts see their switches with them."""
    import sys
    words = cmd.split() if isinstance(cmd, str) else list(cmd)
    if not words or os.path.basename(str(words[0])) not in OVS_TOOLS:
        return None
    mod = sys.modules.get("mininet.net")
    fabrics = [n._fabric for n in (mod.Mininet.live if mod else []) if n._fabric is not None]
    return fabrics[0] if len(fabrics) == 1 else None


def _host(cmd, shell, stderr):
    fabric = _fabric_of(cmd)
    if fabric is not None:
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else [str(c) for c in cmd]
        return subprocess.run(fabric.ovs.enter + argv, env=fabric.ovs.env,
                              stdout=subprocess.PIPE, stderr=stderr, text=True)
    if isinstance(cmd, str) and not shell:
        cmd = cmd.split()
    return subprocess.run(cmd, shell=shell, stdout=subprocess.PIPE, stderr=stderr, text=True)


def quietRun(cmd, **kwargs):
    """Run ``cmd`` on the host (shell if given a string with shell metacharacters); its
    standard output and error together."""
    shell = isinstance(cmd, str) and bool(re.search(r"[|&;<>$`*]", cmd))
    r = _host(cmd, shell or kwargs.get("shell", False), subprocess.STDOUT)
    return r.stdout


def errRun(*cmd, **kwargs):
    c = cmd[0] if len(cmd) == 1 else list(cmd)
    r = subprocess.run(c if not isinstance(c, str) else c.split(), capture_output=True,
                       text=True)
    return r.stdout, r.stderr, r.returncode


def errFail(*cmd, **kwargs):
    out, err, ret = errRun(*cmd, **kwargs)
    if ret:
        raise Exception(f"errFail: {cmd} failed with return code {ret}: {err}")
    return out, err, ret


def checkRun(cmd):
    return subprocess.check_output(cmd.split() if isinstance(cmd, str) else cmd, text=True)


def irange(start, end):
    """Inclusive range."""
    return range(start, end + 1)


def custom(cls, **params):
    """``cls`` with ``params`` as defaults (keyword arguments of the call win)."""
    def made(*args, **kwargs):
        return cls(*args, **{**params, **kwargs})
    made.__name__ = getattr(cls, "__name__", "custom")
    made.cls, made.params = cls, params
    return made


def specialClass(cls, prepend=None, append=None, defaults=None, override=None):
    def made(*args, **kwargs):
        a = list(prepend or []) + list(args) + list(append or [])
        kw = {**(defaults or {}), **kwargs, **(override or {})}
        return cls(*a, **kw)
    made.cls = cls
    return made


def splitArgs(argstr):
    """``'tree,depth=2'`` -> ``('tree', [], {'depth': 2})``."""
    parts = argstr.split(",")
    fn, args, kwargs = parts[0], [], {}
    for p in parts[1:]:
        if "=" in p:
            k, v = p.split("=", 1)
            kwargs[k] = makeNumeric(v)
        else:
            args.append(makeNumeric(p))
    return fn, args, kwargs


def makeNumeric(s):
    for t in (int, float):
        try:
            return t(s)
        except ValueError:
            pass
    return s


def buildTopo(topos, topoStr):
    name, args, kwargs = splitArgs(topoStr)
    if name not in topos:
        raise Exception(f"Invalid topo name {name}")
    return topos[name](*args, **kwargs)


def customClass(classes, argStr):
    name, args, kwargs = splitArgs(argStr)
    cls = classes.get(name)
    if not cls:
        raise Exception(f"error: {name} is unknown - please specify one of {list(classes)}")
    if not args and not kwargs:
        return cls
    return specialClass(cls, append=args, defaults=kwargs)


def ipNum(w, x, y, z):
    return (w << 24) | (x << 16) | (y << 8) | z


def ipStr(ip):
    return ".".join(str((ip >> s) & 0xFF) for s in (24, 16, 8, 0))


def ipParse(ip):
    return ipNum(*[int(x) for x in ip.split(".")])


def netParse(ipstr):
    prefixLen = 0
    if "/" in ipstr:
        ipstr, pf = ipstr.split("/")
        prefixLen = int(pf)
    return ipParse(ipstr), prefixLen


def ipAdd(i, prefixLen=8, ipBaseNum=0x0a000000):
    imax = 0xFFFFFFFF >> prefixLen
    if i > imax:
        raise Exception("Not enough IP addresses in the subnet")
    mask = 0xFFFFFFFF ^ imax
    return ipStr((ipBaseNum & mask) + i)


def macColonHex(mac):
    return ":".join(f"{(mac >> s) & 0xFF:02x}" for s in range(40, -1, -8))


def ensureRoot():
    if os.getuid() != 0:
        raise SystemExit("*** Mininet must run as root.")


def moveIntf(*a, **k):
    from wanlab.mininet.refuse import refuse
    raise refuse("moveIntf", "moving interfaces between nodes is not supported by wanlab")


def dumpNodeConnections(nodes):
    """Print each node's interfaces and what they connect to."""
    for node in nodes:
        output(node.name)
        for intf in node.intfList():
            output(" ")
            if intf.link:
                i1, i2 = intf.link.intf1, intf.link.intf2
                output(f"{intf}:{i2 if intf is i1 else i1}")
            else:
                output(f"{intf}: ")
        output("\n")


def dumpNetConnections(net):
    dumpNodeConnections(net.controllers + net.switches + net.hosts)


def dumpPorts(switches):
    for s in switches:
        output(f"{s.name} ")
        for intf in s.intfList():
            output(f"{intf}:{s.ports[intf]} ")
        output("\n")


def waitListening(client=None, server="127.0.0.1", port=80, timeout=None):
    """Wait until ``server`` (a node or an address) accepts TCP connections on ``port``,
    connecting from ``client`` (a node) as Mininet's telnet probe does: the server sees one
    short connection."""
    end = None if timeout is None else time.time() + timeout
    ip = server.IP() if hasattr(server, "IP") else str(server)
    # a few bytes, so that a server which reports each connection (iperf -s) reports this
    # one, as it did Mininet's probe
    probe = (f"bash -c 'exec 3<>/dev/tcp/{ip}/{port} && printf %080d 0 >&3' 2>/dev/null "
             f"&& echo Connected")
    while True:
        out = client.cmd(probe) if client is not None else \
            subprocess.run(["bash", "-c", probe], capture_output=True, text=True).stdout
        if "Connected" in out:
            return True
        if end is not None and time.time() > end:
            output(f"could not connect to {server} on port {port}\n")
            return False
        time.sleep(0.2)


def pmonitor(popens, timeoutms=500, readline=True, readmax=1024):
    """Lines from several ``popen``s as they come: ``(host, line)``; ``(None, '')`` after
    ``timeoutms`` without output; ends when every one has closed its output."""
    fdToHost = {}
    poller = select.poll()
    files = {}
    for host, p in popens.items():
        fd = p.stdout.fileno()
        fdToHost[fd] = host
        files[fd] = p.stdout
        poller.register(fd, select.POLLIN)
        if not readline:
            os.set_blocking(fd, False)
    while popens and fdToHost:
        fds = poller.poll(timeoutms)
        if not fds:
            yield None, ""
            continue
        for fd, event in fds:
            host = fdToHost.get(fd)
            if host is None:
                continue
            f = files[fd]
            # at the end (POLLHUP) lines may still wait in the file's buffer
            line = decode(f.readline() if readline else f.read(readmax)) \
                if event & (select.POLLIN | select.POLLHUP) else ""
            if line:
                yield host, line
                continue
            poller.unregister(fd)
            del fdToHost[fd]


def fixLimits():
    pass


def numCores():
    return os.cpu_count() or 1


def rangeParse(s):
    return [int(x) for x in s.split(",")]


__all__ = ["partial", "quietRun", "irange", "custom", "dumpNodeConnections", "pmonitor",
           "decode", "waitListening"]
