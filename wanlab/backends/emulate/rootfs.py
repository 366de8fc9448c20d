"""A node's own root file system: its image below, its own writable layer above (overlayfs).

For a node that names an image, the ``roots`` swap-in stage mounts, in the experiment's
folder (which no node sees)::

    roots/<node>             the overlay: the node's root (recorded as an ``overlay``
                             resource before it is mounted; teardown unmounts exactly it)
    layers/<node>/upper      the node's writable layer: its /etc, /var, /tmp, its files
    layers/<node>/work       overlayfs' work folder
    layers/<node>/setup.json what was installed in the layer (tarfiles, packages)

The layer is the node's hard state: swap-out keeps it and the next swap-in mounts it again;
``swapin --fresh`` drops it, ``terminate`` removes it with the folder. The image (read-only,
shared by every node that names it) lives in :mod:`wanlab.backends.emulate.images`. In
the experiment's user namespace, the image's layers go below as idmapped mounts and the
layer holds the range's uids (:mod:`wanlab.backends.emulate.idmap`).

The node's holder (:mod:`wanlab.backends.emulate.nodes`) then switches into the root with
:data:`IMAGE_SHELL` instead of confining the host's file system: a fresh /proc, /sys, /dev
and /run, the node's hosts file and FRR folder from ``/etc/netns/<ns>``, the node's
wanlab folder and wanlab's binaries at their usual paths, then ``pivot_root`` (the host's
files are no longer reachable; :mod:`wanlab.backends.emulate.enter` does it and drops the
node's capabilities in one process, so no program of the node's root runs with more).
``wanlab exec``/``shell`` enter that mount namespace the same way.

Emulab node setup runs here, once per fresh layer (or when it changes). What it runs (tar,
apt, dpkg, maintainer scripts) comes from the node's root, which a tarball or the node
itself may have changed, so it runs confined as the node is (:data:`SETUP_SHELL`: its own
PID, mount, UTS, IPC and, unless apt fetches packages, network namespaces, the node's
cgroup and bounding set, the root entered with ``pivot_root``), never as host root:
``tb-set-node-tarfiles`` unpacks each tarball at its folder (the host reads the tarball and
feeds it on a pipe), ``tb-set-node-rpms`` installs Debian packages with apt (or ``.deb``
files given by path, fed the same way).
"""

from __future__ import annotations

import bz2
import ctypes
import errno
import functools
import gzip
import json
import lzma
import os
import subprocess
from collections.abc import Callable

from wanlab.backends.emulate import bindsrc, cgroups, enter
from wanlab.backends.emulate.caps import DROPPED_CAPS
from wanlab.errors import WanlabError
from wanlab.model.ir import Node
from wanlab.store.db import Resource

_libc = ctypes.CDLL(None, use_errno=True)
MNT_DETACH = 2

RESOLV_CONF = ("# the node's own resolv.conf (wanlab): no name server; the experiment's "
               "nodes are in /etc/hosts\n")


def root_path(folder: str, node: str) -> str:
    return os.path.join(folder, "roots", node)


def layer_path(folder: str, node: str) -> str:
    return os.path.join(folder, "layers", node)


def has_root(folder: str, node: str) -> bool:
    """Whether the node has its own root (mounted: the holder then switches into it). A
    node with a layer but no mounted root is an error, never the host's files instead."""
    if os.path.ismount(root_path(folder, node)):
        return True
    if os.path.isdir(os.path.join(layer_path(folder, node), "upper")):
        raise WanlabError(f"node {node}: its root is not mounted (swap the experiment out "
                          f"and in, or 'wanlab swapin --repair')")
    return False


def _unescape(field: str) -> str:
    return field.encode().decode("unicode_escape") if "\\" in field else field


def mounted_overlays() -> dict[str, list[str]]:
    """Mount point -> super options of each overlay mounted in this mount namespace."""
    out: dict[str, list[str]] = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, _, post = line.partition(" - ")
            p = post.split()
            if len(p) >= 3 and p[0] == "overlay":
                out.setdefault(_unescape(pre.split()[4]), []).append(p[2])
    return out


def check_path(path: str) -> None:
    # overlayfs' options are separated by ',' and lowerdirs by ':'
    if any(c in path for c in ",:\\\n"):
        raise WanlabError(f"node roots need folders without ',', ':' or '\\' in their path: "
                          f"{path}")


def mount_root(lowers: list[str], upper: str, work: str, target: str) -> None:
    for p in (*lowers, upper, work, target):
        check_path(p)
    opts = f"lowerdir={':'.join(lowers)},upperdir={upper},workdir={work}"
    if _libc.mount(b"overlay", target.encode(), b"overlay", 0, opts.encode()) != 0:
        e = ctypes.get_errno()
        raise WanlabError(f"mounting the node root {target}: {os.strerror(e)}")


def mountinfo() -> list[tuple[str, str, str, str, str]]:
    """(major:minor, root in its file system, mount point, per-mount options, type) of each
    mount of this mount namespace."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, _, post = line.partition(" - ")
            a = pre.split()
            out.append((a[2], _unescape(a[3]), _unescape(a[4]), a[5], post.split()[0]))
    return out


def unmount(r: Resource) -> None:
    """Unmount exactly the recorded overlay: the one at its path whose upper layer is the
    recorded one (anything else mounted there is left alone)."""
    path, upper = r.name, r.detail.get("upper")
    if not upper:
        return
    for _ in range(8):                  # several, if a failed run stacked them
        opts = mounted_overlays().get(path, [])
        if not any(f"upperdir={upper}," in o + "," for o in opts):
            return
        if _libc.umount2(path.encode(), MNT_DETACH) != 0:
            e = ctypes.get_errno()
            if e in (errno.EINVAL, errno.ENOENT):
                return
            raise OSError(e, f"umount {path}: {os.strerror(e)}")


# -- the swap-in stage's work -----------------------------------------------------------

def prepare_layer(folder: str, node: str) -> tuple[str, str, bool]:
    """The node's (upper, work) folders, made if missing; and whether they are new."""
    lay = layer_path(folder, node)
    upper, work = os.path.join(lay, "upper"), os.path.join(lay, "work")
    new = not os.path.isdir(upper)
    os.makedirs(upper, mode=0o755, exist_ok=True)
    if new:           # the node's / (an overlay's root is its upper folder): not the umask's
        os.chmod(upper, 0o755)
    os.makedirs(work, mode=0o700, exist_ok=True)
    os.makedirs(os.path.join(folder, "roots", node), mode=0o755, exist_ok=True)
    os.chmod(os.path.join(folder, "roots"), 0o700)
    os.chmod(lay, 0o700)
    return upper, work, new


def personalize(root: str, node: str, base: int = 0) -> None:
    """The node's own hostname and resolv.conf, in its layer (its hosts file is bound
    over /etc/hosts by its holder), owned by its root (host uid ``base``). The layer is the
    node's: its /etc or those files may be links it planted, so nothing here follows a
    link (a link is replaced)."""
    rfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            efd = os.open("etc", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=rfd)
        except OSError:
            return                      # no /etc of its own (or a link): nothing to write
        try:
            for name, text in (("hostname", node + "\n"), ("resolv.conf", RESOLV_CONF)):
                flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW
                try:
                    fd = os.open(name, flags | os.O_TRUNC, 0o644, dir_fd=efd)
                except OSError:         # a link or a folder: replace a link, leave a folder
                    try:
                        os.unlink(name, dir_fd=efd)
                    except OSError:
                        continue
                    fd = os.open(name, flags | os.O_EXCL, 0o644, dir_fd=efd)
                with os.fdopen(fd, "w") as f:
                    os.fchown(f.fileno(), base, base)
                    os.fchmod(f.fileno(), 0o644)
                    f.write(text)
        finally:
            os.close(efd)
    finally:
        os.close(rfd)


def setup_key(node: Node, lowers: list[str]) -> str:
    return json.dumps({"tarfiles": [list(t) for t in node.tarfiles],
                       "packages": list(node.packages), "image": lowers}, sort_keys=True)


# Every /proc a node (or work done for it) sees: what container runtimes keep read-only
# (sysctls, IRQ affinity, sysrq, bus and file-system settings) and what they hide (kernel
# memory, keys, timers). A shell function: $1 is where that /proc is mounted.
PROC_GUARD = r"""proc_guard() {
  for p in bus fs irq sys sysrq-trigger; do
    [ -e "$1/$p" ] || continue
    mount --bind "$1/$p" "$1/$p" && mount -o remount,bind,ro "$1/$p" || return 1
  done
  for p in kcore keys timer_list sched_debug latency_stats; do
    if [ -f "$1/$p" ]; then mount --bind /dev/null "$1/$p" || return 1; fi
  done
  for p in acpi scsi; do
    if [ -d "$1/$p" ]; then mount -t tmpfs -o ro,size=4k wanlab-masked "$1/$p" || return 1; fi
  done
}
"""

# Setup runs the node's own programs (its tar, apt, dpkg, maintainer scripts: files the node
# or a tarball may have replaced), so it is confined as the node is, never host root: run by
# ``unshare`` in new PID, mount, UTS and IPC namespaces (and a network namespace of its own
# unless apt must fetch packages), in the node's cgroup. $0 the root, $1 "host" when it keeps
# the host's network (apt's mirror; then the host's resolv.conf read-only), then the
# command. Its /dev is staged on a tmpfs of its own, so nothing is created through a path
# the node controls (a mount on a path the node linked elsewhere stays in this private mount
# namespace, and goes with the host's root). Then ``pivot_root``: no host file is reachable;
# the command runs with the node's bounding set less NET_ADMIN, NET_RAW, NET_BIND_SERVICE.
SETUP_SHELL = PROC_GUARD + r"""r=$0 net=$1 caps=$2; shift 2
cd / || exit 111
if [ "$net" = host ]; then
  mount --bind -o ro /etc/resolv.conf "$r/etc/resolv.conf" || exit 111
fi
mount -t tmpfs -o mode=0755,size=1m wanlab-stage /run && mkdir /run/dev &&
mount -t tmpfs -o mode=0755,size=1m,nosuid,noexec wanlab-dev /run/dev || exit 111
for d in null zero full random urandom; do
  touch "/run/dev/$d" && mount --bind "/dev/$d" "/run/dev/$d" || exit 111
done
ln -s /proc/self/fd /run/dev/fd && ln -s /proc/self/fd/0 /run/dev/stdin &&
ln -s /proc/self/fd/1 /run/dev/stdout && ln -s /proc/self/fd/2 /run/dev/stderr &&
mkdir /run/dev/shm && mount -t tmpfs -o mode=1777,size=64m,nosuid,nodev shm /run/dev/shm &&
mount --move /run/dev "$r/dev" || exit 111
mount -t proc -o nosuid,nodev,noexec proc "$r/proc" && proc_guard "$r/proc" || exit 111
cd / && exec "$@"      # enter.py pivot: into the root, then the node's bounding set
"""

# also dropped while setup runs: it may be in the host's network namespace
SETUP_DROPPED = ("net_admin", "net_raw", "net_bind_service")

_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive",
        "LC_ALL": "C"}


def _argv(folder: str, node: str, root: str, argv: list[str], net: bool = False,
          userns_fd: int | None = None) -> list[str]:
    """``argv`` run in the node's root, confined (SETUP_SHELL); ``net``: with the host's
    network (apt fetching packages), else in a network namespace of its own (no network);
    ``userns_fd``: as root of the node's user namespace (joined once in the root)."""
    caps = ",".join("-" + c for c in (*DROPPED_CAPS, *SETUP_DROPPED))
    spaces = ["--pid", "--fork", "--kill-child", "--mount", "--uts", "--ipc",
              "--propagation", "private", *([] if net else ["--net"])]
    into = [*enter.argv_prefix(), "pivot", root, "/", caps,
            "-" if userns_fd is None else str(userns_fd), "--", *argv]
    return cgroups.join_argv(folder, node, ["unshare", *spaces, "--", "sh", "-c", SETUP_SHELL,
                                            root, "host" if net else "none", caps, *into])


def in_root(folder: str, node: str, root: str, argv: list[str], stdin=None,
            timeout: float = 1800, net: bool = False,
            userns_fd: int | None = None) -> subprocess.CompletedProcess:
    """Run ``argv`` in the node's root, confined as the node is (:data:`SETUP_SHELL`),
    in the node's user namespace if ``userns_fd`` names it."""
    return subprocess.run(_argv(folder, node, root, argv, net, userns_fd), stdin=stdin,
                          capture_output=True, text=True, env=_ENV, timeout=timeout,
                          pass_fds=() if userns_fd is None else (userns_fd,))


def _open_tarball(path: str):
    """The tarball as a plain tar stream (gzip, bzip2 and xz unpacked here: the image may
    lack their tools)."""
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic[:2] == b"\x1f\x8b":
        return gzip.open(path, "rb")
    if magic[:3] == b"BZh":
        return bz2.open(path, "rb")
    if magic[:6] == b"\xfd7zXZ\x00":
        return lzma.open(path, "rb")
    return open(path, "rb")


def _untar(folder: str, node: str, root: str, where: str, tarball: str,
           userns_fd: int | None, copy: bindsrc.Stream | None = None) -> tuple[int, str]:
    """Unpack ``tarball`` (or the tar stream of a bind's source, ``copy``) at ``where`` in
    the node's root with the node's own tar, confined."""
    p = subprocess.Popen(_argv(folder, node, root,
                               ["sh", "-c", 'mkdir -p "$0" && exec tar -C "$0" -xf -', where],
                               userns_fd=userns_fd),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, env=_ENV,
                         pass_fds=() if userns_fd is None else (userns_fd,))
    assert p.stdin is not None and p.stdout is not None
    try:
        with _open_tarball(tarball) if copy is None else copy as src:
            while chunk := src.read(1 << 20):
                p.stdin.write(chunk)
    except (OSError, EOFError) as e:       # a broken pipe (tar failed) or a bad archive
        err = str(e)
    else:
        err = ""
    finally:
        try:
            p.stdin.close()
        except OSError:
            pass
    out = p.stdout.read().decode(errors="replace")
    p.wait()
    if copy is not None and copy.error:    # the source changed or held wanlab's state
        return p.returncode or 1, copy.error
    return p.returncode, (out + " " + err).strip()


def _where(node: Node, what: str) -> str:
    src = node.source
    at = f"{src.file}:{src.line}: " if src.file and src.line else ""
    return f"{at}node {node.name}: {what}"


def setup(folder: str, node: Node, root: str, say: Callable[[str], None],
          userns_fd: int | None = None) -> None:
    """``tb-set-node-tarfiles`` and ``tb-set-node-rpms`` of ``node`` into its root, each
    step confined as the node is (:data:`SETUP_SHELL`), as root of its user namespace
    when ``userns_fd`` names one (the files it makes are the node's range's)."""
    for d, tarball in node.tarfiles:
        if d.startswith("="):           # a file or folder copied to exactly that path
            dest = d[1:]
            if not os.path.exists(tarball):
                raise WanlabError(_where(node, f"{tarball} (bound at {dest}) is missing"))
            say(f"node {node.name}: copying {os.path.basename(tarball)} to {dest}")
            # read beneath folder descriptors, never through a link; a portal upload's files
            # are copies in the experiment's folder (wanlab.portal.files), in the state folder
            try:
                copy = bindsrc.Stream(tarball, os.path.basename(dest),
                                      os.path.dirname(os.path.dirname(folder)),
                                      own=os.path.join(folder, "uploads"))
            except OSError as e:
                raise WanlabError(_where(node, f"copying {tarball} to {dest}: {e}")) from None
            code, out = _untar(folder, node.name, root, os.path.dirname(dest), tarball, userns_fd,
                               copy=copy)
            if code != 0:
                raise WanlabError(_where(node, f"copying {tarball} to {dest}: {out[-300:]}"))
            continue
        if not os.path.isfile(tarball):
            raise WanlabError(_where(node, f"tarfile {tarball} is not a file"))
        say(f"node {node.name}: unpacking {os.path.basename(tarball)} at {d}")
        # the node's tar, confined: a link in the layer or the archive cannot lead out, and
        # a tar the node replaced runs as the node, never as host root
        code, out = _untar(folder, node.name, root, d, tarball, userns_fd)
        if code != 0:
            raise WanlabError(_where(node, f"unpacking {tarball} at {d}: {out[-300:]}"))
    if node.packages:
        _install(folder, node, root, say, userns_fd)


# Inside the node's root (SETUP_SHELL): services stay stopped while packages install
# (policy-rc.d), then the packages ($@) with apt; staged .deb files and the policy go after.
INSTALL_SHELL = r"""trap 'rm -f /usr/sbin/policy-rc.d; rm -rf /tmp/wanlab-debs' EXIT
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d &&
apt-get -q -y --no-install-recommends install -- "$@" && apt-get clean
"""


def _install(folder: str, node: Node, root: str, say: Callable[[str], None],
             userns_fd: int | None) -> None:
    run = functools.partial(in_root, userns_fd=userns_fd)     # each step in its userns
    names = [p for p in node.packages if not p.endswith(".deb")]
    debs = [p for p in node.packages if p.endswith(".deb")]
    args = []
    for i, p in enumerate(debs):
        if not os.path.isfile(p):
            raise WanlabError(_where(node, f"package file {p} is not a file"))
        # staged from inside the root: a link the node planted cannot lead to a host path
        with open(p, "rb") as f:
            r = run(folder, node.name, root, ["sh", "-c", 'mkdir -p /tmp/wanlab-debs && '
                               'cat > "/tmp/wanlab-debs/$0"', f"{i}.deb"], stdin=f)
        if r.returncode != 0:
            raise WanlabError(_where(node, f"staging {p}: {r.stderr.strip()[-300:]}"))
        args.append(f"/tmp/wanlab-debs/{i}.deb")
    say(f"node {node.name}: installing {', '.join(node.packages)}")
    # the package lists, for packages by name (a .deb given by path needs none)
    # apt fetches from the host's mirror: only then does setup keep the host's network
    net = bool(names)
    r = run(folder, node.name, root, ["apt-get", "-q", "update"], net=True) \
        if names else None
    if r is not None and r.returncode != 0:
        raise WanlabError(_where(node, f"apt-get update in its root failed: "
                                 f"{r.stdout.strip()[-300:]}"))
    missing = [p for p in names
               if run(folder, node.name, root, ["apt-cache", "show", "--", p]).returncode]
    if missing:
        raise WanlabError(_where(node, f"tb-set-node-rpms: no Debian package "
                                 f"{', '.join(missing)} (and no .deb file given by path)"))
    r = run(folder, node.name, root, ["sh", "-c", INSTALL_SHELL, "install", *names, *args],
                net=net)
    if r.returncode != 0:
        raise WanlabError(_where(node, f"installing {', '.join(node.packages)}: "
                                 f"{(r.stdout + r.stderr).strip()[-300:]}"))


# -- inside the node: the holder switches into the root ----------------------------------

# Run by ``sh -c`` in place of the host-file-system confinement (nodes.NODE_SHELL), with
# the same arguments: $0 node, $1 state folder, $2 the node's folder, $3 setpriv's
# --bounding-set, $4 wanlab's binaries, then the command: ``enter.py pivot`` (nodes), which
# switches into the root, joins the experiment's user namespace ($WANLAB_USERNS_FD, passed
# to it) and drops the capabilities before any file of the node runs. Its root is
# <experiment folder>/roots/<node> (the node's folder is <experiment folder>/nodes/<node>).
# In a user namespace, the node's folder and its /run are its root's (host uid
# $WANLAB_UID_BASE); what its holder makes here as host root (mount points) stays host
# root's, which the node cannot change.
IMAGE_SHELL = PROC_GUARD + r"""node=$0 home=$1 dir=$2 caps=$3 tools=$4; shift 4
root=${dir%/nodes/*}/roots/$node
uns=${WANLAB_USERNS_FD-} base=${WANLAB_UID_BASE-0}; unset WANLAB_USERNS_FD WANLAB_UID_BASE
[ -n "$uns" ] || base=0
# Paths in the root are the node's: a link it left in its layer would lead a mount's source,
# a mkdir or a touch to a host path. No process of the node runs while its holder starts
# (they all ended with the last one), so each such path is checked once, resolved.
inside() {
  case "$(realpath -m -- "$1")" in "$root"/*) return 0;; esac
  return 1
}
cd / && umask 022 || exit 111      # mount points the node (its range's root) passes through
for p in proc sys dev run etc "${dir#/}" "${tools#/}"; do
  inside "$root/$p" || { echo "wanlab: /$p in the node's root leads out of it"; exit 111; }
done
hostname "$node" || exit 111
ns=$(ip netns identify) || exit 111
u=$(stat -c %u "$dir") || exit 111
if [ "$u" -lt "$base" ] || [ "$u" -ge $((base + 65536)) ]; then
  chown "$base:$base" "$dir" || exit 111; fi
mount --make-rslave / && mount --bind "$root" "$root" || exit 111
mount -t proc -o nosuid,nodev,noexec proc "$root/proc" &&
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$root/sys" || exit 111
mount -t tmpfs -o mode=0755,size=1m,nosuid,noexec wanlab-dev "$root/dev" || exit 111
for d in null zero full random urandom tty; do
  touch "$root/dev/$d" && mount --bind "/dev/$d" "$root/dev/$d" || exit 111
done
if [ -c /dev/net/tun ]; then
  mkdir "$root/dev/net" && touch "$root/dev/net/tun" &&
  mount --bind /dev/net/tun "$root/dev/net/tun" || exit 111
fi
mkdir "$root/dev/pts" "$root/dev/shm" && ln -s pts/ptmx "$root/dev/ptmx" &&
ln -s /proc/self/fd "$root/dev/fd" && ln -s /proc/self/fd/0 "$root/dev/stdin" &&
ln -s /proc/self/fd/1 "$root/dev/stdout" && ln -s /proc/self/fd/2 "$root/dev/stderr" &&
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts" &&
mount -t tmpfs -o mode=1777,size=64m,nosuid,nodev shm "$root/dev/shm" &&
mount -t tmpfs -o "mode=0755,size=16m,nosuid,nodev,uid=$base,gid=$base" wanlab-run \
  "$root/run" || exit 111
if [ -n "$ns" ] && [ -d "/etc/netns/$ns" ]; then
  for e in "/etc/netns/$ns"/*; do
    [ -e "$e" ] || continue
    t="$root/etc/${e##*/}"
    inside "$t" || { echo "wanlab: /etc/${e##*/} in the node's root leads out of it"; exit 111; }
    if [ -d "$e" ]; then mkdir -p "$t"; else [ -e "$t" ] || touch "$t"; fi &&
    mount --bind "$e" "$t" || exit 111
  done
fi
if [ -d "$root/etc/frr/run" ] && inside "$root/etc/frr/run"; then
  mkdir -p "$root/run/frr" && mount --bind "$root/etc/frr/run" "$root/run/frr" || exit 111
fi
mkdir -p "$root$dir" "$root$tools" && mount --bind "$dir" "$root$dir" &&
mount --bind "$tools" "$root$tools" && mount -o remount,bind,ro "$root$tools" || exit 111
proc_guard "$root/proc" &&
mount --bind "$root/proc/sys/net" "$root/proc/sys/net" &&
mount -o remount,bind,rw "$root/proc/sys/net" || exit 111
cd / && exec "$@"      # enter.py pivot: into the root, then the node's bounding set
"""
