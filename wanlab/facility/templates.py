"""Templates: versions of an experiment's source, and what each run records about itself.

A template is a description file (ns, YAML or Python) with template parameters; its name is
the file's stem (as the experiment's). Each change of its text is a new version in the store
(:func:`wanlab.store.facility.template_version`); ``wanlab template history FILE-or-NAME``
lists them with their parameters and runs. :func:`software` says which engine (a hash of the
binary) and which kernel a run used, so a result can be tied to the software that made it.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from wanlab.engine.binary import engine_binary
from wanlab.errors import WanlabError
from wanlab.frontends.ns import sanitize_name
from wanlab.model.ir import Experiment
from wanlab.store import facility as records
from wanlab.store.db import Store

MAX_SOURCE_BYTES = 4 << 20


def name_of(path: str) -> str:
    """A template's name: its file's stem, made a valid name (as the experiment's)."""
    return sanitize_name(Path(path).stem)


def read_source(path: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SOURCE_BYTES + 1)
    except OSError as e:
        raise WanlabError(f"{path}: {e.strerror}") from None
    if len(data) > MAX_SOURCE_BYTES:
        raise WanlabError(f"{path}: larger than {MAX_SOURCE_BYTES >> 20} MB; not a template")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise WanlabError(f"{path}: not UTF-8 text") from None


def record(store: Store, path: str, exp: Experiment) -> records.TemplateVersion:
    """The version of ``path``'s current text (a new one if the text changed)."""
    params = [{"name": p.name, "default": p.default, "description": p.description}
              for p in exp.parameters]
    version, _new = records.template_version(store, name_of(path), os.path.abspath(path),
                                             read_source(path), params)
    return version


@functools.lru_cache(maxsize=4)
def _hash(path: str, size: int, mtime: float) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def software() -> dict[str, str]:
    """``engine``: the first 16 hex digits of the engine binary's SHA-256; ``kernel``."""
    path = os.path.realpath(engine_binary())
    st = os.stat(path)
    return {"engine": _hash(path, st.st_size, st.st_mtime), "kernel": os.uname().release}


def history(store: Store, file_or_name: str) -> tuple[str, list[records.TemplateVersion]]:
    """A template's versions, by its file or its name."""
    name = name_of(file_or_name) if os.path.exists(file_or_name) else file_or_name
    versions = records.template_history(store, name)
    if not versions:
        raise WanlabError(f"no template named {name!r} in the store (a template is recorded "
                          f"by its first 'wanlab sweep' or 'wanlab template record')")
    return name, versions
