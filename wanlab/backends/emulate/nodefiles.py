"""Copying a node's files from the host without following its links.

A node (root inside its confinement) owns its folder (``nodes/<node>/``) and its writable
layer, and may change them while wanlab reads them: replace a folder by a link, or swap the
two at once (``renameat2`` with ``RENAME_EXCHANGE``) between a check and an open. So nothing
here resolves a path inside the node's tree: the walk holds a descriptor of each folder and
opens one name at a time beneath it with ``O_NOFOLLOW`` (a link is never followed, ``..``
never used), and checks that what it opened is what it listed. What it reads cannot leave
the tree it started from.

Writing goes the same way: wanlab appends a node's output (its start command's, FRR's) to
files in the node's folder, where the node may have put a link to a host file, a FIFO or a
hard link in their place; :func:`open_output` opens the name beneath the folder's
descriptor, never through a link, and replaces anything but a plain file of its own.

Regular files are copied with their holes (``SEEK_DATA``/``SEEK_HOLE``): a sparse file stays
sparse. :func:`copy_tree` is used by ``wanlab export`` (results, readable by others) and by
``image save`` (a node's layer, with owners, times, extended attributes, links and overlay
whiteouts kept).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20


@dataclass
class Copied:
    """What a copy did: files copied, and those it left out (relative paths, why)."""

    files: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)


# rel path, its lstat -> the mode to give the copy (None: leave it out)
ModeOf = Callable[[str, os.stat_result], "int | None"]
IdOf = Callable[[int], int]         # an owner's uid or gid -> the copy's


def _same_id(i: int) -> int:
    return i


def copy_data(src: int, dst: int, size: int) -> None:
    """The first ``size`` bytes of ``src`` to ``dst`` (a new file), holes kept as holes."""
    pos = 0
    while pos < size:
        try:
            start = os.lseek(src, pos, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:       # only a hole is left
                break
            raise
        if start >= size:
            break
        end = min(os.lseek(src, start, os.SEEK_HOLE), size)
        at = start
        while at < end:
            data = os.pread(src, min(_CHUNK, end - at), at)
            if not data:                     # the file shrank while read
                end = at
                break
            os.pwrite(dst, data, at)
            at += len(data)
        pos = end
    os.ftruncate(dst, size)


def open_output(folder: str, name: str, mode: int = 0o644,
                owner: tuple[int, int] | None = None) -> int:
    """A descriptor appending to ``name`` in ``folder`` (a node's folder, which the node
    may change): opened beneath the folder's descriptor with ``O_NOFOLLOW``; a link, FIFO,
    device, hard link or anything else but a single-link regular file there is removed and
    a new file made (``O_EXCL``: never through a link planted since). ``mode`` and, when
    given, ``owner`` (uid, gid) are set on the descriptor."""
    dfd = os.open(folder, _DIR)
    try:
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = None
        try:
            fd = os.open(name, flags | os.O_CREAT, mode, dir_fd=dfd)
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                os.close(fd)
                fd = None
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.ENOTDIR,
                               errno.EOPNOTSUPP, errno.ENODEV, errno.EACCES, errno.ETXTBSY):
                raise
        if fd is None:              # not a plain file of ours: replaced by a new one
            try:
                os.unlink(name, dir_fd=dfd)
            except IsADirectoryError:
                raise OSError(errno.EISDIR, f"{name} in {folder} is a folder") from None
            fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, mode, dir_fd=dfd)
        os.set_blocking(fd, True)
        if owner is not None:
            os.fchown(fd, *owner)
        os.fchmod(fd, mode)
        return fd
    finally:
        os.close(dfd)


def read_small(folder: str, name: str, limit: int = 4096) -> str:
    """At most ``limit`` bytes of the regular file ``name`` in ``folder`` (a node's), read
    beneath the folder's descriptor, never through a link; OSError if it is none."""
    dfd = os.open(folder, _DIR)
    try:
        fd = os.open(name, _FILE, dir_fd=dfd)
    finally:
        os.close(dfd)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"{name} is not a regular file")
        return f.read(limit).decode(errors="replace")


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def copy_tree(src: str, dest: str, *, file_mode: ModeOf, dir_mode: ModeOf,
              exact: bool = False, skip_top: tuple[str, ...] = (),
              ids: IdOf = _same_id) -> Copied:
    """Copy the tree at ``src`` into the new folder ``dest`` without following a link.

    ``file_mode``/``dir_mode`` give each regular file or folder (by its path relative to
    ``src`` and its status) the mode of its copy, or None to leave it out. Without
    ``exact`` (an export) only folders and regular files with a single link are copied.
    With ``exact`` (a layer) symbolic links, hard links within the tree, FIFOs and overlay
    whiteouts (character device 0:0) are kept too, and so are owners, times and extended
    attributes; ``ids`` maps each owner (and a file capability's root) to the copy's (a
    layer stored in a user namespace's range, saved 0-based). ``skip_top``: names left
    out at the top.
    """
    out = Copied()
    sfd = os.open(src, _DIR)
    try:
        os.mkdir(dest, 0o700)
        dfd = os.open(dest, _DIR)
        try:
            st = os.fstat(sfd)
            walk = _Walk(out, file_mode, dir_mode, exact, dfd, ids)
            walk.dir(sfd, dfd, "", skip_top)
            _finish(dfd, st, dir_mode("", st) or 0o755, exact, sfd, ids)
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)
    return out


@dataclass
class _Walk:
    out: Copied
    file_mode: ModeOf
    dir_mode: ModeOf
    exact: bool
    top: int                        # the copy's top folder (wanlab's own: its paths are safe)
    ids: IdOf = _same_id
    links: dict[tuple[int, int], str] = field(default_factory=dict)

    def dir(self, sfd: int, dfd: int, rel: str, skip: tuple[str, ...]) -> None:
        for name in sorted(os.listdir(sfd)):
            if name not in skip:
                self.entry(sfd, dfd, name, f"{rel}/{name}" if rel else name)

    def skip(self, path: str, why: str) -> None:
        self.out.skipped.append((path, why))

    def entry(self, sfd: int, dfd: int, name: str, path: str) -> None:
        try:
            st = os.stat(name, dir_fd=sfd, follow_symlinks=False)
        except FileNotFoundError:
            return                          # gone since listed
        if stat.S_ISDIR(st.st_mode):
            self.folder(sfd, dfd, name, path, st)
        elif stat.S_ISREG(st.st_mode):
            self.file(sfd, dfd, name, path, st)
        elif not self.exact:
            self.skip(path, "not a regular file")
        elif stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(name, dir_fd=sfd), name, dir_fd=dfd)
            _finish_entry(dfd, name, st, self.ids)
        elif stat.S_ISFIFO(st.st_mode) or (stat.S_ISCHR(st.st_mode) and st.st_rdev == 0):
            os.mknod(name, stat.S_IFMT(st.st_mode) | 0o600, st.st_rdev, dir_fd=dfd)
            _finish_entry(dfd, name, st, self.ids)    # a FIFO, or an overlay whiteout
        else:
            self.skip(path, "a device or socket")

    def folder(self, sfd: int, dfd: int, name: str, path: str, st: os.stat_result) -> None:
        mode = self.dir_mode(path, st)
        if mode is None:
            return self.skip(path, "left out")
        try:
            child = os.open(name, _DIR, dir_fd=sfd)
        except OSError:                     # replaced by a link (or gone) since listed
            return self.skip(path, "changed while copied")
        try:
            if not _same(os.fstat(child), st):
                return self.skip(path, "changed while copied")
            os.mkdir(name, 0o700, dir_fd=dfd)
            cdf = os.open(name, _DIR, dir_fd=dfd)
            try:
                self.dir(child, cdf, path, ())
                _finish(cdf, st, mode, self.exact, child, self.ids)
            finally:
                os.close(cdf)
        finally:
            os.close(child)

    def file(self, sfd: int, dfd: int, name: str, path: str, st: os.stat_result) -> None:
        mode = self.file_mode(path, st)
        if mode is None:
            return self.skip(path, "left out")
        if st.st_nlink != 1:
            if not self.exact:
                return self.skip(path, "a hard link")
            first = self.links.get((st.st_dev, st.st_ino))
            if first is not None:           # a hard link within the layer: so is the copy
                os.link(first, path, src_dir_fd=self.top, dst_dir_fd=self.top,
                        follow_symlinks=False)
                return None
        try:
            ifd = os.open(name, _FILE, dir_fd=sfd)
        except OSError:
            return self.skip(path, "changed while copied")
        try:
            now = os.fstat(ifd)
            if not stat.S_ISREG(now.st_mode) or not _same(now, st) or \
                    (not self.exact and now.st_nlink != 1):
                return self.skip(path, "changed while copied")
            ofd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW |
                          os.O_CLOEXEC, 0o600, dir_fd=dfd)
            try:
                copy_data(ifd, ofd, now.st_size)
                _finish(ofd, now, mode, self.exact, ifd, self.ids)
            finally:
                os.close(ofd)
        finally:
            os.close(ifd)
        if self.exact and st.st_nlink != 1:
            self.links[(st.st_dev, st.st_ino)] = path
        self.out.files += 1
        return None


def _finish(fd: int, st: os.stat_result, mode: int, exact: bool, src: int,
            ids: IdOf = _same_id) -> None:
    """Owner, extended attributes, mode and times of a copied file or folder."""
    if exact:
        os.fchown(fd, ids(st.st_uid), ids(st.st_gid))
        for key in _xattrs(src):
            try:
                value = os.getxattr(src, key)
                if key == "security.capability":
                    value = _caps_root(value, ids)
                os.setxattr(fd, key, value)
            except OSError:
                pass                        # one the destination cannot hold
    os.fchmod(fd, mode)
    if exact:
        os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))


def _caps_root(value: bytes, ids: IdOf) -> bytes:
    """A file capability (``security.capability``) with its root id mapped: a version 3
    one (set in a user namespace) names the host uid of that namespace's root."""
    if len(value) == 24 and value[3] == 0x03:
        root = int.from_bytes(value[20:24], "little")
        return value[:20] + ids(root).to_bytes(4, "little")
    return value


def _finish_entry(dfd: int, name: str, st: os.stat_result, ids: IdOf = _same_id) -> None:
    """Owner and times of a copied link, FIFO or whiteout (its mode: FIFOs and whiteouts)."""
    os.chown(name, ids(st.st_uid), ids(st.st_gid), dir_fd=dfd, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        os.chmod(name, stat.S_IMODE(st.st_mode), dir_fd=dfd)     # our own copy: no link
    os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=dfd, follow_symlinks=False)


def _xattrs(fd: int) -> list[str]:
    try:
        return os.listxattr(fd)
    except OSError:
        return []
