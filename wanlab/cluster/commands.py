"""``wanlab cluster up|status|down`` (the CLI keeps only the registration)."""

from __future__ import annotations

from wanlab.errors import WanlabError


def cmd_cluster(lab, a) -> int:
    from wanlab.cluster import local
    if a.action == "up":
        if a.local is None:
            raise WanlabError("cluster up: give --local N (machines as namespaces on this "
                              "host); joining real machines by address is not built yet")
        local.up_local(lab.store, a.local)
        return 0
    if a.action == "down":
        # the experiments placed on it first, through their machines' agents
        from wanlab.cluster import experiment
        for name in sorted({r.detail["experiment"] for r in
                            experiment.rec.live(lab.store, "part")}):
            print(f"{name}: removing it from the cluster first")
            try:
                experiment.terminate(lab.store, name, "cleanup")
            except WanlabError as e:        # the machines go anyway; say what is left
                print(f"warning: {e}")
        if local.down(lab.store) == 0:
            print("no cluster is up")
        return 0
    info = local.current(lab.store)
    if info is None:
        print("no cluster is up")
        return 1
    from wanlab.cluster.status import status
    rows = status(lab.store, info)
    print(f"cluster {info.id}: head {info.head}, {len(rows)} machines")
    for r in rows:
        print(f"  {r['machine']:6s} {r['address']:15s} {r['state']:8s} cores {r['cores']:g}"
              + (f"  agent pid {r['agent_pid']}" if r.get("agent_pid") else "")
              + (f"  ({r['error']})" if r.get("error") else ""))
    return 0 if all(r["state"] == "up" for r in rows) else 1


def checked(lab, rows: list) -> list:
    """``rows`` with each active cluster experiment's machines checked first: one whose
    machine is lost becomes ``degraded``, naming the machine and its nodes."""
    from wanlab.cluster import experiment
    if not experiment.rec.live(lab.store, "part"):
        return rows
    return [experiment.check(lab.store, r.name) if r.state == "active" and
            experiment.is_cluster_experiment(lab.store, r.name) else r for r in rows]


def owns(lab, name: str) -> bool:
    """Whether ``name`` is a cluster experiment (a look at the store; no Ray)."""
    from wanlab.cluster.experiment import is_cluster_experiment
    return is_cluster_experiment(lab.store, name)


def create(lab, exp, source_path: str, t0: float) -> int:
    import time

    from wanlab.cluster import experiment
    placed = experiment.create(lab.store, exp, source_path)
    machines = sorted(set(placed["machine_of"].values()))
    print(f"{exp.name}: active on {len(machines)} machines ({len(exp.nodes)} nodes, "
          f"{len(placed['cut_links'])} links cut, {time.monotonic() - t0:.2f} s)")
    return 0


def terminate(lab, name: str, op: str = "terminate") -> int:
    from wanlab.cluster import experiment
    experiment.terminate(lab.store, name, op)
    return 0


def show(lab, name: str, as_json: bool) -> int:
    import json

    from wanlab.cluster import experiment
    info = experiment.show(lab.store, name)
    if as_json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    print(f"experiment {name}: {info['state']} on the cluster")
    by_machine: dict[str, list[str]] = {}
    for node, m in sorted(info["machine_of"].items()):
        by_machine.setdefault(m, []).append(node)
    for m, nodes in sorted(by_machine.items()):
        err = info["parts"].get(m, {}).get("error")
        print(f"  machine {m}: {', '.join(nodes)}" + (f"  ({err})" if err else ""))
    return 0


def exec_(lab, name: str, node: str, argv: list[str]) -> int:
    import sys

    from wanlab.cluster import experiment
    rc, out, err = experiment.exec_(lab.store, name, node, argv)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return rc


def tevc(lab, name: str, time_spec: str, target: str, action: str, args: list[str],
         wait: bool) -> dict:
    from wanlab.cluster import experiment
    return experiment.tevc(lab.store, name, time_spec, target, action, args, wait)


def swapout(lab, name: str) -> int:
    from wanlab.cluster import experiment
    experiment.swapout(lab.store, name)
    return 0


def swapin(lab, name: str) -> int:
    from wanlab.cluster import experiment
    experiment.swapin(lab.store, name)
    return 0


def modify(lab, name: str, new) -> int:
    from wanlab.cluster import experiment
    experiment.modify(lab.store, name, new)
    return 0


def event_log(lab, name: str) -> list[dict]:
    from wanlab.cluster import experiment
    return experiment.event_log(lab.store, name)


def flows(lab, name: str) -> list[dict]:
    from wanlab.cluster import experiment
    return experiment.flows(lab.store, name)


def shell(lab, name: str, node: str, argv: list[str]) -> int:
    """A shell in a node of a cluster experiment (on the local test cluster, from here)."""
    import subprocess

    from wanlab.cluster import experiment
    return subprocess.run(experiment.node_argv(lab.store, name, node, argv),
                          check=False).returncode


def register(add) -> None:
    sp = add("cluster", cmd_cluster, "the cluster experiments are placed on: wanlab cluster "
             "up --local N | status | down")
    sp.add_argument("action", choices=("up", "status", "down"))
    sp.add_argument("--local", type=int, metavar="N", help="with up: a local test cluster "
                    "of N machines, each a network namespace with its own Ray worker")


