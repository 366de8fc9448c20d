"""Upper bounds on a description's size, checked as soon as a front end knows its counts
(nodes, links, LANs, events), before it builds and validates the IR.

Off unless a caller turns them on with :func:`limited` (root's own descriptions are not
bounded); the portal's parse child turns them on, so an upload of 100 000 nodes is refused
in the time it takes to count them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from wanlab.errors import SpecError

_active: dict[str, int] = {}


@contextlib.contextmanager
def limited(**most: int) -> Iterator[None]:
    """Within: a description with more than ``most[kind]`` of a kind is refused."""
    old = dict(_active)
    _active.update(most)
    try:
        yield
    finally:
        _active.clear()
        _active.update(old)


def active() -> bool:
    return bool(_active)


def check(counts: dict[str, int], file: str) -> None:
    """Refuse ``counts`` (kind -> how many) over the bounds in force."""
    for kind, n in counts.items():
        most = _active.get(kind)
        if most is not None and n > most:
            raise SpecError(f"{n} {kind}: more than the {most} a description may have here",
                            file=file)
