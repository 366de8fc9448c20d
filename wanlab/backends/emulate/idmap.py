"""Image layers in an experiment's user namespace: idmapped mounts, and layers' owners.

A node in its experiment's user namespace is root there: uid u in the node is base + u on
the host (:mod:`wanlab.backends.emulate.userns`). The image's layers (shared, owned by the
host's uids 0..) are mounted under the node's overlay *idmapped* by that user namespace
(``open_tree`` + ``mount_setattr``): a file the layer stores as uid u reads as base + u, so
the image's root-owned files are the node's root's, and nothing else's. One such mount per
layer and experiment, read-only, in the experiment's folder (``lowers/<layer id>``, which no
node sees), recorded as an ``idmap`` resource before it is made.

The node's writable layer stores the range's uids themselves (a file the node makes is base
+ u on the host): ``layers/<node>/owner.json`` says which base, so a kept layer follows the
experiment (:func:`own_layer`: a layer made for another range, or without user namespaces,
has its owners shifted at swap-in) and ``image save`` shifts them back to 0-based
(:func:`shift_id`).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import stat

from wanlab.backends.emulate.rootfs import check_path, layer_path, mountinfo
from wanlab.errors import WanlabError
from wanlab.store.db import Resource

_libc = ctypes.CDLL(None, use_errno=True)
MNT_DETACH = 2

SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442   # the same on every arch
AT_FDCWD, AT_EMPTY_PATH, AT_RECURSIVE = -100, 0x1000, 0x8000
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC = 1, os.O_CLOEXEC
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 0x1, 0x2, 0x4
MOUNT_ATTR_IDMAP = 0x100000
UID_RANGE = 65536           # as :data:`wanlab.backends.emulate.userns.SIZE`


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def lowers_path(folder: str, layer_id: str) -> str:
    return os.path.join(folder, "lowers", layer_id)


def mount_idmapped(layer: str, target: str, userns_fd: int) -> None:
    """Mount the image layer ``layer`` at ``target`` read-only, its uids seen through the
    user namespace ``userns_fd`` (its uid 0 is the namespace's root)."""
    check_path(target)
    fd = _libc.syscall(SYS_OPEN_TREE, AT_FDCWD, layer.encode(),
                       OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)
    if fd < 0:
        e = ctypes.get_errno()
        raise WanlabError(f"image layer {layer}: open_tree: {os.strerror(e)}")
    try:
        attr = _MountAttr(MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV, 0, 0,
                          userns_fd)
        if _libc.syscall(SYS_MOUNT_SETATTR, fd, b"", AT_EMPTY_PATH, ctypes.byref(attr),
                         ctypes.sizeof(attr)) != 0:
            e = ctypes.get_errno()
            raise WanlabError(f"image layer {layer}: an idmapped mount of it is refused "
                              f"({os.strerror(e)}; its file system must allow idmapped "
                              f"mounts, or set WANLAB_USERNS=0)")
        if _libc.syscall(SYS_MOVE_MOUNT, fd, b"", AT_FDCWD, target.encode(),
                         MOVE_MOUNT_F_EMPTY_PATH) != 0:
            e = ctypes.get_errno()
            raise WanlabError(f"mounting image layer {layer} at {target}: {os.strerror(e)}")
    finally:
        os.close(fd)


def unmount_idmapped(r: Resource) -> None:
    """Unmount exactly the recorded idmapped layer: mounted at its path, idmapped."""
    for _ in range(8):
        if not any(mp == r.name and "idmapped" in opts.split(",")
                   for _d, _r, mp, opts, _t in mountinfo()):
            return
        if _libc.umount2(r.name.encode(), MNT_DETACH) != 0:
            e = ctypes.get_errno()
            if e in (errno.EINVAL, errno.ENOENT):
                return
            raise OSError(e, f"umount {r.name}: {os.strerror(e)}")


def idmapped_sources() -> set[tuple[str, str]]:
    """(major:minor, root in its file system) of each idmapped mount here: an image layer
    under some node's overlay."""
    return {(dev, root) for dev, root, _mp, opts, _t in mountinfo()
            if "idmapped" in opts.split(",")}


def fs_source(path: str) -> tuple[str, str]:
    """(major:minor, path within its file system) of the folder ``path``."""
    st = os.stat(path)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    real = os.path.realpath(path)
    best = ("/", "/")
    for d, root, mp, opts, _t in mountinfo():
        if d != dev or "idmapped" in opts.split(","):
            continue
        if (real == mp or real.startswith(mp.rstrip("/") + "/")) and len(mp) >= len(best[0]):
            best = (mp, root)
    mp, root = best
    rest = real[len(mp):].lstrip("/")
    return dev, os.path.normpath(os.path.join(root, rest)) if rest else root


def layer_base(folder: str, node: str) -> int:
    """The host uid the node's writable layer stores as the node's uid 0 (0: the host's)."""
    try:
        with open(os.path.join(layer_path(folder, node), "owner.json")) as f:
            return int(json.load(f)["base"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def shift_id(i: int, old: int, new: int) -> int:
    """Id ``i`` of a layer stored for range ``old``, as stored for range ``new``; ids
    outside the old range (wanlab's own mount points, overlay's whiteouts) stay."""
    return i - old + new if old <= i < old + UID_RANGE else i


def own_layer(folder: str, node: str, base: int) -> None:
    """Make the node's writable layer store range ``base``'s uids (0: the host's): a new
    layer's top is given to the range's root; a kept one made for another range (a swap-in
    without user namespaces) has every owner shifted. Never through a link (the layer is
    the node's; no node process runs now)."""
    lay = layer_path(folder, node)
    upper = os.path.join(lay, "upper")
    old = layer_base(folder, node)
    if old != base:
        for _d, dirs, files, dfd in os.fwalk(upper, follow_symlinks=False):
            for name in [*dirs, *files]:
                _shift_entry(name, dfd, old, base)
        _shift_entry(".", os.open(upper, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW),
                     old, base, close=True)
    st = os.lstat(upper)
    if not base <= st.st_uid < base + UID_RANGE:            # a new layer's top: host root's
        os.chown(upper, base, base, follow_symlinks=False)
    tmp = os.path.join(lay, "owner.json.new")
    with open(tmp, "w") as f:
        json.dump({"base": base}, f)
    os.replace(tmp, os.path.join(lay, "owner.json"))


def _shift_entry(name: str, dfd: int, old: int, new: int, close: bool = False) -> None:
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        uid, gid = shift_id(st.st_uid, old, new), shift_id(st.st_gid, old, new)
        if (uid, gid) != (st.st_uid, st.st_gid):
            os.chown(name, uid, gid, dir_fd=dfd, follow_symlinks=False)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o6000:
                # chown cleared the set-id bits: put them back
                os.chmod(name, stat.S_IMODE(st.st_mode), dir_fd=dfd)
    except FileNotFoundError:
        pass
    finally:
        if close:
            os.close(dfd)


def image_ids(root: str, user: str) -> tuple[int, int] | None:
    """(uid, gid) of ``user`` and its group in the node's own /etc/passwd and /etc/group,
    or None if it has none. Read beneath the root one name at a time, never through a
    link (the files are the node's)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    ids: list[int] = []
    rfd = os.open(root, flags | os.O_DIRECTORY)
    try:
        efd = os.open("etc", flags | os.O_DIRECTORY, dir_fd=rfd)
        try:
            for name, field in (("passwd", 2), ("group", 2)):
                fd = os.open(name, flags | os.O_NONBLOCK, dir_fd=efd)
                with os.fdopen(fd, "rb") as f:
                    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                        return None
                    text = f.read(1 << 20).decode(errors="replace")
                got = [int(p[field]) for p in (line.split(":") for line in text.splitlines())
                       if len(p) > field and p[0] == user and p[field].isdigit()]
                if not got or not 0 <= got[0] < UID_RANGE:
                    return None
                ids.append(got[0])
        finally:
            os.close(efd)
    except OSError:
        return None
    finally:
        os.close(rfd)
    return ids[0], ids[1]
