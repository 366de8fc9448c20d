"""What a live experiment's engine has in force, kept in the experiment's folder.

Two files, both in the IR's units and names (never the wire format):

* ``ports.json``: the plan's :class:`~wanlab.plan.types.PortMap`, written at swap-in and
  by modify, so that a run-time change of a LAN member (``set_link``) finds its port
  without planning the experiment again;
* ``in_force.jsonl``: the fields of link and LAN directions (and latency-matrix pair
  channels) changed at run time (by a timeline or tevc event through the scheduler, or by
  ``set_link`` through the life cycle), one line per change in the order the engine got
  them; every other field has its configured value. Whoever sends a change to the engine
  appends it here (under a lock: the scheduler and the life cycle are separate processes),
  without reading the file or the description (the scheduler's copy may be older than a
  modify), so the scheduler's inline events stay quick. Reading folds the lines (a LAN-wide
  change overrides every member's earlier change of those fields, as in the engine); a long
  file is folded and written again. Swap-in starts it empty, and modify drops the fields the
  description changed (the engine got those as patches).

``show`` reads it to print what is in force, and the configured value where it differs.
A raw request sent with the API's ``engine_call`` is not seen here.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, fields, replace
from typing import Any

from wanlab.model import ir
from wanlab.model.ir import Experiment, LinkParams
from wanlab.plan.types import PortMap

PORTS, IN_FORCE = "ports.json", "in_force.jsonl"
COMPACT_BYTES = 1 << 18      # fold the record when it grows past this

# one direction: (network, LAN member node or None, dir); a latency matrix pair's channel
# is (LAN, its sender, pair_dir(its receiver))
Key = tuple[str, str | None, str]
ALL = "*"           # a change of every member of a LAN
PAIR = "pair:"


def pair_dir(dst: str) -> str:
    """The ``dir`` of the pair channel to ``dst`` (member names hold no ``:``)."""
    return PAIR + dst


# a direction's fields: "bandwidth_bps", "delay_s", "loss", the impairments (a loss model
# as a mapping) and "queue.<field>"
Fields = dict[str, Any]


def _write(path: str, data: Any) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def save_ports(folder: str, ports: PortMap) -> None:
    _write(os.path.join(folder, PORTS), ports.to_json())


def load_ports(folder: str) -> PortMap | None:
    """The port map kept at swap-in (None if there is none: swapped in by an older
    wanlab)."""
    try:
        with open(os.path.join(folder, PORTS)) as f:
            return PortMap.from_json(json.load(f))
    except (OSError, ValueError, KeyError):
        return None


# the record: (network, member node or ALL ("" for a link), dir) -> changed fields
Held = dict[tuple[str, str, str], Fields]


@contextlib.contextmanager
def _lock(folder: str) -> Iterator[None]:
    with open(os.path.join(folder, IN_FORCE + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _lines(held: Held) -> str:
    return "".join(json.dumps({"network": n, "member": m, "dir": d, "fields": f}) + "\n"
                   for (n, m, d), f in held.items() if f)


def _rewrite(folder: str, held: Held) -> None:
    path = os.path.join(folder, IN_FORCE)
    with open(path + ".tmp", "w") as f:
        f.write(_lines(held))
    os.replace(path + ".tmp", path)


def _fold(held: Held, key: tuple[str, str, str], got: Fields) -> None:
    """One change into ``held``: a LAN-wide one ends every member's earlier change of
    the same fields."""
    net, member, d = key
    if member == ALL:
        for (n, _, d2), f in held.items():
            if n == net and d2 == d:
                for k in got:
                    f.pop(k, None)
    held.setdefault(key, {}).update(got)


def _read(folder: str) -> Held:
    held: Held = {}
    try:
        with open(os.path.join(folder, IN_FORCE)) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue        # a line cut short by a crash: the rest still counts
                _fold(held, (r["network"], r["member"], r["dir"]), r["fields"])
    except OSError:
        return {}
    return held


def reset(folder: str, ports: PortMap) -> None:
    """At swap-in: the engine has the description's values, and these ports."""
    save_ports(folder, ports)
    with _lock(folder):
        _rewrite(folder, {})


def configured(exp: Experiment) -> dict[Key, LinkParams]:
    """Every direction's configured parameters."""
    out: dict[Key, LinkParams] = {}
    for l in exp.links:
        out[(l.name, None, "ab")], out[(l.name, None, "ba")] = l.ab, l.ba
    for lan in exp.lans:
        for m in lan.members:
            out[(lan.name, m.node, "to_lan")] = m.to_lan
            out[(lan.name, m.node, "from_lan")] = m.from_lan
        for p in lan.pairs:
            out[(lan.name, p.src, pair_dir(p.dst))] = p.params
    return out


def _fields(p: LinkParams) -> Fields:
    imp = {k: getattr(p, k) for k in ir.IMPAIR_FIELDS}
    for k in ("loss_model", "trace", "schedule"):
        if imp[k] is not None:
            imp[k] = {f: list(v) if isinstance(v, tuple) else v
                      for f, v in asdict(imp[k]).items()}
    return {"bandwidth_bps": p.bandwidth_bps, "delay_s": p.delay_s, "loss": p.loss, **imp,
            **{f"queue.{f.name}": getattr(p.queue, f.name) for f in fields(p.queue)}}


def _overlaid(p: LinkParams, changed: Fields) -> LinkParams:
    top = {k: v for k, v in changed.items() if not k.startswith("queue.")}
    queue = {k[6:]: v for k, v in changed.items() if k.startswith("queue.")}
    return ir.impair_params(top, replace(p, queue=replace(p.queue, **queue)))


def current(folder: str, exp: Experiment) -> dict[Key, LinkParams]:
    """Every direction's parameters in force (the configured ones where nothing changed
    them at run time)."""
    held = _read(folder)
    out = {}
    for (net, member, d), p in configured(exp).items():
        if member is None:
            out[(net, member, d)] = _overlaid(p, held.get((net, "", d), {}))
        else:       # a change of every member first, then one of this member since
            p = _overlaid(p, held.get((net, ALL, d), {}))
            out[(net, member, d)] = _overlaid(p, held.get((net, member, d), {}))
    return out


def change(ev: ir.Event, kind: str) -> Fields:
    """The fields link or LAN event ``ev`` sets in each direction it acts on (what the
    patch :func:`wanlab.engine.encode.event_requests` makes carries)."""
    lan = kind == "lan"
    a, v = ev.action, ev.value
    if a == "bandwidth":        # a fixed rate ends a trace
        return {"bandwidth_bps": int(v), "trace": None}
    if a == "delay":
        return {"delay_s": ir.lan_half(v, 0.0)[0] if lan else float(v)}
    if a == "plr":      # a plain loss rate ends a loss model
        return {"loss": ir.lan_half(0.0, v)[1] if lan else float(v), "loss_correlation": 0.0,
                "loss_model": None}
    if a == "set" and ev.param in ir.QUEUE_FIELDS:
        return {f"queue.{ev.param}": v}
    if a == "impair":
        return dict(v)
    return {}      # up, down, drop (the next packets only), trace: no parameter changes


def record(folder: str, evs: Iterable[tuple[ir.Event, str]]) -> None:
    """Note link and LAN events the engine has done, each with its kind (``link`` or
    ``lan``). A pair channel's (``ev.to``) takes its own values, as a link's direction."""
    todo = [(ev, kind, change(ev, "link" if ev.to is not None else kind)) for ev, kind in evs]
    todo = [t for t in todo if t[2]]
    if not todo:
        return
    lines: Held = {}
    for ev, kind, got in todo:
        if ev.to is not None:
            dirs, member = (pair_dir(ev.to),), str(ev.member)
        elif kind == "link":
            dirs, member = (ev.dir,) if ev.dir else ("ab", "ba"), ""
        elif ev.action == "impair" and not ev.dir:    # the receiving half (encode)
            dirs, member = ("from_lan",), ev.member or ALL
        else:
            dirs, member = (ev.dir,) if ev.dir else ("to_lan", "from_lan"), ev.member or ALL
        for d in dirs:
            _fold(lines, (ev.target, member, d), got)
    path = os.path.join(folder, IN_FORCE)
    with _lock(folder):
        with open(path, "a") as f:
            f.write(_lines(lines))
            size = f.tell()
        if size > COMPACT_BYTES:
            _rewrite(folder, _read(folder))


def rebase(folder: str, old: Experiment, new: Experiment, ports: PortMap,
           rebuilt: Iterable[str]) -> None:
    """After a modify from ``old`` to ``new``: each field the description changed has its
    new value (the engine got it as a patch), the others keep what is in force; networks
    ``rebuilt`` (or gone) have their new configured values."""
    save_ports(folder, ports)
    was, now, gone = configured(old), configured(new), set(rebuilt)
    with _lock(folder):
        out: Held = {}
        # every member's changes first: one member's since are newer
        for (net, member, d), f in sorted(_read(folder).items(),
                                          key=lambda kv: kv[0][1] != ALL):
            if net in gone:
                continue
            members = [m for (n, m, d2) in was if n == net and d2 == d] \
                if member == ALL else [member or None]
            for m in members:
                k = (net, m, d)
                if k not in was or k not in now:
                    continue
                o, w = _fields(was[k]), _fields(now[k])
                if was[k].queue.kind != now[k].queue.kind:
                    o = {x: v for x, v in o.items() if not x.startswith("queue.")}
                kept = {x: v for x, v in f.items() if x in o and o[x] == w.get(x)}
                if kept:
                    out.setdefault((net, m or "", d), {}).update(kept)
        _rewrite(folder, out)
