"""Files a portal upload may use: those uploaded with it, and its project's own store.

A description uploaded through the portal never names a host path. Where a root's
description names a tarball or a ``.deb`` by path (``tarfiles``, ``tb-set-node-tarfiles``,
``packages``, ``tb-set-node-rpms``), an upload names

* ``NAME``: a file sent with the description (``files: {NAME: BASE64}`` of the create
  request), or
* ``project:NAME``: a file of the project's store (``PUT /api/projects/P/files/NAME``).

A name is a plain file name (:func:`check_name`: no ``/``, no ``..``, a safe character set,
at most :data:`NAME_MAX` characters). The parse child reads the description in a temporary
folder of its own, so a front end turns ``NAME`` into ``<that folder>/NAME``; any other
path (absolute, or leading out with ``..``) names a host file and is refused by
:mod:`wanlab.portal.hostres` with words that do not depend on the path.

:class:`Attached` maps each reference to its place in the experiment's own folder,
``<folder>/uploads/given/NAME`` or ``<folder>/uploads/project/NAME``, and :meth:`Attached.save`
writes them there (root-only, each created with ``O_EXCL | O_NOFOLLOW`` beneath a folder
descriptor) before the life cycle sees the description; a project's file is copied, so a
later change to the store does not change the experiment. Setup then unpacks them in the
node's root, confined as the node is (:mod:`wanlab.backends.emulate.rootfs`). Every file
sent with the description is kept there, named or not: the link form may switch a direction
to a capacity trace or a schedule among them later (:func:`kept`, :func:`resolver`).

The store of project P lives under the portal's state, ``<home>/portal/files/P/NAME``
(folders 0700, files 0600, root's), at most :data:`STORE_FILES` files and
:data:`STORE_BYTES` bytes a project.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import fcntl
import os
import re
import secrets
import shutil
import stat
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wanlab.errors import SpecError, WanlabError
from wanlab.portal.projects import check_name as check_project
from wanlab.store.db import make_private_dir

NAME_MAX = 100
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
PROJECT_PREFIX = "project:"

FILES_MAX = 16                   # files sent with one description
FILE_BYTES = 16 << 20            # one file sent with it
UPLOAD_BYTES = 32 << 20          # all of them together
STORE_FILES = 64                 # files in a project's store
STORE_FILE_BYTES = 32 << 20      # one of them
STORE_BYTES = 256 << 20          # all of them

SUBFOLDER = "uploads"            # in the experiment's folder: given/NAME, project/NAME


class FileError(WanlabError):
    """A file name or a file of an upload or a store that is not acceptable."""


class FileNotFound(FileError):
    """No such file in a project's store (404)."""


def check_name(name: Any, what: str = "file name") -> str:
    """A plain file name: letters, digits, ``.``, ``_``, ``+``, ``-``; no ``/``, no ``..``."""
    if not isinstance(name, str) or not name or len(name) > NAME_MAX \
            or not _NAME.match(name) or ".." in name:
        shown = name[:NAME_MAX + 1] if isinstance(name, str) else name
        raise FileError(f"{what} {shown!r}: a plain file name is a letter or digit, then "
                        f"letters, digits, '.', '_', '+' or '-' (no '/', no '..'; at most "
                        f"{NAME_MAX})")
    return name


def decode(files: dict[str, str]) -> dict[str, bytes]:
    """The files sent with a description (name -> base64), checked and decoded."""
    if len(files) > FILES_MAX:
        raise FileError(f"{len(files)} files: an upload carries at most {FILES_MAX}")
    out, total = {}, 0
    for name, text in files.items():
        check_name(name, "uploaded file")
        if len(text) > (FILE_BYTES // 3 + 1) * 4 + 4:
            raise FileError(f"uploaded file {name}: larger than the {FILE_BYTES} bytes a "
                            f"file may have")
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise FileError(f"uploaded file {name}: not base64") from None
        if len(data) > FILE_BYTES:
            raise FileError(f"uploaded file {name}: {len(data)} bytes, larger than the "
                            f"{FILE_BYTES} a file may have")
        total += len(data)
        if total > UPLOAD_BYTES:
            raise FileError(f"the uploaded files are larger than the {UPLOAD_BYTES} bytes an "
                            f"upload may carry")
        out[name] = data
    return out


# -- files written beneath a folder's descriptor ---------------------------------------
def _open_dir(path: str) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def _subdir(dfd: int, name: str) -> int:
    """``name`` beneath ``dfd``, made root-only if missing; never through a link."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=dfd)
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                 dir_fd=dfd)
    os.fchmod(fd, 0o700)
    return fd


def _write_new(dfd: int, name: str, data: bytes) -> None:
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=dfd)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _read(dfd: int, name: str, limit: int) -> bytes:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise FileError(f"{name} is not a file")
        return f.read(limit + 1)[:limit]


# -- a project's store -----------------------------------------------------------------
def store_root(home: str) -> str:
    return os.path.join(home, "portal", "files")


@contextlib.contextmanager
def _store(home: str, project: str, create: bool = False) -> Iterator[int | None]:
    """The project's store folder as a descriptor (None when it has none yet), locked."""
    check_project("project", project)
    root = store_root(home)
    if create:
        make_private_dir(root)
    try:
        rfd = _open_dir(root)
    except FileNotFoundError:
        yield None
        return
    try:
        try:
            pfd = _subdir(rfd, project) if create else os.open(
                project, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                dir_fd=rfd)
        except FileNotFoundError:
            yield None
            return
        try:
            fcntl.flock(pfd, fcntl.LOCK_EX)
            yield pfd
        finally:
            os.close(pfd)
    finally:
        os.close(rfd)


def _entries(pfd: int) -> list[dict[str, Any]]:
    out = []
    for name in sorted(os.listdir(pfd)):
        if name.startswith("."):
            continue
        st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode):
            out.append({"name": name, "size": st.st_size, "modified": st.st_mtime})
    return out


def store_list(home: str, project: str) -> list[dict[str, Any]]:
    """The project's files: name, size, modified."""
    with _store(home, project) as pfd:
        return [] if pfd is None else _entries(pfd)


def store_put(home: str, project: str, name: str, data: bytes) -> dict[str, Any]:
    """Put (or replace) file ``name`` in the project's store, within its bounds."""
    check_name(name)
    if len(data) > STORE_FILE_BYTES:
        raise FileError(f"{name}: {len(data)} bytes, larger than the {STORE_FILE_BYTES} a "
                        f"stored file may have")
    with _store(home, project, create=True) as pfd:
        assert pfd is not None
        have = {e["name"]: e["size"] for e in _entries(pfd)}
        if name not in have and len(have) >= STORE_FILES:
            raise FileError(f"project {project} has {len(have)} files: at most "
                            f"{STORE_FILES}; remove one first")
        used = sum(have.values()) - have.get(name, 0) + len(data)
        if used > STORE_BYTES:
            raise FileError(f"project {project}'s files would take {used} bytes: at most "
                            f"{STORE_BYTES}; remove some first")
        tmp = f".new-{secrets.token_hex(8)}"
        _write_new(pfd, tmp, data)
        try:
            os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
        except BaseException:
            os.unlink(tmp, dir_fd=pfd)
            raise
    return {"name": name, "size": len(data)}


def store_get(home: str, project: str, name: str) -> bytes:
    check_name(name)
    with _store(home, project) as pfd:
        try:
            if pfd is not None:
                return _read(pfd, name, STORE_FILE_BYTES)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ELOOP):    # a link: none of ours
                raise
    raise FileNotFound(f"no file {name!r} in project {project}'s store")


def store_delete(home: str, project: str, name: str) -> None:
    check_name(name)
    with _store(home, project) as pfd:
        try:
            if pfd is not None:
                os.unlink(name, dir_fd=pfd)
                return
        except FileNotFoundError:
            pass
    raise FileNotFound(f"no file {name!r} in project {project}'s store")


def store_remove_project(home: str, project: str) -> None:
    """Remove a removed project's store (beneath the store's folder, never through a link)."""
    check_project("project", project)
    try:
        rfd = _open_dir(store_root(home))
    except FileNotFoundError:
        return
    try:
        shutil.rmtree(project, dir_fd=rfd)
    except FileNotFoundError:
        pass
    finally:
        os.close(rfd)


# -- the files of one upload -----------------------------------------------------------
@dataclass
class Attached:
    """The files one upload may use: ``given`` (sent with it) and its project's store;
    :meth:`path` maps a reference the parse child made to its place in the experiment's
    folder, :meth:`save` writes what was referenced there."""
    home: str
    project: str
    base: str                         # the parse child's folder: where NAME resolved to
    folder: str                       # the experiment's folder
    given: dict[str, bytes]
    used: dict[tuple[str, str], bytes] = field(default_factory=dict)

    def path(self, ref: str) -> str | None:
        """The experiment's copy of ``ref`` (a path the parse child resolved); None when
        it names no uploaded or stored file (a host path: the caller refuses it)."""
        if os.path.dirname(ref) != self.base:
            return None
        word = os.path.basename(ref)
        if word.startswith(PROJECT_PREFIX):
            name = check_name(word[len(PROJECT_PREFIX):], "project file")
            if ("project", name) not in self.used:
                self.used[("project", name)] = store_get(self.home, self.project, name)
            return os.path.join(self.folder, SUBFOLDER, "project", name)
        name = check_name(word)
        if name not in self.given:
            raise FileError(f"{name} was not uploaded with the description (send it in "
                            f"'files', or name a file of the project's store as "
                            f"{PROJECT_PREFIX}NAME)")
        self.used[("given", name)] = self.given[name]
        return os.path.join(self.folder, SUBFOLDER, "given", name)

    def shown(self, text: str) -> str:
        """``text`` (an error) naming the experiment's copies as the description does."""
        up = os.path.join(self.folder, SUBFOLDER)
        return text.replace(up + "/given/", "").replace(up + "/project/", PROJECT_PREFIX)

    def unused(self, read: Collection[str] = ()) -> list[str]:
        """Files sent with it that the description names nowhere (``read``: the names it
        read as traces or schedules)."""
        return sorted(set(self.given) - {n for k, n in self.used if k == "given"} - set(read))

    def save(self) -> None:
        """Write the referenced files, and every file sent with it, into the experiment's
        folder (root-only, new files only); a folder left by an earlier attempt is
        replaced."""
        for name, data in self.given.items():
            self.used.setdefault(("given", name), data)
        if not self.used:
            return
        make_private_dir(self.folder)
        ffd = _open_dir(self.folder)
        try:
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(SUBFOLDER, dir_fd=ffd, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    raise FileError(f"{SUBFOLDER} in the experiment's folder is not a folder")
                shutil.rmtree(SUBFOLDER, dir_fd=ffd)
            ufd = _subdir(ffd, SUBFOLDER)
            try:
                for (kind, name), data in sorted(self.used.items()):
                    kfd = _subdir(ufd, kind)
                    try:
                        _write_new(kfd, name, data)
                    finally:
                        os.close(kfd)
            finally:
                os.close(ufd)
        finally:
            os.close(ffd)

    def discard(self) -> None:
        """Remove what :meth:`save` wrote (a create that failed before storing anything)."""
        if not self.used:
            return
        with contextlib.suppress(OSError):
            ffd = _open_dir(self.folder)
            try:
                with contextlib.suppress(FileNotFoundError):
                    shutil.rmtree(SUBFOLDER, dir_fd=ffd)
            finally:
                os.close(ffd)
            with contextlib.suppress(OSError):
                os.rmdir(self.folder)          # only when empty: nothing else of it there


# -- an experiment's kept files, at run time -------------------------------------------
def kept(folder: str) -> list[str]:
    """The files kept in experiment folder ``folder`` as a description names them:
    ``NAME`` (sent with it) and ``project:NAME`` (copied from the project's store)."""
    out = []
    for kind, prefix in (("given", ""), ("project", PROJECT_PREFIX)):
        where = os.path.join(folder, SUBFOLDER, kind)
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            for e in os.scandir(where):
                if e.is_file(follow_symlinks=False):
                    out.append(prefix + e.name)
    return sorted(out)


def kept_given(folder: str) -> dict[str, str]:
    """The files sent with the experiment in ``folder`` and kept there, as an upload
    carries them (name -> base64): a modify reads its description beside them."""
    out = {}
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        gfd = _open_dir(os.path.join(folder, SUBFOLDER, "given"))
        try:
            for name in sorted(os.listdir(gfd)):
                with contextlib.suppress(FileError, OSError):
                    out[name] = base64.b64encode(_read(gfd, name, FILE_BYTES)).decode()
        finally:
            os.close(gfd)
    return out


def resolver(folder: str):
    """How a run-time request of a portal user names a trace or schedule file: ``NAME`` or
    ``project:NAME`` of those :func:`kept` for the experiment in ``folder``, never a path
    (for :func:`wanlab.frontends.traces.confined_here`)."""
    def resolve(word: str, field: str) -> Path:
        kind, name = ("project", word[len(PROJECT_PREFIX):]) \
            if word.startswith(PROJECT_PREFIX) else ("given", word)
        try:
            check_name(name)
        except FileError as e:
            raise SpecError(f"{e}; name a file uploaded with the experiment", field=field
                            ) from None
        p = os.path.join(folder, SUBFOLDER, kind, name)
        try:
            ok = stat.S_ISREG(os.lstat(p).st_mode)
        except OSError:
            ok = False
        if not ok:
            raise SpecError(f"no file {word!r} was uploaded with this experiment (the "
                            f"files it keeps: {', '.join(kept(folder)) or 'none'})",
                            field=field)
        return Path(p)
    return resolve
