"""``show`` reports the link values in force after run-time changes, and the configured
ones where they differ (on real namespaces)."""

import json
import os
import subprocess
import sys

from conftest import needs_root

from wanlab import api
from wanlab.frontends.builder import ExperimentBuilder

pytestmark = needs_root

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def description(link_bw="10Mb"):
    b = ExperimentBuilder("inforce")
    for n in "abc":
        b.node(n)
    b.link("a", "b", name="link0", bandwidth=link_bw, delay="10ms")
    b.lan(["a", "b", "c"], name="lan0", bandwidth="100Mb", delay="4ms")
    b.lan(["a", "b", "c"], name="wan", matrix={"delay": [[0, "1ms", "1ms"], ["1ms", 0, "1ms"],
                                                         ["1ms", "1ms", 0]]})
    return b.build()


def cli(home, *args):
    r = subprocess.run([sys.executable, "-m", "wanlab.cli", "--home", home, *args],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_show_prints_what_set_link_and_tevc_put_in_force(tmp_path):
    """Regression: show printed the configured values after tevc/set_link changed them."""
    home = str(tmp_path / "home")
    with api.Experiment(description(), home=home) as exp:
        exp.set_link("link0", bandwidth="20Mb", delay="50ms")             # the API, at once
        r = exp.tevc("link0", "plr", "0.25", wait=True)                   # the scheduler
        assert r["outcome"] == "ok", r
        exp.tevc("lan0", "delay", "30ms", wait=True)
        exp.set_link("wan/a/b", delay="7ms", loss={"model": "4-state", "p13": 0.01})
        assert exp.tevc("wan/b/a", "jitter", "2ms", wait=True)["outcome"] == "ok"

        info = exp.show()
        ab, ba = info["links"][0]["ab"], info["links"][0]["ba"]
        for d in (ab, ba):
            assert (d["bandwidth_bps"], d["delay_s"], d["loss"]) == (20_000_000, 0.05, 0.25)
            assert d["configured"] == {"bandwidth_bps": 10_000_000, "delay_s": 0.01,
                                       "loss": 0.0}
        lan, wan = info["lans"]
        assert lan["delay_s"] == 0.03 and lan["configured"] == {"delay_s": 0.004}
        assert lan["bandwidth_bps"] == 100_000_000
        # one matrix pair's channel each: only the changed pairs are listed
        pairs = {(p["from"], p["to"]): p for p in wan["pairs"]}
        assert set(pairs) == {("a", "b"), ("b", "a")}
        assert pairs["a", "b"]["delay_s"] == 0.007 and pairs["a", "b"]["impair"][0].startswith(
            "loss 4-state p13=0.01")
        assert pairs["b", "a"]["impair"] == ["jitter 2ms"]
        assert pairs["b", "a"]["configured"] == {"impair": []}

        assert json.loads(cli(home, "show", "--json", "inforce"))["links"] == info["links"]
        text = cli(home, "show", "inforce")
        line = next(x for x in text.splitlines() if x.strip().startswith("link0:"))
        assert "[ab: 20Mb (configured 10Mb), 50 ms (configured 10 ms), loss 0.25 " \
               "(configured 0)]" in line, text
        line = next(x for x in text.splitlines() if x.strip().startswith("lan0:"))
        assert "30 ms (configured 4 ms)" in line, text
        assert "    pair a -> b: [unlimited, 7 ms (configured 1 ms), loss 0, loss 4-state " \
            "p13=0.01" in text, text

        # a modify of the bandwidth keeps the run-time delay and loss (the engine's patch)
        exp.modify(description(link_bw="40Mb"))
        ab = exp.show()["links"][0]["ab"]
        assert (ab["bandwidth_bps"], ab["delay_s"]) == (40_000_000, 0.05)
        assert ab["configured"] == {"delay_s": 0.01, "loss": 0.0}

        # swapped out and in again, the engine has the description's values
        exp.swapout()
        exp.swapin()
        ab = exp.show()["links"][0]["ab"]
        assert (ab["bandwidth_bps"], ab["delay_s"]) == (40_000_000, 0.01)
        assert "configured" not in ab
