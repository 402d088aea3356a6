"""The admission harness (busguard.testing), plus what only busguard's own tests need."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import msgspec

from busguard.protocol.records import Coordinates, Decision
from busguard.state.memory.store import MemoryStore
from busguard.state.rocksdb.layout import QI, partition
from busguard.state.rocksdb.store import RocksStore
from busguard.state.sqlite.db import transaction
from busguard.state.sqlite.store import SqliteStore
from busguard.state.store import StateStore
from busguard.testing import NOW, Harness, agent, forged, registry, seed, sender

__all__ = ["NOW", "Harness", "Rec", "agent", "forged", "registry", "schema_1_file", "seed", "sender"]


class Rec(NamedTuple):
    """What the guard's `prepare` reads of a consumer record (aiokafka's ConsumerRecord, in part)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]


def schema_1_file(path: Path, created_at_ms: int, decisions: Sequence[tuple[str, bytes, int]]) -> None:
    """A SQLite file as busguard's schema 1 wrote it: meta and one row per
    decision (key, body, expiry), for the upgrade tests."""
    con = sqlite3.connect(path)
    con.executescript(
        "CREATE TABLE meta(k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID;"
        "CREATE TABLE decisions(k TEXT PRIMARY KEY, body BLOB NOT NULL, exp INTEGER NOT NULL);"
        f"INSERT INTO meta VALUES('created_at_ms', '{created_at_ms}'), ('schema', '1');"
    )
    con.executemany("INSERT INTO decisions VALUES (?, ?, ?)", decisions)
    con.commit()
    con.close()


def store_as_before(store: StateStore, at: Coordinates, legacy: Decision, expires_ms: int) -> None:
    """Overwrite the decision stored at `at` (the first of its run) with
    `legacy`, as a version before one of its optional fields existed stored
    it: what the re-emission-after-upgrade tests start from."""
    if isinstance(store, MemoryStore):
        store.decisions[(at.topic, at.partition, at.offset)] = (legacy, expires_ms)
        return
    if isinstance(store, RocksStore):
        tp = partition(at.topic, at.partition)
        (k, v), *_ = store._runs(tp, at.offset, at.offset)
        store._db.put(k, QI.pack(QI.unpack_from(v)[0], 1) + msgspec.msgpack.encode([legacy]))
        return
    assert isinstance(store, SqliteStore)
    with transaction(store._db) as db:
        db.execute(
            "UPDATE decision_runs SET body=? WHERE topic=? AND part=? AND first=?",
            (msgspec.msgpack.encode([legacy]), at.topic, at.partition, at.offset),
        )
