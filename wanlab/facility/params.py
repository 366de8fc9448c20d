"""Template parameter values from the command line and from CSV files.

``-p NAME=VALUE`` (create, run, batch submit) gives one value; in a sweep ``-p
NAME=V1,V2,V3`` gives the values of one axis, and the axes' cartesian product are the
sweep's points. ``--rows FILE.csv`` gives the points instead: a header of parameter names,
one point per row. Names are checked here (they become environment variables in nodes);
whether the template defines them is the front end's check.
"""

from __future__ import annotations

import csv
import itertools

from wanlab.errors import SpecError, WanlabError
from wanlab.model.ir import check_parameter_name

MAX_POINTS = 10_000


def _split(spec: str) -> tuple[str, str]:
    if "=" not in spec:
        raise WanlabError(f"-p {spec!r}: expected NAME=VALUE")
    name, value = spec.split("=", 1)
    try:
        check_parameter_name(name.strip())
    except SpecError as e:
        raise WanlabError(f"-p {spec!r}: {e.message}") from None
    return name.strip(), value


def values(specs: list[str] | None) -> dict[str, str]:
    """``["BW=10Mb", "DELAY=5ms"]`` -> ``{"BW": "10Mb", "DELAY": "5ms"}`` (a name once)."""
    out: dict[str, str] = {}
    for spec in specs or []:
        name, value = _split(spec)
        if name in out:
            raise WanlabError(f"-p {name} is given twice")
        out[name] = value
    return out


def axes(specs: list[str] | None) -> dict[str, list[str]]:
    """A sweep's ``-p NAME=V1,V2`` -> ``{"NAME": ["V1", "V2"]}`` (in the order given)."""
    out: dict[str, list[str]] = {}
    for name, value in values(specs).items():
        vs = [v.strip() for v in value.split(",")]
        if any(v == "" for v in vs):
            raise WanlabError(f"-p {name}={value}: an empty value in the list")
        if len(set(vs)) != len(vs):
            raise WanlabError(f"-p {name}={value}: a value is listed twice")
        out[name] = vs
    return out


def product(ax: dict[str, list[str]]) -> list[dict[str, str]]:
    """The cartesian product of the axes, first axis slowest."""
    names = list(ax)
    points = [dict(zip(names, combo, strict=True))
              for combo in itertools.product(*(ax[n] for n in names))]
    if len(points) > MAX_POINTS:
        raise WanlabError(f"the sweep has {len(points)} points (more than {MAX_POINTS})")
    return points


def rows(path: str, fixed: dict[str, list[str]] | None = None) -> list[dict[str, str]]:
    """The points of a CSV file: a header of parameter names, a point per row. ``fixed``
    (single-valued ``-p`` given with ``--rows``) is added to every row."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            for h in header:
                try:
                    check_parameter_name(h)
                except SpecError as e:
                    raise WanlabError(f"{path}:1: column {h!r}: {e.message}") from None
            out = []
            for i, r in enumerate(reader, start=2):
                if None in r or any(v is None or v.strip() == "" for v in r.values()):
                    raise WanlabError(f"{path}:{i}: every row needs a value in each of the "
                                      f"{len(header)} columns")
                out.append({k: v.strip() for k, v in r.items()})
    except OSError as e:
        raise WanlabError(f"--rows {path}: {e.strerror}") from None
    if not out:
        raise WanlabError(f"{path}: no rows (a header of parameter names, then a row per run)")
    if len(out) > MAX_POINTS:
        raise WanlabError(f"{path}: {len(out)} rows (more than {MAX_POINTS})")
    for name, vs in (fixed or {}).items():
        if len(vs) != 1:
            raise WanlabError(f"-p {name}: with --rows, -p gives one value for every row")
        if name in out[0]:
            raise WanlabError(f"-p {name}: also a column of {path}")
        for r in out:
            r[name] = vs[0]
    return out
