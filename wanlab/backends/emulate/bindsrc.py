"""A containerlab bind's source, read for its copy into a node's root without following a link.

A bind (``binds: [SRC:DEST]``) is a copy: swap-in reads SRC on the host, as root, and
feeds it to the node's own ``tar`` on a pipe (:mod:`wanlab.backends.emulate.rootfs`). The
front end checked SRC when it read the topology (inside the lab's folder, no link leading
out, not wanlab's state); the copy happens later (each swap-in that redoes setup), and
whoever owns the lab's folder may have changed it since. So SRC is opened here one name at
a time from ``/`` with ``O_NOFOLLOW`` (a link anywhere on its path is refused, not
followed), and its tree is walked beneath folder descriptors: links inside it are copied
as links (in the node they lead into the node's own root), devices, FIFOs and sockets are
left out, and a folder that is wanlab's state (the state folder, ``/etc/netns``,
``/run/netns``) is refused wherever it is met.
"""

from __future__ import annotations

import os
import stat
import tarfile
import threading
from typing import IO

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
DEFAULT_HOME = "/var/lib/wanlab"
NETNS_DIRS = ("/etc/netns", "/run/netns")


class BindError(OSError):
    """The source cannot be copied as it was checked (a link on its path, wanlab's state)."""


def state_folders(home: str) -> list[str]:
    """The folders no bind may copy, be inside or hold: the state folder ``home``, the
    default one, and the namespaces' ``/etc/netns`` and ``/run/netns``."""
    return [home, DEFAULT_HOME, *NETNS_DIRS]


def _ids(paths: list[str]) -> set[tuple[int, int]]:
    out = set()
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        out.add((st.st_dev, st.st_ino))
    return out


def _key(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def open_source(path: str, refused: set[tuple[int, int]],
                own: str | None = None) -> tuple[int, os.stat_result]:
    """A descriptor of ``path`` (absolute) and its status, every name on the way opened
    beneath the one before with ``O_NOFOLLOW``; BindError for a link, or for wanlab's
    state on the way (unless ``path`` is inside ``own``: the experiment's own copies of
    a portal upload's files)."""
    if not os.path.isabs(path):
        raise BindError(f"{path}: not an absolute path")
    parts = [p for p in path.split("/") if p]
    mine = own is not None and path.startswith(own.rstrip("/") + "/")
    fd = os.open("/", _DIR)
    try:
        for i, part in enumerate(parts):
            if part in (".", ".."):
                raise BindError(f"{path}: '{part}' in the path")
            st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise BindError(f"{path}: /{'/'.join(parts[:i + 1])} is a symbolic link")
            last = i == len(parts) - 1
            if not last and not stat.S_ISDIR(st.st_mode):
                raise BindError(f"{path}: /{'/'.join(parts[:i + 1])} is not a folder")
            if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                raise BindError(f"{path}: neither a file nor a folder")   # never opened
            flags = _DIR if stat.S_ISDIR(st.st_mode) else _FILE
            nfd = os.open(part, flags, dir_fd=fd)
            now = os.fstat(nfd)
            os.close(fd)
            fd = nfd
            if _key(now) != _key(st):
                raise BindError(f"{path}: changed while it was opened")
            if _key(now) in refused and not mine:
                raise BindError(f"{path}: wanlab's state is never copied into a node")
        st = os.fstat(fd)
        out, fd = fd, -1
        return out, st
    finally:
        if fd >= 0:
            os.close(fd)


class _Tar:
    def __init__(self, tf: tarfile.TarFile, refused: set[tuple[int, int]]):
        self.tf, self.refused = tf, refused

    def info(self, name: str, st: os.stat_result, kind: bytes) -> tarfile.TarInfo:
        t = tarfile.TarInfo(name)
        t.type, t.mode, t.mtime = kind, stat.S_IMODE(st.st_mode), int(st.st_mtime)
        t.uid = t.gid = 0
        t.uname = t.gname = "root"
        return t

    def add(self, fd: int, st: os.stat_result, name: str) -> None:
        if stat.S_ISDIR(st.st_mode):
            if _key(st) in self.refused:
                raise BindError(f"{name}: wanlab's state is never copied into a node")
            self.tf.addfile(self.info(name, st, tarfile.DIRTYPE))
            for entry in sorted(os.listdir(fd)):
                self.entry(fd, entry, f"{name}/{entry}")
        else:
            t = self.info(name, st, tarfile.REGTYPE)
            t.size = st.st_size
            with os.fdopen(os.dup(fd), "rb") as f:
                self.tf.addfile(t, f)

    def entry(self, dfd: int, entry: str, name: str) -> None:
        try:
            st = os.stat(entry, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return                          # gone since listed
        if stat.S_ISLNK(st.st_mode):        # a link stays a link: it leads into the node's root
            t = self.info(name, st, tarfile.SYMTYPE)
            t.linkname = os.readlink(entry, dir_fd=dfd)
            self.tf.addfile(t)
            return
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            return                          # devices, FIFOs, sockets: not copied
        fd = os.open(entry, _DIR if stat.S_ISDIR(st.st_mode) else _FILE, dir_fd=dfd)
        try:
            now = os.fstat(fd)
            if _key(now) != _key(st) or stat.S_IFMT(now.st_mode) != stat.S_IFMT(st.st_mode):
                raise BindError(f"{name}: changed while it was copied")
            self.add(fd, now, name)
        finally:
            os.close(fd)


class Stream:
    """A tar stream (:attr:`reader`) of a bind's source, written by a thread; after the
    reader is drained, :attr:`error` says why it stopped short (None: complete)."""

    def __init__(self, path: str, name: str, home: str, own: str | None = None):
        refused = _ids(state_folders(home))
        fd, st = open_source(path, refused, own)  # refused here, before any tar runs
        r, w = os.pipe()
        self.reader: IO[bytes] = os.fdopen(r, "rb")
        self.error: str | None = None

        def write() -> None:
            try:
                with os.fdopen(w, "wb") as out, tarfile.open(fileobj=out, mode="w|") as tf:
                    _Tar(tf, refused).add(fd, st, name)
            except (OSError, tarfile.TarError) as e:
                self.error = str(e)
            finally:
                os.close(fd)
        self.thread = threading.Thread(target=write, daemon=True)
        self.thread.start()

    def __enter__(self) -> IO[bytes]:
        return self.reader

    def __exit__(self, *exc: object) -> None:
        self.reader.close()
        self.thread.join(timeout=5)
