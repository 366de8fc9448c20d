"""``wanlab cluster up|status|down`` (the CLI keeps only the registration)."""

from __future__ import annotations

from wanlab.errors import WanlabError


def _up(lab, a) -> int:
    from wanlab.cluster import local
    address = a.address or a.address_pos
    if a.address and a.address_pos and a.address != a.address_pos:
        raise WanlabError(f"cluster up: two addresses ({a.address_pos}, {a.address})")
    if (a.local is None) == (address is None):
        raise WanlabError("cluster up: give --local N (a local test cluster: machines as "
                          "namespaces on this host) or the address of a Ray cluster's "
                          "head (cluster up HOST:PORT)")
    if a.local is not None:
        if a.wide_area:
            raise WanlabError("--wide-area is for a cluster given by address; a local "
                              "cluster's machines are wide-area with --wan-delay or "
                              "--wan-matrix")
        local.up_local(lab.store, a.local, wan_delay=a.wan_delay, wan_matrix=a.wan_matrix)
        return 0
    if a.wan_delay or a.wan_matrix:
        raise WanlabError("--wan-delay/--wan-matrix shape the local test cluster only; a "
                          "real cluster's paths are measured")
    from wanlab.cluster import join
    try:
        join.up_address(lab.store, address, wide_area=a.wide_area)
    except BaseException:
        local.down(lab.store, quiet=True)
        raise
    return 0


def _print_matrix(store) -> None:
    from wanlab.cluster import join
    mx = join.matrix(store)
    if not mx:
        return
    names = mx["machines"]
    print("  one-way delay (ms), measured" + (" / bandwidth (Mbit/s)"
                                             if mx.get("bandwidth_bps") else ""))
    print("  " + " " * 7 + "".join(f"{n:>16s}" for n in names))
    for i, a in enumerate(names):
        cells = []
        for j in range(len(names)):
            d = mx["one_way_s"][i][j]
            bw = (mx.get("bandwidth_bps") or [[None] * len(names)] * len(names))[i][j]
            cells.append(f"{'-' if i == j else f'{d * 1e3:.2f}'}"
                         + (f" / {bw / 1e6:.0f}" if bw else ""))
        print(f"  {a:7s}" + "".join(f"{c:>16s}" for c in cells))


def _join(lab, a) -> int:
    from wanlab.cluster import join, local
    if a.address or a.address_pos or a.wan_delay or a.wan_matrix:
        raise WanlabError("cluster join: it adds to the cluster that is up; give --local "
                          "(one more machine of the local test cluster) or nothing (the "
                          "Ray nodes that joined a cluster given by address)")
    if a.local is not None:
        if a.local != 1:
            raise WanlabError(f"cluster join --local {a.local}: one machine at a time "
                              f"(--local or --local 1)")
        if a.wide_area:
            raise WanlabError("--wide-area is for a cluster given by address")
        local.join_local(lab.store)
        return 0
    join.join_address(lab.store, wide_area=a.wide_area)
    return 0


def _measure(lab) -> int:
    from wanlab.cluster import join
    join.remeasure(lab.store)
    _print_matrix(lab.store)
    return 0


def cmd_cluster(lab, a) -> int:
    from wanlab.cluster import local
    if a.action == "up":
        return _up(lab, a)
    if a.action == "join":
        return _join(lab, a)
    if a.action == "measure":
        return _measure(lab)
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
    print(f"cluster {info.id}: head {info.head}, {len(rows)} machines"
          + ("" if info.local else " (joined by address)"))
    wide = {m.name for m in info.machines if m.wide_area}
    for r in rows:
        print(f"  {r['machine']:6s} {r['address']:15s} {r['state']:8s} cores {r['cores']:g}"
              + (f"  agent pid {r['agent_pid']}" if r.get("agent_pid") else "")
              + ("  wide-area" if r["machine"] in wide else "")
              + (f"  ({r['error']})" if r.get("error") else ""))
        by_address = {m.address: m.name for m in info.machines}
        clocks = (r.get("clocks") or {}) if a.clocks else {}
        offsets = sorted((by_address.get(k, k), v) for k, v in clocks.get("offsets", {}).items())
        if offsets:
            told = sum(len(v) for v in clocks.get("told", {}).values())
            print("         clocks ahead of this one's: " + ", ".join(
                f"{m} {v['offset_ns'] / 1e6:+.3f} ms (round trip {v['rtt_ns'] / 1e6:.3f} ms)"
                for m, v in offsets) + f"; told to {told} tunnel ports")
        for e in clocks.get("errors", []):
            print(f"         clock: {e}")
    if a.matrix:
        _print_matrix(lab.store)
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
    from wanlab.cluster import experiment, wide
    experiment.terminate(lab.store, name, op)
    wide.forget(lab.store, name)
    return 0


def show(lab, name: str, as_json: bool) -> int:
    import json

    from wanlab.cluster import experiment, wide
    info = experiment.show(lab.store, name)
    mapped = wide.stored(lab.store, name)
    if mapped:
        info["wide_area"] = mapped
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
    for line in wide.lines(mapped) if mapped else []:
        print("  " + line)
    return 0


def exec_(lab, name: str, node: str, argv: list[str]) -> int:
    import sys

    from wanlab.cluster import experiment
    rc, out, err = experiment.exec_(lab.store, name, node, argv)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return rc


def control(lab, name: str):
    """What drives ``name`` at run time: the life cycle, or the cluster's
    (:mod:`wanlab.cluster.control`), with the same methods."""
    from wanlab.cluster.control import of
    return of(lab, name)


def on_cluster(lab):
    """Where ``wanlab run FILE --cluster`` plays: the current cluster, one Ray session
    for the whole run."""
    from wanlab.cluster.control import OnCluster
    return OnCluster(lab)


def swapout(lab, name: str) -> int:
    from wanlab.cluster import experiment
    experiment.swapout(lab.store, name)
    return 0


def swapin(lab, name: str, repair: bool = False, fresh: bool = False) -> int:
    from wanlab.cluster import experiment
    if repair:
        on_cluster(lab).repair(name, fresh=fresh)
        return 0
    experiment.swapin(lab.store, name, fresh=fresh)
    return 0


def modify(lab, name: str, new) -> int:
    from wanlab.cluster import modify
    modify.modify(lab.store, name, new)
    return 0


def routes(lab, name: str, node: str | None) -> dict[str, str]:
    from wanlab.cluster import experiment
    return experiment.routes(lab.store, name, node)


def shell(lab, name: str, node: str, argv: list[str]) -> int:
    """A shell in a node of a cluster experiment: on the local test cluster run from here,
    on a machine elsewhere run by its agent and relayed to this terminal."""
    import subprocess

    from wanlab.cluster import console, experiment
    from wanlab.cluster.control import OnCluster
    on = OnCluster(lab)
    if on.runs_here():
        return subprocess.run(experiment.node_argv(lab.store, name, node, argv),
                              check=False).returncode
    with on:
        return console.attach(on.console(name, node, argv))


def register(add) -> None:
    sp = add("cluster", cmd_cluster, "the cluster experiments are placed on: wanlab cluster "
             "up --local N | up HOST:PORT | join [--local] | measure | status | down")
    sp.add_argument("action", choices=("up", "join", "measure", "status", "down"))
    sp.add_argument("address_pos", nargs="?", metavar="HOST:PORT", help="with up: join the "
                    "Ray cluster whose head is there (as --address)")
    sp.add_argument("--local", type=int, metavar="N", nargs="?", const=1, help="with up: a "
                    "local test cluster of N machines, each a network namespace with its own "
                    "Ray worker; with join: one more machine for it (join alone, on a cluster "
                    "given by address: the Ray nodes that joined since up)")
    sp.add_argument("--address", metavar="HOST:PORT", help="with up: join an existing Ray "
                    "cluster (ray start --head / --address): one wanlab agent per machine; "
                    "down removes wanlab's agents and leaves Ray running")
    sp.add_argument("--clocks", action="store_true", help="with status: under each "
                    "machine, how far the clocks of the machines its parts tunnel to are "
                    "ahead of its own (measured every 2 s, corrected in the cut links)")
    sp.add_argument("--matrix", action="store_true", help="with status: also the measured "
                    "one-way delay (and bandwidth) between the machines")
    sp.add_argument("--wide-area", metavar="all|M,M", help="with up --address (or join): the "
                    "(new) machines (names m0.. or addresses) that are wide-area sites for "
                    "wanassign")
    sp.add_argument("--wan-delay", metavar="D,D,...", help="with up --local N: each machine's "
                    "one-way access delay (path i-j = d_i + d_j); the machines are wide-area")
    sp.add_argument("--wan-matrix", metavar="FILE", help="with up --local N: a latency-matrix "
                    "CSV over m0..mN-1 (docs/yaml.md) shaping the paths between machines")


