"""Run the suite in its three parts (tests/conftest.py, ``WANLAB_TEST_PART``): the pure
tests, so a broken build fails in a minute or two, beside the clusters' tests (the longest
part, stopped when a pure test fails); then the rest of the host's tests beside what is
left of the clusters'. The clusters' tests spend most of their time waiting on Ray and on
the CLI children they start, which the other parts fill.

Each side's output goes to a log, printed whole when that side ends (with its time), so the
two never interleave. The exit status is the first non-zero one. Extra arguments go to every
pytest (e.g. ``-x`` or ``-k NAME``).

    python3 tests/run_parts.py [PYTEST-ARGS...]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIDE_BY_SIDE = ("cluster", "host")


def _pytest(part: str, args: list[str], **kw) -> subprocess.Popen:
    env = {**os.environ, "WANLAB_TEST_PART": part}
    argv = [sys.executable, "-m", "pytest", "-q", HERE, "--durations=15", *args]
    return subprocess.Popen(argv, env=env, start_new_session=True, **kw)


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGINT to each side's process group, as Ctrl-C in a terminal (pytest then runs its
    fixtures' teardowns, which remove what the tests built), then reap."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _interrupted(signum, frame):
    raise KeyboardInterrupt


def main(args: list[str]) -> int:
    signal.signal(signal.SIGTERM, _interrupted)     # a CI's timeout: stop every part cleanly
    # Ctrl-C as in a terminal, even when this was started with SIGINT ignored (a job put in
    # the background by a non-interactive shell): the parts (which inherit a handler as the
    # default) are stopped with it, and tests check the interrupt handling they find
    signal.signal(signal.SIGINT, signal.default_int_handler)
    start = time.monotonic()
    logs, procs, codes = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="wanlab-suite-") as tmp:

        def logged(part: str) -> None:
            logs[part] = open(os.path.join(tmp, part + ".log"), "w+")
            procs[part] = _pytest(part, args, stdout=logs[part], stderr=subprocess.STDOUT)

        def report(part: str) -> None:
            logs[part].seek(0)
            print(f"\n== {part} tests: rc {codes[part]}, {time.monotonic() - start:.0f} s",
                  flush=True)
            sys.stdout.write(logs[part].read())
            sys.stdout.flush()

        try:
            # the clusters' part is the longest: it starts with the pure tests, and is
            # stopped if one of those fails
            logged("cluster")
            pure = _pytest("pure", args)
            procs["pure"] = pure
            rc = pure.wait()
            print(f"== pure tests: rc {rc}, {time.monotonic() - start:.0f} s", flush=True)
            if rc not in (0, 5):        # 5: none collected (a -k that selects none here)
                _stop([procs["cluster"]])
                return rc
            logged("host")
            print("== cluster and host tests: running side by side", flush=True)
            while len(codes) < len(SIDE_BY_SIDE):
                for part in SIDE_BY_SIDE:
                    if part not in codes and procs[part].poll() is not None:
                        codes[part] = procs[part].returncode
                        report(part)
                time.sleep(1)
        except KeyboardInterrupt:
            _stop(list(procs.values()))
            return 130
        finally:
            for f in logs.values():
                f.close()
    print(f"== all tests: {time.monotonic() - start:.0f} s", flush=True)
    return next((c for c in codes.values() if c not in (0, 5)), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
