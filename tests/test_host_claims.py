"""Short ids and uid ranges are unique on the host, across stores (wanlab.store.host)."""

import shutil

import pytest
from conftest import pair

from wanlab.backends.emulate import userns
from wanlab.store import host
from wanlab.store.db import Store


@pytest.fixture
def claims(tmp_path, monkeypatch):
    monkeypatch.setenv("WANLAB_HOST_CLAIMS", str(tmp_path / "host" / "claims.db"))
    return tmp_path


def _same_first_short(monkeypatch):
    """Every store's first try is the same short: what two stores met by chance in CI
    (two experiments' namespaces both named wl-49bf-b)."""
    import secrets
    tries = iter(["49bf", "49bf", *(f"{k:04x}" for k in range(1, 1000))])
    monkeypatch.setattr(secrets, "token_hex", lambda n: next(tries))


def test_two_stores_never_give_two_experiments_one_short(claims, monkeypatch):
    _same_first_short(monkeypatch)
    a, b = Store(str(claims / "a")), Store(str(claims / "b"))
    ra = a.add_experiment(pair("one"), None)
    rb = b.add_experiment(pair("two"), None)
    assert ra.short == "49bf" and rb.short != "49bf", (ra.short, rb.short)
    assert host.holder("short", ra.short) == (a.home, ra.id)
    assert host.holder("short", rb.short) == (b.home, rb.id)


def test_deleting_an_experiment_frees_its_short(claims, monkeypatch):
    a, b = Store(str(claims / "a")), Store(str(claims / "b"))
    ra = a.add_experiment(pair("one"), None)
    a.delete_experiment(ra.id)
    assert host.holder("short", ra.short) is None
    import secrets
    monkeypatch.setattr(secrets, "token_hex", lambda n: ra.short)
    assert b.add_experiment(pair("two"), None).short == ra.short


def test_a_removed_stores_claim_is_taken_over_once_stale(claims, monkeypatch):
    _same_first_short(monkeypatch)
    a = Store(str(claims / "a"))
    a.add_experiment(pair("one"), None)
    a.close()
    shutil.rmtree(claims / "a")
    b = Store(str(claims / "b"))
    # within the grace time a claim is never judged stale (its store may not have committed)
    assert b.add_experiment(pair("two"), None).short != "49bf"
    monkeypatch.setattr(host, "GRACE_S", 0.0)
    monkeypatch.setattr("secrets.token_hex", lambda n: "49bf")
    assert b.add_experiment(pair("three"), None).short == "49bf"


def test_a_live_stores_claim_is_kept_past_the_grace_time(claims, monkeypatch):
    _same_first_short(monkeypatch)
    monkeypatch.setattr(host, "GRACE_S", 0.0)
    a, b = Store(str(claims / "a")), Store(str(claims / "b"))
    assert a.add_experiment(pair("one"), None).short == "49bf"
    assert b.add_experiment(pair("two"), None).short != "49bf"


def test_two_stores_never_share_a_uid_range(claims, monkeypatch):
    # both stores' searches start at the same range (their hashes met)
    monkeypatch.setattr(userns.zlib, "crc32", lambda data: 7)
    a, b = Store(str(claims / "a")), Store(str(claims / "b"))
    ra = a.add_experiment(pair("one"), None)
    rb = b.add_experiment(pair("two"), None)
    _, base_a = userns.claim(a, ra.id)
    _, base_b = userns.claim(b, rb.id)
    assert base_a != base_b
    # a later swap-in of the same experiment keeps its range
    assert userns.claim(a, ra.id)[1] == base_a
    a.delete_experiment(ra.id)
    assert host.holder("uids", str(base_a)) is None
