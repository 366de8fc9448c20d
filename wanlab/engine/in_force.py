"""What a live experiment's engine has in force, kept in the experiment's folder.

Two files, both in the IR's units and names (never the wire format):

* ``ports.json``: the plan's :class:`~wanlab.plan.types.PortMap`, written at swap-in and
  by modify, so that a run-time change of a LAN member (``set_link``) finds its port
  without planning the experiment again;
* ``in_force.json``: each link or LAN direction changed at run time (by a timeline or
  tevc event through the scheduler, or by ``set_link``/``link_up``... through the life
  cycle), with the parameters it now has. A direction not in it has its configured
  values. Whoever sends a change to the engine records it here, under an exclusive lock
  (the scheduler and the life cycle are separate processes); swap-in starts it empty,
  and modify rebases it onto the new description as the engine's patches do.

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
from wanlab.model.ir import Experiment, LinkParams, Queue
from wanlab.plan.types import PortMap

PORTS, IN_FORCE = "ports.json", "in_force.json"

# one direction: (network, LAN member node or None, dir)
Key = tuple[str, str | None, str]


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


@contextlib.contextmanager
def _locked(folder: str) -> Iterator[dict[Key, LinkParams]]:
    """The recorded directions, to change in place; written back on exit."""
    with open(os.path.join(folder, IN_FORCE + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        held = _read(folder)
        yield held
        _write(os.path.join(folder, IN_FORCE),
               [{"network": n, "member": m, "dir": d, "params": _to_json(p)}
                for (n, m, d), p in held.items()])


def _read(folder: str) -> dict[Key, LinkParams]:
    try:
        with open(os.path.join(folder, IN_FORCE)) as f:
            rows = json.load(f)
    except (OSError, ValueError):
        return {}
    return {(r["network"], r["member"], r["dir"]): _from_json(r["params"]) for r in rows}


def _to_json(p: LinkParams) -> dict[str, Any]:
    return asdict(p)


def _from_json(d: dict[str, Any]) -> LinkParams:
    return LinkParams(**{**d, "queue": Queue(**d["queue"])})


def reset(folder: str, ports: PortMap) -> None:
    """At swap-in: the engine has the description's values, and these ports."""
    save_ports(folder, ports)
    with _locked(folder) as held:
        held.clear()


def configured(exp: Experiment) -> dict[Key, LinkParams]:
    """Every direction's configured parameters."""
    out: dict[Key, LinkParams] = {}
    for l in exp.links:
        out[(l.name, None, "ab")], out[(l.name, None, "ba")] = l.ab, l.ba
    for lan in exp.lans:
        for m in lan.members:
            out[(lan.name, m.node, "to_lan")] = m.to_lan
            out[(lan.name, m.node, "from_lan")] = m.from_lan
    return out


def current(folder: str, exp: Experiment) -> dict[Key, LinkParams]:
    """Every direction's parameters in force (the configured ones where nothing changed
    them at run time)."""
    held = _read(folder)
    return {k: held.get(k, p) for k, p in configured(exp).items()}


def changed(ev: ir.Event, kind: str, p: LinkParams) -> LinkParams:
    """Direction parameters ``p`` after link or LAN event ``ev`` (the engine's merge of
    the patch :func:`wanlab.engine.encode.event_requests` makes)."""
    lan = kind == "lan"
    a, v = ev.action, ev.value
    if a == "bandwidth":
        return replace(p, bandwidth_bps=int(v))
    if a == "delay":
        return replace(p, delay_s=ir.lan_half(v, 0.0)[0] if lan else float(v))
    if a == "plr":
        return replace(p, loss=ir.lan_half(0.0, v)[1] if lan else float(v))
    if a == "set" and ev.param in ir.QUEUE_FIELDS:
        return replace(p, queue=replace(p.queue, **{ev.param: v}))
    return p       # up, down, drop (the next packets only), trace: no parameter changes


def _directions(ev: ir.Event, kind: str, exp: Experiment) -> list[Key]:
    if kind == "link":
        return [(ev.target, None, d) for d in ((ev.dir,) if ev.dir else ("ab", "ba"))]
    lan = next(x for x in exp.lans if x.name == ev.target)
    members = [ev.member] if ev.member else [m.node for m in lan.members]
    dirs = (ev.dir,) if ev.dir else ("to_lan", "from_lan")
    return [(ev.target, m, d) for m in members for d in dirs]


def record(folder: str, exp: Experiment, evs: Iterable[ir.Event]) -> None:
    """Note link and LAN events the engine has done (a pair channel's, ``ev.to``, is not
    a direction of its own and is left out)."""
    kinds = exp.kinds()
    todo = [ev for ev in evs if kinds.get(ev.target) in ("link", "lan") and ev.to is None
            and ev.action in ("bandwidth", "delay", "plr", "set")]
    if not todo:
        return
    cfg = configured(exp)
    with _locked(folder) as held:
        for ev in todo:
            for k in _directions(ev, kinds[ev.target], exp):
                held[k] = changed(ev, kinds[ev.target], held.get(k, cfg[k]))
                if held[k] == cfg[k]:
                    del held[k]


def rebase(folder: str, old: Experiment, new: Experiment, ports: PortMap,
           rebuilt: Iterable[str]) -> None:
    """After a modify from ``old`` to ``new``: each field the description changed takes
    its new value (the engine got it as a patch), the others keep what is in force;
    networks ``rebuilt`` (or gone) have their new configured values."""
    save_ports(folder, ports)
    was, now, gone = configured(old), configured(new), set(rebuilt)
    with _locked(folder) as held:
        for k in list(held):
            if k[0] in gone or k not in now or k not in was:
                del held[k]
                continue
            held[k] = _patched(held[k], was[k], now[k])
            if held[k] == now[k]:
                del held[k]


def _patched(p: LinkParams, old: LinkParams, new: LinkParams) -> LinkParams:
    out = {f.name: getattr(new if getattr(old, f.name) != getattr(new, f.name) else p, f.name)
           for f in fields(LinkParams) if f.name != "queue"}
    if old.queue.kind != new.queue.kind:
        queue = new.queue
    else:
        queue = replace(p.queue, **{f.name: getattr(new.queue, f.name)
                                    for f in fields(Queue)
                                    if getattr(old.queue, f.name) != getattr(new.queue, f.name)})
    return LinkParams(**out, queue=queue)
