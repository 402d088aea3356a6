"""SQLite's time-bucketed nonces and tasks (schema 4, state/sqlite/buckets.py). What
must hold with the layout: a key reads back as its newest write whichever
buckets its writes fell in (and as absent once expired, by the batch's clock
or by an expiry pass's); tasks stay insert-only; expiry drops passed tables
and counts what it expired; a lookup touches a bounded number of tables; a
second process dropping a table under this one breaks nothing; a schema 3
file upgrades in place with every live row moved, bytes unchanged; and for
any sequence of batches the store answers as the memory store does."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from busguard.protocol.records import Coordinates, TaskEntry
from busguard.state.codecs import encode
from busguard.state.keys import KeySet, NonceKey, TaskKey
from busguard.state.memory.store import MemoryStore
from busguard.state.snapshot import Snapshot
from busguard.state.sqlite.buckets import BUCKETS_PER_LIFETIME, width_for
from busguard.state.sqlite.db import key
from busguard.state.sqlite.store import SCHEMA_VERSION, SqliteStore
from busguard.state.store import StateStore
from busguard.state.writes import BatchWrites, NonceRecord

from .harness import NOW

LIFETIME = 4_000  # nonces and tasks: buckets of 1 s


def _task(task_id: str, at: int, receipt: bytes = b"r") -> TaskEntry:
    return TaskEntry(
        "handoff",
        task_id,
        f"rid-{task_id}-{at}",
        f"did-{at}",
        "p",
        f"n-{task_id}",
        "0" * 64,
        None,
        None,
        Coordinates(topic="in", partition=0, offset=at),
        receipt,
        b"s" * 64,
        at,
    )


def _store(path: Path, now: int = NOW) -> SqliteStore:
    return SqliteStore(path, now_ms=now, genesis=not path.exists(), nonce_retention_ms=LIFETIME, task_retention_ms=LIFETIME)


def _batch(
    store: StateStore, now: int, writes: BatchWrites, nonces: set[NonceKey] | None = None, tasks: set[TaskKey] | None = None
) -> Snapshot:
    seen: list[Snapshot] = []

    def fn(snap: Snapshot) -> BatchWrites:
        seen.append(snap)
        return writes

    store.run_batch(KeySet(nonces=nonces or set(), tasks=tasks or set()), now, fn)
    return seen[-1]


def _tables(store: SqliteStore, kind: str) -> list[str]:
    return sorted(r[0] for r in store._db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name GLOB ?", (f"{kind}_*",)))


def test_a_row_goes_to_the_table_of_its_expiry_bucket_and_nothing_indexes_exp(tmp_path: Path) -> None:
    s = _store(tmp_path / "s.db")
    w = width_for(LIFETIME)
    _batch(s, NOW, BatchWrites(nonces={("", "a"): NonceRecord(("", "a"), NOW + LIFETIME)}, tasks={("handoff", "t"): _task("t", NOW)}))
    lo = (NOW + LIFETIME) // w * w
    assert _tables(s, "nonces") == [f"nonces_{lo}_{lo + w}"] and _tables(s, "tasks") == [f"tasks_{lo}_{lo + w}"]
    indexes = {r[0] for r in s._db.execute("SELECT tbl_name FROM sqlite_master WHERE type='index' AND sql IS NOT NULL")}
    assert not {t for t in indexes if t.startswith(("nonces", "tasks"))}
    s.close()


def test_a_rewritten_nonce_reads_back_as_its_newest_write_in_whichever_bucket(tmp_path: Path) -> None:
    s = _store(tmp_path / "s.db")
    k = ("", "n")
    _batch(s, NOW, BatchWrites(nonces={k: NonceRecord(k, NOW + 3 * LIFETIME)}))
    assert _batch(s, NOW, BatchWrites(nonces={k: NonceRecord(k, NOW + 10)}), nonces={k}).nonces == {k}  # shorter, another bucket
    assert s.counts()["nonces"] == 1
    assert _batch(s, NOW + 11, BatchWrites(), nonces={k}).nonces == set()  # the newest expiry holds, not the longer one
    # a write with nothing read first (no key looked up) still takes the key out of its old bucket
    _batch(s, NOW + 11, BatchWrites(nonces={k: NonceRecord(k, NOW + 2 * LIFETIME)}))
    assert s.counts()["nonces"] == 1 and _batch(s, NOW + LIFETIME, BatchWrites(), nonces={k}).nonces == {k}
    s.close()


def test_a_task_stays_its_first_admission_until_it_expires_then_a_new_one_takes_its_place(tmp_path: Path) -> None:
    s = _store(tmp_path / "s.db")
    tk = ("handoff", "t")
    _batch(s, NOW, BatchWrites(tasks={tk: _task("t", NOW, b"first")}), tasks={tk})
    _batch(s, NOW + 1_500, BatchWrites(tasks={tk: _task("t", NOW + 1_500, b"second")}))  # not looked up: found anyway
    got = s.task("handoff", "t", NOW + 1_500)
    assert got is not None and got.receipt == b"first"
    later = NOW + LIFETIME + 1
    assert s.task("handoff", "t", later) is None
    _batch(s, later, BatchWrites(tasks={tk: _task("t", later, b"third")}), tasks={tk})  # over the expired row, in a later bucket
    got = s.task("handoff", "t", later)
    assert got is not None and got.receipt == b"third" and s.counts()["tasks"] == 1
    s.close()


def test_expiry_drops_passed_tables_a_table_per_transaction_and_counts_rows_of_live_ones(tmp_path: Path) -> None:
    s = _store(tmp_path / "s.db")
    w = width_for(LIFETIME)
    nonces = {("", f"n{i}"): NonceRecord(("", f"n{i}"), NOW + i * w // 2) for i in range(1, 9)}  # 8 rows over 4-5 buckets
    _batch(s, NOW, BatchWrites(nonces=nonces))
    at = NOW + 5 * w // 2  # n1..n5 expired
    passed = [t for t in _tables(s, "nonces") if int(t.rsplit("_", 1)[1]) <= at]
    commits: list[str] = []
    s._db.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    assert s.expire(at) == 5
    s._db.set_trace_callback(None)
    assert passed and not set(passed) & set(_tables(s, "nonces"))
    assert len(commits) == len(passed) + 1 + 5  # a drop each, the counting pass, then the five row-deleted tables
    assert s.counts()["nonces"] == 3
    assert s.expire(at) == 0  # counted once
    # a row expired by the pass, in a table still live, reads as absent even to a batch whose clock is behind the pass
    assert _batch(s, NOW, BatchWrites(), nonces=set(nonces)).nonces == {("", f"n{i}") for i in (6, 7, 8)}
    s.close()


def test_a_lookup_touches_at_most_buckets_per_lifetime_plus_one_tables(tmp_path: Path) -> None:
    """The bound docs/operations.md ("Bounds") states: with a nonce and a task
    written every 100 ms for three lifetimes and expiry after every write,
    the store never holds more than BUCKETS_PER_LIFETIME + 1 tables of a kind."""
    s = _store(tmp_path / "s.db")
    most = 0
    for i in range(3 * LIFETIME // 100):
        now = NOW + 100 * i
        _batch(
            s,
            now,
            BatchWrites(
                nonces={("", f"n{i}"): NonceRecord(("", f"n{i}"), now + LIFETIME)}, tasks={("handoff", f"t{i}"): _task(f"t{i}", now)}
            ),
        )
        s.expire(now)
        most = max(most, len(_tables(s, "nonces")), len(_tables(s, "tasks")))
    assert most == BUCKETS_PER_LIFETIME + 1
    s.close()


def test_a_table_dropped_by_another_process_is_seen_by_this_one(tmp_path: Path) -> None:
    a, b = _store(tmp_path / "s.db"), _store(tmp_path / "s.db")
    k = ("", "x")
    _batch(a, NOW, BatchWrites(nonces={k: NonceRecord(k, NOW + 10)}), nonces={k})
    assert b.expire(NOW + LIFETIME) == 1 and _tables(b, "nonces") == []
    assert _batch(a, NOW + LIFETIME, BatchWrites(nonces={k: NonceRecord(k, NOW + 2 * LIFETIME)}), nonces={k}).nonces == set()
    assert a.counts()["nonces"] == 1 and b.counts()["nonces"] == 1
    a.close()
    b.close()


# -- upgrade from schema 3 ---------------------------------------------------------------------------

_V3_ROWS = (
    "CREATE TABLE meta(k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE nonces(k TEXT PRIMARY KEY, exp INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE tasks(k TEXT PRIMARY KEY, body BLOB NOT NULL, exp INTEGER NOT NULL);"
    "CREATE INDEX nonces_exp ON nonces(exp);"
    "CREATE INDEX tasks_exp ON tasks(exp);"
)


def test_a_schema_3_file_is_upgraded_in_place_every_live_row_moved_into_its_bucket_bytes_unchanged(tmp_path: Path) -> None:
    """A schema 3 file as that version wrote its nonces and tasks (one table
    each, with exp indexes), written without today's code."""
    db = tmp_path / "v3.db"
    con = sqlite3.connect(db, isolation_level=None)
    con.executescript(_V3_ROWS)
    con.executemany("INSERT INTO meta VALUES (?, ?)", [("created_at_ms", str(NOW - 9)), ("schema", "3"), ("origin", "genesis")])
    w = width_for(LIFETIME)
    live_nonces = {key("", f"n{i}"): NOW + 1 + i * w // 3 for i in range(15)}  # over five buckets
    con.executemany("INSERT INTO nonces VALUES (?, ?)", [*live_nonces.items(), (key("", "gone"), NOW)])
    tasks = {f"t{i}": _task(f"t{i}", NOW - LIFETIME + 1 + i * 700) for i in range(6)}
    con.executemany(
        "INSERT INTO tasks VALUES (?, ?, ?)", [(key("handoff", t), encode(e), e.admitted_at + LIFETIME) for t, e in tasks.items()]
    )
    con.execute("INSERT INTO tasks VALUES (?, ?, ?)", (key("handoff", "old"), encode(_task("old", NOW - LIFETIME)), NOW))
    con.close()

    s = _store(db)
    names = {r[0] for r in s._db.execute("SELECT name FROM sqlite_master")}
    assert not {"nonces", "tasks", "nonces_exp", "tasks_exp"} & names
    assert s._db.execute("SELECT v FROM meta WHERE k='schema'").fetchone() == (str(SCHEMA_VERSION),)
    assert (s.origin, s.trusted_from, s.created_at) == ("genesis", None, NOW - 9)
    assert len(_tables(s, "nonces")) == 5
    for table in _tables(s, "nonces") + _tables(s, "tasks"):
        lo, hi = map(int, table.split("_")[1:])
        assert all(lo <= exp < hi for (exp,) in s._db.execute(f"SELECT exp FROM {table}"))
    assert s.counts() == {"decisions": 0, "nonces": 15, "windows": 0, "tasks": 6, "policy": 0}
    wanted = {("", f"n{i}") for i in range(15)} | {("", "gone")}
    assert _batch(s, NOW, BatchWrites(), nonces=wanted).nonces == wanted - {("", "gone")}
    for t, e in tasks.items():
        got = s.task("handoff", t, NOW)
        assert got is not None and encode(got) == encode(e)
    assert s.task("handoff", "old", NOW - 1) is None  # expired before the upgrade: dropped with the old table
    s.close()
    s = _store(db, NOW + 1)  # and it opens again as schema 4, nothing to upgrade
    assert s.counts()["nonces"] == 15
    s.close()


# -- the same answers as the memory store ------------------------------------------------------------

_keys = st.sampled_from(["a", "b", "c", "d"])
#: a batch: nonces read, nonces written (key, lifetime), tasks read and written, clock step, expire after?
_batch_st = st.tuples(
    st.lists(_keys, max_size=4),
    st.lists(st.tuples(_keys, st.integers(1, 3 * LIFETIME)), max_size=4),
    st.lists(_keys, max_size=4),
    st.integers(0, 1_500),
    st.booleans(),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batches=st.lists(_batch_st, min_size=1, max_size=14))
def test_buckets_answer_as_the_memory_store_does(tmp_path_factory: pytest.TempPathFactory, batches: list) -> None:  # type: ignore[type-arg]
    tmp = tmp_path_factory.mktemp("buckets")
    memory = MemoryStore(NOW, genesis=True, task_retention_ms=LIFETIME)
    sqlite = _store(tmp / "s.db")
    now = NOW
    try:
        for reads, nonce_writes, task_keys, step, expire in batches:
            now += step
            writes = BatchWrites(
                nonces={("", k): NonceRecord(("", k), now + life) for k, life in nonce_writes},
                tasks={("handoff", k): _task(k, now) for k in task_keys},
            )
            looked = {("", k) for k in reads}
            tasks = {("handoff", k) for k in task_keys[::2]}  # some written tasks looked up, some not
            snaps = [_batch(st_, now, writes, looked, tasks) for st_ in (memory, sqlite)]
            assert snaps[0].nonces == snaps[1].nonces and snaps[0].tasks == snaps[1].tasks
            if expire:
                assert memory.expire(now) == sqlite.expire(now)
            assert memory.counts() == sqlite.counts()
            for k in "abcd":
                assert memory.task("handoff", k, now) == sqlite.task("handoff", k, now)
    finally:
        sqlite.close()
