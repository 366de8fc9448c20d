"""Issue 17 defect 3 (Python side): a node cannot reach the control plane or the host.

Every command in a node (start commands, programs, agents, FRR, ``wanlab exec``) runs
through wanlab.backends.emulate.nodes.node_argv: wanlab's state folder hidden, its own
/tmp, /run and /dev, the host's files read-only, and a capability bounding set without
SYS_ADMIN, SYS_PTRACE, ... These tests try to escape from inside a node.
"""

import os
import subprocess

import pytest
from conftest import needs_root, pair, ping_rtts

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
    assert r.stdout.split() == ["exps", "nodes"], r.stdout    # only the path to its folder
    r = in_node(lab, "a", f"nsenter -t {pid} -n ip -o link; echo rc=$?; "
                          f"nsenter -t 1 -n -m true; echo rc=$?; ls /proc/{pid}/root/")
    assert "rc=0" not in r.stdout and "rc=1" in r.stdout, r.stdout + r.stderr
    assert "Permission denied" in r.stderr


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

        def accept():
            c, _ = srv.accept()
            out["why"] = peer_refused(c)
            c.close()
        t = threading.Thread(target=accept)
        t.start()
        subprocess.run(["ip", "netns", "exec", ns, "python3", "-c",
                        f"import socket; socket.socket(socket.AF_UNIX).connect({path!r})"],
                       check=True)
        t.join(10)
        srv.close()
        assert out["why"] and "network namespace" in out["why"]
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=True)


@pytest.mark.xfail(strict=True, reason="known: nodes share the host's PID namespace, so "
                   "CAP_NET_ADMIN can move an interface into the netns of a host pid "
                   "(docs/security.md, 'What is left')")
def test_a_node_cannot_put_an_interface_into_the_hosts_namespace(lab):
    lab.create(pair())
    r = in_node(lab, "a", "ip link add wlesc0 type veth peer name wlesc1 netns 1; echo rc=$?")
    leaked = subprocess.run(["ip", "link", "show", "wlesc1"], capture_output=True,
                            check=False).returncode == 0
    if leaked:
        subprocess.run(["ip", "link", "del", "wlesc1"], capture_output=True, check=False)
    assert not leaked, r.stdout
