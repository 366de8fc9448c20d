"""ns-2 parse time against script size (the ns front end should stay linear).

For each size N (``--sizes``, default 1000,10000,50000) it writes two
generated Emulab-style scripts and times ``wanlab.frontends.ns.parse`` on
each (medians of ``--repeats`` runs, default 3):

* chain: ``set n(i) [$ns node]`` for N nodes, ``$ns duplex-link`` between
  neighbours, one ``tb-set-node-startcmd`` per node: about 3N commands;
* star: N leaf nodes on one ``make-lan`` with a router, each with an
  ``tb-set-ip-lan``.

The table (wall seconds; CPU seconds of the parse, tclsh child and Python
together, which other work on the host does not inflate; and CPU
microseconds per node, which is flat when parse time is linear) is printed
and written to bench/results/ns-parse-latest.md (``--no-save`` to print
only). Needs ``tclsh``; runs without root.

    python3 bench/ns_parse.py [--sizes 1000,10000,50000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from wanlab.frontends import ns  # noqa: E402


def chain_script(n: int) -> str:
    out = ["set ns [new Simulator]", "source tb_compat.tcl"]
    for i in range(n):
        out.append(f"set n({i}) [$ns node]")
        out.append(f'tb-set-node-startcmd $n({i}) "echo {i}"')
    for i in range(n - 1):
        out.append(f"set l({i}) [$ns duplex-link $n({i}) $n({i + 1}) 100Mb 1ms DropTail]")
    out += ["$ns rtproto Static", "$ns run", ""]
    return "\n".join(out)


def star_script(n: int) -> str:
    out = ["set ns [new Simulator]", "source tb_compat.tcl", "set router [$ns node]"]
    members = ["$router"]
    for i in range(n):
        out.append(f"set h{i} [$ns node]")
        members.append(f"$h{i}")
    out.append(f'set lan0 [$ns make-lan "{" ".join(members)}" 100Mb 1ms]')
    for i in range(n):
        out.append(f"tb-set-ip-lan $h{i} $lan0 10.{(i + 2) >> 16 & 255}."
                   f"{(i + 2) >> 8 & 255}.{(i + 2) & 255}")
    out += ["tb-set-netmask $lan0 255.0.0.0", "$ns run", ""]
    return "\n".join(out)


SHAPES = {"chain": chain_script, "star": star_script}


def _cpu() -> float:
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return c.ru_utime + c.ru_stime + time.process_time()


def time_parse(path: str, nodes: int, timeout: float) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one parse."""
    t0, c0 = time.perf_counter(), _cpu()
    exp = ns.parse(path, timeout=timeout)
    dt, cpu = time.perf_counter() - t0, _cpu() - c0
    if len(exp.nodes) < nodes:
        raise SystemExit(f"{path}: parsed {len(exp.nodes)} nodes, expected {nodes}")
    return dt, cpu


def git_rev() -> str:
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,50000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--shapes", default="chain,star")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="wanlab-nsbench-") as tmp:
        for shape in args.shapes.split(","):
            for n in sizes:
                path = os.path.join(tmp, f"{shape}{n}.tcl")
                with open(path, "w") as f:
                    f.write(SHAPES[shape](n))
                lines = SHAPES[shape](n).count("\n")
                runs = [time_parse(path, n, args.timeout) for _ in range(args.repeats)]
                wall = statistics.median(w for w, _ in runs)
                cpu = statistics.median(c for _, c in runs)
                rows.append((shape, n, lines, wall, cpu))
                print(f"{shape:5} {n:6} nodes {lines:7} lines  median {wall:7.2f} s wall "
                      f"{cpu:7.2f} s CPU ({cpu / n * 1e6:6.0f} us CPU/node)", flush=True)
    head = ("| shape | nodes | lines | wall s (median) | CPU s (median) | CPU us per node |\n"
            "|---|---:|---:|---:|---:|---:|\n")
    table = head + "".join(f"| {s} | {n} | {ln} | {w:.2f} | {c:.2f} | {c / n * 1e6:.0f} |\n"
                           for s, n, ln, w, c in rows)
    print()
    print(table)
    if not args.no_save:
        out = os.path.join(ROOT, "bench", "results", "ns-parse-latest.md")
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        tcl = subprocess.run([ns.tclsh_path()], input="puts [info patchlevel]",
                             capture_output=True, text=True, check=False).stdout.strip()
        with open(out, "w") as f:
            f.write(f"# ns-2 parse time\n\n`python3 bench/ns_parse.py --sizes {args.sizes} "
                    f"--repeats {args.repeats}` at {stamp}, commit {git_rev()}, Tcl {tcl} "
                    f"(2 cores shared with other work; medians of {args.repeats}).\n\n{table}")
        print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
