"""How long one cluster CLI command takes, and where the time goes (issue 13).

A local test cluster of 2 machines and a 4-node chain cut between them. Then, interleaved
in the same run, ``--repeats`` times each:

* ``tevc -w`` on the cut link (an event for both machines) and ``events`` (every
  machine's log): the whole command, in a fresh process as a user runs it, once through
  the agents' sockets (the local cluster's default) and once through Ray (what every
  command did before: ``import ray``, ``ray.init``, the agents' handles, the call);
* the Ray path's phases, in a fresh process each: importing wanlab's CLI, importing Ray,
  ``ray.init`` to the head, the first call to an agent, a second call, ``ray.shutdown``.

    python3 bench/cluster_cli.py [--repeats 5]

About 2 minutes (the cluster's start and stop included). Results:
bench/results/cluster-cli-latest.md and .json, with the load average: on this 2-core VM the
"machines" and the command share the same cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from measure import save_results  # noqa: E402

CHAIN = """\
name: clib
routing: static
nodes: [n0, n1, n2, n3]
links:
  - {name: l0, nodes: [n0, n1], delay: 5ms}
  - {name: l1, nodes: [n1, n2], delay: 5ms}
  - {name: l2, nodes: [n2, n3], delay: 5ms}
"""

# the CLI with the agents' sockets left out: every part call through Ray, as before
VIA_RAY = ("import sys; from wanlab.cluster import control; "
           "control.OnCluster._direct = lambda self: False; "
           "from wanlab.cli import main; sys.exit(main(sys.argv[1:]))")

PHASES = """\
import logging, time
t = time.perf_counter()
out = {}
def lap(what):
    global t
    now = time.perf_counter(); out[what] = now - t; t = now
import wanlab.cli
lap("import wanlab.cli")
import ray
lap("import ray")
from wanlab.cluster import agent as agents, local
from wanlab.store.db import Store
store = Store(None)
info = local.current(store)
ray.init(address=info.head, namespace=f"wanlab-{info.id}", log_to_driver=False,
         logging_level=logging.WARNING, configure_logging=True)
lap("ray.init")
h = agents.agent(info, info.machines[0], agents.machine_home(store.home, "m0"))
ray.get(h.hello.remote())
lap("first call to an agent")
ray.get(h.hello.remote())
lap("second call")
ray.shutdown()
lap("ray.shutdown")
import json; print(json.dumps(out))
"""


def env(home: str) -> dict[str, str]:
    return {**os.environ, "WANLAB_HOME": home, "PYTHONPATH": ROOT}


def wl(home: str, *args: str, via_ray: bool = False) -> float:
    argv = ([sys.executable, "-c", VIA_RAY] if via_ray else
            [sys.executable, "-m", "wanlab.cli"]) + list(args)
    t = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=env(home), timeout=600,
                       check=False)
    if p.returncode != 0:
        raise SystemExit(f"wanlab {' '.join(args)} failed: {p.stdout[-300:]} {p.stderr}")
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    home = tempfile.mkdtemp(prefix="wanlab-bench-cli-")
    spec = os.path.join(home, "clib.yaml")
    with open(spec, "w") as f:
        f.write(CHAIN)
    load = [os.getloadavg()[0]]
    cmds = {"tevc": ["tevc", "-w", "clib", "now", "l1", "delay", "7ms"],
            "events": ["events", "clib"]}
    times: dict[str, list[float]] = {f"{c} {w}": [] for c in cmds for w in ("socket", "ray")}
    phases: list[dict[str, float]] = []
    try:
        wl(home, "cluster", "up", "--local", "2")
        wl(home, "create", spec, "--cluster")
        for _ in range(a.repeats):
            for c, argv in cmds.items():
                times[f"{c} socket"].append(wl(home, *argv))
                times[f"{c} ray"].append(wl(home, *argv, via_ray=True))
            p = subprocess.run([sys.executable, "-c", PHASES], capture_output=True, text=True,
                               env=env(home), timeout=600, check=True)
            phases.append(json.loads(p.stdout.strip().splitlines()[-1]))
            load.append(os.getloadavg()[0])
    finally:
        subprocess.run([sys.executable, "-m", "wanlab.cli", "cluster", "down"],
                       capture_output=True, env=env(home), timeout=600, check=False)
    med = {k: statistics.median(v) for k, v in times.items()}
    ph = {k: statistics.median(p[k] for p in phases) for k in phases[0]}
    md = [f"# One cluster CLI command: agent socket vs Ray ({a.repeats} repeats, interleaved)",
          "", f"Load average (1 min) during the run: {min(load):.1f}-{max(load):.1f}.", "",
          "| command | through the agents' sockets | through Ray (before) |",
          "|---|---|---|"]
    for c in cmds:
        md.append(f"| `{' '.join(cmds[c])}` | {med[c + ' socket']:.2f} s | "
                  f"{med[c + ' ray']:.2f} s |")
    md += ["", "Where a command through Ray spends its time (medians, a fresh process each):",
           "", "| phase | s |", "|---|---|"]
    md += [f"| {k} | {v:.3f} |" for k, v in ph.items()]
    res = {"repeats": a.repeats, "load": load, "times": times, "medians": med,
           "ray_phases": phases, "ray_phase_medians": ph}
    path = save_results(os.path.join(ROOT, "bench", "results"), "cluster-cli",
                        "\n".join(md) + "\n", res)
    print("\n".join(md))
    print(f"\n{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
