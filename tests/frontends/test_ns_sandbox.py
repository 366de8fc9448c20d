"""The ns-2 parser is a sandbox: no files, processes or sockets; bounded time and memory."""

import json
import os
import random
import re
import subprocess
import time

import pytest

from wanlab.errors import SpecError
from wanlab.frontends import ns


@pytest.mark.parametrize("cmd,word", [
    ("exec id > {tmp}/P", "exec"),
    ("set f [open /etc/shadow r]", "open"),
    ("file delete -force {tmp}/keep", "file"),
    ("socket localhost 22", "socket"),
    ("exec sleep 95 &", "exec"),
    ("cd /", "cd"),
    ("glob /etc/*", "glob"),
    ("load /lib/x86_64-linux-gnu/libc.so.6", "load"),
    ("interp create x", "interp"),
    ("after 100000", "after"),
])
def test_commands_outside_the_sandbox_are_refused_with_their_line(tcl, tmp_path, cmd, word):
    keep = tmp_path / "keep"
    keep.write_text("still here")
    with pytest.raises(SpecError) as ei:
        tcl("set a [$ns node]\n" + cmd.format(tmp=tmp_path) + "\n$ns run\n")
    err = ei.value
    assert err.line == 4 and err.file.endswith("t.tcl"), str(err)
    assert f"'{word}' is not available" in err.message and "sandbox" in err.message
    assert not (tmp_path / "P").exists() and keep.read_text() == "still here"


def test_endless_loop_in_a_proc_names_the_limit_and_the_line(tcl):
    with pytest.raises(SpecError, match=r"t.tcl:4: the script ran longer than the parse time "
                                        r"limit"):
        tcl("proc spin {} {\n  while 1 {}\n}\nspin\n$ns run\n", timeout=1)


def test_command_limit(tcl, monkeypatch):
    monkeypatch.setattr(ns, "MAX_COMMANDS", 20_000)
    # the limit strikes inside f (line 3) or in the loop (lines 4-5)
    with pytest.raises(SpecError, match=r"t.tcl:[345]: the script ran more than 20000 Tcl "
                                        r"commands"):
        tcl("proc f {} {}\nwhile 1 {\n  f\n}\n$ns run\n")


def test_memory_limit(tcl, monkeypatch):
    monkeypatch.setattr(ns, "MAX_MEMORY_BYTES", 256 << 20)
    with pytest.raises(SpecError, match="parse memory limit of 256 MB"):
        tcl("set x [string repeat x 400000000]\n$ns run\n")


def test_timeout_kills_the_whole_process_group(tmp_path):
    marker = f"{time.time() % 1000:.6f}"
    script = f"sleep 95.{marker.replace('.', '')} & sleep 95"
    with pytest.raises(SpecError, match="did not finish within the parse time limit of 1 s"):
        ns._run_tclsh(["sh", "-c", script], str(tmp_path), 1.0, "x.tcl")
    time.sleep(0.2)
    left = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.replace(".", "").encode() in f.read():
                        left.append(pid)
            except OSError:
                pass
    assert left == []


def test_source_reads_only_files_beside_the_script(tcl, tmp_path):
    (tmp_path / "lib.tcl").write_text("set b [$ns node]\n")
    e = tcl("source lib.tcl\nsource /usr/testbed/lib/ns2ir/tb_compat.tcl\n$ns run\n")
    assert [n.name for n in e.nodes] == ["b"] and e.nodes[0].source.file.endswith("lib.tcl")
    for bad, why in [("/etc/passwd", "outside the script's folder"),
                     ("../x.tcl", "outside the script's folder"),
                     ("nope.tcl", "no such file"), ("link.tcl", "symbolic link")]:
        if bad == "link.tcl" and not (tmp_path / "link.tcl").exists():
            os.symlink("/etc/hostname", tmp_path / "link.tcl")
        with pytest.raises(SpecError, match=f"t.tcl:4: source: .*{why}"):
            tcl(f"set a [$ns node]\nsource {bad}\n$ns run\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_source_refuses_another_users_file(tcl, tmp_path):
    lib = tmp_path / "theirs.tcl"
    lib.write_text("set b [$ns node]\n")
    os.chown(lib, 65534, 65534)
    with pytest.raises(SpecError, match="t.tcl:3: source: 'theirs.tcl' belongs to another user"):
        tcl("source theirs.tcl\n$ns run\n")


def test_random_bytes_are_not_an_experiment(tmp_path):
    rng = random.Random(7)
    for i in range(5):
        p = tmp_path / f"r{i}.tcl"
        p.write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
        with pytest.raises(SpecError):
            ns.parse(p, timeout=10)


def test_puts_and_script_output_stay_out_of_the_records(tcl):
    e = tcl('puts "{\\"ok\\": false}"\nputs stderr boom\nset a [$ns node]\n$ns run\n')
    assert [n.name for n in e.nodes] == ["a"]


# -- names: Emulab's renaming ---------------------------------------------------------

def test_objects_are_named_after_their_variable_everywhere(tcl):
    e = tcl("""\
        set ping [$ns node]
        set pong [$ns node]
        set n(1) [$ns node]
        set lk [$ns duplex-link $ping $pong 10Mb 1ms DropTail]
        set lan [$ns make-lan "$pong $n(1)" 10Mb 1ms]
        tb-set-ip ping 10.0.0.1
        tb-set-node-startcmd $pong "echo I am $pong on $lk and $lan"
        $n(1) start-command "echo $n(1)"
        set p [$ping program-agent -command "ping -c1 pong"]
        $ns at 1 "$p start"
        $ns at 2 "$lk down"
        $ns run
    """)
    assert [n.name for n in e.nodes] == ["ping", "pong", "n-1"]
    assert e.links[0].name == "lk" and e.links[0].ip_a == "10.0.0.1"
    assert e.node("pong").startcmd == "echo I am pong on lk and lan"
    assert e.node("n-1").startcmd == "echo n-1"
    assert [(ev.target, ev.action) for ev in e.events] == [("p", "start"), ("lk", "down")]
    assert not re.search(r"_o[0-9]", json.dumps(e.to_json()))


def test_non_ascii_and_other_bad_variable_names_are_errors(tcl):
    with pytest.raises(SpecError, match=r"t.tcl:3: variable Ωmega cannot name the Node"):
        tcl("set Ωmega [$ns node]\n$ns run\n")
    with pytest.raises(SpecError, match=r"t.tcl:4: variable x.y cannot name the Node"):
        tcl("set a [$ns node]\nset x.y [$ns node]\n$ns run\n")


def test_reused_names_are_errors_as_in_emulab(tcl):
    with pytest.raises(SpecError, match=r"t.tcl:4: variable a cannot name the Node: the Node "
                                        r"created at line 3 is already named 'a'"):
        tcl("set a [$ns node]\nset a [$ns node]\n$ns run\n")
    with pytest.raises(SpecError, match=r"t.tcl:4: .*already named 'my-node'"):
        tcl("set my-node [$ns node]\nset my_node [$ns node]\n$ns run\n")


def test_underscore_becomes_dash_with_a_warning(tcl):
    e = tcl("set my_node [$ns node]\ntb-set-node-startcmd $my_node \"echo $my_node\"\n$ns run\n")
    assert e.nodes[0].name == "my-node" and e.nodes[0].startcmd == "echo my-node"
    assert any("t.tcl:3:" in w and "'my-node'" in w for w in e.warnings)


def test_a_node_named_like_a_tcl_command(tcl):
    e = tcl("""\
        set source [$ns node]
        set b [$ns node]
        $ns duplex-link $source $b 1Mb 1ms DropTail
        $source add-route $b $b
        $ns rtproto Manual
        $ns run
    """)
    assert [n.name for n in e.nodes] == ["source", "b"]
    assert [(r.dst, r.via) for r in e.node("source").routes] == [("b", "b")]


def test_unnamed_objects_get_generated_names_in_messages_too(tcl):
    with pytest.raises(SpecError, match=r"t.tcl:8: tb-set-ip: node node0 has 2 links"):
        tcl("""\
            set a [$ns node]
            set b [$ns node]
            lappend l [$ns node]
            $ns duplex-link [lindex $l 0] $a 1Mb 1ms DropTail
            $ns duplex-link [lindex $l 0] $b 1Mb 1ms DropTail
            tb-set-ip [lindex $l 0] 10.0.0.1
            $ns run
        """.replace("            ", "", 1))


def test_parse_timeout_leaves_no_process(tcl):
    t0 = time.monotonic()
    with pytest.raises(SpecError):
        tcl("while 1 {}\n", timeout=1)
    assert time.monotonic() - t0 < 10
    out = subprocess.run(["pgrep", "-f", "wanlab/frontends/tcl/run.tcl .*wanlab-ns-"],
                         capture_output=True, text=True).stdout
    # other helpers may parse at the same time: only our own children matter
    mine = [p for p in out.split() if _ppid(p) == os.getpid()]
    assert mine == []


def _ppid(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1
