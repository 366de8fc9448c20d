"""Shared fixtures: a private wanlab home per test, and IR builders for small topologies.

Tests run as root on real namespaces; every experiment a test creates lives
in its own temporary WANLAB_HOME and is cleaned up at the end, even when the
test fails.
"""

import os
import re
import subprocess

import pytest

from wanlab.model.ir import Experiment, Lan, LanMember, Link, LinkParams, Node, validate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINE = os.path.join(ROOT, "target", "release", "wanlab-engine")

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


@pytest.fixture
def lab(tmp_path):
    from wanlab.lifecycle import Lab
    lab = Lab(str(tmp_path / "home"))
    yield lab
    for row in lab.list():
        lab.cleanup(row.name)
        lab.terminate(row.name)
    lab.close()


def params(bw=0, delay=0.0, loss=0.0):
    return LinkParams(bandwidth_bps=bw, delay_s=delay, loss=loss)


def pair(name="pair", bw=0, delay=0.0, loss=0.0, seed=1):
    p = params(bw, delay, loss)
    return validate(Experiment(name, nodes=(Node("a"), Node("b")),
                               links=(Link("link0", "a", "b", ab=p, ba=p),), seed=seed))


def chain(n, name="chain", delay=0.0):
    p = params(0, delay)
    nodes = tuple(Node(f"n{i}") for i in range(n))
    links = tuple(Link(f"l{i}", f"n{i}", f"n{i+1}", ab=p, ba=p) for i in range(n - 1))
    return validate(Experiment(name, nodes=nodes, links=links))


def lan(n, name="lanexp", delay=0.0):
    half = params(0, delay / 2)
    nodes = tuple(Node(f"h{i}") for i in range(n))
    return validate(Experiment(name, nodes=nodes, lans=(Lan(
        "lan0", tuple(LanMember(f"h{i}", to_lan=half, from_lan=half) for i in range(n)),
        delay_s=delay),)))


def ping_rtts(lab, exp, src, dst, count=5, interval=0.05):
    """RTTs in ms of ``count`` pings from node ``src`` to host ``dst``."""
    out = lab.exec(exp, src, ["ping", "-n", "-c", str(count), "-i", str(interval), "-W", "2",
                              dst], capture_output=True, text=True)
    return [float(x) for x in re.findall(r"time=([\d.]+) ms", out.stdout)]


def leftovers(short):
    """Namespaces and root-namespace devices carrying an experiment's short id."""
    ns = [n for n in os.listdir("/run/netns") if n.startswith(f"wl-{short}-")] \
        if os.path.isdir("/run/netns") else []
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    devs = re.findall(rf"\d+: (wl{short}-\d+)", links)
    return ns + devs
