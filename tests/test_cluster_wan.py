"""A cluster given by address, with wide-area machines: the test stands in for a researcher
who started a Ray cluster on three machines (here a local test cluster whose paths are
shaped, 2/18/40 ms access delays, so m0-m1 is 20 ms one way, m0-m2 42, m1-m2 58), and
then joins it with ``wanlab cluster up HEAD:PORT --wide-area all``, maps a wide-area
request onto it with wanassign, and takes wanlab away again with ``cluster down``, which
leaves the researcher's Ray running. One cluster for the module (Ray takes a while)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, needs_root, wanlab_cli

pytestmark = [needs_root,
              pytest.mark.skipif(not __import__("importlib").util.find_spec("ray"),
                                 reason="ray is installed by make install")]

ACCESS = "2ms,18ms,40ms"
WIDE = """\
name: wan
nodes:
  - {name: a, wide_area: true}
  - {name: b, wide_area: true}
  - h
links:
  - {name: ab, nodes: [a, b], delay: 20ms}
  - {name: ah, nodes: [a, h], delay: 1ms, bandwidth: 100Mb}
"""


def wl(home, *args, check=True, timeout=600):
    return wanlab_cli(home, *args, check=check, timeout=timeout)


def py(code: str, *args, timeout=900) -> str:
    """Run ``code`` in a child Python (Ray's daemons must not be this test's children:
    the autouse fixture stops those after each test)."""
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       timeout=timeout, check=False, env={**os.environ, "PYTHONPATH": ROOT})
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


USER_UP = """
import json, sys
from wanlab.cluster import local
from wanlab.store.db import Store
info = local.up_local(Store(sys.argv[1]), 3, wan_delay=sys.argv[2], measure=False,
                      say=lambda s: None)
print(json.dumps({"head": info.head, "netns": {m.address: m.netns for m in info.machines}}))
"""
USER_DOWN = """
import sys
from wanlab.cluster import local
from wanlab.store.db import Store
local.down(Store(sys.argv[1]), quiet=True)
"""
USER_PIDS = """
import json, sys
from wanlab.store import cluster as rec
from wanlab.store.db import Store
print(json.dumps({r.name: [r.detail["pid"], r.detail["started"]]
                  for r in rec.live(Store(sys.argv[1]), "process")}))
"""
NAMED_ACTORS = """
import json, logging, sys
import ray
ray.init(address=sys.argv[1], logging_level=logging.WARNING, log_to_driver=False)
print(json.dumps(ray.util.list_named_actors(all_namespaces=True)))
ray.shutdown()
"""


@pytest.fixture(scope="module")
def joined(tmp_path_factory):
    """The researcher's Ray cluster (its own store) and wanlab's home that joins it."""
    base = tmp_path_factory.mktemp("wan")
    user, home = base / "user", base / "home"
    try:
        started = json.loads(py(USER_UP, str(user), ACCESS).splitlines()[-1])
        yield started["head"], user, home, started["netns"]
    finally:
        wl(home, "cluster", "down", check=False, timeout=300)
        py(USER_DOWN, str(user), timeout=300)


def test_a_cluster_joined_by_address_has_its_paths_measured(joined):
    head, user, home, netns = joined
    p = wl(home, "cluster", "up", head, "--wide-area", "all", timeout=900)
    assert "3 machines up" in p.stdout, p.stdout + p.stderr
    status = wl(home, "cluster", "status", "--matrix").stdout
    assert "(joined by address)" in status, status
    rows = [x.split() for x in status.splitlines() if re.match(r"\s+m\d\s", x)]
    assert [r[0] for r in rows[:3]] == ["m0", "m1", "m2"], status
    assert all(r[2] == "up" and "wide-area" in r for r in rows[:3]), status
    # each agent runs in its machine's namespace (where the researcher's worker runs)
    for r in rows[:3]:
        pid = int(r[r.index("pid") + 1])
        assert os.stat(f"/proc/{pid}/ns/net").st_ino == \
            os.stat(f"/run/netns/{netns[r[1]]}").st_ino, (r, netns)
    # the measured one-way delays are the shaped paths': 20, 42 and 58 ms (at least; an
    # engine on a loaded machine adds a little)
    from wanlab.cluster import join
    from wanlab.store.db import Store
    store = Store(str(home))
    try:
        mx = join.matrix(store)
    finally:
        store.close()
    d = mx["one_way_s"]
    for (i, j), want in {(0, 1): 0.020, (0, 2): 0.042, (1, 2): 0.058}.items():
        assert want <= d[i][j] < want + 0.005, (i, j, d)
    assert mx["bandwidth_bps"][0][1] > 0 and mx["bandwidth_bps"][2][1] > 0
    assert re.search(r"m0\s+-\s+20\.\d\d / \d+", status), status


def test_a_requested_20ms_pair_lands_on_the_machines_20ms_apart(joined, tmp_path):
    head, user, home, netns = joined
    spec = tmp_path / "wan.yaml"
    spec.write_text(WIDE)
    p = wl(home, "create", str(spec), "--cluster")
    assert "wide-area nodes (wanassign)" in p.stdout, p.stdout
    assert re.search(r"a -> b: delay asked 20.00 ms, path 2\d.\d\d ms", p.stdout), p.stdout
    info = json.loads(wl(home, "show", "wan", "--json").stdout)
    site = info["wide_area"]["site_of"]
    assert {site["a"], site["b"]} == {"m0", "m1"}, site
    assert info["machine_of"]["h"] == site["a"]         # a's own network stays with it
    assert all(x["error"] < 0.1 for x in info["wide_area"]["pairs"]), info["wide_area"]
    assert "error" in wl(home, "show", "wan").stdout
    # the wanlink is the real path: twice 20 ms
    ping = wl(home, "exec", "wan", "a", "--", "ping", "-c", "5", "-i", "0.2", "b")
    rtt_min = float(re.search(r"= ([\d.]+)/", ping.stdout).group(1))
    assert 40.0 <= rtt_min < 50.0, ping.stdout
    wl(home, "terminate", "wan")
    assert "wan" not in wl(home, "list").stdout


def test_down_removes_wanlab_and_leaves_the_researchers_ray_running(joined):
    """Last: takes wanlab off the cluster."""
    head, user, home, netns = joined
    assert "agent-m0" in py(NAMED_ACTORS, head)
    wl(home, "cluster", "down")
    assert "no cluster is up" in wl(home, "cluster", "status", check=False).stdout
    assert "agent-" not in py(NAMED_ACTORS, head)
    assert not any((home / "machines").glob("m*"))
    from wanlab.backends.emulate import procs
    pids = json.loads(py(USER_PIDS, str(user)))
    assert set(pids) == {"ray-head", "ray-m0", "ray-m1", "ray-m2"}
    assert all(procs.alive(pid, started) for pid, started in pids.values()), pids
