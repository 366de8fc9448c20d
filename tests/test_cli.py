"""The CLI: one clear line for user mistakes (exit 2, no traceback), and the commands work."""

import json
import os
import subprocess
import sys

from conftest import ROOT, leftovers, needs_root


def wanlab(home, *args, input=None):
    return subprocess.run([sys.executable, "-m", "wanlab.cli", "--home", str(home), *args],
                          cwd=ROOT, capture_output=True, text=True, input=input, timeout=120)


def test_parse_json_has_the_documented_top_level_lists(tmp_path):
    p = wanlab(tmp_path, "parse", os.path.join(ROOT, "examples", "figure2.tcl"), "--json")
    assert p.returncode == 0, p.stderr
    ir = json.loads(p.stdout)
    for key in ("nodes", "links", "lans", "events", "programs", "agents"):
        assert isinstance(ir[key], list)
    assert [n["name"] for n in ir["nodes"]] == ["source", "router", "dest"]
    assert not os.path.exists(tmp_path / "wanlab.db")       # parse touches nothing


def test_broken_ns_script_is_one_line_with_file_and_line(tmp_path):
    bad = tmp_path / "bad.tcl"
    bad.write_text("set ns [new Simulator]\nset a [$ns node]\n"
                   "$ns duplex-link $a $nowhere 10Mb 5ms DropTail\n$ns run\n")
    p = wanlab(tmp_path, "parse", str(bad))
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    assert f"{bad}:3" in p.stderr and len(p.stderr.strip().splitlines()) == 1


@needs_root
def test_bad_yaml_key_creates_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nnodes: [a, b]\nlinks:\n  - {nodes: [a, b], bandwith: 10Mb}\n")
    p = wanlab(tmp_path, "create", str(bad))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "bandwith" in p.stderr and "bandwidth" in p.stderr
    assert json.loads(wanlab(tmp_path, "list", "--json").stdout) == []


@needs_root
def test_unknown_experiment_and_node_are_clear_errors(tmp_path):
    p = wanlab(tmp_path, "show", "nope")
    assert p.returncode == 2 and p.stderr.strip() == \
        "wanlab: error: no experiment named 'nope' (see 'wanlab list')"


@needs_root
def test_create_exec_show_terminate(tmp_path):
    spec = os.path.join(ROOT, "examples", "lan.yaml")
    p = wanlab(tmp_path, "create", spec, "--name", "clitest")
    assert p.returncode == 0, p.stderr
    short = json.loads(wanlab(tmp_path, "list", "--json").stdout)[0]["id"]
    show = json.loads(wanlab(tmp_path, "show", "clitest", "--json").stdout)
    assert show["state"] == "active" and show["lans"]
    node = next(iter(show["nodes"]))
    e = wanlab(tmp_path, "exec", "clitest", node, "--", "sh", "-c", "read x; echo got $x; exit 4",
               input="hi\n")
    assert e.returncode == 4 and e.stdout == "got hi\n"
    bad = wanlab(tmp_path, "exec", "clitest", "ghost", "--", "true")
    assert bad.returncode == 2 and "no node 'ghost'" in bad.stderr
    assert wanlab(tmp_path, "terminate", "clitest").returncode == 0
    assert leftovers(short) == []
    assert wanlab(tmp_path, "cleanup", "--all").returncode == 0
    assert wanlab(tmp_path, "cleanup", "--all").returncode == 0


@needs_root
def test_run_plays_the_timeline_and_keeps_results(tmp_path):
    spec = tmp_path / "short.tcl"
    spec.write_text("""set ns [new Simulator]
set a [$ns node]
set b [$ns node]
set link0 [$ns duplex-link $a $b 10Mb 2ms DropTail]
set udp0 [new Agent/UDP]
$ns attach-agent $a $udp0
set null0 [new Agent/Null]
$ns attach-agent $b $null0
$ns connect $udp0 $null0
set cbr0 [new Application/Traffic/CBR]
$cbr0 set packetSize_ 500
$cbr0 set rate_ 400kb
$cbr0 attach-agent $udp0
$ns at 0.2 "$cbr0 start"
$ns at 0.7 "$link0 delay 10ms"
$ns at 1.2 "$cbr0 stop"
$ns run
""")
    p = wanlab(tmp_path, "run", str(spec))
    assert p.returncode == 0, p.stderr
    assert "cbr0 start  -> ok" in p.stdout and "link0 delay 10ms  -> ok" in p.stdout
    plot = next(line.split(": ", 1)[1] for line in p.stdout.splitlines()
                if line.startswith("plot: "))
    with open(plot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    listed = json.loads(wanlab(tmp_path, "list", "--json").stdout)
    assert listed[0]["state"] == "swapped"
    flows = json.loads(wanlab(tmp_path, "flows", "short", "--json").stdout)
    # 400 kbit/s of 500-byte packets for 1 s: 100 packets (one per 10 ms: a start or stop
    # that a loaded machine runs 30 ms late costs 3)
    assert abs(flows[0]["result"]["packets"] - 100) <= 6
    assert wanlab(tmp_path, "terminate", "short").returncode == 0


@needs_root
def test_ospf_through_the_cli_whose_umask_is_077(tmp_path):
    """The CLI creates everything private (umask 077); a node's own /run and /etc/hosts
    must still be usable by the node's non-root users: FRR's daemons (user frr) and any
    program that drops privileges (once, zebra could not write /run/frr and every OSPF
    experiment made through the CLI failed, while in-process tests passed)."""
    spec = tmp_path / "o.yaml"
    spec.write_text("name: o\nrouting: ospf\nnodes: [a, b, c]\nlinks:\n"
                    "  - {name: l0, nodes: [a, b], delay: 1ms}\n"
                    "  - {name: l1, nodes: [b, c], delay: 1ms}\n")
    p = wanlab(tmp_path, "create", str(spec))
    assert p.returncode == 0, p.stderr
    p = wanlab(tmp_path, "exec", "o", "a", "--", "sh", "-c",
               "ip route | grep -c 'proto ospf'; setpriv --reuid nobody --regid nogroup "
               "--clear-groups cat /etc/hosts | grep -c '[[:space:]]c$\\|[[:space:]]c '")
    assert p.returncode == 0, p.stdout + p.stderr
    ospf_routes, hosts_lines = (int(x) for x in p.stdout.split())
    assert ospf_routes >= 1 and hosts_lines >= 1, p.stdout
    # FRR (user frr) reaches its log file in the node's folder through the hidden state
    assert (tmp_path / "exps" / "o" / "nodes" / "a" / "zebra.log").stat().st_size > 0
    assert wanlab(tmp_path, "terminate", "o").returncode == 0
