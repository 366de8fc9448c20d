"""The local test cluster: N "machines" on this host, each a network namespace with its
own address on a bridge and its own Ray worker (``wanlab cluster up --local N``).

This is how the tests and CI exercise the cluster on one machine; a real cluster differs
only in where its Ray workers run. Layout (``ID`` is the cluster's short id):

* bridge ``wlcID-br`` in the host's namespace, address ``10.250.K.1/24`` (the first /24
  of 10.250/16 that no route of the host uses), MTU 9000 so that links tunnelled between
  machines (VXLAN, 50 bytes of overhead) keep a 1500-byte MTU;
* machine ``mI``: namespace ``wlcID-mI``, ``eth0`` at ``10.250.K.(11+I)`` (a veth whose
  host end ``wlcID-vI`` is on the bridge), a Ray worker there offering the resource
  ``wanlab-machine:mI`` and its share of the host's cores;
* the Ray head in the host's namespace (no CPUs: nothing runs there but the controller's
  driver, which needs a local Ray node), on free ports;
* Ray's session files in a private folder of the state folder.

Every part is recorded before it is made (:mod:`wanlab.store.cluster`); ``down`` stops the
recorded processes (each with its descendants, and everything left in the machines'
namespaces) and removes the namespaces, the bridge and the folder, and nothing else.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable

from wanlab.backends.emulate import netns, procs
from wanlab.cluster.info import MACHINE_RESOURCE, ClusterInfo, MachineInfo, current
from wanlab.errors import WanlabError
from wanlab.store import cluster as rec
from wanlab.store.db import Store, make_private_dir

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UNDERLAY_MTU = 9000
START_TIMEOUT_S = 300.0


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _pick_subnet(avoid: ipaddress.IPv4Network | None = None) -> ipaddress.IPv4Network:
    out = subprocess.run(["ip", "-j", "-4", "route", "show", "table", "all"],
                         capture_output=True, text=True, check=True).stdout
    used = []
    for r in json.loads(out or "[]"):
        dst = r.get("dst", "")
        if dst and dst != "default" and dst[0].isdigit():
            with contextlib.suppress(ValueError):
                used.append(ipaddress.ip_network(dst if "/" in dst else dst + "/32",
                                                 strict=False))
    for k in range(256):
        net = ipaddress.ip_network(f"10.250.{k}.0/24")
        if net != avoid and not any(net.overlaps(u) for u in used):
            return net
    raise WanlabError("no free /24 in 10.250.0.0/16 for the local cluster's bridge")


def _run(argv: list[str]) -> None:
    p = subprocess.run(argv, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise WanlabError(f"{' '.join(argv)}: {p.stderr.strip() or p.returncode}")


def _ray_argv() -> list[str]:
    return [sys.executable, "-m", "ray.scripts.scripts", "start", "--block",
            "--disable-usage-stats"]


def _spawn(store: Store, name: str, argv: list[str], log: str) -> None:
    """Start one Ray daemon (``--block``: it stays our child and its daemons its
    descendants), recorded before it starts and with its pid and start time after."""
    rid = rec.record(store, "process", name, argv=argv)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (REPO_ROOT, os.environ.get("PYTHONPATH", "")) if p),
        "RAY_USAGE_STATS_ENABLED": "0"}
    # each machine keeps its images in its own folder, as a host of its own does: they
    # reach it from the controller by digest (wanlab/cluster/layers.py)
    env.pop("WANLAB_IMAGES", None)
    with open(log, "ab") as out:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                             start_new_session=True, env=env, umask=0o077, cwd="/")
    procs.hold(p)
    rec.update(store, rid, "created", pid=p.pid, started=procs.start_time(p.pid), log=log)


def up_local(store: Store, n: int, say: Callable[[str], None] = print,
             wan_delay: str | None = None, wan_matrix: str | None = None,
             measure: bool = True) -> ClusterInfo:
    """Start a local test cluster of ``n`` machines (refused if one exists). With
    ``wan_delay`` (each machine's one-way access delay, ``10ms,20ms,...``) or ``wan_matrix``
    (a latency-matrix CSV over m0..mN-1) the machines are wide-area: their own paths are
    shaped (:mod:`wanlab.cluster.wan_underlay`). ``measure``: record the measured matrix."""
    if current(store) is not None:
        raise WanlabError("a cluster is already up in this store: 'wanlab cluster down' "
                          "first (or 'wanlab cluster status')")
    if not 1 <= n <= 16:
        raise WanlabError(f"--local {n}: between 1 and 16 machines")
    from wanlab.cluster import wan_underlay
    shaped = wan_underlay.request(n, wan_delay, wan_matrix)   # checked before anything
    try:
        import ray  # noqa: F401
    except ImportError as e:
        raise WanlabError("the cluster needs Ray: run 'make install' (pip install "
                          "'ray[default]')") from e
    cid = secrets.token_hex(2)
    net = _pick_subnet()
    hosts = list(net.hosts())
    head_ip = str(hosts[0])
    folder = os.path.join("/tmp", f"wlc{cid}")    # Ray's socket paths must stay short
    port = _free_port("0.0.0.0")
    cores = max(1.0, (os.cpu_count() or 1) / n)
    # wide-area machines reach each other on a second, shaped network: their address
    # (Ray's node address, the tunnels' underlay) is there; the bridge stays the control
    # network between Ray's head and the machines
    data = _pick_subnet(avoid=net) if shaped else None
    machines = [MachineInfo(f"m{i}", str(list(data.hosts())[10 + i]) if data else
                            str(hosts[10 + i]), f"wlc{cid}-m{i}", cores,
                            wide_area=shaped is not None) for i in range(n)]
    head = f"{head_ip}:{port}"
    top = rec.record(store, "cluster", cid, id=cid, head=head, local=True,
                     subnet=str(net), data_subnet=str(data) if data else None,
                     machines=[m.__dict__ for m in machines])
    try:
        rid = rec.record(store, "dir", folder)
        make_private_dir(folder)
        rec.update(store, rid, "created")
        br = f"wlc{cid}-br"
        rid = rec.record(store, "bridge", br)
        _run(["ip", "link", "add", br, "mtu", str(UNDERLAY_MTU), "type", "bridge"])
        rec.update(store, rid, "created")
        _run(["ip", "addr", "add", f"{head_ip}/{net.prefixlen}", "dev", br])
        _run(["ip", "link", "set", br, "up"])
        for i, m in enumerate(machines):
            _make_machine(store, cid, i, m, f"{hosts[10 + i]}/{net.prefixlen}")
        if shaped is not None and data is not None:
            wan_underlay.build(store, cid, machines, [str(hosts[10 + i]) for i in range(n)],
                               data, br, shaped, say)
        say(f"cluster {cid}: starting Ray's head at {head}")
        _spawn(store, "ray-head", _ray_argv() + [
            "--head", f"--node-ip-address={head_ip}", f"--port={port}", "--num-cpus=0",
            "--include-dashboard=false", f"--temp-dir={folder}",
            f"--ray-client-server-port={_free_port('0.0.0.0')}",
            f"--dashboard-agent-listen-port={_free_port('0.0.0.0')}",
            f"--runtime-env-agent-port={_free_port('0.0.0.0')}",
            f"--metrics-export-port={_free_port('0.0.0.0')}"],
            os.path.join(folder, "head.log"))
        _wait_port(head_ip, port)
        for m in machines:
            say(f"cluster {cid}: machine {m.name} at {m.address} (namespace {m.netns})")
            # each machine its own session files: nodes sharing one folder share socket
            # paths, and all but the first fail to join
            mdir = os.path.join(folder, m.name)
            make_private_dir(mdir)
            _spawn_worker(store, head, m, mdir, os.path.join(folder, f"{m.name}.log"))
        info = current(store)
        assert info is not None
        _wait_machines(store, info, say)
        if measure:
            from wanlab.cluster import connect, join
            with connect.session(info):
                join.record_matrix(store, info, say)
        rec.update(store, top, "created")
        say(f"cluster {cid}: {n} machines up")
        return info
    except BaseException:
        down(store, quiet=True)
        raise


def join_local(store: Store, say: Callable[[str], None] = print) -> MachineInfo:
    """``cluster join --local``: one more machine for the local test cluster that is up,
    without taking it down: the next ``mN``, its namespace on the bridge at the next
    address, its Ray worker offering ``wanlab-machine:mN``, its agent, and its pairs of
    the matrix measured. Each piece is recorded before it is made (``down`` removes it
    with the rest); a join that fails removes what it made. Experiments already placed
    are untouched; new ones may be placed on the new machine."""
    info = current(store)
    if info is None or not info.local:
        raise WanlabError("cluster join --local: no local test cluster is up ('wanlab "
                          "cluster up --local N' first; a cluster given by address takes "
                          "'wanlab cluster join')")
    top = rec.live(store, "cluster")[-1]
    if top.detail.get("data_subnet"):
        raise WanlabError("cluster join --local: not for a cluster whose paths are shaped "
                          "(--wan-delay/--wan-matrix): its underlay is made for the "
                          "machines of 'up'; take it down and up with one more machine")
    i = len(info.machines)
    if i >= 16:
        raise WanlabError("cluster join --local: 16 machines at most")
    net = ipaddress.ip_network(top.detail["subnet"])
    address = str(list(net.hosts())[10 + i])
    m = MachineInfo(f"m{i}", address, f"wlc{info.id}-m{i}", info.machines[0].cores)
    folder = os.path.join("/tmp", f"wlc{info.id}")
    rec.update(store, top.id, machines=[*top.detail["machines"], m.__dict__])
    try:
        say(f"cluster {info.id}: machine {m.name} at {m.address} (namespace {m.netns})")
        _make_machine(store, info.id, i, m, f"{m.address}/{net.prefixlen}")
        mdir = os.path.join(folder, m.name)
        make_private_dir(mdir)
        _spawn_worker(store, info.head, m, mdir, os.path.join(folder, f"{m.name}.log"))
        info = current(store)
        assert info is not None
        _wait_machines(store, info, say)
        from wanlab.cluster import agent, connect, join
        with connect.session(info):
            import ray
            ray.get(agent.agent(info, m, agent.machine_home(store.home, m.name))
                    .hello.remote(), timeout=START_TIMEOUT_S)
            join.record_matrix(store, info, say, keep=join.matrix(store))
    except BaseException:
        say(f"cluster {info.id}: machine {m.name} did not join; removing it")
        _remove_machine(store, m.name)
        raise
    say(f"cluster {info.id}: {m.name} joined; {i + 1} machines up")
    return m


def _make_machine(store: Store, cid: str, i: int, m: MachineInfo, control: str) -> None:
    """Machine ``m``'s namespace, its ``eth0`` on the bridge at address ``control``
    (``A/LEN``: its own address, unless a shaped data network carries that)."""
    assert m.netns is not None
    rid = rec.record(store, "machine", m.name, netns=m.netns, address=m.address)
    ino = netns.create(m.netns)
    rec.update(store, rid, "created", inode=ino)
    veth = f"wlc{cid}-v{i}"
    _run(["ip", "link", "add", veth, "mtu", str(UNDERLAY_MTU), "type", "veth",
          "peer", "name", "eth0", "mtu", str(UNDERLAY_MTU), "netns", m.netns])
    _run(["ip", "link", "set", veth, "master", f"wlc{cid}-br", "up"])
    _run(["ip", "-n", m.netns, "addr", "add", control, "dev", "eth0"])
    _run(["ip", "-n", m.netns, "link", "set", "eth0", "up"])
    _run(["ip", "-n", m.netns, "link", "set", "lo", "up"])


def _spawn_worker(store: Store, head: str, m: MachineInfo, mdir: str, log: str) -> None:
    """Machine ``m``'s Ray worker, in its namespace, offering ``wanlab-machine:NAME``."""
    # nsenter, not ``ip netns exec``: only the network namespace changes. A new mount
    # namespace would keep the agent's node namespaces (bind mounts under /run/netns)
    # out of the host's sight and leave empty files when it ends
    assert m.netns is not None
    _spawn(store, f"ray-{m.name}", ["nsenter", f"--net={netns.path(m.netns)}", "--"]
           + _ray_argv() + [
        f"--address={head}", f"--node-ip-address={m.address}", f"--num-cpus={m.cores:g}",
        f"--temp-dir={mdir}", f"--resources={json.dumps({MACHINE_RESOURCE + m.name: 1})}"],
        log)


def _remove_machine(store: Store, name: str) -> None:
    """Undo a join that failed: the machine's worker (with its descendants), its
    namespace, their records, and its entry in the cluster's record."""
    for r in rec.live(store):
        if (r.kind, r.name) not in (("process", f"ray-{name}"), ("machine", name)):
            continue
        if r.kind == "process":
            pid, started = r.detail.get("pid"), r.detail.get("started")
            if pid and procs.alive(pid, started):
                for c in _descendants(pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(c, 9)
                procs.kill(pid, started, grace=2.0)
        elif r.kind == "machine":
            _remove_namespace(r)
        rec.removed(store, r.id)
    top = rec.live(store, "cluster")[-1]
    rec.update(store, top.id, machines=[x for x in top.detail["machines"]
                                        if x["name"] != name])


def rejoin(store: Store, machine: str) -> None:
    """Start a lost machine of the local test cluster again: its Ray worker, from the argv
    recorded at ``up`` (what a machine that comes back after a crash does). Its namespace
    and its folder, with its own store, were kept, so its agent (started again on first
    use) finds the parts that machine recorded, and ``terminate``/``cleanup`` of an
    experiment that kept them remove them. Refused while the machine's worker runs."""
    info = current(store)
    if info is None or not info.local:
        raise WanlabError("rejoin: no local test cluster is up")
    r = next((r for r in rec.live(store, "process") if r.name == f"ray-{machine}"), None)
    if r is None:
        raise WanlabError(f"rejoin: the cluster has no machine {machine!r}")
    pid, started = r.detail.get("pid"), r.detail.get("started")
    if pid and procs.alive(pid, started):
        raise WanlabError(f"rejoin: machine {machine}'s Ray worker runs (pid {pid})")
    # the worker's own temporary files are in a session folder of its own: a new one
    rec.removed(store, r.id)
    _spawn(store, r.name, r.detail["argv"], r.detail["log"])


def _wait_port(host: str, port: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), 1):
            return
        time.sleep(0.2)
    raise WanlabError(f"Ray's head did not listen on {host}:{port} within "
                      f"{START_TIMEOUT_S:.0f} s")


def _wait_machines(store: Store, info: ClusterInfo,
                   say: Callable[[str], None] = print) -> None:
    """Until every machine's Ray worker offers its resource. A worker that exits first
    (Ray's start can fail on a loaded host) is started once more from its recorded argv;
    a head, or a worker that exits twice, fails the wait at once, with its log's tail."""
    from wanlab.cluster import connect
    restarted: set[str] = set()
    with connect.session(info):
        import ray
        deadline = time.monotonic() + START_TIMEOUT_S
        want = {MACHINE_RESOURCE + m.name for m in info.machines}
        while time.monotonic() < deadline:
            have = set(ray.cluster_resources())
            if want <= have:
                return
            for r in rec.live(store, "process"):
                pid, started = r.detail.get("pid"), r.detail.get("started")
                if not r.name.startswith("ray-") or not pid or procs.alive(pid, started):
                    continue
                m = r.name[len("ray-"):]
                if r.name == "ray-head" or m in restarted:
                    raise WanlabError(f"Ray's {'head' if m == 'head' else 'worker of ' + m} "
                                      f"exited while the cluster started"
                                      f"{_log_tails(info, [MACHINE_RESOURCE + m])}")
                if MACHINE_RESOURCE + m in want - have:
                    say(f"cluster {info.id}: machine {m}'s Ray worker exited at its start; "
                        f"starting it again")
                    restarted.add(m)
                    rec.removed(store, r.id)
                    _spawn(store, r.name, r.detail["argv"], r.detail["log"])
            time.sleep(0.5)
        missing = sorted(want - set(ray.cluster_resources()))
        raise WanlabError(f"machines did not join Ray within {START_TIMEOUT_S:.0f} s: "
                          f"{', '.join(missing)}{_log_tails(info, missing)}")


def _log_tails(info: ClusterInfo, missing: list[str]) -> str:
    """The last lines of the missing machines' Ray logs (the folder goes with ``down``)."""
    out = []
    for name in missing:
        path = os.path.join("/tmp", f"wlc{info.id}", f"{name.split(':')[-1]}.log")
        try:
            with open(path, errors="replace") as f:
                tail = [x for x in f.read().splitlines() if x.strip()][-3:]
        except OSError:
            continue
        out.append(f"{path}: " + " | ".join(tail))
        # the log itself goes with the folder; keep a copy beside the store for a look
    return ("; " + "; ".join(out)) if out else ""


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _remove_namespace(r: rec.Record) -> None:
    """A recorded machine's namespace (if it is still the one made), with what runs in it."""
    ino = r.detail.get("inode") or netns.inode(r.detail["netns"])
    if ino and netns.inode(r.detail["netns"]) == ino:
        for pid in netns.pids_in(ino):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        netns.delete(r.detail["netns"])


def down(store: Store, quiet: bool = False, say: Callable[[str], None] = print) -> int:
    """Remove exactly what the store recorded of the cluster; returns how many parts."""
    records = rec.live(store)
    n = 0
    agents = [r for r in records if r.kind == "agent"]
    info = current(store)
    if agents and info is not None:       # a cluster joined by address: ours are its agents
        from wanlab.cluster import join
        n += join.remove_agents(store, info, agents)
    # Ray's daemons first: each recorded process with its descendants (Ray's raylet, GCS,
    # workers), then whatever still runs inside a recorded machine namespace
    for r in (r for r in records if r.kind == "process"):
        pid, started = r.detail.get("pid"), r.detail.get("started")
        if pid and procs.alive(pid, started):
            for c in _descendants(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(c, 9)
            procs.kill(pid, started, grace=2.0)
        rec.removed(store, r.id)
        n += 1
    for r in (r for r in records if r.kind == "underlay"):
        # before the machines: its nodes hold the machines' second legs, given back first
        from wanlab.cluster import wan_underlay
        wan_underlay.remove(r)
        rec.removed(store, r.id)
        n += 1
    for r in (r for r in records if r.kind == "machine"):
        _remove_namespace(r)
        rec.removed(store, r.id)
        n += 1
    for r in (r for r in records if r.kind == "bridge"):
        subprocess.run(["ip", "link", "del", r.name], capture_output=True, check=False)
        rec.removed(store, r.id)
        n += 1
    for r in (r for r in records if r.kind == "dir"):
        shutil.rmtree(r.name, ignore_errors=True)
        rec.removed(store, r.id)
        n += 1
    for r in (r for r in records if r.kind in ("matrix", "wanmap")):
        rec.removed(store, r.id)           # what was measured and mapped on it
    for r in (r for r in records if r.kind == "cluster"):
        rec.removed(store, r.id)
        if not quiet:
            say(f"cluster {r.name}: down ({n} parts removed)")
    return n
