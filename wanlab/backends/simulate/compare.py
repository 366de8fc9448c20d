"""``wanlab compare``: the same spec emulated and simulated, side by side.

The emulation is a normal ``wanlab run`` (real namespaces, Linux TCP, the engine in real
time); the simulation is ``wanlab run --simulate`` (simulated hosts and TCP, virtual time).
For every flow the table gives mean throughput, bytes, loss or retransmissions and RTT;
for every link the packets delivered and dropped. ``plots/compare-throughput.png`` and
``plots/compare-cwnd.png`` draw both runs on the same axes (Linux cwnd from iperf3's
sender report, simulated cwnd from the engine's trace).
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

from wanlab.model.ir import Experiment


def compare(lab, exp: Experiment, out: str, source_path: str | None = None) -> dict[str, Any]:
    os.makedirs(out, exist_ok=True)
    from wanlab.backends.simulate.runner import simulate
    lab.say(f"{exp.name}: simulating")
    sim = simulate(exp, os.path.join(out, "simulated"), plot=True)
    emu_name = f"{exp.name}-emu"
    if emu_name in {r.name for r in lab.list()}:
        lab.terminate(emu_name)
    lab.say(f"{exp.name}: emulating (as {emu_name})")
    emu = lab.run(exp.with_name(emu_name), source_path=source_path)
    shutil.copytree(emu["folder"], os.path.join(out, "emulated"), dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.sock"))
    lab.terminate(emu_name)
    emu["folder"] = os.path.join(out, "emulated")
    rows = table(emu, sim)
    result = {"name": exp.name, "flows": rows, "links": link_table(emu, sim),
              "simulation_speed": sim["engine"],
              "plots": plot(emu, sim, os.path.join(out, "plots"), exp.name)}
    with open(os.path.join(out, "compare.json"), "w") as f:
        json.dump(result, f, indent=1)
    result["folder"] = out
    return result


def _summary(f: dict[str, Any] | None) -> dict[str, Any]:
    if f is None:
        return {}
    r = f["result"]
    dur = (f.get("stopped_s") or 0) - f["started_s"]
    out = {"duration_s": round(dur, 3), "bytes": r.get("bytes"),
           "mbps": round((r.get("bytes") or 0) * 8 / dur / 1e6, 4) if dur > 0 else None}
    if f["kind"] == "ftp":
        out["retransmits"] = r.get("retransmits")
        srtt = r.get("srtt_us")
        out["rtt_ms"] = round(srtt / 1000, 3) if srtt else None
    else:
        out["loss_ratio"] = r.get("loss_ratio")
        owd = r.get("owd_avg_us")
        out["owd_ms"] = round(owd / 1000, 3) if owd else None
    return out


def table(emu: dict[str, Any], sim: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per flow (by application and start order)."""
    def keyed(flows):
        seen: dict[str, int] = {}
        out = {}
        for f in sorted(flows, key=lambda f: f["started_s"]):
            n = seen[f["agent"]] = seen.get(f["agent"], 0) + 1
            out[(f["agent"], n)] = f
        return out
    e, s = keyed(emu.get("flows", [])), keyed(sim.get("flows", []))
    rows = []
    for k in sorted(set(e) | set(s), key=lambda k: (k[0], k[1])):
        ef, sf = e.get(k), s.get(k)
        es, ss = _summary(ef), _summary(sf)
        row = {"flow": f"{k[0]}#{k[1]}", "kind": (ef or sf)["kind"], "emulated": es,
               "simulated": ss}
        if es.get("mbps") and ss.get("mbps"):
            row["throughput_ratio"] = round(ss["mbps"] / es["mbps"], 4)
        rows.append(row)
    return rows


def link_table(emu: dict[str, Any], sim: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name in sorted(set(emu.get("links", {})) | set(sim.get("links", {}))):
        row = {}
        for which, run in (("emulated", emu), ("simulated", sim)):
            l = run.get("links", {}).get(name)
            if l:
                row[which] = {d: {k: l[d][k] for k in ("out_pkts", "out_bytes", "drop_queue",
                                                       "drop_loss", "drop_down")}
                              for d in ("ab", "ba")}
        out[name] = row
    return out


def plot(emu: dict[str, Any], sim: dict[str, Any], outdir: str, title: str) -> list[str]:
    from wanlab.report.plots import _plt, cwnd_axes, figure, finish, throughput_axes
    events = sim.get("events", [])
    fig, ax = figure()
    throughput_axes(ax, emu.get("flows", []), " emulated")
    throughput_axes(ax, sim.get("flows", []), " simulated", ls="--")
    paths = [finish(fig, ax, events, "received throughput (Mbit/s)",
                    f"{title}: emulated (solid) vs simulated (dashed)", "lower right",
                    os.path.join(outdir, "compare-throughput.png"))]
    fig, ax = figure()
    drawn = cwnd_axes(ax, emu.get("flows", []), " emulated (Linux)", in_kb=True)
    drawn = cwnd_axes(ax, sim.get("flows", []), " simulated", in_kb=True, ls="--") or drawn
    if drawn:
        paths.append(finish(fig, ax, events, "congestion window (kB)",
                            f"{title}: TCP congestion window, emulated vs simulated",
                            "upper right", os.path.join(outdir, "compare-cwnd.png")))
    else:
        _plt().close(fig)
    return paths
