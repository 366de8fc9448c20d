"""OCI image references in skopeo's transport syntax, checked and made canonical.

A node's ``image:`` (and ``tb-set-node-os``) is either a wanlab image name (no ``:`` or
``/``) or one of::

    docker://REGISTRY/NAME:TAG (or @sha256:DIGEST)
    oci:DIR[:TAG]                  an OCI image layout folder
    oci-archive:FILE[:TAG]         the same as a tar file
    docker-archive:FILE[:NAME:TAG] what ``docker save`` writes
    NAME:TAG, REGISTRY/NAME[:TAG]  docker://...

Paths are made absolute against the description's folder (:func:`canonical`). A
reference reaches skopeo's argument list, never a shell; these checks keep it one argument
that names what it says (no leading ``-``, no new line, no ``..``).
"""

from __future__ import annotations

import hashlib
import os
import re

from wanlab.errors import SpecError

TRANSPORTS = ("docker", "oci", "oci-archive", "docker-archive")
_DOCKER = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}(:[0-9]{1,5})?(/[a-z0-9][a-z0-9._-]{0,127}){0,8}"
                     r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,127}$")
_PATH = re.compile(r"^[^\x00-\x1f:]{1,1024}$")


def is_ref(s: object) -> bool:
    """Whether ``s`` is meant as an OCI reference rather than a wanlab image name."""
    return isinstance(s, str) and (":" in s or "/" in s)


def split(ref: str) -> tuple[str, str, str | None]:
    """(transport, what, tag) of a canonical or user reference (not yet checked)."""
    for t in TRANSPORTS:
        if ref.startswith(t + ":"):
            rest = ref[len(t) + 1:]
            if t == "docker":
                return t, rest.removeprefix("//"), None
            path, _, tag = rest.partition(":")
            return t, path, tag or None
    return "docker", ref, None


def canonical(ref: str, base_dir: str | None = None, field: str = "image") -> str:
    """``ref`` checked, with ``docker://`` spelt out and a file path made absolute (against
    ``base_dir``, else the working folder)."""
    if not isinstance(ref, str) or not ref or "\n" in ref:
        raise SpecError(f"image reference {ref!r} is not valid", field=field)
    transport, what, tag = split(ref)
    if transport == "docker":
        if not _DOCKER.match(what) or ".." in what.split("/"):
            raise SpecError(f"image reference {ref!r}: not a registry image name "
                            f"(REGISTRY/NAME:TAG)", field=field)
        if ":" not in what.rsplit("/", 1)[-1] and "@" not in what:
            what += ":latest"
        return f"docker://{what}"
    if not _PATH.match(what) or what.startswith("-"):
        raise SpecError(f"image reference {ref!r}: {transport} needs a path (no ':')",
                        field=field)
    path = os.path.normpath(os.path.join(base_dir or os.getcwd(), what))
    if tag is not None:
        ok = (_TAG.match(tag) if transport != "docker-archive"
              else all(_TAG.match(x) for x in tag.split(":")) and tag.count(":") <= 1)
        if not ok:
            raise SpecError(f"image reference {ref!r}: bad tag {tag!r}", field=field)
    return f"{transport}:{path}" + (f":{tag}" if tag else "")


def store_name(ref: str) -> str:
    """The image store's name for canonical reference ``ref``: readable, and unique by a
    hash of the whole reference (``alpine-3.19-1a2b3c4d``)."""
    _t, what, tag = split(ref)
    last = what.rstrip("/").rsplit("/", 1)[-1]
    if tag:
        last += "-" + tag
    stem = re.sub(r"[^a-z0-9_.-]+", "-", last.lower()).strip("-.")[:40] or "image"
    if not stem[0].isalnum():
        stem = "i" + stem
    return f"{stem}-{hashlib.sha256(ref.encode()).hexdigest()[:8]}"
