"""Parameter sweeps: one template, many runs, one table.

``wanlab sweep FILE -p NAME=V1,V2 ... [--repeat N] [--simulate | --both] --out DIR``:

1. the points are the cartesian product of the ``-p`` lists (or the rows of ``--rows
   FILE.csv``); every point is parsed first, so a bad value fails before anything runs;
2. the template's current text is recorded as a version (:mod:`wanlab.facility.templates`);
3. each point runs ``--repeat`` times (repeat ``r`` with seed ``spec seed + r``), as an
   emulation (``Lab.run``: real namespaces, the engine in real time; one at a time unless
   ``--jobs``, since emulations sharing cores spoil each other's timing) and/or as a
   simulation (``Lab.simulate``: virtual time, as many at once as there are cores);
4. every run is a row of ``runs`` in the store (version, parameters, seed, engine hash,
   kernel, state, results) and its folder is copied to ``DIR/runs/<run id>-<mode>/``;
5. ``DIR/runs.csv`` gets one row per flow of each run (one row for a run without flows):
   a column per parameter, then run id, repeat, mode, seed, template and version, the
   flow's ``throughput_bps`` (mean over its life), bytes, loss, RTT, retransmissions,
   link drops; rewritten after every run, so a stopped sweep keeps what it did. Also
   ``runs.parquet`` when pyarrow is installed, and the summary plots
   (:mod:`wanlab.report.sweep`): a metric against each parameter, a heat map for two.
   ``summary.json`` has the agreement of emulation and simulation (``--both``).

``wanlab sweep --rerun RUNID --out DIR`` runs one recorded run again: the same template
version (its stored text, or the file if unchanged), parameters, seed and mode.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import csv
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from wanlab import site as sites
from wanlab.errors import Interrupted, SpecError, WanlabError
from wanlab.facility import templates
from wanlab.frontends import load
from wanlab.lifecycle import Lab
from wanlab.model.ir import Experiment
from wanlab.store import facility as records

MODES = ("emulate", "simulate")
# columns after the parameters' own; per flow
COLUMNS = ["run_id", "repeat", "mode", "seed", "template", "template_version", "engine",
           "kernel", "state", "flow", "kind", "started_s", "stopped_s", "duration_s", "bytes",
           "throughput_bps", "loss_ratio", "rtt_ms", "retransmits", "owd_ms", "link_drops",
           "events_failed", "error"]
METRICS = ("throughput_bps", "rtt_ms", "loss_ratio", "retransmits", "link_drops")
# emulation and simulation agree on a point when their mean throughputs differ by at most
# this fraction of the emulated one (wanlab compare's own bar for a bulk TCP flow)
AGREEMENT_TOLERANCE = 0.15

Say = Callable[[str], None]


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: a point (parameter values), a repeat, a mode."""

    point: int
    params: dict[str, str]
    repeat: int
    mode: str


def plan_runs(points: list[dict[str, str]], repeat: int, modes: tuple[str, ...]) -> list[RunSpec]:
    """Simulations first (fast: their results show early), then emulations; within a mode,
    point by point, repeats together."""
    if repeat < 1:
        raise WanlabError("--repeat must be at least 1")
    return [RunSpec(i, p, r, m) for m in sorted(modes, key=lambda m: m != "simulate")
            for i, p in enumerate(points) for r in range(repeat)]


# -- one run's results as rows --------------------------------------------------------------

def flow_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Per flow of a run's summary (``Lab.run`` or ``Lab.simulate``): mean throughput,
    bytes, loss, RTT; on each row, the whole run's link drops and timeline events (Program
    runs among them) whose outcome was not ok."""
    failed = sum(1 for e in summary.get("events") or []
                 if e.get("outcome") not in ("ok", "cancelled"))
    drops = sum((l.get(d) or {}).get("drop_queue", 0) + (l.get(d) or {}).get("drop_loss", 0)
                for l in (summary.get("links") or {}).values() for d in ("ab", "ba"))
    out = []
    seen: dict[str, int] = {}
    for f in sorted(summary.get("flows") or [], key=lambda f: (f["started_s"], f["agent"])):
        r = f["result"]
        n = seen[f["agent"]] = seen.get(f["agent"], 0) + 1
        stop = f.get("stopped_s") if f.get("stopped_s") is not None else f["started_s"]
        dur = stop - f["started_s"]
        b = r.get("bytes") or 0
        srtt = r.get("srtt_us")
        owd = r.get("owd_avg_us")
        out.append({
            "flow": f["agent"] if n == 1 else f"{f['agent']}#{n}", "kind": f["kind"],
            "started_s": round(f["started_s"], 6), "stopped_s": round(stop, 6),
            "duration_s": round(dur, 6), "bytes": b,
            "throughput_bps": round(b * 8 / dur, 1) if dur > 0 else None,
            "loss_ratio": r.get("loss_ratio"),
            "rtt_ms": round(srtt / 1000, 3) if srtt else None,
            "retransmits": r.get("retransmits"),
            "owd_ms": round(owd / 1000, 3) if owd else None, "link_drops": drops,
            "events_failed": failed})
    return out or [{"flow": "", "link_drops": drops, "events_failed": failed}]


# -- the sweep ------------------------------------------------------------------------------

class Sweep:
    """A sweep of one template into ``out``; :meth:`run` runs it."""

    def __init__(self, lab: Lab, path: str, points: list[dict[str, str]], out: str, *,
                 repeat: int = 1, modes: tuple[str, ...] = ("emulate",),
                 jobs: int | None = None, say: Say = print, label: str | None = None):
        if not points:
            raise WanlabError("a sweep needs at least one point")
        for m in modes:
            if m not in MODES:
                raise WanlabError(f"mode {m!r} unknown; modes are {', '.join(MODES)}")
        self.lab, self.path, self.out, self.say = lab, path, os.path.abspath(out), say
        self.points = points
        self.names = list(dict.fromkeys(k for p in points for k in p))
        self.specs = plan_runs(points, repeat, modes)
        self.jobs = jobs
        self.label = label or time.strftime("%Y%m%dT%H%M%S")
        self.rows: list[dict[str, Any]] = []
        self.runs: list[dict[str, Any]] = []

    def parse_all(self) -> list[Experiment]:
        """Every point's experiment (parse errors before anything runs, naming the point)."""
        exps = []
        for p in self.points:
            try:
                exps.append(load(self.path, params=p))
            except SpecError as e:
                where = ", ".join(f"{k}={v}" for k, v in p.items())
                raise SpecError(f"{e.message} (sweep point {where})", file=e.file,
                                line=e.line, field=e.field) from None
        return exps

    def run(self) -> dict[str, Any]:
        exps = self.parse_all()
        os.makedirs(os.path.join(self.out, "runs"), exist_ok=True)
        self.version = templates.record(self.lab.store, self.path, exps[0])
        self.soft = templates.software()
        self.say(f"sweep {self.label}: template {self.version.name} version "
                 f"{self.version.version}, {len(self.points)} points x "
                 f"{len(self.specs) // len(self.points)} runs = {len(self.specs)} runs "
                 f"-> {self.out}")
        t0 = last = time.monotonic()
        done = 0
        by_mode: dict[str, list[RunSpec]] = {}
        for s in self.specs:
            by_mode.setdefault(s.mode, []).append(s)
        spent: dict[str, list[float]] = {}        # mode -> wall seconds per finished run
        try:
            for mode, specs in sorted(by_mode.items(), key=lambda kv: kv[0] != "simulate"):
                jobs = self.jobs or (os.cpu_count() or 1 if mode == "simulate" else 1)
                for row in self._map(specs, exps, jobs):
                    done += 1
                    now = time.monotonic()
                    spent.setdefault(mode, []).append(now - last)
                    last = now
                    self.runs.append(row)
                    self._write()
                    left = _time_left(spent, self.specs[done:] if done < len(self.specs)
                                      else [])
                    self.say(f"[{done}/{len(self.specs)}] run {row['run_id']} {row['mode']} "
                             f"{_point(row['params'])} repeat {row['repeat']}: "
                             f"{row['state']}{_tp(row)}; about {left:.0f} s left")
        finally:
            self._write()
        summary = self.summary(time.monotonic() - t0)
        with open(os.path.join(self.out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
        return summary

    def _map(self, specs: list[RunSpec], exps: list[Experiment], jobs: int):
        if jobs <= 1 or len(specs) == 1:
            for s in specs:
                yield self._one(self.lab, s, exps[s.point])
            return
        # one Lab (one store connection) per worker thread
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            futs = [pool.submit(self._one_own_lab, s, exps[s.point]) for s in specs]
            try:
                for fut in concurrent.futures.as_completed(futs):
                    yield fut.result()
            except BaseException:
                for fut in futs:
                    fut.cancel()
                raise

    def _one_own_lab(self, spec: RunSpec, exp: Experiment) -> dict[str, Any]:
        lab = Lab(self.lab.store.home)
        try:
            return self._one(lab, spec, exp)
        finally:
            lab.close()

    def _one(self, lab: Lab, spec: RunSpec, exp: Experiment) -> dict[str, Any]:
        seed = exp.seed + spec.repeat
        exp = replace(exp, seed=seed)
        run_id = records.add_run(lab.store, self.version.id, self.label, spec.mode,
                                 spec.repeat, spec.params, seed, self.soft["engine"],
                                 self.soft["kernel"])
        folder = os.path.join(self.out, "runs", f"{run_id}-{spec.mode}")
        try:
            summary = execute(lab, exp, spec.mode, run_id, folder, self.path)
            state, error = ("done" if not summary.get("failed") else "failed"), None
            if summary.get("failed"):
                error = f"{len(summary['failed'])} timeline events failed"
        except (WanlabError, OSError) as e:
            summary, state, error = {}, "failed", str(e)
        except KeyboardInterrupt:
            records.finish_run(lab.store, run_id, "failed", folder, None, "interrupted")
            raise
        rows = flow_rows(summary) if summary else [{"flow": ""}]
        records.finish_run(lab.store, run_id, state, folder, {"flows": rows}, error)
        return {"run_id": run_id, "point": spec.point, "params": spec.params,
                "repeat": spec.repeat,
                "mode": spec.mode, "seed": seed, "state": state, "error": error,
                "folder": folder, "flows": rows}

    # -- output --------------------------------------------------------------------------
    def table(self) -> list[dict[str, Any]]:
        out = []
        # in the plan's order (runs in parallel finish, and get their ids, in any order)
        for r in sorted(self.runs, key=lambda r: (r["point"], r["repeat"],
                                                  MODES.index(r["mode"]), r["run_id"])):
            for f in r["flows"]:
                row = {**r["params"], "run_id": r["run_id"], "repeat": r["repeat"],
                       "mode": r["mode"], "seed": r["seed"], "template": self.version.name,
                       "template_version": self.version.version, **self.soft,
                       "state": r["state"], "error": r["error"] or ""}
                row.update(f)
                out.append(row)
        return out

    def columns(self) -> list[str]:
        return self.names + COLUMNS

    def _write(self) -> None:
        rows = self.table()
        write_table(rows, self.columns(), self.out)

    def summary(self, wall_s: float) -> dict[str, Any]:
        from wanlab.report.sweep import plot_sweep
        rows = self.table()
        plots = plot_sweep(rows, self.names, METRICS, os.path.join(self.out, "plots"),
                           self.version.name) if rows else []
        failed = [r["run_id"] for r in self.runs if r["state"] != "done"]
        return {"sweep": self.label, "template": self.version.name,
                "template_version": self.version.version, "parameters": self.names,
                "points": len(self.points), "runs": len(self.runs), "failed_runs": failed,
                "wall_s": round(wall_s, 1), "software": self.soft,
                "agreement": agreement(rows, self.names), "plots": plots,
                "table": os.path.join(self.out, "runs.csv")}


def execute(lab: Lab, exp: Experiment, mode: str, run_id: int, folder: str,
            source_path: str | None) -> dict[str, Any]:
    """Run ``exp`` once in ``mode``; its results end up in ``folder`` (a new folder)."""
    if os.path.lexists(folder):
        raise WanlabError(f"{folder} exists already (give a new --out)")
    if mode == "simulate":
        return lab.simulate(exp, out=folder, seed=exp.seed)
    name = f"{exp.name[:22].rstrip('-')}-r{run_id}"
    if lab.store.find(name) is not None:
        raise WanlabError(f"an experiment named {name!r} exists; terminate it first")
    try:
        summary = sites.for_new(lab).run(exp.with_name(name), source_path=source_path)
    finally:
        if lab.store.find(name) is not None:
            with contextlib.suppress(WanlabError):
                if os.path.isdir(lab.store.folder(name)):
                    lab.export(name, folder)
            with contextlib.suppress(WanlabError):
                sites.of(lab, name).terminate(name)
    return summary


def write_table(rows: list[dict[str, Any]], columns: list[str], out: str) -> str:
    """``out/runs.csv`` (and ``runs.parquet`` with pyarrow), written to a temporary file
    and renamed, so a reader never sees half a table."""
    path = os.path.join(out, "runs.csv")
    tmp = path + ".new"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})
    os.replace(tmp, path)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return path
    table = pa.Table.from_pylist([{k: _cell(r.get(k)) for k in columns} for r in rows])
    pq.write_table(table, os.path.join(out, "runs.parquet"))
    return path


def _cell(v: Any) -> Any:
    return v if v is None or isinstance(v, (int, float)) else str(v)


def agreement(rows: list[dict[str, Any]], names: list[str]) -> dict[str, Any] | None:
    """Per point and flow, the mean throughput emulated and simulated and their ratio;
    ``within``: how many points agree within :data:`AGREEMENT_TOLERANCE`."""
    acc: dict[tuple, dict[str, list[float]]] = {}
    for r in rows:
        if r.get("throughput_bps") is None or r.get("state") != "done":
            continue
        key = (tuple(r.get(n) for n in names), r["flow"])
        acc.setdefault(key, {}).setdefault(r["mode"], []).append(r["throughput_bps"])
    points = []
    for (vals, flow), by in sorted(acc.items()):
        if "emulate" in by and "simulate" in by:
            e = sum(by["emulate"]) / len(by["emulate"])
            s = sum(by["simulate"]) / len(by["simulate"])
            ratio = s / e if e else None
            points.append({**dict(zip(names, vals, strict=True)), "flow": flow,
                           "emulated_bps": round(e, 1), "simulated_bps": round(s, 1),
                           "ratio": None if ratio is None else round(ratio, 4),
                           "agree": ratio is not None
                           and abs(ratio - 1) <= AGREEMENT_TOLERANCE})
    if not points:
        return None
    return {"tolerance": AGREEMENT_TOLERANCE, "compared": len(points),
            "within": sum(p["agree"] for p in points), "points": points}


def _time_left(spent: dict[str, list[float]], todo: list[RunSpec]) -> float:
    """Runs to do times the mean time of a finished run of their mode (an emulation's of
    ~10 s is nothing like a simulation's fraction of a second)."""
    every = [x for xs in spent.values() for x in xs]
    if not every:
        return 0.0
    mean = {m: sum(xs) / len(xs) for m, xs in spent.items()}
    fallback = sum(every) / len(every)
    return sum(mean.get(s.mode, fallback) for s in todo)


def _point(p: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items()) or "(defaults)"


def _tp(row: dict[str, Any]) -> str:
    tps = [f"{f['flow']} {f['throughput_bps'] / 1e6:.3f} Mbit/s" for f in row["flows"]
           if f.get("throughput_bps") is not None]
    if row.get("error"):
        return f" ({row['error']})"
    return f" ({'; '.join(tps)})" if tps else ""


# -- reproducing one run --------------------------------------------------------------------

def rerun(lab: Lab, run_id: int, out: str, say: Say = print) -> dict[str, Any]:
    """Run recorded run ``run_id`` again (same template version, parameters, seed, mode) as a
    one-run sweep into ``out``; the summary has the original's and the new rows."""
    old = records.get_run(lab.store, run_id)
    version = records.template_by_id(lab.store, old["template_id"])
    soft = templates.software()
    for k in ("engine", "kernel"):
        if old[k] != soft[k]:
            say(f"note: run {run_id} used {k} {old[k]}; this one uses {soft[k]}")
    with tempfile.TemporaryDirectory(prefix="wanlab-rerun-") as tmp:
        path = version.path
        current = None
        with contextlib.suppress(WanlabError):
            current = templates.read_source(path)
        if current != version.source:
            # the file changed since (or is gone): the stored text of that version
            path = os.path.join(tmp, os.path.basename(version.path))
            with open(path, "w", encoding="utf-8") as f:
                f.write(version.source)
            say(f"{version.path} changed since version {version.version}; running the "
                f"stored text of version {version.version}")
        exp = load(path, params=old["parameters"])
        exp = replace(exp, seed=old["seed"] - old["repeat"])      # the sweep adds the repeat
        sw = Sweep(lab, path, [old["parameters"]], out, repeat=1, modes=(old["mode"],),
                   say=say, label=f"rerun-of-{run_id}")
        sw.version, sw.soft = version, soft
        os.makedirs(os.path.join(sw.out, "runs"), exist_ok=True)
        spec = RunSpec(0, old["parameters"], old["repeat"], old["mode"])
        row = sw._one(lab, spec, exp)
        sw.runs.append(row)
        sw._write()
    return {"run": row, "original": old, "table": os.path.join(sw.out, "runs.csv")}


def stop_message(e: KeyboardInterrupt, out: str) -> Interrupted:
    return Interrupted(f"interrupted: the sweep stopped; the runs done so far are in "
                       f"{os.path.join(out, 'runs.csv')}")


__all__ = ["Sweep", "RunSpec", "plan_runs", "flow_rows", "agreement", "rerun", "execute",
           "write_table", "COLUMNS", "METRICS"]
