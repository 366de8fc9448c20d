"""Unit parsing shared by every front end (ns-2 Tcl, YAML, Python builder).

ns-2 conventions:

* bandwidth: ``10Mb``, ``1.5Mb``, ``100kb``, ``1Gb``, ``56kb``, ``10Mbps``,
  ``100kbps``, ``1.5Gb``, ``10Mbit``; a plain number is bit/s. Prefixes are
  decimal (k = 1e3, M = 1e6, G = 1e9, T = 1e12, case-insensitive); a final
  capital ``B`` means bytes (``1MB`` = 8 Mbit/s), as in ns-2. ``0`` means
  unlimited (no shaping).
* delay / time: ``20ms``, ``1.5s``, ``500us``, ``10ns``; a plain number is seconds.
* loss: a probability ``0.01`` (or a percentage ``1%``).

Every function raises :class:`~wanlab.errors.SpecError` with a message that
shows an accepted example (a negative value says so); the caller adds
file/line or field path.  :func:`parse_bandwidth` and :func:`parse_delay`
also take ``warn``, a callable given a note for values that are valid but
easy to misread: bandwidth 0 (unlimited), a plain-number bandwidth below
100 kbit/s (Mbit/s likely meant) and a delay without a unit (seconds, where
ns-2 users often mean milliseconds); :func:`delay_note` and
:func:`bandwidth_note` give the same notes to front ends that check values
themselves (YAML numbers).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from wanlab.errors import SpecError
from wanlab.model import ir

_NUM = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_BW_RE = re.compile(r"^\s*" + _NUM + r"\s*([kKmMgGtT]?)(b|B|bit|bits|Bytes|bytes)?"
                    r"(ps|/s)?\s*$")
_TIME_RE = re.compile(r"^\s*" + _NUM + r"\s*(s|sec|ms|us|µs|ns)?\s*$")
_PREFIX = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_TIME_UNITS = {None: 1.0, "s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6,
               "ns": 1e-9}


Warn = Callable[[str], None] | None


def _err(msg: str, file: str | None, line: int | None, field: str | None) -> SpecError:
    return SpecError(msg, file=file, line=line, field=field)


def _negative(value: object) -> bool:
    return isinstance(value, str) and value.strip().startswith("-")


def parse_bandwidth(value: object, *, file: str | None = None, line: int | None = None,
                    field: str | None = None, warn: Warn = None) -> int:
    """Bandwidth in bit/s (int). ``0`` means unlimited."""
    if isinstance(value, bool):
        raise _err(f"bandwidth {value!r} is not a bandwidth", file, line, field)
    if _negative(value):
        raise _err(f"bandwidth {value!r} is negative; write e.g. 10Mb", file, line, field)
    if isinstance(value, (int, float)):
        bps = float(value)
    else:
        m = _BW_RE.match(str(value))
        if not m:
            raise _err(f"bandwidth {str(value)!r} not understood; write e.g. 10Mb, 1.5Gb, "
                       f"100kb, 56kbps, or a plain number of bit/s", file, line, field)
        bps = float(m.group(1)) * _PREFIX[m.group(2).lower()]
        if m.group(3) in ("B", "Bytes", "bytes"):
            bps *= 8
    if not math.isfinite(bps) or bps < 0:
        raise _err(f"bandwidth {value!r} must be a non-negative number", file, line, field)
    if bps == 0 and warn:
        warn(f"bandwidth {value}: 0 means unlimited (the link is not shaped)")
    elif warn and (note := bandwidth_note(value)):
        warn(note)
    return int(round(bps))


def _bare_number(value: object) -> str | None:
    """``value`` as text when it is a number written without a unit, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return f"{value:g}"
    text = str(value).strip()
    return text if re.fullmatch(_NUM, text) else None


# a bandwidth written as a plain number below this many bit/s is most likely meant in Mbit/s
BARE_BANDWIDTH_NOTE_BELOW = 100_000


def bandwidth_note(value: object) -> str | None:
    """A note for a plain-number bandwidth low enough to be a slip (``100``: 100 bit/s,
    where Mbit/s was likely meant), else None."""
    text = _bare_number(value)
    if text is None or not 0 < float(text) < BARE_BANDWIDTH_NOTE_BELOW:
        return None
    return (f"bandwidth {text} has no unit: read as {text} bit/s (write {text}Mb for "
            f"Mbit/s)")


def delay_note(value: object, what: str = "delay") -> str | None:
    """A note for a delay written as a plain number other than 0: ns-2 reads it as seconds,
    where Emulab users often mean milliseconds; else None."""
    text = _bare_number(value)
    if text is None or float(text) == 0:
        return None
    return (f"{what} {text} has no unit: ns-2 reads it as {float(text):g} seconds (write "
            f"{text}ms for milliseconds)")


def parse_delay(value: object, *, file: str | None = None, line: int | None = None,
                field: str | None = None, what: str = "delay", warn: Warn = None) -> float:
    """Delay or time in seconds (float)."""
    if isinstance(value, bool):
        raise _err(f"{what} {value!r} is not a {what}", file, line, field)
    if _negative(value):
        raise _err(f"{what} {value!r} is negative; write e.g. 20ms", file, line, field)
    if isinstance(value, (int, float)):
        s = float(value)
    else:
        m = _TIME_RE.match(str(value))
        if not m:
            raise _err(f"{what} {str(value)!r} not understood; write e.g. 20ms, 1.5s, "
                       f"500us, or a plain number of seconds", file, line, field)
        s = float(m.group(1)) * _TIME_UNITS[m.group(2)]
    if warn and math.isfinite(s) and s > 0 and (note := delay_note(value, what)):
        warn(note)
    if not math.isfinite(s) or s < 0:
        raise _err(f"{what} {value!r} must be a non-negative number", file, line, field)
    return s


def parse_time(value: object, **kw) -> float:
    """An event time in seconds after t = 0 (same syntax as a delay)."""
    return parse_delay(value, what="time", **kw)


def parse_loss(value: object, *, file: str | None = None, line: int | None = None,
               field: str | None = None) -> float:
    """A loss probability in 0..1 (``0.01``; ``1%`` is accepted too)."""
    if isinstance(value, bool):
        raise _err(f"loss {value!r} is not a probability", file, line, field)
    try:
        if isinstance(value, str) and value.strip().endswith("%"):
            p = float(value.strip()[:-1]) / 100
        else:
            p = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise _err(f"loss {value!r} not understood; write a probability such as 0.01",
                   file, line, field) from None
    if p < 0:
        raise _err(f"loss {value!r} is negative; write a probability such as 0.01",
                   file, line, field)
    if not (0.0 <= p <= 1.0):
        raise _err(f"loss {value!r} is not a probability in 0..1", file, line, field)
    return p


_DURATION_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0,
                   "d": 86400.0}


def parse_duration(value: object, what: str, *, file: str | None = None,
                   line: int | None = None, field: str | None = None) -> float:
    """A positive duration: seconds, or a number with s, min, h or d (``30s``, ``2h``)."""
    import re
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-z]*)\s*",
                     str(value)) if not isinstance(value, bool) else None
    if m is None or m.group(2) not in _DURATION_UNITS:
        raise _err(f"{what} {value!r} is not a duration (seconds, or a number with s, min, h "
                   f"or d)", file, line, field)
    v = float(m.group(1)) * _DURATION_UNITS[m.group(2)]
    if not 0 < v < float("inf"):
        raise _err(f"{what} {value!r} must be positive", file, line, field)
    return v


def parse_int(value: object, what: str, *, file: str | None = None, line: int | None = None,
              field: str | None = None) -> int:
    try:
        f = float(value)  # type: ignore[arg-type]
        if isinstance(value, bool) or f != int(f):
            raise ValueError
        return int(f)
    except (TypeError, ValueError, OverflowError):
        raise _err(f"{what} {value!r} must be an integer", file, line, field) from None


def parse_float(value: object, what: str, *, file: str | None = None,
                line: int | None = None, field: str | None = None) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        f = float(value)  # type: ignore[arg-type]
        if not math.isfinite(f):
            raise ValueError
        return f
    except (TypeError, ValueError):
        raise _err(f"{what} {value!r} must be a number", file, line, field) from None


def parse_bool(value: object, what: str, *, file: str | None = None,
               line: int | None = None, field: str | None = None) -> bool:
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    raise _err(f"{what} {value!r} must be true/false (or 1/0)", file, line, field)


# -- node resources (cgroups) ------------------------------------------------------------
_MEM_RE = re.compile(r"^\s*" + _NUM + r"\s*([kKmMgGtT]?)(i?[bB])?\s*$")
_MEM_PREFIX = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_CPUSET_RE = re.compile(r"^\s*\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*\s*$")


def parse_cores(value: object, *, file: str | None = None, line: int | None = None,
                field: str | None = None) -> float:
    """A CPU share in cores (``0.25`` = a quarter of one core, ``2`` = two cores); > 0."""
    if _negative(value):
        raise _err(f"cpu {value!r} is negative; write a number of cores such as 0.25",
                   file, line, field)
    try:
        if isinstance(value, bool):
            raise ValueError
        c = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise _err(f"cpu {value!r} not understood; write a number of cores such as 0.25",
                   file, line, field) from None
    if c < 0:
        raise _err(f"cpu {value!r} is negative; write a number of cores such as 0.25",
                   file, line, field)
    if not math.isfinite(c) or c <= 0:
        raise _err(f"cpu {value!r} must be a positive number of cores such as 0.25",
                   file, line, field)
    return c


def parse_memory(value: object, *, file: str | None = None, line: int | None = None,
                 field: str | None = None) -> int:
    """Memory in bytes (int): ``64MB``, ``512k``, ``1GiB``, ``1.5G``; prefixes are binary
    (k = 1024, as for RAM), ``B``/``iB`` optional; a plain number is bytes."""
    if isinstance(value, bool):
        raise _err(f"memory {value!r} is not an amount of memory", file, line, field)
    if _negative(value):
        raise _err(f"memory {value!r} is negative; write e.g. 64MB", file, line, field)
    if isinstance(value, (int, float)):
        b = float(value)
    else:
        m = _MEM_RE.match(str(value))
        if not m:
            raise _err(f"memory {str(value)!r} not understood; write e.g. 64MB, 512KB, 1GB "
                       f"(binary prefixes) or a plain number of bytes", file, line, field)
        b = float(m.group(1)) * _MEM_PREFIX[m.group(2).lower()]
    if b < 0:
        raise _err(f"memory {value!r} is negative; write e.g. 64MB", file, line, field)
    if not math.isfinite(b) or b <= 0:
        raise _err(f"memory {value!r} must be a positive amount such as 64MB", file, line,
                   field)
    return int(b)


def parse_cpuset(value: object, *, file: str | None = None, line: int | None = None,
                 field: str | None = None) -> str:
    """A list of CPU numbers to pin to (``"0"``, ``"0-1"``, ``"0,2-3"``; an int is one
    CPU), in the kernel's cpuset syntax, spaces removed."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _err(f"cpus {value!r} is not a CPU list; write e.g. \"0\" or \"0-1,3\"",
                   file, line, field)
    s = str(value)
    if not _CPUSET_RE.match(s):
        raise _err(f"cpus {s!r} not understood; write CPU numbers such as \"0\", \"0-1\" or "
                   f"\"0,2-3\"", file, line, field)
    s = re.sub(r"\s+", "", s)
    for part in s.split(","):
        lo, _, hi = part.partition("-")
        if hi and int(hi) < int(lo):
            raise _err(f"cpus {s!r}: range {part} goes backwards", file, line, field)
    return s


MAX_ENGINE_THREADS = 64          # the engine's --threads limit


def parse_engine_cores(v: Any, *, field: str = "cores", file: str | None = None,
                       line: int | None = None) -> int:
    """CPUs reserved for the engine: 0 to one fewer than this machine's (checked here, so
    the error has the description's line)."""
    try:
        n = int(str(v).strip()) if not isinstance(v, (bool, float)) else None
    except ValueError:
        n = None
    try:
        ir.check_engine_cores(v if n is None else n, None, field)
    except SpecError as e:
        raise SpecError(e.message, file=file, line=line, field=field) from None
    return n  # type: ignore[return-value]


def parse_engine_threads(v: Any, *, field: str = "threads", file: str | None = None,
                         line: int | None = None) -> int:
    """An engine thread count: 1..64, or ``auto`` (stored as -1)."""
    if isinstance(v, str) and v.strip().lower() == "auto":
        return -1
    try:
        n = int(str(v).strip()) if not isinstance(v, bool) else None
    except ValueError:
        n = None
    if n is None or not 1 <= n <= MAX_ENGINE_THREADS:
        raise SpecError(f"engine threads {v!r}: a number from 1 to {MAX_ENGINE_THREADS}, "
                        f"or auto", file=file, line=line, field=field)
    return n
