"""The YAML front end (docs/yaml.md; JSON Schema: schema/experiment.schema.json).

The file is checked against the JSON Schema (draft 2020-12) first, so an
unknown or misspelt key is an error naming its path
(``links[0].bandwith: unknown key (did you mean bandwidth?)``); then each
entry is declared through :class:`~wanlab.frontends.builder.ExperimentBuilder`, so
YAML, Python and ns-2 share units and semantics.  Errors cite the file and the
line of the offending entry; YAML syntax errors cite the line of the mistake.

Anchors and aliases are allowed, but their expansion is bounded: the composed
node graph is measured *before* any Python object is built, and a document
whose aliases would expand it beyond :func:`expansion_bound` nodes (an
"anchor bomb") or that refers to itself is refused with a clear error.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from wanlab.errors import SpecError
from wanlab.frontends import bounds, units
from wanlab.frontends import impair as impair_spec
from wanlab.frontends.builder import ExperimentBuilder, unknown_key
from wanlab.frontends.ns import sanitize_name
from wanlab.model import ir

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schema" / "experiment.schema.json"


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


class _Map(dict):
    line: int | None = None
    key_lines: dict[str, int]


class _Seq(list):
    line: int | None = None
    item_lines: list[int]


class _Loader(yaml.SafeLoader):
    """SafeLoader that remembers the line of every mapping, key and list item."""

    def construct_mapping(self, node, deep=False):  # type: ignore[override]
        m = _Map(super().construct_mapping(node, deep=True))
        m.line = node.start_mark.line + 1
        m.key_lines = {}
        for k, _v in node.value:
            try:
                m.key_lines[str(self.construct_object(k))] = k.start_mark.line + 1
            except Exception:  # noqa: BLE001 - unhashable keys are reported by the schema
                pass
        return m

    def construct_sequence(self, node, deep=False):  # type: ignore[override]
        s = _Seq(super().construct_sequence(node, deep=True))
        s.line = node.start_mark.line + 1
        s.item_lines = [n.start_mark.line + 1 for n in node.value]
        return s


_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_mapping)
_Loader.add_constructor("tag:yaml.org,2002:seq", _Loader.construct_sequence)


def expansion_bound(composed: int) -> int:
    """How many nodes a document of ``composed`` distinct nodes may expand to."""
    return 10 * composed + 100_000


def _check_expansion(root: yaml.Node, file: str) -> None:
    """Refuse a node graph whose aliases expand it too far, or that contains itself."""
    size: dict[int, int] = {}            # id(node) -> expanded size
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        kids: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            kids = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            kids = [x for kv in node.value for x in kv]
        if done:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            continue
        if key in size:
            continue
        if key in on_path:
            raise SpecError("an alias refers to its own anchor (a recursive document)",
                            file=file, line=node.start_mark.line + 1)
        on_path.add(key)
        stack.append((node, True))
        for k in kids:
            if id(k) in on_path:
                raise SpecError("an alias refers to its own anchor (a recursive document)",
                                file=file, line=k.start_mark.line + 1)
            if id(k) not in size:
                stack.append((k, False))
    total, bound = size[id(root)], expansion_bound(len(size))
    if total > bound:
        raise SpecError(f"anchors and aliases expand this document to {total} nodes (more "
                        f"than {bound}); refusing it (an alias bomb?)", file=file)


_COUNTED = ("nodes", "links", "lans", "events")


def _precount(text: str, file: str) -> None:
    """With size bounds in force (:mod:`wanlab.frontends.bounds`): count the top-level
    lists first with libyaml's composer (a hundred times faster than the line-tracking
    loader below, and aliases are not expanded), so an oversized document is refused
    before it is read in earnest."""
    if not bounds.active() or not getattr(yaml, "__with_libyaml__", False):
        return
    try:
        root = yaml.compose(text, Loader=yaml.CSafeLoader)
    except yaml.YAMLError:
        return                      # the loader below reports it, with its line
    if isinstance(root, yaml.MappingNode):
        bounds.check({k.value: len(v.value) for k, v in root.value
                      if isinstance(k, yaml.ScalarNode) and k.value in _COUNTED
                      and isinstance(v, (yaml.SequenceNode, yaml.MappingNode))}, file)


def _compose_and_construct(text: str, file: str) -> Any:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, file)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _path_str(path: list[Any]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _path_of(field: str) -> list[Any]:
    """Inverse of :func:`_path_str`: ``matrix.delay[1][2]`` -> ``["matrix", "delay", 1, 2]``."""
    out: list[Any] = []
    for part in field.split("."):
        name, *idx = part.split("[")
        if name:
            out.append(name)
        out += [int(i.rstrip("]")) for i in idx if i.rstrip("]").isdigit()]
    return out


def _line_of(doc: Any, path: list[Any]) -> int | None:
    line = getattr(doc, "line", None)
    cur = doc
    for p in path:
        try:
            if isinstance(cur, _Map) and p in cur.key_lines:
                line = cur.key_lines[p]
            elif isinstance(cur, _Seq) and isinstance(p, int) and p < len(cur.item_lines):
                line = cur.item_lines[p]
            cur = cur[p]
        except (KeyError, IndexError, TypeError):
            break
    return line


def _schema_error(doc: Any, file: str) -> None:
    import jsonschema

    v = jsonschema.Draft202012Validator(schema())
    errors = list(v.iter_errors(doc))
    if not errors:
        return
    # the most specific error first (deepest path), then document order
    def best(e):
        while e.context:
            e = min(e.context, key=lambda c: (-len(c.absolute_path), c.validator == "type"))
        return e
    e = best(min(errors, key=lambda e: (-len(e.absolute_path), str(e.absolute_path))))
    path = list(e.absolute_path)
    if e.validator == "additionalProperties":
        allowed = list(e.schema.get("properties", {}))
        extra = [k for k in e.instance if k not in allowed]
        if extra:
            k = extra[0]
            raise SpecError(unknown_key(str(k), allowed), file=file,
                            line=_line_of(doc, path + [k]), field=_path_str(path + [k]))
    if e.validator == "required":
        msg = e.message.replace("is a required property", "is required")
    elif e.validator in ("oneOf", "anyOf"):
        msg = f"{e.instance!r} is not a valid entry here (see docs/yaml.md)"
    else:
        msg = e.message
    raise SpecError(msg, file=file, line=_line_of(doc, path), field=_path_str(path) or None)


def load_file(path: str | os.PathLike[str],
              params: dict[str, str] | None = None) -> ir.Experiment:
    """Read and validate a YAML experiment file; ``params`` override its ``parameters:``."""
    display = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError("no such file", file=display) from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"cannot read: {e}", file=display) from None
    return loads(text, file=display, default_name=sanitize_name(Path(display).stem),
                 params=params)


def loads(text: str, *, file: str = "<yaml>", default_name: str = "experiment",
          params: dict[str, str] | None = None) -> ir.Experiment:
    """Parse YAML text (``file`` is used in error messages)."""
    _precount(text, file)
    try:
        doc = _compose_and_construct(text, file)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise SpecError(f"YAML syntax error: {e.problem or e}", file=file,
                        line=mark.line + 1 if mark else None) from None
    except yaml.YAMLError as e:
        raise SpecError(f"YAML error: {e}", file=file) from None
    if not isinstance(doc, dict):
        raise SpecError("the file must be a YAML mapping (name:, nodes:, links: ...)", file=file)
    from wanlab.frontends import clab
    if clab.is_clab(doc):           # a containerlab topology file
        t = doc["topology"]
        bounds.check({k: len(v) for k in ("nodes", "links")
                      if isinstance(v := t.get(k), (list, dict))}, file)
        return clab.load(doc, file, default_name, lambda path: _line_of(doc, path))
    bounds.check({k: len(v) for k in _COUNTED
                  if isinstance(v := doc.get(k), (list, dict))}, file)
    values = _parameters(doc, file, params or {})
    _substitute(doc, {k: v for k, (_d, v, _desc) in values.items()}, file, [])
    _schema_error(doc, file)
    return _build(doc, file, default_name, values)


_REF = re.compile(r"\$\{([A-Za-z][A-Za-z0-9_]*)\}")


def _parameters(doc: dict[str, Any], file: str,
                params: dict[str, str]) -> dict[str, tuple[str, str, str]]:
    """``parameters:`` (``NAME: DEFAULT`` or ``NAME: {default:, description:}``) with the
    overrides applied: name -> (default, value, description), all text."""
    raw = doc.get("parameters") or {}
    if not isinstance(raw, dict):
        raise SpecError("parameters: must be a mapping of NAME: DEFAULT", file=file,
                        line=_line_of(doc, ["parameters"]), field="parameters")
    out = {}
    for name, spec in raw.items():
        line = _line_of(doc, ["parameters", name])
        if isinstance(spec, dict):
            extra = set(spec) - {"default", "description"}
            if extra or "default" not in spec:
                raise SpecError("a parameter is DEFAULT or {default: ..., description: ...}",
                                file=file, line=line, field=f"parameters.{name}")
            default, desc = spec["default"], spec.get("description", "")
        else:
            default, desc = spec, ""
        if isinstance(default, (dict, list)) or default is None:
            raise SpecError("a parameter's default is a number or text", file=file, line=line,
                            field=f"parameters.{name}")
        try:
            ir.check_parameter_name(str(name))
        except SpecError as e:
            raise SpecError(e.message, file=file, line=line, field=f"parameters.{name}") from None
        out[str(name)] = (_text(default), str(params.get(str(name), _text(default))),
                          str(desc))
    for k in params:
        if k not in out:
            raise SpecError(f"parameter {k!r} is not defined under parameters: (defined: "
                            f"{', '.join(out) or 'none'})", file=file, field="parameters")
    return out


def _text(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def _substitute(node: Any, values: dict[str, str], file: str, path: list[Any],
                root: Any = None) -> None:
    """Replace ``${NAME}`` in every string of the document (but ``parameters:`` itself),
    in place; a string that is only ``${NAME}`` takes the value's YAML type (a number stays
    a number)."""
    root = node if root is None else root
    items = (list(node.items()) if isinstance(node, dict) else
             list(enumerate(node)) if isinstance(node, list) else [])
    for k, v in items:
        if not path and k == "parameters":
            continue
        if isinstance(v, (dict, list)):
            _substitute(v, values, file, path + [k], root)
        elif isinstance(v, str) and "${" in v:
            for ref in _REF.findall(v):
                if ref not in values:
                    raise SpecError(f"${{{ref}}}: no such parameter (define it under "
                                    f"parameters:)", file=file,
                                    line=_line_of(root, path + [k]),
                                    field=_path_str(path + [k]))
            m = _REF.fullmatch(v)
            if m:
                typed = yaml.safe_load(values[m.group(1)]) if values[m.group(1)] else ""
                node[k] = typed if isinstance(typed, (str, int, float, bool)) else \
                    values[m.group(1)]
            else:
                node[k] = _REF.sub(lambda m: values[m.group(1)], v)


def _build(doc: dict[str, Any], file: str, default_name: str,
           values: dict[str, tuple[str, str, str]] | None = None) -> ir.Experiment:
    def at(path: list[Any]):
        return ir.Source(file, _line_of(doc, path))

    def call(path: list[Any], fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except SpecError as e:
            if e.file and e.file != file:
                raise      # located in another file (a matrix CSV): keep its place
            sub = _path_str(path)
            if e.field and e.field != sub:     # (a builder naming the whole path names it)
                sub += "." + e.field
            raise SpecError(e.message, file=file, line=_line_of(doc, path), field=sub) from None

    values = values or {}
    notes = [f"{file}:{_line_of(doc, path)}: {_path_str(path)}: {note}"
             for path, note in _unitless(doc)]
    b = call(["name"], ExperimentBuilder, doc.get("name", default_name),
             seed=doc.get("seed", 1), routing=doc.get("routing", "static"),
             params={k: v for k, (_d, v, _desc) in values.items()})
    b.base_dir = str(Path(file).parent) if not file.startswith("<") else None
    for k, (default, _v, desc) in values.items():
        call(["parameters", k], b.parameter, k, default, desc)
    if any(k in doc for k in ("idle_swap", "max_duration", "no_idle_swap")):
        call(["idle_swap"], b.swap_policy, idle=doc.get("idle_swap"),
             max_duration=doc.get("max_duration"), no_idle_reason=doc.get("no_idle_swap"))
    if "engine" in doc:
        eng = doc["engine"] or {}
        call(["engine", "threads"], b.engine, threads=eng.get("threads"))
        call(["engine", "cores"], b.engine, cores=eng.get("cores"))
    if "ipv6" in doc:
        call(["ipv6"], b.ipv6, doc["ipv6"])
    if "ipv6_prefix" in doc:          # (refused at its line when the experiment has no IPv6)
        call(["ipv6_prefix"], b.ipv6, doc.get("ipv6", False), doc["ipv6_prefix"],
             source=at(["ipv6_prefix"]))
    if "ospf" in doc:
        call(["ospf"], b.ospf_timers, doc["ospf"].get("hello", 1), doc["ospf"].get("dead", 4))
    for node, asn in (doc.get("bgp", {}).get("as") or {}).items():
        call(["bgp", "as", node], b.bgp_as, node, asn)
    for i, (x, y) in enumerate(doc.get("bgp", {}).get("sessions") or []):
        call(["bgp", "sessions", i], b.bgp_session, x, y)
    if "topology" in doc:
        _topology(b, doc, file, at(["topology"]), call)
    for i, n in enumerate(doc.get("nodes", [])):
        if isinstance(n, str):
            n = {"name": n}
        node = call(["nodes", i], b.node, n["name"], kind=n.get("kind", "emulated"),
                    os=n.get("os"), hardware=n.get("hardware"), startcmd=n.get("startcmd"),
                    image=n.get("image"), tarfiles=n.get("tarfiles") or (),
                    packages=n.get("packages") or (), external=n.get("external"),
                    cpu=n.get("cpu"), memory=n.get("memory"), pids=n.get("pids"),
                    cpus=n.get("cpus"), cpu_weight=n.get("cpu_weight"),
                    egress=n.get("egress", False), wide_area=n.get("wide_area", False),
                    source=at(["nodes", i]))
        for j, r in enumerate(n.get("routes", [])):
            call(["nodes", i, "routes", j], b.route, node, r["dst"], r["via"])
    for i, l in enumerate(doc.get("links", [])):
        p = ["links", i]
        a, bb = l["nodes"]
        name = call(p, b.link, a, bb, bandwidth=l.get("bandwidth", 0), delay=l.get("delay", 0),
                    loss=l.get("loss", 0), queue=l.get("queue"), name=l.get("name"),
                    cost=l.get("cost", 1), ip_a=(l.get("ips") or [None, None])[0],
                    ip_b=(l.get("ips") or [None, None])[1], netmask=l.get("netmask"),
                    ip6_a=(l.get("ips6") or [None, None])[0],
                    ip6_b=(l.get("ips6") or [None, None])[1], source=at(p),
                    **_impair_schedule(l))
        for d, src in (("ab", a), ("ba", bb)):
            if d in l:
                x = l[d]
                call(p + [d], b.direction, name, src, bandwidth=x.get("bandwidth"),
                     delay=x.get("delay"), loss=x.get("loss"), queue=x.get("queue"),
                     **_impair_schedule(x))
    for i, l in enumerate(doc.get("lans", [])):
        p = ["lans", i]
        members = [m if isinstance(m, str) else m["node"] for m in l["nodes"]]
        name = call(p, b.lan, members, bandwidth=l.get("bandwidth", 0), delay=l.get("delay", 0),
                    loss=l.get("loss", 0), queue=l.get("queue"), name=l.get("name"),
                    netmask=l.get("netmask"), cost=l.get("cost", 1), gateway=l.get("gateway"),
                    source=at(p), **_impair(l))
        if "matrix" in l:
            mx = dict(l["matrix"])
            try:
                b.lan_matrix(name, csv=mx.get("csv"), delay=mx.get("delay"),
                             bandwidth=mx.get("bandwidth"), loss=mx.get("loss"),
                             jitter=mx.get("jitter"), duplicate=mx.get("duplicate"),
                             corrupt=mx.get("corrupt"), pairs=mx.get("pairs"),
                             base_dir=Path(file).parent if not file.startswith("<")
                             else Path("/nonexistent"))
            except SpecError as e:
                if e.file and e.file != file:
                    raise          # located in the matrix CSV
                # the field names a cell (matrix.delay[1][2]): cite that row's line
                at = p + _path_of(e.field or "matrix")
                raise SpecError(e.message, file=file, line=_line_of(doc, at),
                                field=_path_str(at)) from None
        for j, m in enumerate(l["nodes"]):
            if isinstance(m, dict):
                call(p + ["nodes", j], b.lan_member, name, m["node"],
                     bandwidth=m.get("bandwidth"), delay=m.get("delay"), loss=m.get("loss"),
                     ip=m.get("ip"), ip6=m.get("ip6"), to_lan=m.get("to_lan"),
                     from_lan=m.get("from_lan"), **_impair(m))
    if "edge" in doc:
        e = doc["edge"] or {}
        call(["edge"], b.edge, gateway=e.get("gateway"), uplink=e.get("uplink"),
             bandwidth=e.get("bandwidth"), delay=e.get("delay"), loss=e.get("loss"),
             wireguard=e.get("wireguard"), source=at(["edge"]))
    for i, f in enumerate(doc.get("forwards") or []):
        call(["forwards", i], b.forward, f["node"], f["port"], proto=f.get("proto", "tcp"),
             listen=f.get("listen"), source=at(["forwards", i]))
    for i, pr in enumerate(doc.get("programs", [])):
        call(["programs", i], b.program, pr["node"], pr["command"], name=pr.get("name"),
             dir=pr.get("dir"), timeout=pr.get("timeout"),
             expected_exit_code=pr.get("expected_exit_code"), source=at(["programs", i]))
    for i, ag in enumerate(doc.get("agents", [])):
        call(["agents", i], b.agent, ag["kind"], node=ag.get("node"), name=ag.get("name"),
             attached=ag.get("attached"), peer=ag.get("peer"), params=ag.get("params"),
             source=at(["agents", i]))
    for i, ev in enumerate(doc.get("events", [])):
        call(["events", i], b.at, ev["at"], ev["target"], ev["action"],
             *[str(a) for a in ev.get("args", [])], source=at(["events", i]))
    exp = b.build_from(file)
    return replace(exp, warnings=tuple(notes) + exp.warnings) if notes else exp


def _topology(b: ExperimentBuilder, doc: dict[str, Any], file: str, src: ir.Source,
              call) -> None:
    """``topology: {gml|graphml|zoo, hosts, bandwidth, delay}``: a map's routers and links
    (:mod:`wanlab.frontends.topology`), before the file's own nodes and links."""
    from wanlab.frontends import topology

    t = doc["topology"]
    base = None if file.startswith("<") else str(Path(file).resolve().parent)
    try:
        m = topology.read_spec(t, base, file)
    except SpecError as e:
        if e.file and e.file != file:
            raise              # the map file's own error
        raise SpecError(e.message, file=file, line=src.line, field=e.field) from None
    call(["topology"], topology.declare, b, m, hosts=t.get("hosts", 0),
         bandwidth=t.get("bandwidth", 0), delay=t.get("delay", 0), source=src)


def _impair(m: dict[str, Any]) -> dict[str, Any]:
    """netem's keys of a link, direction, LAN or member entry, for the builder."""
    return {k: m.get(k) for k in impair_spec.KEYS}


def _impair_schedule(m: dict[str, Any]) -> dict[str, Any]:
    """:func:`_impair` and a link's or direction's ``schedule``."""
    return {**_impair(m), "schedule": m.get("schedule")}


def _unitless(doc: dict[str, Any]) -> list[tuple[list[Any], str]]:
    """(path, note) of every link-shaping delay or bandwidth written as a bare number that
    is easy to misread (``delay: 10`` is 10 s, as in ns-2, which warns likewise)."""
    out: list[tuple[list[Any], str]] = []

    def check(m: Any, path: list[Any]) -> None:
        if not isinstance(m, dict):
            return
        for key, fn in (("delay", units.delay_note), ("bandwidth", units.bandwidth_note)):
            note = fn(m[key]) if key in m else None
            if note:
                out.append((path + [key], note))
    for i, l in enumerate(doc.get("links") or []):
        check(l, ["links", i])
        for d in ("ab", "ba"):
            check(l.get(d) if isinstance(l, dict) else None, ["links", i, d])
    for i, l in enumerate(doc.get("lans") or []):
        check(l, ["lans", i])
        for j, m in enumerate((l.get("nodes") if isinstance(l, dict) else None) or []):
            check(m, ["lans", i, "nodes", j])
            for d in ("to_lan", "from_lan"):
                check(m.get(d) if isinstance(m, dict) else None, ["lans", i, "nodes", j, d])
        if isinstance(l, dict) and isinstance(l.get("gateway"), dict):
            check(l["gateway"], ["lans", i, "gateway"])
    check(doc.get("edge"), ["edge"])
    return out
