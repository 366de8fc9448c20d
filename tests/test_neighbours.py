"""Room in the host's ARP table: a LAN whose members all talk to each other needs more
neighbour entries than the kernel's default limit (1 024, for the whole host)."""

import subprocess

from conftest import needs_root

from wanlab.backends.emulate import neighbours
from wanlab.frontends import yaml_spec
from wanlab.plan.plan import make_plan

N = 36       # 36 · 35 = 1 260 entries: over the default hard limit of 1 024


def lan_of(n: int, name: str = "arp"):
    names = ", ".join(f"n{i}" for i in range(n))
    return yaml_spec.loads(f"name: {name}\nnodes: [{names}]\n"
                           f"lans: [{{name: wan, nodes: [{names}]}}]\n")


def test_need_counts_every_ordered_pair_of_each_network():
    plan = make_plan(lan_of(5), "abcd")
    assert neighbours.needed(plan) == 5 * 4
    chain = yaml_spec.loads("name: c\nnodes: [a, b, c]\n"
                            "links: [{name: l1, nodes: [a, b]}, {name: l2, nodes: [b, c]}]\n")
    assert neighbours.needed(make_plan(chain, "abcd")) == 2 + 2


@needs_root
def test_every_member_of_a_big_lan_reaches_every_other_at_once(lab):
    saved = {k: neighbours._read(k) for k in (1, 2, 3)}
    try:
        # the kernel's defaults, as on a fresh machine (an earlier run may have raised them)
        for k, v in ((1, 128), (2, 512), (3, 1024)):
            neighbours._write(k, v)
        lab.create(lan_of(N))
        assert neighbours._read(3) >= N * (N - 1)
        # every member pings every other within a few seconds: entries younger than 5 s
        # cannot be collected, so without the room ARP fails ("neighbor table overflow")
        procs = []
        for i in range(N):
            targets = " ".join(f"n{j}-wan" for j in range(N) if j != i)
            script = (f"bad=0; for h in {targets}; do ping -n -q -c 1 -W 3 $h >/dev/null "
                      f"|| bad=$((bad+1)); done; echo $bad")
            procs.append(subprocess.Popen(lab.node_argv("arp", f"n{i}", ["sh", "-c", script]),
                                          stdout=subprocess.PIPE, text=True))
        failed = [int(p.communicate(timeout=300)[0].split()[-1]) for p in procs]
        assert sum(failed) == 0, failed
    finally:
        for k in (3, 2, 1):       # the host as it was found
            neighbours._write(k, saved[k])
