"""Every front door (the CLI, the Python API, the portal's REST API, the facility's idle
swap and batch daemon) drives every verb of the site boundary (:mod:`wanlab.site`) on an
experiment of this host and on one placed on the session's local test cluster, with the
same outcome. One experiment per site for the module; the verbs in sequence.

Each door runs in a child process (as a user's would: the cluster's controller attaches
to Ray there, never in the test process) and reports what it saw as JSON. What a swap-out
did is checked where it happens: a cluster experiment's parts in their machines' own
stores and namespaces, not only the controller's record.
"""

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

# a-b inside machine m0, b-c cut between m0 and m1; a CBR flow a -> c from t = 1 to 2 s
SPEC = """\
set ns [new Simulator]
source tb_compat.tcl
foreach n {a b c} { set $n [$ns node] }
set l0 [$ns duplex-link $a $b 100Mb %s DropTail]
set l1 [$ns duplex-link $b $c 100Mb 5ms DropTail]
foreach {n m} {a m0 b m0 c m1} { tb-fix-node [set $n] $m }
$ns rtproto Static
set udp0 [new Agent/UDP]
$ns attach-agent $a $udp0
set null0 [new Agent/Null]
$ns attach-agent $c $null0
$ns connect $udp0 $null0
set cbr0 [new Application/Traffic/CBR]
$cbr0 set packetSize_ 500
$cbr0 set rate_ 1Mb
$cbr0 attach-agent $udp0
$ns at 1 "$cbr0 start"
$ns at 2 "$cbr0 stop"
$ns run
"""
SITES = ("local", "cluster")


def wl(home, *args, check=True, timeout=600):
    return wanlab_cli(home, *args, check=check, timeout=timeout)


def script(tmp_path, text, *args, timeout=600):
    """Run a door's script (``text``) in a child; its last stdout line, as JSON."""
    path = tmp_path / "door.py"
    path.write_text(text)
    p = subprocess.run([sys.executable, str(path), *map(str, args)], capture_output=True,
                       text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": ROOT})
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def netns_names():
    return set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                              check=False).stdout.split())


def parts_states(home, name):
    """Each machine's own record of its part of ``name`` (None: none there)."""
    from wanlab.store.db import Store
    out = {}
    for m in ("m0", "m1"):
        if not (home / "machines" / m / "wanlab.db").exists():
            continue
        st = Store(str(home / "machines" / m), create=False)
        try:
            row = st.find(name)
            out[m] = row.state if row else None
        finally:
            st.close()
    return out


def node_namespaces(home, name):
    """Namespaces recorded for ``name``'s nodes: this host's store, or each part's."""
    from wanlab.store.db import Store
    homes = [home] + [home / "machines" / m for m in ("m0", "m1")]
    out = set()
    for h in homes:
        if not (h / "wanlab.db").exists():
            continue
        st = Store(str(h), create=False)
        try:
            row = st.find(name)
            if row is not None:
                out |= {r.name for r in st.resources(row.id) if r.kind == "netns"}
        finally:
            st.close()
    return out


def assert_stopped(home, name, site, namespaces):
    """Swapped out for real: the controller's record, every part's own record, and none
    of ``namespaces`` (its nodes' while it ran) left on this host."""
    from wanlab.lifecycle import Lab
    lab = Lab(str(home), create=False)
    try:
        assert lab.get(name).state == "swapped"
    finally:
        lab.close()
    if site == "cluster":
        assert parts_states(home, name) == {"m0": "swapped", "m1": "swapped"}, \
            parts_states(home, name)
    assert namespaces, "no namespace was recorded while it ran"
    left = namespaces & netns_names()
    assert not left, left


@pytest.fixture(scope="module")
def world(shared_cluster, tmp_path_factory):
    """The session's local test cluster (tests/conftest.py); its home holds both sites'
    experiments."""
    home, specs = shared_cluster.home, tmp_path_factory.mktemp("sites")
    spec = specs / "three.tcl"
    spec.write_text(SPEC % "5ms")
    changed = specs / "three-modified.tcl"
    changed.write_text(SPEC % "10ms")
    yield home, spec, changed
    shared_cluster.clear()


API = """\
import json, sys
from wanlab.api import Experiment
spec, home, name, site = sys.argv[1:5]
out = {}
# create: on the current cluster with cluster=True
exp = Experiment.from_file(spec, name=name, home=home, keep=True, cluster=site == "cluster")
exp.create()
out["state"] = exp.state
# attach: the same experiment from its name
exp = Experiment.attach(name, home=home)
out["attached_cluster"] = exp.cluster
out["show"] = sorted(exp.show())
out["ping"] = exp.exec("a", ["ping", "-c", "2", "-i", "0.2", "c"]).returncode
out["routes"] = sorted(exp.routes())
out["tevc"] = exp.tevc("l0", "delay", "20ms", wait=True)["outcome"]
exp.set_link("l1", delay="8ms")
out["stats"] = sorted(exp.stats()["links"])
files = exp.capture_start("l0")
exp.exec("a", ["ping", "-c", "2", "-i", "0.2", "b"])
exp.capture_stop()
out["captures"] = [c["file"] for c in exp.captures()]
out["capture_files"] = files
out["capture_bytes"] = len(open(exp.capture_file(files[0]), "rb").read())
import time
deadline = time.monotonic() + 120           # until the CBR flow (t = 1..2 s) is over
while not any((e["target"], e["action"]) == ("cbr0", "stop") for e in exp.events()):
    assert time.monotonic() < deadline, exp.events()
    time.sleep(0.3)
out["events"] = sorted({e["target"] for e in exp.events()})
exp.swapout()
out["flows"] = [f["agent"] for f in exp.flows()]
out["after_swapout"] = exp.state
exp.swapin()
out["after_swapin"] = exp.state
print(json.dumps(out))
"""


@pytest.mark.parametrize("site", SITES)
def test_the_python_api_drives_every_verb(world, tmp_path, site):
    home, spec, _ = world
    name = f"api-{site}"
    r = script(tmp_path, API, spec, home, name, site)
    assert r["state"] == "active" and r["attached_cluster"] == (site == "cluster"), r
    assert {"name", "state"} <= set(r["show"]), r
    assert r["ping"] == 0 and r["routes"] == ["a", "b", "c"], r
    assert r["tevc"] == "ok" and r["stats"] == ["l0", "l1"], r
    assert r["captures"] and r["capture_bytes"] > 24, r       # more than a pcap header
    assert {"l0", "cbr0"} <= set(r["events"]), r
    assert r["flows"] == ["cbr0"], r
    assert (r["after_swapout"], r["after_swapin"]) == ("swapped", "active"), r
    if site == "cluster":
        assert parts_states(home, name) == {"m0": "active", "m1": "active"}


@pytest.mark.parametrize("site", SITES)
def test_the_cli_drives_every_verb(world, site):
    home, spec, changed = world
    name = f"api-{site}"            # the experiment the API made (and left active)
    listed = next(x for x in wl(home, "list").stdout.splitlines() if x.startswith(name))
    assert " active " in listed, listed
    info = json.loads(wl(home, "show", name, "--json").stdout)
    assert info["state"] == "active"
    if site == "cluster":
        assert info["machine_of"] == {"a": "m0", "b": "m0", "c": "m1"}, info
        assert "machine m1: c" in wl(home, "show", name).stdout
    assert " 0% packet loss" in wl(home, "exec", name, "a", "--", "ping", "-c", "2", "-i",
                                   "0.2", "c").stdout
    assert "c:" in wl(home, "routes", name).stdout
    assert "ok" in wl(home, "tevc", "-w", name, "now", "l1", "delay", "6ms").stdout
    events = json.loads(wl(home, "events", name, "--json").stdout)
    assert any(e["target"] == "l1" and e["origin"] == "tevc" for e in events), events
    assert json.loads(wl(home, "flows", name, "--json").stdout)[0]["agent"] == "cbr0"
    ran = node_namespaces(home, name)
    wl(home, "swapout", name)
    assert_stopped(home, name, site, ran)
    wl(home, "swapin", name)
    wl(home, "modify", name, str(changed))
    assert " active " in next(x for x in wl(home, "list").stdout.splitlines()
                              if x.startswith(name))
    rtt = re.search(r"= ([\d.]+)/", wl(home, "exec", name, "a", "--", "ping", "-c", "3", "-i",
                                       "0.2", "b").stdout)
    assert float(rtt.group(1)) >= 19.0, rtt.group(0)      # l0 is 10 ms each way now


PORTAL = """\
import json, sys, time, warnings
from fastapi.testclient import TestClient
from wanlab.errors import WanlabError
from wanlab.lifecycle import Lab
from wanlab.portal import auth, projects, tables
from wanlab.portal.app import make_app
home, name, site, spec, changed = sys.argv[1:6]
lab = Lab(home)
tables.migrate(lab.store.db)
try:
    projects.user_id(lab.store.db, "root")
except WanlabError:             # the first portal run of the module
    projects.add_user(lab.store.db, "root", "correct horse", admin=True)
token = auth.new_token(lab.store.db, projects.user_id(lab.store.db, "root"))
lab.close()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    web = TestClient(make_app(home))
hdr = {"Authorization": f"Bearer {token}"}
base = f"/api/experiments/{name}"
out = {}
def ok(r):
    assert r.status_code == 200, (r.request.url, r.status_code, r.text)
    return r.json()
out["list"] = {x["name"]: x["state"] for x in ok(web.get("/api/experiments", headers=hdr))}
out["show"] = ok(web.get(base, headers=hdr))["state"]
out["stats"] = sorted(ok(web.get(base + "/stats", headers=hdr))["links"])
out["link"] = ok(web.post(base + "/links/l0", headers=hdr, json={"delay": "7ms"}))["ok"]
out["tevc"] = ok(web.post(base + "/tevc", headers=hdr,
                          json={"object": "l1", "event": "delay", "args": ["9ms"]}))["outcome"]
# the live view: the engines' counters and the values in force (configured where differs)
with web.websocket_connect(base + "/live", headers=hdr) as ws:
    live = ws.receive_json()
out["live"] = {"links": sorted(live.get("links", {})), "clock": bool(live.get("now_ns")),
               "in_force": {l["name"]: [[round(l[d]["delay_s"], 6), l[d].get("configured", {})]
                                        for d in ("ab", "ba")]
                            for l in live.get("in_force", {}).get("links", [])}}
out["events"] = len(ok(web.get(base + "/events", headers=hdr)))
out["flows"] = [f["agent"] for f in ok(web.get(base + "/flows", headers=hdr))]
out["routes"] = sorted(ok(web.get(base + "/routes", headers=hdr)))
r = ok(web.post(base + "/exec", headers=hdr,
                json={"node": "a", "argv": ["ping", "-c", "2", "-i", "0.2", "c"]}))
out["exec"] = r["code"]
files = ok(web.post(base + "/captures", headers=hdr, json={"link": "l0"}))["files"]
ok(web.post(base + "/exec", headers=hdr, json={"node": "a", "argv": ["ping", "-c", "1", "b"]}))
ok(web.post(base + "/captures/stop", headers=hdr))
out["captures"] = [c["file"] for c in ok(web.get(base + "/captures", headers=hdr))]
got = web.get(base + "/captures/" + files[0], headers=hdr)
out["capture_bytes"] = len(got.content) if got.status_code == 200 else got.text
out["swapout"] = ok(web.post(base + "/swapout", headers=hdr))["state"]
print(json.dumps(out))
"""

PORTAL_AFTER = """\
import json, sys, warnings
from fastapi.testclient import TestClient
from wanlab.lifecycle import Lab
from wanlab.portal import auth, projects
from wanlab.portal.app import make_app
home, name, site, spec, changed = sys.argv[1:6]
lab = Lab(home)
token = auth.new_token(lab.store.db, projects.user_id(lab.store.db, "root"))
lab.close()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    web = TestClient(make_app(home))
hdr = {"Authorization": f"Bearer {token}"}
base = f"/api/experiments/{name}"
def ok(r):
    assert r.status_code == 200, (r.request.url, r.status_code, r.text)
    return r.json()
out = {"swapin": ok(web.post(base + "/swapin", headers=hdr))["state"]}
out["modify"] = ok(web.post(base + "/modify", headers=hdr,
                            json={"filename": "three.tcl", "text": open(spec).read()}))["state"]
print(json.dumps(out))
"""


@pytest.mark.parametrize("site", SITES)
def test_the_portal_drives_every_verb_and_its_swapout_stops_the_parts(world, tmp_path, site):
    home, spec, changed = world
    name = f"api-{site}"
    ran = node_namespaces(home, name)
    r = script(tmp_path, PORTAL, home, name, site, spec, changed)
    assert r["list"][name] == "active" and r["show"] == "active", r
    assert r["stats"] == ["l0", "l1"] and r["link"] is True and r["tevc"] == "ok", r
    # the same live view on both sites: counters, a clock for rates, the values in force
    # (the description: l0 10 ms since the CLI's modify, l1 5 ms)
    assert r["live"] == {"links": ["l0", "l1"], "clock": True, "in_force": {
        "l0": [[0.007, {"delay_s": 0.01}]] * 2, "l1": [[0.009, {"delay_s": 0.005}]] * 2}}, r
    assert r["events"] > 0 and set(r["flows"]) == {"cbr0"} and r["routes"] == ["a", "b", "c"], r
    assert r["exec"] == 0 and r["captures"], r
    assert isinstance(r["capture_bytes"], int) and r["capture_bytes"] > 24, r
    assert r["swapout"] == "swapped", r
    # the portal's swap-out of a cluster experiment stops its parts on their machines
    assert_stopped(home, name, site, ran)
    r = script(tmp_path, PORTAL_AFTER, home, name, site, spec, changed)
    assert r == {"swapin": "active", "modify": "active"}, r
    if site == "cluster":
        assert parts_states(home, name) == {"m0": "active", "m1": "active"}


IDLE = """\
import json, sys, time
from wanlab.facility.daemon import Daemon
from wanlab.facility import idle
from wanlab.lifecycle import Lab
home, names = sys.argv[1], sys.argv[2:]
lab = Lab(home)
load = Daemon(lab, max_concurrent=1).active_load()   # people's experiments, not the queue's
w = idle.Watcher(lab, say=lambda m: None, default_idle_s=3.0)
swapped, deadline = [], time.monotonic() + 180
while set(names) - set(swapped) and time.monotonic() < deadline:
    swapped += w.tick()
    time.sleep(0.3)
reasons = {}
for n in names:
    row = lab.get(n)
    reasons[n] = [r for _t, _a, b, r in lab.store.transitions(row.id) if b == "swapping-out"][-1]
print(json.dumps({"load": load, "swapped": sorted(swapped), "reasons": reasons}))
lab.close()
"""


def test_the_facility_idle_swaps_both_and_the_daemon_counts_only_its_batches(world,
                                                                              tmp_path):
    """The idle watcher swaps each idle experiment out through its site: a cluster
    experiment's parts stop on their machines. The batch daemon's load is its own batches:
    the two active experiments here are people's."""
    home, *_ = world
    names = [f"api-{site}" for site in SITES]
    ran = {n: node_namespaces(home, n) for n in names}
    r = script(tmp_path, IDLE, home, *names)
    assert r["load"] == 0, r
    assert r["swapped"] == sorted(names), r
    assert r["reasons"] == {n: "idle swap" for n in names}, r
    for site, n in zip(SITES, names, strict=True):
        assert_stopped(home, n, site, ran[n])


def test_the_cluster_site_takes_the_lock_and_finishes_a_swapout_on_sigterm(world):
    """A cluster experiment's swap-out waits for the experiment's lock (the one lock file
    this host's experiments use), and SIGTERM during it lets it finish on every machine
    first (it would otherwise stop half-way, the experiment left swapping-out)."""
    import signal
    import time

    from wanlab.store import lock
    from wanlab.store.db import Store
    home, *_ = world
    name = "api-cluster"
    wl(home, "swapin", name)
    store = Store(str(home), create=False)
    env = {**os.environ, "WANLAB_HOME": str(home), "PYTHONPATH": ROOT}
    child = None
    try:
        with lock.held(store, name):
            child = subprocess.Popen([sys.executable, "-m", "wanlab.cli", "swapout", name],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
            end = time.monotonic() + 8
            while time.monotonic() < end and child.poll() is None:
                assert store.get(name).state == "active"    # it waits for the lock
                time.sleep(0.1)
            assert child.poll() is None
        # SIGTERM as soon as the swap-out has begun: the whole of it (attaching to Ray,
        # whose ray.init would install a SIGTERM handler of its own, and every machine's
        # part) must still finish. (Waiting to see a machine's part swapping-out missed it
        # on a loaded machine: a part is in that state for a moment only.)
        seen = []
        end = time.monotonic() + 120
        while time.monotonic() < end and child.poll() is None:
            seen.append(store.get(name).state)
            if seen[-1] == "swapping-out":
                # the operation names itself in the lock file, as this host's do
                with open(store.lock_path(name)) as f:
                    named = f.read().split()[:1]
                child.send_signal(signal.SIGTERM)
                break
            time.sleep(0.01)
        out, err = child.communicate(timeout=300)
    finally:
        if child is not None and child.poll() is None:
            child.kill()
        store.close()
    assert seen and seen[-1] == "swapping-out", seen
    assert named == [str(child.pid)], named
    assert child.returncode == 130, (out, err)
    assert f"finished the swap-out of {name} first" in err, err
    assert parts_states(home, name) == {"m0": "swapped", "m1": "swapped"}
    lab_state = Store(str(home), create=False)
    try:
        assert lab_state.get(name).state == "swapped"
    finally:
        lab_state.close()


def test_cluster_down_refuses_while_an_operation_holds_one_of_its_experiments(world):
    """``cluster down`` takes the lock of every experiment placed on the cluster before
    it removes anything: while an operation holds one (here this process, named in the
    lock file as every operation names itself), it refuses, naming that operation, and
    leaves the cluster and its experiments as they were."""
    from wanlab.lifecycle import Lab
    home, *_ = world
    machines = re.findall(r"^\s+m\d+\s+\S+\s+up\b", wl(home, "cluster", "status").stdout,
                          re.M)
    assert machines, "no machine up"
    lab = Lab(str(home), create=False)
    try:
        with lab.locked("api-cluster"):
            p = wl(home, "cluster", "down", check=False, timeout=120)
    finally:
        lab.close()
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"api-cluster is busy: pid {os.getpid()} (" in p.stderr, p.stderr
    assert "nothing removed" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert re.findall(r"^\s+m\d+\s+\S+\s+up\b", wl(home, "cluster", "status").stdout,
                      re.M) == machines
    assert "api-cluster" in wl(home, "list").stdout


@pytest.mark.parametrize("site", SITES)
def test_cleanup_and_terminate_through_the_cli_and_the_api(world, tmp_path, site):
    """Last: cleanup (this host's stays, swapped; a cluster's is removed from its
    machines and forgotten) and terminate."""
    home, *_ = world
    name = f"api-{site}"
    wl(home, "swapin", name)
    ran = node_namespaces(home, name)
    wl(home, "cleanup", name)
    if site == "local":
        assert_stopped(home, name, site, ran)
        script(tmp_path, "import sys\nfrom wanlab.api import Experiment\n"
               "Experiment.attach(sys.argv[2], home=sys.argv[1]).terminate()\n"
               "print('{}')\n", home, name)
    else:
        assert parts_states(home, name) == {"m0": None, "m1": None}
    assert name not in wl(home, "list").stdout
    assert not node_namespaces(home, name)
    assert ran and not ran & netns_names(), ran & netns_names()
