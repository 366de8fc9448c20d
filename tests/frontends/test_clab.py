"""containerlab topology files: what is read from them (pure), and one lab on real
namespaces with its own interface names and addresses."""

import os
import re
import textwrap
import time

import pytest
from conftest import needs_root

from wanlab.errors import SpecError
from wanlab.frontends import load

# containerlab's documented shapes, written afresh: kinds/defaults/groups, brief and
# extended links, a bridge, a router kind, and keys wanlab leaves out
LAB = """\
name: campus
mgmt:
  network: campus-mgmt
  ipv4-subnet: 172.30.30.0/24
topology:
  defaults:
    kind: linux
    env: {SITE: north, TIER: any}
  kinds:
    linux:
      labels: {role: host}
      env: {TIER: kind}
  groups:
    servers:
      env: {TIER: server}
      cpu: 0.5
  nodes:
    client:
      exec:
        - ip addr add 10.9.0.1/24 dev uplink0
    server:
      group: servers
      cmd: sleep 600
      exec: ["ip addr add 10.9.0.2/24 dev uplink0"]
      binds:
        - files/index.html:/srv/index.html:ro
      ports: ["8080:80"]
      mgmt-ipv4: 172.30.30.5
    spine:
      kind: nokia_srlinux
      image: ghcr.io/nokia/srlinux
      startup-config: spine.cfg
    sw:
      kind: bridge
  links:
    - endpoints: ["client:uplink0", "server:uplink0"]
      vars: {delay: 5ms, loss: 1, rate: 10000, jitter: 1ms}
    - endpoints: ["client:e1-2", "sw:port1"]
    - endpoints: ["spine:e1-1", "sw:port2"]
    - endpoints: ["server:eth9", "host:srv-eth9"]
    - type: veth
      mtu: 9000
      endpoints:
        - {node: server, interface: eth2, mac: "02:00:00:00:00:01"}
        - {node: spine, interface: e1-2}
"""


@pytest.fixture
def lab_file(tmp_path):
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "index.html").write_text("hello\n")
    p = tmp_path / "campus.clab.yml"
    p.write_text(LAB)
    return p


def test_nodes_links_and_inheritance(lab_file):
    exp = load(str(lab_file))
    assert exp.name == "campus" and exp.rtproto == "manual" and exp.addressing == "none"
    nodes = {n.name: n for n in exp.nodes}
    assert sorted(nodes) == ["client", "server", "spine"]      # the bridge is a LAN
    server = nodes["server"]
    # node > group > kind > defaults: env merged key by key, labels as CLAB_LABEL_*
    env = dict(server.env)
    assert (env["SITE"], env["TIER"], env["CLAB_LABEL_ROLE"]) == ("north", "server", "host")
    assert env["CLAB_LABEL_CLAB_NODE_NAME"] == "server"
    assert dict(nodes["client"].env)["TIER"] == "kind"
    # cmd is the start command; exec a program started at t = 0
    assert server.startcmd == "sleep 600" and server.cpu_cores == 0.5
    assert nodes["client"].startcmd is None
    progs = {p.node: p for p in exp.programs}
    assert progs["server"].command == "ip addr add 10.9.0.2/24 dev uplink0"
    assert sorted((e.time_s, e.target, e.action) for e in exp.events) == \
        [(0, "client-exec", "start"), (0, "server-exec", "start")]
    # binds are copies into the node's own root (which it then needs)
    assert server.tarfiles == (("=/srv/index.html", str(lab_file.parent / "files" /
                                                        "index.html")),)
    assert server.image == "default" and nodes["spine"].image is None
    l0, l4 = exp.links
    assert (l0.a, l0.b, l0.ifnames) == ("client", "server", ("uplink0", "uplink0"))
    assert (l0.ab.delay_s, l0.ab.loss, l0.ab.bandwidth_bps) == (0.005, 0.01, 10_000_000)
    assert l0.ab == l0.ba
    assert l4.ifnames == ("eth2", "e1-2")
    (lan,) = exp.lans
    assert lan.name == "sw" and [(m.node, m.ifname) for m in lan.members] == \
        [("client", "e1-2"), ("spine", "e1-1")]


def test_every_key_left_out_is_one_warning(lab_file):
    exp = load(str(lab_file))
    said = "\n".join(exp.warnings)
    for key, line in (("mgmt", 2), ("topology.nodes.server.ports", 27),
                      ("topology.nodes.server.mgmt-ipv4", 28),
                      ("topology.nodes.spine.startup-config", 32),
                      ("topology.links[0].vars.jitter", 37),
                      ("topology.links[3].endpoints", 40),
                      ("topology.links[4].mtu", 42),
                      ("topology.links[4].endpoints[0].mac", 44)):
        assert len(re.findall(rf":{line}: {re.escape(key)}(\s|:)", said)) == 1, (key, said)
    assert "nokia_srlinux runs as a Linux router" in said
    assert "ghcr.io/nokia/srlinux is not run" in said


def test_plan_keeps_names_and_gives_no_addresses(lab_file):
    from wanlab.plan.plan import make_plan
    plan = make_plan(load(str(lab_file)), "0000")
    ifs = {(i.node, i.ifname): i.ip for n in plan.nodes.values() for i in n.interfaces}
    assert ifs == {("client", "uplink0"): None, ("server", "uplink0"): None,
                   ("client", "e1-2"): None, ("spine", "e1-1"): None,
                   ("server", "eth2"): None, ("spine", "e1-2"): None}
    assert "client" not in plan.hosts and not plan.subnets


@pytest.mark.parametrize("change,error", [
    (("client:uplink0", "nobody:eth1"), "no node 'nobody'"),
    (("files/index.html:/srv", "../x:/srv"), "inside the lab's folder"),
    (("files/index.html:/srv", "/etc/passwd:/srv"), "inside the lab's folder"),
    (("files/index.html:/srv", "files/none:/srv"), "no such file"),
    (("kind: bridge", "kind: vr-nonsense"), "kind 'vr-nonsense' unknown"),
    (("server:uplink0\"", "server:bad/name\""), "not a Linux interface name"),
    (("group: servers", "group: nope"), "no group 'nope'"),
])
def test_mistakes_are_one_line_errors(lab_file, change, error):
    lab_file.write_text(LAB.replace(*change))
    with pytest.raises(SpecError) as e:
        load(str(lab_file))
    assert error in str(e.value) and "campus.clab.yml:" in str(e.value), str(e.value)


TWO = """\
name: pair
topology:
  nodes:
    a:
      kind: linux
      exec: ["ip addr add 192.168.7.1/24 dev wan0"]
    b:
      kind: linux
      env: {GREETING: hi there}
      binds: ["site:/srv/site:ro"]
      exec:
        - ip addr add 192.168.7.2/24 dev port-a
        - sh -c 'echo "$GREETING $CLAB_LABEL_CLAB_NODE_NAME" > /tmp/said'
  links:
    - endpoints: ["a:wan0", "b:port-a"]
      delay: 4ms
"""


@needs_root
def test_a_lab_runs_with_its_names_and_addresses(lab, tmp_path, test_image):
    """Two nodes (b on the default image, for its bind) on the lab's own interface names
    and addresses, b's env and label in its exec, b's bind copied into its root."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text("<p>hi</p>\n")
    os.symlink("/etc/shadow", tmp_path / "site" / "shadow")
    p = tmp_path / "pair.clab.yml"
    p.write_text(textwrap.dedent(TWO))
    lab.create(load(str(p)))

    def run(node, *argv):
        return lab.exec("pair", node, list(argv), capture_output=True, text=True)

    def waited(node, *argv):       # exec runs as the clock starts: wait for it
        for _ in range(100):
            r = run(node, *argv)
            if r.returncode == 0 and r.stdout:
                return r.stdout
            time.sleep(0.1)
        return r.stdout
    assert lab.show("pair")["nodes"]["a"]["interfaces"][0]["ip"] is None
    said = waited("b", "cat", "/tmp/said")
    assert said == "hi there b\n"
    out = waited("a", "sh", "-c", "ip -o -4 addr show dev wan0 | grep inet")
    assert re.findall(r"inet (\S+)", out) == ["192.168.7.1/24"], out   # the user's only
    r = run("a", "ping", "-n", "-c", "2", "-i", "0.2", "-W", "2", "192.168.7.2")
    rtts = [float(x) for x in re.findall(r"time=([\d.]+) ms", r.stdout)]
    assert rtts and 7.9 < min(rtts) < 40, r.stdout        # 4 ms each way (and load)
    page = lab.exec("pair", "b", ["cat", "/srv/site/index.html"], capture_output=True,
                    text=True).stdout
    assert page == "<p>hi</p>\n"
    # a bind is a copy: what the node writes there stays in its root, the host's file is
    # unchanged; the copy is the node's root's, and a link in the source stays a link
    # (to the node's own /etc/shadow)
    assert run("b", "sh", "-c", "echo mine > /srv/site/index.html && stat -c %u "
                                "/srv/site/index.html && readlink /srv/site/shadow"
               ).stdout == "0\n/etc/shadow\n"
    assert (tmp_path / "site" / "index.html").read_text() == "<p>hi</p>\n"


def test_a_bind_source_is_never_wanlabs_state(lab_file, monkeypatch):
    """SRC may not be, hold or lie inside the state folder ($WANLAB_HOME, /var/lib/wanlab)
    or the namespaces' /etc/netns: a lab beside the store cannot copy it into a node."""
    home = lab_file.parent / "outer" / "home"
    home.mkdir(parents=True)
    (home / "exps").mkdir()
    monkeypatch.setenv("WANLAB_HOME", str(home))
    for src in ("outer", "outer/home", "outer/home/exps"):
        lab_file.write_text(LAB.replace("files/index.html:/srv", f"{src}:/srv"))
        with pytest.raises(SpecError, match=r"binds\[0\].*wanlab's state"):
            load(str(lab_file))


def _copied(stream):
    import tarfile
    with stream as r, tarfile.open(fileobj=r, mode="r|") as t:
        return {m.name: (m.type, m.linkname, t.extractfile(m).read() if m.isfile() else None)
                for m in t}


def test_a_bind_is_copied_without_following_a_link(tmp_path):
    """The copy is made at swap-in, after the check: a folder on SRC's path the lab's owner
    replaced by a link since (to a host folder) is refused, not followed; links inside SRC
    stay links; FIFOs are left out (no hang); the state folder inside is refused."""
    from wanlab.backends.emulate.bindsrc import BindError, Stream
    lab, secret = tmp_path / "lab", tmp_path / "secret"
    (lab / "site").mkdir(parents=True)
    secret.mkdir()
    (secret / "key").write_text("host secret\n")
    (lab / "site" / "index.html").write_text("hi\n")
    os.symlink(secret / "key", lab / "site" / "key")
    os.mkfifo(lab / "site" / "fifo")
    home = tmp_path / "home"
    with pytest.raises(BindError, match="neither a file nor a folder"):
        Stream(str(lab / "site" / "fifo"), "fifo", str(home))
    got = _copied(Stream(str(lab / "site"), "srv", str(home)))
    assert got == {"srv": (b"5", "", None), "srv/index.html": (b"0", "", b"hi\n"),
                   "srv/key": (b"2", str(secret / "key"), None)}
    # the lab's folder swapped for a link to a host folder after the topology was read
    os.rename(lab, tmp_path / "lab.old")
    os.symlink(secret, lab)
    with pytest.raises(BindError, match="symbolic link"):
        Stream(str(lab / "key"), "key", str(home))
    # the state folder met inside the source
    (tmp_path / "lab.old" / "site" / "home").mkdir()
    s = Stream(str(tmp_path / "lab.old" / "site"), "x",
               str(tmp_path / "lab.old" / "site" / "home"))
    with s as r:
        r.read()              # the archive stops short, the node's tar fails, setup says why
    assert "wanlab's state" in s.error
