"""Node images and Emulab node setup in every front end: tb-set-node-os/-tarfiles/-rpms,
YAML ``image:``/``tarfiles:``/``packages:``, the builder's keywords (no root needed)."""

import pytest

from wanlab.errors import SpecError
from wanlab.frontends import normalize
from wanlab.frontends.builder import ExperimentBuilder
from wanlab.frontends.yaml_spec import loads
from wanlab.model import ir


def test_ns_os_tarfiles_and_rpms(tcl, tmp_path):
    e = tcl("""\
        set a [$ns node]
        set b [$ns node]
        set c [$ns node]
        tb-set-node-os $a FBSD45-STD
        tb-set-node-os $b mine
        tb-set-node-tarfiles $a /opt/site files/site.tgz /usr/local /abs/x.tar
        tb-set-node-rpms $a /proj/iperf-2.0.5-1.el6.x86_64.rpm httpd debs/tool.deb
        $ns run
    """)
    a, b, c = e.nodes
    assert a.image == "default" and b.image == "mine" and c.image is None
    assert a.tarfiles == (("/opt/site", str(tmp_path / "files" / "site.tgz")),
                          ("/usr/local", "/abs/x.tar"))
    assert a.packages == ("iperf", "apache2", str(tmp_path / "debs" / "tool.deb"))
    joined = "\n".join(e.warnings)
    assert "t.tcl:6: tb-set-node-os FBSD45-STD: FreeBSD cannot run here; node a runs the " \
           "'default' image" in joined
    assert "tb-set-node-os mine" not in joined       # a wanlab image: no note
    # the IR keeps them through JSON (the store)
    again = ir.Experiment.from_json(e.to_json())
    assert again.nodes == e.nodes


def test_ns_setup_without_os_gets_the_default_image(tcl):
    e = tcl("""\
        set a [$ns node]
        tb-set-node-rpms $a tcpdump
        $ns run
    """)
    assert e.nodes[0].image == "default" and e.nodes[0].packages == ("tcpdump",)
    assert any("t.tcl:4: tb-set-node-rpms: node a gets the 'default' image" in w
               for w in e.warnings)


@pytest.mark.parametrize("body, msg", [
    ("tb-set-node-tarfiles $a ../etc x.tgz", "must be an absolute path without '..'"),
    ("tb-set-node-tarfiles $a /x/../etc x.tgz", "must be an absolute path without '..'"),
    ("tb-set-node-tarfiles $a /opt", "pairs of DIR TARBALL"),
    ("tb-set-node-rpms $a", "give NODE then packages"),
    ("tb-set-node-rpms $a {Bad pkg}", "names no package"),
])
def test_ns_bad_setup_is_an_error_naming_the_line(tcl, body, msg):
    with pytest.raises(SpecError) as ei:
        tcl(f"set a [$ns node]\n{body}\n$ns run\n")
    assert msg in str(ei.value) and "t.tcl:4" in str(ei.value)


def test_an_os_name_never_becomes_a_path(tcl):
    e = tcl("set a [$ns node]\ntb-set-node-os $a ../../etc\n$ns run\n")
    assert e.nodes[0].image == "default"
    assert any("not an Emulab OS wanlab knows" in w for w in e.warnings)


def test_yaml_and_builder_give_the_same_node():
    y = loads("""
name: x
nodes:
  - {name: a, image: small, tarfiles: [{dir: /opt, file: /t/a.tgz}], packages: [tcpdump]}
  - {name: b, os: UBUNTU22-64-STD}
""", file="x.yaml")
    b = ExperimentBuilder("x")
    b.node("a", image="small", tarfiles=[("/opt", "/t/a.tgz")], packages=["tcpdump"])
    b.node("b", os="UBUNTU22-64-STD")
    p = b.build()
    for got in (y, p):
        a, bb = got.nodes
        assert (a.image, a.tarfiles, a.packages) == ("small", (("/opt", "/t/a.tgz"),),
                                                     ("tcpdump",))
        assert bb.image == "default" and bb.os == "UBUNTU22-64-STD"
    assert any("Ubuntu is not available" in w for w in y.warnings)


def test_bad_image_names_are_refused():
    # ("a/b" is an OCI reference now: docker://a/b:latest; a malformed one is refused)
    for bad in ("../x", "A", "a//b", "oci:", "", "x" * 64):
        with pytest.raises(SpecError):
            normalize.node_image("n", None, bad)
    with pytest.raises(SpecError) as ei:
        loads("name: x\nnodes:\n  - {name: a, image: ../../etc}\n", file="x.yaml")
    assert "x.yaml:3" in str(ei.value) and "image" in str(ei.value)
