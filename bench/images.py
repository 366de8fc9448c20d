"""Node images: swap-in with an image against the host-file-system mode, first build time,
disk used per node.

For N in 100 and 1000 (``--sizes``), a chain of N nodes joined by N-1 shaped links, each
node with a start command (so every node is confined at swap-in: its holder is built,
one process started in it), swapped in twice:

* host: the nodes run on the host's file system (today's mode, docs/security.md);
* image: every node names the image (``--image``, default ``wanlab-bench``: iproute2 and
  ping): an overlay root over the shared image, its own writable layer, the holder
  switching into it.

It reports ``Lab.create`` seconds for both and their ratio (the goal: image within 1.5x
of host), the disk used by one node's writable layer after its start command, and the
image's own size (shared by every node). ``--build`` also times a first build of the
image in an empty image folder (mmdebstrap; the network and mirror matter), else the
build time recorded when the cached image was built is shown.

Results go to bench/results/images-latest.{md,json} with the host's load (the machine
may be shared).

    python3 bench/images.py [--sizes 100,1000] [--repeats 1] [--build]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from wanlab.backends.emulate import images, rootfs  # noqa: E402
from wanlab.lifecycle import Lab  # noqa: E402
from wanlab.model.ir import Experiment, Link, LinkParams, Node, validate  # noqa: E402

SHAPED = LinkParams(bandwidth_bps=100_000_000, delay_s=0.001)
PACKAGES = ("iproute2", "iputils-ping")
STARTCMD = "echo up > /tmp/up"


def chain(n: int, image: str | None) -> Experiment:
    nodes = tuple(Node(f"n{i}", image=image, startcmd=STARTCMD) for i in range(n))
    links = tuple(Link(f"l{i}", f"n{i}", f"n{i + 1}", ab=SHAPED, ba=SHAPED)
                  for i in range(n - 1))
    return validate(Experiment(f"img{n}{'i' if image else 'h'}", nodes=nodes, links=links))


def wait_startcmds(lab: Lab, name: str, n: int, timeout: float = 600) -> None:
    folder = lab.store.folder(name, "nodes")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(os.path.exists(os.path.join(folder, f"n{i}", "startcmd.exit")) for i in range(n)):
            return
        time.sleep(0.5)
    raise RuntimeError(f"{name}: start commands did not all finish")


def one(lab: Lab, n: int, image: str | None) -> dict:
    exp = chain(n, image)
    t0 = time.monotonic()
    lab.create(exp)
    took = time.monotonic() - t0
    per_node = None
    try:
        if image:
            wait_startcmds(lab, exp.name, n)
            layers = [images.disk_usage(os.path.join(rootfs.layer_path(
                lab.store.folder(exp.name), f"n{i}"), "upper")) for i in range(min(n, 20))]
            per_node = statistics.median(layers)
    finally:
        t1 = time.monotonic()
        lab.terminate(exp.name)
        down = time.monotonic() - t1
    return {"create_s": took, "terminate_s": down, "layer_bytes": per_node}


def run(sizes: list[int], repeats: int, image: str) -> list[dict]:
    rows = []
    home = tempfile.mkdtemp(prefix="wanlab-bench-images-")
    lab = Lab(home)
    try:
        for n in sizes:
            reps = max(1, repeats if n < 1000 else (repeats + 2) // 3)
            host = [one(lab, n, None) for _ in range(reps)]
            img = [one(lab, n, image) for _ in range(reps)]
            row = {"nodes": n, "repeats": reps,
                   "host_s": statistics.median(r["create_s"] for r in host),
                   "image_s": statistics.median(r["create_s"] for r in img),
                   "host_down_s": statistics.median(r["terminate_s"] for r in host),
                   "image_down_s": statistics.median(r["terminate_s"] for r in img),
                   "layer_bytes": statistics.median(r["layer_bytes"] for r in img)}
            row["ratio"] = row["image_s"] / row["host_s"]
            print(f"{n} nodes: host {row['host_s']:.2f} s, image {row['image_s']:.2f} s "
                  f"({row['ratio']:.2f}x); layer {row['layer_bytes'] / 1024:.0f} KB/node",
                  flush=True)
            rows.append(row)
    finally:
        lab.close()
        shutil.rmtree(home, ignore_errors=True)
    return rows


def write(rows: list[dict], build: dict, cmd: str) -> str:
    load = os.getloadavg()
    lines = [f"# Node images: swap-in with an image vs the host's file system "
             f"({datetime.datetime.now():%Y-%m-%d %H:%M})", "",
             f"`{cmd}` — load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on "
             f"{os.cpu_count()} CPUs (a shared machine: absolute times vary, the ratio less).",
             "",
             f"Image `{build['image']}` ({', '.join(build['packages'])}): "
             f"{build['size_bytes'] / 2**20:.0f} MB, shared read-only by every node; first "
             f"build {build['build_s']:.0f} s ({build['how']}).", "",
             "Every node has a start command, so swap-in confines every node (host mode: the "
             "private mounts of docs/security.md; image mode: the overlay root and the switch "
             "into it).", "",
             "| nodes | host swap-in (s) | image swap-in (s) | image / host (goal <= 1.5) | "
             "terminate host / image (s) | writable layer per node |",
             "|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['nodes']} | {r['host_s']:.2f} | {r['image_s']:.2f} | "
                     f"{r['ratio']:.2f}x {'PASS' if r['ratio'] <= 1.5 else 'FAIL'} | "
                     f"{r['host_down_s']:.2f} / {r['image_down_s']:.2f} | "
                     f"{r['layer_bytes'] / 1024:.0f} KB |")
    text = "\n".join(lines) + "\n"
    out = os.path.join(ROOT, "bench", "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "images-latest.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "images-latest.json"), "w") as f:
        json.dump({"build": build, "swap": rows, "load": load}, f, indent=2)
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--image", default="wanlab-bench")
    ap.add_argument("--build", action="store_true", help="time a first build in an empty "
                    "image folder (else: the recorded time of the cached build)")
    a = ap.parse_args()
    home = os.environ.get("WANLAB_HOME", "/var/lib/wanlab")
    store = images.Images(images.images_dir(home))
    if a.build:
        tmp = tempfile.mkdtemp(prefix="wanlab-bench-build-")
        try:
            t0 = time.monotonic()
            images.Images(tmp).build(a.image, PACKAGES, say=print)
            first, how = time.monotonic() - t0, "timed now, empty image folder"
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    img = store.get(a.image)
    if img is None:
        img = store.build(a.image, PACKAGES, say=print)
    if not a.build:
        first, how = (img.build_s or float("nan")), "recorded when it was built"
    build = {"image": a.image, "packages": list(img.packages), "build_s": first, "how": how,
             "size_bytes": images.disk_usage(store.layer_path(img.layers[0]))}
    os.environ["WANLAB_IMAGES"] = store.root     # the bench's own homes find the same images
    rows = run([int(x) for x in a.sizes.split(",")], a.repeats, a.image)
    print(write(rows, build, "python3 bench/images.py " + " ".join(sys.argv[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
