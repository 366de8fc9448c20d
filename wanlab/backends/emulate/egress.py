"""The edge of an experiment: its way out (egress, masquerade) and in (port forwards).

The front ends give an experiment with egress or forwards a gateway node on an edge LAN
(:mod:`wanlab.frontends.edge`); the ordinary stages make its namespace, its TAP and the
LAN, shaped by the engine. This module gives the gateway its uplink and its rules
(docs/edge.md):

* **Uplink.** Either a host interface the user named, moved into the gateway's
  namespace with the given address and next hop (recorded as kind ``iface``, so it goes
  back as it was: :mod:`wanlab.backends.emulate.external`), or by default a veth pair
  ``wlx<short>`` (host) / ``up0`` (gateway) on a /30 of 100.64.0.0/10 derived from the
  experiment's id, with a masquerade of that /30 in a host table ``ip wanlab-<short>``.
  The default needs the host to forward IPv4 already; wanlab never turns on host-wide
  forwarding itself.
* **Rules**, one nftables table ``ip wanlab-<short>`` in the gateway's namespace:
  masquerade out of the uplink for the egress nodes' edge addresses only; DNAT of each
  forward (uplink address, listen port) to its node, masqueraded towards the node so the
  reply returns through the gateway; a forward filter that drops anything else
  (a node without egress cannot get out, even through a neighbour that has it).

Ownership: every table and veth is a store record (kinds ``nft`` and ``veth``) written
before it is made and named with the experiment's id; removal deletes exactly the
recorded table (``nft delete table``) or veth (if its index is still the recorded one),
never anything found by a pattern. The gateway's forwarding sysctl is the one every node
namespace has, and goes with the namespace.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
from collections.abc import Callable

from wanlab.backends.emulate import external, wireguard
from wanlab.errors import WanlabError
from wanlab.model.ir import Edge, Experiment
from wanlab.plan.types import Plan
from wanlab.store.db import ExperimentRow, Resource, Store

UPLINK_VETH = "up0"                 # the gateway's end of the default uplink
HOST_POOL = ipaddress.IPv4Network("100.64.0.0/10")
_TABLE_RE = re.compile(r"^ip wanlab-[0-9a-f]{4}$")


def table(short: str) -> str:
    """The nftables table of experiment ``short`` (family and name), host or gateway."""
    return f"ip wanlab-{short}"


def host_veth(short: str) -> str:
    return f"wlx{short}"


def host_pair(short: str) -> tuple[ipaddress.IPv4Interface, ipaddress.IPv4Interface]:
    """The default uplink's /30: (host end, gateway end), from the experiment's id."""
    base = int(HOST_POOL.network_address) + 4 * int(short, 16)
    return (ipaddress.IPv4Interface(f"{ipaddress.IPv4Address(base + 1)}/30"),
            ipaddress.IPv4Interface(f"{ipaddress.IPv4Address(base + 2)}/30"))


def ruleset(short: str, edge: Edge, uplink: str, lan_if: str, egress: list[str],
            targets: dict[str, str], wg: str | None = None) -> str:
    """The gateway's table (an ``nft -f`` script). ``uplink``/``lan_if``: its interfaces
    out and to the edge LAN; ``egress``: the egress nodes' edge addresses; ``targets``:
    node -> its edge address; ``wg``: the WireGuard interface, whose clients reach the
    edge LAN. Every word comes from the validated IR and the plan."""
    name = table(short)
    src = "{ " + ", ".join(egress) + " }" if egress else ""
    pre = [f'iifname "{uplink}" {f.proto} dport {f.listen} dnat to {targets[f.node]}:{f.port}'
           for f in edge.forwards]
    post = [f'oifname "{lan_if}" ct status dnat masquerade']
    fwd = ["ct state established,related accept",
           f'iifname "{uplink}" oifname "{lan_if}" ct status dnat accept']
    if egress:
        post.insert(0, f'oifname "{uplink}" ip saddr {src} masquerade')
        fwd.append(f'iifname "{lan_if}" oifname "{uplink}" ip saddr {src} accept')
    if wg:
        post.append(f'iifname "{wg}" oifname "{lan_if}" masquerade')
        fwd.append(f'iifname "{wg}" oifname "{lan_if}" accept')

    def chain(cname: str, head: str, rules: list[str]) -> str:
        body = "".join(f"\t\t{r}\n" for r in rules)
        return f"\tchain {cname} {{\n\t\t{head}\n{body}\t}}\n"

    return (f"table {name} {{\n"
            + chain("prerouting", "type nat hook prerouting priority dstnat; policy accept;",
                    pre)
            + chain("postrouting", "type nat hook postrouting priority srcnat; policy accept;",
                    post)
            + chain("forward", "type filter hook forward priority filter; policy drop;", fwd)
            + "}\n")


def host_ruleset(short: str) -> str:
    """The host's table of the default uplink: masquerade of the gateway's /30 on its way
    out of this machine."""
    host, _gw = host_pair(short)
    return (f"table {table(short)} {{\n\tchain postrouting {{\n"
            f"\t\ttype nat hook postrouting priority srcnat; policy accept;\n"
            f'\t\tip saddr {host.network} oifname != "{host_veth(short)}" masquerade\n'
            f"\t}}\n}}\n")


def _run(argv: list[str], netns: str | None = None, stdin: str | None = None,
         check: bool = True) -> subprocess.CompletedProcess:
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]
    p = subprocess.run(argv, input=stdin, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise WanlabError(f"{' '.join(argv)}: {p.stderr.strip() or p.returncode}")
    return p


def nft_available() -> None:
    try:
        _run(["nft", "--version"])
    except (OSError, WanlabError):
        raise WanlabError("egress and forwards need nftables (the nft command; apt package "
                          "nftables, installed by make install)") from None


def _host_forwarding() -> bool:
    try:
        with open("/proc/sys/net/ipv4/ip_forward") as f:
            return f.read().strip() == "1"
    except OSError:
        return False


def _ifindex(name: str, netns: str | None = None) -> int | None:
    p = _run(["ip", "-j", "link", "show", "dev", name], netns=netns, check=False)
    if p.returncode != 0:
        return None
    info = json.loads(p.stdout or "[]")
    return info[0].get("ifindex") if info else None


def _own_netns() -> int:
    """The inode of the network namespace wanlab runs in ("the host" for the default
    uplink): removal acts only from that same namespace."""
    return os.stat("/proc/thread-self/ns/net").st_ino


def _elsewhere(r: Resource) -> bool:
    """A host-side record made from another network namespace than this process's."""
    ino = r.detail.get("host_ns")
    return r.detail.get("netns") is None and ino is not None and ino != _own_netns()


def build(store: Store, row: ExperimentRow, exp: Experiment, plan: Plan, folder: str,
          say: Callable[[str], None]) -> None:
    """Give the gateway its uplink and its table; each recorded before it is made."""
    e = exp.edge
    if e is None:
        return
    nft_available()
    gw = plan.nodes[e.gateway]
    lan_if = next(i for i in gw.interfaces if i.network == e.lan)
    short = row.short
    if e.interface:
        say(f"moving host interface {e.interface} into the edge gateway")
        state = external.host_state(e.interface)
        # ``inside``: the address it gets in the gateway (the kernel drops it when the
        # interface moves back)
        rid = store.record(row.id, "iface", e.interface, netns=gw.netns, node=e.gateway,
                           inside=e.address, **state)
        _run(["ip", "link", "set", "dev", e.interface, "netns", gw.netns])
        store.update_resource(rid, "created")
        uplink, via = e.interface, e.via or ""
        _run(["ip", "addr", "add", e.address or "", "dev", uplink], netns=gw.netns)
    else:
        if not _host_forwarding():
            raise WanlabError("egress through this machine's own network needs IPv4 "
                              "forwarding on the host (sysctl net.ipv4.ip_forward=1), which "
                              "wanlab does not turn on for the whole machine; turn it on, "
                              "or give the edge an uplink interface (docs/edge.md)")
        host, mine = host_pair(short)
        veth = host_veth(short)
        if _ifindex(veth) is not None:
            raise WanlabError(f"interface {veth} exists already (another wanlab state "
                              f"folder's experiment with id {short}?)")
        say(f"connecting the edge gateway to this machine ({veth}, {host.network})")
        rid = store.record(row.id, "veth", veth, netns=None, host_ns=_own_netns(),
                           peer=UPLINK_VETH, peer_netns=gw.netns, address=str(host),
                           peer_address=str(mine))
        _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", UPLINK_VETH,
              "netns", gw.netns])
        store.update_resource(rid, "created", ifindex=_ifindex(veth))
        _run(["ip", "addr", "add", str(host), "dev", veth])
        _run(["ip", "link", "set", "dev", veth, "up"])
        tid = store.record(row.id, "nft", table(short), netns=None, host_ns=_own_netns())
        _run(["nft", "-f", "-"], stdin=host_ruleset(short))
        store.update_resource(tid, "created")
        uplink, via = UPLINK_VETH, str(host.ip)
        _run(["ip", "addr", "add", str(mine), "dev", uplink], netns=gw.netns)
    _run(["ip", "link", "set", "dev", uplink, "up"], netns=gw.netns)
    _run(["ip", "route", "replace", "default", "via", via, "dev", uplink], netns=gw.netns)
    addr = {np_.name: next(i.ip for i in np_.interfaces if i.network == e.lan)
            for np_ in plan.nodes.values() if any(i.network == e.lan for i in np_.interfaces)}
    egress = [addr[n.name] for n in exp.nodes if n.egress]
    wg = None
    if e.wireguard_port:
        wireguard.build(store, row, gw.netns, folder, e.wireguard_port,
                        uplink_address(exp, short) or "", str(plan.subnets[e.lan]), say)
        wg = wireguard.ifname(short)
    say(f"edge gateway rules: {len(egress)} egress nodes, {len(e.forwards)} forwards")
    tid = store.record(row.id, "nft", table(short), netns=gw.netns)
    _run(["nft", "-f", "-"], netns=gw.netns,
         stdin=ruleset(short, e, uplink, lan_if.ifname, egress, addr, wg))
    store.update_resource(tid, "created")


def edge_key(exp: Experiment) -> tuple:
    """What of the edge a ``modify`` cannot change in place: the gateway, the uplink,
    the forwards, WireGuard and which nodes have egress (not where they were written)."""
    e = exp.edge
    if e is None:
        return ()
    return (e.gateway, e.interface, e.address, e.via, e.wireguard_port,
            tuple((f.node, f.port, f.proto, f.listen) for f in e.forwards),
            tuple(n.name for n in exp.nodes if n.egress))


def uplink_address(exp: Experiment, short: str) -> str | None:
    """The address outside clients reach the gateway at (forwards listen there)."""
    e = exp.edge
    if e is None:
        return None
    if e.interface:
        return str(ipaddress.IPv4Interface(e.address or "").ip)
    return str(host_pair(short)[1].ip)


def describe(exp: Experiment, short: str, folder: str) -> dict | None:
    """The edge as ``wanlab show`` prints it (None: the experiment has none)."""
    e = exp.edge
    if e is None:
        return None
    addr = uplink_address(exp, short)
    return {"gateway": e.gateway, "lan": e.lan, "address": addr,
            "uplink": e.interface or f"veth {host_veth(short)}",
            "egress": [n.name for n in exp.nodes if n.egress],
            "forwards": [f"{f.proto} {addr}:{f.listen} -> {f.node}:{f.port}"
                         for f in e.forwards],
            "wireguard": (f"udp {addr}:{e.wireguard_port}, client configuration "
                          f"{os.path.join(wireguard.key_dir(folder), 'client.conf')}"
                          if e.wireguard_port else None)}


def remove_table(r: Resource) -> None:
    """Remove one ``nft`` record: ``nft delete table`` of exactly that table, in the host
    or in the recorded namespace (gone with it if the namespace is gone)."""
    if not _TABLE_RE.match(r.name) or _elsewhere(r):
        return              # not a name this module records, or not this namespace's
    ns = r.detail.get("netns")
    if ns and not os.path.exists(f"/run/netns/{ns}"):
        return
    family, name = r.name.split()
    if _run(["nft", "list", "table", family, name], netns=ns, check=False).returncode == 0:
        _run(["nft", "delete", "table", family, name], netns=ns)


def remove_veth(r: Resource) -> None:
    """Remove one ``veth`` record: the host end (and with it the pair) if it is still the
    interface created (same index); already gone with the gateway's namespace is fine."""
    if _elsewhere(r):
        return
    idx = _ifindex(r.name)
    if idx is None or (r.detail.get("ifindex") is not None and idx != r.detail["ifindex"]):
        return
    _run(["ip", "link", "del", "dev", r.name], check=False)
