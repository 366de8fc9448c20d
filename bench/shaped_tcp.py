"""TCP over shaped fast links: iperf3 (1 stream, 4 s) between two nodes over one link of
1, 5, 10, 20 and 100 Gbit/s (1 ms each way), and over the same link unshaped, against a
plain veth pair measured in the same run. Several engines (``--engine NAME=PATH``) are
interleaved in every repeat so the host's load drifts hit them alike; medians of
``--repeats``.

    python3 bench/shaped_tcp.py [--repeats 3] [--engine old=/path/to/wanlab-engine]

Results: bench/results/shaped-tcp-latest.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from measure import save_results  # noqa: E402

from wanlab.frontends.builder import ExperimentBuilder  # noqa: E402
from wanlab.lifecycle import Lab  # noqa: E402

RATES = ["1Gb", "5Gb", "10Gb", "20Gb", "100Gb", "unshaped"]


def iperf(lab: Lab, name: str) -> float:
    lab.exec(name, "b", ["iperf3", "-s", "-1", "-D", "-p", "5311"])
    time.sleep(0.3)
    out = lab.exec(name, "a", ["iperf3", "-c", "b", "-p", "5311", "-t", "4", "-J"],
                   capture_output=True, text=True).stdout
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e9


def one(home: str, engine: str, rate: str) -> float:
    os.environ["WANLAB_ENGINE"] = engine
    lab = Lab(home)
    b = ExperimentBuilder("tcp")
    b.node("a"), b.node("b")
    b.link("a", "b", **({} if rate == "unshaped" else {"bandwidth": rate}), delay="1ms")
    lab.create(b.build())
    try:
        return iperf(lab, "tcp")
    finally:
        lab.terminate("tcp")
        lab.close()


def veth() -> float:
    """The same iperf3 over a plain veth pair between two namespaces of this bench."""
    tag = f"wlst{os.getpid()}"
    na, nb = f"{tag}a", f"{tag}b"
    try:
        for ns in (na, nb):
            subprocess.run(["ip", "netns", "add", ns], check=True)
        subprocess.run(["ip", "link", "add", "v0", "netns", na, "type", "veth", "peer",
                        "v1", "netns", nb], check=True)
        for ns, dev, ip in ((na, "v0", "10.99.0.1/24"), (nb, "v1", "10.99.0.2/24")):
            subprocess.run(["ip", "-n", ns, "addr", "add", ip, "dev", dev], check=True)
            subprocess.run(["ip", "-n", ns, "link", "set", dev, "up"], check=True)
        srv = subprocess.Popen(["ip", "netns", "exec", nb, "iperf3", "-s", "-1", "-p", "5311"],
                               stdout=subprocess.DEVNULL)
        time.sleep(0.3)
        out = subprocess.run(["ip", "netns", "exec", na, "iperf3", "-c", "10.99.0.2", "-p",
                              "5311", "-t", "4", "-J"], capture_output=True, text=True).stdout
        srv.wait(timeout=10)
        return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e9
    finally:
        for ns in (na, nb):
            subprocess.run(["ip", "netns", "del", ns], check=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--engine", action="append", default=[])
    a = ap.parse_args()
    engines = [e.split("=", 1) for e in a.engine] or \
        [["this", os.path.join(ROOT, "target", "release", "wanlab-engine")]]
    home = tempfile.mkdtemp(prefix="wanlab-bench-shaped-")
    got: dict[str, dict[str, list[float]]] = {n: {r: [] for r in RATES} for n, _ in engines}
    base: list[float] = []
    load = [os.getloadavg()[0]]
    for _ in range(a.repeats):
        base.append(veth())
        for rate in RATES:
            for name, path in engines:
                got[name][rate].append(one(home, path, rate))
                print(name, rate, f"{got[name][rate][-1]:.2f}", file=sys.stderr, flush=True)
        load.append(os.getloadavg()[0])
    v = statistics.median(base)
    rows = []
    for rate in RATES:
        cells = [f"{statistics.median(got[n][rate]):.2f} "
                 f"({statistics.median(got[n][rate]) / v:.2f}x)" for n, _ in engines]
        rows.append(f"| {rate} | " + " | ".join(cells) + " |")
    md = (f"# TCP over shaped fast links\n\n`python3 bench/shaped_tcp.py --repeats {a.repeats}"
          + "".join(f" --engine {n}=..." for n, _ in (engines if a.engine else []))
          + f"`, medians; load {min(load):.1f}-{max(load):.1f} (2 cores)\n\n"
          f"iperf3, 1 stream, 4 s, a → b over one link (1 ms each way) of the given rate; "
          f"in parentheses the ratio to a plain veth pair in the same run ({v:.2f} Gbit/s, "
          f"median).\n\n| link | " + " | ".join(f"{n} Gbit/s" for n, _ in engines)
          + " |\n|---|" + "---|" * len(engines) + "\n" + "\n".join(rows) + "\n")
    save_results(os.path.join(ROOT, "bench", "results"), "shaped-tcp", md,
                 {"veth_gbps": base, "engines": got, "load": load})
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
