"""A node's process context: how a command runs inside a node.

``node_argv`` is the one place that says what "inside a node" means (network
namespace, hosts file, hostname, FRR sockets); start commands, Programs, traffic
agents, FRR and ``wanlab exec``/``shell`` all go through it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess

from wanlab.backends.emulate import procs
from wanlab.plan.types import Plan
from wanlab.store.db import ExperimentRow, Store


# Inside the node: its hostname, and (when it runs FRR) its own /run/frr, so vtysh and the
# daemons meet there (/etc/frr is already the node's own: ip netns exec binds /etc/netns/NS/*).
NODE_SHELL = ('hostname "$0" || exit 111; '
              'if [ -d /etc/frr/run ]; then mkdir -p /run/frr && '
              'mount --bind /etc/frr/run /run/frr || exit 111; fi; exec "$@"')


def node_argv(ns: str, node: str, argv: list[str]) -> list[str]:
    """Run ``argv`` inside a node: its namespace, hosts file, hostname and FRR sockets."""
    return ["ip", "netns", "exec", ns, "unshare", "--uts", "--", "sh", "-c", NODE_SHELL, node,
            *argv]


def start_command(store: Store, row: ExperimentRow, plan: Plan, node: str, cmd: str,
                  folder: str) -> None:
    """Run a node's start command in the background; output and exit code in its folder."""
    ndir = os.path.join(folder, "nodes", node)
    out = os.path.join(ndir, "startcmd.log")
    code = os.path.join(ndir, "startcmd.exit")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(code)
    script = f"sh -c {shlex.quote(cmd)}; echo $? > {shlex.quote(code)}"
    rid = store.record(row.id, "process", f"startcmd-{node}", node=node)
    with open(out, "ab") as log:
        p = subprocess.Popen(node_argv(plan.nodes[node].netns, node, ["sh", "-c", script]),
                             cwd=ndir, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                             start_new_session=True)
    store.update_resource(rid, "created", pid=p.pid, started=procs.start_time(p.pid))
