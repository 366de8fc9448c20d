"""Ctrl-C (SIGINT) and SIGTERM during an operation: roll back, or finish first, and say which.

Two kinds of region:

* :func:`undoable` (swap-in, create, a run's timeline): the first interrupt raises
  ``KeyboardInterrupt`` at once, so the operation's own error path rolls back; any
  further interrupt while that roll-back runs is only acknowledged, never raised, so the
  roll-back cannot itself be cut short.
* :func:`finish_first` (swap-out, terminate, cleanup): removing resources half-way helps
  nobody, so an interrupt is acknowledged, the operation finishes, and only then
  :class:`wanlab.errors.Interrupted` is raised.

Regions nest; the outermost one owns the signal handlers. Outside the main thread
(where Python cannot install handlers) both are no-ops.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

from wanlab.errors import Interrupted

Say = Callable[[str], None]
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _State:
    def __init__(self) -> None:
        self.depth = 0
        self.raised = False           # the one KeyboardInterrupt of an undoable region
        self.pending = False          # an interrupt arrived in a finish-first region
        self.mode: list[tuple[str, str, Say]] = []     # (kind, what, say), innermost last
        self.saved: dict[int, object] = {}


_state = _State()


def _handler(signum: int, frame: object) -> None:
    kind, what, say = _state.mode[-1]
    if kind == "undo" and not _state.raised:
        _state.raised = True
        raise KeyboardInterrupt
    _state.pending = True
    say(f"interrupt received: {what} (please wait)")


@contextlib.contextmanager
def _region(kind: str, what: str, say: Say) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _state.depth == 0:
        _state.raised = _state.pending = False
        _state.saved = {s: signal.signal(s, _handler) for s in _SIGNALS}
    _state.depth += 1
    _state.mode.append((kind, what, say))
    try:
        yield
    finally:
        _state.mode.pop()
        _state.depth -= 1
        if _state.depth == 0:
            for s, h in _state.saved.items():
                signal.signal(s, h)        # type: ignore[arg-type]


@contextlib.contextmanager
def undoable(what: str, say: Say) -> Iterator[None]:
    """The first interrupt raises KeyboardInterrupt; later ones wait for ``what`` (the
    roll-back, e.g. "rolling back the swap-in")."""
    with _region("undo", f"{what} first", say):
        yield


@contextlib.contextmanager
def finish_first(what: str, say: Say) -> Iterator[None]:
    """Interrupts wait until the body is done; then :class:`Interrupted` says so."""
    with _region("finish", f"finishing {what} first", say):
        yield
    if _state.pending and _state.depth == 0:
        _state.pending = False
        raise Interrupted(f"interrupted: finished {what} first")
