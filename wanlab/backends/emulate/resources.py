"""The kinds of resource an emulated experiment owns, and how one recorded resource goes.

Every resource is written to the store's ``resources`` table *before* it is created
(state ``planned``), becomes ``created`` once it exists and ``removed`` once it is gone.
Removal goes through those records only, never through a name pattern:

* ``scheduler``: the experiment's event scheduler (pid, start time). SIGTERM, with up to
  15 s to stop its agents and programs, so their flows are stored.
* ``process``: start commands, FRR daemons, Programs, traffic agents (pid, start time).
  SIGTERM, then SIGKILL.
* ``engine``: the experiment's ``wanlab-engine`` (pid, start time, socket). A ``shutdown``
  request, then SIGTERM/SIGKILL; the socket is unlinked.
* ``tap``: a TAP ``ethN`` inside a node's namespace. Nothing of its own: the engine makes
  it persistent, so it outlives the engine and goes with its namespace (the next kind); a
  port removed at run time takes its TAP with it.
* ``nft``: an experiment's nftables table ``ip wanlab-<short>`` (the edge, docs/edge.md),
  in the host or in the edge gateway's namespace: ``nft delete table`` of exactly it.
* ``veth``: the edge gateway's default uplink, a veth whose host end is ``wlx<short>``:
  deleted (with its peer) if its index is still the recorded one.
* ``iface``: a host interface moved into a node and bridged there (``wanlab bridge``,
  :mod:`wanlab.backends.emulate.external`): moved back, MTU, state and addresses restored.
  Before ``netns``, whose deletion would destroy a veth still inside.
* ``netns``: a node's network namespace (inode). Every process still inside it (matched
  by inode), then unmount and unlink.
* ``userns``: the experiment's user namespace, which owns its nodes' network namespaces
  (:mod:`wanlab.backends.emulate.userns`): its uid range in the detail. Nothing to do: it
  ends with the last namespace and process in it (the kinds before it); the range stays the
  experiment's (a later swap-in takes it again) until terminate deletes its records.
* ``overlay``: a node's root, an overlayfs at ``roots/<node>`` in the experiment's folder
  (:mod:`wanlab.backends.emulate.rootfs`). Unmounted if the mount there is still the
  recorded one (its upper layer); the layer itself stays (hard state, kept on swap-out).
* ``idmap``: an image layer mounted idmapped by the experiment's user namespace under its
  nodes' overlays, at ``lowers/<layer>`` in the experiment's folder (:mod:`rootfs`).
  Unmounted if an idmapped mount is still there; after the overlays above it.
* ``cgroup``: the experiment's cgroup and one per node beneath it (their directories, one
  per controller hierarchy; :mod:`wanlab.backends.emulate.cgroups`). Last, once the
  processes are gone: whatever still runs in it is killed, then the directories removed
  (a node's before its experiment's: newest first).

:data:`KINDS` is in teardown order: whoever could still create or use a later kind goes
first. :func:`remove` applies it to any set of records, so teardown, ``cleanup`` and the
undo of one swap-in stage are the same code.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from wanlab.backends.emulate import (
    cgroups,
    egress,
    engine,
    external,
    idmap,
    netns,
    procs,
    rootfs,
)
from wanlab.engine.protocol import Shutdown
from wanlab.errors import WanlabError
from wanlab.store.db import Resource, Store


@dataclass(frozen=True)
class Kind:
    name: str
    remove: Callable[[Resource], None]


def tap_name(ns: str, ifname: str) -> str:
    """The record name of TAP ``ifname`` in namespace ``ns`` (one name, wherever it is made)."""
    return f"{ns}/{ifname}"


def _remove_scheduler(r: Resource) -> None:
    if "pid" in r.detail:
        procs.kill(r.detail["pid"], r.detail.get("started"), grace=15.0)


def _remove_process(r: Resource) -> None:
    if "pid" in r.detail:
        procs.kill(r.detail["pid"], r.detail.get("started"))


def _remove_engine(r: Resource) -> None:
    sock = r.detail.get("socket")
    pid, started = r.detail.get("pid"), r.detail.get("started")
    if pid and procs.alive(pid, started):
        with contextlib.suppress(Exception):
            with engine.Client(sock, timeout=2) as c:
                c.send(Shutdown())
        procs.kill(pid, started, grace=2.0)
    if sock:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sock)


def _remove_tap(r: Resource) -> None:
    """Persistent TAPs go with their namespace, in one batch (deleting them one by one
    costs ~20 ms each); the ``netns`` kind comes after this one."""


def _remove_netns(r: Resource) -> None:
    ino = r.detail.get("inode")
    current = netns.inode(r.name)
    if current is not None and ino is not None and current != ino:
        return          # not ours any more: someone else's namespace under that name
    if current is not None and ino is not None:
        for pid in netns.pids_in(ino):
            procs.kill(pid, procs.start_time(pid))
    netns.delete(r.name)    # with no namespace left, this clears a stale /etc/netns folder


def _remove_userns(r: Resource) -> None:
    """It ends with its namespaces and processes, removed before it."""


def _remove_cgroup(r: Resource) -> None:
    cgroups.remove(r.detail.get("dirs") or {}, top=r.detail.get("node") is None)
    if r.detail.get("note"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(r.detail["note"])


KINDS = (Kind("scheduler", _remove_scheduler), Kind("process", _remove_process),
         Kind("engine", _remove_engine), Kind("tap", _remove_tap),
         Kind("nft", egress.remove_table), Kind("veth", egress.remove_veth),
         Kind("iface", external.restore), Kind("netns", _remove_netns),
         Kind("userns", _remove_userns), Kind("overlay", rootfs.unmount),
         Kind("idmap", idmap.unmount_idmapped),
         Kind("cgroup", _remove_cgroup))
_BY_NAME = {k.name: k for k in KINDS}


def kind(name: str) -> Kind:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise WanlabError(f"unknown resource kind {name!r}; supported kinds are "
                          f"{', '.join(_BY_NAME)}") from None


def remove(store: Store, exp_id: int, ids: Iterable[int] | None = None,
           say: Callable[[str], None] | None = None) -> int:
    """Remove the experiment's recorded, not yet removed resources (only ``ids``, if
    given), kind by kind in :data:`KINDS` order and newest first within a kind; each is
    marked removed once gone. What is already gone is skipped, so running it twice is
    safe. Returns how many were removed."""
    wanted = None if ids is None else set(ids)

    def live() -> list[Resource]:
        return [r for r in store.resources(exp_id) if wanted is None or r.id in wanted]

    res = live()
    if not res:
        return 0
    if say:
        say(f"removing {len(res)} resources")
    unknown = sorted({r.kind for r in res} - set(_BY_NAME))
    done = 0
    for k in KINDS:
        # read again for every kind: the scheduler records processes (an agent preparing
        # its next flow) until it has stopped
        mine = [r for r in live() if r.kind == k.name]
        for r in reversed(mine):
            k.remove(r)
        store.mark_removed([r.id for r in mine])
        done += len(mine)
    if unknown:
        print(f"wanlab: resources of unknown kinds left recorded: {', '.join(unknown)} "
              f"(supported kinds are {', '.join(_BY_NAME)})", file=sys.stderr)
    return done
