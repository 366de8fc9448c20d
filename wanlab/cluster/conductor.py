"""The conductor: what one host agent plays for a whole cluster experiment, because no
one machine's timeline can (:func:`wanlab.cluster.events.conducted` says what):

* **an event sequence whose steps are on several machines.** Each step goes to the
  machines that do it (the part operation ``event``, waited for, logged there with
  origin ``sequence``): the first at the sequence's start on the experiment's clock, each
  next one once every machine has completed the one before (a Program's ``run`` when the
  program exits), as one machine's scheduler plays a sequence. A failed step is logged
  and the sequence goes on; once a machine's timeline is halted its steps are logged
  ``cancelled`` there.
* **ns ``swapout`` / ``terminate`` on the timeline.** Every part halts its timeline at
  that time (the split gave each ``halt``); then the conductor asks the controller's
  machine to swap out (or terminate) the whole experiment: a Ray task pinned to the
  controller's Ray node runs ``wanlab swapout|terminate NAME`` there, on the controller's
  own store, as a user would.

The controller starts the conductor on the experiment's first machine once every part's
clock has started (create, swap-in), with that machine's t = 0. It is a thread per item
in that machine's agent, and it stops when the experiment's clock is no longer that one
(swapped out, or out and in again: the new clock has its own conductor).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from wanlab.errors import WanlabError
from wanlab.model.states import ACTIVE
from wanlab.store.db import Store

STEP_TIMEOUT_S = 24 * 3600.0    # a step (a Program's run) may take this long
LEAD_S = 0.5                    # the first step is sent this long before it is due
AFTER_HALT_S = 0.2              # the whole experiment's swap-out waits for the halts
SAME_CLOCK_S = 1.0


def start(home: str, name: str, t0: float, items: list[dict[str, Any]],
          handles: dict[str, Any] | None, controller: dict[str, str]) -> int:
    """Play ``items`` for experiment ``name`` whose clock started at ``t0`` (wall clock);
    ``handles``: every machine's agent (None: found by name, for a request that came by
    the agent's socket); ``controller``: the controller's Ray node id and store
    (``node_id``, ``home``). Returns at once, with the number of items."""
    if handles is None:
        import ray
        handles = {m: ray.get_actor(f"agent-{m}") for item in items
                   for step in item.get("steps", []) for m, _ in step}
    for item in items:
        play = _sequence if item["kind"] == "sequence" else _whole
        threading.Thread(target=play, args=(home, name, t0, item, handles, controller),
                         daemon=True, name=f"conductor-{name}").start()
    return len(items)


def _same_clock(home: str, name: str, t0: float) -> bool:
    """Whether this machine's part of ``name`` still runs on the clock ``t0``."""
    store = Store(home, shared=True, create=False)
    try:
        row = store.find(name)
        if row is None or row.state != ACTIVE:
            return False
        with open(os.path.join(store.folder(name), "t0")) as f:
            # (a new clock is a swap-in later: seconds, not the milliseconds by which
            # the machines' starts of one clock differ)
            return abs(float(f.read()) - t0) < SAME_CLOCK_S
    except (OSError, ValueError):
        return False
    finally:
        store.close()


def _wait_until(wall: float) -> None:
    while (left := wall - time.time()) > 0:
        time.sleep(min(left, 1.0))


def _sequence(home: str, name: str, t0: float, item: dict[str, Any],
              handles: dict[str, Any], controller: dict[str, str]) -> None:
    import ray
    _wait_until(t0 + item["at"] - LEAD_S)
    time_spec = f"{item['at']:.6f}"         # the first step: at its time, on every machine
    for step in item["steps"]:
        if not _same_clock(home, name, t0):
            return
        with ThreadPoolExecutor(len(step)) as pool:
            futs = [(m, pool.submit(ray.get, handles[m].run_part.remote(
                "event", name, time_spec, ev, True, "sequence"), timeout=STEP_TIMEOUT_S))
                    for m, ev in step]
            for m, f in futs:
                try:
                    f.result()
                except Exception as e:  # noqa: BLE001 - the sequence goes on; said in Ray's log
                    print(f"conductor: {name} sequence {item['name']} on {m}: {e}",
                          file=sys.stderr, flush=True)
        time_spec = "now"


def _whole(home: str, name: str, t0: float, item: dict[str, Any],
           handles: dict[str, Any], controller: dict[str, str]) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    _wait_until(t0 + item["at"] + AFTER_HALT_S)
    if not _same_clock(home, name, t0):
        return
    task = ray.remote(num_cpus=0)(on_controller).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(controller["node_id"], soft=False))
    try:
        ray.get(task.remote(controller["home"], item["op"], name), timeout=3600.0)
    except Exception as e:      # noqa: BLE001 - said in Ray's log (and the experiment stays)
        print(f"conductor: ns {item['op']} of {name}: {e}", file=sys.stderr, flush=True)


def on_controller(home: str, op: str, name: str) -> None:
    """On the controller's machine: ``wanlab OP NAME`` on its store (a process of its
    own: the command attaches to the cluster as any other does)."""
    if op not in ("swapout", "terminate"):
        raise WanlabError(f"conductor: no whole-experiment operation {op!r}")
    env = {**os.environ, "WANLAB_HOME": home}
    p = subprocess.run([sys.executable, "-m", "wanlab.cli", op, name], env=env,
                       capture_output=True, text=True, timeout=3600, check=False,
                       stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise WanlabError(f"wanlab {op} {name}: {p.stderr.strip() or p.returncode}")
