"""The state contract as a backend sees it: a KeySet in, a Snapshot out, a
BatchWrites value persisted, run on every backend `state.backends` knows."""

from __future__ import annotations

from pathlib import Path

import pytest

from busguard.policies.seam import PERMANENT_EXPIRY_MS
from busguard.protocol.records import Coordinates, Decision
from busguard.state.backends import BACKENDS, StoreOptions, open_store
from busguard.state.keys import KeySet
from busguard.state.snapshot import Snapshot
from busguard.state.store import StateStore
from busguard.state.writes import BatchWrites, PolicyRecord
from tests.backends import TEST_OPTIONS

NOW = 1_700_000_000_000


@pytest.fixture(params=sorted(BACKENDS))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StateStore:
    return open_store(request.param, TEST_OPTIONS[request.param](request, tmp_path), StoreOptions(now_ms=NOW, genesis=True))


def test_every_registered_backend_has_a_test_hook() -> None:
    assert sorted(TEST_OPTIONS) == sorted(BACKENDS)


def _read(store: StateStore, keys: KeySet, now_ms: int) -> Snapshot:
    seen: list[Snapshot] = []

    def fn(snap: Snapshot) -> BatchWrites:
        seen.append(snap)
        return BatchWrites()

    store.run_batch(keys, now_ms, fn)
    return seen[0]


def _write(store: StateStore, writes: BatchWrites, now_ms: int) -> None:
    store.run_batch(KeySet(), now_ms, lambda _snap: writes)


def test_policy_rows_round_trip_expire_and_last_write_wins(store: StateStore) -> None:
    a, b = ("award", "call-1"), ("award", "call-2")
    _write(store, BatchWrites(policy={a: PolicyRecord(a, b"one", NOW + 10), b: PolicyRecord(b, b"two", NOW + 5)}), NOW)
    assert _read(store, KeySet(policy={a, b, ("taint", "call-1")}), NOW).policy == {a: b"one", b: b"two"}
    _write(store, BatchWrites(policy={a: PolicyRecord(a, b"three", NOW + 10)}), NOW + 1)
    assert _read(store, KeySet(policy={a, b}), NOW + 5).policy == {a: b"three"}  # b expired at NOW + 5
    assert store.counts()["policy"] == 2
    assert store.expire(NOW + 5) == 1 and store.counts()["policy"] == 1


def test_a_permanent_policy_row_never_expires_until_a_write_replaces_it(store: StateStore) -> None:
    """`PolicyWrite(ttl_ms=None)` (a high-water mark): stored with
    `PERMANENT_EXPIRY_MS`, which every backend keeps past any expiry run."""
    mark, counter = ("config.update", "db.pool"), ("quota", "t-1")
    _write(
        store,
        BatchWrites(policy={mark: PolicyRecord(mark, b"v7", PERMANENT_EXPIRY_MS), counter: PolicyRecord(counter, b"3", NOW + 5)}),
        NOW,
    )
    century = NOW + 100 * 365 * 86_400_000
    assert store.expire(century) == 1  # the counter; the mark stays
    assert _read(store, KeySet(policy={mark, counter}), century).policy == {mark: b"v7"}
    _write(store, BatchWrites(policy={mark: PolicyRecord(mark, b"v8", century + 10)}), century)  # a kind may let it go
    assert store.expire(century + 10) == 1 and _read(store, KeySet(policy={mark}), century + 10).policy == {}


def test_watermarks_come_from_the_written_decisions_and_only_move_forward(store: StateStore) -> None:
    def at(offset: int) -> tuple[tuple[str, int, int], Decision]:
        src = Coordinates(topic="in", partition=0, offset=offset)
        return ("in", 0, offset), Decision("d", "reject", "bad_signature", src, NOW)

    _write(store, BatchWrites(decisions=dict([at(7), at(3)])), NOW)
    _write(store, BatchWrites(decisions=dict([at(5)])), NOW)
    assert store.partition_watermarks() == {("in", 0): 7}
    assert set(_read(store, KeySet(sources=[("in", 0, 3), ("in", 0, 4)]), NOW).decisions) == {("in", 0, 3)}


def test_an_unknown_backend_names_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="allowed: memory, postgres, rocksdb, sqlite"):
        open_store("oracle", None, StoreOptions(now_ms=NOW))
