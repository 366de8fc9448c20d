"""Topology datasets as experiments: GML and GraphML maps, and the maps topohub ships.

One router per vertex, one link per edge (docs/topologies.md). Where both ends of an
edge have coordinates, the link's one-way delay is their great-circle distance at 2/3 of
the speed of light (light in fibre) and its cost, for OSPF, that distance in km (so OSPF
prefers the shortest path, as latency-based weights do); an edge whose map gives its
capacity keeps it as the link's bandwidth. ``hosts: N`` hangs N hosts off every router.

Read from:

* a GML or GraphML file (Topology Zoo's attributes: ``label``, ``Latitude``,
  ``Longitude``, ``LinkSpeedRaw`` in bit/s; also ``lat``/``lon``, ``capacity``,
  ``bandwidth``), through NetworkX;
* ``zoo:NAME``: a map of the topohub package, ``NAME`` a Topology Zoo name (``Abilene``)
  or a key of topohub's (``sndlib/polska``, ``caida/2024-08/1103``).

``wanlab create zoo:NAME`` (and ``parse``, ``run``) takes template parameters:
``-p ROUTING=ospf`` (default static) and ``-p HOSTS=1`` (default 0). In YAML,
``topology: {gml: FILE}`` (or ``graphml:``, ``zoo:``) with ``hosts``, ``bandwidth``,
``delay`` (for edges without coordinates), and the file's own ``routing:``.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wanlab.errors import SpecError
from wanlab.frontends import bounds
from wanlab.frontends.builder import ExperimentBuilder
from wanlab.model import ir

EARTH_RADIUS_KM = 6371.0
FIBRE_KM_S = 299_792.458 * 2 / 3          # light in fibre: 2/3 c
_ZOO_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,63}){0,2}$")
_GROUPS = ("topozoo", "sndlib", "caida")
KEYS = ("gml", "graphml", "zoo", "hosts", "bandwidth", "delay")
# a map file's bounds, checked before it is parsed (topohub's largest has 3 815 vertices)
MAX_BYTES = 16 << 20
MOST_VERTICES = 20_000
MOST_EDGES = 100_000


@dataclass(frozen=True)
class Vertex:
    name: str
    lat: float | None
    lon: float | None


@dataclass(frozen=True)
class Edge:
    a: str
    b: str
    capacity_bps: float | None


@dataclass(frozen=True)
class Map:
    title: str
    vertices: tuple[Vertex, ...]
    edges: tuple[Edge, ...]
    skipped_loops: int = 0


def great_circle_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """The distance between two points of the earth (a sphere of radius 6371 km)."""
    r = math.radians
    c = (math.sin(r(lat1)) * math.sin(r(lat2))
         + math.cos(r(lat1)) * math.cos(r(lat2)) * math.cos(r(lon2 - lon1)))
    return EARTH_RADIUS_KM * math.acos(max(-1.0, min(1.0, c)))


def _number(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _node_names(labels: list[str]) -> list[str]:
    """Lower-case IR names for the vertices' labels, unique (``new-york``, ``n7``)."""
    out: list[str] = []
    seen: set[str] = set()
    for i, raw in enumerate(labels):
        s = re.sub(r"[^a-z0-9-]+", "-", str(raw).lower()).strip("-")
        s = re.sub(r"-{2,}", "-", re.sub(r"^[^a-z]+", "", s))[:28].rstrip("-") or f"n{i}"
        name, k = s, 2
        while name in seen:
            name, k = f"{s}-{k}", k + 1
        seen.add(name)
        out.append(name)
    return out


def from_networkx(g: Any, title: str) -> Map:
    """A :class:`Map` of a NetworkX graph with Topology Zoo's (or topohub's) attributes."""
    ids = list(g.nodes)
    attrs = [g.nodes[v] for v in ids]
    names = _node_names([a.get("label") or a.get("name") or str(v)
                         for v, a in zip(ids, attrs, strict=True)])
    by_id = dict(zip(ids, names, strict=True))
    vertices = []
    for name, a in zip(names, attrs, strict=True):
        lat = _number(a.get("Latitude", a.get("lat")))
        lon = _number(a.get("Longitude", a.get("lon")))
        pos = a.get("pos")
        if (lat is None or lon is None) and isinstance(pos, (list, tuple)) and len(pos) == 2:
            lon, lat = _number(pos[0]), _number(pos[1])      # topohub: (longitude, latitude)
        ok = lat is not None and lon is not None and abs(lat) <= 90 and abs(lon) <= 180
        vertices.append(Vertex(name, lat if ok else None, lon if ok else None))
    edges, loops = [], 0
    for u, v, a in g.edges(data=True):
        if u == v:
            loops += 1
            continue
        cap = None
        for k in ("LinkSpeedRaw", "capacity", "bandwidth"):
            x = _number(a.get(k))
            if x is not None and x > 0:
                cap = x
                break
        edges.append(Edge(by_id[u], by_id[v], cap))
    return Map(title, tuple(vertices), tuple(edges), loops)


def _prescan(path: str, fmt: str, shown: str) -> None:
    """Refuse, before NetworkX reads it, a file larger than :data:`MAX_BYTES`, a GraphML
    file declaring entities or a DTD (expansion, external files), and a map of more than
    :data:`MOST_VERTICES` vertices or :data:`MOST_EDGES` edges, counted by a streaming scan
    in constant memory."""
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        raise SpecError("no such file", file=shown) from None
    except OSError as e:
        raise SpecError(f"cannot read: {e}", file=shown) from None
    if size > MAX_BYTES:
        raise SpecError(f"{size} bytes: a map file has at most {MAX_BYTES}", file=shown)
    counts = {"node": 0, "edge": 0}
    if fmt == "graphml":
        import xml.parsers.expat

        def refuse(*_a: Any) -> None:
            raise SpecError("a GraphML file with a DTD or entity declarations is not read "
                            "(entities could expand without bound or name host files)",
                            file=shown)

        def start(tag: str, _attrs: Any) -> None:
            kind = tag.rsplit(" ", 1)[-1]
            if kind in counts:
                counts[kind] += 1
        p = xml.parsers.expat.ParserCreate(namespace_separator=" ")
        p.StartDoctypeDeclHandler = refuse
        p.EntityDeclHandler = refuse
        p.StartElementHandler = start
        try:
            with open(path, "rb") as f:
                while chunk := f.read(1 << 16):
                    p.Parse(chunk, False)
                    _most(counts, shown)
                p.Parse(b"", True)
        except xml.parsers.expat.ExpatError as e:
            raise SpecError(f"not a GRAPHML graph: {e}", file=shown) from None
    else:
        word = re.compile(rb"\b(node|edge)\s*\[")
        with open(path, "rb") as f:
            tail = b""
            while chunk := f.read(1 << 16):
                text = tail + chunk
                cut = max(0, len(text) - 16)       # a word split between reads: next time
                for m in word.finditer(text, 0, cut):
                    counts[m.group(1).decode()] += 1
                tail = text[cut:]
                _most(counts, shown)
            for m in word.finditer(tail):
                counts[m.group(1).decode()] += 1
    _most(counts, shown)


def _most(counts: dict[str, int], shown: str) -> None:
    for kind, most in (("node", MOST_VERTICES), ("edge", MOST_EDGES)):
        if counts[kind] > most:
            raise SpecError(f"more than {most} {kind}s: a map has at most {MOST_VERTICES} "
                            f"vertices and {MOST_EDGES} edges", file=shown)


def read_file(path: str, fmt: str, file: str | None = None) -> Map:
    """A GML (``fmt`` "gml") or GraphML ("graphml") file's map, its size bounded first."""
    import networkx as nx

    shown = file or path
    _prescan(path, fmt, shown)
    try:
        if fmt == "gml":
            g = nx.read_gml(path, label="id")
        else:
            g = nx.read_graphml(path)
    except FileNotFoundError:
        raise SpecError("no such file", file=shown) from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"cannot read: {e}", file=shown) from None
    except Exception as e:  # noqa: BLE001 - NetworkX's parse errors have no common base
        raise SpecError(f"not a {fmt.upper()} graph: {e}", file=shown) from None
    return from_networkx(g, Path(path).stem)


def read_zoo(key: str, file: str | None = None) -> Map:
    """A map of topohub's: ``Abilene`` (Topology Zoo) or ``GROUP/NAME``."""
    import topohub

    if not isinstance(key, str) or not _ZOO_KEY.match(key):
        raise SpecError(f"{key!r} is not a map name (e.g. zoo:Abilene, zoo:sndlib/polska)",
                        file=file)
    tries = [key] if "/" in key else [f"{g}/{key}" for g in _GROUPS]
    for k in tries:
        try:
            doc = topohub.get(k)
        except (KeyError, FileNotFoundError, OSError, ValueError):
            continue
        import networkx as nx
        g = nx.node_link_graph(doc, edges="edges")
        return from_networkx(g, k.rsplit("/", 1)[-1])
    raise SpecError(f"no map {key!r} in topohub (its Topology Zoo, SNDlib and CAIDA "
                    f"maps: zoo:Abilene, zoo:sndlib/polska, zoo:caida/2024-08/1103)",
                    file=file)


def declare(b: ExperimentBuilder, m: Map, *, hosts: int = 0, bandwidth: Any = 0,
            delay: Any = 0, source: ir.Source | None = None) -> list[str]:
    """Declare ``m``'s routers, links and hosts on ``b``; the routers' names."""
    src = source or ir.Source(None, None)
    bounds.check({"nodes": len(m.vertices) * (1 + hosts),
                  "links": len(m.edges) + len(m.vertices) * hosts}, src.file or "<topology>")
    where = {v.name: v for v in m.vertices}
    for v in m.vertices:
        b.node(v.name, source=src)
    guessed = 0
    for i, e in enumerate(m.edges):
        va, vb = where[e.a], where[e.b]
        if None in (va.lat, va.lon, vb.lat, vb.lon):
            d, cost = delay, 1
            guessed += 1
        else:
            km = great_circle_km(va.lat, va.lon, vb.lat, vb.lon)   # type: ignore[arg-type]
            d, cost = f"{km / FIBRE_KM_S * 1000:.6f}ms", max(1, round(km))
        b.link(e.a, e.b, bandwidth=e.capacity_bps if e.capacity_bps else bandwidth,
               delay=d, cost=cost, name=f"l{i}-{e.a}-{e.b}"[:32].rstrip("-"), source=src)
    for v in m.vertices:
        for k in range(1, hosts + 1):
            h = b.node(f"{v.name}-h{k}", source=src)
            b.link(v.name, h, bandwidth=bandwidth, name=f"{h}-up"[:32], source=src)
    if guessed:
        b._warn(f"topology {m.title}: {guessed} of {len(m.edges)} edges join a vertex "
                f"without coordinates; their delay is {delay or 0} (topology.delay)", src)
    if m.skipped_loops:
        b._warn(f"topology {m.title}: {m.skipped_loops} edges from a vertex to itself are "
                f"left out", src)
    return [v.name for v in m.vertices]


def read_spec(spec: Any, base_dir: str | None, file: str | None) -> Map:
    """The map of a YAML ``topology:`` entry: ``{gml: FILE}``, ``{graphml: FILE}`` or
    ``{zoo: NAME}``; a file is relative to the spec's folder and inside it."""
    given = [k for k in ("gml", "graphml", "zoo") if k in spec]
    if len(given) != 1:
        raise SpecError("topology: give exactly one of gml, graphml, zoo", file=file,
                        field="topology")
    kind = given[0]
    value = spec[kind]
    if not isinstance(value, str) or not value:
        raise SpecError(f"topology.{kind}: a file name or map name", file=file,
                        field=f"topology.{kind}")
    if kind == "zoo":
        return read_zoo(value, file)
    if base_dir is None:
        raise SpecError(f"topology.{kind}: a file needs the spec to be a file", file=file)
    if os.path.isabs(value) or ".." in Path(value).parts:
        raise SpecError(f"topology.{kind}: {value!r} must be a path inside the spec's "
                        f"folder (no '..', not absolute)", file=file, field=f"topology.{kind}")
    path = os.path.join(base_dir, value)
    real = os.path.realpath(path)
    if not real.startswith(os.path.realpath(base_dir) + os.sep):
        raise SpecError(f"topology.{kind}: {value!r} leads out of the spec's folder",
                        file=file, field=f"topology.{kind}")
    if not os.path.isfile(real):
        raise SpecError(f"no such file {value!r} (beside the spec)", file=file,
                        field=f"topology.{kind}")
    return read_file(real, kind, file=path)


def hosts_count(v: Any, file: str | None = None, field: str = "hosts") -> int:
    try:
        n = int(str(v))
    except ValueError:
        n = -1
    if isinstance(v, bool) or n < 0 or n > 16:
        raise SpecError(f"hosts per router is a whole number from 0 to 16, not {v!r}",
                        file=file, field=field)
    return n


def load_zoo(arg: str, params: dict[str, str] | None = None) -> ir.Experiment:
    """``zoo:NAME`` as an experiment: template parameters ROUTING (static) and HOSTS (0)."""
    key = arg[len("zoo:"):]
    m = read_zoo(key, file=arg)
    name = re.sub(r"[^A-Za-z0-9-]+", "-", m.title).strip("-")[:32] or "zoo"
    if not name[0].isalpha():
        name = "zoo-" + name[:28]
    b = ExperimentBuilder(name, params=params or {})
    routing = b.parameter("ROUTING", "static", "static or ospf")
    hosts = hosts_count(b.parameter("HOSTS", "0", "hosts per router"), arg, "HOSTS")
    try:
        b.routing(routing)
    except SpecError as e:
        raise SpecError(e.message, file=arg, field="ROUTING") from None
    if b.rtproto not in ("static", "ospf"):
        raise SpecError(f"ROUTING {routing!r}: a map runs with static or ospf routing",
                        file=arg, field="ROUTING")
    declare(b, m, hosts=hosts, source=ir.Source(arg, None))
    return b.build_from(arg)
