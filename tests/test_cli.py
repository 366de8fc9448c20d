"""The CLI: one clear line for user mistakes (exit 2, no traceback), and the commands work."""

import json
import os
import subprocess
import sys

import pytest
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
    # a command ended by a signal: 128 + the signal, as a shell reports it (not 256 - 9)
    killed = wanlab(tmp_path, "exec", "clitest", node, "--", "sh", "-c", "kill -9 $$")
    assert killed.returncode == 137, (killed.returncode, killed.stderr)
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
    # 400 kbit/s of 500-byte packets: one per 10 ms while the flow ran. The sender's pace is
    # an upper bound load cannot break (the recorded window, ~1 s, plus a packet at each
    # end); a loaded machine may let the sender fall behind, so the lower bound is loose.
    f0 = flows[0]
    window = f0["stopped_s"] - f0["started_s"]
    assert 0.9 < window < 3.0, f0
    assert 25 <= f0["result"]["packets"] <= 100 * window + 2, f0
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


def test_a_mistyped_command_or_action_gets_a_suggestion(tmp_path):
    p = wanlab(tmp_path, "shwo", "x")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "unknown command 'shwo'; did you mean 'show'?" in p.stderr
    p = wanlab(tmp_path, "image", "biuld", "x")
    assert p.returncode == 2 and "did you mean 'build'?" in p.stderr
    p = wanlab(tmp_path, "qqqq")
    assert p.returncode == 2 and "did you mean" not in p.stderr and "one of: parse," in p.stderr


def test_a_closed_pipe_ends_the_command_quietly(tmp_path):
    # `wanlab parse F --json | head -c 0`: the reader is gone before wanlab writes
    r, w = os.pipe()
    os.close(r)
    p = subprocess.run([sys.executable, "-m", "wanlab.cli", "--home", str(tmp_path), "parse",
                        os.path.join(ROOT, "examples", "figure2.tcl"), "--json"],
                       cwd=ROOT, stdout=w, stderr=subprocess.PIPE, text=True, timeout=120)
    os.close(w)
    assert p.returncode == 141, p.stderr
    assert "Traceback" not in p.stderr and "Broken" not in p.stderr and "rror" not in p.stderr


def test_validate_writes_its_results_outside_the_checkout(tmp_path):
    from argparse import Namespace

    from wanlab import cli
    from wanlab.errors import WanlabError
    a = cli.build_parser().parse_args(["validate", "--quick", "--out", "res"])
    argv = cli.validate_argv("fidelity.py", a, "/home/w")
    assert argv[1:] == ["fidelity.py", "--out", os.path.abspath("res"), "--quick"]
    a = cli.build_parser().parse_args(["validate", "--only", "delay,loss"])
    assert cli.validate_argv("f.py", a, "/home/w")[2:] == ["--out", "/home/w/validate",
                                                           "--only", "delay,loss"]
    with pytest.raises(WanlabError, match="'dealy' is not a part of the suite"):
        cli.validate_argv("f.py", Namespace(only="dealy", out=None, quick=False), "/h")


@needs_root
def test_compare_takes_template_parameters(tmp_path):
    spec = tmp_path / "p.tcl"
    spec.write_text("set ns [new Simulator]\nsource tb_compat.tcl\n"
                    "define-template-parameter N 2\n$ns node\n$ns run\n")
    p = wanlab(tmp_path, "compare", str(spec), "-p", "M=3")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "parameter 'M' is not a define-template-parameter" in p.stderr, p.stderr


@needs_root
def test_show_summarises_a_large_experiment_and_selects_parts(tmp_path):
    n = 60
    spec = tmp_path / "chain.yaml"
    spec.write_text("name: chain\nnodes: [" + ", ".join(f"n{i}" for i in range(n)) + "]\n"
                    "links:\n" + "".join(f"  - {{nodes: [n{i}, n{i + 1}], delay: 1ms}}\n"
                                          for i in range(n - 1)))
    assert wanlab(tmp_path, "create", str(spec), "--no-swapin").returncode == 0
    full = wanlab(tmp_path, "show", "chain", "--all")
    assert full.returncode == 0 and full.stdout.count("route ") > n
    summary = wanlab(tmp_path, "show", "chain")
    out = summary.stdout
    assert summary.returncode == 0 and len(out.splitlines()) < 40, out
    assert f"{n} nodes, {n - 1} links, 0 LANs, {2 * (n - 1)} interfaces" in out
    assert "  n9: " in out and "  n10: " not in out and "wanlab show chain --all" in out
    one = wanlab(tmp_path, "show", "chain", "--node", "n5").stdout
    assert "  n5 (netns" in one and "  n6 (" not in one
    assert one.count(" <-> ") == 2            # its two links
    links = wanlab(tmp_path, "show", "chain", "--links").stdout
    assert links.count(" <-> ") == n - 1 and "nodes:" not in links
    js = json.loads(wanlab(tmp_path, "show", "chain", "--json", "--node", "n0").stdout)
    assert list(js["nodes"]) == ["n0"] and len(js["links"]) == 1
    bad = wanlab(tmp_path, "show", "chain", "--node", "ghost")
    assert bad.returncode == 2 and "no node 'ghost'" in bad.stderr
    assert wanlab(tmp_path, "terminate", "chain").returncode == 0


def test_parse_warns_of_link_addresses_in_two_subnets(tmp_path):
    spec = tmp_path / "t.tcl"
    spec.write_text("set ns [new Simulator]\nsource tb_compat.tcl\nset a [$ns node]\n"
                    "set b [$ns node]\nset link [$ns duplex-link $a $b 10Mb 10ms DropTail]\n"
                    "tb-set-ip-link $a $link 10.1.1.2\ntb-set-ip-link $b $link 10.1.2.3\n"
                    "$ns run\n")
    p = wanlab(tmp_path, "parse", str(spec))
    assert p.returncode == 0, p.stderr
    assert f"{spec}:5: addresses 10.1.1.2 and 10.1.2.3 of 'link' are not in one subnet /24: " \
        "configured as given" in p.stderr
