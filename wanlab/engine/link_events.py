"""Link and LAN events as engine requests, shared by emulation and simulation.

The scheduler of a running experiment sends these requests to its engine at once;
``wanlab run --simulate`` puts them into the engine's virtual-time timeline. Either way
an event means the same thing:

* ``up`` / ``down``; ``bandwidth B``; ``delay D``; ``plr P``; ``set PARAM V`` (queue
  parameters); ``trace start|stop|snapshot`` (pcap capture of every direction);
  ``drop N [ab|ba]`` (links only: drop the next N packets of one direction, default
  ab = from the link's first node; Netbed's one-drop TCP test).
* A LAN's ``delay D`` gives each member's half D/2, and its ``plr P`` gives each half
  1 - sqrt(1 - P), as at creation.
"""

from __future__ import annotations

import math
import os
from typing import Any

from wanlab.frontends.units import parse_bandwidth, parse_delay, parse_loss

QUEUE_PARAMS = {"limit_": ("limit", int), "thresh_": ("thresh", float),
                "maxthresh_": ("maxthresh", float), "q_weight_": ("q_weight", float),
                "linterm_": ("linterm", float), "mean_pktsize_": ("mean_pktsize", int),
                "queue-in-bytes_": ("in_bytes", "bool"), "gentle_": ("gentle", "bool")}

Params = dict[tuple[str, str], dict[str, Any]]


def _bool(v: str) -> bool:
    if v.lower() in ("1", "true", "yes", "on"):
        return True
    if v.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{v!r} is not a boolean")


def _selector(target: str, key: tuple[str, str]) -> tuple[dict[str, Any], str]:
    """The engine selector of one direction, and a file-name-safe name for it."""
    d = key[1]
    if "/" in d:
        port, dirn = d.split("/")
        return {"target": target, "member": port, "dir": dirn}, f"{port.replace(':', '-')}-{dirn}"
    return {"target": target, "dir": d}, d


def requests_for(params: Params, target: str, action: str, args: list[str], lan: bool,
                 trace_dir: str) -> tuple[list[dict[str, Any]], str]:
    """Translate one event into engine requests (updating ``params``, the current
    parameters of every direction, keyed by (target, dir) or (lan, "port/dir")).

    Returns the requests and a one-line description; raises ValueError on a bad event."""
    keys = [k for k in params if k[0] == target]
    if action in ("up", "down"):
        return [{"cmd": action, "target": target}], f"{target} is {action}"
    if action in ("bandwidth", "delay", "plr"):
        if len(args) != 1:
            raise ValueError(f"{action} needs one value")
        if action == "bandwidth":
            bps = parse_bandwidth(args[0])
            for k in keys:
                params[k]["bandwidth_bps"] = bps
        elif action == "delay":
            d = parse_delay(args[0]) / (2 if lan else 1)
            for k in keys:
                params[k]["delay_us"] = round(d * 1e6, 3)
        else:
            p = parse_loss(args[0])
            if lan:
                p = 1 - math.sqrt(1 - p)
            for k in keys:
                params[k]["loss"] = {"kind": "bernoulli", "p": p} if p > 0 else {"kind": "none"}
        return _sets(params, target, keys), f"{target} {action} {args[0]}"
    if action == "set":
        if len(args) != 2 or args[0] not in QUEUE_PARAMS:
            raise ValueError(f"set needs a queue parameter ({', '.join(QUEUE_PARAMS)}) "
                             f"and a value")
        field, conv = QUEUE_PARAMS[args[0]]
        value = _bool(args[1]) if conv == "bool" else conv(float(args[1]))
        for k in keys:
            q = dict(params[k]["queue"])
            q[field] = value
            if field in ("thresh", "maxthresh", "q_weight", "linterm") and q["kind"] != "red":
                raise ValueError(f"{args[0]} applies to RED queues; {target} is DropTail")
            params[k]["queue"] = q
        return _sets(params, target, keys), f"{target} {args[0]} = {args[1]}"
    if action == "drop":
        # drop the next N packets of one direction (ns-2's ErrorModel/List, counted from
        # the event): a one-off that leaves the link's loss model as it was afterwards
        if lan or not args or len(args) > 2 or args[-1 if len(args) == 2 else 0] == "":
            raise ValueError("drop takes a count and a direction of a link: drop N [ab|ba]")
        try:
            n = int(args[0])
        except ValueError:
            raise ValueError(f"drop: count {args[0]!r} is not an integer") from None
        d = args[1] if len(args) == 2 else "ab"
        if not 1 <= n <= 1000 or d not in ("ab", "ba"):
            raise ValueError("drop takes a count of 1..1000 and a direction ab or ba")
        p = dict(params[(target, d)], loss={"kind": "ordinals", "drop": list(range(1, n + 1))})
        return [{"cmd": "set", "target": target, "dir": d, "params": p}], \
            f"{target} drops its next {n} packet{'s' if n > 1 else ''} ({d})"
    if action == "trace":
        op = args[0] if args else "start"
        if op not in ("start", "stop", "snapshot"):
            raise ValueError("trace takes start, stop or snapshot")
        reqs = []
        for k in keys:
            sel, name = _selector(target, k)
            if op == "start":
                reqs.append({"cmd": "capture_start", **sel,
                             "path": os.path.join(trace_dir, f"{target}-{name}.pcap")})
            else:
                reqs.append({"cmd": f"capture_{op}", **sel})
        return reqs, f"trace {op}: {trace_dir}"
    raise ValueError("unknown event; links take up, down, bandwidth, delay, plr, set, "
                     "trace, drop")


def _sets(params: Params, target: str, keys: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"cmd": "set", **_selector(target, k)[0], "params": params[k]} for k in keys]
