"""IPv6 only on a cluster: emulated hosts on two machines, a simulated core in a third
machine's engine, so that every packet crosses two cut links (tunnelled engine to engine)
and the simulated routers (neighbour discovery, hop limit, ICMPv6 errors) — ping, a
hop-limited ping, traceroute and TCP by the hosts file's AAAA names. (Dual stack over cut
links, with OSPF and OSPFv3 across machines: tests/test_cluster.py.) The session's local
test cluster (tests/conftest.py)."""

from __future__ import annotations

import json
import re

import pytest
from conftest import needs_root, wanlab_cli

pytestmark = [needs_root,
              pytest.mark.skipif(not __import__("importlib").util.find_spec("ray"),
                                 reason="ray is installed by make install")]

# a (m0) —5 ms— r1 —5 ms— r2 —10 Mbit/s 5 ms— b (m2); r1 and r2 simulated, in m1's engine
CORE6 = """\
set ns [new Simulator]
source tb_compat.tcl
tb-set-ipv6 only
set a [$ns node]
set b [$ns node]
$ns make-simulated {
    set r1 [$ns node]
    set r2 [$ns node]
}
$ns duplex-link $a $r1 100Mb 5ms DropTail
$ns duplex-link $r1 $r2 100Mb 5ms DropTail
$ns duplex-link $r2 $b 10Mb 5ms DropTail
tb-fix-node $a m0
tb-fix-node $r1 m1
tb-fix-node $b m2
$ns rtproto Static
$ns run
"""


def wl(home, *args, check=True, timeout=600):
    return wanlab_cli(home, *args, check=check, timeout=timeout, cwd="/")


@pytest.fixture(scope="module")
def home(shared_cluster):
    yield shared_cluster.home
    shared_cluster.clear()


def test_ipv6_only_over_cut_links_and_a_simulated_core(home, tmp_path):
    spec = tmp_path / "core6.tcl"
    spec.write_text(CORE6)
    wl(home, "create", str(spec), "--cluster")
    try:
        info = json.loads(wl(home, "show", "core6", "--json").stdout)
        assert info["machine_of"] == {"a": "m0", "r1": "m1", "r2": "m1", "b": "m2"}, info
        # each node as its own machine's part reports it
        nodes = {n: info["parts"][m]["nodes"][n] for n, m in info["machine_of"].items()}
        # IPv6 only: every interface, the simulated routers' too, has an IPv6 address alone
        assert all(":" in i["ip"] and i["ip"] == i["ip6"] for n in nodes.values()
                   for i in n["interfaces"]), nodes
        near = {n: [i["ip6"].split("/")[0] for i in nodes[n]["interfaces"]]
                for n in ("r1", "r2", "b")}
        # one command on a (each costs a call through the cluster): ping by b's AAAA name,
        # a hop-limited ping, traceroute, then TCP to b's iperf3 server
        wl(home, "exec", "core6", "b", "--", "iperf3", "-s", "-1", "-D", "-6")
        out = wl(home, "exec", "core6", "a", "--", "sh", "-c", f"""
            ping -6 -n -c 5 -i 0.2 b; echo ==
            ping -6 -n -c 1 -t 1 -W 2 {near["b"][0]}; echo ==
            traceroute -6 -n -q 1 b; echo ==
            iperf3 -6 -c b -t 2 -J""", check=False).stdout
        ping, limited, hops, perf = out.split("==\n")
        # 3 links of 5 ms each way
        rtt_min = float(re.search(r"= ([\d.]+)/", ping).group(1))
        assert 30.0 <= rtt_min < 40.0, ping
        # r1 (in m1's engine) sends ICMPv6 time exceeded back over the cut link to m0
        assert "Time exceeded" in limited and near["r1"][0] in limited, limited
        assert re.findall(r"^\s*\d+\s+(\S+)", hops, re.M) == [
            near["r1"][0], near["r2"][0], near["b"][0]], hops
        # TCP over IPv6, shaped by r2-b's 10 Mbit/s
        perf = json.loads(perf)
        assert perf["start"]["connected"][0]["remote_host"] == near["b"][0], perf["start"]
        bps = perf["end"]["sum_received"]["bits_per_second"]
        assert 2e6 < bps <= 10.1e6, bps
    finally:
        wl(home, "terminate", "core6")
    assert "core6" not in wl(home, "list").stdout


def test_an_ipv6_only_simulation_over_the_machines_gives_the_bytes_of_one_engine(home,
                                                                                 tmp_path):
    """``run --simulate --cluster`` of an IPv6-only experiment: the agents' IPv6 packets
    cross the machines' engines (synchronised over their bridge) as within one engine."""
    from test_simulate_parallel import THREE_SITES
    spec = tmp_path / "three6.tcl"
    spec.write_text(THREE_SITES.replace("source tb_compat.tcl\n",
                                        "source tb_compat.tcl\ntb-set-ipv6 only\n"))
    one, many = tmp_path / "one", tmp_path / "many"
    wl(home, "run", str(spec), "--simulate", "--seed", "5", "--out", str(one))
    p = wl(home, "run", str(spec), "--simulate", "--cluster", "--seed", "5", "--out",
           str(many))
    # the session's cluster has 3 machines, or more after test_cluster.py's joins
    used = re.search(r"^(\d+) machines: m0 \(\d+ nodes\)", p.stdout, re.M)
    assert used and int(used.group(1)) >= 3, p.stdout
    assert json.loads((many / "summary.json").read_text())["engine"]["engines"] == \
        int(used.group(1))
    result = (one / "result.json").read_bytes()
    assert result == (many / "result.json").read_bytes()
    # every flow crosses the core (between the machines): the TCPs and the CBR delivered
    flows = json.loads((many / "summary.json").read_text())["flows"]
    assert len(flows) == 4 and all(f["result"]["bytes"] > 0 for f in flows), flows
