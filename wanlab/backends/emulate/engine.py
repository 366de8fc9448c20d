"""Starting ``wanlab-engine`` for an experiment (talking to it: :mod:`wanlab.engine.client`).

Each experiment has its own engine process, so experiments share nothing:
a frame of one can never reach another's TAPs. The engine runs detached
from the CLI (its own session), logs to the experiment's folder and listens
on ``<folder>/engine.sock``. Its packet thread runs at a modest real-time priority
(:func:`rt_priority`; the engine keeps the kernel's real-time throttling and sleeps when
idle), so the nodes' own programs cannot delay frames (docs/resources.md).
"""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import time

from wanlab.backends.emulate import procs
from wanlab.engine.binary import engine_binary
from wanlab.engine.client import Client, socket_of
from wanlab.engine.protocol import Hello
from wanlab.errors import EngineError

__all__ = ["Client", "engine_binary", "start"]

FD_LIMIT = 1 << 20      # the kernel's default fs.nr_open
RT_PRIORITY = 10        # SCHED_RR priority of the engine's packet thread (docs/resources.md)
RT_ENV = "WANLAB_ENGINE_RT"
RPS_ENV = "WANLAB_ENGINE_RPS"
# How long a live engine may take to answer its first ``hello``: milliseconds on an idle
# host, but a loaded one (every core busy, memory reclaimed after a large experiment) can
# stall a new process for seconds; one that has exited is reported at once
START_WAIT_S = 60.0


def rt_priority(env: dict | None = None) -> int:
    """The packet thread's real-time priority: ``WANLAB_ENGINE_RT`` (``off`` or ``0``: normal
    scheduling; a number: that priority), else :data:`RT_PRIORITY`."""
    v = (os.environ if env is None else env).get(RT_ENV, "").strip().lower()
    if not v:
        return RT_PRIORITY
    if v in ("off", "no", "false"):
        return 0
    try:
        prio = int(v)
    except ValueError:
        raise EngineError(f"{RT_ENV}={v!r}: expected 'off' or a priority from 0 to 40") \
            from None
    if not 0 <= prio <= 40:
        raise EngineError(f"{RT_ENV}={v!r}: expected 'off' or a priority from 0 to 40")
    return prio


def rps_args(env: dict | None = None) -> list[str]:
    """``["--rps"]`` when ``WANLAB_ENGINE_RPS`` is ``on``: the engine steers the nodes'
    receive processing of the frames it writes to the cores it does not run on
    (docs/engine-protocol.md, ``--rps``; off by default, as it costs the host more CPU in
    total: bench/results/engine-cpu-latest.md)."""
    v = (os.environ if env is None else env).get(RPS_ENV, "").strip().lower()
    if v in ("", "off", "no", "false", "0"):
        return []
    if v in ("on", "yes", "true", "1"):
        return ["--rps"]
    raise EngineError(f"{RPS_ENV}={v!r}: expected 'on' or 'off'")


def threads_for(wanted: int, links: int, cores: int | None = None) -> int:
    """The engine's thread count for an experiment asking ``wanted`` (the IR's
    ``engine_threads``) with ``links`` links and LANs. Not set: 1, the measured best on
    small machines (docs/architecture.md, "The engine on several cores": a second engine
    thread takes a core from the nodes' own programs); ``auto`` (-1): one per core this
    process may use (with ``cores`` reserved for the engine: one per reserved core), at most
    one per link or LAN (a partition needs traffic to pay off)."""
    if wanted > 0:
        return wanted
    if wanted < 0:
        have = cores if cores else len(os.sched_getaffinity(0))
        return max(1, min(have, links, 64))
    return 1


def start(folder: str, seed: int, threads: int = 1, cpus: str = "") -> subprocess.Popen:
    """Spawn the engine (``threads`` partitions; ``cpus``: the CPU list reserved for it, which
    it is confined to and its partitions pinned among); returns once its socket answers
    ``hello``."""
    sock = socket_of(folder)
    if os.path.exists(sock):
        os.unlink(sock)
    log = open(os.path.join(folder, "engine.log"), "ab")
    # captures (trace events) are confined to the experiment's folder
    proc = subprocess.Popen([engine_binary(), "--socket", sock, "--seed", str(seed),
                             "--capture-dir", folder, "--threads", str(threads),
                             "--rt-priority", str(rt_priority()), *rps_args(),
                             *(["--cpus", cpus] if cpus else [])],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            start_new_session=True, close_fds=True, umask=0o077,
                            cwd="/")     # never the caller's folder, which may go
    log.close()
    # one descriptor per TAP: a 10 000-node chain holds 20 000, past common limits. Raising
    # the hard limit needs CAP_SYS_RESOURCE; without it, the soft one goes up to the hard.
    try:
        resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))
    except (OSError, ValueError):
        with contextlib.suppress(OSError, ValueError):
            hard = resource.prlimit(proc.pid, resource.RLIMIT_NOFILE)[1]
            resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (hard, hard))
    t0 = time.monotonic()
    deadline = t0 + START_WAIT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EngineError(f"the engine exited at start (code {proc.returncode}); see "
                              f"{os.path.join(folder, 'engine.log')}")
        if os.path.exists(sock):
            try:
                with Client(sock, timeout=max(0.1, deadline - time.monotonic())) as c:
                    c.send(Hello())
                procs.hold(proc)     # so the health check can say how it ended
                return proc
            except (OSError, EngineError):
                pass
        time.sleep(0.005)
    proc.kill()
    proc.wait()
    raise EngineError(f"the engine did not answer within {time.monotonic() - t0:.0f} s of "
                      f"its start; see {os.path.join(folder, 'engine.log')}")
