"""One machine's share of a cluster experiment, run by its host agent.

A part is an ordinary experiment in the machine's own store, built by the ordinary life
cycle, with two extra swap-in stages:

* ``tunnels`` (after ``addresses``): each neighbour on another machine is a stub node
  (kind ``remote``) whose namespace holds the TAP the engine forwards the cut link's
  frames to. The stage clears that TAP's address and bridges it to a VXLAN device whose
  underlay is this machine's own namespace (the agent's), pointed at the machine across
  the cut: so frames go engine -> VXLAN over UDP -> the other machine's engine, shaped
  once, by the sending side, each with the instant it is due at the far end (the stub's
  TAP is a ``tunnel`` port of the engine: engine/src/wire/stamp.rs), where that engine
  holds it until then. The devices live in the stub's namespace and go with it.
* ``cluster-hosts`` (after ``routes``): the whole experiment's hosts file, so names of
  nodes on other machines resolve.

The controller writes what these stages need (tunnels and hosts) to
``<home>/cluster-parts/<name>.json`` through :func:`operate` before the part is created.

A part's create and its removal hold the part's lock on the machine, each whole, and a
removal leaves the part's token (from the controller's record): a create that arrives
after the removal of the same part (its controller killed between sending the two) finds
its token and builds nothing.

A part's swap-in ends without starting its clock: the controller starts every part's
clock at one moment once all of them are built (``go``), so t = 0 is the same on every
machine and each part plays its share of the timeline on it. Events from ``tevc`` arrive
typed (``event``), already translated for this machine by :mod:`wanlab.cluster.events`.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

from wanlab.backends.emulate import modify, resources, stages
from wanlab.cluster import console
from wanlab.errors import WanlabError
from wanlab.lifecycle import Lab
from wanlab.model.ir import Event, Experiment
from wanlab.model.names import check_experiment_name
from wanlab.run import scheduler
from wanlab.run.client import EventClient
from wanlab.store.db import Store, make_private_dir

VXLAN_PORT = 4789
# a 1500-byte packet's frame, plus the due-time trailer the engines add (engine
# src/wire/stamp.rs; the bridge drops what exceeds its ports' MTU), with room to spare
TUNNEL_MTU = 1600
# the stub's bridge is a wire: without this, bridge netfilter (where br_netfilter is
# loaded) would trim each frame to its IP length, the due-time trailer with it
_NO_BRIDGE_NF = ("net.bridge.bridge-nf-call-iptables=0",
                 "net.bridge.bridge-nf-call-ip6tables=0",
                 "net.bridge.bridge-nf-call-arptables=0")
SCHEDULER_WAIT_S = 60.0     # its interpreter's start-up, on a loaded machine


def spec_path(store: Store, name: str) -> str:
    return store.inside("cluster-parts", check_experiment_name(name) + ".json")


def _spec(store: Store, name: str) -> dict[str, Any]:
    with open(spec_path(store, name)) as f:
        return json.load(f)


def _ip(ns: str, *args: str) -> None:
    argv = ["ip", "-n", ns, *args] if ns else ["ip", *args]
    p = subprocess.run(argv, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise WanlabError(f"{' '.join(argv)}: {p.stderr.strip()}")


# How long a new tunnel waits for the old one with its VNI to go: a repaired or moved part's
# old stub namespace, and the VXLAN device in it, is freed by the kernel's namespace
# clean-up after its last process is reaped, asynchronously (CI once saw the repair's
# `ip link add` refused with "A VXLAN device with the specified VNI already exists").
VNI_FREE_S = 10.0


def _add_vxlan(*args: str) -> None:
    """``ip link add ... type vxlan`` from the underlay, once the VNI is free."""
    deadline = time.monotonic() + VNI_FREE_S
    while True:
        try:
            _ip("", "link", "add", *args)
            return
        except WanlabError as e:
            if "VNI already exists" not in str(e) or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def _tunnels(b: stages.Build) -> None:
    """Bridge each stub's TAP on a cut link to a VXLAN device towards the machine across:
    every tunnel on a swap-in; on a modify only those of the links it (re)adds, after the
    devices of links it removed or rebuilt are gone (a rebuilt link keeps its VNI, which
    one machine's underlay holds once)."""
    live = [t for t in _spec(b.store, b.row.name)["tunnels"] if _stub_iface(b, t)]
    if not b.swapin:
        _drop_tunnels(b)
        live = [t for t in live if t["link"] in b.networks]
    if not live:
        return
    b.say(f"tunnelling {len(live)} links to other machines")
    for t in live:
        ns, ifname = b.plan.nodes[t["stub"]].netns, _stub_iface(b, t)
        vx, br = f"vx{t['vni']}", f"br{t['vni']}"
        # recorded as devices of the stub's namespace: they go when it goes
        for dev in (vx, br):
            rid = b.store.record(b.row.id, "tap", resources.tap_name(ns, dev),
                                 node=t["stub"], ifname=dev, netns=ns, tunnel=t["link"])
            b.store.update_resource(rid, "created")
        _ip(ns, "addr", "flush", "dev", ifname)
        # made from here (the machine's namespace, the underlay) straight into the stub's
        _add_vxlan(vx, "netns", ns, "mtu", str(TUNNEL_MTU), "type", "vxlan",
                   "id", str(t["vni"]), "remote", t["peer"], "local", t["local"],
                   "dstport", str(VXLAN_PORT))
        _ip(ns, "link", "add", br, "mtu", str(TUNNEL_MTU), "type", "bridge")
        _ip(ns, "link", "set", ifname, "mtu", str(TUNNEL_MTU))
        _ip(ns, "link", "set", ifname, "master", br)
        _ip(ns, "link", "set", vx, "master", br)
        for dev in (vx, br, ifname):
            _ip(ns, "link", "set", dev, "up")
    for ns in sorted({b.plan.nodes[t["stub"]].netns for t in live}):
        if os.path.exists("/proc/sys/net/bridge"):
            p = subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w",
                                *_NO_BRIDGE_NF], capture_output=True, text=True, check=False)
            if p.returncode != 0:
                raise WanlabError(f"tunnels of {ns}: {p.stderr.strip()}")


def _stub_iface(b: stages.Build, t: dict[str, Any]) -> str | None:
    """The stub's interface on the tunnel's link in this part's plan (None: the part has
    no such stub or link, e.g. a tunnel of the description before a modify)."""
    np_ = b.plan.nodes.get(t["stub"])
    if np_ is None or not np_.remote:
        return None
    return next((i.ifname for i in np_.interfaces if i.network == t["link"]), None)


def _drop_tunnels(b: stages.Build) -> None:
    """A modify: the tunnel devices of kept stubs whose link went or is rebuilt go (a
    removed stub's went with its namespace)."""
    kept = {n for n, np_ in b.plan.nodes.items() if np_.remote}
    gone = []
    for r in b.store.resources(b.row.id):
        link = r.detail.get("tunnel")
        if r.kind != "tap" or r.state != "created" or not link:
            continue
        if r.detail["node"] not in kept:
            continue
        on_link = any(i.network == link for i in b.plan.nodes[r.detail["node"]].interfaces)
        if on_link and link not in b.networks:
            continue
        with contextlib.suppress(WanlabError):      # already gone with its bridge
            _ip(r.detail["netns"], "link", "del", r.detail["ifname"])
        gone.append(r.id)
    b.store.mark_removed(gone)


def _merge_spec(store: Store, name: str, spec: dict[str, Any]) -> None:
    """The part's spec with ``spec``'s hosts and tunnels, keeping the tunnels of other
    (link, stub) pairs: the stage builds only those the part's plan has."""
    old = _spec(store, name)
    ours = {(t["link"], t["stub"]) for t in spec["tunnels"]}
    tunnels = [t for t in old["tunnels"] if (t["link"], t["stub"]) not in ours]
    with open(spec_path(store, name), "w") as f:
        json.dump({**old, **spec, "tunnels": tunnels + spec["tunnels"]}, f)


def _hosts(b: stages.Build) -> None:
    hosts = _spec(b.store, b.row.name)["hosts"]
    stages.write_hosts([b.plan.nodes[n].netns for n in b.hosts
                        if b.plan.nodes[n].netns and not _is_stub(b.exp, n)], hosts)


def _is_stub(exp: Experiment, node: str) -> bool:
    return exp.node(node).kind == "remote"


class PartLab(Lab):
    """The life cycle with the cluster's two stages, and no clock: the controller starts
    the clocks of every part at once (:func:`operate` ``go``)."""

    def stages(self) -> tuple[stages.Stage, ...]:
        base = tuple(s if s.name != "clock" else stages.Stage("scheduler-ready", _ready,
                                                             stages.keep)
                     for s in super().stages())
        base = stages.insert_after(base, "addresses", stages.Stage("tunnels", _tunnels))
        return stages.insert_after(base, "routes", stages.Stage("cluster-hosts", _hosts,
                                                                stages.keep))

    def modify_stages(self) -> tuple[stages.Stage, ...]:
        """A modify's stages with the cluster's two: tunnels of the cut links it adds,
        and the whole experiment's hosts file."""
        return tuple(s for s in self.stages() if s.name in (*modify.MODIFY_STAGES,
                                                            "tunnels", "cluster-hosts"))


def operate(home: str, op: str, name: str, *args: Any) -> Any:
    """One operation on part ``name`` in the machine's store at ``home``."""
    # Ray's worker threads block SIGINT, and a child inherits its parent's mask: the
    # part's scheduler, and the traffic agents it starts (stopped by SIGINT, which makes
    # them report), must not
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    if op in TERMINAL_OPS:              # a relayed console's keys: no store to open
        return getattr(console, op.removeprefix("console_"))(*args)
    lab = PartLab(home)
    try:
        if op == "create":
            ir, spec = args
            with _one_at_a_time(lab.store, name) as gone:
                if spec.get("token") and gone[0] == spec["token"]:
                    raise WanlabError(f"part {name}: removed before it was built (its "
                                      f"controller stopped in between); not building it")
                with open(spec_path(lab.store, name), "w") as f:
                    json.dump(spec, f)
                exp = Experiment.from_json(ir)
                _need_images(home, exp)
                row = lab.create(exp)
            return {"short": row.short, "state": lab.get(name).state}
        if op in ("terminate", "cleanup"):
            with _one_at_a_time(lab.store, name) as gone:
                if lab.store.find(name) is not None:
                    if op == "cleanup":
                        lab.cleanup(name)
                    lab.terminate(name)
                try:
                    os.unlink(spec_path(lab.store, name))
                except FileNotFoundError:
                    pass
                gone[0] = args[0] if args and args[0] else ""
            return None
        if op == "exec":
            (argv,) = args
            p = lab.exec(name, args_node(argv), argv[1:], capture_output=True, text=True,
                         timeout=600)
            return p.returncode, p.stdout, p.stderr
        if op == "show":
            return lab.show(name)
        if op == "go":
            (at_wall, *joining) = args
            if joining and joining[0] is not None:     # a part moved here joins t = 0
                return scheduler.go(lab.store.folder(name), joining[0])
            return _go(lab, name, at_wall)
        if op == "retunnel":
            (spec,) = args
            return _retunnel(lab, name, spec)
        if op == "event":
            time_spec, ev, wait, origin = (*args, "tevc")[:4]
            lab._need_active(lab.store.get(name))
            with EventClient(lab.store.folder(name)) as c:
                return c.event(time_spec, Event.from_json(ev), wait, origin)
        if op == "conduct":
            from wanlab.cluster import conductor
            return conductor.start(home, name, *args)
        if op == "events":
            return lab.event_log(name)
        if op == "stats":
            (target,) = args or (None,)
            return lab.stats(name, target)
        if op == "in_force":
            return lab.in_force(name)
        if op == "apply":
            (evs,) = args
            lab.apply(name, [Event.from_json(e) for e in evs])
            return None
        if op == "flows":
            return lab.flows(name)
        if op == "routes":
            (node,) = args
            return lab.routes(name, node)
        if op == "swapout":
            return lab.swapout(name).state
        if op == "swapin":
            _need_images(home, lab.get(name).ir)
            return lab.swapin(name, fresh=bool(args and args[0])).state
        if op == "modify":
            # with a spec: a modify that changes the cut links (its tunnels are added to
            # the spec's, so a failed modify rebuilds the description before it with its own)
            ir, spec = (*args, None)[:2]
            if spec is not None:
                _merge_spec(lab.store, name, spec)
            exp = Experiment.from_json(ir)
            _need_images(home, exp)
            return lab.modify(name, exp).state
        if op == "node_argv":
            (node, argv) = args
            return lab.node_argv(name, node, argv)
        if op == "console_open":
            (node, argv) = args
            return console.open_terminal(lab.node_argv(name, node, argv))
        if op in CAPTURE_OPS:
            return _capture(lab, op, name, *args)
        if op == "health":
            return lab.health(name).broken
        if op == "state":
            row = lab.get(name)
            broken = lab.health(name).broken
            if broken:                              # a broken part becomes degraded
                row = lab._check_health(row)
            return {"state": row.state, "broken": broken, "error": row.error}
        if op == "repair":
            # rebuilt by the ordinary repair; its clock keeps the part's t = 0, which is
            # the other parts' (the log's entries since are the same run's)
            (fresh,) = args
            _need_images(home, lab.get(name).ir)
            t0 = lab._t0(lab.store.get(name))
            lab.swapin(name, repair=True, fresh=fresh)
            return scheduler.go(lab.store.folder(name), t0)
        raise WanlabError(f"no part operation {op!r}")
    finally:
        lab.close()


def _need_images(home: str, exp: Experiment) -> None:
    """A part never builds an image (its machine may reach no mirror): each one its nodes
    name came from the controller, by digest (:mod:`wanlab.cluster.layers`)."""
    from wanlab.backends.emulate import images
    from wanlab.cluster import layers
    store = images.Images(images.images_dir(home))
    for name in layers.wanted(exp):
        if store.get(name) is None:
            raise WanlabError(f"image {name} is not on this machine: the controller sends "
                              f"a part's images before it builds the part")


@contextlib.contextmanager
def _one_at_a_time(store: Store, name: str) -> Iterator[list[str]]:
    """Hold part ``name``'s lock on this machine (its create, or its removal, whole);
    yields ``[token]``: the token of the part last removed under this name ('' if none),
    written back on the way out. The part's own lock (the life cycle's) exists only once
    its experiment is stored; this one also orders a removal before a create that
    arrives late (the two sent by a controller killed between them): the create finds
    its own token and refuses. The file stays (a few bytes per name ever used here)."""
    make_private_dir(store.inside("cluster-parts"))
    path = store.inside("cluster-parts", check_experiment_name(name) + ".lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        before = os.read(fd, 64).decode(errors="replace").strip()
        gone = [before]
        yield gone
        if gone[0] != before:
            os.ftruncate(fd, 0)
            os.pwrite(fd, gone[0].encode(), 0)
    finally:
        os.close(fd)           # also releases the lock


def _retunnel(lab: PartLab, name: str, spec: dict[str, Any]) -> int:
    """Point this part's tunnels at the machines ``spec`` names (a neighbour's part moved
    to another machine): each changed tunnel's default remote replaced, the far MACs it
    had learned forgotten (``ip link set ... type vxlan remote``: the kernel refuses to
    replace the default entry with ``bridge fdb``), and the spec kept for the next
    swap-in. Returns how many."""
    row = lab.store.get(name)
    with open(spec_path(lab.store, name)) as f:
        old = json.load(f)["tunnels"]
    where = {r.detail.get("ifname"): r.detail.get("netns") for r in
             lab.store.resources(row.id) if r.kind == "tap" and r.state == "created"}
    before = {(t["link"], t["stub"]): t for t in old}
    changed = 0
    for now in spec["tunnels"]:
        was = before.get((now["link"], now["stub"]))
        if was is None or was["peer"] == now["peer"] or row.state != "active":
            continue
        # the device is named by its VXLAN id, which a cut link keeps
        vx = f"vx{now['vni']}"
        ns = where[vx]
        _ip(ns, "link", "set", vx, "type", "vxlan", "remote", now["peer"])
        shown = subprocess.run(["bridge", "-n", ns, "-j", "fdb", "show", "dev", vx],
                               capture_output=True, text=True, check=False).stdout
        for e in json.loads(shown or "[]"):
            if e.get("dst") == was["peer"] and e.get("mac") != "00:00:00:00:00:00":
                _bridge(ns, "fdb", "del", e["mac"], "dev", vx, "dst", was["peer"], "self")
        changed += 1
    with open(spec_path(lab.store, name), "w") as f:
        json.dump(spec, f)
    return changed


def _bridge(ns: str, *args: str) -> None:
    p = subprocess.run(["bridge", "-n", ns, *args], capture_output=True, text=True,
                       check=False)
    if p.returncode != 0:
        raise WanlabError(f"bridge -n {ns} {' '.join(args)}: {p.stderr.strip()}")


def _ready(b: stages.Build) -> None:
    """The part's scheduler answers (its clock waits for the controller's ``go``)."""
    with EventClient(b.folder, wait_s=SCHEDULER_WAIT_S) as c:
        c.request({"cmd": "status"})


def _go(lab: PartLab, name: str, at_wall: float) -> float:
    """Start the part's clock at wall-clock time ``at_wall`` (the same moment on every
    machine; one already past is the other parts' t = 0, which a part added by a modify
    joins); returns its t0."""
    row = lab.store.get(name)
    left = at_wall - time.time()
    if left > 0:
        time.sleep(left)
    return scheduler.go(lab.store.folder(row.name), at_wall if left < 0 else None)


TERMINAL_OPS = ("console_io", "console_resize", "console_close")
CAPTURE_OPS = ("captures", "capture_start", "capture_stop", "capture_file", "capture_read")
READ_MAX = 4 << 20      # the most of a capture one ``capture_read`` answers


def _capture(lab: Lab, op: str, name: str, *args: Any) -> Any:
    """The part's captures (the life cycle's), and a capture's bytes for a controller
    on another host: ``capture_read`` gives ``size`` bytes from ``offset``, base64."""
    if op == "captures":
        return lab.captures(name)
    if op == "capture_start":
        link, direction, file = args
        return lab.capture_start(name, link, direction, file)
    if op == "capture_stop":
        return lab.capture_stop(name)
    (file, *more) = args
    path = lab.capture_file(name, file)
    if op == "capture_file":
        return path
    offset, size = more
    with open(path, "rb") as f:
        f.seek(max(0, int(offset)))
        return base64.b64encode(f.read(max(0, min(int(size), READ_MAX)))).decode()


def args_node(argv: list[str]) -> str:
    """``exec``'s argv is [node, command...]."""
    if not argv:
        raise WanlabError("exec: no node given")
    return argv[0]
