"""The last step into a node, in one process: no file of the node runs with host root's powers.

Entering a node's mount namespace (``setns``) or its own root (``pivot_root``) needs
capabilities the node lacks; the command that follows must run with the node's smaller
bounding set. Done by two programs (``nsenter ... setpriv``, ``pivot_root; exec setpriv``),
the second one would be found in the node's files, which the node may have replaced (a
``setpriv`` planted in an image node's layer ran with every capability and mounted the host's
disks). Here one process, whose code and libraries were loaded from the host before it
entered, joins the namespaces or switches root, drops the capabilities from its bounding set,
and only then executes the node's program: what that program gets is the node's share.

Run as a script (``python3 -I -S enter.py``, standard library only, everything imported
before the first ``setns``)::

    enter.py enter HOLDER_PID CAPS CWD FALLBACK -- ARGV...
        join the holder's UTS, network, PID (forking, the child dying with us) and mount
        namespaces, drop CAPS, umask 022, cd CWD (``.``: this process's working folder,
        by path) else FALLBACK, exec ARGV
    enter.py pivot ROOT CWD CAPS USERNS -- ARGV...
        make ROOT the root (pivot_root, the old one detached); USERNS (a descriptor, or
        ``-``): then join that user namespace as its root, in a UTS and an IPC namespace
        of its own there; drop CAPS, umask 022, cd CWD (else /), exec ARGV

CAPS: comma-separated capability names (``sys_admin,mknod``), or ``-`` for none.
"""

import ctypes
import os
import signal
import sys

CAPS = ("chown dac_override dac_read_search fowner fsetid kill setgid setuid setpcap "
        "linux_immutable net_bind_service net_broadcast net_admin net_raw ipc_lock ipc_owner "
        "sys_module sys_rawio sys_chroot sys_ptrace sys_pacct sys_admin sys_boot sys_nice "
        "sys_resource sys_time sys_tty_config mknod lease audit_write audit_control setfcap "
        "mac_override mac_admin syslog wake_alarm block_suspend audit_read perfmon bpf "
        "checkpoint_restore").split()
PR_SET_PDEATHSIG, PR_CAPBSET_DROP = 1, 24
CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER = 0x04000000, 0x08000000, 0x10000000
MNT_DETACH = 2
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _drop(caps: str) -> None:
    for name in ([] if caps == "-" else caps.split(",")):
        _check(_libc.prctl(PR_CAPBSET_DROP, CAPS.index(name.lstrip("-")), 0, 0, 0),
               f"dropping {name}")


def _exec(caps: str, cwd: str, fallback: str, argv: list[str]) -> None:
    _drop(caps)
    os.umask(0o022)
    for d in (cwd, fallback):
        try:
            os.chdir(d)
            break
        except OSError:
            continue
    else:
        sys.exit(111)
    # found by PATH here, not by os.execvp (which may import a module lazily)
    dirs = [""] if "/" in argv[0] else os.environ.get("PATH", "/usr/bin:/bin").split(":")
    err = None
    for d in dirs:
        try:
            os.execve(d + "/" + argv[0] if d else argv[0], argv, os.environ)
        except OSError as e:
            if err is None or not isinstance(e, FileNotFoundError):
                err = e
    sys.stderr.write(f"{argv[0]}: {err.strerror if err else 'not found'}\n")
    sys.exit(127 if isinstance(err, FileNotFoundError) else 126)


def _no_more_imports() -> None:
    """From here on the files around are the node's: an import would read them."""
    sys.path[:] = []
    sys.path_hooks[:] = []
    sys.meta_path[:] = []


def enter(holder: str, caps: str, cwd: str, fallback: str, argv: list[str]) -> None:
    if cwd == ".":                   # this process's, by path (found again in the node)
        try:
            cwd = os.getcwd()
        except OSError:
            cwd = fallback
    fds = {}
    for ns in ("uts", "ipc", "net", "pid", "mnt", "user"):
        fds[ns] = os.open(f"/proc/{int(holder)}/ns/{ns}", os.O_RDONLY | os.O_CLOEXEC)
    fork = os.stat("/proc/self/ns/pid").st_ino != os.fstat(fds["pid"]).st_ino
    # a node in its experiment's user namespace: joined last (its mount and PID namespaces
    # belong to the host's, which only host root may enter), with its IPC namespace
    user = os.stat("/proc/self/ns/user").st_ino != os.fstat(fds["user"]).st_ino
    _no_more_imports()
    order = ("uts", "ipc", "net", "pid", "mnt", "user") if user else ("uts", "net", "pid", "mnt")
    for ns in order:
        if ns == "pid" and not fork:
            continue
        _check(_libc.setns(fds[ns], 0), f"entering the node's {ns} namespace")
    for fd in fds.values():
        os.close(fd)
    if user:
        _become_root()
    if fork:
        alive_r, alive_w = os.pipe()            # at EOF once this (the parent) is gone
        child = os.fork()
        if child:
            os.close(alive_r)
            for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP):
                signal.signal(sig, signal.SIG_IGN)      # the child (the node's) decides
            _, status = os.waitpid(child, 0)
            if os.WIFSIGNALED(status):
                sig = os.WTERMSIG(status)
                signal.signal(sig, signal.SIG_DFL)
                os.kill(os.getpid(), sig)
                sys.exit(128 + sig)
            sys.exit(os.waitstatus_to_exitcode(status))
        os.close(alive_w)
        _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "pdeathsig")
        os.set_blocking(alive_r, False)
        try:
            if os.read(alive_r, 1) == b"":           # the parent died before the prctl
                os._exit(1)
        except BlockingIOError:
            pass
        os.close(alive_r)
    _exec(caps, cwd, fallback, argv)


def _become_root() -> None:
    """Root of the user namespace just joined (as ``nsenter -U`` does): its capabilities
    there, none in the host's (the bounding set is the namespace's full one until dropped)."""
    try:
        os.setgroups([])
    except PermissionError:       # setgroups denied in this namespace: groups stay
        pass
    os.setgid(0)
    os.setuid(0)


def pivot(root: str, cwd: str, caps: str, user: str, argv: list[str]) -> None:
    number = PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        sys.stderr.write(f"wanlab: pivot_root on {os.uname().machine} is not known here\n")
        sys.exit(111)
    ufd = None if user == "-" else int(user)
    os.chdir(root)
    _no_more_imports()
    _check(_libc.syscall(number, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "detaching the host's root")
    os.chdir("/")
    if ufd is not None:
        # last, as for a node on the host's files: the mounts above need host root
        _check(_libc.setns(ufd, CLONE_NEWUSER), "entering the experiment's user namespace")
        os.close(ufd)
        _become_root()
        _check(_libc.unshare(CLONE_NEWUTS | CLONE_NEWIPC), "a UTS and IPC namespace")
    _exec(caps, cwd, "/", argv)


def main(args: list[str]) -> None:
    try:
        cut = args.index("--")
        mode, head, argv = args[0], args[1:cut], args[cut + 1:]
        if not argv:
            raise ValueError
    except (ValueError, IndexError):
        sys.stderr.write("usage: enter.py enter|pivot ... -- ARGV\n")
        sys.exit(111)
    try:
        if mode == "enter" and len(head) == 4:
            enter(*head, argv)
        elif mode == "pivot" and len(head) == 4:
            pivot(*head, argv)
        else:
            sys.stderr.write(f"enter.py: bad arguments to {mode!r}\n")
            sys.exit(111)
    except OSError as e:
        sys.stderr.write(f"wanlab: {e}\n")
        sys.exit(111)


def argv_prefix() -> list[str]:
    """How wanlab runs this file: the host's Python, isolated, without site packages."""
    return [sys.executable, "-I", "-S", os.path.abspath(__file__)]


if __name__ == "__main__":
    main(sys.argv[1:])
