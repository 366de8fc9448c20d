"""A node's process context: how a command runs inside a node.

``node_argv`` is the one place that says what "inside a node" means (network, mount, UTS
and PID namespaces, the experiment's user namespace for a node without an image, hosts
file, hostname, FRR sockets, and the confinement of docs/security.md: wanlab's state
hidden, private /tmp, /run, /dev and /proc, the host's files read-only, a reduced
capability bounding set). The confinement is built once per node by a holder process
(:func:`ensure_holders`), the init (pid 1) of the node's PID namespace, whose namespaces
later commands enter.

wanlab starts its own processes in a node (start commands, Programs, traffic agents, FRR,
``wanlab exec``/``shell``) with :func:`popen` or :func:`run`: the process is born in the
node's PID namespace, so the pid the caller holds and records is the node's process
itself (signals, ``/proc/<pid>``, teardown). ``node_argv`` alone also works for any
caller (the entering process, :mod:`~wanlab.backends.emulate.enter`, then forks, and the
node's process dies with it).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess

from wanlab.backends.emulate import (
    cgroups,
    enter,
    idmap,
    netns,
    nodefiles,
    pidns,
    procs,
    rootfs,
    userns,
)
from wanlab.backends.emulate.caps import DROPPED_CAPS
from wanlab.engine.binary import engine_binary
from wanlab.errors import WanlabError
from wanlab.plan.types import Plan
from wanlab.store.db import ExperimentRow, Store

# Run by ``sh -c`` inside ``ip netns exec`` (a fresh mount namespace, slave to the host's, with
# /etc/netns/NS/* bound over /etc) and ``unshare --uts``, as pid 1 of a new PID namespace;
# $0 node, $1 state folder, $2 the node's folder, $3 setpriv's --bounding-set, $4 wanlab's
# binaries, then the command. Mounts made here never reach the host. In order:
#  - a /proc of the node's own PID namespace (no host process is visible);
#  - the host's own mounts (/ and any other) are noted, to be made read-only at the end (a
#    node must not rewrite wanlab, FRR, /etc/cron.d ... of the host it runs on);
#  - stage: a tmpfs over /run, holding the node's folder and a new minimal /dev;
#  - /dev: null, zero, full, random, urandom, tty, net/tun, a private devpts and shm
#    (no disks, no memory devices);
#  - the state folder is hidden under an empty tmpfs (the store, locks, every experiment's
#    sockets and files), so are /var/lib/wanlab and /etc/netns (other nodes' FRR sockets),
#    and only the node's own folder is bound back at its path (its logs, FRR's logs, its
#    start command's output), also when it lies under one of those (a cluster machine's);
#  - wanlab's own binaries (wanlab-gen, beside the engine) stay visible, read-only, when
#    they live under a folder the node gets privately (a checkout in /tmp);
#  - /tmp, /var/tmp and /run are the node's own (<node folder>/tmp, /run; a link the node
#    left in their place is removed, never followed: no node process runs now), kept across
#    its commands; the
#    node's /run/frr is /etc/frr/run (FRR's sockets), so vtysh meets the node's own daemons;
#  - /sys is read-only, and so are /proc/sys (except /proc/sys/net, the node's own network
#    sysctls), /proc/irq, /proc/sysrq-trigger, /proc/bus and /proc/fs; /proc/kcore, keys and
#    timers are hidden (rootfs.PROC_GUARD);
#  - the working directory is re-entered by path (never a host directory kept open), and
#    the command runs with the capabilities above removed from its bounding set;
#  - with $WANLAB_USERNS_FD (the experiment's user namespace, :mod:`userns`), the node's
#    folder, /tmp and /run are first given to the range's root (unless its range owns them
#    already: FRR's log folder), and the command joins the experiment's user namespace last,
#    in a UTS and an IPC namespace of its own there: root in the node is the range's uid on
#    the host (a node with an image: rootfs.IMAGE_SHELL, which joins it after pivot_root).
NODE_SHELL = rootfs.PROC_GUARD + r"""node=$0 home=$1 dir=$2 caps=$3 tools=$4; shift 4
cwd=$(pwd); cd / || exit 111
mount -t proc -o nosuid,nodev,noexec proc /proc || exit 111
host_mounts=$(awk '$2 !~ "^/(proc|sys|dev|run|tmp|var/tmp|etc)(/|$)" { print $2 }' \
  /proc/self/mounts)
hostname "$node" || exit 111
for d in "$dir/tmp" "$dir/run"; do     # the node's: a link it left there is not followed
  if [ -L "$d" ] || { [ -e "$d" ] && [ ! -d "$d" ]; }; then rm -f -- "$d" || exit 111; fi
done
mkdir -p "$dir/tmp" "$dir/run" && chmod 1777 "$dir/tmp" && chmod 0755 "$dir/run" || exit 111
uns=${WANLAB_USERNS_FD-} base=${WANLAB_UID_BASE-}; unset WANLAB_USERNS_FD WANLAB_UID_BASE
if [ -n "$uns" ]; then        # the node's folders are its root's (or FRR's) in its range
  for d in "$dir" "$dir/tmp" "$dir/run"; do
    u=$(stat -c %u "$d") || exit 111
    if [ "$u" -lt "$base" ] || [ "$u" -ge $((base + 65536)) ]; then
      chown "$base:$base" "$d" || exit 111; fi
  done
fi
mount -t tmpfs -o mode=0755,size=1m wanlab-stage /run &&
mkdir /run/node /run/dev /run/tools && mount --bind "$dir" /run/node &&
mount --bind "$tools" /run/tools &&
mount -t tmpfs -o mode=0755,size=1m,nosuid,noexec wanlab-dev /run/dev || exit 111
for d in null zero full random urandom tty; do
  touch "/run/dev/$d" && mount --bind "/dev/$d" "/run/dev/$d" || exit 111
done
if [ -c /dev/net/tun ]; then
  mkdir /run/dev/net && touch /run/dev/net/tun && mount --bind /dev/net/tun /run/dev/net/tun ||
  exit 111
fi
mkdir /run/dev/pts /run/dev/shm && ln -s pts/ptmx /run/dev/ptmx &&
ln -s /proc/self/fd /run/dev/fd && ln -s /proc/self/fd/0 /run/dev/stdin &&
ln -s /proc/self/fd/1 /run/dev/stdout && ln -s /proc/self/fd/2 /run/dev/stderr &&
mount --move /run/dev /dev &&
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts /dev/pts &&
mount -t tmpfs -o mode=1777,size=64m,nosuid,nodev shm /dev/shm &&
mount -t tmpfs -o mode=0711,size=1m wanlab-hidden "$home" &&
(umask 066; mkdir -p "$dir") && mount --bind /run/node "$dir" &&
mount --bind /run/node/tmp /tmp && mount --bind /run/node/tmp /var/tmp || exit 111
for h in /var/lib/wanlab /etc/netns; do
  if [ -d "$h" ] && [ "$h" != "$home" ]; then
    mount -t tmpfs -o mode=0711,size=1m wanlab-hidden "$h" || exit 111; fi
done
if [ "$(stat -c %d:%i "$dir" 2>/dev/null)" != "$(stat -c %d:%i /run/node)" ]; then
  # it was under /tmp, or under a hidden folder (a cluster machine's store in /var/lib/wanlab)
  (umask 066; mkdir -p "$dir") && mount --bind /run/node "$dir" || exit 111
fi
case "$tools" in /tmp/*|/var/tmp/*|/run/*)      # wanlab's binaries live under a private folder
  (umask 022; mkdir -p "$tools") && mount --bind /run/tools "$tools" &&
  mount -o remount,bind,ro "$tools" || exit 111;;
esac
mount --bind /run/node/run /run || exit 111
if [ -d /etc/frr/run ]; then mkdir -p /run/frr && mount --bind /etc/frr/run /run/frr ||
  exit 111; fi
mount -o remount,bind,ro /sys && proc_guard /proc &&
mount --bind /proc/sys/net /proc/sys/net && mount -o remount,bind,rw /proc/sys/net || exit 111
for m in $host_mounts; do
  case "$m" in "$home"|"$home"/*|/var/lib/wanlab|/var/lib/wanlab/*) continue;; esac
  mount -o remount,bind,ro "$(printf '%b' "$m")" || exit 111
done
cd "$cwd" 2>/dev/null || cd "$dir" || exit 111
umask 022
if [ -n "$uns" ]; then        # last: into the experiment's user namespace, with a UTS and
  exec nsenter --user="/proc/self/fd/$uns" -- unshare --uts --ipc -- \
    setpriv --bounding-set "$caps" -- "$@"       # an IPC namespace it owns
fi
exec setpriv --bounding-set "$caps" -- "$@"
"""


def _setup_argv(ns: str, node: str, argv: list[str], folder: str,
                ufd: int | None = None) -> list[str]:
    """Build the node's confinement (NODE_SHELL) from scratch and run ``argv`` in it (to be
    started as the init of a new PID namespace: :func:`pidns.children_in_new`); ``ufd``:
    the user namespace it joins last (passed on, also in $WANLAB_USERNS_FD)."""
    home = os.path.dirname(os.path.dirname(folder))
    ndir = os.path.join(folder, "nodes", node)
    caps = ",".join("-" + c for c in DROPPED_CAPS)
    tools = os.path.dirname(os.path.realpath(engine_binary()))
    # a node with an image switches into its own root instead (same arguments)
    shell = NODE_SHELL
    if rootfs.has_root(folder, node):
        # the node's own root: entered, and its capabilities dropped, by one host process
        shell = rootfs.IMAGE_SHELL
        argv = [*enter.argv_prefix(), "pivot", rootfs.root_path(folder, node), ndir, caps,
                "-" if ufd is None else str(ufd), "--", *argv]
    return ["ip", "netns", "exec", ns, "unshare", "--uts", "--", "sh", "-c", shell, node,
            home, ndir, caps, tools, *argv]


# The holder, once the confinement is built: the init of the node's PID namespace. It reaps
# the node's orphans (``wait`` collects any child, adopted ones too) and ends on SIGTERM (an
# init gets only the signals it handles), which ends every process of the node with it.
HOLDER_INIT = ("trap 'exit 0' TERM INT HUP; echo ready; exec </dev/null >/dev/null 2>&1; "
               "while :; do sleep infinity & wait; done")

# Entering a node's holder (its network, mount, UTS and PID namespaces, and its user and
# IPC namespaces when it runs in its experiment's user namespace), dropping
# capabilities and going to the caller's working directory *by path* in the node's view
# (else the node's folder) is one process (enter.py enter): a program found in the node's
# mount namespace (an image node's own setpriv) never runs with more than the node's
# capabilities. A caller already in the node's PID namespace (:func:`popen`) is entered in
# place; any other forks, and its child dies with it.


def _holder_file(store: Store, row: ExperimentRow, node: str) -> str:
    # in the experiment's folder, which no node sees (a node could rewrite a pid in its own)
    return store.folder(row.name, "holders", node)


def _live_holder(path: str) -> tuple[int, int] | None:
    """The holder's (pid, start time), if it lives and is not ending or killed (its PID
    namespace would take a new process down with it)."""
    try:
        with open(path) as f:
            pid, started = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        return None
    if procs.alive(pid, started) and not procs.doomed(pid):
        return pid, started
    return None


def ensure_holders(store: Store, row: ExperimentRow, targets: list[tuple[str, str]]) -> None:
    """Make sure each (netns, node) of ``targets`` has a live holder, starting the missing
    ones in parallel.

    A holder is the init of the node's PID namespace: it built the node's confinement once
    (NODE_SHELL) and then waits (HOLDER_INIT); every later command enters its namespaces
    with :mod:`~wanlab.backends.emulate.enter` (milliseconds instead of a few dozen
    mounts). It is a recorded process (teardown kills it, and with it whatever still runs
    in the node). Start it after /etc/netns/<ns>/* is complete (FRR's files): ``ip netns
    exec`` binds what exists then."""
    import fcntl
    if len(targets) > 64:                # bound the open pipes and lock files
        for i in range(0, len(targets), 64):
            ensure_holders(store, row, targets[i:i + 64])
        return
    folder = store.folder(row.name)
    hdir = store.folder(row.name, "holders")
    os.makedirs(hdir, mode=0o700, exist_ok=True)
    started: list[tuple[str, str, subprocess.Popen, int | None, int]] = []
    base = userns.base_of(store, row.id)
    with contextlib.ExitStack() as locks:
        for ns, node in targets:
            path = _holder_file(store, row, node)
            lock = locks.enter_context(open(path + ".lock", "a"))
            fcntl.flock(lock, fcntl.LOCK_EX)
            if _live_holder(path):
                continue
            rid = store.record(row.id, "process", f"node-{node}", node=node, role="holder")
            ufd, env = _userns_of(base, ns, node, folder)
            try:
                with pidns.children_in_new():     # in the node's cgroup before it runs anything
                    p = subprocess.Popen(cgroups.join_argv(folder, node, _setup_argv(
                                             ns, node, ["sh", "-c", HOLDER_INIT], folder, ufd)),
                                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         env=env, pass_fds=() if ufd is None else (ufd,))
            finally:
                if ufd is not None:
                    os.close(ufd)
            st = procs.start_time(p.pid)
            store.update_resource(rid, "created", pid=p.pid, started=st)
            started.append((node, path, p, st, rid))
        for node, path, p, st, _rid in started:
            assert p.stdout is not None
            line = p.stdout.readline()
            if line != b"ready\n":
                rest = (line + p.stdout.read()).decode(errors="replace").strip()
                p.wait()
                raise WanlabError(f"node {node}: could not build its confinement (exit "
                                  f"{p.returncode}): {rest.splitlines()[-1] if rest else ''}")
            p.stdout.close()
            tmp = path + ".new"
            with open(tmp, "w") as f:
                f.write(f"{p.pid} {st}\n")
            os.replace(tmp, path)


def joins_userns(folder: str, node: str) -> bool:
    """Whether the node's processes run in the experiment's user namespace (when it has
    one): every node's do, with an image or without; a node whose kept layer was mounted
    without one (a swap-in with ``WANLAB_USERNS=0``) stays in the host's until swapped
    in again."""
    return not rootfs.has_root(folder, node) or idmap.layer_base(folder, node) != 0


def _userns_of(base: int | None, ns: str, node: str,
               folder: str) -> tuple[int | None, dict[str, str]]:
    """The user namespace the node's holder joins last (a descriptor, passed on), and the
    environment telling NODE_SHELL so; no descriptor if it stays in the host's."""
    env = {k: v for k, v in os.environ.items()      # never a caller's own value of these
           if k not in ("WANLAB_USERNS_FD", "WANLAB_UID_BASE")}
    ufd = userns.owner_fd(netns.path(ns)) if base is not None and \
        joins_userns(folder, node) else None
    if ufd is None:
        return None, env
    return ufd, {**env, "WANLAB_USERNS_FD": str(ufd), "WANLAB_UID_BASE": str(base)}


def uid_bases(store: Store, row: ExperimentRow, nodes: list[str]) -> dict[str, int]:
    """What each node's uid 0 is on the host: the experiment's range if the node joins its
    user namespace, else 0."""
    base = userns.base_of(store, row.id)
    folder = store.folder(row.name)
    return {n: base if base is not None and joins_userns(folder, n) else 0 for n in nodes}


def _holder(store: Store, row: ExperimentRow, ns: str, node: str) -> tuple[int, int]:
    """The node's live holder (pid, start time), started first if it has none."""
    path = _holder_file(store, row, node)
    got = _live_holder(path)
    if got is None:
        ensure_holders(store, row, [(ns, node)])
        got = _live_holder(path)
        if got is None:
            raise WanlabError(f"node {node}: its holder process died at once")
    return got


def _enter_argv(store: Store, row: ExperimentRow, node: str, holder: int, argv: list[str],
                keep: tuple[str, ...]) -> list[str]:
    caps = ",".join("-" + c for c in DROPPED_CAPS if c not in keep)
    ndir = store.folder(row.name, "nodes", node)
    return cgroups.join_argv(store.folder(row.name), node,
                             [*enter.argv_prefix(), "enter", str(holder), caps, ".", ndir,
                              "--", *_with_parameters(row, argv, node)])


def _with_parameters(row: ExperimentRow, argv: list[str], node: str | None = None
                     ) -> list[str]:
    """``argv`` with the node's environment (its OCI image's ``Env``) and the experiment's
    template parameters (Emulab exported them into every node); names are checked
    identifiers, values never meet a shell here."""
    own = next((n.env for n in row.ir.nodes if n.name == node), ()) if node else ()
    values = {**dict(own), **row.ir.parameter_values()}
    if not values:
        return argv
    return ["env", "--", *(f"{k}={v}" for k, v in values.items()), *argv]


def node_argv(store: Store, row: ExperimentRow, ns: str, node: str, argv: list[str],
              keep: tuple[str, ...] = ()) -> list[str]:
    """Run ``argv`` inside a node: its network, mount, UTS and PID namespaces, hosts file,
    hostname, FRR sockets, its own /tmp, /run and /proc, with wanlab's state hidden, the
    host's files read-only and dangerous capabilities dropped (docs/security.md).

    ``keep`` names dropped capabilities a trusted daemon wanlab starts still needs (FRR:
    ``sys_admin``). The node's holder is started first if it has none. Started with plain
    ``Popen``, the pid is the entering process's (see :func:`popen` for the node's own)."""
    pid, _ = _holder(store, row, ns, node)
    return _enter_argv(store, row, node, pid, argv, keep)


def popen(store: Store, row: ExperimentRow, ns: str, node: str, argv: list[str],
          keep: tuple[str, ...] = (), **kw) -> subprocess.Popen:
    """``subprocess.Popen`` of ``argv`` inside a node (as :func:`node_argv`), born in the
    node's PID namespace: the returned pid *is* the node's process, whose signals,
    ``/proc`` entry and start time the caller may use and record."""
    for attempt in (1, 2):
        pid, started = _holder(store, row, ns, node)
        try:
            with pidns.children_in(pid, started):
                return subprocess.Popen(_enter_argv(store, row, node, pid, argv, keep), **kw)
        except OSError as e:
            if attempt == 1 and not (procs.alive(pid, started) and not procs.doomed(pid)):
                continue         # the holder ended just now: the next try starts a new one
            raise WanlabError(f"node {node}: cannot start {argv[0]!r} in it: {e}") from e
    raise AssertionError("unreachable")


def run(store: Store, row: ExperimentRow, ns: str, node: str, argv: list[str], *,
        input: bytes | str | None = None, capture_output: bool = False,
        timeout: float | None = None, check: bool = False, **kw) -> subprocess.CompletedProcess:
    """``subprocess.run`` of ``argv`` inside a node, through :func:`popen`."""
    if input is not None:
        kw["stdin"] = subprocess.PIPE
    if capture_output:
        kw["stdout"] = kw["stderr"] = subprocess.PIPE
    with popen(store, row, ns, node, argv, **kw) as p:
        try:
            out, err = p.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            p.kill()
            e.output, e.stderr = p.communicate()
            raise
        except BaseException:
            p.kill()
            raise
    code = p.poll()
    assert code is not None
    if check and code:
        raise subprocess.CalledProcessError(code, argv, out, err)
    return subprocess.CompletedProcess(argv, code, out, err)


def start_command(store: Store, row: ExperimentRow, plan: Plan, node: str, cmd: str,
                  folder: str) -> None:
    """Run a node's start command in the background; output and exit code in its folder."""
    ndir = os.path.join(folder, "nodes", node)
    out = os.path.join(ndir, "startcmd.log")
    code = os.path.join(ndir, "startcmd.exit")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(code)
    script = f"sh -c {shlex.quote(cmd)}; echo $? > {shlex.quote(code)}"
    rid = store.record(row.id, "process", f"startcmd-{node}", node=node)
    # the node's own output, exported as its own; its folder is the node's, so the log is
    # opened beneath it, never through a link the node left in its place
    with os.fdopen(nodefiles.open_output(ndir, os.path.basename(out)), "ab") as log:
        p = popen(store, row, plan.nodes[node].netns, node, ["sh", "-c", script], cwd=ndir,
                  stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    store.update_resource(rid, "created", pid=p.pid, started=procs.start_time(p.pid))
