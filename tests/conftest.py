"""Shared fixtures: a private wanlab home per test, and IR builders for small topologies.

Tests run as root on real namespaces; every experiment a test creates lives
in its own temporary WANLAB_HOME and is cleaned up at the end, even when the
test fails.
"""

import dataclasses
import importlib.util
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile

import pytest

from wanlab.model.ir import Experiment, Lan, LanMember, Link, LinkParams, Node, validate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINE = os.path.join(ROOT, "target", "release", "wanlab-engine")

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")

# Fixtures that build experiments on the host (namespaces, engines, images)
HOST_FIXTURES = frozenset({"lab", "test_image", "default_image", "shared_cluster"})


def _on_host(item) -> bool:
    """Whether a test needs the host (root, namespaces, engines): marked ``needs_root`` (a
    ``skipif`` whose reason names root, by itself or on its module) or asking for a fixture
    that builds on the host. The rest are pure: parsing, planning, simulation, stores."""
    if HOST_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    return any("root" in str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif"))


def pytest_configure(config):
    config.addinivalue_line("markers", "host: a test on the host (root, namespaces, engines); "
                            "set by tests/conftest.py, so `-m 'not host'` runs the pure ones")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """Pure tests first (a minute or two), then the host's: a broken build fails fast. The
    modules on the session's cluster come last, one after the other, so that its Ray
    daemons idle through no other test and go down once their last test is over. The sort
    is stable, so each phase keeps the files' order and a module's tests stay together
    (its module fixtures are built once)."""
    on_cluster = {i.module for i in items if "shared_cluster" in i.fixturenames}
    for i in items:
        if _on_host(i):
            i.add_marker("host")
    items.sort(key=lambda i: (_on_host(i), getattr(i, "module", None) in on_cluster))
    part = os.environ.get("WANLAB_TEST_PART")
    if part:
        _keep_part(config, items, part, on_cluster)
    pure = [i for i in items if not _on_host(i)]
    config._wl_last_pure = pure[-1] if pure and len(pure) < len(items) else None


# The suite's parts (tests/run_parts.py runs the pure part, then the other two side by side):
# the clusters' tests mostly wait on Ray and on CLI children, so the host's other tests fill
# that time.
PARTS = ("pure", "cluster", "host")


def _part_of(item, on_cluster) -> str:
    if not _on_host(item):
        return "pure"
    # the modules that start a cluster of their own (test_cluster_start, _wan) go with the
    # host's part: the shared cluster's are the longest part already
    return "cluster" if getattr(item, "module", None) in on_cluster else "host"


def _keep_part(config, items, part: str, on_cluster) -> None:
    """Keep only the tests of ``part`` (``WANLAB_TEST_PART``), the rest deselected."""
    if part not in PARTS:
        raise pytest.UsageError(f"WANLAB_TEST_PART={part!r}: one of {', '.join(PARTS)}")
    keep = [i for i in items if _part_of(i, on_cluster) == part]
    config.hook.pytest_deselected(items=[i for i in items if i not in keep])
    items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """When a pure test failed, stop before the host's tests (minutes of namespaces)."""
    yield
    if item is getattr(item.config, "_wl_last_pure", None) and item.session.testsfailed:
        item.session.shouldstop = (f"{item.session.testsfailed} pure test(s) failed: the "
                                   "tests on the host were not run")


# Node images are shared by every test of a session, and across sessions: built once, cached
# by the hash of their suite and packages (wanlab/backends/emulate/images.py). One image
# serves every test: the default one (what Figure 2's Emulab OS maps to); its build time is
# mostly Debian's base, so a smaller second image would cost about as much again.
TEST_IMAGES = os.environ.get("WANLAB_TEST_IMAGES", "/var/tmp/wanlab-test-images")


@pytest.fixture(scope="session", autouse=True)
def _shared_images():
    """Every wanlab of the session (Lab and CLI children) finds images in TEST_IMAGES."""
    old = os.environ.get("WANLAB_IMAGES")
    os.environ["WANLAB_IMAGES"] = TEST_IMAGES
    yield
    if old is None:
        os.environ.pop("WANLAB_IMAGES", None)
    else:
        os.environ["WANLAB_IMAGES"] = old


def _build_once():
    import time

    from wanlab.backends.emulate import images
    t0 = time.monotonic()
    img = images.Images(TEST_IMAGES).ensure(images.DEFAULT_IMAGE)
    took = time.monotonic() - t0
    if took > 5:
        print(f"\n[image {img.name}: built in {took:.0f} s, once per session]")
    return img.name


@pytest.fixture(scope="session")
def test_image():
    """The default image (iproute2, ping, iperf3, FRR, tcpdump, python3, procps, dnsmasq),
    built once per session (about a minute the first time; then reused from TEST_IMAGES)."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    return _build_once()


default_image = test_image


@pytest.fixture
def lab(tmp_path):
    from wanlab.lifecycle import Lab
    lab = Lab(str(tmp_path / "home"))
    yield lab
    for row in lab.list():
        lab.cleanup(row.name)
        lab.terminate(row.name)
    lab.close()


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The session's local test cluster: its controller's home, its id, and the folder
    under /tmp it was brought up from."""

    home: pathlib.Path
    cid: str
    cwd: pathlib.Path
    machines: int = 3

    def clear(self) -> None:
        """Clean up and terminate every experiment of its home: what a module (or a test
        that failed half-way) left, before the next module's tests."""
        listed = wanlab_cli(self.home, "list", check=False, cwd="/").stdout
        for row in listed.splitlines()[1:]:
            name = row.split()[0]
            wanlab_cli(self.home, "cleanup", name, check=False, cwd="/")
            wanlab_cli(self.home, "terminate", name, check=False, cwd="/")


def netns_names() -> set[str]:
    return set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                              check=False).stdout.split())


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory):
    """One local test cluster of 3 machines (network namespaces, each with its Ray worker
    and its host agent) for every test that runs experiments on a cluster: bringing Ray's
    daemons up and down costs tens of seconds each time. The tests of ``cluster up`` and
    ``down`` themselves, and of a cluster joined by address with shaped paths, keep their
    own. Brought up as a user would: from a folder under /tmp (which nodes see as their
    own, empty /tmp), its store under wanlab's state folder (/var/lib/wanlab, which nodes
    see hidden). Its modules run last, one after the other (the sort above)."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is installed by make install")
    os.makedirs("/var/lib/wanlab", mode=0o711, exist_ok=True)
    home = pathlib.Path(tempfile.mkdtemp(prefix="test-cluster-", dir="/var/lib/wanlab"))
    cwd = tmp_path_factory.mktemp("from-tmp")
    assert str(cwd).startswith("/tmp/"), cwd
    before = netns_names()
    cid = None
    try:
        p = wanlab_cli(home, "cluster", "up", "--local", "3", timeout=900, cwd=cwd)
        cid = re.search(r"cluster (\w+): 3 machines up", p.stdout + p.stderr).group(1)
        cluster = Cluster(home, cid, cwd)
        yield cluster
        cluster.clear()
    finally:
        wanlab_cli(home, "cluster", "down", check=False, timeout=300, cwd="/")
        shutil.rmtree(home, ignore_errors=True)
    left = {n for n in netns_names() - before if n.startswith(f"wlc{cid}")}
    assert not left, left


def _own_children() -> list[int]:
    """Live processes whose parent is this test process (by /proc's PPid, never by name)."""
    me, out = os.getpid(), []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me and fields[0] != "Z":
                out.append(int(d))
    return out


@pytest.fixture(autouse=True)
def _leave_nothing(tmp_path):
    """After every test, even a failed one: stop the CLI children it left running (a
    failed assertion can leave one paused or mid-run), then clean up and terminate every
    experiment of every store under the test's folder, so no namespace outlives it."""
    yield
    if os.geteuid() != 0:
        return
    for pid in _own_children():
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    # reap in whatever order they end: a node's init (holder) finishes exiting only once
    # every process of its PID namespace is reaped, some by us (a start command we started)
    reaped = {}
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        reaped[pid] = status
    if reaped:
        _tell_popens(reaped)
    from wanlab.lifecycle import Lab
    for db in tmp_path.rglob("wanlab.db"):
        lab = Lab(str(db.parent))
        try:
            for row in lab.list():
                lab.cleanup(row.name)
                lab.terminate(row.name)
        finally:
            lab.close()


def _tell_popens(reaped):
    """Give every Popen whose child was reaped above its status. Otherwise, once its pid
    comes round (pid_max is 32768 here), the Popen's finaliser or subprocess's cleanup
    polls the pid and reaps a later test's child, whose status is then lost (a killed
    ``sleep`` read as "never reaped" in test_faults, a few times in full runs)."""
    import gc
    for o in gc.get_objects():
        if isinstance(o, subprocess.Popen) and o.returncode is None and o.pid in reaped:
            o.returncode = os.waitstatus_to_exitcode(reaped[o.pid])


def params(bw=0, delay=0.0, loss=0.0):
    return LinkParams(bandwidth_bps=bw, delay_s=delay, loss=loss)


def pair(name="pair", bw=0, delay=0.0, loss=0.0, seed=1):
    p = params(bw, delay, loss)
    return validate(Experiment(name, nodes=(Node("a"), Node("b")),
                               links=(Link("link0", "a", "b", ab=p, ba=p),), seed=seed))


def chain(n, name="chain", delay=0.0):
    p = params(0, delay)
    nodes = tuple(Node(f"n{i}") for i in range(n))
    links = tuple(Link(f"l{i}", f"n{i}", f"n{i+1}", ab=p, ba=p) for i in range(n - 1))
    return validate(Experiment(name, nodes=nodes, links=links))


def lan(n, name="lanexp", delay=0.0):
    half = params(0, delay / 2)
    nodes = tuple(Node(f"h{i}") for i in range(n))
    return validate(Experiment(name, nodes=nodes, lans=(Lan(
        "lan0", tuple(LanMember(f"h{i}", to_lan=half, from_lan=half) for i in range(n)),
        delay_s=delay),)))


def ping_rtts(lab, exp, src, dst, count=5, interval=0.05):
    """RTTs in ms of ``count`` pings from node ``src`` to host ``dst``."""
    out = lab.exec(exp, src, ["ping", "-n", "-c", str(count), "-i", str(interval), "-W", "2",
                              dst], capture_output=True, text=True)
    return [float(x) for x in re.findall(r"time=([\d.]+) ms", out.stdout)]


def leftovers(short):
    """Namespaces and root-namespace devices carrying an experiment's short id."""
    ns = [n for n in os.listdir("/run/netns") if n.startswith(f"wl-{short}-")] \
        if os.path.isdir("/run/netns") else []
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    devs = re.findall(rf"\d+: (wl{short}-\d+)", links)
    return ns + devs


def wanlab_cli(home, *args, check=True, timeout=600, cwd=None):
    """``wanlab ARGS`` as a child with its own WANLAB_HOME (this checkout's code); no
    traceback ever, and exit 0 unless ``check`` is off."""
    import sys
    env = {**os.environ, "WANLAB_HOME": str(home), "PYTHONPATH": ROOT}
    p = subprocess.run([sys.executable, "-m", "wanlab.cli", *args], capture_output=True,
                       text=True, env=env, timeout=timeout, check=False, cwd=cwd)
    assert "Traceback" not in p.stderr, p.stderr
    if check:
        assert p.returncode == 0, (args, p.stdout, p.stderr)
    return p
