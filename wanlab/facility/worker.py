"""One batch, start to end: ``python -m wanlab.facility.worker --home HOME ID``.

Started by the daemon after it moved the batch to ``activating`` (and recorded this
process). In order: create and swap in the experiment (``<name>-b<ID>``; a failure is retried
by the daemon up to :data:`~wanlab.facility.batch.MAX_ATTEMPTS` times); ``running`` until
every node's start command has exited and every timeline event has fired (or its maximum
duration, default :data:`DEFAULT_MAX_S`); ``terminating``: the engine's link statistics,
then swap-out (agents stop, their flows are recorded), ``summary.json`` (events, flows,
start-command exit codes, links) and the experiment's folder archived to
``$WANLAB_HOME/batches/<ID>/results``; ``done``. Any failure: ``failed`` with the reason,
and nothing of the experiment left running.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from typing import Any

from wanlab import site as sites
from wanlab.backends.emulate import nodefiles
from wanlab.errors import WanlabError
from wanlab.facility.batch import MAX_ATTEMPTS, experiment_name, folder
from wanlab.lifecycle import ACTIVE, Lab
from wanlab.model.ir import Experiment
from wanlab.store import facility as records
from wanlab.store.facility import ACTIVATING, DONE, FAILED, POSTED, RUNNING, TERMINATING

DEFAULT_MAX_S = 3600.0
POLL_S = 0.5


def _say(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


def finished(lab: Lab, name: str, exp: Experiment) -> tuple[bool, str]:
    """Whether the batch's experiment has ended: start commands exited, timeline played."""
    row = lab.store.get(name)
    if row.state != ACTIVE:
        return True, f"the experiment is {row.state}"
    waiting = [n.name for n in exp.nodes if n.startcmd and not os.path.exists(
        lab.store.folder(name, "nodes", n.name, "startcmd.exit"))]
    fired = [e for e in lab.store.event_log(row.id) if e["origin"] in ("timeline", "sequence")]
    if waiting or len(fired) < len(exp.events):
        return False, ""
    return True, "start commands exited and the timeline played"


def run(lab: Lab, bid: int) -> str:
    b = records.get_batch(lab.store, bid)
    exp = Experiment.from_json(b["ir"])
    name = experiment_name(b["name"], bid)
    out = folder(lab, bid)
    os.makedirs(out, mode=0o700, exist_ok=True)
    _say(f"batch {bid}: creating {name}")
    try:
        if lab.store.find(name) is not None:   # left by an earlier attempt
            sites.of(lab, name).terminate(name)
        sites.for_new(lab).create(exp.with_name(name), source_path=b["path"])
    except WanlabError as e:
        attempts = b["attempts"] + 1
        again = attempts < MAX_ATTEMPTS
        records.set_batch_state(lab.store, bid, POSTED if again else FAILED,
                                f"swap-in failed ({e})" + ("; will retry" if again else ""),
                                attempts=attempts, error=str(e), worker=None)
        return POSTED if again else FAILED
    records.set_batch_state(lab.store, bid, RUNNING, "swapped in", expect=(ACTIVATING,))
    limit = exp.swap.max_duration_s or DEFAULT_MAX_S
    t0 = time.monotonic()
    why = f"maximum duration {limit:g} s reached"
    while time.monotonic() - t0 < limit:
        done, reason = finished(lab, name, exp)
        if done:
            why = reason
            break
        time.sleep(POLL_S)
    _say(f"batch {bid}: {why}")
    records.set_batch_state(lab.store, bid, TERMINATING, why)
    try:
        results = archive(lab, name, out)
    except WanlabError as e:
        with contextlib.suppress(WanlabError):
            sites.of(lab, name).cleanup(name)
        records.set_batch_state(lab.store, bid, FAILED, f"archiving failed ({e})", error=str(e),
                                ended=time.time())
        return FAILED
    records.set_batch_state(lab.store, bid, DONE, why, folder=results, ended=time.time())
    _say(f"batch {bid}: done; results in {results}")
    return DONE


def archive(lab: Lab, name: str, out: str) -> str:
    """Stop the experiment (swap-out) and copy its results to ``out/results``."""
    row = lab.store.get(name)
    summary: dict[str, Any] = {"name": name}
    site = sites.of(lab, name)
    if row.state == ACTIVE:
        with contextlib.suppress(WanlabError):
            summary["links"] = site.stats(name).get("links", {})
        site.swapout(name, reason="batch ended")
    summary["events"] = lab.store.event_log(row.id)
    summary["flows"] = lab.store.flows(row.id)
    summary["startcmds"] = {}
    for n in row.ir.nodes:
        with contextlib.suppress(OSError, ValueError):    # the node's folder: no link followed
            summary["startcmds"][n.name] = int(nodefiles.read_small(
                lab.store.folder(name, "nodes", n.name), "startcmd.exit", 64).strip())
    with open(lab.store.folder(name, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    dest = os.path.join(out, "results")
    if os.path.lexists(dest):           # a requeued batch: keep the earlier results
        i = 1
        while os.path.lexists(f"{dest}.{i}"):
            i += 1
        os.rename(dest, f"{dest}.{i}")
    lab.export(name, dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m wanlab.facility.worker")
    ap.add_argument("--home", required=True)
    ap.add_argument("id", type=int)
    a = ap.parse_args(argv)
    os.umask(0o077)
    lab = Lab(a.home, create=False)
    try:
        run(lab, a.id)
    except BaseException as e:
        with contextlib.suppress(Exception):
            b = records.get_batch(lab.store, a.id)
            name = experiment_name(b["name"], a.id)
            if lab.store.find(name) is not None:
                sites.of(lab, name).cleanup(name)
            records.set_batch_state(lab.store, a.id, FAILED, f"worker failed: {e!r}",
                                    error=repr(e), ended=time.time())
        if not isinstance(e, Exception):
            raise
        return 1
    finally:
        lab.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
