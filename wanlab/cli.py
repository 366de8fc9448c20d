"""The ``wanlab`` command: a thin layer over :class:`wanlab.lifecycle.Lab`.

Every user mistake is one line on stderr and exit status 2; a traceback
means a bug in wanlab (set WANLAB_DEBUG=1 to see tracebacks for any error).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

from wanlab import site as sites
from wanlab.cluster import commands as cluster_commands
from wanlab.errors import Interrupted, WanlabError
from wanlab.facility import commands as facility_commands
from wanlab.site.show_text import SHOW_DETAIL_MAX


def _load(path: str, a=None):
    """The description at ``path``, with ``-p NAME=VALUE`` and the swap flags of ``a``."""
    from wanlab.facility import commands, params
    from wanlab.frontends import load
    exp = load(path, params=params.values(getattr(a, "p", None)))
    return commands.apply_swap_flags(exp, a) if a is not None else exp


def _source_path(arg: str) -> str:
    """Where the description came from: its file, or a dataset's name (``zoo:Abilene``)."""
    return arg if arg.startswith("zoo:") else os.path.abspath(arg)


def cmd_parse(lab, a) -> int:
    from wanlab.plan.plan import make_plan
    exp = _load(a.file, a)
    plan = make_plan(exp, "0000")    # addressing and routes: an impossible plan fails here
    for w in (*exp.warnings, *plan.warnings):
        print(f"wanlab: warning: {w}", file=sys.stderr)
    if a.json:
        print(exp.dumps())
    else:
        print(f"{exp.name}: {len(exp.nodes)} nodes, {len(exp.links)} links, "
              f"{len(exp.lans)} LANs, {len(exp.events)} events, {len(exp.programs)} programs, "
              f"{len(exp.agents)} agents")
    return 0


def cmd_create(lab, a) -> int:
    exp = _load(a.file, a)
    if a.name:
        exp = exp.with_name(a.name)
    t0 = time.monotonic()
    row = sites.for_new(lab, a.cluster).create(exp, source_path=_source_path(a.file),
                                               swapin=not a.no_swapin)
    print(f"{row.name}: {row.state} (id {row.short}, {len(row.ir.nodes)} nodes, "
          f"{time.monotonic() - t0:.2f} s)")
    return 0


def cmd_bridge(lab, a) -> int:
    from wanlab.frontends.bridge import bridge_experiment
    default = re.sub(r"[^A-Za-z0-9-]", "-", f"bridge-{a.if_a}-{a.if_b}")[:32].rstrip("-")
    exp = bridge_experiment(a.name or default,
                            a.if_a, a.if_b, delay=a.delay, bandwidth=a.bandwidth, loss=a.loss,
                            rules=tuple(a.rule or ()))
    row = sites.for_new(lab).create(exp)
    print(f"{row.name}: {a.if_a} <-> {a.if_b} through link 'wire' (id {row.short}); "
          f"change it with `wanlab tevc {row.name} now wire delay 50ms`, give the "
          f"interfaces back with `wanlab terminate {row.name}`")
    return 0


def _sim_threads(v: str) -> int:
    """``--threads N`` (1..1024) or ``auto`` (-1)."""
    if v.strip().lower() == "auto":
        return -1
    try:
        n = int(v)
    except ValueError:
        n = 0
    if not 1 <= n <= 1024:
        raise argparse.ArgumentTypeError(f"{v!r}: a number from 1 to 1024, or auto")
    return n


def cmd_run(lab, a) -> int:
    exp = _load(a.file, a)
    if a.name:
        exp = exp.with_name(a.name)
    if a.simulate:
        s = sites.for_new(lab, a.cluster).simulate(exp, out=a.out, seed=a.seed,
                                                   duration_s=a.duration, threads=a.threads)
        c = s.get("cluster")            # where each node ran, when it ran on the cluster
        if c:
            threads = {m: f", {t} threads" if t and t > 1 else ""
                       for m, t in c["threads"].items()}
            print(f"{len(c['machines'])} machines: " + ", ".join(
                f"{m} ({sum(1 for x in c['machine_of'].values() if x == m)} nodes"
                f"{threads[m]})" for m in c["machines"]))
        return _print_simulation(s)
    if a.seed is not None or a.duration is not None or a.out or a.threads is not None:
        raise WanlabError("--seed, --duration, --out and --threads go with --simulate (an "
                          "emulation takes its seed from the spec and runs to its last event)")
    s = sites.for_new(lab, a.cluster).run(exp, source_path=_source_path(a.file),
                                          terminate=a.terminate)
    for e in s["events"]:
        print(_event_line(e))
    for f in s["flows"]:
        print(_flow_line(f))
    if s.get("plot"):
        print(f"plot: {s['plot']}")
    print(f"results: {s['folder']}" + (" (removed: --terminate)" if a.terminate else ""))
    bad = [f"{e['target']} {e['action']} at t={e['scheduled_s']:g} s ({e['outcome']}"
           + (f": {e['detail']}" if e.get("detail") else "") + ")" for e in s["failed"]]
    if s["unfired"]:
        bad.append(f"{s['unfired']} timeline events never fired")
    if bad:
        print(f"wanlab: {len(bad)} timeline events failed: " + "; ".join(bad), file=sys.stderr)
        return 1
    return 0


def _print_simulation(s: dict) -> int:
    for w in s.get("warnings", []):
        print(f"wanlab: warning: {w}", file=sys.stderr)
    for e in s["events"]:
        print(_event_line(e))
    for f in s["flows"]:
        print(_flow_line(f))
    print(f"{'link':12} {'dir':3} {'out pkts':>10} {'out bytes':>12} {'q drops':>8} "
          f"{'loss drops':>10} {'down drops':>10}")
    for name, l in s["links"].items():
        for d in ("ab", "ba"):
            c = l[d]
            print(f"{name:12} {d:3} {c['out_pkts']:10} {c['out_bytes']:12} {c['drop_queue']:8} "
                  f"{c['drop_loss']:10} {c['drop_down']:10}")
    e = s["engine"]
    print(f"simulated {s['until_s']:g} s in {e['wall_s']:.3f} s of wall time "
          f"({e['speedup']}x real time; {e['events']} engine events, {e['events_per_s']}/s; "
          f"seed {s['seed']})")
    if e.get("engines"):
        print(f"  on {e['engines']} engines, {e['threads']} threads in all: lookahead "
              f"{e['lookahead_ns'] / 1e6:g} ms between the engines, {e['windows']} "
              "synchronisation windows over the network")
    elif e.get("threads", 1) > 1:
        print(f"  on {e['threads']} threads: lookahead {e['lookahead_ns'] / 1e6:g} ms, "
              f"{e['windows']} synchronisation windows")
    for p in s.get("plots", []):
        print(f"plot: {p}")
    print(f"results: {s['folder']}")
    return 0


def cmd_compare(lab, a) -> int:
    exp = _load(a.file, a)
    r = lab.compare(exp, out=a.out, source_path=_source_path(a.file))
    print(f"{'flow':16} {'kind':6} {'emulated':>16} {'simulated':>16} {'ratio':>7}  details")
    for row in r["flows"]:
        e, s = row["emulated"], row["simulated"]
        extra = []
        for k in ("retransmits", "rtt_ms", "loss_ratio", "owd_ms"):
            if k in e or k in s:
                extra.append(f"{k} {e.get(k)} / {s.get(k)}")
        fmt = lambda x: f"{x['mbps']:.3f} Mbit/s" if x.get("mbps") is not None else "-"  # noqa
        print(f"{row['flow']:16} {row['kind']:6} {fmt(e):>16} {fmt(s):>16} "
              f"{row.get('throughput_ratio', '-'):>7}  " + "; ".join(extra))
    for name, l in r["links"].items():
        parts = []
        for which in ("emulated", "simulated"):
            if which in l:
                d = l[which]
                parts.append(f"{which} out {d['ab']['out_pkts']}/{d['ba']['out_pkts']} pkts, "
                             f"drops {d['ab']['drop_queue'] + d['ab']['drop_loss']}/"
                             f"{d['ba']['drop_queue'] + d['ba']['drop_loss']}")
        print(f"link {name}: " + "; ".join(parts))
    sp = r["simulation_speed"]
    print(f"simulation: {sp['wall_s']} s wall, {sp['speedup']}x real time")
    for p in r["plots"]:
        print(f"plot: {p}")
    print(f"results: {r['folder']}")
    return 0


def cmd_swapin(lab, a) -> int:
    row = sites.of(lab, a.name).swapin(a.name, repair=a.repair, fresh=a.fresh)
    print(f"{row.name}: {row.state}")
    return 0


def cmd_swapout(lab, a) -> int:
    row = sites.of(lab, a.name).swapout(a.name)
    print(f"{row.name}: {row.state}")
    return 0


def cmd_modify(lab, a) -> int:
    row = sites.of(lab, a.name).modify(a.name, _load(a.file))
    print(f"{row.name}: {row.state} (modified)")
    return 0


def cmd_terminate(lab, a) -> int:
    sites.of(lab, a.name).terminate(a.name)
    print(f"{a.name}: terminated")
    return 0


def cmd_cleanup(lab, a) -> int:
    if a.name and a.all:
        raise WanlabError("cleanup takes a name or --all, not both")
    if not a.name and not a.all:
        raise WanlabError("cleanup of every experiment on this host needs --all (or name "
                          "one experiment)")
    done, failed = [], []
    for name in [a.name] if a.name else [r.name for r in lab.store.list()]:
        try:
            sites.of(lab, name).cleanup(name)       # a cluster's on its machines
        except WanlabError as e:
            if a.name:
                raise
            failed.append(name)
            print(f"wanlab: {name}: {e}", file=sys.stderr)
            continue
        done.append(name)
    print(f"cleaned up: {', '.join(done) if done else 'nothing recorded'}")
    return 1 if failed else 0


def cmd_export(lab, a) -> int:
    n = lab.export(a.name, a.dest)
    print(f"{a.name}: {n} files exported to {os.path.abspath(a.dest)} (readable by everyone)")
    return 0


def cmd_list(lab, a) -> int:
    rows = sites.listing(lab)
    if a.json:
        print(json.dumps([{"name": r.name, "id": r.short, "state": r.state,
                           "nodes": len(r.ir.nodes), "error": r.error} for r in rows],
                         indent=2))
        return 0
    print(f"{'NAME':24} {'ID':6} {'STATE':14} NODES")
    for r in rows:
        print(f"{r.name:24} {r.short:6} {r.state:14} {len(r.ir.nodes)}"
              + (f"  ({r.error})" if r.state == "degraded" else ""))
    return 0


def cmd_show(lab, a) -> int:
    on = sites.of(lab, a.name)
    info = on.show(a.name, node=a.node, links=a.links)
    if a.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    for line in on.show_text(info, summary=not (a.node or a.links or a.all)):
        print(line)
    return 0


def cmd_exec(lab, a) -> int:
    argv = a.argv[1:] if a.argv and a.argv[0] == "--" else a.argv
    if not argv:
        raise WanlabError("exec needs a command after '--'")
    return sites.of(lab, a.name).exec(a.name, a.node, argv).returncode


def cmd_shell(lab, a) -> int:
    shell = os.environ.get("SHELL", "/bin/bash")
    # a node with an image may lack the user's shell: then bash, then sh
    argv = ["sh", "-c", '[ -x "$0" ] && exec "$0"; [ -x /bin/bash ] && exec /bin/bash; '
            'exec /bin/sh', shell]
    return sites.of(lab, a.name).shell(a.name, a.node, argv)


def cmd_tevc(lab, a) -> int:
    r = sites.of(lab, a.name).tevc(a.name, a.time, a.object, a.event, a.args, wait=a.w)
    if a.w:
        late = r.get("lateness_s")
        print(f"{a.object} {a.event}: {r.get('outcome')} ({r.get('detail')}); "
              f"fired at t={r.get('t', 0):.6f} s" + (f", {late * 1e3:.3f} ms late"
                                                    if late is not None else ""))
        return 0 if r.get("outcome") == "ok" else 1
    print(f"scheduled at t={r['scheduled_s']:.6f} s")
    return 0


def _event_line(e: dict) -> str:
    t = e.get("fired_s", e.get("t"))
    late = e.get("lateness_s")
    when = f"{t:10.6f}" if t is not None else "         -"
    args = " ".join(e.get("args") or [])
    where = f"{e['machine']:4} " if e.get("machine") else ""    # a cluster experiment's
    return (f"{when}  {where}{e['origin']:8} {e['target']} {e['action']} {args}".rstrip() +
            f"  -> {e['outcome']}" + (f" ({e['detail']})" if e.get("detail") else "") +
            (f"  [late {late * 1e3:.3f} ms]" if late is not None else ""))


def cmd_events(lab, a) -> int:
    on = sites.of(lab, a.name)
    if a.follow:
        for e in on.follow(a.name):
            print(json.dumps(e) if a.json else _event_line(e), flush=True)
        return 0
    log = on.events(a.name)
    if a.json:
        print(json.dumps(log, indent=2))
        return 0
    for e in log:
        print(_event_line(e))
    return 0


def cmd_flows(lab, a) -> int:
    flows = sites.of(lab, a.name).flows(a.name)
    if a.json:
        print(json.dumps(flows, indent=2))
        return 0
    for f in flows:
        print(_flow_line(f))
    return 0


def _flow_line(f: dict) -> str:
    r = f["result"]
    dur = (f["stopped_s"] or f["started_s"]) - f["started_s"]
    rate = r.get("bytes", 0) * 8 / dur if dur > 0 else 0
    extra = f", lost {r.get('lost', 0)}" if "lost" in r else ""
    if r.get("retransmits") is not None:
        extra += f", {r['retransmits']} retransmits"
    if r.get("simulated"):
        extra += " [simulated]"
    return (f"{f['agent']:12} {f['kind']:4} t={f['started_s']:.3f}..{f['stopped_s'] or 0:.3f} s"
            f"  {r.get('bytes', 0)} bytes ({rate / 1e6:.3f} Mbit/s){extra}")


def cmd_routes(lab, a) -> int:
    tables = sites.of(lab, a.name).routes(a.name, a.node)
    for node, table in tables.items():
        print(f"{node}:")
        for line in table.splitlines():
            print(f"  {line}")
    return 0


def cmd_validate(lab, a) -> int:
    from wanlab.engine.binary import REPO_ROOT
    suite = os.path.join(REPO_ROOT, "bench", "fidelity.py")
    if not os.path.exists(suite):
        raise WanlabError("the fidelity suite (bench/fidelity.py) is part of the source "
                          "checkout; run wanlab validate from there")
    return subprocess.run(validate_argv(suite, a, lab.store.home), cwd=REPO_ROOT).returncode


VALIDATE_SUBSETS = ("delay", "bandwidth", "loss", "capacity", "scale")


def validate_argv(suite: str, a, home: str) -> list[str]:
    """The fidelity suite's command line for ``wanlab validate``: results in ``--out``
    (relative to the caller's folder; default <home>/validate, outside the checkout)."""
    for x in (a.only or "").split(","):
        if a.only and x not in VALIDATE_SUBSETS:
            raise WanlabError(f"validate --only: {x!r} is not a part of the suite (parts: "
                              f"{', '.join(VALIDATE_SUBSETS)})")
    out = os.path.abspath(a.out) if a.out else os.path.join(home, "validate")
    return [sys.executable, suite, "--out", out] + (["--quick"] if a.quick else []) + (
        ["--only", a.only] if a.only else [])


def cmd_plot(lab, a) -> int:
    path = sites.of(lab, a.name).plot(a.name, a.output)
    print(path)
    return 0


def cmd_serve(lab, a) -> int:
    from wanlab.portal.admin import serve
    lab.close()                 # the portal opens the store per request
    return serve(a.home, a.listen, a.allow_remote)


def cmd_portal(lab, a) -> int:
    from wanlab.portal.admin import main as portal_main
    return portal_main(a.home, a.args)


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def cmd_image(lab, a) -> int:
    from wanlab.backends.emulate import images
    store = lab.images()
    if a.action == "build":
        pk = [p for x in a.packages for p in x.split(",") if p]
        img = store.build(a.image, pk, images.parse_from(a.from_), say=lab.say)
        took = f" in {img.build_s:.0f} s" if img.build_s else " (reused an identical build)"
        print(f"{img.name}: built{took} ({', '.join(img.packages) or 'base'}; {img.suite})")
    elif a.action in ("pull", "import"):
        from wanlab.backends.emulate import oci
        from wanlab.model import imageref
        ref = a.ref
        if a.action == "import":           # a file: an OCI archive, else docker save's
            if not os.path.isfile(ref):
                raise WanlabError(f"{ref}: no such file")
            ref = ("oci-archive:" if oci.is_oci_archive(ref) else "docker-archive:") + \
                os.path.abspath(ref)
        elif not imageref.is_ref(ref):
            ref = "docker://" + ref
        img = oci.pull(store, imageref.canonical(ref), say=lab.say)
        print(f"{img.name}: {img.origin} ({(img.oci or {}).get('digest', '')[:19]}, "
              f"{len(img.layers)} layers)")
    elif a.action == "list":
        rows = store.list()
        sizes, total = images.sizes(store, rows)
        if a.json:
            print(json.dumps([{**i.__dict__, **sizes[i.name],
                               "digest": (i.oci or {}).get("digest")} for i in rows], indent=2))
            return 0
        if not rows:
            print(f"no images in {store.root} (wanlab image build NAME --packages ..., "
                  f"wanlab image pull REF)")
            return 0
        # SIZE: all of its layers; UNIQUE: those no other image uses (what rm frees);
        # SHARED: those it shares with other images
        print(f"{'NAME':28s} {'SUITE':8s} {'SIZE':>9s} {'UNIQUE':>9s} {'SHARED':>9s}  "
              f"DIGEST / PACKAGES / ORIGIN")
        for i in rows:
            if i.oci:
                what = f"{i.oci.get('digest', '')[:19]}  {i.origin}"
            else:
                what = f"saved from {i.origin}" if i.origin else \
                    ", ".join(i.packages) or "base"
            z = sizes[i.name]
            print(f"{i.name:28s} {i.suite:8s} {_size(z['size']):>9s} {_size(z['unique']):>9s} "
                  f"{_size(z['shared']):>9s}  {what}")
        layers = {x for i in rows for x in i.layers}
        print(f"{len(rows)} images, {len(layers)} layers: {_size(total)} on disk")
    elif a.action == "rm":
        store.remove(a.image)
        print(f"{a.image}: removed")
    elif a.action == "export":
        size = store.export(a.image, a.file)
        print(f"{a.image}: {a.file} ({_size(size)})")
    elif a.action == "save":
        img = lab.image_save(a.exp, a.node, a.image)
        print(f"{img.name}: saved from {img.origin} (over {', '.join(img.layers[1:])})")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with "did you mean" for a mistyped command or subcommand (its subparsers
    are of this class too)."""

    def error(self, message: str):  # type: ignore[override]
        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if m:
            import difflib
            choices = re.findall(r"'([^']*)'", m.group(2))
            near = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.5)
            message = f"unknown {self._what()} {m.group(1)!r}" + (
                f"; did you mean {near[0]!r}?" if near else
                f" (one of: {', '.join(choices)})")
        super().error(message)

    def _what(self) -> str:
        return "command" if self.prog == "wanlab" else f"{self.prog.split()[-1]} action"


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="wanlab", description="Network experiments on one Linux "
                                "machine: ns-2/YAML/Python in, namespaces and emulated links out.")
    p.add_argument("--home", help="state folder (default $WANLAB_HOME or /var/lib/wanlab)")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    def add(name, fn, help_):
        sp = sub.add_parser(name, help=help_, description=help_)
        sp.set_defaults(fn=fn)
        return sp

    sp = add("parse", cmd_parse, "parse a description; print its IR (no effect on the kernel)")
    sp.add_argument("file")
    sp.add_argument("-p", action="append", metavar="NAME=VALUE", help=P_HELP)
    sp.add_argument("--json", action="store_true", help="print the IR as JSON")
    sp = add("create", cmd_create, "parse, store and swap in an experiment")
    sp.add_argument("file")
    sp.add_argument("--name")
    sp.add_argument("-p", action="append", metavar="NAME=VALUE", help=P_HELP)
    facility_commands.add_swap_flags(sp)
    sp.add_argument("--no-swapin", action="store_true", help="store it only")
    sp.add_argument("--cluster", action="store_true", help="place it on the current cluster "
                    "(wanlab cluster up): nodes spread over the machines, cut links tunnelled")
    sp = add("bridge", cmd_bridge, "put the engine between two interfaces of this machine "
             "(a shaped bridge for machines outside wanlab; docs/bridge.md)")
    sp.add_argument("if_a", metavar="IF_A")
    sp.add_argument("if_b", metavar="IF_B")
    sp.add_argument("--name", help="experiment name (default bridge-IF_A-IF_B)")
    sp.add_argument("--delay", default="0", help="one-way delay each way (e.g. 20ms)")
    sp.add_argument("--bandwidth", default="0", help="each way (e.g. 10Mb; 0 = unlimited)")
    sp.add_argument("--loss", default="0", help="loss probability each way")
    sp.add_argument("--rule", action="append", metavar="PREFIX:delay=D,bandwidth=B,loss=L",
                    help="per-destination rule (repeatable): IPv4 frames to PREFIX get "
                    "these instead (longest prefix wins)")
    sp = add("run", cmd_run, "create an experiment, play its whole timeline, collect flows "
             "and plots, swap it out (results stay in its folder)")
    sp.add_argument("file")
    sp.add_argument("--name")
    sp.add_argument("-p", action="append", metavar="NAME=VALUE", help=P_HELP)
    facility_commands.add_swap_flags(sp)
    sp.add_argument("--terminate", action="store_true", help="forget it afterwards")
    sp.add_argument("--simulate", action="store_true", help="run it as a pure simulation in "
                    "virtual time instead (every node simulated in the engine; programs "
                    "skipped); results in --out (default <home>/sims/<name>)")
    sp.add_argument("--seed", type=int, help="with --simulate: the random seed (default: the "
                    "spec's)")
    sp.add_argument("--duration", type=float, help="with --simulate: seconds to simulate "
                    "(default: up to the last event)")
    sp.add_argument("--out", help="with --simulate: results folder")
    sp.add_argument("--threads", type=_sim_threads, help="with --simulate: worker threads "
                    "(the topology is partitioned at long links; the result is the same "
                    "for any number; default 1); with --cluster each machine's engine's "
                    "(auto: the machine's cores; default: the spec's engine threads, or 1)")
    sp.add_argument("--cluster", action="store_true", help="on the current cluster (wanlab "
                    "cluster up): emulated, placed as create --cluster and played from one "
                    "t = 0 on every machine; with --simulate, one engine per machine, "
                    "synchronised over the network (the result is the same bytes)")
    sp = add("compare", cmd_compare, "run a spec emulated and simulated; print and plot the "
             "two side by side (throughput, RTT, loss, cwnd)")
    sp.add_argument("file")
    sp.add_argument("-p", action="append", metavar="NAME=VALUE", help=P_HELP)
    sp.add_argument("--out", help="results folder (default <home>/compare/<name>)")
    sp = add("swapin", cmd_swapin, "swap a stored experiment in")
    sp.add_argument("name")
    sp.add_argument("--repair", action="store_true", help="rebuild a degraded experiment "
                    "(its engine, scheduler or a namespace died): remove what is recorded, "
                    "swap in again")
    sp.add_argument("--fresh", action="store_true", help="drop the nodes' writable layers "
                    "(files written since their image; kept across swap-outs otherwise)")
    for name, fn, h in (("swapout", cmd_swapout, "swap an experiment out (soft state gone)"),
                        ("terminate", cmd_terminate, "swap out and forget an experiment")):
        add(name, fn, h).add_argument("name")
    sp = add("modify", cmd_modify, "apply a changed description to an experiment")
    sp.add_argument("name")
    sp.add_argument("file")
    sp = add("cleanup", cmd_cleanup, "remove everything the store recorded for an experiment "
             "(--all: for every experiment on this host); safe to run twice")
    sp.add_argument("name", nargs="?")
    sp.add_argument("--all", action="store_true", help="every experiment on this host")
    sp = add("export", cmd_export, "copy an experiment's results (logs, flows, plots, "
             "captures; no sockets) to a new folder readable by everyone: the state folder "
             "itself is private to root")
    sp.add_argument("name")
    sp.add_argument("dest", help="a folder that does not exist yet")
    sp = add("list", cmd_list, "list experiments")
    sp.add_argument("--json", action="store_true")
    sp = add("show", cmd_show, "state, nodes, interfaces, addresses, routes and links (a "
             f"summary when there are more than {SHOW_DETAIL_MAX} nodes or links)")
    sp.add_argument("name")
    sp.add_argument("--json", action="store_true")
    how = sp.add_mutually_exclusive_group()
    how.add_argument("--node", metavar="NODE", help="that node, its links and LANs only")
    how.add_argument("--links", action="store_true", help="links and LANs only")
    how.add_argument("--all", action="store_true", help="everything, however large")
    # run by wanlab.mininet.main (see main()); here for the help only
    sp = add("mininet", None, "run a Mininet script on wanlab: wanlab mininet SCRIPT.py [ARGS] "
             "or -m MODULE [ARGS] (docs/mininet.md)")
    sp.add_argument("argv", nargs=argparse.REMAINDER)
    sp = add("mn", None, "Mininet's mn on wanlab: --topo, --link, --host, --test, ... "
             "(wanlab mn --help)")
    sp.add_argument("argv", nargs=argparse.REMAINDER)
    sp = add("exec", cmd_exec, "run a command in a node: wanlab exec NAME NODE -- CMD ARGS...")
    sp.add_argument("name")
    sp.add_argument("node")
    sp.add_argument("argv", nargs=argparse.REMAINDER)
    sp = add("tevc", cmd_tevc, "send an event: wanlab tevc [-w] NAME TIME OBJECT EVENT [ARGS] "
             "(TIME: now, +SECONDS, or SECONDS since t = 0)")
    sp.add_argument("-w", action="store_true", help="wait for the event and print its result")
    sp.add_argument("name")
    sp.add_argument("time")
    sp.add_argument("object")
    sp.add_argument("event")
    sp.add_argument("args", nargs="*")
    sp = add("events", cmd_events, "the event log of the current run (--follow: as they fire)")
    sp.add_argument("name")
    sp.add_argument("--follow", "-f", action="store_true")
    sp.add_argument("--json", action="store_true")
    sp = add("flows", cmd_flows, "results of the traffic agents' flows")
    sp.add_argument("name")
    sp.add_argument("--json", action="store_true")
    sp = add("validate", cmd_validate, "run the fidelity and capacity suite (Netbed's "
             "validation tables; results in --out, default <home>/validate)")
    sp.add_argument("--quick", action="store_true", help="reduced set, under 3 minutes")
    sp.add_argument("--only", help="subset: delay,bandwidth,loss,capacity,scale")
    sp.add_argument("--out", metavar="DIR", help="results folder (default <home>/validate)")
    sp = add("routes", cmd_routes, "each node's routing table (changes over time: "
             "<folder>/nodes/<node>/routes.log with dynamic routing)")
    sp.add_argument("name")
    sp.add_argument("node", nargs="?")
    sp = add("plot", cmd_plot, "plot throughput over time of every flow (PNG)")
    sp.add_argument("name")
    sp.add_argument("-o", "--output", help="PNG path (default: <folder>/plots/throughput.png)")
    sp = add("shell", cmd_shell, "open a shell in a node")
    sp.add_argument("name")
    sp.add_argument("node")
    facility_commands.register(add)
    cluster_commands.register(add)
    sp = add("serve", cmd_serve, "run the web portal (REST API under /api/, live view, "
             "consoles) for the users and projects of 'wanlab portal'")
    sp.add_argument("--listen", default="127.0.0.1:8480", help="ADDR:PORT (default "
                    "127.0.0.1:8480; a non-loopback address needs --allow-remote)")
    sp.add_argument("--allow-remote", action="store_true", help="listen on a non-loopback "
                    "address (put a TLS proxy in front)")
    sp = add("portal", cmd_portal, "the portal's users, projects, members, API tokens and "
             "audit log: wanlab portal {user,project,member,token,list,audit} ...")
    sp.add_argument("args", nargs=argparse.REMAINDER)
    sp = add("image", cmd_image, "node images: root file systems built with mmdebstrap, or "
             "OCI images ($WANLAB_IMAGES, else <home>/images)")
    isub = sp.add_subparsers(dest="action", required=True, metavar="ACTION")
    ip = isub.add_parser("build", help="build an image (cached by its suite and packages)")
    ip.add_argument("image", metavar="NAME")
    ip.add_argument("--packages", action="append", default=[],
                    help="Debian packages, comma-separated (repeatable)")
    ip.add_argument("--from", dest="from_", default="debian:bookworm",
                    help="base: debian:SUITE (default debian:bookworm)")
    ip = isub.add_parser("pull", help="bring an OCI image into the store: docker://REF, "
                         "oci:DIR[:TAG], oci-archive:FILE[:TAG], docker-archive:FILE, NAME:TAG")
    ip.add_argument("ref", metavar="REF")
    ip = isub.add_parser("import", help="bring an OCI image from a file (an OCI archive or "
                         "docker save's archive)")
    ip.add_argument("ref", metavar="FILE")
    ip = isub.add_parser("list", help="list images (an OCI image: its digest and origin)")
    ip.add_argument("--json", action="store_true")
    ip = isub.add_parser("rm", help="remove an image")
    ip.add_argument("image", metavar="NAME")
    ip = isub.add_parser("export", help="write an image as a tar archive")
    ip.add_argument("image", metavar="NAME")
    ip.add_argument("file", metavar="FILE", help="a new file")
    ip = isub.add_parser("save", help="save a node's writable layer over its image as a new "
                         "image: wanlab image save EXP NODE NAME")
    ip.add_argument("exp", metavar="EXP")
    ip.add_argument("node", metavar="NODE")
    ip.add_argument("image", metavar="NAME")
    return p


P_HELP = ("a template parameter's value (define-template-parameter, YAML parameters:, a "
          "Python keyword argument); repeat for several")


# commands that may create the state folder; the others refuse a missing one (a typo)
def _mininet_command(argv: list[str]) -> list[str] | None:
    """``mininet ...`` or ``mn ...`` (after an optional ``--home``, which goes to the
    environment); None for every other command."""
    i = 0
    while i < len(argv) and argv[i].startswith("--home"):
        if argv[i] == "--home" and i + 1 < len(argv):
            os.environ["WANLAB_HOME"] = argv[i + 1]
            i += 2
        elif argv[i].startswith("--home="):
            os.environ["WANLAB_HOME"] = argv[i].split("=", 1)[1]
            i += 1
        else:
            return None
    if i < len(argv) and argv[i] in ("mininet", "mn"):
        return argv[i:]
    return None


CREATING = ("create", "bridge", "run", "compare", "sweep", "template", "batch", "serve", "portal",
            "image", "cluster")


def exit_status(rc: int) -> int:
    """A command's status as a shell gives it: 128 + N for one ended by signal N
    (subprocess reports -N, which ``sys.exit`` would turn into 256 - N)."""
    return 128 - rc if rc < 0 else rc


def main(argv: list[str] | None = None) -> int:
    os.umask(0o077)     # everything wanlab writes is private to root (docs/security.md)
    mn = _mininet_command(sys.argv[1:] if argv is None else argv)
    if mn is not None:
        # the Mininet front door runs with its own `mininet` package first on sys.path, in
        # a process of its own (the CLI never imports it)
        os.execv(sys.executable, [sys.executable, "-m", "wanlab.mininet.main", *mn])
    args = build_parser().parse_args(argv)
    if args.cmd != "parse" and os.geteuid() != 0:
        print("wanlab: must run as root (namespaces and TAP devices need CAP_NET_ADMIN)",
              file=sys.stderr)
        return 2
    lab = None
    try:
        if args.cmd == "parse":
            rc = args.fn(None, args)
            sys.stdout.flush()
            return rc
        from wanlab.lifecycle import Lab
        lab = Lab(args.home, progress=True, create=args.cmd in CREATING)
        rc = exit_status(args.fn(lab, args))
        sys.stdout.flush()          # a closed pipe shows here, not at interpreter exit
        return rc
    except BrokenPipeError:
        # `wanlab show X | head -1`: the reader has what it wanted; no traceback, and no
        # second error when Python flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13         # as a shell reports a command ended by SIGPIPE
    except WanlabError as e:
        if os.environ.get("WANLAB_DEBUG"):
            raise
        print(f"wanlab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        # Interrupted says what was rolled back or finished (wanlab/interrupts.py)
        print(f"wanlab: {e.message if isinstance(e, Interrupted) else 'interrupted'}",
              file=sys.stderr)
        return 130
    finally:
        if lab is not None:
            lab.close()


if __name__ == "__main__":
    sys.exit(main())
