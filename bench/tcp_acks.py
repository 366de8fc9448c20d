#!/usr/bin/env python3
"""The simulated sink's ACK policy: ns-2's ACK per segment against Linux's delayed ACKs.

Every cell of bench/tcp_fidelity.py's grid (single flow, no random loss unless asked) is
simulated in virtual time twice, its sinks set to ``acks: "each"`` and to ``acks:
"linux"`` in the same engine scenario; the table gives goodput, retransmissions and ACKs
sent of both, and marks the cells where the two differ beyond tcp_fidelity's goals
(goodput 5 %, retransmissions 1.5x + 5). No emulation: the same numbers on any machine.

    python3 bench/tcp_acks.py                  # 1 flow, no loss: 90 cells, a few minutes
    python3 bench/tcp_acks.py --flows 1,4 --loss 0,0.01

Writes bench/results/tcp-acks-<stamp>.md and tcp-acks-latest.md.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

import tcp_fidelity as fid  # noqa: E402

from wanlab.engine.binary import engine_binary  # noqa: E402
from wanlab.engine.encode import host_tcp_rmem  # noqa: E402
from wanlab.frontends import load  # noqa: E402
from wanlab.lifecycle import Lab  # noqa: E402

DURATION = 10.0


def run(engine: str, scenario: dict, acks: str, d: str) -> list:
    """Goodput (Mbit/s), retransmissions and ACKs of the scenario with every sink's
    ``acks`` set (Linux's with this host's tcp_rmem, as a DelAck sink's scenario has)."""
    rmem = host_tcp_rmem()
    for req in scenario["requests"]:
        for a in req.get("agents") or []:
            if a.get("kind") == "tcp_sink":
                a.pop("delack_us", None)
                a.pop("rmem", None)
                a["acks"] = acks
                if acks == "linux" and rmem is not None:
                    a["rmem"] = list(rmem)
    sc, out = os.path.join(d, f"{acks}.json"), os.path.join(d, f"{acks}-result.json")
    with open(sc, "w") as f:
        json.dump(scenario, f)
    subprocess.run([engine, "simulate", sc, "--out", out], check=True, capture_output=True)
    with open(out) as f:
        agents = json.load(f)["stats"]["agents"].values()
    sinks = [a for a in agents if a["kind"] == "tcp_sink"]
    return [round(sum(a["bytes"] for a in sinks) * 8 / DURATION / 1e6, 3),
            sum(a["retransmits"] for a in agents if a["kind"] == "tcp"),
            sum(a["acks"] for a in sinks)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flows", default="1", help="flows per cell, comma-separated")
    ap.add_argument("--loss", default="0", help="random loss rates, comma-separated")
    a = ap.parse_args()
    flows = [int(x) for x in a.flows.split(",")]
    losses = [float(x) for x in a.loss.split(",")]
    lab, engine = Lab(progress=False), engine_binary()
    rows = []
    with tempfile.TemporaryDirectory(prefix="tcp-acks-") as tmp:
        for c in itertools.product(fid.BWS, fid.DELAYS, fid.QUEUES, flows, losses, fid.CCS):
            name = fid.cell_name(c)
            d = os.path.join(tmp, name)
            os.makedirs(d)
            spec = os.path.join(d, "cell.tcl")
            with open(spec, "w") as f:
                f.write(fid.grid_spec(c, DURATION))
            lab.simulate(load(spec).with_name("tcpacks"), os.path.join(d, "out"))
            with open(os.path.join(d, "out", "scenario.json")) as f:
                scenario = json.load(f)
            each, linux = run(engine, scenario, "each", d), run(engine, scenario, "linux", d)
            (ge, re_, _), (gl, rl, _) = each, linux
            differs = abs(gl / ge - 1) > fid.GOODPUT_TOL if ge else bool(gl)
            differs |= rl > fid.RETX_FACTOR * re_ + fid.RETX_SLACK or \
                re_ > fid.RETX_FACTOR * rl + fid.RETX_SLACK
            rows.append((name, each, linux, differs))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    stamp = datetime.datetime.now(datetime.timezone.utc)
    lines = [f"# Simulated sink: ACK per segment vs Linux's delayed ACKs "
             f"({stamp:%Y-%m-%d %H:%M} UTC)", "",
             f"`python3 bench/tcp_acks.py {' '.join(sys.argv[1:])}`; {DURATION:g} s per flow, "
             "virtual time (deterministic).", "",
             "| cell | each: Mbit/s | retx | ACKs | linux: Mbit/s | retx | ACKs | |",
             "|---|---|---|---|---|---|---|---|"]
    for name, e, li, differs in rows:
        lines.append(f"| {name} | {e[0]} | {e[1]} | {e[2]} | {li[0]} | {li[1]} | {li[2]} | "
                     f"{'differs' if differs else ''} |")
    n = sum(1 for r in rows if r[3])
    lines += ["", f"{n} of {len(rows)} cells differ beyond the fidelity goals."]
    text = "\n".join(lines) + "\n"
    os.makedirs(fid.RESULTS, exist_ok=True)
    for base in (f"tcp-acks-{stamp:%Y%m%d-%H%M}", "tcp-acks-latest"):
        with open(os.path.join(fid.RESULTS, base + ".md"), "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
