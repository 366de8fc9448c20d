"""What a portal upload may name of the host: nothing but what root has handed out.

A description from the CLI is root's and may name any host resource. One uploaded through
the portal comes from a project member, so before anything is created (and before
``check_only`` answers) :func:`confine` checks it:

* **host interfaces** (an edge's ``uplink: {interface: IF}``, a node's ``external``
  interface bridged in): only those root keeps in ``portal_interfaces``
  (``wanlab portal allow-interface IF``). Any other name is refused with the same words
  whether the host has such an interface or not, so the answer reveals no interface names.
  An edge without an uplink interface (a veth into the host's own network, masqueraded
  out of the machine) is refused too: that way out is root's;
* **host files** (``tarfiles``' tarballs, ``.deb`` paths among ``packages``): an upload
  names only files sent with it (``NAME``) or of its project's store (``project:NAME``),
  which become the experiment's own copies (:mod:`wanlab.portal.files`); any other path is
  refused, with words that do not depend on the path, so an answer never tells whether a
  host file exists;
* **the host's root file system**: a node without an image runs on the host's files (read
  only, but readable: ``/etc/shadow``). Those are root's alone, so every emulated node of a
  portal experiment without an image gets the default one, and a console on a project's
  node without one (an experiment stored before this rule) is refused
  (:func:`console_node`). Its nodes run in their experiment's user namespace, so dynamic
  routing (FRR's daemons, which keep SYS_ADMIN, from the image's files) has SYS_ADMIN only
  there; a host without user namespaces refuses it when the daemons start.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time

from wanlab.backends.emulate.images import DEFAULT_IMAGE
from wanlab.errors import WanlabError
from wanlab.model import imageref
from wanlab.model.ir import IFNAME_RE, Experiment, Node, Source
from wanlab.portal.files import Attached, FileError


class HostResourceError(WanlabError):
    """An upload names a host resource it may not; ``line`` is where, when known."""

    def __init__(self, message: str, source: Source | None = None):
        self.message = message
        self.line = source.line if source is not None else None
        super().__init__(message)


# -- the interfaces root lends to portal experiments ---------------------------------
def allowed_interfaces(db: sqlite3.Connection) -> list[str]:
    return [r[0] for r in db.execute("SELECT name FROM portal_interfaces ORDER BY name")]


def allow_interface(db: sqlite3.Connection, name: str) -> None:
    if not IFNAME_RE.match(name or "") or name in (".", ".."):
        raise WanlabError(f"{name!r} is not a network interface name")
    db.execute("INSERT OR IGNORE INTO portal_interfaces(name, added) VALUES (?,?)",
               (name, time.time()))


def disallow_interface(db: sqlite3.Connection, name: str) -> None:
    if db.execute("DELETE FROM portal_interfaces WHERE name = ?", (name,)).rowcount == 0:
        raise WanlabError(f"interface {name!r} is not on the portal's list")


def _interface(db: sqlite3.Connection, name: str, what: str, source: Source) -> None:
    allowed = db.execute("SELECT 1 FROM portal_interfaces WHERE name = ?",
                         (name,)).fetchone()
    if allowed is None:
        raise HostResourceError(
            f"{what}: interface {name!r} is not one the portal lends to experiments (the "
            f"administrator lists them with 'wanlab portal allow-interface')", source)


# -- the check of an upload ------------------------------------------------------------
def confine(db: sqlite3.Connection, exp: Experiment,
            attached: Attached | None = None) -> Experiment:
    """``exp`` as a portal experiment: refused if it names a host interface root has not
    allowed or any host file; its tarballs and ``.deb`` files become the experiment's
    copies of the files uploaded with it or of its project's store (``attached``); every
    emulated node without an image gets the default one."""
    if exp.edge is not None and exp.edge.interface is None:
        raise HostResourceError(
            "edge: without an uplink interface the edge's way out is a veth into the host's "
            "own network; a portal experiment's edge needs an uplink interface the "
            "administrator lends (edge: {uplink: {interface: IF, address: A/LEN, via: HOP}})",
            exp.edge.source)
    if exp.edge is not None:
        _interface(db, exp.edge.interface, "edge.uplink.interface", exp.edge.source)
    nodes = []
    for n in exp.nodes:
        if n.external is not None:
            _interface(db, n.external, f"node {n.name}: external", n.source)
        if n.tarfiles or any(p.startswith("/") for p in n.packages):
            n = _attach(n, attached)
        _image(n)
        if n.kind == "emulated" and n.image is None:
            n = dataclasses.replace(n, image=DEFAULT_IMAGE)
        nodes.append(n)
    return dataclasses.replace(exp, nodes=tuple(nodes))


def _image(n: Node) -> None:
    """Refuse an OCI image read from a host file or folder (``oci:``, ``oci-archive:``,
    ``docker-archive:``): root imports such images (``wanlab image import``) and a portal
    upload names them by their store name; a registry reference is no host file."""
    if n.image is not None and imageref.is_ref(n.image) and \
            imageref.split(n.image)[0] != "docker":
        raise HostResourceError(
            f"node {n.name}: image names a file on the host; a portal upload names a wanlab "
            f"image, an image root imported ('wanlab image import'), or a registry "
            f"reference", n.source)


_HOST_FILE = ("{what} name files on the host; a portal upload names only files sent with it "
              "(NAME) or of its project's store (project:NAME)")


def _attach(n: Node, attached: Attached | None) -> Node:
    """``n`` with its tarballs and .deb files mapped to the upload's files; refused, in
    words that do not depend on the path, when one names anything else."""
    def mapped(ref: str, what: str) -> str:
        try:
            got = attached.path(ref) if attached is not None else None
        except FileError as e:
            raise HostResourceError(f"node {n.name}: {what}: {e}", n.source) from None
        if got is None:
            raise HostResourceError(f"node {n.name}: " + _HOST_FILE.format(what=what),
                                    n.source)
        return got
    tarfiles = tuple((d, mapped(t, "tarfiles")) for d, t in n.tarfiles)
    packages = tuple(mapped(p, "packages") if p.startswith("/") else p for p in n.packages)
    return dataclasses.replace(n, tarfiles=tarfiles, packages=packages)


def console_node(exp: Experiment, node: str) -> None:
    """Refuse a portal console on a project's node that runs on the host's files."""
    try:
        n = exp.node(node)
    except KeyError:
        raise WanlabError(f"no node {node!r} in experiment {exp.name!r}") from None
    if n.kind == "emulated" and n.image is None:
        raise WanlabError(f"node {node} runs on the host's own files (it has no image): its "
                          f"console is root's ('wanlab shell'), not the portal's")
