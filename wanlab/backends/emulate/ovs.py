"""Open vSwitch processes an experiment owns: ``ovsdb-server``, ``ovs-vswitchd`` and
controllers (``ovs-testcontroller``), run inside one node with a private run directory.

The run directory (``OVS_RUNDIR``, the database, the logs, the control sockets) is the
experiment folder's ``ovs/``, readable by root only. Every process is written into its record
(``ovs/procs.json``) before it is started, then with its pid and start time once it runs;
:meth:`Ovs.stop` ends exactly those, by pid and start time (docs/mininet.md). The processes
also run in the node's cgroup, so the experiment's own teardown ends them should this
program die first.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

from wanlab.backends.emulate import procs
from wanlab.errors import WanlabError

SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"
NEEDS = ("ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl",
         "ovs-testcontroller")


def missing() -> list[str]:
    """The Open vSwitch programs this machine lacks."""
    import shutil
    return [p for p in NEEDS if not shutil.which(p)]


class OvsError(WanlabError):
    """Open vSwitch could not be started in the node."""


class Ovs:
    """One ``ovsdb-server`` and ``ovs-vswitchd`` in a node; ``enter`` is the argv prefix that
    runs a command in that node (its network namespace and cgroup)."""

    def __init__(self, folder: str, enter: list[str]):
        self.dir = os.path.join(folder, "ovs")
        self.enter = list(enter)
        self.record = os.path.join(self.dir, "procs.json")
        self.procs: list[dict] = []
        self.env = {**os.environ, "OVS_RUNDIR": self.dir, "OVS_DBDIR": self.dir,
                    "OVS_LOGDIR": self.dir, "OVS_SYSCONFDIR": self.dir}

    # -- the record ---------------------------------------------------------------------
    def _save(self) -> None:
        with open(self.record + ".new", "w") as f:
            json.dump(self.procs, f)
        os.replace(self.record + ".new", self.record)

    def spawn(self, what: str, argv: list[str], log: str | None = None) -> dict:
        """Start ``argv`` in the node, recorded first; the record's entry."""
        entry = {"what": what, "argv": argv, "pid": None, "started": None}
        self.procs.append(entry)
        self._save()
        out = open(os.path.join(self.dir, log), "ab") if log else subprocess.DEVNULL
        try:
            p = subprocess.Popen(self.enter + argv, env=self.env, stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True, close_fds=True)
        finally:
            if log:
                out.close()
        procs.hold(p)
        entry["pid"] = p.pid
        entry["started"] = procs.start_time(p.pid)
        self._save()
        return entry

    def running(self, entry: dict) -> bool:
        return entry.get("pid") is not None and procs.alive(entry["pid"], entry["started"])

    # -- Open vSwitch -------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> None:
        """The database and the switch daemon, ready for ``ovs-vsctl``."""
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        os.chmod(self.dir, 0o700)
        db = os.path.join(self.dir, "conf.db")
        r = subprocess.run(["ovsdb-tool", "create", db, SCHEMA], capture_output=True,
                           text=True, env=self.env)
        if r.returncode != 0:
            raise OvsError(f"ovsdb-tool create: {r.stderr.strip()}")
        sock = os.path.join(self.dir, "db.sock")
        db_proc = self.spawn("ovsdb-server", [
            "ovsdb-server", db, f"--remote=punix:{sock}",
            f"--unixctl={self.dir}/ovsdb-server.ctl", f"--log-file={self.dir}/ovsdb-server.log",
            "-vconsole:off"])
        self._wait(lambda: os.path.exists(sock), db_proc, timeout, "ovsdb-server")
        self.vsctl("--no-wait", "init")
        sw = self.spawn("ovs-vswitchd", [
            "ovs-vswitchd", f"unix:{sock}", f"--log-file={self.dir}/ovs-vswitchd.log",
            "-vconsole:off"])
        self._wait(lambda: any(n.startswith("ovs-vswitchd.") and n.endswith(".ctl")
                               for n in os.listdir(self.dir)), sw, timeout, "ovs-vswitchd")

    def _wait(self, ready, entry: dict, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while not ready():
            if not self.running(entry):
                raise OvsError(f"{what} ended at its start (its log: {self.dir})")
            if time.monotonic() > end:
                raise OvsError(f"{what} not ready after {timeout:.0f} s")
            time.sleep(0.05)

    def run(self, argv: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess:
        """A command in the node with this run directory (``ovs-vsctl``, ``ovs-ofctl``)."""
        return subprocess.run(self.enter + argv, env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def vsctl(self, *args: str) -> str:
        r = self.run(["ovs-vsctl", "--timeout=30", *args])
        if r.returncode != 0:
            raise OvsError(f"ovs-vsctl {' '.join(args[:3])}: {r.stderr.strip()}")
        return r.stdout

    def stop(self) -> None:
        """End every recorded process, newest first, by pid and start time."""
        for entry in reversed(self.procs):
            if entry.get("pid") is not None:
                procs.kill(entry["pid"], entry["started"], grace=2.0)


def recorded(folder: str) -> list[dict]:
    """The processes recorded for the experiment in ``folder`` (none: an empty list)."""
    try:
        with open(os.path.join(folder, "ovs", "procs.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return []
