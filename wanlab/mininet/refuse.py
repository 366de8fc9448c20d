"""What wanlab does not do for a Mininet script: one precise message, naming the script's line."""

from __future__ import annotations

import os
import sys

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # wanlab/


class Unsupported(Exception):
    """A Mininet call wanlab refuses; the message names the call and the script's line."""


def script_line() -> str:
    """``file:line`` of the innermost frame outside wanlab (the script's own call)."""
    f = sys._getframe(1)
    while f is not None:
        path = os.path.abspath(f.f_code.co_filename)
        if not path.startswith(_PKG + os.sep):
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return "?"


def refuse(what: str, why: str) -> "Unsupported":
    """The exception to raise for ``what`` (the call), with ``why``."""
    return Unsupported(f"{script_line()}: {what}: {why}")
