"""Latency matrices and gateway mode: what a LAN's per-pair channels are.

A *matrix* LAN gives every ordered pair of its members (rows = sender, columns =
receiver, both in the LAN's ``nodes`` order) its own one-way delay and optionally
bandwidth, loss, jitter, duplicate and corrupt, as hitbox's point-to-point mode did; the
diagonal is 0.  It comes inline (lists of rows, each cell with the usual units: ``10ms``,
``100Mb``, ``0.01``) or from a CSV file (:func:`read_csv`).  A *gateway* LAN shapes only
the frames to (and/or from) one member, hitbox's gateway mode; host-to-host frames are untouched.
Both become :class:`~wanlab.model.ir.LanPair` channels, here and nowhere else.

The CSV form (docs/yaml.md): one block per quantity; a block starts with a header row
whose first cell is a quantity (``delay``, ``bandwidth``, ``loss``, ``jitter``, ``duplicate``
or ``corrupt``) and whose other cells are the
LAN's nodes in order; then one row per node, its name first, then its cells.  Blank
lines and lines starting with ``#`` are ignored; ``delay`` is required::

    # one-way delays
    delay, a,    b,    c
    a,     0,    10ms, 20ms
    b,     10ms, 0,    30ms
    c,     20ms, 30ms, 0
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from wanlab.errors import SpecError
from wanlab.frontends import units
from wanlab.model import ir

QUANTITIES = ("delay", "bandwidth", "loss", "jitter", "duplicate", "corrupt")
DIRECTIONS = ("to", "from", "both")
# A matrix file is read whole; this bounds it (a 1000-node matrix of "123.456ms" cells is
# about 10 MB).
MAX_CSV_BYTES = 16 * 1024 * 1024


def _cell(q: str, value: Any, field: str, err: Callable[..., SpecError]) -> float | int:
    """One cell of quantity ``q``; a delay other than 0 must carry a unit."""
    try:
        if q == "delay":
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value != 0:
                raise SpecError(f"delay {value!r} has no unit; write e.g. {value}ms",
                                field=field)
            if isinstance(value, str) and value.strip() and \
                    value.strip().replace(".", "", 1).isdigit() and float(value) != 0:
                raise SpecError(f"delay {value.strip()!r} has no unit; write e.g. "
                                f"{value.strip()}ms", field=field)
            return units.parse_delay(value, field=field)
        if q == "bandwidth":
            return units.parse_bandwidth(value, field=field)
        if q == "jitter":
            return units.parse_delay(value, field=field, what="jitter")
        return units.parse_loss(value, field=field)
    except SpecError as e:
        raise err(e.message, e.field or field) from None


def pairs_from_rows(nodes: Sequence[str], rows: Mapping[str, Any], *,
                    err: Callable[..., SpecError] | None = None,
                    where: str = "matrix") -> tuple[ir.LanPair, ...]:
    """The channels of a matrix given as ``{quantity: [[cell, ...], ...]}``: shape N x N,
    0 on the diagonal, units checked; errors name ``where.quantity[i][j]``."""
    def default_err(msg: str, field: str | None = None, line: int | None = None):
        return SpecError(msg, field=field, line=line)
    err = err or default_err
    n = len(nodes)
    unknown = [k for k in rows if k not in QUANTITIES]
    if unknown:
        raise err(f"unknown matrix {unknown[0]!r}; matrices are {', '.join(QUANTITIES)}",
                  f"{where}.{unknown[0]}")
    if "delay" not in rows:
        raise err("a matrix needs at least a delay matrix", f"{where}.delay")
    values: dict[str, list[list[float | int]]] = {}
    for q in QUANTITIES:
        if q not in rows:
            continue
        m = rows[q]
        if not isinstance(m, (list, tuple)) or len(m) != n:
            got = len(m) if isinstance(m, (list, tuple)) else type(m).__name__
            raise err(f"the {q} matrix must have {n} rows (one per node: "
                      f"{', '.join(nodes)}), got {got}", f"{where}.{q}")
        out = []
        for i, row in enumerate(m):
            if not isinstance(row, (list, tuple)) or len(row) != n:
                got = len(row) if isinstance(row, (list, tuple)) else type(row).__name__
                raise err(f"row {i} ({nodes[i]}) of the {q} matrix must have {n} cells, "
                          f"got {got}", f"{where}.{q}[{i}]")
            cells = [_cell(q, v, f"{where}.{q}[{i}][{j}]", err) for j, v in enumerate(row)]
            if cells[i] != 0:
                raise err(f"the diagonal must be 0 ({nodes[i]} to itself), got {row[i]!r}",
                          f"{where}.{q}[{i}][{i}]")
            out.append(cells)
        values[q] = out
    pairs = []
    for i, a in enumerate(nodes):
        for j, b in enumerate(nodes):
            if i == j:
                continue
            p = ir.LinkParams(delay_s=float(values["delay"][i][j]),
                              bandwidth_bps=int(values["bandwidth"][i][j])
                              if "bandwidth" in values else 0,
                              loss=float(values["loss"][i][j]) if "loss" in values else 0.0,
                              jitter_s=float(values["jitter"][i][j])
                              if "jitter" in values else 0.0,
                              duplicate=float(values["duplicate"][i][j])
                              if "duplicate" in values else 0.0,
                              corrupt=float(values["corrupt"][i][j])
                              if "corrupt" in values else 0.0)
            pairs.append(ir.LanPair(src=a, dst=b, params=p))
    return tuple(pairs)


def csv_path(name: str, base_dir: Path | None) -> Path:
    """Where ``matrix: {csv: NAME}`` points: a relative path, resolved against the spec
    file's folder ``base_dir`` and staying inside it (a spec may come from someone else:
    it must not make wanlab read, as root, a file it could not name otherwise). With no
    ``base_dir`` (Python code calling the builder directly) the path is taken as given."""
    p = Path(name)
    if base_dir is None:
        return p
    if p.is_absolute() or ".." in p.parts:
        raise SpecError(f"the matrix file {name!r} must be a relative path inside the spec "
                        f"file's folder (no '..', not absolute)", field="matrix.csv")
    base = base_dir.resolve()
    full = (base / p).resolve()
    if not full.is_relative_to(base):
        raise SpecError(f"the matrix file {name!r} leads outside the spec file's folder "
                        f"(a symbolic link?)", field="matrix.csv")
    return full


def read_csv(nodes: Sequence[str], path: Path, *, where: str = "matrix.csv"
             ) -> tuple[ir.LanPair, ...]:
    """The channels of a matrix CSV file (format in the module docstring); errors name
    the file and line."""
    display = str(path)

    def fail(msg: str, field: str | None = None, line: int | None = None) -> SpecError:
        return SpecError(msg, file=display, line=line, field=field)
    try:
        if not path.is_file():
            raise fail("no such matrix file (a relative path is relative to the spec file)")
        if path.stat().st_size > MAX_CSV_BYTES:
            raise fail(f"matrix file larger than {MAX_CSV_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise fail(f"cannot read the matrix file: {e}") from None
    blocks: dict[str, list[list[str]]] = {}
    lines: dict[str, list[int]] = {}
    current: str | None = None
    for lineno, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        cells = [c.strip() for c in row]
        if not any(cells) or cells[0].startswith("#"):
            continue
        if cells[0] in QUANTITIES:
            q = cells[0]
            if q in blocks:
                raise fail(f"a second {q} block", line=lineno)
            if cells[1:] != list(nodes):
                raise fail(f"the {q} header must list the LAN's nodes in order "
                           f"({', '.join(nodes)}), got {', '.join(cells[1:])}", line=lineno)
            blocks[q], lines[q], current = [], [], q
            continue
        if current is None:
            raise fail(f"expected a header row starting with one of "
                       f"{', '.join(QUANTITIES)}, got {cells[0]!r}", line=lineno)
        k = len(blocks[current])
        if k >= len(nodes):
            raise fail(f"the {current} block has more rows than nodes ({len(nodes)})",
                       line=lineno)
        if cells[0] != nodes[k]:
            raise fail(f"row {k} of the {current} block must start with {nodes[k]!r}, "
                       f"got {cells[0]!r}", line=lineno)
        blocks[current].append(cells[1:])
        lines[current].append(lineno)

    def located(msg: str, field: str | None = None, line: int | None = None) -> SpecError:
        # field is "<where>.<q>[i][j]": point at row i's line of block q
        if field and line is None:
            for q in blocks:
                pre = f"{where}.{q}["
                if field.startswith(pre):
                    try:
                        i = int(field[len(pre):].split("]", 1)[0])
                        line = lines[q][i]
                    except (ValueError, IndexError):
                        line = None
        return fail(msg, field, line)
    if "delay" not in blocks:
        raise fail("the matrix file has no delay block (a header row 'delay, <nodes...>')")
    for q, rows in blocks.items():
        if len(rows) != len(nodes):
            raise fail(f"the {q} block has {len(rows)} rows, expected {len(nodes)} "
                       f"({', '.join(nodes)})", line=lines[q][-1] if lines[q] else None)
    return pairs_from_rows(nodes, blocks, err=located, where=where)


def gateway_pairs(nodes: Sequence[str], gateway: str, params: ir.LinkParams,
                  direction: str = "to") -> tuple[ir.LanPair, ...]:
    """Gateway mode: ``params`` on the frames every other member sends to ``gateway``
    (``to``, what hitbox did), on those it sends them (``from``), or both."""
    if gateway not in nodes:
        raise SpecError(f"gateway {gateway!r} is not a member of the LAN "
                        f"({', '.join(nodes)})", field="gateway.node")
    if direction not in DIRECTIONS:
        raise SpecError(f"direction {direction!r} unknown; use one of "
                        f"{', '.join(DIRECTIONS)}", field="gateway.direction")
    out = []
    for n in nodes:
        if n == gateway:
            continue
        if direction in ("to", "both"):
            out.append(ir.LanPair(src=n, dst=gateway, params=params))
        if direction in ("from", "both"):
            out.append(ir.LanPair(src=gateway, dst=n, params=params))
    return tuple(out)
