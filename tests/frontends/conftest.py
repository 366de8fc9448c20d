"""Helpers for the front-end tests: write a script to a temp file and parse it."""

import textwrap

import pytest

from wanlab.frontends import ns

HEAD = "set ns [new Simulator]\nsource tb_compat.tcl\n"


@pytest.fixture
def tcl(tmp_path):
    """tcl(body, head=True, name="t.tcl", **kw) -> Experiment."""
    def run(body, head=True, name="t.tcl", **kw):
        p = tmp_path / name
        p.write_text((HEAD if head else "") + textwrap.dedent(body))
        return ns.parse(p, **kw)
    return run


@pytest.fixture
def tcl_path(tmp_path):
    def write(body, name="t.tcl"):
        p = tmp_path / name
        p.write_text(textwrap.dedent(body))
        return p
    return write
