"""Host interfaces bridged into nodes: the engine in front of real machines (``wanlab bridge``).

A node with ``external: IF`` (docs/bridge.md) gets the machine's interface IF moved into its
namespace and joined at layer 2, with a Linux bridge ``wlbr0``, to the node's one engine
TAP. Frames from the real network behind IF cross the engine's link or LAN like the node's
own, so two such nodes joined by a shaped link are a Dummynet-style bridge box, and the
link's counters, captures and run-time events (``tevc``) work as on any link. The node's
own address is removed from its TAP: the box is transparent.

Ownership: before IF moves, a resource of kind ``iface`` records what is changed: its
namespace (the host's), MTU, whether it was up, its IPv4 addresses. Removing the record
(teardown, cleanup, a failed swap-in) moves IF back to the host's namespace and restores
exactly those. The kind comes before ``netns``: deleting a namespace would destroy a
virtual interface still inside it (a veth) instead of returning it.
"""

from __future__ import annotations

import json
import os
import subprocess

from wanlab.errors import WanlabError
from wanlab.store.db import Resource

BRIDGE = "wlbr0"


def _ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    p = subprocess.run(argv, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise WanlabError(f"{' '.join(argv)}: {p.stderr.strip() or p.returncode}")
    return p.stdout


def host_state(ifname: str) -> dict:
    """What attaching changes on host interface ``ifname``: MTU, up, IPv4 addresses. An
    error if it does not exist, is the loopback or is enslaved (a bridge or bond port)."""
    if not os.path.exists(f"/sys/class/net/{ifname}"):
        raise WanlabError(f"no network interface {ifname!r} on this machine")
    info = json.loads(_ip("-j", "addr", "show", "dev", ifname) or "[]")
    if not info:
        raise WanlabError(f"no network interface {ifname!r} on this machine")
    i = info[0]
    if "LOOPBACK" in i.get("flags", []):
        raise WanlabError(f"{ifname!r} is the loopback interface")
    if i.get("master"):
        raise WanlabError(f"{ifname!r} is a port of {i['master']!r}; release it first")
    return {"mtu": i.get("mtu"), "up": "UP" in i.get("flags", []),
            "addresses": [f"{a['local']}/{a['prefixlen']}" for a in i.get("addr_info", [])
                          if a.get("family") == "inet"]}


def attach(ifname: str, netns: str, tap: str) -> None:
    """Move host interface ``ifname`` into ``netns`` and bridge it with ``tap`` there."""
    _ip("link", "set", "dev", ifname, "netns", netns)
    _ip("link", "add", BRIDGE, "type", "bridge", netns=netns)
    _ip("addr", "flush", "dev", tap, netns=netns)
    for dev in (tap, ifname):
        _ip("link", "set", "dev", dev, "master", BRIDGE, netns=netns)
        _ip("link", "set", "dev", dev, "up", netns=netns)
    _ip("link", "set", "dev", BRIDGE, "up", netns=netns)


def restore(r: Resource) -> None:
    """Remove one ``iface`` record: move the interface back to the host's namespace and
    restore its MTU, state and addresses. What is already back (or gone with a deleted
    namespace: a veth is destroyed with it) is skipped."""
    ifname, netns = r.name, r.detail.get("netns")
    if netns and os.path.exists(f"/run/netns/{netns}"):
        inside = subprocess.run(["ip", "-n", netns, "link", "show", "dev", ifname],
                                capture_output=True).returncode == 0
        if inside:
            _ip("link", "set", "dev", ifname, "nomaster", netns=netns, check=False)
            _ip("link", "set", "dev", ifname, "down", netns=netns, check=False)
            # pid 1's network namespace is the host's
            _ip("link", "set", "dev", ifname, "netns", "1", netns=netns)
    if not os.path.exists(f"/sys/class/net/{ifname}"):
        return
    if r.detail.get("mtu"):
        _ip("link", "set", "dev", ifname, "mtu", str(r.detail["mtu"]), check=False)
    for a in r.detail.get("addresses", []):
        _ip("addr", "replace", a, "dev", ifname, check=False)
    _ip("link", "set", "dev", ifname, "up" if r.detail.get("up") else "down", check=False)
