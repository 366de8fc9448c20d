"""A machine's engine of a simulation over several machines (called by its host agent,
:meth:`wanlab.cluster.agent.HostAgent.simulate_part`; the controller's side is
:mod:`wanlab.cluster.simulate`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from typing import Any

from wanlab.errors import WanlabError

RUN_TIMEOUT_S = 3600.0          # one engine's whole run, on its machine
_RUN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,80}$")
_ADDR = re.compile(r"^[0-9.]{7,15}:[0-9]{1,5}$")


def run_engine_here(home: str, run: str, scenario: str, argv: list[str],
                    timeout: float = RUN_TIMEOUT_S) -> dict[str, Any]:
    """On a machine (called by its host agent): run one engine of a simulation over
    several and return its exit code, the end of its log and (rank 0) the result."""
    from wanlab.engine.binary import engine_binary
    if not _RUN.match(run):
        raise WanlabError(f"simulation run id {run!r} is not a plain name")
    _check_argv(argv)
    folder = os.path.join(home, "sims", run)
    os.makedirs(folder, exist_ok=True)
    try:
        scen, res = os.path.join(folder, "scenario.json"), os.path.join(folder, "result.json")
        with open(scen, "w") as f:
            f.write(scenario)
        t0 = time.monotonic()
        try:
            p = subprocess.run([engine_binary(), "simulate", scen, "--out", res, *argv],
                               capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"rc": -1, "stderr": f"no result within {timeout:g} s (stopped)",
                    "wall_s": time.monotonic() - t0, "result": None}
        result = None
        if p.returncode == 0 and os.path.isfile(res):
            with open(res) as f:
                result = f.read()
        return {"rc": p.returncode, "stderr": p.stderr[-4000:], "result": result,
                "wall_s": time.monotonic() - t0}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _check_argv(argv: list[str]) -> None:
    """Only the arguments :func:`wanlab.cluster.simulate.engine_argvs` makes reach the
    engine's command line: the rank arguments, or (the whole run on this machine's one
    engine) none or its threads."""
    one = len(argv) == 2 and argv[0] == "--threads" and argv[1].isdigit()
    ok = not argv or one or len(argv) == 8 and argv[0] == "--rank" and argv[2] == "--ranks" and \
        argv[4] in ("--listen", "--connect") and argv[6] == "--connect-timeout" and \
        argv[1].isdigit() and argv[3].isdigit() and argv[7].isdigit() and \
        bool(_ADDR.match(argv[5]))
    if not ok:
        raise WanlabError(f"not the arguments of a simulation engine: {argv!r}")
