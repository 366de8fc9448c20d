"""Each experiment's user namespace: its range of uids, and who joins it.

Root in a node without an image is the root of the experiment's user namespace, not of the
host: uid 0 (and every uid up to 65535) in the node is ``base + uid`` on the host, where
``base`` is the experiment's range. The range is the experiment's from its first swap-in to
its terminate: each swap-in records a ``userns`` resource naming it (before the namespace
exists); a later swap-in takes the base of the experiment's earlier records (its files in
``nodes/<node>/`` keep their owners), and a new experiment takes a base no other experiment
of the host holds (:mod:`wanlab.store.host`). Terminate deletes the experiment's records
and its claim, which frees it.

The nodes' network namespaces are created inside the user namespace
(:func:`wanlab.backends.emulate.netns.create_many`), so it owns them: the node keeps
NET_ADMIN there. A node's holder builds the confinement as root of the host and joins the
user namespace last (:mod:`wanlab.backends.emulate.nodes`); a node with an image sees its
layers through idmapped mounts (:mod:`wanlab.backends.emulate.idmap`), so the image's root
files are its root's.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import zlib

from wanlab.store import host
from wanlab.store.db import Store

SIZE = 65536                # uids (and gids) of one range: 0..65535 in the node
FIRST = 1 << 30             # the first range's base on the host
SLOTS = 16384               # ranges between FIRST and 2**31
NS_GET_USERNS = 0xB701      # ioctl: the user namespace owning a namespace


def available() -> bool:
    """Whether experiments get a user namespace here: the kernel allows them
    (``user.max_user_namespaces``) and ``WANLAB_USERNS`` is not ``0``."""
    if os.environ.get("WANLAB_USERNS", "1") == "0":
        return False
    try:
        with open("/proc/sys/user/max_user_namespaces") as f:
            return int(f.read()) > 0
    except (OSError, ValueError):
        return False


def claim(store: Store, exp_id: int) -> tuple[int, int]:
    """Record this swap-in's user namespace for experiment ``exp_id`` (state planned) and
    return (record id, base of its uid range); the base is the experiment's earlier one, or
    a free one (unique among the store's experiments, chosen in one transaction)."""
    db = store.db
    db.execute("BEGIN IMMEDIATE")
    try:
        rows = db.execute("SELECT exp_id, detail FROM resources WHERE kind = 'userns'")
        taken: dict[int, int] = {}
        for eid, detail in rows:
            taken[int(json.loads(detail)["base"])] = eid
        mine = [b for b, e in taken.items() if e == exp_id]
        if mine:
            base = mine[0]
            host.claim("uids", [str(base)], store.home, exp_id)   # one from before claims
        else:
            # free in this store and claimed on the host: another store's experiment never
            # shares the range (starting where this store's hash says keeps the search short)
            start = zlib.crc32(store.home.encode()) % SLOTS
            free = (str(FIRST + ((start + k) % SLOTS) * SIZE) for k in range(SLOTS))
            got = host.claim("uids", free, store.home, exp_id,
                             usable=lambda b: int(b) not in taken)
            if got is None:
                raise OSError("no free uid range left for a user namespace")
            base = int(got)
        cur = db.execute(
            "INSERT INTO resources(exp_id, kind, name, detail, state, created)"
            " VALUES (?, 'userns', ?, ?, 'planned', ?)",
            (exp_id, f"uids-{base}", json.dumps({"base": base, "size": SIZE}), time.time()))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return int(cur.lastrowid or 0), base


def base_of(store: Store, exp_id: int) -> int | None:
    """The base of the experiment's live user namespace, if it has one."""
    for r in store.resources(exp_id):
        if r.kind == "userns" and r.state == "created":
            return int(r.detail["base"])
    return None


def owner_fd(netns_path: str) -> int | None:
    """A descriptor of the user namespace owning the network namespace at ``netns_path``,
    or None if that is the caller's own (a namespace made without one)."""
    nfd = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        ufd = fcntl.ioctl(nfd, NS_GET_USERNS)
    finally:
        os.close(nfd)
    st, own = os.fstat(ufd), os.stat("/proc/self/ns/user")
    if (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino):
        os.close(ufd)
        return None
    return ufd
