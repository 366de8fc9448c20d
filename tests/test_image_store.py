"""The image store's pure logic (no root): names, cache keys, the base, the mirror."""

import pytest

from wanlab.backends.emulate import images
from wanlab.errors import WanlabError


def test_the_cache_key_is_the_suite_and_the_set_of_packages():
    a = images.build_hash("bookworm", ("iproute2", "frr"))
    assert a == images.build_hash("bookworm", ("frr", "iproute2", "frr"))
    assert a != images.build_hash("trixie", ("frr", "iproute2"))
    assert a != images.build_hash("bookworm", ("frr",))


@pytest.mark.parametrize("bad", ["../x", "a/b", "", "X", "-x", "x" * 64, "a b", None])
def test_image_names_never_become_paths(bad, tmp_path):
    with pytest.raises(WanlabError, match="not valid"):
        images.check_name(bad)
    if bad == "a/b":       # an OCI reference (docker://a/b:latest): found by its store name
        assert images.Images(str(tmp_path)).get(bad) is None
        return
    with pytest.raises(WanlabError):
        images.Images(str(tmp_path)).get(bad)


def test_packages_and_the_base_are_checked():
    assert images.check_packages(["tcpdump", "g++", "libc6"]) == ("g++", "libc6", "tcpdump")
    for bad in (["a;b"], ["-o"], ["Foo"], ["x y"]):
        with pytest.raises(WanlabError, match="not a Debian package"):
            images.check_packages(bad)
    assert images.parse_from("debian:trixie") == "trixie"
    for bad in ("ubuntu:jammy", "debian", "debian:../x", "docker.io/debian:bookworm"):
        with pytest.raises(WanlabError, match="debian:SUITE"):
            images.parse_from(bad)


def test_the_mirror_is_the_one_apt_uses(monkeypatch):
    monkeypatch.setattr(images, "_apt_sources", lambda: [
        ("http://mirror.example/debian", ["bookworm", "bookworm-updates"], ["main"]),
        ("http://mirror.example/debian-security", ["bookworm-security"], ["main"]),
        ("https://packages.cloud.google.com/apt", ["cloud-sdk-bookworm"], ["main"]),
        ("https://deb.nodesource.com/node_20.x", ["nodistro"], ["main"])])
    assert images.mirrors("trixie") == [
        "deb http://mirror.example/debian trixie main",
        "deb http://mirror.example/debian trixie-updates main",
        "deb http://mirror.example/debian-security trixie-security main"]
    monkeypatch.setattr(images, "_apt_sources", lambda: [])
    assert images.mirrors("bookworm") == ["deb http://deb.debian.org/debian bookworm main"]
