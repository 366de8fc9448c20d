"""Swap-in stages and the registry of resource kinds, on a real store with stand-in kinds
and stages: no root, no kernel objects."""

import pytest
from conftest import pair

from wanlab.backends.emulate import resources, stages
from wanlab.backends.emulate.resources import Kind
from wanlab.errors import WanlabError
from wanlab.plan.plan import make_plan
from wanlab.store.db import Store


@pytest.fixture
def removed(monkeypatch):
    """Stand-in kinds that only note what they were asked to remove, in the real order."""
    seen: list[tuple[str, str]] = []
    kinds = tuple(Kind(k.name, lambda r: seen.append((r.kind, r.name)))
                  for k in resources.KINDS)
    monkeypatch.setattr(resources, "KINDS", kinds)
    monkeypatch.setattr(resources, "_BY_NAME", {k.name: k for k in kinds})
    return seen


@pytest.fixture
def build(tmp_path):
    store = Store(str(tmp_path / "home"))
    row = store.add_experiment(pair(), None)
    b = stages.Build.everything(store, row, make_plan(row.ir, row.short), lambda m: None)
    yield b
    store.close()


def recording(kind, *names, fail=False):
    def build(b):
        for n in names:
            b.store.record(b.row.id, kind, n)
        if fail:
            raise RuntimeError("injected")
    return build


def test_teardown_goes_kind_by_kind_in_registry_order_newest_first(build, removed):
    s, eid = build.store, build.row.id
    for kind, name in [("netns", "ns1"), ("engine", "eng"), ("process", "p1"), ("tap", "t1"),
                       ("netns", "ns2"), ("scheduler", "sch"), ("process", "p2")]:
        s.record(eid, kind, name)
    assert resources.remove(s, eid) == 7
    assert removed == [("scheduler", "sch"), ("process", "p2"), ("process", "p1"),
                       ("engine", "eng"), ("tap", "t1"), ("netns", "ns2"), ("netns", "ns1")]
    assert s.resources(eid) == []
    assert resources.remove(s, eid) == 0          # twice is safe: nothing left to do


def test_unknown_kind_is_named_and_left_recorded(build, removed, capsys):
    s, eid = build.store, build.row.id
    s.record(eid, "teleporter", "tp1")
    s.record(eid, "process", "p1")
    resources.remove(s, eid)
    assert removed == [("process", "p1")]
    assert [r.kind for r in s.resources(eid)] == ["teleporter"]
    assert "unknown kinds left recorded: teleporter" in capsys.readouterr().err
    with pytest.raises(WanlabError, match="supported kinds are scheduler, process"):
        resources.kind("teleporter")


def test_failed_stage_undoes_exactly_what_was_built_newest_first(build, removed):
    undone = []
    plan = [stages.Stage("folder", lambda b: None, lambda b: undone.append("folder")),
            stages.Stage("engine", recording("engine", "eng")),
            stages.Stage("namespaces", recording("netns", "ns1", "ns2")),
            stages.Stage("taps", recording("tap", "t1", fail=True)),
            stages.Stage("never", recording("process", "p1"))]
    with pytest.raises(WanlabError, match="swap-in failed at stage taps: injected"):
        stages.run(plan, build)
    # each stage removes its own records: taps first, then namespaces, then the engine
    assert removed == [("tap", "t1"), ("netns", "ns2"), ("netns", "ns1"), ("engine", "eng")]
    assert undone == ["folder"]
    assert build.recorded.keys() == {"folder", "engine", "namespaces", "taps"}
    assert build.store.resources(build.row.id) == []


def test_a_wanlab_error_passes_through_unchanged(build, removed):
    def boom(b):
        raise WanlabError("the engine exited at start")
    with pytest.raises(WanlabError, match="^the engine exited at start$"):
        stages.run([stages.Stage("engine", boom)], build)


def test_insert_after_places_the_run_layers_stages():
    names = [s.name for s in stages.insert_after(stages.STAGES, "engine",
                                                 stages.Stage("scheduler", lambda b: None))]
    assert names.index("scheduler") == names.index("engine") + 1
    assert names[0] == "folder" and names.index("namespaces") > names.index("scheduler")
    assert names[-1] == "startcmds"
    with pytest.raises(WanlabError, match="no stage 'nope'"):
        stages.insert_after(stages.STAGES, "nope")


def test_everything_builds_every_emulated_node_and_network(build):
    assert build.nodes == ["a", "b"] and build.networks == ["link0"]
    assert build.routes == {"a": [], "b": []} and build.hosts == ["a", "b"]
    assert build.swapin
