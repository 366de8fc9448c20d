"""``wanlab compare``'s results: an emulated and a simulated run of one spec, side by side.

The life cycle runs both (:meth:`wanlab.lifecycle.Lab.compare`): the emulation is a normal
``wanlab run`` (real namespaces, Linux TCP, the engine in real time), the simulation is
``wanlab run --simulate`` (simulated hosts and TCP, virtual time). Given the two summaries,
:func:`table` gives every flow's mean throughput, bytes, loss or retransmissions and RTT;
:func:`link_table` every link's packets delivered and dropped; :func:`plot` draws
``compare-throughput.png`` and ``compare-cwnd.png`` with both runs on the same axes (Linux
cwnd from iperf3's sender report, simulated cwnd from the engine's trace).
"""

from __future__ import annotations

import os
from typing import Any

from wanlab.report.plots import cwnd_axes, discard, figure, finish, throughput_axes


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
        discard(fig)
    return paths
