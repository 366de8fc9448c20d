"""Schedules: ``schedule: {csv: FILE, interpolate: step|linear, loop: false}``.

A schedule's CSV has a header row naming ``time`` and any of ``delay``, ``bandwidth`` and
``loss``, then one row per point: the time since the direction was set up (``0``,
``1.5s``, ``250ms``; a plain number is seconds), and each column's value with the usual
units (``20ms``, ``5Mb``, ``1%``). The engine applies it at the series' own times
(docs/impairments.md). The file is read here, once, into the IR; errors name its line.
Paths follow :mod:`wanlab.frontends.traces`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import Any

from wanlab.errors import SpecError
from wanlab.frontends import traces, units
from wanlab.model import ir

KEYS = ("csv", "interpolate", "loop")
COLUMNS = ("delay", "bandwidth", "loss")
MAX_CSV_BYTES = 64 << 20


def _value(col: str, text: str, file: str, line: int) -> float | int:
    try:
        if col == "time":
            if text.replace(".", "", 1).isdigit():
                return float(text)
            if text.endswith("ms") and text[:-2].replace(".", "", 1).isdigit():
                return float(text[:-2]) / 1000
            return units.parse_duration(text, "time")
        if col == "delay":
            return units.parse_delay(text, field=col)
        if col == "bandwidth":
            v = units.parse_bandwidth(text, field=col)
            if v <= 0:
                raise SpecError("a scheduled bandwidth must be above 0", field=col)
            return v
        return units.parse_loss(text, field=col)
    except SpecError as e:
        raise SpecError(f"{col}: {e.message}", file=file, line=line) from None


def read(text: str, file: str) -> tuple[tuple[float, ...], dict[str, tuple[Any, ...]]]:
    """(times, {column: values}) of a schedule CSV's text."""
    rows = [(n, [c.strip() for c in r]) for n, r in
            enumerate(csv.reader(io.StringIO(text)), start=1)
            if any(c.strip() for c in r) and not r[0].strip().startswith("#")]
    if not rows:
        raise SpecError("the schedule has no header row (time, delay, bandwidth, loss)",
                        file=file)
    hline, head = rows[0]
    unknown = [c for c in head[1:] if c not in COLUMNS]
    if unknown:
        raise SpecError(f"unknown column {unknown[0]!r}: a schedule's columns are time and "
                        f"any of {', '.join(COLUMNS)}", file=file, line=hline)
    if not head or head[0] != "time" or len(head) < 2 or len(set(head)) != len(head):
        raise SpecError(f"the header must be time and any of {', '.join(COLUMNS)} (each "
                        f"once), got {', '.join(head)}", file=file, line=hline)
    times: list[float] = []
    cols: dict[str, list[Any]] = {c: [] for c in head[1:]}
    for n, r in rows[1:]:
        if len(r) != len(head):
            raise SpecError(f"{len(r)} cells, the header has {len(head)}", file=file, line=n)
        if r[0].startswith("-"):
            raise SpecError(f"time {r[0]} is negative: times count from the start, 0 or "
                            f"more", file=file, line=n)
        t = float(_value("time", r[0], file, n))
        if times and t < times[-1]:
            raise SpecError(f"time {r[0]} comes before the previous point's", file=file,
                            line=n)
        times.append(t)
        for c, v in zip(head[1:], r[1:], strict=True):
            cols[c].append(_value(c, v, file, n))
    if not times:
        raise SpecError("the schedule has no point", file=file, line=hline)
    out = {c: tuple(v) for c, v in cols.items()}
    bad = ir.schedule_fault(ir.Schedule(file, tuple(times), out.get("delay"),
                                        out.get("bandwidth"), out.get("loss")))
    if bad is not None:     # the IR's own ranges (a time past the horizon, a delay > 10 s)
        i, msg = bad
        raise SpecError(msg, file=file, line=rows[1 + i][0] if i >= 0 else hline)
    return tuple(times), out


def spec(v: Mapping[str, Any], base_dir: Any, field: str = "schedule") -> ir.Schedule:
    """``{csv: FILE, interpolate, loop}`` as the IR's schedule."""
    if not isinstance(v, Mapping):
        raise SpecError("a schedule is {csv: FILE, interpolate: step|linear, loop: BOOL}",
                        field=field)
    for k in v:
        if k not in KEYS:
            raise SpecError(f"unknown key; a schedule takes {', '.join(KEYS)}",
                            field=f"{field}.{k}")
    p = traces.path(v.get("csv"), base_dir, f"{field}.csv")
    shown = traces.shown(p, v.get("csv"), base_dir)
    try:
        if p.exists() and not p.is_file():    # a FIFO or /dev/zero: read without end
            raise SpecError("the schedule is not a regular file", file=shown)
        with open(p, "rb") as f:
            data = f.read(MAX_CSV_BYTES + 1)
        if len(data) > MAX_CSV_BYTES:
            raise SpecError(f"schedule file larger than {MAX_CSV_BYTES} bytes", file=shown)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"cannot read the schedule: {e}", file=shown) from None
    times, cols = read(text, shown)
    how = str(v.get("interpolate", "step"))
    if how not in ("step", "linear"):
        raise SpecError(f"interpolate {how!r}: step or linear", field=f"{field}.interpolate")
    return ir.Schedule(file=str(v.get("csv")), times_s=times, delay_s=cols.get("delay"),
                       bandwidth_bps=cols.get("bandwidth"), loss=cols.get("loss"),
                       linear=how == "linear",
                       loop=units.parse_bool(v.get("loop", False), "loop",
                                             field=f"{field}.loop"))


def from_words(words: list[str], base_dir: Any, field: str = "schedule") -> ir.Schedule | None:
    """``FILE [linear] [loop]`` (tevc, ns events; None for ``none``: the schedule ends)."""
    usage = "takes FILE [linear] [loop], or none"
    if words == ["none"]:
        return None
    if not words or len(words) > 3 or any(w not in ("linear", "step", "loop", "noloop")
                                          for w in words[1:]):
        raise SpecError(usage, field=field)
    return spec({"csv": words[0], "interpolate": "linear" if "linear" in words[1:] else "step",
                 "loop": "loop" in words[1:]}, base_dir, field)


def plain(s: ir.Schedule | None) -> dict[str, Any] | None:
    """A schedule as an event carries it (JSON)."""
    if s is None:
        return None
    return {"file": s.file, "times_s": list(s.times_s), "linear": s.linear, "loop": s.loop,
            **{c: list(v) for c in ("delay_s", "bandwidth_bps", "loss")
               if (v := getattr(s, c)) is not None}}
