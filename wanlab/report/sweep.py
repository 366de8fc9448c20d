"""A sweep's summary plots (``wanlab sweep``): each metric against each parameter, and a
heat map of each metric over the first two parameters.

Rows are ``runs.csv``'s (one per run and flow). A line is one flow in one mode (emulated,
simulated); its points are the mean over repeats and over the other parameters, with the
spread (min to max) as error bars. Parameter values are text (``10Mb``, ``20ms``) and are
ordered by their quantity where they have one.
"""

from __future__ import annotations

import math
import os
from typing import Any

from wanlab.report.plots import _plt

LABELS = {"throughput_bps": ("throughput (Mbit/s)", 1e-6), "rtt_ms": ("RTT (ms)", 1.0),
          "loss_ratio": ("loss ratio", 1.0), "retransmits": ("TCP retransmissions", 1.0),
          "link_drops": ("frames dropped on links", 1.0)}


def quantity(v: Any) -> tuple[int, float, str]:
    """A sort key: numbers and ns-2 quantities (bandwidth, time) by value, then text."""
    from wanlab.errors import SpecError
    from wanlab.frontends import units
    s = str(v)
    for parse in (float, units.parse_bandwidth, units.parse_delay):
        try:
            return (0, float(parse(s)), s)
        except (SpecError, ValueError, TypeError):
            continue
    return (1, 0.0, s)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _values(rows: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        v = r.get(metric)
        if v in (None, "") or r.get("state", "done") != "done":
            continue
        try:
            x = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(x):
            out.append({**r, metric: x})
    return out


def plot_sweep(rows: list[dict[str, Any]], params: list[str], metrics: tuple[str, ...],
               outdir: str, title: str) -> list[str]:
    """``<metric>.png`` (the metric against each parameter, one panel each) and, with two or
    more parameters, ``<metric>-heatmap.png`` per mode; returns the paths written."""
    paths = []
    for metric in metrics:
        vals = _values(rows, metric)
        if not vals or not params:
            continue
        label, scale = LABELS.get(metric, (metric, 1.0))
        plt = _plt()
        fig, axes = plt.subplots(1, len(params), figsize=(4.8 * len(params), 4), squeeze=False)
        for ax, p in zip(axes[0], params, strict=True):
            xs = sorted({r[p] for r in vals if r.get(p) is not None}, key=quantity)
            lines: dict[tuple[str, str], dict[str, list[float]]] = {}
            for r in vals:
                lines.setdefault((r["flow"], r["mode"]), {}).setdefault(r[p], []).append(
                    r[metric] * scale)
            for (flow, mode), by in sorted(lines.items()):
                pts = [(i, _mean(by[x]), min(by[x]), max(by[x])) for i, x in enumerate(xs)
                       if x in by]
                ax.errorbar([q[0] for q in pts], [q[1] for q in pts],
                            yerr=[[q[1] - q[2] for q in pts], [q[3] - q[1] for q in pts]],
                            marker="o" if mode == "emulate" else "s", capsize=3,
                            ls="-" if mode == "emulate" else "--",
                            label=f"{flow or 'run'} ({mode}d)")
            ax.set_xticks(range(len(xs)), [str(x) for x in xs])
            ax.set_xlabel(p)
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle(f"{title}: {label} against each parameter")
        paths.append(_save(fig, os.path.join(outdir, f"{metric}.png")))
        if len(params) >= 2:
            paths.extend(_heatmaps(vals, params[0], params[1], metric, label, scale, outdir,
                                   title))
    return paths


def _heatmaps(vals, px, py, metric, label, scale, outdir, title) -> list[str]:
    plt = _plt()
    paths = []
    for mode in sorted({r["mode"] for r in vals}):
        for flow in sorted({r["flow"] for r in vals if r["mode"] == mode}):
            sel = [r for r in vals if r["mode"] == mode and r["flow"] == flow]
            xs = sorted({r[px] for r in sel}, key=quantity)
            ys = sorted({r[py] for r in sel}, key=quantity)
            grid = [[float("nan")] * len(xs) for _ in ys]
            for j, y in enumerate(ys):
                for i, x in enumerate(xs):
                    cell = [r[metric] * scale for r in sel if r[px] == x and r[py] == y]
                    if cell:
                        grid[j][i] = _mean(cell)
            fig, ax = plt.subplots(figsize=(1.4 * len(xs) + 3, 1.0 * len(ys) + 2))
            im = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis")
            for j in range(len(ys)):
                for i in range(len(xs)):
                    if not math.isnan(grid[j][i]):
                        ax.text(i, j, f"{grid[j][i]:.3g}", ha="center", va="center",
                                color="white", fontsize=8)
            ax.set_xticks(range(len(xs)), [str(x) for x in xs])
            ax.set_yticks(range(len(ys)), [str(y) for y in ys])
            ax.set_xlabel(px)
            ax.set_ylabel(py)
            fig.colorbar(im, ax=ax, label=label)
            ax.set_title(f"{title}: {flow or 'run'} {label} ({mode}d)", fontsize=9)
            safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in flow or "run")
            paths.append(_save(fig, os.path.join(outdir, f"{metric}-heatmap-{mode}-{safe}.png")))
    return paths


def _save(fig, path: str) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    _plt().close(fig)
    return path
