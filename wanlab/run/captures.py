"""Packet captures of a running experiment's links, kept in its folder.

The engine writes a capture to a new file under its capture directory (the experiment's
folder; docs/engine-protocol.md, ``capture_start``). These helpers name a new capture and
list the ones there are, for the portal and for a cluster machine's agent, which lists and
serves its own part's.
"""

from __future__ import annotations

import os
import time

CAPTURES = "captures"        # the portal's captures; ``tevc LINK trace`` writes to traces/


def new_file(link: str) -> str:
    """A new capture's path, relative to the experiment's folder."""
    return f"{CAPTURES}/{link}-{time.strftime('%Y%m%d-%H%M%S')}.pcap"


def listing(folder: str) -> dict[str, tuple[str, int]]:
    """Relative path -> (absolute path, size) of every regular ``*.pcap`` file in an
    experiment's ``folder`` (symbolic links are not followed; the nodes' own folders,
    roots and layers, which their programs write, are not looked into)."""
    out: dict[str, tuple[str, int]] = {}
    for root, dirs, files in os.walk(folder, followlinks=False):
        if root == folder:
            dirs[:] = [d for d in dirs if d not in ("nodes", "roots", "layers")]
        for f in files:
            path = os.path.join(root, f)
            if f.endswith(".pcap") and os.path.isfile(path) and not os.path.islink(path):
                out[os.path.relpath(path, folder)] = (path, os.path.getsize(path))
    return dict(sorted(out.items()))
