"""SQLite's decision runs (schema 3): one row per batch and input partition
instead of one per decision. What must not change with the layout: a
position reads back as its newest decision, whatever runs overlap it; a run
expires with its decisions; a schema 2 (or 1) file upgrades in place; and
for any sequence of batches the store answers exactly as the memory store
does, before and after an upgrade."""

from __future__ import annotations

import multiprocessing
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from busguard.admission.batch import Input, admit_batch
from busguard.protocol.records import Coordinates, Decision
from busguard.state.codecs import encode
from busguard.state.keys import KeySet, SourceKey
from busguard.state.memory.store import MemoryStore
from busguard.state.snapshot import Snapshot
from busguard.state.sqlite.db import key
from busguard.state.sqlite.store import RUN_SPAN, SCHEMA_VERSION, SqliteStore
from busguard.state.store import StateStore
from busguard.state.writes import BatchWrites, NonceRecord

from .harness import NOW, Harness, agent, schema_1_file, sender

RETENTION = 1_000


def _decision(topic: str, partition: int, offset: int, variant: str, at: int) -> Decision:
    return Decision(
        f"{variant}@{partition}/{offset}@{at}", "reject", "bad_signature", Coordinates(topic=topic, partition=partition, offset=offset), at
    )


def _writes(decisions: Iterable[Decision]) -> BatchWrites:
    return BatchWrites(decisions={(d.source.topic, d.source.partition, d.source.offset): d for d in decisions})


def _batch(store: StateStore, sources: list[SourceKey], now_ms: int, writes: BatchWrites) -> Snapshot:
    seen: list[Snapshot] = []

    def fn(snap: Snapshot) -> BatchWrites:
        seen.append(snap)
        return writes

    store.run_batch(KeySet(sources=sources), now_ms, fn)
    return seen[-1]


def _runs(store: SqliteStore) -> list[tuple[str, int, int, int, int]]:
    return store._db.execute("SELECT topic, part, first, last, n FROM decision_runs ORDER BY id").fetchall()  # type: ignore[no-any-return]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(tmp_path / "s.db", now_ms=NOW, decision_retention_ms=RETENTION, genesis=True)
    yield s
    s.close()


def test_a_batch_is_one_run_per_partition_and_reads_back_whole(store: SqliteStore) -> None:
    ds = [_decision("in", p, o, "a", NOW) for p in (0, 1) for o in range(10, 20)]
    _batch(store, [], NOW, _writes(ds))
    assert _runs(store) == [("in", 0, 10, 19, 10), ("in", 1, 10, 19, 10)]
    snap = _batch(store, [("in", 0, o) for o in range(5, 25)] + [("in", 1, 19), ("in", 2, 15)], NOW, BatchWrites())
    assert snap.decisions == {
        (d.source.topic, d.source.partition, d.source.offset): d for d in ds if d.source.partition == 0 or d.source.offset == 19
    }
    assert store.decision_at(Coordinates(topic="in", partition=1, offset=12)) == ds[12]
    assert store.decision_at(Coordinates(topic="in", partition=1, offset=20)) is None
    assert store.counts()["decisions"] == 20


def test_a_replaced_position_inside_a_run_reads_back_as_its_newest_decision(store: SqliteStore) -> None:
    old = [_decision("in", 0, o, "old", NOW) for o in range(10)]
    _batch(store, [], NOW, _writes(old))
    new = [_decision("in", 0, o, "new", NOW + 1) for o in (3, 5)]
    _batch(store, [("in", 0, o) for o in range(10)], NOW + 1, _writes(new))
    snap = _batch(store, [("in", 0, o) for o in range(10)], NOW + 2, BatchWrites())
    assert {o: d.decision_id.split("@")[0] for (_, _, o), d in snap.decisions.items()} == {
        o: "new" if o in (3, 5) else "old" for o in range(10)
    }
    assert store.decision_at(Coordinates(topic="in", partition=0, offset=5)) == new[1]
    # the old run gave the two positions up: each position is held once
    assert _runs(store) == [("in", 0, 0, 9, 8), ("in", 0, 3, 5, 2)]
    assert store.counts()["decisions"] == 10


def test_a_run_whose_every_position_is_replaced_is_deleted_and_its_edges_shrink(store: SqliteStore) -> None:
    _batch(store, [], NOW, _writes(_decision("in", 0, o, "a", NOW) for o in range(3)))
    _batch(store, [], NOW, _writes(_decision("in", 0, o, "b", NOW) for o in (0, 2)))
    assert _runs(store) == [("in", 0, 1, 1, 1), ("in", 0, 0, 2, 2)]
    _batch(store, [], NOW, _writes([_decision("in", 0, 1, "c", NOW)]))
    assert _runs(store) == [("in", 0, 0, 2, 2), ("in", 0, 1, 1, 1)]
    assert [store.decision_at(Coordinates(topic="in", partition=0, offset=o)).decision_id[0] for o in range(3)] == ["b", "c", "b"]  # type: ignore[union-attr]


def test_a_superseded_decision_does_not_come_back_when_its_replacement_expires_first(tmp_path: Path) -> None:
    """The newer run can expire before the older one (retention lowered
    between runs): the older run no longer holds the position, so the
    position reads as absent, not as its superseded decision."""
    db = tmp_path / "s.db"
    long = SqliteStore(db, now_ms=NOW, decision_retention_ms=100 * RETENTION, genesis=True)
    _batch(long, [], NOW, _writes(_decision("in", 0, o, "old", NOW) for o in range(4)))
    long.close()
    short = SqliteStore(db, now_ms=NOW, decision_retention_ms=RETENTION)
    _batch(short, [("in", 0, 2)], NOW + 1, _writes([_decision("in", 0, 2, "new", NOW + 1)]))
    later = NOW + 1 + RETENTION
    assert set(_batch(short, [("in", 0, o) for o in range(4)], later, BatchWrites()).decisions) == {
        ("in", 0, 0),
        ("in", 0, 1),
        ("in", 0, 3),
    }
    assert short.expire(later) == 1 and short.counts()["decisions"] == 3
    short.close()


def test_reads_take_the_newest_run_when_two_hold_one_position(store: SqliteStore) -> None:
    """Writes never leave two runs holding a position; should a file ever
    have them, the newest run (highest id) still wins, deterministically."""
    a, b = _decision("in", 0, 7, "a", NOW), _decision("in", 0, 7, "b", NOW)
    with store._db:
        for d in (a, b):
            store._db.execute(
                "INSERT INTO decision_runs(topic, part, first, last, n, exp, body) VALUES ('in', 0, 7, 7, 1, ?, ?)",
                (NOW + RETENTION, encode([d])),
            )
    assert _batch(store, [("in", 0, 7)], NOW, BatchWrites()).decisions == {("in", 0, 7): b}
    assert store.decision_at(b.source) == b


def test_offsets_spread_wider_than_a_run_span_are_cut_into_runs_and_all_found(store: SqliteStore) -> None:
    offsets = [0, 1, RUN_SPAN - 1, RUN_SPAN, 3 * RUN_SPAN + 5]
    ds = [_decision("in", 0, o, "a", NOW) for o in offsets]
    _batch(store, [], NOW, _writes(ds))
    assert [(f, last) for _, _, f, last, _ in _runs(store)] == [
        (0, RUN_SPAN - 1),
        (RUN_SPAN, RUN_SPAN),
        (3 * RUN_SPAN + 5, 3 * RUN_SPAN + 5),
    ]
    assert all(r[3] - r[2] < RUN_SPAN for r in _runs(store))
    assert set(_batch(store, [("in", 0, o) for o in offsets], NOW, BatchWrites()).decisions) == {("in", 0, o) for o in offsets}
    assert [store.decision_at(d.source) for d in ds] == ds


def test_decisions_with_different_expiries_go_to_different_runs_and_expire_apart(store: SqliteStore) -> None:
    _batch(store, [], NOW, _writes([_decision("in", 0, 1, "a", NOW - 500), _decision("in", 0, 2, "a", NOW)]))
    assert [(f, n) for _, _, f, _, n in _runs(store)] == [(1, 1), (2, 1)]
    at = NOW - 500 + RETENTION
    assert set(_batch(store, [("in", 0, 1), ("in", 0, 2)], at, BatchWrites()).decisions) == {("in", 0, 2)}
    assert store.expire(at) == 1 and store.counts()["decisions"] == 1
    assert store.expire(NOW + RETENTION) == 1 and _runs(store) == []


def test_a_redelivered_batch_that_overlaps_a_stored_one_rewrites_nothing_and_adds_its_new_offsets(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", now_ms=NOW - 3_600_000)
    h = Harness(store=store)
    s = sender("planner")
    records = [s.sign(kind="handoff", task_id=f"t{i}", receiver=agent("executor"), payload=b"p") for i in range(15)]
    first = h.feed_raw([(r.value, r.headers) for r in records[:10]], range(10))
    again = h.feed_raw([(r.value, r.headers) for r in records[5:]], range(5, 15))
    assert again[:5] == first[5:]  # re-emitted as decided
    assert all(d.outcome == "forward" for d in again[5:])
    assert _runs(store) == [(h.topic, 0, 0, 9, 10), (h.topic, 0, 10, 14, 5)]
    assert store.counts()["decisions"] == 15
    store.close()


def test_a_different_record_at_a_decided_offset_replaces_only_that_position(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", now_ms=NOW - 3_600_000)
    h = Harness(store=store)
    s = sender("planner")
    records = [s.sign(kind="handoff", task_id=f"t{i}", receiver=agent("executor"), payload=b"p") for i in range(10)]
    first = h.feed_raw([(r.value, r.headers) for r in records], range(10))
    other = s.sign(kind="handoff", task_id="other", receiver=agent("executor"), payload=b"q")
    replaced: list[tuple[Decision, Decision]] = []
    inputs = [
        Input(Coordinates(topic=h.topic, partition=0, offset=o), r.value, r.headers)
        for o, r in enumerate([*records[:4], other, *records[5:]])
    ]
    second = admit_batch(
        inputs, store=store, registry=h.registry, now_ms=h.now, policy=h.policy, on_replaced=lambda a, b: replaced.append((a, b))
    )
    assert replaced == [(first[4], second[4])] and second[4].task_id == "other"
    assert second[:4] == first[:4] and second[5:] == first[5:]
    assert store.decision_at(first[4].source) == second[4]
    third = admit_batch(inputs, store=store, registry=h.registry, now_ms=h.now, policy=h.policy)
    assert third == second  # the newest decision is the one re-emitted
    assert store.counts()["decisions"] == 10
    store.close()


# -- upgrades --------------------------------------------------------------------------------------

_V2_SCHEMA = (
    "CREATE TABLE meta(k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE decisions(k TEXT PRIMARY KEY, body BLOB NOT NULL, exp INTEGER NOT NULL);"
    "CREATE TABLE nonces(k TEXT PRIMARY KEY, exp INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE windows(k TEXT PRIMARY KEY, top INTEGER NOT NULL, bitmap BLOB NOT NULL, exp INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE tasks(k TEXT PRIMARY KEY, body BLOB NOT NULL, exp INTEGER NOT NULL);"
    "CREATE TABLE policy(k TEXT PRIMARY KEY, body BLOB NOT NULL, exp INTEGER NOT NULL);"
    "CREATE TABLE watermarks(k TEXT PRIMARY KEY, topic TEXT NOT NULL, part INTEGER NOT NULL, off INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE INDEX decisions_exp ON decisions(exp);"
)


class V2File:
    """A schema 2 store as that version wrote it (a decisions row per
    position, replaced in place), written without today's code."""

    def __init__(self, path: Path, created_at: int) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.executescript(_V2_SCHEMA)
        self.db.executemany("INSERT INTO meta VALUES (?, ?)", [("created_at_ms", str(created_at)), ("schema", "2"), ("origin", "genesis")])

    def write(self, writes: BatchWrites, retention: int) -> None:
        rows = [(key(*k), encode(d), d.decided_at + retention) for k, d in writes.decisions.items()]
        self.db.executemany("INSERT OR REPLACE INTO decisions VALUES (?,?,?)", rows)
        marks = [(key(t, p), t, p, o) for (t, p), o in writes.watermarks().items()]
        self.db.executemany("INSERT INTO watermarks VALUES (?,?,?,?) ON CONFLICT(k) DO UPDATE SET off=max(off, excluded.off)", marks)


def test_a_schema_2_file_is_upgraded_in_place_its_live_decisions_kept_byte_for_byte(tmp_path: Path) -> None:
    db = tmp_path / "v2.db"
    v2 = V2File(db, NOW - 9)
    live = [_decision("in:x", 0, o, "v2", NOW) for o in (5, 6, 900)] + [_decision("b", 3, 1, "v2", NOW)]
    v2.write(_writes(live), RETENTION)
    v2.write(_writes([_decision("in:x", 0, 1, "gone", NOW - 2 * RETENTION)]), RETENTION)  # expired before the upgrade
    v2.db.execute("INSERT INTO nonces VALUES (?, ?)", (key("", "n1"), NOW + 5))
    v2.db.close()
    s = SqliteStore(db, now_ms=NOW, decision_retention_ms=RETENTION)
    tables = {r[0] for r in s._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "decisions" not in tables and "decision_runs" in tables
    assert s._db.execute("SELECT v FROM meta WHERE k='schema'").fetchone() == (str(SCHEMA_VERSION),)
    assert (s.origin, s.trusted_from, s.created_at) == ("genesis", None, NOW - 9)  # an upgrade from 2 moves no fence
    assert s.partition_watermarks() == {("in:x", 0): 900, ("b", 3): 1}
    got = [s.decision_at(d.source) for d in live]
    assert got == live and [encode(d) for d in got] == [encode(d) for d in live]  # type: ignore[misc]
    assert s.decision_at(Coordinates(topic="in:x", partition=0, offset=1)) is None
    assert set(_batch(s, [("in:x", 0, o) for o in range(1000)], NOW, BatchWrites()).decisions) == {("in:x", 0, o) for o in (5, 6, 900)}
    assert s.counts() == {"decisions": 4, "nonces": 1, "windows": 0, "tasks": 0, "policy": 0}
    s.close()
    s = SqliteStore(db, now_ms=NOW + 1)  # and it opens again as schema 3, nothing to upgrade
    assert s.counts()["decisions"] == 4
    s.close()


def test_a_schema_1_file_is_upgraded_through_2_to_3(tmp_path: Path) -> None:
    db = tmp_path / "v1.db"
    d = _decision("in", 2, 40, "v1", NOW)
    schema_1_file(db, NOW - 9, [(key("in", 2, 40), encode(d), NOW + RETENTION)])
    s = SqliteStore(db, now_ms=NOW)
    assert (s.origin, s.trusted_from) == ("created", NOW - 9)
    assert s.partition_watermarks() == {("in", 2): 40}
    assert s.decision_at(d.source) == d
    assert s._db.execute("SELECT v FROM meta WHERE k='schema'").fetchone() == (str(SCHEMA_VERSION),)
    s.close()


def test_a_newer_schema_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "v9.db"
    con = sqlite3.connect(db)
    con.executescript("CREATE TABLE meta(k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID;")
    con.execute("INSERT INTO meta VALUES('created_at_ms', '1'), ('schema', '9')")
    con.commit()
    con.close()
    with pytest.raises(RuntimeError, match="state schema 9 is not 4"):
        SqliteStore(db, now_ms=NOW)
    assert {r[0] for r in sqlite3.connect(db).execute("SELECT name FROM sqlite_master WHERE type='table'")} == {"meta"}


# -- the same answers as the memory store ----------------------------------------------------------

TOPICS = ("in", "in:x")

_offsets = st.one_of(st.integers(0, 40), st.integers(RUN_SPAN - 3, RUN_SPAN + 3), st.integers(3 * RUN_SPAN, 3 * RUN_SPAN + 2))
_position = st.tuples(st.sampled_from(TOPICS), st.integers(0, 1), _offsets)
#: a batch: positions it reads, (position, variant, age) it writes, how far the clock moves first, whether it expires after
_batch_st = st.tuples(
    st.lists(_position, max_size=12),
    st.lists(st.tuples(_position, st.sampled_from("abc"), st.sampled_from((0, 0, 0, 300))), max_size=12),
    st.integers(0, 400),
    st.booleans(),
)


def _apply(
    stores: list[StateStore], batch: tuple[list[SourceKey], list[tuple[SourceKey, str, int]], int, bool], now: int, written: set[SourceKey]
) -> None:
    reads, writes, _, expire = batch
    ds = _writes(_decision(t, p, o, v, now - age) for (t, p, o), v, age in writes)
    sources = [*reads, *(d for d in ds.decisions)]
    snaps = [_batch(s, sources, now, ds) for s in stores]
    assert snaps[0] == snaps[1]
    written.update(ds.decisions)
    if expire:
        assert stores[0].expire(now) == stores[1].expire(now)
    assert stores[0].counts() == stores[1].counts()
    for t, p, o in written:
        c = Coordinates(topic=t, partition=p, offset=o)
        assert stores[0].decision_at(c) == stores[1].decision_at(c)
    assert stores[0].partition_watermarks() == stores[1].partition_watermarks()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(before=st.lists(_batch_st, max_size=6), after=st.lists(_batch_st, min_size=1, max_size=8))
def test_sqlite_answers_as_the_memory_store_does_before_and_after_an_upgrade(
    tmp_path_factory: pytest.TempPathFactory, before: list, after: list
) -> None:  # type: ignore[type-arg]
    """`before` is written to the memory store and to a schema 2 file; the
    file is upgraded on open; then `after` runs on both, each batch's snapshot,
    the counts, the expiries and every position's decision compared. A
    second copy runs the whole sequence on schema 3 from the start."""
    tmp = tmp_path_factory.mktemp("equiv")
    memory, fresh_memory = (
        MemoryStore(NOW, genesis=True, decision_retention_ms=RETENTION),
        MemoryStore(NOW, genesis=True, decision_retention_ms=RETENTION),
    )
    fresh = SqliteStore(tmp / "fresh.db", now_ms=NOW, decision_retention_ms=RETENTION, genesis=True)
    v2 = V2File(tmp / "v2.db", NOW)
    now, written, fresh_written = NOW, set[SourceKey](), set[SourceKey]()
    for batch in before:
        now += batch[2]
        reads, writes, _, expire = batch
        ds = _writes(_decision(t, p, o, v, now - age) for (t, p, o), v, age in writes)
        memory.run_batch(KeySet(), now, lambda _s, ds=ds: ds)  # type: ignore[misc]
        v2.write(ds, RETENTION)
        written.update(ds.decisions)
        if expire:
            memory.expire(now)
            v2.db.execute("DELETE FROM decisions WHERE exp <= ?", (now,))
        _apply([fresh_memory, fresh], batch, now, fresh_written)
    v2.db.close()
    upgraded = SqliteStore(tmp / "v2.db", now_ms=now, decision_retention_ms=RETENTION)
    # the upgrade drops what had expired; the memory store drops it on its next expire
    memory.expire(now)
    assert upgraded.counts()["decisions"] == memory.counts()["decisions"]
    for batch in after:
        now += batch[2]
        _apply([memory, upgraded], batch, now, written)
        _apply([fresh_memory, fresh], batch, now, fresh_written)
    upgraded.close()
    fresh.close()


def test_the_equivalence_check_sees_a_store_that_keeps_a_superseded_decision(tmp_path: Path) -> None:
    """The comparison above can fail: a store whose write skips taking
    replaced positions out of older runs answers differently."""

    class Stale(SqliteStore):
        def _write_run(self, topic: str, partition: int, exp: int, items: list[tuple[int, Decision]]) -> None:
            self._db.execute(
                "INSERT INTO decision_runs(topic, part, first, last, n, exp, body) VALUES (?,?,?,?,?,?,?)",
                (topic, partition, items[0][0], items[-1][0], len(items), exp, encode([d for _, d in items])),
            )

    stores: list[StateStore] = [
        MemoryStore(NOW, genesis=True, decision_retention_ms=RETENTION),
        Stale(tmp_path / "s.db", now_ms=NOW, decision_retention_ms=RETENTION, genesis=True),
    ]
    written: set[SourceKey] = set()
    _apply(stores, ([], [(("in", 0, 1), "a", 0)], 0, False), NOW, written)
    with pytest.raises(AssertionError):
        _apply(stores, ([], [(("in", 0, 1), "b", 0)], 0, False), NOW, written)


def test_run_bodies_are_the_decisions_own_bytes(store: SqliteStore) -> None:
    ds = [_decision("in", 0, o, "a", NOW) for o in range(3)]
    _batch(store, [], NOW, _writes(ds))
    (body,) = store._db.execute("SELECT body FROM decision_runs").fetchone()
    assert body == b"\x93" + b"".join(encode(d) for d in ds)
    assert msgspec.msgpack.decode(body, type=list[Decision]) == ds


# -- several processes on one file -----------------------------------------------------------------


def _racer(path: str, name: str, barrier: Any, out: Any) -> None:
    """Re-decides the same positions as its rival, and checks-and-records the
    same nonces: one `BEGIN IMMEDIATE` transaction per batch."""
    store = SqliteStore(path, now_ms=NOW, decision_retention_ms=RETENTION)
    barrier.wait()
    admitted = []
    for i in range(40):
        nonce = ("", f"n{i}")
        sources = [("in", 0, o) for o in range(i % 7, i % 7 + 20)]

        decided: list[bool] = []

        def fn(
            snap: Snapshot, i: int = i, nonce: tuple[str, str] = nonce, sources: list[SourceKey] = sources, decided: list[bool] = decided
        ) -> BatchWrites:
            w = _writes(_decision(t, p, o, name, NOW + i) for t, p, o in sources)
            decided[:] = [nonce not in snap.nonces]
            if decided[0]:
                w.nonces[nonce] = NonceRecord(nonce, NOW + 10 * RETENTION)
            return w

        store.run_batch(KeySet(sources=sources, nonces={nonce}), NOW + i, fn)
        if decided[0]:
            admitted.append(i)
    store.close()
    out.put((name, admitted))


def test_two_processes_sharing_a_file_keep_one_run_per_position_and_one_admission_per_nonce(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    SqliteStore(path, now_ms=NOW, genesis=True).close()
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(path, name, barrier, out)) for name in ("a", "b")]
    for p in procs:
        p.start()
    got = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    # every nonce recorded by exactly one of the two
    assert sorted(got["a"] + got["b"]) == list(range(40))
    store = SqliteStore(path, now_ms=NOW)
    held: list[int] = []
    for (body,) in store._db.execute("SELECT body FROM decision_runs"):
        held += [d.source.offset for d in msgspec.msgpack.decode(body, type=list[Decision])]
    assert sorted(held) == list(range(6 + 20))  # each position in one run
    assert store.counts()["decisions"] == 26
    # and each reads back as the newest decision written for it: from the last batch that covered it
    for o in range(26):
        d = store.decision_at(Coordinates(topic="in", partition=0, offset=o))
        assert d is not None and d.decided_at == max(NOW + i for i in range(40) if i % 7 <= o < i % 7 + 20)
    store.close()


def test_expiry_deletes_in_short_transactions_and_counts_every_entry(store: SqliteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A backlog is expired a chunk per write transaction, so a guard sharing
    the file waits for one chunk, not for the whole backlog; the count is
    the same as one big delete's, and nothing live goes."""
    import busguard.state.sqlite.store as sqlite_store

    monkeypatch.setattr(sqlite_store, "EXPIRE_CHUNK", 3)
    old, live = NOW - 2 * RETENTION, NOW + 10 * RETENTION
    nonces = {("g", f"n{i}"): NonceRecord(("g", f"n{i}"), old if i < 10 else live) for i in range(12)}
    # seven expired decisions in seven runs (one per partition), one live
    _batch(
        store,
        [],
        NOW,
        BatchWrites(
            decisions={
                (d.source.topic, d.source.partition, d.source.offset): d for d in [_decision("in", p, 1, "a", old) for p in range(7)]
            },
            nonces=nonces,
        ),
    )
    _batch(store, [], NOW, _writes([_decision("in", 0, 2, "b", NOW)]))
    commits: list[str] = []
    store._db.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    assert store.expire(NOW) == 10 + 7
    # nonces (schema 4, state/sqlite/buckets.py): their one passed bucket table dropped, then the pass that counts
    # the live tables and records expired_to_ms; runs: 3+3+1; windows, policy and the two seal tables: one
    # empty chunk each
    assert len(commits) == 2 + 3 + 4
    assert store.counts()["nonces"] == 2 and store.counts()["decisions"] == 1
