"""Mininet's CLI over a wanlab network: ``pingall``, ``iperf``, ``net``, ``nodes``,
``links``, ``dump``, ``NODE CMD`` (node names in the command become their IPs), ``sh``,
``link A B up|down``, ``exit``."""

import cmd
import subprocess
import sys

from mininet.log import error, output
from mininet.util import dumpNodeConnections


class CLI(cmd.Cmd):
    prompt = "mininet> "

    def __init__(self, mininet, stdin=sys.stdin, script=None, **kwargs):
        self.mn = mininet
        super().__init__(stdin=stdin)
        self.use_rawinput = stdin is sys.stdin
        if script:
            with open(script) as f:
                for line in f:
                    line = line.strip()
                    if line and not line.startswith("#"):
                        output("*** " + line + "\n")
                        self.onecmd(line)
            return
        output("*** Starting CLI:\n")
        while True:
            try:
                self.cmdloop()
                break
            except KeyboardInterrupt:
                output("\nInterrupt\n")

    def emptyline(self):
        pass

    def do_EOF(self, line):
        output("\n")
        return True

    def do_exit(self, _line):
        return True

    do_quit = do_exit

    def do_help(self, line):
        output("Commands: pingall pingallfull pingpair pingpairfull iperf iperfudp net "
               "nodes links ports dump intfs sh px py link noecho exit\n"
               "<node> <cmd>: run cmd in a node (node names become their IPs)\n")

    def do_nodes(self, _line):
        output("available nodes are: \n" + " ".join(sorted(self.mn.nameToNode)) + "\n")

    def do_net(self, _line):
        dumpNodeConnections(self.mn.controllers + self.mn.switches + self.mn.hosts)

    def do_links(self, _line):
        for lk in self.mn.links:
            output(str(lk), lk.status(), "\n")

    def do_ports(self, _line):
        for s in self.mn.switches:
            output(s.name + " " + " ".join(f"{i}:{s.ports[i]}" for i in s.intfList()) + "\n")

    def do_intfs(self, _line):
        for n in self.mn.values():
            output(f"{n.name}: {','.join(n.intfNames())}\n")

    def do_dump(self, _line):
        for n in self.mn.values():
            output(repr(n) + "\n")

    def do_pingall(self, line):
        self.mn.pingAll(*line.split())

    def do_pingpair(self, _line):
        self.mn.pingPair()

    def do_pingallfull(self, _line):
        self.mn.pingAllFull()

    def do_pingpairfull(self, _line):
        self.mn.pingPairFull()

    def do_iperf(self, line):
        args = line.split()
        if not args:
            self.mn.iperf()
        elif len(args) == 2:
            self.mn.iperf([self.mn[a] for a in args])
        else:
            error("invalid number of args: iperf src dst\n")

    def do_iperfudp(self, line):
        args = line.split()
        if not args:
            self.mn.iperf(l4Type="UDP")
        elif len(args) == 3:
            self.mn.iperf([self.mn[a] for a in args[1:]], l4Type="UDP", udpBw=args[0])
        else:
            error("invalid number of args: iperfudp bw src dst\n")

    def do_link(self, line):
        args = line.split()
        if len(args) != 3:
            error("invalid number of args: link end1 end2 [up down]\n")
        elif args[2] not in ("up", "down"):
            error("invalid type: link end1 end2 [up down]\n")
        else:
            self.mn.configLinkStatus(*args)

    def do_dpctl(self, line):
        """``dpctl CMD [ARGS]``: ``ovs-ofctl CMD SWITCH ARGS`` on every switch (an OpenFlow
        network's; a learning switch has no flow table, and says so)."""
        args = line.split()
        if not args:
            error("usage: dpctl command [arg1] [arg2] ...\n")
            return
        from wanlab.mininet.refuse import Unsupported
        for sw in self.mn.switches:
            output(f"*** {sw.name} {'-' * 72}\n")
            try:
                output(sw.dpctl(*args))
            except Unsupported as e:
                error(f"*** {e}\n")
                return

    def do_sh(self, line):
        subprocess.call(line, shell=True)

    def do_py(self, line):
        try:
            result = eval(line, globals(), {"net": self.mn, **self.mn.nameToNode})
            if result is not None:
                output(repr(result) + "\n")
        except Exception as e:
            output(str(e) + "\n")

    def do_px(self, line):
        try:
            exec(line, globals(), {"net": self.mn, **self.mn.nameToNode})
        except Exception as e:
            output(str(e) + "\n")

    def do_noecho(self, line):
        self.default(line)

    def default(self, line):
        first, args, line = self.parseline(line)
        if first in self.mn.nameToNode:
            if not args:
                error(f"*** Please enter a command for node: {first} <cmd>\n")
                return
            node = self.mn[first]
            rest = args.split(" ")
            # a host's name becomes its address (a switch's stays its name, as on Mininet,
            # whose switch interfaces have none: `s1 ovs-ofctl dump-flows s1`)
            rest = [self.mn[a].IP() if a in self.mn.nameToNode and self.mn[a] in self.mn.hosts
                    and self.mn[a].IP() else a for a in rest]
            node.sendCmd(" ".join(rest))
            try:
                while node.waiting:
                    data = node.monitor(timeoutms=500)
                    if data:
                        output(data)
            except KeyboardInterrupt:
                node.sendInt()
                node.waitOutput()
        else:
            error(f"*** Unknown command: {line}\n")
