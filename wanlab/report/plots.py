"""Plots of an experiment's flows: throughput over time with its events marked, and
TCP congestion windows (simulated flows) — for emulated runs, simulations and comparisons."""

from __future__ import annotations

import os
from typing import Any

from wanlab.errors import WanlabError


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _mark_events(ax, events: list[dict[str, Any]]) -> None:
    for e in events:
        if e.get("fired_s") is not None and e["action"] not in ("start", "stop"):
            ax.axvline(e["fired_s"], color="grey", lw=0.6, ls=":")
            ax.annotate(f"{e['target']} {e['action']} {' '.join(e['args'])}".strip(),
                        (e["fired_s"], 1.0), xycoords=("data", "axes fraction"), fontsize=7,
                        rotation=90, va="top", ha="right", color="grey")


def throughput_axes(ax, flows: list[dict[str, Any]], label_suffix: str = "", **style) -> None:
    """Draw each flow's received throughput (Mbit/s) against experiment time."""
    for f in flows:
        pts = f["result"].get("throughput_bps", [])
        if pts:
            ax.plot([f["started_s"] + t for t, _ in pts], [b / 1e6 for _, b in pts],
                    label=f"{f['agent']} ({f['kind']}){label_suffix}", drawstyle="steps-pre",
                    **style)


def cwnd_axes(ax, flows: list[dict[str, Any]], label_suffix: str = "", in_kb: bool = False,
              **style) -> bool:
    """Draw TCP congestion windows (packets, or kB with ``in_kb``: flows with different
    MSS compare in bytes); False if no flow has a cwnd trace."""
    drawn = False
    for f in flows:
        pts = f["result"].get("cwnd") or []
        scale = (f["result"].get("mss") or 1000) / 1000 if in_kb else 1
        if pts:
            ax.plot([f["started_s"] + t for t, _ in pts], [c * scale for _, c in pts],
                    label=f"{f['agent']}{label_suffix}", drawstyle="steps-post", **style)
            drawn = True
    return drawn


def plot_flows(flows: list[dict[str, Any]], events: list[dict[str, Any]], outdir: str,
               title: str) -> list[str]:
    """throughput.png (and cwnd.png when flows have cwnd traces) in ``outdir``."""
    plt = _plt()
    os.makedirs(outdir, exist_ok=True)
    paths = []
    fig, ax = plt.subplots(figsize=(9, 4.5))
    throughput_axes(ax, flows)
    _mark_events(ax, events)
    ax.set_xlabel("experiment time (s)")
    ax.set_ylabel("received throughput (Mbit/s)")
    ax.set_title(f"{title}: throughput over time")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    paths.append(os.path.join(outdir, "throughput.png"))
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    if cwnd_axes(ax, flows):
        _mark_events(ax, events)
        ax.set_xlabel("experiment time (s)")
        ax.set_ylabel("congestion window (packets)")
        ax.set_title(f"{title}: TCP congestion window")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
        fig.tight_layout()
        paths.append(os.path.join(outdir, "cwnd.png"))
        fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def plot_throughput(lab, name: str, output: str | None = None) -> str:
    """Write a PNG of every flow's received throughput against experiment time."""
    flows = lab.flows(name)
    if not flows:
        raise WanlabError(f"experiment {name!r} has no flow results yet (start and stop a "
                          f"traffic agent first)")
    t0 = flows[-1]["t0"]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    throughput_axes(ax, [f for f in flows if f["t0"] == t0])
    _mark_events(ax, lab.event_log(name))
    ax.set_xlabel("experiment time (s)")
    ax.set_ylabel("received throughput (Mbit/s)")
    ax.set_title(f"{name}: throughput over time")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    row = lab.get(name)
    if output is None:
        from wanlab.realize.swap import folder_of
        output = os.path.join(folder_of(lab.store, row.name), "plots", "throughput.png")
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    fig.tight_layout()
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return output
