"""The facility's CLI subcommands (``wanlab sweep``, ``wanlab template``, ``wanlab batch``),
registered by :mod:`wanlab.cli`; thin layers over the facility's modules."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from wanlab.errors import WanlabError
from wanlab.facility import params as P


def _say(msg: str) -> None:
    print(f"wanlab: {msg}", file=sys.stderr, flush=True)


# -- sweep -------------------------------------------------------------------------------------

def cmd_sweep(lab, a) -> int:
    from wanlab.facility import sweep
    if a.rerun is not None:
        if a.file or a.p or a.rows:
            raise WanlabError("--rerun RUNID takes no FILE, -p or --rows: the run's own are used")
        r = sweep.rerun(lab, a.rerun, a.out, say=_say)
        old = {f["flow"]: f for f in (r["original"]["result"] or {}).get("flows", [])}
        for f in r["run"]["flows"]:
            was = old.get(f["flow"], {}).get("throughput_bps")
            now = f.get("throughput_bps")
            print(f"run {r['run']['run_id']} (rerun of {a.rerun}) {f['flow'] or '-'}: "
                  f"{_mbps(now)} (was {_mbps(was)})")
        print(f"table: {r['table']}")
        return 0 if r["run"]["state"] == "done" else 1
    if not a.file:
        raise WanlabError("sweep needs a FILE (or --rerun RUNID)")
    axes = P.axes(a.p)
    points = P.rows(a.rows, axes) if a.rows else P.product(axes)
    modes = ("emulate", "simulate") if a.both else ("simulate",) if a.simulate else ("emulate",)
    if a.both and a.simulate:
        raise WanlabError("--simulate and --both: give one")
    sw = sweep.Sweep(lab, a.file, points, a.out, repeat=a.repeat, modes=modes, jobs=a.jobs,
                     say=_say)
    try:
        s = sw.run()
    except KeyboardInterrupt as e:
        raise sweep.stop_message(e, a.out) from None
    print(f"{s['runs']} runs of {s['template']} (version {s['template_version']}) in "
          f"{s['wall_s']} s; {len(s['failed_runs'])} failed"
          + (f" (runs {', '.join(map(str, s['failed_runs']))})" if s["failed_runs"] else ""))
    ag = s.get("agreement")
    if ag:
        print(f"emulation and simulation agree within {ag['tolerance']:.0%} on "
              f"{ag['within']} of {ag['compared']} points")
    print(f"table: {s['table']}")
    for p in s["plots"]:
        print(f"plot: {p}")
    return 0 if not s["failed_runs"] else 1


def _mbps(v: Any) -> str:
    return "-" if v in (None, "") else f"{float(v) / 1e6:.3f} Mbit/s"


# -- template ---------------------------------------------------------------------------------

def cmd_template(lab, a) -> int:
    from wanlab.facility import templates
    from wanlab.frontends import load
    from wanlab.store import facility as records
    if a.op == "record":
        exp = load(a.target, params=P.values(a.p))
        v = templates.record(lab.store, a.target, exp)
        print(f"{v.name}: version {v.version} ({v.sha256[:12]})")
        return 0
    name, versions = templates.history(lab.store, a.target)
    if a.json:
        print(json.dumps([{"version": v.version, "created": v.created, "sha256": v.sha256,
                           "path": v.path, "parameters": v.parameters,
                           "runs": records.run_counts(lab.store, v.id)} for v in versions],
                         indent=2))
        return 0
    print(f"template {name}:")
    for v in versions:
        ps = ", ".join(f"{p['name']}={p['default']}" for p in v.parameters) or "no parameters"
        print(f"  version {v.version}  {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(v.created))}"
              f" UTC  {v.sha256[:12]}  {records.run_counts(lab.store, v.id)} runs  ({ps})")
    return 0


# -- batch ------------------------------------------------------------------------------------

def cmd_batch(lab, a) -> int:
    from wanlab.facility import batch
    if a.op == "submit":
        if not a.target:
            raise WanlabError("batch submit needs a FILE")
        bid = batch.submit(lab, a.target, P.values(a.p), user=a.user)
        print(f"batch {bid}: posted")
        return 0
    if a.op == "list":
        rows = batch.listing(lab)
        if a.json:
            print(json.dumps(rows, indent=2))
            return 0
        print(f"{'ID':>4} {'USER':10} {'NAME':24} {'STATE':12} {'TRIES':>5}  "
              "RESULTS / ERROR / WHY IT WAITS")
        for r in rows:
            why = f"waits: {r['waiting']}" if r.get("waiting") else ""
            print(f"{r['id']:>4} {r['user']:10} {r['name']:24} {r['state']:12} "
                  f"{r['attempts']:>5}  {r['error'] or r['folder'] or why}")
        return 0
    if a.op in ("cancel", "requeue", "show"):
        if not a.target or not a.target.isdigit():
            raise WanlabError(f"batch {a.op} needs a batch ID (see 'wanlab batch list')")
        bid = int(a.target)
        if a.op == "show":
            print(json.dumps(batch.show(lab, bid), indent=2))
            return 0
        state = getattr(batch, a.op)(lab, bid)
        print(f"batch {bid}: {state}")
        return 0
    if a.op == "daemon":
        from wanlab.facility import daemon
        lab.close()          # the daemon opens its own store (after it has detached)
        return daemon.main(lab.store.home, max_concurrent=a.max_concurrent,
                           foreground=a.foreground, tick_s=a.tick, once=a.once,
                           default_idle_s=a.default_idle)
    raise WanlabError(f"batch: unknown operation {a.op!r}")


def add_swap_flags(sp) -> None:
    """``create``'s and ``run``'s idle and max-duration flags."""
    sp.add_argument("--idle-swap", metavar="TIME", help="swap out after TIME without activity "
                    "(seconds, or 30s, 10min, 2h; the batch daemon watches)")
    sp.add_argument("--max-duration", metavar="TIME", help="swap out TIME after swap-in")
    sp.add_argument("--no-idle-swap", metavar="REASON", help="never idle-swap this experiment "
                    "(a reason is required)")


def apply_swap_flags(exp, a):
    """The experiment with the swap policy the flags give (they override the spec's)."""
    from dataclasses import replace

    from wanlab.frontends import units
    from wanlab.model.ir import SwapPolicy, validate
    idle, mx, reason = (getattr(a, "idle_swap", None), getattr(a, "max_duration", None),
                        getattr(a, "no_idle_swap", None))
    if idle is None and mx is None and reason is None:
        return exp
    if idle is not None and reason is not None:
        raise WanlabError("--idle-swap and --no-idle-swap: give one")
    if reason is not None and not reason.strip():
        raise WanlabError("--no-idle-swap needs a reason (why this experiment may sit idle)")
    s = exp.swap
    try:
        new = SwapPolicy(
            idle_s=None if reason is not None else (
                units.parse_duration(idle, "--idle-swap") if idle is not None else s.idle_s),
            max_duration_s=units.parse_duration(mx, "--max-duration") if mx is not None
            else s.max_duration_s,
            no_idle_reason=reason if reason is not None else (
                None if idle is not None else s.no_idle_reason))
    except Exception as e:  # SpecError: a flag's value
        raise WanlabError(str(getattr(e, "message", e))) from None
    return validate(replace(exp, swap=new))


def register(add) -> None:
    """Add the facility's subcommands through the CLI's ``add(name, fn, help)``."""
    sp = add("sweep", cmd_sweep, "run a template over parameter values (cartesian product of "
             "-p lists, or --rows CSV), repeated, emulated and/or simulated; one table "
             "(OUT/runs.csv) and summary plots")
    sp.add_argument("file", nargs="?")
    sp.add_argument("-p", action="append", metavar="NAME=V1,V2", help="a parameter's values")
    sp.add_argument("--rows", metavar="CSV", help="the points: a header of parameter names, "
                    "a row per point")
    sp.add_argument("--repeat", type=int, default=1, help="runs per point (seed + repeat)")
    sp.add_argument("--simulate", action="store_true", help="simulate instead of emulating")
    sp.add_argument("--both", action="store_true", help="emulate and simulate every run")
    sp.add_argument("--jobs", "-j", type=int, help="runs at once (default: 1 emulation, "
                    "as many simulations as cores)")
    sp.add_argument("--out", required=True, help="results folder (runs.csv, runs/, plots/)")
    sp.add_argument("--rerun", type=int, metavar="RUNID", help="run a recorded run again: its "
                    "template version, parameters, seed and mode")
    sp = add("template", cmd_template, "a template's versions: 'history FILE-or-NAME' (each "
             "change of the source is a version), 'record FILE'")
    sp.add_argument("op", choices=("history", "record"))
    sp.add_argument("target", metavar="FILE-or-NAME")
    sp.add_argument("-p", action="append", metavar="NAME=VALUE")
    sp.add_argument("--json", action="store_true")
    sp = add("batch", cmd_batch, "the batch queue: submit FILE | list | show ID | cancel ID | "
             "requeue ID | daemon (starts batches as capacity allows; swaps idle "
             "experiments out)")
    sp.add_argument("op", choices=("submit", "list", "show", "cancel", "requeue", "daemon"))
    sp.add_argument("target", nargs="?", metavar="FILE-or-ID")
    sp.add_argument("-p", action="append", metavar="NAME=VALUE")
    sp.add_argument("--user", default=os.environ.get("SUDO_USER") or "root",
                    help="whose batch (fairness: one running batch per user while others wait)")
    sp.add_argument("--json", action="store_true")
    sp.add_argument("--foreground", action="store_true", help="daemon: stay in the foreground "
                    "(systemd and tests)")
    sp.add_argument("--max-concurrent", type=int, help="daemon: batches at once (default: one "
                    "per two cores)")
    sp.add_argument("--tick", type=float, default=2.0, help="daemon: seconds between checks")
    sp.add_argument("--once", action="store_true", help="daemon: one pass, then exit")
    sp.add_argument("--default-idle", metavar="TIME", help="daemon: idle-swap experiments "
                    "that set no policy after TIME")
