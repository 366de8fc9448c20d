"""Attaching this process to a cluster as a Ray driver, for the length of one command."""

from __future__ import annotations

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

if TYPE_CHECKING:
    from wanlab.cluster.info import ClusterInfo


@contextlib.contextmanager
def session(info: ClusterInfo) -> Iterator[None]:
    """``ray.init`` to the cluster's head (quietly), ``ray.shutdown`` after."""
    import ray
    if ray.is_initialized():        # already attached (a command inside another)
        yield
        return
    # ray.init replaces SIGTERM's handler with an exit: the command's own (its
    # interrupts region: roll back, or finish first) is put back once attached
    main = threading.current_thread() is threading.main_thread()
    term = signal.getsignal(signal.SIGTERM) if main else None
    # a head that has just started (or a loaded machine) may not answer the first time
    for attempt in range(ATTEMPTS):
        try:
            try:
                ray.init(address=info.head, namespace=f"wanlab-{info.id}",
                         log_to_driver=False, logging_level=logging.WARNING,
                         configure_logging=True)
            finally:
                if main and term is not None:
                    signal.signal(signal.SIGTERM, term)
            break
        except (ConnectionError, RuntimeError, ValueError) as e:
            if attempt == ATTEMPTS - 1:
                raise WanlabError(f"cannot reach the cluster's head at {info.head}: "
                                  f"{e}") from e
            time.sleep(RETRY_S)
    try:
        yield
    finally:
        ray.shutdown()
