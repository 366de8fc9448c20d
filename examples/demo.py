"""The demo behind `make demo`: Netbed's Figure 2 linear topology, end to end.

source --10Mb 0ms RED-- router --1.5Mb 20ms DropTail-- dest

Swaps the experiment in from examples/figure2.tcl, pings source → dest
(expect ≈ 40 ms plus serialization), runs iperf3 through the 1.5 Mbit/s
bottleneck (expect a TCP goodput just under 1.5 Mbit/s), changes the
bottleneck's delay at run time, prints what it measured against what was
configured, and terminates the experiment, leaving nothing behind.
"""

import json
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from wanlab.api import Experiment  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def ping(exp, src, dst, count=10):
    out = exp.exec(src, ["ping", "-n", "-c", str(count), "-i", "0.2", dst]).stdout
    return [float(x) for x in re.findall(r"time=([\d.]+) ms", out)]


def main() -> int:
    t0 = time.monotonic()
    with Experiment.from_file(os.path.join(HERE, "figure2.tcl"), name="demo-figure2",
                              progress=True) as exp:
        print(f"swapped in {len(exp.ir.nodes)} nodes in {time.monotonic() - t0:.2f} s")
        for node, info in exp.show()["nodes"].items():
            addrs = ", ".join(f"{i['ifname']} {i['ip']}" for i in info["interfaces"])
            print(f"  {node:7} {addrs}")

        rtts = ping(exp, "source", "dest")
        print(f"\nping source -> dest: median RTT {statistics.median(rtts):.2f} ms "
              f"(configured: 2 x 20 ms propagation + serialization of 98-byte frames "
              f"at 10 and 1.5 Mbit/s = {40 + 2 * 98 * 8 / 1.5e3 + 2 * 98 * 8 / 10e3:.2f} ms)")

        server = exp.popen("dest", ["iperf3", "-s", "-1"], stdout=open(os.devnull, "w"))
        time.sleep(0.5)
        res = exp.exec("source", ["iperf3", "-c", "dest", "-t", "5", "-J"])
        server.wait(timeout=10)
        bps = json.loads(res.stdout)["end"]["sum_received"]["bits_per_second"]
        print(f"iperf3 source -> dest: {bps / 1e6:.3f} Mbit/s of TCP goodput through the "
              f"1.5 Mbit/s bottleneck ({bps / 1.5e6 * 100:.1f} % of the link rate; TCP/IP "
              f"and Ethernet headers take ~4.5 %)")

        exp.set_link("link1", delay="50ms")
        rtts2 = ping(exp, "source", "dest", count=5)
        print(f"after 'link1 delay 50ms' at run time: median RTT "
              f"{statistics.median(rtts2):.2f} ms (expected ≈ 100 ms + serialization)")

        st = exp.stats()["links"]
        for name, link in st.items():
            print(f"  {name}: ab {link['ab']['out_pkts']} frames, {link['ab']['drop_queue']} "
                  f"queue drops; ba {link['ba']['out_pkts']} frames")
    print(f"\nterminated; whole demo took {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
