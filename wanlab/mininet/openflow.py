"""Real OpenFlow for a Mininet script that asks for it: its switches become Open vSwitch
bridges on the userspace (netdev) datapath, talking to the script's controllers.

When (:func:`reason`): a network is OpenFlow when the script constructs a
``RemoteController``, or a controller of a class of its own (a ``Controller`` subclass
defined outside wanlab's ``mininet`` package), or when the script's text names
``ovs-vsctl``, ``ovs-ofctl`` or ``dpctl`` (decided when the network is built, before any
command runs). Otherwise its switches stay the engine's learning switches (build.py).

How (:func:`build`, :class:`Fabric`): one extra emulated node holds all the network's
OpenFlow switches, as Mininet's switches share the host's namespace. Every link of a host to
a switch is an engine link from the host to that node (shaped as any link, its two
directions the two interfaces' ``TCIntf`` parameters); its end in that node carries the
switch interface's Mininet name (``s1-eth1``) and is a port of the netdev bridge named after
the switch, with ``ofport_request`` = Mininet's port number. A link between two switches is an
engine link from that node to itself, shaped the same way, its two ends the two switch
interfaces (as with learning switches, a loop is refused). One ``ovsdb-server`` and
``ovs-vswitchd`` run there (wanlab.backends.emulate.ovs). The node stands in for Mininet's
root namespace: a ``Controller`` is ``ovs-testcontroller`` listening on its loopback, and a
``RemoteController(ip, port)`` is reached from the host's namespace (where Mininet's
switches would connect from) through a relay that listens on the node's loopback, except
for a loopback address with the port of one of the network's own ``Controller`` s, which is
that controller.

A script's free-standing nodes and links (Mininet's low-level API: ``Node('s0',
inNamespace=False)``, ``Link(h0, s0)``) make a network of their own (``ImplicitNet``); its
root-namespace nodes are switches here without a bridge of wanlab's: their shells run in the
node, with Open vSwitch's tools (:data:`ROOT_RC`), and make their bridges themselves.
"""

from __future__ import annotations

import ctypes
import os
import re
import select
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Any

from wanlab.errors import SpecError
from wanlab.frontends.builder import ExperimentBuilder
from wanlab.mininet import build as mapping
from wanlab.model import ir

OVS_WORDS = re.compile(r"\b(ovs-vsctl|ovs-ofctl|dpctl)\b")
TESTCONTROLLER = "ovs-testcontroller"
# Mininet's names for the reference controller's program
REFERENCE = {"controller", "ovs-controller", "test-controller", "ovs-testcontroller"}


def reason(controllers: list[Any], script_text: str) -> str | None:
    """Why a network is OpenFlow (None: it is not). ``controllers``: the controller objects
    the script constructed; ``script_text``: the running script's source."""
    for c in controllers:
        cls = type(c)
        if cls.__name__ == "RemoteController" and cls.__module__ == "mininet.node":
            return f"RemoteController {c.name}"
        if cls.__module__ != "mininet" and not cls.__module__.startswith("mininet."):
            return f"controller class {cls.__name__}"
    m = OVS_WORDS.search(script_text or "")
    if m:
        return f"the script runs {m.group(1)}"
    return None


@dataclass
class Port:
    switch: str
    name: str            # Mininet's interface name (s1-eth1), the port's name in the node
    number: int          # Mininet's port number: ofport_request


@dataclass
class Layout:
    """Where the OpenFlow switches are: the node and each switch's ports (every one an
    engine link's end in the node)."""

    node: str
    ports: dict[str, list[Port]] = field(default_factory=dict)


def build(name: str, hosts: dict[str, dict[str, Any]], switches: list[str],
          links: list[mapping.MnLink], numbers: dict[tuple[str, str], int]
          ) -> tuple[mapping.Mapped, Layout]:
    """The experiment of an OpenFlow Mininet graph (pure). ``numbers``: each switch
    interface's Mininet port number, by ``(switch, interface name)``."""
    b = ExperimentBuilder(name, routing="manual")
    sw = set(switches)
    for h, info in hosts.items():
        src = info.get("source") or ir.Source()
        mapping.check_name(h, "host", src)
        if h in sw:
            raise SpecError(f"{h!r} is both a host and a switch", file=src.file, line=src.line)
        b.node(h, cpu=info.get("cpu_cores"), source=src)
    for s in switches:
        mapping.check_name(s, "switch")
    node = mapping._free(b, "openflow")
    b.node(node)
    lay = Layout(node, {s: [] for s in switches})
    parent = {s: s for s in switches}

    def root(s: str) -> str:
        while parent[s] != s:
            s = parent[s]
        return s
    ifcount: dict[str, int] = {h: 0 for h in hosts}
    where: dict[tuple[str, str], mapping.Where] = {}
    for lk in links:
        src = lk.source
        for e in (lk.a, lk.b):
            if e.node not in sw and e.node not in hosts:
                raise SpecError(f"link {lk.a.name}<->{lk.b.name}: {e.node!r} is no node of "
                                f"this network", file=src.file, line=src.line)
        a_sw, b_sw = lk.a.node in sw, lk.b.node in sw
        if a_sw and b_sw:
            # a cable between two bridges of the node: an engine link from the node to
            # itself, shaped as any, its ends the two switch interfaces
            ra, rb = root(lk.a.node), root(lk.b.node)
            if ra == rb:
                raise SpecError(f"link {lk.a.name}<->{lk.b.name} closes a loop of switches; "
                                f"wanlab refuses loops (no spanning tree is run for them): "
                                f"remove a link to make a tree", file=src.file, line=src.line)
            parent[ra] = rb
            _check_ifname(lk.a.name, src)
            _check_ifname(lk.b.name, src)
            lname = b.link(node, node, name=mapping._free(b, f"{lk.a.node}-{lk.b.node}"),
                           ifnames=(lk.a.name, lk.b.name), source=src)
            for e in (lk.a, lk.b):
                lay.ports[e.node].append(Port(e.node, e.name, numbers[(e.node, e.name)]))
            ends = ((lk.a, node, "ab", "ba"), (lk.b, node, "ba", "ab"))
        elif not a_sw and not b_sw:
            lname = b.link(lk.a.node, lk.b.node, name=mapping._free(
                b, f"{lk.a.node}-{lk.b.node}"), source=src)
            ends = ((lk.a, lk.a.node, "ab", "ba"), (lk.b, lk.b.node, "ba", "ab"))
        else:
            host, swi = (lk.b, lk.a) if a_sw else (lk.a, lk.b)
            _check_ifname(swi.name, src)
            lname = b.link(host.node, node, name=mapping._free(b, f"{host.node}-{swi.node}"),
                           ifnames=(None, swi.name), source=src)
            lay.ports[swi.node].append(Port(swi.node, swi.name, numbers[(swi.node, swi.name)]))
            ends = ((host, host.node, "ab", "ba"), (swi, node, "ba", "ab"))
        for e, owner, out, inn in ends:
            p = e.shaping.params()
            b.direction(lname, owner, bandwidth=p.bandwidth_bps, delay=p.delay_s, loss=p.loss,
                        queue=p.queue, ifname=e.name if owner == node else None)
            if owner == node:
                ifn = e.name
            else:
                ifn = f"eth{ifcount[owner]}"
                ifcount[owner] += 1
            where[(e.node, e.name)] = mapping.Where("link", lname, ifn, out, inn)
    return mapping.Mapped(b.build(), where, {}), lay


def _check_ifname(name: str, src: ir.Source) -> None:
    if not re.match(r"^[A-Za-z][A-Za-z0-9_.-]{0,14}$", name):
        raise SpecError(f"switch interface {name!r}: an OpenFlow port's name is at most 15 "
                        f"letters, digits, '-', '_' or '.'", file=src.file, line=src.line)


# -- run time --------------------------------------------------------------------------

CLONE_NEWNET = 0x40000000


def listen_in(netns_path: str) -> socket.socket:
    """A TCP socket listening on 127.0.0.1 (a free port) in the network namespace at
    ``netns_path`` (made by a thread that enters it and ends: the socket stays there)."""
    got: dict[str, Any] = {}

    def make() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(netns_path, os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns")
            finally:
                os.close(fd)
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(16)
            got["sock"] = s
        except Exception as e:     # handed to the caller
            got["error"] = e
    t = threading.Thread(target=make, daemon=True)
    t.start()
    t.join()
    if "error" in got:
        raise got["error"]
    return got["sock"]


class Relay:
    """Connections to a socket listening in the switches' node, carried to ``(ip, port)``
    from this process's (the host's) namespace. Threads of the script's process: they end
    with :meth:`close` or with it."""

    def __init__(self, netns_path: str, ip: str, port: int):
        self.ip, self.port = ip, port
        self.sock = listen_in(netns_path)
        self.local_port = self.sock.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._carry, args=(conn,), daemon=True).start()

    def _carry(self, conn: socket.socket) -> None:
        try:
            up = socket.create_connection((self.ip, self.port), timeout=5)
        except OSError:
            conn.close()       # the switch retries, as it would against a silent controller
            return
        up.settimeout(None)
        pair = {conn: up, up: conn}
        try:
            while not self.closed:
                poller = select.poll()          # not select: past 1024 descriptors
                by_fd = {s.fileno(): s for s in pair}
                for fd in by_fd:
                    poller.register(fd, select.POLLIN | select.POLLHUP)
                for s in (by_fd[fd] for fd, _ in poller.poll(1000)):
                    data = s.recv(65536)
                    if not data:
                        return
                    pair[s].sendall(data)
        except OSError:
            pass
        finally:
            conn.close()
            up.close()

    def close(self) -> None:
        self.closed = True
        self.sock.close()


class Fabric:
    """The OpenFlow switches of one running network: Open vSwitch in their node, their
    bridges and ports, the controllers wanlab runs for them."""

    def __init__(self, layout: Layout, folder: str, enter: list[str], netns_path: str):
        from wanlab.backends.emulate.ovs import Ovs
        self.layout = layout
        self.netns_path = netns_path
        self.ovs = Ovs(folder, enter)
        self.relays: dict[tuple[str, int], Relay] = {}     # by the controller's address
        self.listening: dict[int, Any] = {}     # port on the node's loopback -> controller

    def start(self) -> None:
        self.ovs.start()
        sh = []
        names = [p.name for ps in self.layout.ports.values() for p in ps]
        for n in names:
            # a port is the switch's only: no address of the node's own (wanlab's plan gave
            # the link ends some), no IPv6 of its own; and the userspace datapath forwards
            # frames as they come: no offloads
            sh.append(f"ip addr flush dev {n} && echo 1 > /proc/sys/net/ipv6/conf/{n}/"
                      f"disable_ipv6 && (ethtool -K {n} tx off tso off gso off >/dev/null 2>&1 "
                      f"|| true) && ip link set dev {n} up")
        if sh:
            r = self.ovs.run(["sh", "-ec", " && ".join(sh)])
            if r.returncode != 0:
                raise RuntimeError(f"OpenFlow ports: {r.stderr.strip()}")

    def add_switch(self, name: str, dpid: str, fail_mode: str, protocols: str | None,
                   stp: bool) -> None:
        args = ["--may-exist", "add-br", name, "--", "set", "bridge", name,
                "datapath_type=netdev", f"other-config:datapath-id={dpid}",
                f"fail_mode={'standalone' if fail_mode == 'standalone' else 'secure'}",
                "other-config:disable-in-band=true", f"stp_enable={'true' if stp else 'false'}"]
        if protocols:
            args.append(f"protocols={protocols}")
        for p in self.layout.ports.get(name, []):
            args += ["--", "add-port", name, p.name, "--", "set", "interface", p.name,
                     f"ofport_request={p.number}"]
        self.ovs.vsctl(*args)

    def shell(self, command: str) -> str:
        """A script's command for a switch or controller, run in the node (``sh``, output and
        errors together). One ending in ``&`` runs on in the background, its output in the
        run directory's ``background.log``; the node's cgroup ends it at teardown."""
        if command.rstrip().endswith("&"):
            with open(os.path.join(self.ovs.dir, "background.log"), "ab") as log:
                subprocess.Popen(self.ovs.enter + ["sh", "-c", command], env=self.ovs.env,
                                 stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
            return ""
        return self.ovs.run(["sh", "-c", command + " 2>&1"]).stdout

    def run_controller(self, c: Any) -> None:
        """A controller of the network in the node: ``ovs-testcontroller`` for Mininet's
        reference one, else the class's ``command`` and ``cargs``."""
        if c.port in self.listening:
            return
        command = getattr(c, "command", "controller") or "controller"
        if command.split()[0] in REFERENCE:
            # Mininet's reference controller speaks OpenFlow 1.0 (a table miss goes to the
            # controller, so a script may delete every flow: mobility.py does)
            argv = [TESTCONTROLLER, "-O", "OpenFlow10", f"ptcp:{c.port}:127.0.0.1"]
        else:
            cargs = getattr(c, "cargs", "") or ""
            argv = ["sh", "-c", f"exec {command} {cargs % c.port if '%' in cargs else cargs}"]
        c.entry = self.ovs.spawn(f"controller {c.name}", argv, log=f"{c.name}.log")
        self.listening[c.port] = c

    def target(self, c: Any) -> str:
        """The address a switch in the node connects to for controller ``c``."""
        remote = any(k.__name__ == "RemoteController" for k in type(c).__mro__)
        if not remote or (c.ip in ("127.0.0.1", "localhost") and c.port in self.listening):
            return f"tcp:127.0.0.1:{c.port}"
        relay = self.relays.get((c.ip, c.port))
        if relay is None:
            relay = self.relays[(c.ip, c.port)] = Relay(self.netns_path, c.ip, c.port)
        return f"tcp:127.0.0.1:{relay.local_port}"

    def connect(self, switch: str, targets: list[str]) -> None:
        if not targets:
            self.ovs.vsctl("del-controller", switch)
            return
        self.ovs.vsctl("set-controller", switch, *targets)
        # out-of-band: in-band control would look for the controller through the bridge
        uuids = self.ovs.vsctl("get", "bridge", switch, "controller").strip("[]\n ").split(",")
        for u in [u.strip() for u in uuids if u.strip()]:
            self.ovs.vsctl("set", "controller", u, "connection-mode=out-of-band")

    def connected(self, switch: str) -> bool:
        r = self.ovs.run(["ovs-vsctl", "--timeout=5", "--", "get", "bridge", switch,
                          "controller"])
        uuids = [u.strip() for u in r.stdout.strip("[]\n ").split(",") if u.strip()]
        if not uuids:
            return True
        for u in uuids:
            r = self.ovs.run(["ovs-vsctl", "--timeout=5", "get", "controller", u,
                              "is_connected"])
            if r.stdout.strip() == "true":
                return True
        return False

    def stop(self) -> None:
        for r in self.relays.values():
            r.close()
        self.ovs.stop()


# -- the root-namespace nodes' shell ------------------------------------------------------

# Sourced by the shell of a free-standing root-namespace node (Mininet's scratchnet runs
# its switch and controller by hand there). Mininet's reference ``controller`` program is
# not in Debian: it is ovs-testcontroller speaking OpenFlow 1.0, as for a ``Controller``,
# with the old program's port for a bare ``ptcp:`` (6633). A bridge made with ``add-br``
# gets the userspace datapath (this kernel has no openvswitch module) and out-of-band
# control; ``exec`` keeps each job's pid the program's, so ``kill %controller`` ends it.
ROOT_RC = r"""
if ! command -v controller >/dev/null; then
  controller() {
    local a=() x
    for x in "$@"; do [ "$x" = ptcp: ] && x=ptcp:6633; a+=("$x"); done
    exec ovs-testcontroller -O OpenFlow10 "${a[@]}"
  }
fi
ovs-vsctl() {
  local a=("$@") extra=() br= ctl= i
  for ((i = 0; i < ${#a[@]}; i++)); do
    case "${a[i]}" in
      add-br) br=${a[i+1]}; extra+=(-- set bridge "$br" datapath_type=netdev
                                    other-config:disable-in-band=true) ;;
      set-controller) ctl=${a[i+1]} ;;
    esac
  done
  command ovs-vsctl "${a[@]}" "${extra[@]}" || return
  if [ -n "$ctl" ]; then
    for i in $(command ovs-vsctl get bridge "$ctl" controller | tr -d '[],'); do
      command ovs-vsctl set controller "$i" connection-mode=out-of-band max_backoff=1000
    done
  fi
}
"""


def write_rc(folder: str) -> str:
    """The root-namespace shells' definitions (:data:`ROOT_RC`), written in ``folder``."""
    path = os.path.join(folder, "root.rc")
    with open(path, "w") as f:
        f.write(ROOT_RC)
    return path
