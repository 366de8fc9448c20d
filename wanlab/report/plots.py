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


def finish(fig, ax, events: list[dict[str, Any]], ylabel: str, title: str, legend: str,
           path: str) -> str:
    """Mark the events, label, save ``path`` and close: the common end of every plot."""
    plt = _plt()
    _mark_events(ax, events)
    ax.set_xlabel("experiment time (s)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc=legend, fontsize=8)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def discard(fig) -> None:
    """Close a figure that had nothing to draw."""
    _plt().close(fig)


def figure():
    """A new figure of the plots' size: (fig, ax)."""
    return _plt().subplots(figsize=(9, 4.5))


def plot_flows(flows: list[dict[str, Any]], events: list[dict[str, Any]], outdir: str,
               title: str) -> list[str]:
    """throughput.png (and cwnd.png when flows have cwnd traces) in ``outdir``."""
    fig, ax = figure()
    throughput_axes(ax, flows)
    paths = [finish(fig, ax, events, "received throughput (Mbit/s)",
                    f"{title}: throughput over time", "lower right",
                    os.path.join(outdir, "throughput.png"))]
    fig, ax = figure()
    if cwnd_axes(ax, flows):
        paths.append(finish(fig, ax, events, "congestion window (packets)",
                            f"{title}: TCP congestion window", "upper right",
                            os.path.join(outdir, "cwnd.png")))
    else:
        discard(fig)
    return paths


def plot_throughput(name: str, flows: list[dict[str, Any]], events: list[dict[str, Any]],
                    output: str) -> str:
    """Write a PNG of every flow's received throughput (of the latest run) against
    experiment time, with the events marked."""
    if not flows:
        raise WanlabError(f"experiment {name!r} has no flow results yet (start and stop a "
                          f"traffic agent first)")
    t0 = flows[-1]["t0"]
    fig, ax = figure()
    throughput_axes(ax, [f for f in flows if f["t0"] == t0])
    return finish(fig, ax, events, "received throughput (Mbit/s)",
                  f"{name}: throughput over time", "lower right", output)
