"""Emulation against simulation for the examples of docs/simulation.md.

Runs ``wanlab compare`` on Netbed's NewReno one-drop test and PrimoGENI's dumbbell and
fairness experiments, and copies each table (markdown) and plot to bench/results/:
``<name>-compare.md``, ``<name>-throughput.png``, ``<name>-cwnd.png``.

    python3 examples/compare_all.py [onedrop dumbbell fairness]

Takes about 3 minutes of real time (the emulations run in real time).
"""

from __future__ import annotations

import datetime
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from wanlab.frontends import load  # noqa: E402
from wanlab.lifecycle import Lab  # noqa: E402

SPECS = {"onedrop": "examples/onedrop/onedrop.tcl",
         "dumbbell": "examples/dumbbell/dumbbell.tcl",
         "fairness": "examples/dumbbell/fairness.tcl"}


def table(name: str, spec: str, r: dict) -> str:
    lines = [f"# {name}: emulated vs simulated ({datetime.date.today()})", "",
             f"`wanlab compare {spec}` (emulated: Linux TCP in namespaces through the engine; "
             f"simulated: the engine's TCP in virtual time, {r['simulation_speed']['wall_s']} s "
             f"of wall time, {r['simulation_speed']['speedup']}× real time)", "",
             "| flow | emulated Mbit/s | simulated Mbit/s | sim/emu | retransmits emu/sim | "
             "mean RTT ms emu/sim |", "|---|---|---|---|---|---|"]
    for row in r["flows"]:
        e, s = row["emulated"], row["simulated"]
        lines.append(f"| {row['flow']} | {e.get('mbps')} | {s.get('mbps')} | "
                     f"{row.get('throughput_ratio', '-')} | {e.get('retransmits')} / "
                     f"{s.get('retransmits')} | {e.get('rtt_ms')} / {s.get('rtt_ms')} |")
    lines += ["", "| link | emulated delivered ab/ba | simulated delivered ab/ba | "
              "emulated drops ab | simulated drops ab |", "|---|---|---|---|---|"]
    for link, l in r["links"].items():
        e, s = l.get("emulated"), l.get("simulated")
        if not e or not s:
            continue
        lines.append(f"| {link} | {e['ab']['out_pkts']}/{e['ba']['out_pkts']} | "
                     f"{s['ab']['out_pkts']}/{s['ba']['out_pkts']} | "
                     f"{e['ab']['drop_queue'] + e['ab']['drop_loss']} | "
                     f"{s['ab']['drop_queue'] + s['ab']['drop_loss']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    names = sys.argv[1:] or list(SPECS)
    lab = Lab(progress=True)
    out_dir = os.path.join(ROOT, "bench", "results")
    os.makedirs(out_dir, exist_ok=True)
    for name in names:
        spec = SPECS[name]
        r = lab.compare(load(os.path.join(ROOT, spec)), source_path=os.path.join(ROOT, spec))
        text = table(name, spec, r)
        print(text)
        with open(os.path.join(out_dir, f"{name}-compare.md"), "w") as f:
            f.write(text)
        for p in r["plots"]:
            plot_name = os.path.basename(p).replace("compare-", "")
            shutil.copy(p, os.path.join(out_dir, f"{name}-{plot_name}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
