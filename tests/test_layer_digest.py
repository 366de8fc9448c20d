"""Image layers moved by digest (the cluster's way, wanlab/cluster/layers.py), on small
folders: a layer's digest is its content's, stable and cached until the layer changes; a
received layer is kept under its digest only when it arrives whole; an image is recorded
over received layers only."""

from __future__ import annotations

import os

import pytest

from wanlab.backends.emulate import images
from wanlab.errors import WanlabError


def _layer(store: images.Images, layer: str) -> str:
    store._prepare()
    path = store.layer_path(layer)
    os.makedirs(os.path.join(path, "etc"))
    with open(os.path.join(path, "etc", "marker"), "w") as f:
        f.write("from the controller\n")
    os.symlink("/etc/marker", os.path.join(path, "link"))
    os.chmod(os.path.join(path, "etc", "marker"), 0o640)
    return path


def _send(src: str, dst: images.Images, digest: str) -> None:
    r = images.Receiver(dst, digest)
    with images.layer_stream(src) as chunks:
        for data in chunks:
            r.feed(data)
    r.finish()


def test_a_layer_arrives_under_its_digest_and_is_the_same_files(tmp_path):
    here = images.Images(str(tmp_path / "controller"))
    src = _layer(here, "0123456789abcdef01234567")
    digest = images.layer_digest(here, "0123456789abcdef01234567")
    os.utime(os.path.join(src, "etc", "marker"), ns=(1, os.stat(src).st_mtime_ns))  # atime
    assert images.layer_digest(here, "0123456789abcdef01234567") == digest
    there = images.Images(str(tmp_path / "machine"))
    assert images.missing(there, [digest]) == [digest]
    _send(src, there, digest)
    assert images.missing(there, [digest]) == []
    got = there.layer_path(digest)
    assert images.layer_digest(there, digest) == digest        # kept under its digest
    with open(os.path.join(got, "etc", "marker")) as f:
        assert f.read() == "from the controller\n"
    assert os.readlink(os.path.join(got, "link")) == "/etc/marker"
    assert os.stat(os.path.join(got, "etc", "marker")).st_mode & 0o777 == 0o640
    img = images.adopt(there, {"name": "web", "layers": [digest], "suite": "bookworm",
                               "packages": ["iproute2"], "created": 1.0, "origin": None})
    assert there.need("web") == img and img.layers == (digest,)
    # a changed layer has another digest (the cached one is not reused)
    with open(os.path.join(src, "etc", "marker"), "a") as f:
        f.write("changed\n")
    assert images.layer_digest(here, "0123456789abcdef01234567") != digest


def test_a_damaged_or_unknown_layer_is_not_kept(tmp_path):
    here = images.Images(str(tmp_path / "controller"))
    src = _layer(here, "0123456789abcdef01234567")
    there = images.Images(str(tmp_path / "machine"))
    wrong = "0" * 64
    with pytest.raises(WanlabError, match="arrived damaged"):
        _send(src, there, wrong)
    assert os.listdir(os.path.join(there.root, "layers")) == []     # nothing half-made
    with pytest.raises(WanlabError, match="have not arrived"):
        images.adopt(there, {"name": "web", "layers": [wrong], "suite": "bookworm",
                             "packages": [], "created": 1.0})
    assert there.get("web") is None
    with pytest.raises(WanlabError, match="bad layer digest"):
        images.Receiver(there, "../../etc")
