"""Attaching this process to a cluster as a Ray driver, for the length of one command."""

from __future__ import annotations

import atexit
import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from wanlab.errors import WanlabError

ATTEMPTS = 4
RETRY_S = 5.0
# ray.init has no deadline of its own: against a head that accepts but never answers (or
# on a machine loaded far beyond its cores) it waits for ever. All attempts share this one.
DEADLINE_S = 180.0

if TYPE_CHECKING:
    from wanlab.cluster.info import ClusterInfo


@contextlib.contextmanager
def session(info: ClusterInfo) -> Iterator[None]:
    """``ray.init`` to the cluster's head (quietly), ``ray.shutdown`` after."""
    import ray
    if ray.is_initialized():        # already attached (a command inside another)
        yield
        return
    # ray.init in the main thread replaces SIGTERM's handler with an exit (in its own
    # thread it should not): the command's own (its interrupts region: roll back, or
    # finish first) is put back once attached, whatever Ray did
    main = threading.current_thread() is threading.main_thread()
    term = signal.getsignal(signal.SIGTERM) if main else None
    # a head that has just started (or a loaded machine) may not answer the first time
    deadline = time.monotonic() + DEADLINE_S
    for attempt in range(ATTEMPTS):
        try:
            try:
                _init_by(deadline, info, address=info.head, namespace=f"wanlab-{info.id}",
                         log_to_driver=False, logging_level=logging.WARNING,
                         configure_logging=True)
            finally:
                if main and term is not None:
                    signal.signal(signal.SIGTERM, term)
            break
        except (ConnectionError, RuntimeError, ValueError) as e:
            if attempt == ATTEMPTS - 1 or time.monotonic() + RETRY_S >= deadline:
                raise WanlabError(f"cannot reach the cluster's head at {info.head}: "
                                  f"{e}") from e
            time.sleep(RETRY_S)
    try:
        yield
    finally:
        ray.shutdown()


def _quiet_thread_warning(record: logging.LogRecord) -> bool:
    return "not the main thread" not in record.getMessage()


def _init_by(deadline: float, info: ClusterInfo, **kwargs) -> None:
    """``ray.init(**kwargs)`` in a thread of its own, given until ``deadline`` (monotonic):
    past it, a clear error, and this process may still exit (the thread is a daemon, and
    Ray's exit hook, which would wait on the half-made connection, is taken off)."""
    import ray
    logging.getLogger("ray._private.worker").addFilter(_quiet_thread_warning)
    outcome: list[BaseException | None] = []

    def attach() -> None:
        try:
            ray.init(**kwargs)
        except BaseException as e:      # handed to the caller's thread
            outcome.append(e)
        else:
            outcome.append(None)

    t = threading.Thread(target=attach, name="wanlab-ray-init", daemon=True)
    t.start()
    t.join(max(0.0, deadline - time.monotonic()))
    if t.is_alive():
        atexit.unregister(ray.shutdown)
        with contextlib.suppress(ImportError, AttributeError):
            from ray._private import worker
            atexit.unregister(worker.shutdown)
        raise WanlabError(f"the cluster's head at {info.head} did not answer within "
                          f"{DEADLINE_S:.0f} s: is the cluster up ('wanlab cluster status')? "
                          "On a machine this loaded, try again later")
    if outcome and outcome[0] is not None:
        raise outcome[0]
