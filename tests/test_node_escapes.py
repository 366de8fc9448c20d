"""Work done for a node never runs the node's files as host root.

Image setup (tarfiles, packages) runs the node's own tar, apt and dpkg; a tarball or the
node itself may have replaced them. Each test plants a program that tries to write a marker
at a host path (through ``/proc/PID/root`` and ``nsenter -t PID`` of every process it sees,
the ways out of a chroot with every capability) and checks the marker is *not* on the host,
while the planted program did run (confined: its own marker lands in the node's root).
"""

from __future__ import annotations

import glob
import io
import os
import subprocess
import tarfile
import time

import pytest
from conftest import needs_root, pair
from test_images import exp_of, sh

from wanlab.backends.emulate import rootfs

pytestmark = needs_root

# $0: the program's name; writes a marker on the host if it can, and one in its own root
EVIL = """#!/bin/sh
m={marker}
for p in /proc/[0-9]*; do
  [ -d "$p/root${{m%/*}}" ] && echo pwned > "$p/root$m" 2>/dev/null
  nsenter -t "${{p#/proc/}}" -m -- sh -c "echo pwned > $m" 2>/dev/null
done
echo pwned >> /host-owned 2>/dev/null
echo "$(id -u) $$" > /ran-$(basename "$0")
cat > /dev/null
exit 0
"""


def tarball(path, files: dict[str, tuple[bytes, int]]):
    with tarfile.open(path, "w:gz") as t:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            t.addfile(info, io.BytesIO(data))
    return str(path)


def a_deb(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN" / "control").write_text(
        "Package: wanlab-empty\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@t>\n"
        "Description: test\n")
    deb = tmp_path / "wanlab-empty.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(pkg), str(deb)],
                   check=True, capture_output=True)
    return str(deb)


def test_a_tarball_that_replaces_tar_and_apt_get_cannot_reach_the_host(lab, test_image,
                                                                        tmp_path):
    marker = tmp_path / "escaped"
    evil = EVIL.format(marker=marker).encode()
    first = tarball(tmp_path / "evil.tgz", {"usr/bin/tar": (evil, 0o755),
                                            "usr/bin/apt-get": (evil, 0o755)})
    second = tarball(tmp_path / "second.tgz", {"etc/second": (b"x\n", 0o644)})
    lab.create(exp_of("evil", test_image, n=1, tarfiles=(("/", first), ("/opt", second)),
                      packages=(a_deb(tmp_path),)))
    assert not marker.exists()
    # both replaced programs did run (the second tarball and the install), confined: in a
    # PID namespace of their own, their root the node's
    root = rootfs.root_path(lab.store.folder("evil"), "n1")
    for prog in ("tar", "apt-get"):
        with open(os.path.join(root, f"ran-{prog}")) as f:
            uid, pid = f.read().split()
        assert uid == "0" and int(pid) < 100, (prog, pid)
    assert sh(lab, "evil", "n1", "cat /ran-tar | cut -d' ' -f1") == "0\n"


def test_a_program_planted_in_the_kept_layer_cannot_reach_the_host(lab, test_image, tmp_path):
    marker = tmp_path / "escaped"
    first = tarball(tmp_path / "a.tgz", {"etc/a": (b"a\n", 0o644)})
    second = tarball(tmp_path / "b.tgz", {"etc/b": (b"b\n", 0o644)})
    lab.create(exp_of("kept", test_image, n=1, tarfiles=(("/", first),)))
    # the node replaces its own tar; the next setup (a new tarfile) runs it
    lab.exec("kept", "n1", ["sh", "-c", "cat > /usr/bin/tar && chmod 755 /usr/bin/tar"],
             input=EVIL.format(marker=marker).encode(), check=True, timeout=60)
    lab.swapout("kept")
    # a host root's file in the layer (as wanlab's own mount points are): setup cannot
    # write it, and what setup makes is the node's range's on the host (its user namespace)
    upper = os.path.join(rootfs.layer_path(lab.store.folder("kept"), "n1"), "upper")
    owned = os.path.join(upper, "host-owned")
    with open(owned, "w") as f:
        f.write("host\n")
    os.chmod(owned, 0o600)
    lab.modify("kept", exp_of("kept", test_image, n=1, tarfiles=(("/", first), ("/", second))))
    lab.swapin("kept")
    assert not marker.exists()
    assert sh(lab, "kept", "n1", "cut -d' ' -f1 /ran-tar") == "0\n"
    with open(owned) as f:
        assert f.read() == "host\n"
    assert os.stat(os.path.join(upper, "ran-tar")).st_uid == uid_base(lab, "kept") > 0


def uid_base(lab, name):
    """The host uid of root in experiment ``name``'s nodes (its user namespace's range)."""
    row = lab.store.get(name)
    return next(r.detail["base"] for r in lab.store.resources(row.id) if r.kind == "userns")


def test_root_in_an_image_node_is_nobody_on_the_host(lab, test_image, tmp_path):
    """An image node runs in its experiment's user namespace, its image's files mapped to
    the namespace's root: what it makes (and what setup unpacks for it) is owned by its
    range on the host, across a swap-out and in, and a host root's file bound into its root
    is out of its hands (before, it was host root: it read a host root's 0600 file in its
    folder and rewrote the hosts file every node shares)."""
    t = tarball(tmp_path / "t.tgz", {"opt/from-setup": (b"s\n", 0o644)})
    lab.create(exp_of("unpriv", test_image, n=2, tarfiles=(("/", t),)))
    folder = lab.store.folder("unpriv")
    base = uid_base(lab, "unpriv")
    planted = os.path.join(folder, "nodes", "n1", "host-secret")
    with open(planted, "w") as f:
        f.write("root's\n")
    os.chmod(planted, 0o600)
    out = sh(lab, "unpriv", "n1",
             f"id -u; cat {planted} 2>/dev/null || echo no-read; "
             f"(echo x >> {planted}) 2>/dev/null || echo no-write; "
             f"(echo 10.6.6.6 evil >> /etc/hosts) 2>/dev/null || echo no-hosts; "
             f"touch /marker && mkdir -p /home/u && touch /home/u/f && "
             f"chown 1000:1000 /home/u/f && echo made")
    assert out.split() == ["0", "no-read", "no-write", "no-hosts", "made"], out
    with open(planted) as f:
        assert f.read() == "root's\n"
    assert "evil" not in sh(lab, "unpriv", "n2", "cat /etc/hosts")
    upper = os.path.join(rootfs.layer_path(folder, "n1"), "upper")
    owners = {p: os.stat(os.path.join(upper, p)).st_uid
              for p in ("marker", "home/u/f", "opt/from-setup")}
    assert base >= 65536 and owners == {"marker": base, "home/u/f": base + 1000,
                                        "opt/from-setup": base}, (base, owners)
    lab.swapout("unpriv")
    lab.swapin("unpriv")
    assert sh(lab, "unpriv", "n1", "echo y >> /marker && stat -c '%u %g' /marker /home/u/f "
                                   "/opt/from-setup") == "0 0\n1000 1000\n0 0\n"
    assert os.stat(os.path.join(upper, "marker")).st_uid == base


def test_a_link_in_the_kept_layer_does_not_bind_a_host_folder_into_the_node(lab, test_image,
                                                                           tmp_path):
    secret = tmp_path / "host-only"
    secret.write_text("host\n")
    lab.create(exp_of("frrlink", test_image, n=1))
    # the holder binds the node's /etc/frr/run at /run/frr: a link there named the host's /
    sh(lab, "frrlink", "n1", "rm -rf /etc/frr/run && mkdir -p /etc/frr && "
                             "ln -s / /etc/frr/run")
    lab.swapout("frrlink")
    lab.swapin("frrlink")
    out = sh(lab, "frrlink", "n1", f"test -e /run/frr{secret} && echo host || echo none; "
                                   f"touch /run/frr{tmp_path}/planted 2>/dev/null; true")
    assert out == "none\n"
    assert not (tmp_path / "planted").exists()


# The node swaps each of its folders race<i> with a link link<i> to a host folder, again and
# again (renameat2 RENAME_EXCHANGE), while the host exports the experiment.
SWAPPER = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
base, n = sys.argv[1], int(sys.argv[2])
end = time.monotonic() + 60
print("ready", flush=True)
while time.monotonic() < end:
    for i in range(n):
        libc.renameat2(-100, f"{base}/race{i}".encode(), -100, f"{base}/link{i}".encode(), 2)
"""


def test_export_reads_beneath_the_folder_keeps_modes_and_holes(lab, tmp_path):
    lab.create(pair())
    ndir = lab.store.folder("pair", "nodes", "a")
    secret_dir = tmp_path / "host-secrets"
    secret_dir.mkdir()
    (secret_dir / "data.txt").write_text("HOST SECRET\n")
    n = 12
    script = (f"for i in $(seq 0 {n - 1}); do mkdir race$i && echo node > race$i/data.txt "
              f"&& ln -s {secret_dir} link$i; done; "
              "echo private > private.txt && chmod 600 private.txt; "
              "echo shared > shared.txt && chmod 644 shared.txt; "
              "truncate -s 300M sparse.bin && printf end >> sparse.bin")
    lab.exec("pair", "a", ["sh", "-c", script], cwd=ndir, check=True, timeout=60)
    swapper = subprocess.Popen(lab.node_argv("pair", "a", ["python3", "-c", SWAPPER, ndir,
                                                           str(n)]),
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert swapper.stdout.readline() == b"ready\n"
        for k in range(6):
            dest = tmp_path / f"export{k}"
            lab.export("pair", str(dest))
            for d, _dirs, files in os.walk(dest):
                for f in files:
                    with open(os.path.join(d, f), "rb") as fh:
                        assert b"HOST SECRET" not in fh.read(1 << 16), os.path.join(d, f)
    finally:
        swapper.kill()
        swapper.wait()
    out = tmp_path / "export0" / "nodes" / "a"
    assert os.stat(out / "private.txt").st_mode & 0o777 == 0o600
    assert os.stat(out / "shared.txt").st_mode & 0o777 == 0o644
    st = os.stat(out / "sparse.bin")
    assert st.st_size == 300 * 2**20 + 3 and st.st_blocks * 512 < 2**20
    with open(out / "sparse.bin", "rb") as f:
        f.seek(300 * 2**20)
        assert f.read() == b"end"
    # wanlab's own files are readable by everyone
    assert os.stat(tmp_path / "export0").st_mode & 0o777 == 0o755


def writable_irq():
    """An IRQ whose affinity the host's root may write (its own value back), if any."""
    for f in sorted(glob.glob("/proc/irq/*/smp_affinity")):
        try:
            with open(f) as fh:
                v = fh.read()
            with open(f, "w") as fh:
                fh.write(v)
            return f
        except OSError:
            continue
    return None


PROBE = ("for f in {irq} /proc/sysrq-trigger /proc/sys/kernel/core_pattern; do "
         "v=$(cat $f 2>/dev/null); printf '%s\\n' \"$v\" > $f 2>/dev/null && echo wrote $f; "
         "done; test -r /proc/kcore && head -c1 /proc/kcore | wc -c; "
         "echo 1 > /proc/sys/net/ipv4/ip_forward && echo net")


def test_a_node_cannot_write_the_hosts_proc_settings(lab, test_image):
    irq = writable_irq()
    if irq is None:
        pytest.skip("no IRQ whose affinity root may write here")
    lab.create(pair())
    lab.create(exp_of("procimg", test_image, n=1))
    for name, node in (("pair", "a"), ("procimg", "n1")):
        r = lab.exec(name, node, ["sh", "-c", PROBE.format(irq=irq)], capture_output=True,
                     text=True, timeout=60)
        # nothing written but the node's own network sysctls; /proc/kcore reads nothing
        assert r.stdout.split("\n")[-2:] == ["net", ""] and "wrote" not in r.stdout, \
            (name, r.stdout, r.stderr)
        assert r.stdout.split("\n")[0] in ("0", "net"), r.stdout


def test_a_link_in_the_node_folder_does_not_reach_a_host_folder(lab, tmp_path):
    victim = tmp_path / "host-folder"
    victim.mkdir(mode=0o755)
    os.chmod(victim, 0o755)
    lab.create(pair())
    ndir = lab.store.folder("pair", "nodes", "a")
    # the node's /tmp is <its folder>/tmp: it puts a link to a host folder there
    lab.exec("pair", "a", ["sh", "-c", f"mv {ndir}/tmp {ndir}/tmp.old && "
                                       f"ln -s {victim} {ndir}/tmp"], check=True, timeout=60)
    lab.swapout("pair")
    lab.swapin("pair")
    lab.exec("pair", "a", ["sh", "-c", "touch /tmp/planted"], check=True, timeout=60)
    assert os.stat(victim).st_mode & 0o7777 == 0o755         # not made 1777
    assert os.listdir(victim) == []
    assert not os.path.islink(os.path.join(ndir, "tmp"))


def test_a_link_in_place_of_the_start_command_log_does_not_reach_a_host_file(lab, tmp_path):
    """wanlab (host root) appended a node's start command output to <node folder>/
    startcmd.log, following a link the node put there, and made its target 0644: a node
    reboot (an event a portal member may send) wrote into any host file."""
    import dataclasses
    victim = tmp_path / "victim"
    victim.write_text("secret\n")
    os.chmod(victim, 0o600)
    exp = pair("startlog")
    exp = dataclasses.replace(exp, nodes=tuple(
        dataclasses.replace(n, startcmd="echo PLANTED") if n.name == "a" else n
        for n in exp.nodes))
    lab.create(exp)
    ndir = lab.store.folder("startlog", "nodes", "a")
    lab.exec("startlog", "a", ["sh", "-c", f"rm {ndir}/startcmd.log && "
                                           f"ln -s {victim} {ndir}/startcmd.log"],
             check=True, timeout=60)
    lab.tevc("startlog", "now", "a", "reboot", wait=True)
    log = os.path.join(ndir, "startcmd.log")
    for _ in range(100):            # the start command runs in the background
        if os.path.isfile(log) and not os.path.islink(log) and open(log).read():
            break
        time.sleep(0.1)
    assert victim.read_text() == "secret\n"
    assert os.stat(victim).st_mode & 0o7777 == 0o600
    assert not os.path.islink(log) and open(log).read() == "PLANTED\n"


# FRR's daemons keep SYS_ADMIN, and in a node with an image they run the node's own files (its
# writable layer): a zebra the node planted there runs with it. As root of the host it
# mounted a devtmpfs (the host's disks) and remounted /proc/sys read-write; in the node's
# user namespace its SYS_ADMIN is that namespace's, and reaches neither.
ZEBRA = """#!/bin/sh
{{ grep CapEff /proc/self/status; mkdir -p /tmp/dd
  mount -t devtmpfs dev /tmp/dd && echo MOUNTED && umount /tmp/dd
  mount -o remount,rw /proc/sys && echo REMOUNTED && mount -o remount,ro /proc/sys
  unshare -m sh -c 'mount -o remount,rw /proc/sys && echo REMOUNTED-IN-NEW-NS'
  for p in /proc/[0-9]*; do echo pwned > "$p/root{marker}"; done
}} > /ran-zebra 2>&1
echo pwned > {marker} 2>/dev/null
exec /usr/lib/frr/zebra.real "$@"
"""


def test_routing_in_an_image_node_has_sys_admin_only_in_its_user_namespace(lab, test_image,
                                                                           tmp_path):
    import dataclasses

    from wanlab.errors import WanlabError
    marker = tmp_path / "escaped"
    exp = exp_of("frrplant", test_image, n=2)
    lab.create(exp)
    lab.exec("frrplant", "n1", ["sh", "-c", "mv /usr/lib/frr/zebra /usr/lib/frr/zebra.real && "
                                            "cat > /usr/lib/frr/zebra && "
                                            "chmod 755 /usr/lib/frr/zebra"],
             input=ZEBRA.format(marker=marker).encode(), check=True, timeout=60)
    lab.swapout("frrplant")
    lab.modify("frrplant", dataclasses.replace(exp, rtproto="ospf"))
    lab.swapin("frrplant")                      # converged: zebra.real runs under the plant
    ran = sh(lab, "frrplant", "n1", "cat /ran-zebra")
    eff = int(ran.split()[1], 16)
    assert eff & (1 << 21), ran                 # it has SYS_ADMIN ...
    assert "MOUNTED" not in ran and "REMOUNTED" not in ran, ran
    assert not marker.exists()
    # ... as a uid of the experiment's range, i.e. in its user namespace
    row = lab.store.get("frrplant")
    base = uid_base(lab, "frrplant")
    zebra = next(r for r in lab.store.resources(row.id) if r.state == "created"
                 and r.detail.get("daemon") == "zebra" and r.detail.get("node") == "n1")
    with open(f"/proc/{zebra.detail['pid']}/status") as f:
        uids = next(line for line in f if line.startswith("Uid:")).split()[1:]
    assert all(base <= int(u) < base + 65536 for u in uids), (base, uids)
    # without user namespaces (as root of the host) no FRR daemon runs an image node's files
    lab.swapout("frrplant")
    os.unlink(os.path.join(rootfs.layer_path(lab.store.folder("frrplant"), "n1"), "upper",
                           "ran-zebra"))
    os.environ["WANLAB_USERNS"] = "0"
    try:
        with pytest.raises(WanlabError, match="n1: dynamic routing.*image"):
            lab.swapin("frrplant")
    finally:
        del os.environ["WANLAB_USERNS"]
    upper = os.path.join(lab.store.folder("frrplant"), "layers", "n1", "upper")
    assert not os.path.exists(os.path.join(upper, "ran-zebra"))
    assert not marker.exists()


# Planted in an image node's layer in place of the programs wanlab used to run after entering
# the node's mount namespace or root (setpriv after nsenter or pivot_root, umount): with every
# capability it could mount a devtmpfs (the host's disks) and write a marker on the host.
PLANTED = """#!/bin/sh
m={marker}
mkdir -p /tmp/dd && mount -t devtmpfs dev /tmp/dd 2>/dev/null && echo "MOUNTED $0" >> /ran
for p in /proc/[0-9]*; do
  [ -d "$p/root${{m%/*}}" ] && echo pwned > "$p/root$m" 2>/dev/null
done
echo "ran $0" >> /ran
exec /usr/bin/$(basename "$0").real "$@"
"""


def test_programs_planted_in_the_layer_never_run_with_more_than_the_nodes_capabilities(
        lab, test_image, tmp_path):
    marker = tmp_path / "escaped"
    a = tarball(tmp_path / "a.tgz", {"etc/a": (b"a\n", 0o644)})
    exp = exp_of("planted", test_image, n=1, tarfiles=(("/", a),))
    lab.create(exp)
    plant = ("cat > /tmp/w && chmod 755 /tmp/w && mkdir -p /usr/local/sbin /usr/local/bin && "
             "for p in setpriv umount nsenter unshare; do cp /usr/bin/$p /usr/bin/$p.real && "
             "cp /tmp/w /usr/bin/$p && cp /tmp/w /usr/local/sbin/$p && "
             "cp /tmp/w /usr/local/bin/$p; done")
    lab.exec("planted", "n1", ["sh", "-c", plant], input=PLANTED.format(marker=marker).encode(),
             check=True, timeout=60)
    ran = "cat /ran 2>/dev/null; true"
    # 1. commands entering the node; 2. its holder rebuilt (it ended); 3. setup again
    assert sh(lab, "planted", "n1", "echo in") == "in\n"
    sh(lab, "planted", "n1", "kill -TERM 1", check=False)
    deadline = time.monotonic() + 60           # its holder ends: the experiment is degraded
    while lab.get("planted").state != "degraded" and time.monotonic() < deadline:
        lab.list()                             # (which checks its health)
        time.sleep(0.2)
    lab.swapin("planted", repair=True)
    assert sh(lab, "planted", "n1", "echo again") == "again\n"
    b = tarball(tmp_path / "b.tgz", {"etc/b": (b"b\n", 0o644)})
    lab.swapout("planted")
    lab.modify("planted", exp_of("planted", test_image, n=1, tarfiles=(("/", a), ("/", b))))
    lab.swapin("planted")
    assert sh(lab, "planted", "n1", "cat /etc/b") == "b\n"
    assert "MOUNTED" not in sh(lab, "planted", "n1", ran)
    assert not marker.exists()


# Each line prints its name only if the node managed it.
TRIES = ("mknod /tmp/mem c 1 1 2>/dev/null && echo mknod; "
         "unshare -Ur true 2>/dev/null && echo userns; "
         "unshare -m true 2>/dev/null && echo mountns; "
         "ln /etc/passwd {dir}/pw 2>/dev/null && echo hardlink; "
         "mkdir -p /tmp/d && mount -t tmpfs t /tmp/d 2>/dev/null && echo mount; "
         "echo 1 > /proc/sys/vm/drop_caches 2>/dev/null && echo sysctl; "
         "echo done")


def test_a_node_cannot_make_devices_namespaces_or_links_to_host_files(lab, test_image):
    lab.create(pair())
    lab.create(exp_of("tries", test_image, n=1))
    for name, node in (("pair", "a"), ("tries", "n1")):
        ndir = lab.store.folder(name, "nodes", node)
        assert sh(lab, name, node, TRIES.format(dir=ndir)) == "done\n", name
