"""How a portal console on a node of a cluster experiment answers (issue 13).

A local test cluster of 2 machines and a node on each (a link cut between them). The
portal runs in-process (its API's own client, WebSockets included); for each way a
console reaches its node, in a fresh process each, ``--repeats`` times:

* ``here``: the node's machine's agent gives the node's argv and the portal runs the shell
  on a terminal of its own (the local test cluster, whose namespaces are this host's; the
  same as a console on one machine);
* ``relayed``: the agent runs the shell on its own terminal and the portal relays it
  through Ray (what a machine elsewhere does; forced here by pretending the machines are
  not this host's), one Ray session held while a console is open.

Measured: opening a console until its first prompt, and a key's echo (one character sent,
until it comes back), 30 keys per console.

    python3 bench/portal_console.py [--repeats 3]

About 2-3 minutes (the cluster's start and stop included). Results:
bench/results/portal-console-latest.md and .json, with the load average: on this 2-core VM
the "machines", the portal and Ray share the same cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from measure import save_results  # noqa: E402

SPEC = """\
set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
$ns duplex-link $a $b 100Mb 5ms DropTail
tb-fix-node $a m0
tb-fix-node $b m1
$ns rtproto Static
$ns run
"""

PROBE = """\
import json, sys, time, warnings
from fastapi.testclient import TestClient
from wanlab.cluster.control import OnCluster
from wanlab.lifecycle import Lab
from wanlab.portal import auth, projects, tables
from wanlab.portal.app import make_app
home, how, user = sys.argv[1:4]
lab = Lab(home)
tables.migrate(lab.store.db)
projects.add_user(lab.store.db, user, "correct horse", admin=True)
token = auth.new_token(lab.store.db, projects.user_id(lab.store.db, user))
lab.close()
if how == "relayed":
    OnCluster.runs_here = lambda self: False
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    web = TestClient(make_app(home))
hdr = {"Authorization": f"Bearer {token}"}
t = time.perf_counter()
out = {"keys": []}
with web.websocket_connect("/api/experiments/pcons/console/b", headers=hdr) as ws:
    got = b""
    while b"# " not in got and b"$ " not in got:
        got += ws.receive_bytes()
    out["open"] = time.perf_counter() - t
    for k in range(30):
        key = b"abcdefghij"[k % 10:k % 10 + 1]
        t = time.perf_counter()
        ws.send_bytes(key)
        echo = b""
        while key not in echo:
            echo += ws.receive_bytes()
        out["keys"].append(time.perf_counter() - t)
    ws.send_bytes(b"\\x15exit\\n")
    try:
        while True:
            ws.receive_bytes()
    except Exception:
        pass
print(json.dumps(out))
"""


def env(home: str) -> dict[str, str]:
    return {**os.environ, "WANLAB_HOME": home, "PYTHONPATH": ROOT, "SHELL": "/bin/sh"}


def wl(home: str, *args: str) -> None:
    p = subprocess.run([sys.executable, "-m", "wanlab.cli", *args], capture_output=True,
                       text=True, env=env(home), timeout=900, check=False)
    if p.returncode != 0:
        raise SystemExit(f"wanlab {' '.join(args)} failed: {p.stdout[-300:]} {p.stderr}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    home = tempfile.mkdtemp(prefix="wanlab-bench-console-")
    spec = os.path.join(home, "pcons.tcl")
    with open(spec, "w") as f:
        f.write(SPEC)
    load = [os.getloadavg()[0]]
    runs: dict[str, list[dict]] = {"here": [], "relayed": []}
    try:
        wl(home, "cluster", "up", "--local", "2")
        wl(home, "create", spec, "--cluster")
        for r in range(a.repeats):
            for how in runs:
                p = subprocess.run([sys.executable, "-c", PROBE, home, how, f"{how}{r}"],
                                   capture_output=True, text=True, env=env(home),
                                   timeout=600, check=True)
                runs[how].append(json.loads(p.stdout.strip().splitlines()[-1]))
                load.append(os.getloadavg()[0])
        wl(home, "terminate", "pcons")
    finally:
        subprocess.run([sys.executable, "-m", "wanlab.cli", "cluster", "down"],
                       capture_output=True, env=env(home), timeout=600, check=False)
    md = [f"# A portal console on a node of another machine ({a.repeats} consoles each, "
          f"interleaved)", "",
          f"Load average (1 min) during the run: {min(load):.1f}-{max(load):.1f}.", "",
          "| console | open, to the first prompt (median) | key echo median | key echo p95 |",
          "|---|---|---|---|"]
    med = {}
    for how, rs in runs.items():
        keys = sorted(k for r in rs for k in r["keys"])
        med[how] = {"open_s": statistics.median(r["open"] for r in rs),
                    "echo_median_s": statistics.median(keys),
                    "echo_p95_s": keys[int(0.95 * (len(keys) - 1))]}
        md.append(f"| {how} | {med[how]['open_s']:.2f} s | "
                  f"{med[how]['echo_median_s'] * 1e3:.1f} ms | "
                  f"{med[how]['echo_p95_s'] * 1e3:.1f} ms |")
    path = save_results(os.path.join(ROOT, "bench", "results"), "portal-console",
                        "\n".join(md) + "\n", {"repeats": a.repeats, "load": load,
                                               "runs": runs, "medians": med})
    print("\n".join(md))
    print(f"\n{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
