"""Named network namespaces, made and entered with system calls, not shell commands.

A namespace is created the way ``ip netns add`` does it, so ``ip netns``
tools see ours: a thread unshares its network namespace and that namespace
is bind-mounted on ``/run/netns/NAME``. Namespaces owned by an experiment's user
namespace are unshared by a helper process inside it instead (:func:`create_many`
with ``uid_base``), and bound the same way. :func:`netlink` opens a pyroute2
netlink socket *inside* a namespace (a socket stays bound to the namespace
it was created in), so configuring a node costs one setns and no fork.
Per-namespace files under ``/etc/netns/NAME/`` (``hosts``) are bind-mounted
over ``/etc`` by ``ip netns exec``, which is how commands in a node see its
hosts file.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyroute2 import IPRoute

NETNS_RUN_DIR = "/run/netns"
NETNS_ETC_DIR = "/etc/netns"

CLONE_NEWNET = 0x40000000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_SHARED = 1 << 20
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)
_lock = threading.Lock()   # setns is per thread; serialize namespace switches


def _check(ret: int, what: str) -> None:
    if ret != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _ensure_run_dir() -> None:
    """Make /run/netns a shared mount point, as iproute2 does, so bind mounts propagate."""
    os.makedirs(NETNS_RUN_DIR, exist_ok=True)
    d = NETNS_RUN_DIR.encode()
    # Making it shared fails with EINVAL until it is a mount point of its own;
    # only then bind it onto itself. (os.path.ismount cannot tell: a bind
    # mount of the same file system looks like a plain directory.)
    if _libc.mount(b"none", d, None, MS_SHARED | MS_REC, None) == 0:
        return
    if ctypes.get_errno() != errno.EINVAL:
        _check(-1, "share /run/netns")
    _check(_libc.mount(d, d, b"none", MS_BIND | MS_REC, None), "bind /run/netns")
    _check(_libc.mount(b"none", d, None, MS_SHARED | MS_REC, None), "share /run/netns")


def path(name: str) -> str:
    return os.path.join(NETNS_RUN_DIR, name)


def exists(name: str) -> bool:
    return os.path.exists(path(name))


def create(name: str) -> int:
    """Create namespace ``name``; return its inode (identifies it for process ownership)."""
    _ensure_run_dir()
    target = path(name)
    fd = os.open(target, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0o444)
    os.close(fd)
    result: dict[str, object] = {}

    def work() -> None:
        # A fresh thread: unshare affects only it, and it ends afterwards,
        # so the caller's namespace never changes.
        try:
            _check(_libc.unshare(CLONE_NEWNET), "unshare")
            src = f"/proc/self/task/{threading.get_native_id()}/ns/net".encode()
            _check(_libc.mount(src, target.encode(), b"none", MS_BIND, None), "bind netns")
        except OSError as e:
            result["error"] = e

    t = threading.Thread(target=work)
    t.start()
    t.join()
    if "error" in result:
        with contextlib.suppress(OSError):
            os.unlink(target)
        raise result["error"]  # type: ignore[misc]
    return os.stat(target).st_ino


def create_many(names: list[str], setup: Callable[[], None] | None = None,
                uid_base: int | None = None) -> list[int]:
    """Create namespaces ``names`` in order, running ``setup`` inside each as soon as it
    exists; return their inodes. One thread makes them all (it unshares again for each:
    a thread per namespace costs about as much as the namespace). On an error the
    namespace being made is removed and the error raised; those made before it stay
    (the caller has recorded them).

    With ``uid_base``, the namespaces are owned by a new user namespace mapping uids and
    gids 0..65535 to ``uid_base``.. on the host (:func:`_create_owned`)."""
    if uid_base is not None:
        return _create_owned(names, setup, uid_base)
    _ensure_run_dir()
    made: list[int] = []
    failure: list[BaseException] = []

    def work() -> None:
        for name in names:
            target = path(name)
            try:
                fd = os.open(target, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0o444)
                os.close(fd)
            except OSError as e:
                failure.append(e)
                return
            try:
                _check(_libc.unshare(CLONE_NEWNET), "unshare")
                src = f"/proc/self/task/{threading.get_native_id()}/ns/net".encode()
                _check(_libc.mount(src, target.encode(), b"none", MS_BIND, None), "bind netns")
                ino = os.stat(target).st_ino
                if setup is not None:
                    setup()
            except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
                failure.append(e)
                delete(name)                # ours: its file was made above (O_EXCL)
                return
            made.append(ino)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    if failure:
        raise failure[0]
    return made


# The helper that makes namespaces owned by a user namespace: a process can create a network
# namespace owned by a user namespace only from inside it, and a thread of a threaded process
# cannot join one. It makes the user namespace and waits for its maps (written by root
# outside); then, for each count read, makes that many network namespaces, keeping a
# descriptor of each, says their numbers and, once root has bound each at /run/netns/NAME
# from /proc/<helper>/fd/<n>, closes them (one round trip per batch, not per namespace).
_OWNED_HELPER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000) != 0:
    sys.exit("unshare a user namespace: error %d" % ctypes.get_errno())
print("user", flush=True)
while line := sys.stdin.readline():
    fds = []
    for _ in range(int(line)):
        if libc.unshare(0x40000000) != 0:
            sys.exit("unshare a network namespace: error %d" % ctypes.get_errno())
        fds.append(os.open("/proc/self/ns/net", os.O_RDONLY))
    print(" ".join(map(str, fds)), flush=True)
    sys.stdin.readline()
    for fd in fds:
        os.close(fd)
"""
_OWNED_BATCH = 256         # descriptors the helper holds at once (below its open-file limit)


def _create_owned(names: list[str], setup: Callable[[], None] | None,
                  uid_base: int) -> list[int]:
    import subprocess
    import sys
    _ensure_run_dir()
    made: list[int] = []
    p = subprocess.Popen([sys.executable, "-I", "-c", _OWNED_HELPER], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, bufsize=1, close_fds=True)
    assert p.stdin is not None and p.stdout is not None

    def ask(line: str) -> str:
        p.stdin.write(line)                         # type: ignore[union-attr]
        p.stdin.flush()                             # type: ignore[union-attr]
        return heard()

    def heard() -> str:
        got = p.stdout.readline()                   # type: ignore[union-attr]
        if not got.endswith("\n"):
            p.kill()
            p.wait()
            raise OSError(errno.EPERM, f"cannot make a namespace owned by a user namespace "
                                       f"(helper exit {p.returncode})")
        return got
    try:
        if heard() != "user\n":
            raise OSError(errno.EPERM, "the namespace helper did not start")
        for f in ("uid_map", "gid_map"):
            with open(f"/proc/{p.pid}/{f}", "w") as fh:
                fh.write(f"0 {uid_base} 65536\n")
        for k in range(0, len(names), _OWNED_BATCH):
            batch = names[k:k + _OWNED_BATCH]
            fds = ask(f"{len(batch)}\n").split()
            for name, nfd in zip(batch, fds, strict=True):
                target = path(name)
                fd = os.open(target, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0o444)
                os.close(fd)
                try:
                    _check(_libc.mount(f"/proc/{p.pid}/fd/{int(nfd)}".encode(),
                                       target.encode(), b"none", MS_BIND, None), "bind netns")
                    ino = os.stat(target).st_ino
                    if setup is not None:
                        with entered(name):
                            setup()
                except BaseException:
                    delete(name)            # ours: its file was made above (O_EXCL)
                    raise
                made.append(ino)
            p.stdin.write("bound\n")
            p.stdin.flush()
    finally:
        with contextlib.suppress(OSError):
            p.stdin.close()
        p.wait(timeout=30)
    return made


def inode(name: str) -> int | None:
    try:
        return os.stat(path(name)).st_ino
    except FileNotFoundError:
        return None


def delete(name: str) -> bool:
    """Remove namespace ``name`` (and its /etc/netns folder); False if it was not there."""
    target = path(name)
    found = os.path.exists(target)
    if found:
        r = _libc.umount2(target.encode(), MNT_DETACH)
        if r != 0 and ctypes.get_errno() not in (errno.EINVAL, errno.ENOENT):
            _check(r, f"umount {target}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
    # the node's /etc overlay (hosts, FRR configuration): ours, named after the namespace
    shutil.rmtree(os.path.join(NETNS_ETC_DIR, name), ignore_errors=True)
    return found


@contextlib.contextmanager
def entered(name: str) -> Iterator[None]:
    """Run the body with this thread inside namespace ``name``."""
    with _lock:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        ns = os.open(path(name), os.O_RDONLY)
        try:
            _check(_libc.setns(ns, CLONE_NEWNET), f"setns {name}")
            try:
                yield
            finally:
                _check(_libc.setns(own, CLONE_NEWNET), "setns back")
        finally:
            os.close(ns)
            os.close(own)


def netlink(name: str) -> IPRoute:
    """A netlink socket bound to namespace ``name`` (the caller closes it)."""
    from pyroute2 import IPRoute  # here: its import costs every CLI command ~0.2 s
    with entered(name):
        return IPRoute()


def listening(name: str, proto: str, port: int) -> bool:
    """Whether a socket in namespace ``name`` listens (tcp) or is bound (udp) on ``port``,
    over IPv4 or IPv6 (a dual-stack socket shows only in the ``6`` table)."""
    lines: list[str] = []
    with entered(name):
        for table in (proto, proto + "6"):
            with open(f"/proc/thread-self/net/{table}") as f:
                lines += f.read().splitlines()[1:]
    for line in lines:
        fields = line.split()
        local, state = fields[1], fields[3]
        if int(local.rsplit(":", 1)[1], 16) == port and (proto == "udp" or state == "0A"):
            return True
    return False


def pids_in(ns_inode: int) -> list[int]:
    """Processes whose network namespace is the one with this inode.

    Used at teardown to stop exactly the processes living in a namespace the
    experiment recorded (never a match on names).
    """
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.stat(f"/proc/{d}/ns/net").st_ino == ns_inode:
                out.append(int(d))
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
    return out
