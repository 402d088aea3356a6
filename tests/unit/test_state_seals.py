"""Batch seals in the state contract (Snapshot.tip / Snapshot.heads, BatchWrites.heads), on every backend."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from busguard.protocol.records import Coordinates, Decision
from busguard.state.keys import KeySet, SourceKey
from busguard.state.memory.store import MemoryStore
from busguard.state.postgres.db import StateUnavailable
from busguard.state.postgres.store import PostgresStore
from busguard.state.snapshot import Snapshot, StoredHead
from busguard.state.snapshot import spans_of as ranges
from busguard.state.sqlite.store import SqliteStore
from busguard.state.store import StateStore
from busguard.state.writes import BatchWrites

NOW = 1_700_000_000_000
RETENTION = 3_600_000


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    s: StateStore
    if request.param == "memory":
        s = MemoryStore(created_at=NOW - 1, decision_retention_ms=RETENTION)
    elif request.param == "sqlite":
        s = SqliteStore(tmp_path / "state.db", now_ms=NOW - 1, decision_retention_ms=RETENTION)
    else:
        pg = request.getfixturevalue("postgres")
        s = PostgresStore(pg.dsn, now_ms=NOW - 1, schema=request.getfixturevalue("pg_schema"), decision_retention_ms=RETENTION)
    yield s
    s.close()


def _decision(offset: int, at: int = NOW) -> Decision:
    return Decision(
        decision_id=f"{offset:032x}",
        outcome="forward",
        reason="ok",
        source=Coordinates(topic="in", partition=1, offset=offset),
        decided_at=at,
    )


def _batch(
    store: StateStore, offsets: list[int], seq: int, *, chain: str = "c1", now: int = NOW, reread: list[int] | None = None
) -> Snapshot:
    """Decide `offsets` (plus re-read `reread`) and persist a head over them; the snapshot it read."""
    seen: list[Snapshot] = []
    sources: list[SourceKey] = [("in", 1, o) for o in [*offsets, *(reread or [])]]

    def fn(snap: Snapshot) -> BatchWrites:
        seen.append(snap)
        w = BatchWrites()
        for o in offsets:
            w.decisions[("in", 1, o)] = _decision(o, now)
        spans = ranges(w.decisions)
        w.heads.append(StoredHead(chain, seq, f"head-{chain}-{seq}".encode(), b"seal", bytes(32 * len(offsets)), spans, now))
        return w

    store.run_batch(KeySet(sources=sources, chain=chain), now, fn)
    return seen[-1]


def test_the_tip_advances_per_chain_and_heads_are_found_by_position(store: StateStore) -> None:
    assert _batch(store, [1, 2, 3], 0).tip is None
    snap = _batch(store, [10, 11], 1)
    assert snap.tip == (0, b"head-c1-0")
    assert _batch(store, [20], 0, chain="c2").tip is None  # another chain has its own tip
    again = _batch(store, [30], 2, reread=[2, 11, 20])
    assert again.tip == (1, b"head-c1-1")
    assert sorted((h.chain, h.seq) for h in again.heads) == [("c1", 0), ("c1", 1), ("c2", 0)]
    h0 = next(h for h in again.heads if h.seq == 0 and h.chain == "c1")
    assert h0.spans == [("in", 1, 1, 3)] and h0.leaves == bytes(96) and h0.seal == b"seal" and h0.sealed_at == NOW


def test_a_chain_never_forks(store: StateStore) -> None:
    _batch(store, [1], 0)
    with pytest.raises((ValueError, sqlite3.IntegrityError, StateUnavailable)):
        _batch(store, [2], 0)
    assert _batch(store, [3], 1).tip == (0, b"head-c1-0")  # the failed batch wrote nothing
    assert store.decision_at(Coordinates(topic="in", partition=1, offset=2)) is None


def test_heads_expire_with_their_decisions(store: StateStore) -> None:
    _batch(store, [1, 2], 0)
    later = NOW + RETENTION
    assert store.expire(later) >= 3  # two decisions, the head (and its span row)
    snap = _batch(store, [5], 1, now=later, reread=[1])
    assert snap.decisions == {} and snap.heads == []


def test_an_existing_sqlite_store_gains_the_seal_tables_without_a_schema_change(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    SqliteStore(path, now_ms=NOW - 1).close()
    db = sqlite3.connect(path)
    db.executescript("DROP TABLE seal_heads; DROP TABLE seal_spans;")  # as a store made before batch seals
    schema = db.execute("SELECT v FROM meta WHERE k = 'schema'").fetchone()
    db.close()
    store = SqliteStore(path, now_ms=NOW)
    try:
        _batch(store, [1], 0)
        assert _batch(store, [2], 1).tip == (0, b"head-c1-0")
    finally:
        store.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT v FROM meta WHERE k = 'schema'").fetchone() == schema
    db.close()
