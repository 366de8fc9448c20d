"""Throughput-over-time plots of an experiment's flows, with its events marked."""

from __future__ import annotations

import os

from wanlab.errors import WanlabError


def plot_throughput(lab, name: str, output: str | None = None) -> str:
    """Write a PNG of every flow's received throughput against experiment time."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    flows = lab.flows(name)
    if not flows:
        raise WanlabError(f"experiment {name!r} has no flow results yet (start and stop a "
                          f"traffic agent first)")
    t0 = flows[-1]["t0"]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for f in (f for f in flows if f["t0"] == t0):
        pts = f["result"].get("throughput_bps", [])
        if pts:
            ax.plot([f["started_s"] + t for t, _ in pts], [b / 1e6 for _, b in pts],
                    label=f"{f['agent']} ({f['kind']})", drawstyle="steps-pre")
    for e in lab.event_log(name):
        if e["fired_s"] is not None and e["action"] not in ("start", "stop"):
            ax.axvline(e["fired_s"], color="grey", lw=0.6, ls=":")
            ax.annotate(f"{e['target']} {e['action']} {' '.join(e['args'])}".strip(),
                        (e["fired_s"], 1.0), xycoords=("data", "axes fraction"), fontsize=7,
                        rotation=90, va="top", ha="right", color="grey")
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
