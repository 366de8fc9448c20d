"""``wanlab cluster up|join|measure|status|down`` (the CLI keeps only the registration), and
how ``wanlab show`` prints a cluster experiment. Every verb on a cluster experiment goes
through its site (:mod:`wanlab.site`)."""

from __future__ import annotations

import contextlib

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


def _down(lab) -> int:
    """Remove the experiments placed on the cluster, then the cluster. Each experiment's
    lock is taken first, all of them before anything is removed: while an operation runs
    on one of them (a swap-in, a modify ...), nothing is removed and the error names it."""
    from wanlab.cluster import experiment, local, wide
    from wanlab.store import lock
    names = sorted({r.detail["experiment"] for r in experiment.rec.live(lab.store, "part")})
    with contextlib.ExitStack() as held:
        for name in names:
            try:
                held.enter_context(lab.locked(name, wait=False))
            except lock.Busy as e:
                raise WanlabError(f"cluster down: {e}; nothing removed (let it finish or "
                                  f"stop it, then run 'wanlab cluster down' again)") from None
            except WanlabError:         # terminated meanwhile: nothing of it is left
                continue
        for name in names:
            if lab.store.find(name) is None:
                continue
            print(f"{name}: removing it from the cluster first")
            try:
                experiment.terminate(lab.store, name, "cleanup")
                wide.forget(lab.store, name)
                lock.forget(lab.store, name)
            except WanlabError as e:        # the machines go anyway; say what is left
                print(f"warning: {e}")
        if local.down(lab.store) == 0:
            print("no cluster is up")
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
        return _down(lab)
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


