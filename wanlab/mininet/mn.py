"""``wanlab mn``: Mininet's ``mn`` command over wanlab (its options; docs/mininet.md).

Imported only by :mod:`wanlab.mininet.main`, after wanlab's ``mininet`` package is first on
``sys.path``.
"""

from __future__ import annotations

import argparse
import runpy

TESTS = ("pingall", "pingpair", "iperf", "iperfudp", "none", "build", "pingallfull",
         "pingpairfull", "all")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="wanlab mn", description="Mininet's mn over wanlab: "
                                "build a topology, run a test or the mininet> prompt")
    p.add_argument("--topo", default="minimal", help="single|linear|tree|reversed|minimal"
                   "[,ARGS] or a name from --custom (default minimal)")
    p.add_argument("--link", default="default", help="default or tc[,bw=,delay=,jitter=,"
                   "loss=,max_queue_size=]")
    p.add_argument("--host", default="default", help="default/proc/rt or cfs[,cpu=]")
    p.add_argument("--switch", default="default", help="default/ovs/ovsk/ovsbr/user/lxbr: "
                   "the engine's learning switch")
    p.add_argument("--controller", default="default", help="default/ref/ovsc/none "
                   "(remote is not supported yet)")
    p.add_argument("--custom", action="append", default=[], help="a Python file defining "
                   "'topos' (and 'tests', 'hosts', 'links'...)")
    p.add_argument("--test", default="none", help="|".join(TESTS))
    p.add_argument("--mac", action="store_true", help="MACs 00:00:00:00:00:0N")
    p.add_argument("--arp", action="store_true", help="static ARP entries")
    p.add_argument("-i", "--ipbase", default="10.0.0.0/8")
    p.add_argument("-v", "--verbosity", default="info")
    p.add_argument("-c", "--clean", action="store_true", help="nothing to clean: wanlab "
                   "removes each network at its end")
    p.add_argument("-x", "--xterms", action="store_true")
    p.add_argument("--nat", action="store_true")
    p.add_argument("--pre")
    p.add_argument("--post")
    p.add_argument("--nolistenport", action="store_true")
    p.add_argument("--listenport", type=int)
    p.add_argument("--innamespace", action="store_true")
    p.add_argument("--pin", action="store_true")
    p.add_argument("--version", action="store_true")
    p.add_argument("args", nargs="*", help="a test (as --test) if given")
    return p


def main(argv: list[str]) -> int:
    from mininet.cli import CLI
    from mininet.link import Link, TCLink
    from mininet.log import output, setLogLevel
    from mininet.net import VERSION, Mininet
    from mininet.node import (
        Controller,
        CPULimitedHost,
        Host,
        LinuxBridge,
        OVSBridge,
        OVSSwitch,
        RemoteController,
        UserSwitch,
    )
    from mininet.topo import LinearTopo, MinimalTopo, SingleSwitchReversedTopo, SingleSwitchTopo
    from mininet.topolib import TorusTopo, TreeTopo
    from mininet.util import buildTopo, customClass, splitArgs

    from wanlab.mininet.refuse import Unsupported

    a = parser().parse_args(argv)
    if a.version:
        print(VERSION)
        return 0
    if a.clean:
        print("*** wanlab removes each network when it ends; nothing to clean")
        return 0
    setLogLevel(a.verbosity)
    topos = {"minimal": MinimalTopo, "linear": LinearTopo, "reversed":
             SingleSwitchReversedTopo, "single": SingleSwitchTopo, "tree": TreeTopo,
             "torus": TorusTopo}
    switches = {"default": OVSSwitch, "ovs": OVSSwitch, "ovsk": OVSSwitch, "ovsbr": OVSBridge,
                "user": UserSwitch, "lxbr": LinuxBridge}
    hosts = {"proc": Host, "default": Host, "rt": CPULimitedHost, "cfs": CPULimitedHost}
    controllers = {"default": Controller, "ref": Controller, "ovsc": Controller,
                   "none": None, "remote": RemoteController, "nox": Controller}
    links = {"default": Link, "tc": TCLink, "tcu": TCLink, "ovs": Link}
    tests: dict = {}
    for f in a.custom:
        env = runpy.run_path(f)
        topos.update(env.get("topos", {}))
        switches.update(env.get("switches", {}))
        hosts.update(env.get("hosts", {}))
        controllers.update(env.get("controllers", {}))
        links.update(env.get("links", {}))
        tests.update(env.get("tests", {}))
    if a.xterms:
        raise Unsupported("mn -x: wanlab opens no terminals; use 'wanlab shell EXP NODE'")
    if a.nat:
        raise Unsupported("mn --nat: a NAT to the host's network is wanlab's edge gateway "
                          "(docs/edge.md), not mapped from mn yet")
    cname = splitArgs(a.controller)[0]
    def made(option, value, f):
        try:
            return f()
        except Exception as e:  # a bad option value: one line naming it
            raise Unsupported(f"mn --{option} {value}: {e}") from None
    topo = made("topo", a.topo, lambda: buildTopo(topos, a.topo))
    host = made("host", a.host, lambda: customClass(hosts, a.host))
    link = made("link", a.link, lambda: customClass(links, a.link))
    switch = made("switch", a.switch, lambda: customClass(switches, a.switch))
    controller = made("controller", a.controller, lambda: customClass(
        controllers, a.controller)) if controllers.get(cname) else None
    test = a.args[0] if a.args else a.test
    net = Mininet(topo=topo, switch=switch, host=host, controller=controller, link=link,
                  ipBase=a.ipbase, autoSetMacs=a.mac, autoStaticArp=a.arp, build=False)
    import time
    t0 = time.time()
    net.start()
    try:
        if test in tests:
            tests[test](net)
        elif test == "none":
            CLI(net)
        elif test == "build":
            pass
        elif test in ("pingall", "all"):
            net.pingAll()
            if test == "all":
                net.iperf()
        elif test == "pingpair":
            net.pingPair()
        elif test == "pingallfull":
            net.pingAllFull()
        elif test == "pingpairfull":
            net.pingPairFull()
        elif test == "iperf":
            net.iperf()
        elif test == "iperfudp":
            net.iperf(l4Type="UDP")
        else:
            raise Unsupported(f"mn --test {test}: unknown test; tests are "
                              f"{', '.join(TESTS)}")
    finally:
        net.stop()
    output(f"completed in {time.time() - t0:.3f} seconds\n")
    return 0
