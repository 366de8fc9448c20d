"""Issue 17 defect 3 (Python side): a node cannot reach the control plane or the host.

Every command in a node (start commands, programs, agents, FRR, ``wanlab exec``) runs
through wanlab.backends.emulate.nodes.node_argv: its own network, mount, UTS and PID
namespaces, wanlab's state folder hidden, its own /tmp, /run, /dev and /proc, the host's
files read-only, and a capability bounding set without SYS_ADMIN, SYS_PTRACE, ... These
tests try to escape from inside a node.
"""

import json
import os
import subprocess
import sys
import time

from conftest import ROOT, needs_root, pair, ping_rtts

from wanlab.backends.emulate.nodes import DROPPED_CAPS

pytestmark = needs_root

CONNECT = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\n"
           "try:\n    s.connect(sys.argv[1])\nexcept OSError as e:\n"
           "    print('refused', e); sys.exit(1)\nprint('connected')\n")


def in_node(lab, node, script, name="pair"):
    return lab.exec(name, node, ["sh", "-c", script], capture_output=True, text=True,
                    timeout=60)


def engine_pid(lab, name="pair"):
    row = lab.get(name)
    return next(r.detail["pid"] for r in lab.store.resources(row.id) if r.kind == "engine")


def test_a_node_cannot_reach_the_engine_or_the_store(lab):
    lab.create(pair())
    folder = lab.show("pair")["folder"]
    sock = os.path.join(folder, "engine.sock")
    events = os.path.join(folder, "events.sock")
    pid = engine_pid(lab)
    for path in (sock, events, f"/proc/{pid}/root{sock}", f"/proc/1/root{sock}"):
        r = lab.exec("pair", "a", ["python3", "-c", CONNECT, path], capture_output=True,
                     text=True)
        assert r.returncode == 1 and "refused" in r.stdout, (path, r.stdout, r.stderr)
    home = lab.store.home
    r = in_node(lab, "a", f"cat {home}/wanlab.db; ls -A {home}; ls -A {folder}")
    assert "No such file" in r.stderr
    # only the path to its folder, which the node's root (not the host's) cannot even list
    assert r.stdout.split() == [] and "Permission denied" in r.stderr, r.stdout + r.stderr
    r = in_node(lab, "a", f"nsenter -t {pid} -n ip -o link; echo rc=$?; "
                          f"nsenter -t 1 -n -m true; echo rc=$?; ls /proc/{pid}/root/")
    assert "rc=0" not in r.stdout and "rc=1" in r.stdout, r.stdout + r.stderr
    # the engine's pid means nothing in the node's PID namespace
    assert f"/proc/{pid}/root/" in r.stderr and "No such file" in r.stderr, r.stderr


def test_a_node_cannot_change_the_host(lab):
    lab.create(pair())
    r = in_node(lab, "a", "touch /usr/wanlab-escape; echo rc=$?; "
                          "echo x > /proc/sys/kernel/core_pattern; echo rc=$?; "
                          "mount -t tmpfs x /mnt; echo rc=$?; "
                          "ls /dev/vda /dev/sda /dev/mem 2>&1 | grep -c 'No such'; "
                          "grep CapBnd /proc/self/status")
    lines = r.stdout.split("\n")
    assert lines[:3] == ["rc=1", "rc=1", "rc=32"] or lines[:3] == ["rc=1", "rc=2", "rc=32"], \
        r.stdout + r.stderr
    assert lines[3] == "3"
    bounding = int(lines[4].split()[1], 16)
    assert bounding & (1 << 21) == 0         # CAP_SYS_ADMIN
    assert bounding & (1 << 19) == 0         # CAP_SYS_PTRACE
    assert bounding & (1 << 12)              # CAP_NET_ADMIN kept
    assert not os.path.exists("/usr/wanlab-escape")
    assert "sys_admin" in DROPPED_CAPS


def test_root_in_a_node_is_nobody_on_the_host(lab):
    """Nodes run in their experiment's user namespace: uid 0 inside is a uid of the
    experiment's range outside, so a host root's file the node can reach stays out of its
    hands (before, node root read and rewrote it), and the node's network namespace is owned
    by that user namespace (so it keeps NET_ADMIN there)."""
    import fcntl
    lab.create(pair())
    folder = lab.show("pair")["folder"]
    planted = os.path.join(folder, "nodes", "a", "host-secret")
    with open(planted, "w") as f:
        f.write("root's\n")
    os.chmod(planted, 0o600)
    r = in_node(lab, "a", f"id -u; cat {planted}; echo rc=$?; echo x >> {planted}; "
                          f"echo rc=$?; cat /etc/shadow; echo rc=$?; "
                          f"ip link set lo mtu 1500 && echo net-admin")
    assert r.stdout.split() == ["0", "rc=1", "rc=2", "rc=1", "net-admin"], r.stdout + r.stderr
    with open(planted) as f:
        assert f.read() == "root's\n"
    p = lab.popen("pair", "a", ["sh", "-c", "id -u; exec sleep 60"], stdout=subprocess.PIPE,
                  text=True)
    try:
        assert p.stdout.readline() == "0\n"
        with open(f"/proc/{p.pid}/status") as f:
            uids = next(line for line in f if line.startswith("Uid:")).split()[1:]
        row = lab.get("pair")
        base = next(r.detail["base"] for r in lab.store.resources(row.id)
                    if r.kind == "userns")
        assert base >= 65536 and uids == [str(base)] * 4, uids
    finally:
        p.kill()
        p.wait()
    # the node's network namespace belongs to a user namespace that is not the host's
    ns = next(r.name for r in lab.store.resources(lab.get("pair").id)
              if r.kind == "netns" and r.detail.get("node") == "a")
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        owner = fcntl.ioctl(fd, 0xB701)             # NS_GET_USERNS
    finally:
        os.close(fd)
    try:
        assert os.fstat(owner).st_ino != os.stat("/proc/self/ns/user").st_ino
    finally:
        os.close(owner)


def _uid_ranges(lab, name):
    """The uid bases of every userns record of experiment ``name`` (removed ones too)."""
    rows = lab.store.db.execute(
        "SELECT r.detail FROM resources r JOIN experiments e ON r.exp_id = e.id "
        "WHERE e.name = ? AND r.kind = 'userns'", (name,))
    return [json.loads(d)["base"] for (d,) in rows]


def _uids_on_host(base):
    out = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/status") as f:
                uid = next(line for line in f if line.startswith("Uid:")).split()[1]
        except (OSError, StopIteration):
            continue
        if base <= int(uid) < base + 65536:
            out.append(d)
    return out


def test_each_experiment_keeps_a_uid_range_of_its_own_until_terminate(lab):
    lab.create(pair())
    lab.create(pair("other"))
    for name in ("pair", "other"):      # a process in a node: the range is in use
        assert in_node(lab, "a", "id -u", name).stdout == "0\n"
    (mine,), (theirs,) = _uid_ranges(lab, "pair"), _uid_ranges(lab, "other")
    assert abs(mine - theirs) >= 65536
    folder = lab.show("pair")["folder"]
    assert os.stat(os.path.join(folder, "nodes", "a", "tmp")).st_uid == mine
    lab.swapout("pair")
    assert not _uids_on_host(mine) and _uids_on_host(theirs)
    lab.swapin("pair")
    assert set(_uid_ranges(lab, "pair")) == {mine}      # the same range: its files stay its
    assert in_node(lab, "a", "echo again > /tmp/note && cat /tmp/note").stdout == "again\n"
    lab.terminate("pair")
    assert _uid_ranges(lab, "pair") == [] and not _uids_on_host(mine)
    lab.create(pair("third"))
    assert _uid_ranges(lab, "third") == [mine]        # freed by terminate, taken again


def test_a_node_keeps_its_tools_and_its_own_tmp(lab):
    lab.create(pair())
    assert len(ping_rtts(lab, "pair", "a", "b", count=2)) == 2
    server = subprocess.Popen(lab.node_argv("pair", "b", ["iperf3", "-s", "-1"]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = None
        for _ in range(50):
            r = in_node(lab, "a", "iperf3 -c b -n 200K -J >/dev/null && echo iperf-ok")
            if "iperf-ok" in r.stdout:
                break
        assert "iperf-ok" in r.stdout, r.stderr
    finally:
        server.kill()
        server.wait()
    # /tmp is the node's own, kept across its commands, and in its folder on the host
    assert in_node(lab, "a", "echo mine > /tmp/note").returncode == 0
    assert in_node(lab, "a", "cat /tmp/note").stdout == "mine\n"
    assert in_node(lab, "b", "cat /tmp/note").returncode != 0
    folder = lab.show("pair")["folder"]
    with open(os.path.join(folder, "nodes", "a", "tmp", "note")) as f:
        assert f.read() == "mine\n"
    # a start command still writes its exit code in the node's folder
    assert in_node(lab, "a", f"echo ok > {folder}/nodes/a/probe && cat {folder}/nodes/a/probe"
                   ).stdout == "ok\n"


def test_peer_refused_accepts_the_host_and_refuses_another_netns(tmp_path):
    """The event socket's check: a client in another network namespace is refused."""
    import socket as so
    import threading

    from wanlab.run.scheduler import peer_refused
    a, b = so.socketpair(so.AF_UNIX)
    assert peer_refused(a) is None       # our own process, our netns
    a.close(), b.close()
    ns = "wl-safety-peer-test"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        path = str(tmp_path / "s.sock")
        srv = so.socket(so.AF_UNIX)
        srv.bind(path)
        srv.listen(1)
        out = {}

        theirs = os.stat(f"/run/netns/{ns}").st_ino

        def accept():
            c, _ = srv.accept()
            out["why"] = peer_refused(c)
            # a host agent allows a set of namespaces (the controller's and its own)
            out["allowed"] = peer_refused(c, {theirs}, "the controller's")
            out["agent"] = peer_refused(c, {os.stat("/proc/self/ns/net").st_ino},
                                        "the controller's")
            c.close()
        t = threading.Thread(target=accept)
        t.start()
        subprocess.run(["ip", "netns", "exec", ns, "python3", "-c",
                        "import socket; s = socket.socket(socket.AF_UNIX); "
                        f"s.connect({path!r}); s.recv(1)"],
                       check=True)
        t.join(10)
        srv.close()
        assert out["why"] and "the host's network namespace" in out["why"]
        assert out["allowed"] is None
        assert out["agent"] and "the controller's network namespace" in out["agent"]
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=True)


def test_a_node_cannot_put_an_interface_into_the_hosts_namespace(lab):
    lab.create(pair())
    engine = engine_pid(lab)
    r = in_node(lab, "a", "ip link add wlesc0 type veth peer name wlesc1 netns 1; echo rc=$?; "
                          f"ip link add wlesc2 type veth peer name wlesc3 netns {engine}; "
                          "echo rc=$?")
    leaked = [d for d in ("wlesc1", "wlesc3")
              if subprocess.run(["ip", "link", "show", d], capture_output=True,
                                check=False).returncode == 0]
    for d in leaked:
        subprocess.run(["ip", "link", "del", d], capture_output=True, check=False)
    assert not leaked, r.stdout
    # pid 1 is the node's own init: the pair stayed in the node (and goes with it)
    assert "rc=0" in r.stdout
    assert "wlesc1" in in_node(lab, "a", "ip -o link").stdout


def test_a_node_sees_and_signals_only_its_own_processes(lab):
    lab.create(pair())
    host = subprocess.Popen(["sleep", "299.25"])       # a root process on the host
    try:
        r = in_node(lab, "a", "ps -eo pid=,args=; echo ---; ls /proc | grep -c '^[0-9]'; "
                              f"kill -9 {host.pid}; echo rc=$?; cat /proc/{host.pid}/cmdline; "
                              "echo rc=$?")
        ps, rest = r.stdout.split("---\n")
        assert "299.25" not in ps and "wanlab-engine" not in ps, ps
        pids = [int(line.split()[0]) for line in ps.splitlines()]
        assert 1 in pids and len(pids) < 10, ps        # the holder, a sleep, this command
        assert int(rest.split()[0]) < 10
        assert rest.split()[1:] == ["rc=1", "rc=1"], r.stdout + r.stderr
        time.sleep(0.2)
        assert host.poll() is None                     # still running
    finally:
        host.kill()
        host.wait()


def test_each_node_has_its_own_hostname_and_pid_namespace(lab):
    lab.create(pair())
    probe = "hostname; readlink /proc/self/ns/pid; cat /proc/1/comm"
    a, b = (in_node(lab, n, probe).stdout.split() for n in ("a", "b"))
    assert a[0] == "a" and b[0] == "b"
    host_ns = os.readlink("/proc/self/ns/pid")
    assert len({a[1], b[1], host_ns}) == 3                  # three PID namespaces
    assert a[2] == b[2] == "sh"                              # each its own init
    # a process wanlab starts in a node *is* the pid Popen holds (signals, /proc, records)
    p = lab.popen("pair", "a", ["sh", "-c", "echo $$; exec sleep 30"],
                  stdout=subprocess.PIPE, text=True)
    try:
        inner = int(p.stdout.readline())
        with open(f"/proc/{p.pid}/status") as f:
            nspid = next(line.split()[1:] for line in f if line.startswith("NSpid:"))
        assert nspid == [str(p.pid), str(inner)]
        assert os.readlink(f"/proc/{p.pid}/ns/pid") == a[1]
    finally:
        p.kill()
        p.wait()


def test_a_nodes_init_reaps_orphans_and_ends_the_node_with_it(lab):
    lab.create(pair())
    # a daemon-style double fork: the grandchild outlives its parent and is adopted by pid 1
    assert in_node(lab, "a", "sh -c 'sleep 0.2 & exit 0'").returncode == 0
    zombies = "x"
    for _ in range(100):
        zombies = in_node(lab, "a", "ps -eo stat=,args= | grep '^Z' || true").stdout
        if not zombies and "sleep 0.2" not in in_node(lab, "a", "ps -eo args=").stdout:
            break
        time.sleep(0.1)
    assert zombies == "", zombies
    # an unrecorded process in the node goes when its holder (recorded) is removed
    row = lab.get("pair")
    holder = next(r for r in lab.store.resources(row.id) if r.detail.get("role") == "holder"
                  and r.detail.get("node") == "a")
    stray = lab.popen("pair", "a", ["sh", "-c", "setsid sleep 300 & echo $!"],
                      stdout=subprocess.PIPE, text=True)
    inner = int(stray.stdout.readline())
    stray.wait()
    host_pid = next(int(d) for d in os.listdir("/proc") if d.isdigit() and _nspid(d) ==
                    [d, str(inner)] and _in_ns(d, holder.detail["pid"]))
    from wanlab.backends.emulate import resources
    resources.remove(lab.store, row.id, ids=[holder.id])
    for _ in range(200):
        if not os.path.exists(f"/proc/{host_pid}"):
            break
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{host_pid}")


def _nspid(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((line.split()[1:] for line in f if line.startswith("NSpid:")), None)
    except OSError:
        return None


def _in_ns(pid, holder):
    try:
        return os.readlink(f"/proc/{pid}/ns/pid") == os.readlink(f"/proc/{holder}/ns/pid")
    except OSError:
        return False


def test_exec_and_shell_enter_every_namespace_of_the_node(lab):
    lab.create(pair())
    home = lab.store.home
    cli = [sys.executable, "-m", "wanlab.cli", "--home", home]
    probe = "hostname; readlink /proc/self/ns/pid; ls /proc | grep -c '^[0-9]'"
    e = subprocess.run([*cli, "exec", "pair", "a", "--", "sh", "-c", probe], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    s = subprocess.run([*cli, "shell", "pair", "a"], cwd=ROOT, input=probe + "\n",
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "SHELL": "/bin/sh"})
    inside = in_node(lab, "a", "readlink /proc/1/ns/pid").stdout.strip()
    for r in (e, s):
        name, ns, count = r.stdout.split()
        assert r.returncode == 0 and name == "a" and ns == inside, r.stdout + r.stderr
        assert int(count) < 10
