"""Checkpoints off the commit path (state/sqlite/db.py `Checkpointer`): the
guard's store moves WAL frames into the database file on a thread of its
own, so no batch's commit stalls on a checkpoint; the writer's own
auto-checkpoint stays on only as a backstop."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from pathlib import Path

from busguard.state.keys import KeySet
from busguard.state.snapshot import Snapshot
from busguard.state.sqlite.db import BACKSTOP_PAGES, Checkpointer
from busguard.state.sqlite.store import SqliteStore
from busguard.state.writes import BatchWrites, NonceRecord

NOW = 1_800_000_000_000


def _fill(store: SqliteStore, batches: int, per_batch: int = 200) -> None:
    for b in range(batches):

        def fn(_snap: Snapshot, b: int = b) -> BatchWrites:
            w = BatchWrites()
            for i in range(per_batch):
                k = ("", f"nonce-{b}-{i}")
                w.nonces[k] = NonceRecord(k, NOW + 86_400_000)
            return w

        store.run_batch(KeySet(), NOW, fn)


def _nonces_in_main_file(db_file: Path, tmp: Path) -> int:
    """Rows readable from the database file alone, without its WAL."""
    alone = tmp / "alone.db"
    shutil.copyfile(db_file, alone)
    with sqlite3.connect(alone) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name GLOB 'nonces_*'")]
        # no table: not even the schema has left the WAL; several: one per expiry bucket (state/sqlite/buckets.py)
        return sum(int(db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in tables)


def _manual(tmp: Path) -> tuple[SqliteStore, Checkpointer]:
    """A store whose commits never checkpoint, and a Checkpointer whose thread
    never wakes (no commit tells it, its tick is an hour): passes by hand."""
    store = SqliteStore(tmp / "s.db", now_ms=NOW)
    store._db.execute("PRAGMA wal_autocheckpoint=0")
    return store, Checkpointer(tmp / "s.db", every_s=3600)


def test_guard_store_leaves_checkpoints_to_the_thread(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", now_ms=NOW, checkpoint_every_s=1.0)
    try:
        assert store.checkpointer is not None
        assert store._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == BACKSTOP_PAGES
    finally:
        store.close()
    assert not store.checkpointer._thread.is_alive()


def test_without_a_checkpointer_commits_checkpoint_as_before(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", now_ms=NOW)
    try:
        assert store.checkpointer is None
        assert store._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 10_000
    finally:
        store.close()


def test_a_pass_moves_every_committed_frame_into_the_database_file(tmp_path: Path) -> None:
    store, checkpointer = _manual(tmp_path)
    try:
        _fill(store, 30)
        assert _nonces_in_main_file(tmp_path / "s.db", tmp_path) == 0  # everything committed is still in the WAL
        in_wal, moved = checkpointer.run_once()
        assert in_wal > 0 and moved == in_wal
        assert _nonces_in_main_file(tmp_path / "s.db", tmp_path) == 30 * 200
    finally:
        checkpointer.close()
        store.close()


def test_commits_wake_the_thread(tmp_path: Path) -> None:
    """With an hour-long tick, only the writer's commits can start the passes
    that bring the rows into the database file."""
    store = SqliteStore(tmp_path / "s.db", now_ms=NOW, checkpoint_every_s=3600)
    checkpointer = store.checkpointer
    assert checkpointer is not None
    try:
        _fill(store, 5)
        woke = threading.Event()
        for _ in range(6000):  # waits for the thread's passes, bounded by a count, not a clock
            if (
                checkpointer.passes
                and checkpointer.last[0] == checkpointer.last[1]
                and _nonces_in_main_file(tmp_path / "s.db", tmp_path) == 5 * 200
            ):
                woke.set()
                break
            woke.wait(0.005)
        assert woke.is_set(), (checkpointer.passes, checkpointer.last)
    finally:
        store.close()


def test_the_wal_starts_over_once_a_pass_has_caught_up(tmp_path: Path) -> None:
    """A pass that copies the whole WAL lets the next writer start it from
    the beginning, so a busy store's WAL does not grow without bound."""
    store, checkpointer = _manual(tmp_path)
    try:
        _fill(store, 20)
        first, _ = checkpointer.run_once()
        for _ in range(3):
            _fill(store, 2)
            in_wal, moved = checkpointer.run_once()
            assert moved == in_wal
            assert in_wal < first  # started over: only the newest batches are in it
    finally:
        checkpointer.close()
        store.close()
