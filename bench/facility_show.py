"""The facility's two demonstrations (issue 14), with real namespaces and the real daemon:

1. a batch of 6 submitted at once, ``--max-concurrent 2``: all 6 finish, never more than 2
   run at once (from the store's record of every batch's states), each result archived;
2. an experiment with a 30 s idle threshold: the daemon warns in its event log, swaps it
   out, and ``swapin`` brings it back with a file its node wrote.

    sudo python3 bench/facility_show.py     # about 2 minutes; bench/results/facility-show.*
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from wanlab.lifecycle import Lab  # noqa: E402
from wanlab.store import facility as records  # noqa: E402

JOB = """set ns [new Simulator]
source tb_compat.tcl
$ns define-template-parameter WORK 3 "seconds of work"
set a [$ns node]
set b [$ns node]
$ns duplex-link $a $b 10Mb 5ms DropTail
tb-set-node-startup $a {ping -c $WORK -i 1 b > /tmp/ping.txt}
$ns run
"""

IDLE = """set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
$ns duplex-link $a $b 10Mb 5ms DropTail
tb-set-idleswap 30s
$ns run
"""


def cli(home: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wanlab.cli", "--home", home, *args],
                          env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True,
                          text=True, timeout=600)


def daemon(home: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "wanlab.cli", "--home", home, "batch",
                             "daemon", "--foreground", *args],
                            env={**os.environ, "PYTHONPATH": ROOT},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    ev = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    cur = best = 0
    for _, d in ev:
        cur += d
        best = max(best, cur)
    return best


def batch_show(tmp: str) -> dict:
    home = os.path.join(tmp, "batch-home")
    spec = os.path.join(tmp, "job.tcl")
    with open(spec, "w") as f:
        f.write(JOB)
    t0 = time.monotonic()
    for i in range(6):
        p = cli(home, "batch", "submit", spec, "-p", f"WORK={3 + i % 3}", "--user",
                f"user{i % 3}")
        assert p.returncode == 0, p.stderr
    d = daemon(home, "--max-concurrent", "2", "--tick", "0.5")
    lab = Lab(home)
    try:
        while time.monotonic() - t0 < 900:
            if all(b["state"] in ("done", "failed") for b in records.batches(lab.store)):
                break
            time.sleep(0.5)
        wall = time.monotonic() - t0
    finally:
        d.terminate()
        d.communicate(timeout=60)
    bs = records.batches(lab.store)
    intervals, out = [], []
    for b in bs:
        h = records.batch_log(lab.store, b["id"])
        start = next(x["at"] for x in h if x["to_state"] == "activating")
        intervals.append((start, h[-1]["at"]))
        with open(os.path.join(b["folder"], "summary.json")) as f:
            s = json.load(f)
        out.append({"id": b["id"], "user": b["user"], "state": b["state"],
                    "states": [x["to_state"] for x in h],
                    "seconds": round(h[-1]["at"] - start, 1), "archived": b["folder"],
                    "startcmd_exit": s["startcmds"]})
    for r in lab.list():
        lab.terminate(r.name)
    lab.close()
    return {"batches": out, "max_concurrent": 2, "observed_concurrency": max_overlap(intervals),
            "all_done": all(b["state"] == "done" for b in out), "wall_s": round(wall, 1)}


def idle_show(tmp: str) -> dict:
    home = os.path.join(tmp, "idle-home")
    spec = os.path.join(tmp, "idle.tcl")
    with open(spec, "w") as f:
        f.write(IDLE)
    p = cli(home, "create", spec)
    assert p.returncode == 0, p.stderr
    created = time.time()
    assert cli(home, "exec", "idle", "a", "--", "sh", "-c",
               "echo written-before-the-swap > /tmp/state").returncode == 0
    d = daemon(home, "--tick", "1")
    lab = Lab(home)
    try:
        while time.time() - created < 180 and lab.get("idle").state != "swapped":
            time.sleep(0.5)
    finally:
        d.terminate()
        log = d.communicate(timeout=60)[0].decode()
    row = lab.get("idle")
    events = [e for e in lab.store.event_log(row.id) if e["origin"] == "idle"]
    swapped_at = next(t for t, _a, b, _r in lab.store.transitions(row.id) if b == "swapped")
    p = cli(home, "swapin", "idle")
    assert p.returncode == 0, p.stderr
    back = cli(home, "exec", "idle", "a", "--", "cat", "/tmp/state").stdout.strip()
    lab.terminate("idle")
    lab.close()
    return {"idle_threshold_s": 30, "state_after": row.state,
            "events": [{"t": round(e["fired_s"], 1), "outcome": e["outcome"],
                        "detail": e["detail"]} for e in events],
            "swapped_after_s": round(swapped_at - created, 1),
            "node_file_after_swapin": back, "daemon_log": log.strip().splitlines()[-6:]}


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="wanlab-facility-") as tmp:
        result = {"batch": batch_show(tmp), "idle": idle_show(tmp)}
    out = os.path.join(ROOT, "bench", "results", "facility-show.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    b, i = result["batch"], result["idle"]
    print(f"batch: {len(b['batches'])} batches, all done: {b['all_done']}, observed "
          f"concurrency {b['observed_concurrency']} (max 2), {b['wall_s']} s")
    print(f"idle: events {[e['outcome'] for e in i['events']]}, swapped out "
          f"{i['swapped_after_s']} s after create, node file after swap-in: "
          f"{i['node_file_after_swapin']!r}")
    print(f"results: {out}")
    ok = (b["all_done"] and b["observed_concurrency"] <= 2 and i["state_after"] == "swapped"
          and [e["outcome"] for e in i["events"]] == ["warning", "ok"]
          and i["node_file_after_swapin"] == "written-before-the-swap")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
