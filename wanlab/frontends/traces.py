"""Capacity traces: ``bandwidth: {trace: FILE, offset: 10s, loop: true}``.

A trace file is Mahimahi's: one integer a line, a time in milliseconds since the trace's
start at which one 1500-byte delivery opportunity occurs, never decreasing, the last one
after 0 (it is the period when the trace loops). It is read here, once, into the IR
(:class:`~wanlab.model.ir.BandwidthTrace`): the engine gets the opportunities, never a
path, and a malformed file is an error naming its line.

Where a file may be: a spec's trace is relative to the spec's folder. An absolute path,
or one leading out of that folder, is refused when the description comes from someone
else (the portal's parse, :mod:`wanlab.frontends.bounds`) or for a request from another user
(:func:`confined_here`), where a run-time name means only what that user's resolver makes
of it (the portal's: a file uploaded with the experiment); root's own CLI may name any file.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from wanlab.errors import SpecError
from wanlab.frontends import bounds, units
from wanlab.model import ir

MAX_TRACE_BYTES = 64 << 20
KEYS = ("trace", "offset", "loop")
_confined: contextvars.ContextVar[bool] = contextvars.ContextVar("traces_confined",
                                                                 default=False)
# (name, field) -> the file a confined run-time request means by ``name``
Resolver = Callable[[str, str], Path]
_resolve: contextvars.ContextVar[Resolver | None] = contextvars.ContextVar("traces_resolve",
                                                                          default=None)


@contextlib.contextmanager
def confined_here(resolve: Resolver | None = None) -> Iterator[None]:
    """Within: the request comes from another user: trace files only inside a spec's
    folder; one named at run time only through ``resolve`` (none without it), which
    checks the name and says where that file is, or raises SpecError."""
    token, rtoken = _confined.set(True), _resolve.set(resolve)
    try:
        yield
    finally:
        _resolve.reset(rtoken)
        _confined.reset(token)


def confined() -> bool:
    return _confined.get() or bounds.active()


def path(name: Any, base_dir: str | os.PathLike[str] | None, field: str = "trace") -> Path:
    """Where trace file ``name`` is: relative to ``base_dir`` (the spec's folder; None: the
    working directory), confined to it when :func:`confined`."""
    if not isinstance(name, str) or not name:
        raise SpecError("a trace is a file name", field=field)
    p = Path(name)
    if not confined():
        return p if p.is_absolute() else Path(base_dir or os.getcwd()) / p
    if base_dir is None:
        resolve = _resolve.get()
        if resolve is None:
            raise SpecError("a trace file can be named only in the experiment's "
                            "description here", field=field)
        return resolve(name, field)
    if p.is_absolute() or ".." in p.parts:
        raise SpecError(f"the trace file {name!r} must be a relative path inside the spec's "
                        f"folder (no '..', not absolute)", field=field)
    base = Path(base_dir).resolve()
    full = (base / p).resolve()
    if not full.is_relative_to(base):
        raise SpecError(f"the trace file {name!r} leads outside the spec's folder (a "
                        f"symbolic link?)", field=field)
    return full


def shown(p: Path, name: Any, base_dir: Any) -> str:
    """How errors name file ``p``: a run-time request's as it named it (the file's place
    is the host's business), else its path."""
    return str(name) if base_dir is None and _resolve.get() is not None else str(p)


def read(p: Path, display: str | None = None) -> tuple[int, ...]:
    """The opportunities of trace file ``p`` (errors name ``display`` and the line)."""
    shown = display or str(p)
    try:
        st = p.stat()
    except OSError:
        raise SpecError("no such trace file (a relative path is relative to the spec's "
                        "folder)", file=shown) from None
    if not p.is_file():
        raise SpecError("not a regular file", file=shown)
    if st.st_size > MAX_TRACE_BYTES:
        raise SpecError(f"trace file larger than {MAX_TRACE_BYTES} bytes", file=shown)
    return _read(str(p), st.st_mtime_ns, st.st_size, shown)


@lru_cache(maxsize=16)
def _read(p: str, _mtime: int, _size: int, shown: str) -> tuple[int, ...]:
    try:
        with open(p, encoding="ascii") as f:
            text = f.read(MAX_TRACE_BYTES + 1)      # bounded, should it have grown
        if len(text) > MAX_TRACE_BYTES:
            raise SpecError(f"trace file larger than {MAX_TRACE_BYTES} bytes", file=shown)
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"cannot read the trace file: {e}", file=shown) from None
    out: list[int] = []
    last, last_line = -1, 0
    for n, line in enumerate(text.splitlines(), start=1):
        w = line.strip()
        if not w:
            continue
        if not w.isdigit():
            raise SpecError(f"{w[:40]!r} is not a whole number of milliseconds", file=shown,
                            line=n)
        ms = int(w)
        if ms < last:
            raise SpecError(f"{ms} ms comes before the previous opportunity ({last} ms, "
                            f"line {last_line})", file=shown, line=n)
        out.append(ms)
        last, last_line = ms, n
    if not out:
        raise SpecError("the trace file has no opportunity", file=shown)
    if out[-1] == 0:
        raise SpecError("the last opportunity must be after 0 ms (it is the trace's period)",
                        file=shown, line=last_line)
    return tuple(out)


def spec(v: Mapping[str, Any], base_dir: Any, field: str = "bandwidth") -> ir.BandwidthTrace:
    """``{trace: FILE, offset: DURATION, loop: BOOL}`` as the IR's trace."""
    for k in v:
        if k not in KEYS:
            raise SpecError(f"unknown key; a trace takes {', '.join(KEYS)}",
                            field=f"{field}.{k}")
    name = v.get("trace")
    p = path(name, base_dir, f"{field}.trace")
    offset = units.parse_delay(v.get("offset", 0), field=f"{field}.offset", what="offset")
    loop = units.parse_bool(v.get("loop", True), "loop", field=f"{field}.loop")
    return ir.BandwidthTrace(file=str(name), ms=read(p, shown(p, name, base_dir)),
                             offset_s=offset, loop=loop)


def from_words(words: list[str], base_dir: Any, field: str = "bandwidth") -> ir.BandwidthTrace:
    """``trace FILE [OFFSET] [noloop]`` (tevc, ns)."""
    if not words or words[0] != "trace" or len(words) < 2:
        raise SpecError("takes trace FILE [OFFSET] [noloop]", field=field)
    rest = words[2:]
    loop = "noloop" not in rest
    rest = [w for w in rest if w != "noloop"]
    if len(rest) > 1:
        raise SpecError("takes trace FILE [OFFSET] [noloop]", field=field)
    return spec({"trace": words[1], "loop": loop, **({"offset": rest[0]} if rest else {})},
                base_dir, field)


def plain(t: ir.BandwidthTrace | None) -> dict[str, Any] | None:
    """A trace as an event carries it (JSON)."""
    return None if t is None else {"file": t.file, "ms": list(t.ms), "offset_s": t.offset_s,
                                   "loop": t.loop}
