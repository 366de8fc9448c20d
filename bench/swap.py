"""Swap-in / swap-out time of chains and star LANs, beside a plain-veth floor.

For N in 10, 100, 1000 (``--sizes``) and two shapes (a chain of N nodes
joined by N-1 links; a star: N nodes on one LAN), it measures:

* wanlab: ``Lab.create`` (parse-free: the IR is built in code; includes
  planning, store, engine start, namespaces, TAPs, addresses, routes,
  hosts files) and ``Lab.swapout``;
* floor: the same namespaces joined by plain veth pairs (chain) or veths on
  one Linux bridge (star), with the same addresses, built with the same
  netlink library, and no shaping at all.

* Mininet (when ``mn`` is installed; stars only, up to ``--mininet-max``
  nodes): ``mn --topo single,N --switch lxbr --controller none --test build``,
  which builds N hosts on one Linux bridge without shaping and stops them;
  Mininet reports the total, so its column is build + stop.

With ``--startcmd CMD`` every wanlab node gets that start command, so swap-in also
builds every node's confinement (its holder: mount, UTS and PID namespaces, the private
mounts of docs/security.md) and starts one process in each node; without it, nodes get
their holder only at their first command.

With ``--image NAME[,none]`` the nodes have that image (``none``: the host's files), and
with ``--userns off,on`` every size runs without and with user namespaces
(``WANLAB_USERNS``), the variants of one size interleaved run by run (the machine is
shared: a slow minute hits both alike); a table of the ratios on/off follows.

Medians of ``--repeats`` runs (a third as many at 1000 nodes and more). Results
are printed and written to bench/results/swap-latest.md and a dated copy, with
the host's load average (the machine may be shared).

    python3 bench/swap.py [--sizes 10,100,1000] [--repeats 3] [--shapes chain,star]
                          [--no-floor] [--mininet-max 100] [--startcmd CMD]
                          [--image none,default] [--userns off,on]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import ipaddress
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from wanlab.backends.emulate import netns  # noqa: E402
from wanlab.lifecycle import Lab  # noqa: E402
from wanlab.model.ir import Experiment, Lan, LanMember, Link, LinkParams, Node, validate  # noqa: E402

SHAPED = LinkParams(bandwidth_bps=100_000_000, delay_s=0.001)


def chain(n: int, startcmd: str | None = None, image: str | None = None) -> Experiment:
    nodes = tuple(Node(f"n{i}", startcmd=startcmd, image=image) for i in range(n))
    links = tuple(Link(f"l{i}", f"n{i}", f"n{i + 1}", ab=SHAPED, ba=SHAPED)
                  for i in range(n - 1))
    return validate(Experiment(f"chain{n}", nodes=nodes, links=links))


def star(n: int, startcmd: str | None = None, image: str | None = None) -> Experiment:
    nodes = tuple(Node(f"h{i}", startcmd=startcmd, image=image) for i in range(n))
    half = LinkParams(bandwidth_bps=100_000_000, delay_s=0.0005)
    members = tuple(LanMember(f"h{i}", to_lan=half, from_lan=half) for i in range(n))
    return validate(Experiment(f"star{n}", nodes=nodes,
                               lans=(Lan("lan0", members, 100_000_000, 0.001),)))


# -- the floor: plain veths --------------------------------------------------

def floor_build(shape: str, n: int, tag: str) -> list[str]:
    names = [f"wlf{tag}-{i}" for i in range(n)]
    for name in names:
        netns.create(name)
    if shape == "chain":
        for i in range(n - 1):
            subnet = ipaddress.IPv4Network((int(ipaddress.IPv4Address("10.1.0.0")) + 256 * i,
                                            24))
            a, b = str(subnet.network_address + 1), str(subnet.network_address + 2)
            with contextlib.closing(netns.netlink(names[i])) as ipr:
                fd = os.open(netns.path(names[i + 1]), os.O_RDONLY)
                try:
                    ipr.link("add", ifname=f"r{i}", kind="veth",
                             peer={"ifname": f"l{i}", "net_ns_fd": fd})
                finally:
                    os.close(fd)
                idx = ipr.link_lookup(ifname=f"r{i}")[0]
                ipr.addr("add", index=idx, address=a, prefixlen=24)
                ipr.link("set", index=idx, state="up")
            with contextlib.closing(netns.netlink(names[i + 1])) as ipr:
                idx = ipr.link_lookup(ifname=f"l{i}")[0]
                ipr.addr("add", index=idx, address=b, prefixlen=24)
                ipr.link("set", index=idx, state="up")
    else:
        hub = f"wlf{tag}-hub"
        netns.create(hub)
        names.append(hub)
        subnet = ipaddress.IPv4Network("10.1.0.0/16")
        hosts = subnet.hosts()
        with contextlib.closing(netns.netlink(hub)) as hipr:
            hipr.link("add", ifname="br0", kind="bridge")
            br = hipr.link_lookup(ifname="br0")[0]
            hipr.link("set", index=br, state="up")
            for i in range(n):
                fd = os.open(netns.path(names[i]), os.O_RDONLY)
                try:
                    hipr.link("add", ifname=f"p{i}", kind="veth",
                              peer={"ifname": "eth0", "net_ns_fd": fd})
                finally:
                    os.close(fd)
                p = hipr.link_lookup(ifname=f"p{i}")[0]
                hipr.link("set", index=p, master=br, state="up")
                with contextlib.closing(netns.netlink(names[i])) as ipr:
                    idx = ipr.link_lookup(ifname="eth0")[0]
                    ipr.addr("add", index=idx, address=str(next(hosts)), prefixlen=16)
                    ipr.link("set", index=idx, state="up")
    return names


def floor_teardown(names: list[str]) -> None:
    for name in names:
        netns.delete(name)


def mininet_seconds(n: int) -> float | None:
    """Mininet's own 'completed in' time for building and stopping N hosts on a bridge."""
    if not shutil.which("mn"):
        return None
    p = subprocess.run(["mn", "--topo", f"single,{n}", "--switch", "lxbr", "--controller",
                        "none", "--test", "build"], capture_output=True, text=True,
                       timeout=600)
    m = re.search(r"completed in ([\d.]+) seconds", p.stdout + p.stderr)
    return float(m.group(1)) if m else None


# -- runs --------------------------------------------------------------------

def run(sizes: list[int], repeats: int, mininet_max: int, shapes: list[str],
        floor: bool, startcmd: str | None = None, images: tuple[str | None, ...] = (None,),
        userns: tuple[str, ...] = ("",)) -> list[dict]:
    results = []
    home = tempfile.mkdtemp(prefix="wanlab-bench-")
    lab = Lab(home)
    env = os.environ.get("WANLAB_USERNS")
    try:
        for n in sizes:
            for shape, make in (("chain", chain), ("star", star)):
                if shape not in shapes:
                    continue
                reps = repeats if n < 1000 else max(1, repeats // 3)
                variants = [(img, u) for img in images for u in userns]
                w_in: dict = {v: [] for v in variants}
                w_out: dict = {v: [] for v in variants}
                f_in, f_out = [], []
                for r in range(reps):
                    for img, u in variants:         # interleaved: the same minute for each
                        if u:
                            os.environ["WANLAB_USERNS"] = "1" if u == "on" else "0"
                        exp = make(n, startcmd, img)
                        t = time.monotonic()
                        lab.create(exp)
                        w_in[img, u].append(time.monotonic() - t)
                        t = time.monotonic()
                        lab.swapout(exp.name)
                        w_out[img, u].append(time.monotonic() - t)
                        lab.terminate(exp.name)
                    if not floor:
                        continue
                    t = time.monotonic()
                    names = floor_build(shape, n, f"{os.getpid() % 1000}{r}")
                    f_in.append(time.monotonic() - t)
                    t = time.monotonic()
                    floor_teardown(names)
                    f_out.append(time.monotonic() - t)
                for img, u in variants:
                    row = {"shape": shape, "nodes": n, "repeats": reps, "image": img,
                           "userns": u or None,
                           "wanlab_in_s": statistics.median(w_in[img, u]),
                           "wanlab_in_runs_s": [round(x, 3) for x in w_in[img, u]],
                           "wanlab_out_s": statistics.median(w_out[img, u]),
                           "veth_in_s": statistics.median(f_in) if f_in else None,
                           "veth_out_s": statistics.median(f_out) if f_out else None,
                           "load_avg": round(os.getloadavg()[0], 1)}
                    row["in_ratio"] = row["wanlab_in_s"] / row["veth_in_s"] if f_in else None
                    mn = [mininet_seconds(n) for _ in range(reps)] \
                        if shape == "star" and n <= mininet_max and img is None else []
                    mn = [x for x in mn if x is not None]
                    row["mininet_build_stop_s"] = statistics.median(mn) if mn else None
                    results.append(row)
                    print(f"{_label(shape, img, u):24} {n:5}: swap-in {row['wanlab_in_s']:.3f} s "
                          f"(runs {row['wanlab_in_runs_s']}; veth floor "
                          f"{_s(row['veth_in_s'])}), swap-out {row['wanlab_out_s']:.3f} s "
                          f"(floor {_s(row['veth_out_s'])}), load {row['load_avg']}",
                          flush=True)
    finally:
        if env is None:
            os.environ.pop("WANLAB_USERNS", None)
        else:
            os.environ["WANLAB_USERNS"] = env
        for r in lab.list():
            with contextlib.suppress(Exception):
                lab.terminate(r.name)
        lab.close()
    return results


def _label(shape: str, image: str | None, userns: str | None) -> str:
    return shape + (f", image {image}" if image else "") + \
        (f", userns {userns}" if userns else "")


def _s(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def write(results: list[dict], cmd: str, prefix: str = "swap") -> str:
    goal = {10: None, 100: 1.0, 1000: 10.0, 10000: 60.0}
    lines = [f"# Swap-in / swap-out time ({datetime.date.today()})", "",
             f"Command: `{cmd}`  ",
             "Machine: 2 cores, Debian 12, shared with other work (load average per row); "
             "medians of repeats. Links "
             "shaped 100 Mbit/s, 1 ms. Floor: the same namespaces joined by plain veth "
             "pairs (chain) or veths on a Linux bridge (star), same addressing, no shaping, "
             "no routes. Mininet: `mn --topo single,N --switch lxbr --controller none --test "
             "build` (build + stop, no shaping), stars only.", "",
             "| shape | nodes | wanlab swap-in s | runs s | veth floor s | ratio | goal | "
             "wanlab swap-out s | floor teardown s | wanlab in+out s | Mininet build+stop s "
             "| load avg |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        g = goal.get(r["nodes"])
        shape = _label(r["shape"], r.get("image"), r.get("userns"))
        verdict = "" if g is None else (f"≤ {g:g} s: " +
                                        ("PASS" if r["wanlab_in_s"] <= g else "MISS"))
        ratio = "–" if r["in_ratio"] is None else f"{r['in_ratio']:.2f}"
        lines.append(f"| {shape} | {r['nodes']} | {r['wanlab_in_s']:.3f} | "
                     f"{', '.join(f'{x:.2f}' for x in r['wanlab_in_runs_s'])} | "
                     f"{_s(r['veth_in_s'])} | {ratio} | {verdict} | "
                     f"{r['wanlab_out_s']:.3f} | {_s(r['veth_out_s'])} | "
                     f"{r['wanlab_in_s'] + r['wanlab_out_s']:.3f} | "
                     f"{_s(r.get('mininet_build_stop_s'))} | {r['load_avg']} |")
    pairs = {(r["shape"], r.get("image"), r["nodes"]): {} for r in results}
    for r in results:
        pairs[r["shape"], r.get("image"), r["nodes"]][r.get("userns")] = r
    ratios = [(k, v) for k, v in pairs.items() if "on" in v and "off" in v]
    if ratios:
        lines += ["", "User namespaces on against off (the same run, interleaved):", "",
                  "| shape | nodes | swap-in off s | swap-in on s | on/off | swap-out off s "
                  "| swap-out on s | on/off |", "|---|---|---|---|---|---|---|---|"]
        for (shape, image, n), v in ratios:
            off, on = v["off"], v["on"]
            lines.append(f"| {_label(shape, image, None)} | {n} | {off['wanlab_in_s']:.3f} | "
                         f"{on['wanlab_in_s']:.3f} | "
                         f"{on['wanlab_in_s'] / off['wanlab_in_s']:.2f} | "
                         f"{off['wanlab_out_s']:.3f} | {on['wanlab_out_s']:.3f} | "
                         f"{on['wanlab_out_s'] / off['wanlab_out_s']:.2f} |")
    text = "\n".join(lines) + "\n"
    out = os.path.join(ROOT, "bench", "results")
    os.makedirs(out, exist_ok=True)
    for name in (f"{prefix}-latest.md", f"{prefix}-{datetime.date.today():%Y%m%d}.md"):
        with open(os.path.join(out, name), "w") as f:
            f.write(text)
    with open(os.path.join(out, f"{prefix}-latest.json"), "w") as f:
        json.dump(results, f, indent=2)
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mininet-max", type=int, default=100,
                    help="largest star to build with Mininet too (0: never)")
    ap.add_argument("--shapes", default="chain,star", help="chain, star or both")
    ap.add_argument("--no-floor", dest="floor", action="store_false",
                    help="skip the plain-veth floor (slow at 10 000 nodes)")
    ap.add_argument("--results", default="swap", metavar="PREFIX",
                    help="bench/results/PREFIX-latest.{md,json} (default swap)")
    ap.add_argument("--startcmd", help="a start command for every node (so every node "
                    "is confined at swap-in), e.g. 'true'")
    ap.add_argument("--image", default="none", help="the nodes' image(s), comma-separated "
                    "('none': the host's files), e.g. none,default")
    ap.add_argument("--userns", default="", help="'off,on': each size without and with "
                    "user namespaces (WANLAB_USERNS), interleaved; default: as set")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    imgs = tuple(None if x == "none" else x for x in a.image.split(","))
    uns = tuple(x for x in a.userns.split(",") if x) or ("",)
    if any(u not in ("on", "off") for u in uns if u):
        ap.error("--userns takes off, on or off,on")
    results = run(sizes, a.repeats, a.mininet_max, a.shapes.split(","), a.floor, a.startcmd,
                  imgs, uns)
    print()
    print(write(results, "python3 bench/swap.py " + " ".join(sys.argv[1:]), a.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
