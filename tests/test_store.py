"""The SQLite store: migrations, experiments, transitions and resources."""

import sqlite3

import pytest
from conftest import pair

from wanlab.errors import WanlabError
from wanlab.store.db import MIGRATIONS, Store


def test_migrations_apply_once_and_record_version(tmp_path):
    s = Store(str(tmp_path))
    assert s.schema_version == len(MIGRATIONS)
    s.close()
    s = Store(str(tmp_path))           # reopening does not re-run migrations
    assert s.schema_version == len(MIGRATIONS)


def test_migration_3_drops_the_unread_events_table_and_keeps_experiments(tmp_path):
    import json
    db = sqlite3.connect(str(tmp_path / "wanlab.db"))
    for script in MIGRATIONS[:2]:
        db.executescript(script)
    db.execute("PRAGMA user_version = 2")
    db.execute("INSERT INTO experiments(name, short, state, ir, seed, created, updated)"
               " VALUES ('pair', 'ab12', 'new', ?, 1, 0, 0)", (json.dumps(pair().to_json()),))
    db.execute("INSERT INTO events(exp_id, time_s, target, action, args)"
               " VALUES (1, 1.0, 'link0', 'down', '[]')")
    db.commit()
    db.close()
    s = Store(str(tmp_path))
    assert s.schema_version == len(MIGRATIONS)
    assert s.get("pair").ir == pair()
    tables = {r[0] for r in s.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "events" not in tables and {"experiments", "event_log", "flows"} <= tables


def test_migration_4_adds_the_facility_tables_to_an_existing_store(tmp_path):
    import json
    db = sqlite3.connect(str(tmp_path / "wanlab.db"))
    for script in MIGRATIONS[:3]:
        db.executescript(script)
    db.execute("PRAGMA user_version = 3")
    # an IR stored before template parameters and swap policies existed
    old = {k: v for k, v in pair().to_json().items() if k not in ("parameters", "swap")}
    db.execute("INSERT INTO experiments(name, short, state, ir, seed, created, updated)"
               " VALUES ('pair', 'ab12', 'swapped', ?, 1, 0, 0)", (json.dumps(old),))
    db.commit()
    db.close()
    s = Store(str(tmp_path))
    assert s.schema_version >= 4
    assert s.get("pair").ir == pair() and s.get("pair").state == "swapped"
    tables = {r[0] for r in s.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"templates", "runs", "batches", "batch_log"} <= tables


def test_experiment_round_trip_and_unique_names(tmp_path):
    s = Store(str(tmp_path))
    row = s.add_experiment(pair(), "/x.tcl")
    assert row.state == "new" and len(row.short) == 4
    assert s.get("pair").ir == pair()
    with pytest.raises(WanlabError, match="already exists"):
        s.add_experiment(pair(), None)
    with pytest.raises(WanlabError, match="no experiment named"):
        s.get("nope")


def test_transitions_are_recorded(tmp_path):
    s = Store(str(tmp_path))
    row = s.add_experiment(pair(), None)
    s.set_state(row.id, "activating", "swap-in")
    s.set_state(row.id, "active", "done")
    assert [(a, b) for _, a, b, _ in s.transitions(row.id)] == \
        [(None, "new"), ("new", "activating"), ("activating", "active")]


def test_resources_recorded_before_creation(tmp_path):
    s = Store(str(tmp_path))
    row = s.add_experiment(pair(), None)
    rid = s.record(row.id, "netns", "wl-x-a", node="a")
    (r,) = s.resources(row.id)
    assert r.state == "planned" and r.detail == {"node": "a"}
    s.update_resource(rid, "created", inode=42)
    assert s.resources(row.id)[0].detail == {"node": "a", "inode": 42}
    s.mark_removed([rid])
    assert s.resources(row.id) == []
    assert len(s.resources(row.id, live_only=False)) == 1


def test_deleting_an_experiment_cascades(tmp_path):
    s = Store(str(tmp_path))
    row = s.add_experiment(pair(), None)
    s.record(row.id, "netns", "wl-x-a")
    s.delete_experiment(row.id)
    db = sqlite3.connect(s.path)
    assert db.execute("SELECT count(*) FROM resources").fetchone()[0] == 0


def test_an_ir_stored_as_version_1_is_upgraded_when_read(tmp_path):
    """IR version 2 typed agents and events; what an older wanlab stored (ns-2 strings)
    is read through the front ends' normaliser."""
    import json
    s = Store(str(tmp_path))
    row = s.add_experiment(pair(), None)
    v1 = row.ir.to_json()
    v1.update(version=1, events=[{"time_s": 2, "target": "link0", "action": "delay",
                                  "args": ["30ms"], "source": {"file": None, "line": None}}])
    v1.pop("timelines"), v1.pop("groups")
    s.db.execute("UPDATE experiments SET ir = ? WHERE id = ?", (json.dumps(v1), row.id))
    ev = s.get(row.name).ir.events[0]
    assert (ev.target, ev.action, ev.value) == ("link0", "delay", 0.03)
    s.close()
