"""Copying a node's tree without following its links (wanlab/backends/emulate/nodefiles.py):
what ``image save`` keeps of a layer, and what an export leaves out."""

import os
import stat

from conftest import needs_root

from wanlab.backends.emulate import nodefiles

pytestmark = needs_root


def exact(_rel, st):
    return stat.S_IMODE(st.st_mode)


def a_layer(top, host):
    os.makedirs(top / "etc" / "opaque")
    os.setxattr(top / "etc" / "opaque", "trusted.overlay.opaque", b"y")
    (top / "etc" / "key").write_text("k\n")
    os.chmod(top / "etc" / "key", 0o600)
    os.chown(top / "etc" / "key", 1234, 5678)
    os.link(top / "etc" / "key", top / "etc" / "key-again")
    os.symlink(str(host), top / "etc" / "to-host")          # a link to a host folder
    os.mknod(top / "etc" / "issue", stat.S_IFCHR | 0o600, 0)  # an overlay whiteout
    os.mkfifo(top / "fifo")
    with open(top / "sparse", "wb") as f:
        f.truncate(64 << 20)
        f.write(b"start")
    os.chmod(top / "etc", 0o751)


def test_a_layer_is_copied_exactly_and_no_link_is_followed(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret").write_text("host\n")
    a_layer(tmp_path / "upper", host)
    out = nodefiles.copy_tree(str(tmp_path / "upper"), str(tmp_path / "copy"),
                              file_mode=exact, dir_mode=exact, exact=True)
    c = tmp_path / "copy"
    assert out.skipped == []
    assert os.readlink(c / "etc" / "to-host") == str(host)
    assert not os.path.exists(c / "etc" / "secret")
    st = os.lstat(c / "etc" / "key")
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_nlink) == \
        (0o600, 1234, 5678, 2)
    assert os.lstat(c / "etc" / "key-again").st_ino == st.st_ino
    w = os.lstat(c / "etc" / "issue")
    assert stat.S_ISCHR(w.st_mode) and w.st_rdev == 0
    assert stat.S_ISFIFO(os.lstat(c / "fifo").st_mode)
    assert os.getxattr(c / "etc" / "opaque", "trusted.overlay.opaque") == b"y"
    assert stat.S_IMODE(os.stat(c / "etc").st_mode) == 0o751
    sp = os.stat(c / "sparse")
    assert sp.st_size == 64 << 20 and sp.st_blocks * 512 < 1 << 20


def test_an_export_copies_only_plain_files(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    a_layer(tmp_path / "upper", host)
    out = nodefiles.copy_tree(str(tmp_path / "upper"), str(tmp_path / "copy"),
                              file_mode=lambda r, st: 0o644, dir_mode=lambda r, st: 0o755)
    left = dict(out.skipped)
    assert left == {"etc/key": "a hard link", "etc/key-again": "a hard link",
                    "etc/to-host": "not a regular file", "etc/issue": "not a regular file",
                    "fifo": "not a regular file"}
    assert out.files == 1 and sorted(os.listdir(tmp_path / "copy")) == ["etc", "sparse"]


def test_a_kept_layer_follows_its_range_and_is_saved_0_based(tmp_path):
    """A layer's owners are its range's (``idmap.own_layer``: shifted, never through a link,
    set-id bits kept); ``image save``'s copy shifts them, and a file capability's root,
    back to 0-based; ids outside the range (wanlab's mount points) stay."""
    import json
    import struct

    from wanlab.backends.emulate import idmap
    base = 1 << 30
    host = tmp_path / "host"
    host.mkdir()
    upper = tmp_path / "exp" / "layers" / "n" / "upper"
    (upper / "usr" / "bin").mkdir(parents=True)
    (upper / "usr" / "bin" / "su").write_text("#!/bin/sh\n")
    os.chmod(upper / "usr" / "bin" / "su", 0o4755)
    (upper / "home").mkdir()
    (upper / "home" / "f").write_text("u\n")
    os.chown(upper / "home" / "f", 1000, 1000)
    os.symlink(str(host), upper / "to-host")              # a link to a host folder
    (upper / "mnt").mkdir()
    os.chown(upper / "mnt", 70000, 70000)                 # outside the range: stays
    folder = str(tmp_path / "exp")
    idmap.own_layer(folder, "n", base)                    # a layer made without a range
    assert os.stat(upper).st_uid == base and os.stat(upper / "home" / "f").st_gid == base + 1000
    assert os.stat(upper / "usr" / "bin" / "su").st_mode & 0o7777 == 0o4755
    assert os.stat(upper / "mnt").st_uid == 70000 and os.stat(host).st_uid == 0
    assert os.lstat(upper / "to-host").st_uid == base
    assert json.loads((upper.parent / "owner.json").read_text()) == {"base": base}
    # a file capability set inside the user namespace names its root: base
    os.setxattr(upper / "home" / "f", "security.capability",
                struct.pack("<IIIIII", 0x03000001, 1 << 13, 0, 0, 0, base))
    nodefiles.copy_tree(str(upper), str(tmp_path / "saved"), file_mode=exact, dir_mode=exact,
                        exact=True, ids=lambda i: idmap.shift_id(i, base, 0))
    saved = tmp_path / "saved"
    assert [os.lstat(saved / p).st_uid for p in ("", "usr/bin/su", "home/f", "to-host")] == \
        [0, 0, 1000, 0]
    assert os.stat(saved / "mnt").st_uid == 70000
    cap = os.getxattr(saved / "home" / "f", "security.capability")
    assert len(cap) == 20 and cap[3] == 0x02          # 0-based: the plain (v2) form
    idmap.own_layer(folder, "n", 0)                       # and back (WANLAB_USERNS=0)
    assert os.stat(upper / "home" / "f").st_uid == 1000 and os.stat(upper).st_uid == 0


def test_output_in_a_node_folder_never_goes_through_what_the_node_left_there(tmp_path):
    """A link to a host file, a FIFO or a hard link the node put where wanlab appends its
    output (startcmd.log, FRR's logs and configuration) is replaced, never written through;
    a file of the node's own is appended to."""
    victim = tmp_path / "victim"
    victim.write_text("secret\n")
    os.chmod(victim, 0o600)
    node = tmp_path / "node"
    node.mkdir()
    os.symlink(victim, node / "link.log")
    os.mkfifo(node / "fifo.log")
    os.link(victim, node / "hard.log")
    (node / "own.log").write_text("before\n")
    (node / "dir.log").mkdir()
    for name in ("link.log", "fifo.log", "hard.log", "own.log", "new.log"):
        fd = nodefiles.open_output(str(node), name, 0o640, (1234, 5678))
        with os.fdopen(fd, "a") as f:
            f.write("out\n")
        st = os.lstat(node / name)
        assert stat.S_ISREG(st.st_mode) and st.st_nlink == 1, name
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o640, 1234, 5678)
    assert victim.read_text() == "secret\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert victim.stat().st_nlink == 1
    assert (node / "own.log").read_text() == "before\nout\n"
    assert (node / "link.log").read_text() == "out\n"
    try:
        nodefiles.open_output(str(node), "dir.log")
        raise AssertionError("a folder was opened for output")
    except OSError:
        pass
    os.symlink(victim, node / "exit")
    os.mkfifo(node / "pipe")
    for name in ("exit", "pipe"):
        try:                      # neither followed nor blocking on a FIFO
            nodefiles.read_small(str(node), name)
            raise AssertionError(f"{name} was read")
        except OSError:
            pass
    assert nodefiles.read_small(str(node), "own.log", 3) == "bef"
