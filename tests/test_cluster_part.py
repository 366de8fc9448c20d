"""One machine's share of a cluster experiment, operated as its host agent does, without
Ray (wanlab/cluster/part.py): a removal that overtakes its create (the controller killed
between sending the two) makes the machine refuse that create, and only that one."""

from __future__ import annotations

import pytest
from conftest import chain, needs_root

from wanlab.cluster import part
from wanlab.errors import WanlabError

pytestmark = needs_root


def test_a_create_overtaken_by_its_removal_is_refused_and_a_new_one_is_not(tmp_path):
    home = str(tmp_path / "machine")
    exp = chain(2)
    spec = {"tunnels": [], "hosts": "", "machine": "m0", "warnings": [], "token": "t1"}
    # the controller's terminate arrives first: nothing is there yet, the token is kept
    assert part.operate(home, "terminate", exp.name, "t1") is None
    with pytest.raises(WanlabError, match="removed before it was built"):
        part.operate(home, "create", exp.name, exp.to_json(), spec)
    from wanlab.lifecycle import Lab
    lab = Lab(home)
    try:
        assert lab.store.find(exp.name) is None         # nothing was stored, or made
    finally:
        lab.close()
    # a later create of the same name carries a new token: it is built, and removed
    made = part.operate(home, "create", exp.name, exp.to_json(), {**spec, "token": "t2"})
    assert made["short"]
    part.operate(home, "terminate", exp.name, "t2")
    lab = Lab(home)
    try:
        assert lab.store.find(exp.name) is None
    finally:
        lab.close()
