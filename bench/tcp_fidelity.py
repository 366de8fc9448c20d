#!/usr/bin/env python3
"""TCP fidelity: one spec emulated (Linux TCP in namespaces) and simulated (the engine's TCP).

Every cell is a dumbbell in an ns-2 script: FLOWS bulk transfers (``Agent/TCP/Linux`` with
``select_ca reno`` or ``cubic``) from one node through a router and a bottleneck of
BW Mbit/s, DELAY ms one way, a DropTail queue of QUEUE x the BDP (1500-byte packets, RTT
= 2 x (DELAY + 1 ms)) and LOSS random loss towards the sink. ``wanlab compare`` runs it
simulated, then emulated; the row gives the total goodput of both and their ratio, the
retransmissions, the mean smoothed RTT and Jain's fairness index over the flows.

Goals per cell: goodput within 5 %, retransmissions within 1.5x (+5) either way, fairness
within 0.05. Cells that miss are listed with the numbers that missed.

    python3 bench/tcp_fidelity.py            # the whole grid (360 cells: hours)
    python3 bench/tcp_fidelity.py --quick    # 7 cells, a few minutes
    python3 bench/tcp_fidelity.py --cell deep-2mbit --cell compare-test
    python3 bench/tcp_fidelity.py --quick --against bench/results/tcp-fidelity-latest-quick.json

``--sink TCPSink/DelAck`` gives the grid cells ns-2's DelAck sink, which the simulation runs as
Linux's receiver (delayed ACKs, receive window and autotuning); the plain ``TCPSink`` ACKs
every segment in simulation. ``--against RESULT.json`` runs only the simulated half (virtual
time: the same numbers on any machine) and judges it against the emulated numbers an earlier
run measured for the same cells, so a change to the simulated TCP is measured without the noise
of a new emulated run.

Grid: bandwidth {1, 2, 10, 50, 200} Mbit/s x delay {5, 20, 80} ms x queue {0.5, 1, 4} BDP
x flows {1, 4} x loss {0, 1 %} x {reno, cubic}. Named cells: ``deep-2mbit`` (one NewReno
flow, 2 Mbit/s, 20 ms, ns-2's 50-packet queue) and ``compare-test`` (the spec of
tests/test_mixed.py's compare test: CBR and TCP through 5 Mbit/s). Writes
bench/results/tcp-fidelity-<stamp>[-quick][-delack][-simulated].{md,json} and
tcp-fidelity-latest[...].*.
The emulated half runs in real time: on a loaded machine its numbers move (the report
says the load average at the start).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import shutil
import sys
import tempfile
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from wanlab.frontends import load  # noqa: E402
from wanlab.lifecycle import Lab  # noqa: E402

RESULTS = os.path.join(ROOT, "bench", "results")
BWS = (1, 2, 10, 50, 200)
DELAYS = (5, 20, 80)
QUEUES = (0.5, 1, 4)
FLOWS = (1, 4)
LOSSES = (0.0, 0.01)
CCS = ("reno", "cubic")
GOODPUT_TOL = 0.05
RETX_FACTOR, RETX_SLACK = 1.5, 5
FAIRNESS_TOL = 0.05
QUICK = [  # (bw, delay, queue BDP, flows, loss, cc)
    (10, 20, 1, 1, 0.0, "cubic"),
    (10, 20, 1, 4, 0.0, "reno"),
    (2, 80, 4, 1, 0.0, "cubic"),
    (50, 5, 0.5, 1, 0.01, "reno"),
    (1, 5, 1, 4, 0.01, "cubic"),
]

DEEP_2MBIT = """set ns [new Simulator]
source tb_compat.tcl
set s [$ns node]
set r [$ns node]
set d [$ns node]
$ns duplex-link $s $r 100Mb 1ms DropTail
set bott [$ns duplex-link $r $d 2Mb 20ms DropTail]
$ns queue-limit $r $d 50
set tcp [new Agent/TCP/Newreno]
$ns attach-agent $s $tcp
set sink [new Agent/TCPSink]
$ns attach-agent $d $sink
$ns connect $tcp $sink
set ftp [new Application/FTP]
$ftp attach-agent $tcp
$ns at 0.5 "$ftp start"
$ns at {stop} "$ftp stop"
$ns run
"""

COMPARE_TEST = """set ns [new Simulator]
source tb_compat.tcl
set s [$ns node]
set r [$ns node]
set d [$ns node]
$ns duplex-link $s $r 100Mb 1ms DropTail
set bott [$ns duplex-link $r $d 5Mb 10ms DropTail]
$ns queue-limit $r $d 100
set udp [new Agent/UDP]
$ns attach-agent $s $udp
set null [new Agent/Null]
$ns attach-agent $d $null
$ns connect $udp $null
set cbr [new Application/Traffic/CBR]
$cbr set packetSize_ 1000
$cbr set rate_ 2Mb
$cbr attach-agent $udp
set tcp [new Agent/TCP/Newreno]
$tcp set packetSize_ 1000
$tcp set window_ 20
$ns attach-agent $s $tcp
set sink [new Agent/TCPSink]
$ns attach-agent $d $sink
$ns connect $tcp $sink
set ftp [new Application/FTP]
$ftp attach-agent $tcp
$ns at 0.2 "$cbr start"
$ns at 0.2 "$ftp start"
$ns at 2.7 "$cbr stop"
$ns at 2.7 "$ftp stop"
$ns run
"""


def cell_name(c: tuple) -> str:
    bw, delay, q, n, loss, cc = c
    return f"{bw}M-{delay}ms-q{q:g}-f{n}-l{loss:g}-{cc}"


def bdp_packets(bw: float, delay: float) -> float:
    return bw * 1e6 * 2 * (delay + 1) / 1000 / (8 * 1500)


def grid_spec(c: tuple, duration: float, sink: str = "TCPSink") -> str:
    """The ns-2 script of a grid cell (``sink``: ``TCPSink`` or ``TCPSink/DelAck``)."""
    bw, delay, q, n, loss, cc = c
    access = max(100, 5 * bw)
    queue = max(2, round(q * bdp_packets(bw, delay)))
    lines = ["set ns [new Simulator]", "source tb_compat.tcl", "set s [$ns node]",
             "set r [$ns node]", "set d [$ns node]",
             f"$ns duplex-link $s $r {access}Mb 1ms DropTail",
             f"set bott [$ns duplex-link $r $d {bw}Mb {delay}ms DropTail]",
             f"$ns queue-limit $r $d {queue}"]
    if loss:
        lines.append(f"tb-set-link-loss $bott $r {loss}")
    for i in range(n):
        lines += [f"set tcp{i} [new Agent/TCP/Linux]", f"$tcp{i} select_ca {cc}",
                  f"$ns attach-agent $s $tcp{i}", f"set sink{i} [new Agent/{sink}]",
                  f"$ns attach-agent $d $sink{i}", f"$ns connect $tcp{i} $sink{i}",
                  f"set ftp{i} [new Application/FTP]", f"$ftp{i} attach-agent $tcp{i}",
                  f'$ns at 0.5 "$ftp{i} start"', f'$ns at {0.5 + duration} "$ftp{i} stop"']
    lines.append("$ns run")
    return "\n".join(lines) + "\n"


def jain(xs: list[float]) -> float | None:
    if not xs or not any(xs):
        return None
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def side(rows: list[dict], which: str) -> dict[str, Any]:
    """Totals over a run's TCP flows."""
    tcp = [r[which] for r in rows if r["kind"] == "ftp" and r.get(which)]
    mbps = [f.get("mbps") or 0.0 for f in tcp]
    rtts = [f["rtt_ms"] for f in tcp if f.get("rtt_ms")]
    return {"mbps": round(sum(mbps), 4), "flows_mbps": mbps,
            "retransmits": sum(f.get("retransmits") or 0 for f in tcp),
            "rtt_ms": round(sum(rtts) / len(rtts), 2) if rtts else None,
            "jain": round(jain(mbps), 4) if len(mbps) > 1 and jain(mbps) else None}


def capacity_mbps(cell: str) -> float | None:
    """The bottleneck's payload capacity of a cell (1448 of every 1514 bytes on the wire),
    None for compare-test (a CBR shares it)."""
    if cell == "deep-2mbit":
        return 2 * 1448 / 1514
    if cell[0].isdigit():
        return float(cell.split("M-")[0]) * 1448 / 1514
    return None


def judge(emu: dict, sim: dict, cap: float | None = None) -> tuple[float | None, list[str]]:
    """The goodput ratio and the goals missed (each with its numbers; a goodput miss says
    what share of the bottleneck's capacity each side carried)."""
    misses = []
    ratio = sim["mbps"] / emu["mbps"] if emu["mbps"] else None
    if ratio is None or abs(ratio - 1) > GOODPUT_TOL:
        m = f"goodput sim/emu {ratio:.3f}" if ratio else "no emulated goodput"
        if cap:
            m += (f" (of the bottleneck: emulated {emu['mbps'] / cap:.0%}, simulated "
                  f"{sim['mbps'] / cap:.0%})")
        misses.append(m)
    re_, rs = emu["retransmits"], sim["retransmits"]
    if rs > RETX_FACTOR * re_ + RETX_SLACK or re_ > RETX_FACTOR * rs + RETX_SLACK:
        misses.append(f"retransmissions emu {re_} sim {rs}")
    if emu["jain"] is not None and sim["jain"] is not None \
            and abs(emu["jain"] - sim["jain"]) > FAIRNESS_TOL:
        misses.append(f"fairness emu {emu['jain']} sim {sim['jain']}")
    return ratio, misses


def run_cell(lab: Lab, name: str, text: str, tmp: str,
             emulated: dict[str, Any] | None = None) -> dict[str, Any]:
    """Both halves, or only the simulated one judged against ``emulated`` (an earlier
    run's numbers)."""
    from wanlab.report import compare
    path = os.path.join(tmp, f"{name.replace('.', '_')}.tcl")
    with open(path, "w") as f:
        f.write(text)
    exp = load(path)
    out = os.path.join(tmp, "out-" + name)
    if emulated is not None:
        s = lab.simulate(exp.with_name("tcpfid"), out)
        r = {"flows": compare.table({}, s), "simulation_speed": s["engine"]}
        emu, sim = emulated, side(r["flows"], "simulated")
    else:
        r = lab.compare(exp.with_name("tcpfid"), out=out, source_path=path)
        emu, sim = side(r["flows"], "emulated"), side(r["flows"], "simulated")
    ratio, misses = judge(emu, sim, capacity_mbps(name))
    shutil.rmtree(out, ignore_errors=True)
    return {"cell": name, "emulated": emu, "simulated": sim,
            "ratio": round(ratio, 4) if ratio else None, "misses": misses,
            "sim_wall_s": r["simulation_speed"].get("wall_s")}


def markdown(res: dict[str, Any]) -> str:
    m = res["meta"]
    lines = [f"# TCP fidelity, emulated vs simulated ({m['date']})", "",
             f"`python3 bench/tcp_fidelity.py {' '.join(m['argv'])}`; {m['duration_s']} s per "
             f"flow; load average at the start {m['loadavg']} on {m['cpus']} CPUs"
             + (" (a loaded machine: the emulated half runs in real time)"
                if m["loadavg"][0] > 0.5 * m["cpus"] else "") + "."
             + (f" Simulated only; emulated numbers from {m['against']}." if m.get("against")
                else ""), "",
             "Goals: goodput within 5 %, retransmissions within 1.5x (+5), Jain's fairness "
             "within 0.05.", "",
             "| cell | emu Mbit/s | sim Mbit/s | sim/emu | retx emu/sim | RTT ms emu/sim | "
             "Jain emu/sim | result |", "|---|---|---|---|---|---|---|---|"]
    for c in res["cells"]:
        if "error" in c:
            lines.append(f"| {c['cell']} | | | | | | | ERROR {c['error']} |")
            continue
        e, s = c["emulated"], c["simulated"]
        lines.append(f"| {c['cell']} | {e['mbps']} | {s['mbps']} | {c['ratio']} | "
                     f"{e['retransmits']} / {s['retransmits']} | {e['rtt_ms']} / {s['rtt_ms']} | "
                     f"{e['jain'] or '-'} / {s['jain'] or '-'} | "
                     f"{'PASS' if not c['misses'] else 'MISS: ' + '; '.join(c['misses'])} |")
    passed = sum(1 for c in res["cells"] if not c.get("misses") and "error" not in c)
    lines += ["", f"{passed} of {len(res['cells'])} cells meet every goal."]
    if res.get("notes"):
        lines += [""] + [f"* {n}" for n in res["notes"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the named cells and 5 grid cells")
    ap.add_argument("--cell", action="append", default=[],
                    help="run only this cell (a grid cell's name or deep-2mbit, compare-test)")
    ap.add_argument("--duration", type=float, default=None,
                    help="seconds per flow (default 20, --quick 10)")
    ap.add_argument("--sink", choices=("TCPSink", "TCPSink/DelAck"), default="TCPSink",
                    help="the grid cells' sink: ns-2's (an ACK per segment in simulation) or "
                         "DelAck (Linux's receiver in simulation); Linux's in emulation either way")
    ap.add_argument("--against", metavar="RESULT.json",
                    help="simulate only; judge against this earlier run's emulated numbers")
    a = ap.parse_args()
    measured: dict[str, Any] = {}
    if a.against:
        with open(a.against) as f:
            measured = {c["cell"]: c["emulated"] for c in json.load(f)["cells"]
                        if "emulated" in c}
    if os.geteuid() != 0:
        print("tcp_fidelity: needs root (the emulated half builds namespaces)", file=sys.stderr)
        return 1
    dur = a.duration or (10.0 if a.quick else 20.0)
    grid = QUICK if a.quick else list(itertools.product(BWS, DELAYS, QUEUES, FLOWS, LOSSES,
                                                         CCS))
    cells = [("deep-2mbit", DEEP_2MBIT.replace("{stop}", f"{0.5 + dur:g}")),
             ("compare-test", COMPARE_TEST)]
    cells += [(cell_name(c), grid_spec(c, dur, a.sink)) for c in grid]
    if a.cell:
        every = dict(cells + [(cell_name(c), grid_spec(c, dur, a.sink)) for c in itertools.product(
            BWS, DELAYS, QUEUES, FLOWS, LOSSES, CCS)])
        unknown = [c for c in a.cell if c not in every]
        if unknown:
            print(f"tcp_fidelity: unknown cell {unknown[0]!r}", file=sys.stderr)
            return 1
        cells = [(c, every[c]) for c in a.cell]
    res: dict[str, Any] = {"meta": {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "argv": sys.argv[1:], "duration_s": dur, "loadavg": list(os.getloadavg()),
        "cpus": os.cpu_count(), "against": a.against, "sink": a.sink}, "cells": []}
    lab = Lab(progress=False)
    tmp = tempfile.mkdtemp(prefix="tcp-fidelity-")
    try:
        for name, text in cells:
            if a.against and name not in measured:
                continue
            print(f"tcp_fidelity: {name}", file=sys.stderr, flush=True)
            try:
                row = run_cell(lab, name, text, tmp, measured.get(name))
            except Exception as e:  # one failed cell must not lose the others
                row = {"cell": name, "error": f"{type(e).__name__}: {e}"}
            res["cells"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(RESULTS, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M")
    suffix = ("-quick" if a.quick else "") + ("-delack" if a.sink != "TCPSink" else "") \
        + ("-simulated" if a.against else "")
    text = markdown(res)
    for base in (f"tcp-fidelity-{stamp}{suffix}", f"tcp-fidelity-latest{suffix}"):
        with open(os.path.join(RESULTS, base + ".json"), "w") as f:
            json.dump(res, f, indent=1)
        with open(os.path.join(RESULTS, base + ".md"), "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
