"""The batch queue, with Emulab's semantics.

A batch is an experiment that runs unattended when resources free up::

    posted ──(daemon: capacity free, the user's turn)──> activating ──> running
      ^                                                     │             │
      └──── requeue / swap-in failed (retried) ─────────────┘             │
    running ──(every start command exited and the timeline played, or its maximum
               duration)──> terminating ──(results archived, swapped out)──> done
    any failure ──> failed;   posted/failed/done ──cancel──> cancelled

``submit`` parses the file (with ``-p`` values) and stores its IR, so a later change of the
file does not change a posted batch; the template version is recorded too. The daemon
(:mod:`wanlab.facility.daemon`) starts batches, and each runs in a worker process of its own
(:mod:`wanlab.facility.worker`), whose pid and start time are recorded before it runs. The
experiment is named ``<name>-b<ID>``; its results go to ``$WANLAB_HOME/batches/<ID>/
results`` and the experiment stays, swapped out.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any

from wanlab import site as sites
from wanlab.backends.emulate import procs
from wanlab.errors import WanlabError
from wanlab.facility import templates
from wanlab.frontends import load
from wanlab.lifecycle import Lab
from wanlab.model.names import check_experiment_name
from wanlab.plan.plan import make_plan
from wanlab.store import facility as records
from wanlab.store.facility import CANCELLED, DONE, FAILED, LIVE, POSTED

MAX_ATTEMPTS = 3        # swap-ins tried before a batch fails (resources short, a crash)


def experiment_name(name: str, bid: int) -> str:
    suffix = f"-b{bid}"
    return check_experiment_name(name[:32 - len(suffix)].rstrip("-") + suffix)


def folder(lab: Lab, bid: int) -> str:
    return lab.store.inside("batches", str(int(bid)))


def submit(lab: Lab, path: str, params: dict[str, str], user: str = "root") -> int:
    """Parse ``path`` (a bad spec is an error now, not later) and post it."""
    if not user or not user.replace("-", "").replace("_", "").isalnum() or len(user) > 32:
        raise WanlabError(f"user {user!r}: letters, digits, '-' or '_' (at most 32)")
    exp = load(path, params=params)
    make_plan(exp, "0000")
    if not exp.events and not any(n.startcmd for n in exp.nodes):
        raise WanlabError(f"{path}: a batch ends when its start commands have exited and its "
                          f"timeline has played, and this one has neither")
    templates.record(lab.store, path, exp)
    return records.add_batch(lab.store, user, exp.name, os.path.abspath(path), exp.to_json())


def listing(lab: Lab) -> list[dict[str, Any]]:
    """Every batch; a posted one with ``waiting``: why it has not started yet."""
    return [{**{k: b[k] for k in ("id", "user", "name", "state", "attempts", "folder",
                                  "error", "submitted", "started", "ended")},
             **({"waiting": waiting(lab, b)} if b["state"] == POSTED else {})}
            for b in records.batches(lab.store)]


# -- why a posted batch waits ------------------------------------------------------------
def _status_path(lab: Lab) -> str:
    return lab.store.inside("batches", "daemon.json")


def write_status(lab: Lab, max_concurrent: int, pid: int) -> None:
    """The daemon's view, for :func:`waiting`: its limit, its pid (and start time)."""
    path = _status_path(lab)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    tmp = f"{path}.{pid}"
    with open(tmp, "w") as f:
        json.dump({"pid": pid, "started": procs.start_time(pid), "max": max_concurrent,
                   "at": time.time()}, f)
    os.replace(tmp, path)


def clear_status(lab: Lab) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_status_path(lab))


def waiting(lab: Lab, b: dict[str, Any]) -> str:
    """Why posted batch ``b`` has not started: no daemon runs, the daemon's own batches
    fill its limit, or its user's other batch runs while another user's goes first."""
    try:
        with open(_status_path(lab)) as f:
            st = json.load(f)
        alive = procs.alive(int(st["pid"]), st["started"])
    except (OSError, ValueError, KeyError, TypeError):
        st, alive = None, False
    if not alive:
        return "no batch daemon runs ('wanlab batch daemon' starts one)"
    live = records.batches(lab.store, LIVE)
    if len(live) >= st["max"]:
        return (f"the daemon's limit: {len(live)} of {st['max']} batches run "
                f"({', '.join(str(x['id']) for x in live)}; --max-concurrent)")
    if any(x["user"] == b["user"] for x in live):
        return f"{b['user']} has a batch running; other users' posted batches go first"
    return "starting at the daemon's next tick"


def show(lab: Lab, bid: int) -> dict[str, Any]:
    b = records.get_batch(lab.store, bid)
    b.pop("ir")
    b["experiment"] = experiment_name(b["name"], bid)
    b["history"] = records.batch_log(lab.store, bid)
    return b


def cancel(lab: Lab, bid: int) -> str:
    """A posted (or finished) batch is cancelled; a running one is not (it would leave a
    half-run experiment: swap it out or wait)."""
    b = records.get_batch(lab.store, bid)
    if b["state"] in LIVE:
        raise WanlabError(f"batch {bid} is {b['state']}; only a posted or finished batch can "
                          f"be cancelled")
    if b["state"] == CANCELLED:
        return CANCELLED
    if not records.set_batch_state(lab.store, bid, CANCELLED, "cancelled by the user",
                                   expect=(POSTED, DONE, FAILED)):
        raise WanlabError(f"batch {bid} was started meanwhile; try again when it is done")
    return CANCELLED


def requeue(lab: Lab, bid: int) -> str:
    """Post a finished, failed or cancelled batch again (Emulab's re-queue)."""
    b = records.get_batch(lab.store, bid)
    if b["state"] in LIVE or b["state"] == POSTED:
        raise WanlabError(f"batch {bid} is {b['state']}; only a finished, failed or cancelled "
                          f"batch can be requeued")
    name = experiment_name(b["name"], bid)
    row = lab.store.find(name)
    if row is not None:
        sites.of(lab, name).terminate(name)   # its results are archived in the batch's folder
    records.set_batch_state(lab.store, bid, POSTED, "requeued by the user",
                            expect=(DONE, FAILED, CANCELLED), attempts=0, error=None,
                            worker=None, started=None, ended=None)
    return POSTED
