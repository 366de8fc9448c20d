"""Where ``swapin --repair`` moves a lost machine's part (no cluster needed)."""

import pytest

from wanlab.cluster.info import ClusterInfo, MachineInfo
from wanlab.cluster.move import targets
from wanlab.errors import WanlabError

INFO = ClusterInfo("c0", "10.0.0.1:6379", (
    MachineInfo("m0", "10.0.0.11", None, 2), MachineInfo("m1", "10.0.0.12", None, 2),
    MachineInfo("m2", "10.0.0.13", None, 1), MachineInfo("m3", "10.0.0.14", None, 4)), True)


def test_a_lost_part_goes_to_the_live_free_machine_with_the_most_cores():
    assert targets(INFO, "x", ["m1"], {"m0", "m1"}, lambda m: True) == {"m1": "m3"}
    # m3 does not answer: the next free one
    assert targets(INFO, "x", ["m1"], {"m0", "m1"}, lambda m: m != "m3") == {"m1": "m2"}


def test_no_free_machine_is_refused_by_name():
    with pytest.raises(WanlabError, match=r"machine m1 is lost and no live machine .*"
                                          r"cluster join"):
        targets(INFO, "x", ["m1"], {"m0", "m1", "m2", "m3"}, lambda m: True)
