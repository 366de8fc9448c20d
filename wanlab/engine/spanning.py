"""The spanning trees in force on a live experiment's looped switched LANs, kept in the
experiment's folder (``spanning.json``) by whoever recomputes them (a Mininet network when
a link between its switches goes down or up), read by ``show``.

One entry per LAN: ``{"blocked": [{"switch", "port", "peer"}], "down": [{"a", "b"}]}``
(the ports the tree blocks now, the links between the switches that are down). A LAN
without an entry has the tree the description gives (``ir.Lan.blocked``).
"""

from __future__ import annotations

import json
import os
from typing import Any

FILE = "spanning.json"


def save(folder: str, trees: dict[str, dict[str, Any]]) -> None:
    path = os.path.join(folder, FILE)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(trees, f)
    os.replace(tmp, path)


def load(folder: str) -> dict[str, dict[str, Any]]:
    """The record (empty when no tree changed at run time)."""
    try:
        with open(os.path.join(folder, FILE)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
