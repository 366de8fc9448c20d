"""Unpacking an image layer (a tar stream from outside) where it can write nothing but its
own folder.

The extractor is a child process that leaves root before it reads a byte: it enters a user
namespace of its own whose ids 0-65535 are host ids ``BASE``-``BASE+65535`` (mapped by the
parent, which alone may map a range), becomes that namespace's root (host uid ``BASE``:
no capability on the host, owning nothing there), changes its root directory to the empty
folder the layer goes to, keeps only the capabilities that set files' owners and modes, and
only then reads the tar stream from its stdin (Python's tarfile, numeric owners). So an
absolute name, a ``..``, a file written through a symlink or a hard link to a path all
resolve inside the folder; the kernel refuses device nodes in a user namespace (they are
left out, counted); a file larger than the bound is refused before it is written, and the
bound is the process's file-size limit too (a sparse file's size counts in full).

Afterwards the parent (host root) shifts the owners back by ``BASE`` (a layer's uid 0 is
the node's root), restoring the set-id bits a change of owner clears, and refuses any
owner outside the range (nothing else could have made it).

Run as a script (``python3 -I -S layer_sandbox.py DIRFD GOFD READYFD LIMIT``), it is the
child: it imports nothing of wanlab's.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

BASE = 0x5A000000          # far above login and subordinate id ranges; owns nothing
COUNT = 65536
LIMIT = 32 << 30           # bytes a layer's files may take together (sizes as declared)


class SandboxError(Exception):
    """The layer could not be unpacked (the child's own words)."""


def start(target: str, limit: int = LIMIT) -> subprocess.Popen:
    """The extractor for the empty folder ``target`` (made here, owned by the sandbox),
    running and mapped: write the layer's tar stream to its stdin, then :func:`finish`."""
    os.chown(target, BASE, BASE)
    os.chmod(target, 0o700)
    dirfd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    go_r, go_w = os.pipe()
    ready_r, ready_w = os.pipe()
    try:
        p = subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__), str(dirfd), str(go_r),
             str(ready_w), str(limit)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(dirfd, go_r, ready_w), close_fds=True, cwd="/", env={})
    finally:
        for fd in (dirfd, go_r, ready_w):
            os.close(fd)
    try:
        with os.fdopen(ready_r, "rb") as r:
            said = r.read(1)
        if said != b"u":
            raise SandboxError(_why(p, "it did not enter its user namespace"))
        for f in ("uid_map", "gid_map"):
            with open(f"/proc/{p.pid}/{f}", "w") as m:
                m.write(f"0 {BASE} {COUNT}\n")
        os.write(go_w, b"m")
    except BaseException:
        p.kill()
        p.wait()
        raise
    finally:
        os.close(go_w)
    return p


def _why(p: subprocess.Popen, default: str) -> str:
    p.kill()
    _out, err = p.communicate()
    lines = [x for x in err.decode(errors="replace").splitlines() if x.strip()]
    return lines[-1][-300:] if lines else default


def finish(p: subprocess.Popen, target: str) -> dict:
    """Wait for the extractor of ``target``, then give its files their owners; what it
    left out ({"devices": n, "owners": n})."""
    if p.stdin is not None:
        p.stdin.close()
        p.stdin = None                     # communicate() would flush it
    out, err = p.communicate()
    if p.returncode != 0:
        lines = [x for x in err.decode(errors="replace").splitlines() if x.strip()]
        raise SandboxError(lines[-1][-300:] if lines else f"exit status {p.returncode}")
    shift_owners(target)
    try:
        return json.loads(out)
    except ValueError:
        return {}


def shift_owners(top: str) -> None:
    """Owners under ``top`` from the sandbox's range down to the layer's own ids."""
    seen: set[tuple[int, int]] = set()

    def one(path: str) -> None:
        st = os.lstat(path)
        if (st.st_dev, st.st_ino) in seen:     # a hard link: moved already
            return
        seen.add((st.st_dev, st.st_ino))
        uid, gid = st.st_uid - BASE, st.st_gid - BASE
        if not (0 <= uid < COUNT and 0 <= gid < COUNT):
            raise SandboxError(f"{path} is owned by {st.st_uid}:{st.st_gid}, not by the "
                               f"sandbox")
        os.lchown(path, uid, gid)
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
            os.chmod(path, stat.S_IMODE(st.st_mode))     # chown cleared them
    one(top)
    for d, dirs, files in os.walk(top):
        for f in dirs + files:
            one(os.path.join(d, f))


# -- the child ---------------------------------------------------------------------------

CLONE_NEWUSER = 0x10000000
# what setting owners, modes and times needs: CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH,
# FOWNER, FSETID (no CHROOT, no MKNOD, no SYS_ADMIN)
KEEP_CAPS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 3) | (1 << 4)


def _keep_only(caps: int) -> None:
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]
    libc = ctypes.CDLL(None, use_errno=True)
    hdr = Header(0x20080522, 0)
    data = (Data * 2)()
    data[0].effective = data[0].permitted = caps
    if libc.capset(ctypes.byref(hdr), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _child(dirfd: int, go: int, ready: int, limit: int) -> None:
    import ctypes
    import resource
    import tarfile

    os.setgroups([])
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUSER) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"this kernel gives no user namespace ({os.strerror(e)}): image "
                         f"layers are unpacked in one")
    os.write(ready, b"u")
    os.close(ready)
    if os.read(go, 1) != b"m":
        raise OSError("the parent did not map the namespace's ids")
    os.close(go)
    os.setresgid(0, 0, 0)                  # host BASE: nothing on the host is its
    os.setresuid(0, 0, 0)
    os.fchdir(dirfd)
    os.chroot(".")
    os.chdir("/")
    os.close(dirfd)
    _keep_only(KEEP_CAPS)                  # no chroot again: the folder is all it has
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    left = {"devices": 0, "owners": 0}
    total = 0
    dirs = []
    with tarfile.open(fileobj=sys.stdin.buffer, mode="r|", errorlevel=1) as tar:
        for m in tar:
            if m.ischr() or m.isblk():
                left["devices"] += 1
                continue
            total += m.size if m.isfile() else 0
            if total > limit:
                raise OSError(f"its files take more than {limit} bytes ({m.name!r} of "
                              f"{m.size} bytes)")
            if not (0 <= m.uid < COUNT and 0 <= m.gid < COUNT):
                left["owners"] += 1
                m.uid = m.gid = 0          # beyond the namespace's ids: root's
            if m.isdir():                  # its mode and time once its files are in
                dirs.append(m)
                tar.extract(m, "/", set_attrs=False, numeric_owner=True)
            else:
                tar.extract(m, "/", numeric_owner=True)
        for m in reversed(dirs):
            path = os.path.join("/", m.name)
            tar.chown(m, path, True)
            tar.utime(m, path)
            tar.chmod(m, path)
    while sys.stdin.buffer.read(1 << 20):      # what follows the archive's end: read, so
        pass                                    # the parent's writes never break
    sys.stdout.write(json.dumps(left))


if __name__ == "__main__":
    try:
        _child(*(int(x) for x in sys.argv[1:5]))
    except Exception as e:                 # tarfile's errors, OSError: its last line
        sys.stderr.write(f"{e}\n")
        sys.exit(1)
