"""ns-2 TCP variables an emulated Linux sender can follow, as metrics of its route.

Linux reads some TCP settings per destination from the route a connection uses:
``initcwnd`` (the initial congestion window, ns-2 ``windowInit_``) and ``rto_min`` (the
minimum RTO, ns-2 ``minrto_``; locked, or Linux ignores it). :func:`apply` copies the
route the node's kernel picks for the destination (gateway and device) into a host route
(/32 or /128) that carries them. The route lives in the node's own namespace, which the
experiment owns, and goes with it.
"""

from __future__ import annotations

import json
import subprocess

from wanlab.backends.emulate import netns
from wanlab.errors import WanlabError


def metrics(window_init: int | None, min_rto_s: float | None) -> list[str]:
    """``ip route`` metric words for an initial window (segments) and a minimum RTO."""
    words: list[str] = []
    if window_init is not None:
        words += ["initcwnd", str(window_init)]
    if min_rto_s is not None:
        words += ["rto_min", f"{max(1, round(min_rto_s * 1000))}ms"]
    return words


def apply(ns: str, dst: str, words: list[str]) -> list[str]:
    """Give namespace ``ns``'s route to address ``dst`` the metric ``words``; returns the
    ``ip route replace`` arguments used. An error names the namespace and the address."""
    if not words:
        return []
    if not netns.exists(ns):
        raise WanlabError(f"{ns}: no such node namespace")
    fam = "-6" if ":" in dst else "-4"
    got = subprocess.run(["ip", fam, "-j", "-n", ns, "route", "get", dst],
                         capture_output=True, text=True, timeout=10)
    if got.returncode != 0:
        raise WanlabError(f"{ns}: no route to {dst}: {got.stderr.strip()}")
    r = json.loads(got.stdout)[0]
    args = [f"{dst}/{128 if fam == '-6' else 32}"]
    if r.get("gateway"):
        args += ["via", r["gateway"]]
    args += ["dev", r["dev"], *words]
    done = subprocess.run(["ip", fam, "-n", ns, "route", "replace", *args],
                          capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise WanlabError(f"{ns}: ip route replace {' '.join(args)}: {done.stderr.strip()}")
    return args
