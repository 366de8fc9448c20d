"""The run layer's two swap-in stages: the event scheduler and the clock.

``scheduler`` goes right after the engine, so the interpreter's start-up overlaps the
building; ``clock`` goes last: it tells the scheduler ``go``, which is t = 0. The life
cycle inserts them into the emulation stages (:mod:`wanlab.backends.emulate.stages`).
"""

from __future__ import annotations

from wanlab.backends.emulate.stages import Build, Stage, keep
from wanlab.run import scheduler


def scheduler_stage(control_argv: list[str] | None = None) -> Stage:
    """Start the experiment's scheduler (recorded as a ``scheduler`` resource);
    ``control_argv`` is how it reaches the life cycle (see :func:`scheduler.start`)."""
    def build(b: Build) -> None:
        scheduler.start(b.store, b.row, b.folder, control_argv)
    return Stage("scheduler", build)


def _go(b: Build) -> None:
    b.say("starting the clock (t = 0)")
    # the scheduler reads the experiment and plans it as the swap-in did (about 0.3 ms per
    # node, link and agent; a 100 000-node simulation takes it tens of seconds): wait for
    # it in proportion, 10 s at least
    e = b.exp
    scheduler.go(b.folder, wait_s=10 + 0.002 * (len(e.nodes) + len(e.links) + len(e.agents)))


CLOCK = Stage("clock", _go, keep)
