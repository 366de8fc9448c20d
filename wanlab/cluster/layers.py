"""Images on a cluster: the controller's image layers move to the machines by digest.

A node that names an image runs on its machine over that image's layers. The machines
never build images (a machine's namespace may reach no mirror, and two builds of one
package list differ): before a part is built, the controller makes sure it has each image
the part's nodes name (building the default one if need be, as on one host), asks the
machine which of the image's layer digests it lacks, and streams just those to its agent
(each layer's tar stream in pieces, through Ray); the agent unpacks each, keeps it under
its digest only if the stream's SHA-256 is that digest, then records the image over those
layers (:func:`wanlab.backends.emulate.images.adopt`). A machine that holds a digest
already, from any image or experiment, is sent nothing for it.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from wanlab.backends.emulate import images
from wanlab.model.ir import Experiment
from wanlab.store.db import Store


def wanted(part: Experiment) -> list[str]:
    """The images a part's own nodes name (not its stubs of nodes elsewhere)."""
    return sorted({n.image for n in part.nodes if n.image and n.kind != "remote"})


def send(store: Store, handles: dict[str, Any], parts: dict[str, Experiment],
         get: Callable[[Any], Any], say: Callable[[str], None] = print) -> int:
    """Give each machine of ``parts`` (machine -> its part) the images its part needs;
    ``get``: ``ray.get`` with the agents' errors as WanlabErrors. Returns how many layers
    were sent."""
    need = {m: wanted(p) for m, p in parts.items()}
    need = {m: v for m, v in need.items() if v}
    if not need:
        return 0
    here = images.Images(images.images_dir(store.home))
    records = {}
    for name in sorted({x for v in need.values() for x in v}):
        here.ensure(name, say)
        records[name] = images.manifest(here, name)

    def to(m: str) -> int:
        digests = list(dict.fromkeys(d for x in need[m] for d in records[x]["layers"]))
        lacking = get(handles[m].image_missing.remote(digests))
        for d in lacking:
            source = next(r["sources"][d] for r in records.values() if d in r["sources"])
            say(f"sending an image layer ({d[:12]}) to {m}")
            xfer = secrets.token_hex(8)
            try:
                with images.layer_stream(here.layer_path(source)) as chunks:
                    for data in chunks:
                        get(handles[m].image_put.remote(xfer, d, data, False))
                get(handles[m].image_put.remote(xfer, d, b"", True))
            except BaseException:
                with contextlib.suppress(Exception):       # the agent drops what came
                    get(handles[m].image_put.remote(xfer, d, None, True))
                raise
        for x in need[m]:
            get(handles[m].image_adopt.remote(
                {k: v for k, v in records[x].items() if k != "sources"}))
        return len(lacking)

    with ThreadPoolExecutor(len(need)) as pool:
        return sum(pool.map(to, sorted(need)))
