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


@needs_root
def test_a_tunnel_waits_for_the_old_one_with_its_vni_to_go():
    """A repaired part's tunnel is made while the kernel may still be freeing the old
    one (its namespace's clean-up is asynchronous): the new one waits for the VNI, in a
    namespace of this test standing for the machine's underlay."""
    import os
    import subprocess
    import sys
    ns = f"wlvni{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        prog = (
            "import subprocess, threading, time\n"
            "from wanlab.cluster import part\n"
            "from wanlab.errors import WanlabError\n"
            "args = ['type', 'vxlan', 'id', '4242', 'dstport', '4789', 'local', '10.9.9.1']\n"
            "part._ip('', 'link', 'add', 'old0', *args)\n"
            "try:\n"
            "    part._ip('', 'link', 'add', 'new0', *args)\n"
            "    raise SystemExit('the kernel took a second device with the same VNI')\n"
            "except WanlabError as e:\n"
            "    assert 'VNI already exists' in str(e), e\n"
            "threading.Timer(0.3, part._ip, ('', 'link', 'del', 'old0')).start()\n"
            "t = time.monotonic()\n"
            "part._add_vxlan('new0', *args)\n"
            "assert time.monotonic() - t >= 0.25\n"
            "print('ok')\n")
        p = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", prog],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
