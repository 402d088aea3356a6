"""SQLite store: the embedded default. Durable, WAL mode, one file.

Several guard processes on one host may share the file: every batch runs in a
`BEGIN IMMEDIATE` transaction (load, decide, write, commit), so two processes
can never both pass a nonce check before either records it. `synchronous` is
FULL by default: a committed batch survives a power loss, not just `kill -9`.

Rows are msgpack-encoded msgspec Structs, so a decision read back after a
crash re-encodes to exactly the bytes that were first emitted.

Layout (schema version 2; every key is `key(parts…)`):
    meta(k, v)                                   created_at_ms, schema, origin, trusted_from_ms
    watermarks(k=topic,partition) -> topic, part, off  highest input offset decided; never expires
    decisions(k=topic,partition,offset) -> body, exp   every decision, by source coordinates
    nonces(k=scope,nonce) -> exp                 recorded after signatures verify
    windows(k=principal,session_id) -> top, bitmap, exp
    tasks(k=kind,task_id) -> body, exp           first admission per task (insert-only)

Lookups compare `+exp` so SQLite keeps using the primary key, not the expiry
index (which exists for `expire`). Decisions and tasks are ordinary rowid
tables: their rows (≈1–1.5 KB) are far too big for WITHOUT ROWID, which
stores rows in the key's B-tree and measured 1.6× slower per batch here.

`origin` is `genesis` for a store `busguard state init` made (an operator
declared that no history exists: no fence) and `created` for one `busguard
run` had to make because the file was missing (it may replace a lost store:
fenced from its creation). `trusted_from_ms` is the fence time of
admission/fence.py, absent while a genesis store has never re-armed; it is
read inside every batch's transaction, so a re-arm by one guard process
fences every process sharing the file from its next batch. Watermarks are
written in the batch's own transaction, so they can never claim a decision
the store does not hold. Schema 1 (no fence columns, no watermarks) is
upgraded in place on open: origin `created`, fenced from its creation as
before, watermarks rebuilt from the decisions it still holds.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from busguard.protocol.records import Coordinates, Decision, TaskEntry
from busguard.state import sealrows
from busguard.state.codecs import bitmap_bytes, bitmap_int, decision_decoder, encode, task_decoder
from busguard.state.keys import KeySet, Partition, source_key
from busguard.state.snapshot import Snapshot, WindowState
from busguard.state.sqlitedb import connect, key, select_in, transaction
from busguard.state.store import BatchFn, rearmed
from busguard.state.writes import BatchWrites

SCHEMA_VERSION: Final = 2
GENESIS: Final = "genesis"
CREATED: Final = "created"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS decisions(k TEXT PRIMARY KEY, body BLOB NOT NULL, exp INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS nonces(k TEXT PRIMARY KEY, exp INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS windows(k TEXT PRIMARY KEY, top INTEGER NOT NULL, bitmap BLOB NOT NULL, exp INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tasks(k TEXT PRIMARY KEY, body BLOB NOT NULL, exp INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS policy(k TEXT PRIMARY KEY, body BLOB NOT NULL, exp INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS watermarks(k TEXT PRIMARY KEY, topic TEXT NOT NULL, part INTEGER NOT NULL, off INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS decisions_exp ON decisions(exp);
CREATE INDEX IF NOT EXISTS nonces_exp ON nonces(exp);
CREATE INDEX IF NOT EXISTS windows_exp ON windows(exp);
CREATE INDEX IF NOT EXISTS tasks_exp ON tasks(exp);
CREATE INDEX IF NOT EXISTS policy_exp ON policy(exp);
"""
_TABLES: Final = ("decisions", "nonces", "windows", "tasks", "policy")


class SqliteStore:
    def __init__(
        self,
        path: str | Path,
        *,
        now_ms: int,
        synchronous: str = "FULL",
        task_retention_ms: int = 7 * 86_400_000,
        decision_retention_ms: int = 7 * 86_400_000,
        busy_timeout_ms: int = 30_000,
        genesis: bool = False,
    ) -> None:
        """Open the store at `path`, creating it if it has no store yet.

        `genesis=True` only with `busguard state init`: it refuses a path
        that already holds a store, since declaring "no history" over one
        would throw its fence away."""
        self.path = Path(path)
        self.task_retention_ms = task_retention_ms
        self.decision_retention_ms = decision_retention_ms
        self._db = connect(self.path, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms)
        try:
            with transaction(self._db) as db:
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    db.execute(statement)
                sealrows.create(db)  # batch seals: their own tables, gained by any existing store
                meta = dict(db.execute("SELECT k, v FROM meta").fetchall())
                self._created = "created_at_ms" not in meta
                if self._created:
                    meta = {"created_at_ms": str(now_ms), "schema": str(SCHEMA_VERSION), "origin": GENESIS if genesis else CREATED}
                    if not genesis:
                        meta["trusted_from_ms"] = str(now_ms)
                    db.executemany("INSERT INTO meta VALUES(?, ?)", list(meta.items()))
                elif genesis:
                    raise FileExistsError(f"{self.path}: already holds a state store (created at {meta['created_at_ms']}); genesis is for a new one")
                elif meta.get("schema") == "1":
                    meta = self._upgrade_from_1(db, meta)
                elif meta.get("schema") != str(SCHEMA_VERSION):
                    raise RuntimeError(f"{self.path}: state schema {meta.get('schema')} is not {SCHEMA_VERSION}")
                self._created_at = int(meta["created_at_ms"])
                self.origin = meta["origin"]
        except BaseException:
            self._db.close()
            raise

    @staticmethod
    def _upgrade_from_1(db: sqlite3.Connection, meta: dict[str, str]) -> dict[str, str]:
        marks: dict[tuple[str, int], int] = {}
        for (k,) in db.execute("SELECT k FROM decisions"):
            topic, partition, offset = _source_of(k)
            if marks.get((topic, partition), -1) < offset:
                marks[(topic, partition)] = offset
        db.executemany("INSERT INTO watermarks VALUES (?,?,?,?)", [(key(t, p), t, p, o) for (t, p), o in marks.items()])
        meta = {**meta, "schema": str(SCHEMA_VERSION), "origin": CREATED, "trusted_from_ms": meta["created_at_ms"]}
        db.executemany("INSERT OR REPLACE INTO meta VALUES(?, ?)", [(k, meta[k]) for k in ("schema", "origin", "trusted_from_ms")])
        return meta

    @property
    def created_at(self) -> int:
        return self._created_at

    @property
    def trusted_from(self) -> int | None:
        return _trusted_from(self._db)

    def rearm(self, now_ms: int) -> int:
        """Fence the store from `now_ms` (never earlier than it already is); durable."""
        with transaction(self._db) as db:
            t = rearmed(_trusted_from(db), now_ms)
            db.execute("INSERT OR REPLACE INTO meta VALUES('trusted_from_ms', ?)", (str(t),))
        return t

    def partition_watermarks(self) -> dict[Partition, int]:
        return {(t, p): o for t, p, o in self._db.execute("SELECT topic, part, off FROM watermarks")}

    @property
    def created(self) -> bool:
        return self._created

    def run_batch(self, keys: KeySet, now_ms: int, fn: BatchFn) -> None:
        with transaction(self._db):
            self._write(fn(self._load(keys, now_ms)), now_ms)

    def _select(self, sql: str, keys: Sequence[str], now_ms: int) -> Iterable[tuple[Any, ...]]:
        return select_in(self._db, sql, keys, now_ms)

    def _load(self, keys: KeySet, now_ms: int) -> Snapshot:
        snap = Snapshot(trusted_from=_trusted_from(self._db))
        for (body,) in self._select("SELECT body FROM decisions WHERE +exp > ? AND k IN ({})", [key(*s) for s in keys.sources], now_ms):
            d = decision_decoder.decode(body)
            snap.decisions[source_key(d.source)] = d
        by_key = {key(*n): n for n in keys.nonces}
        for (k,) in self._select("SELECT k FROM nonces WHERE +exp > ? AND k IN ({})", list(by_key), now_ms):
            snap.nonces.add(by_key[k])
        by_key = {key(*w): w for w in keys.windows}
        for k, top, bitmap in self._select("SELECT k, top, bitmap FROM windows WHERE +exp > ? AND k IN ({})", list(by_key), now_ms):
            snap.windows[by_key[k]] = WindowState(top, bitmap_int(bitmap))
        for (body,) in self._select("SELECT body FROM tasks WHERE +exp > ? AND k IN ({})", [key(*t) for t in keys.tasks], now_ms):
            t = task_decoder.decode(body)
            snap.tasks[(t.kind, t.task_id)] = t
        by_key = {key(*p): p for p in keys.policy}
        for k, body in self._select("SELECT k, body FROM policy WHERE +exp > ? AND k IN ({})", list(by_key), now_ms):
            snap.policy[by_key[k]] = body
        sealrows.load(self._db, snap, keys.chain, now_ms)
        return snap

    def _write(self, state: BatchWrites, now_ms: int) -> None:
        db = self._db
        marks = state.watermarks()
        db.executemany(
            "INSERT INTO watermarks VALUES (?,?,?,?) ON CONFLICT(k) DO UPDATE SET off=excluded.off WHERE excluded.off > watermarks.off",
            [(key(t, p), t, p, o) for (t, p), o in marks.items()],
        )
        db.executemany(
            "INSERT OR REPLACE INTO decisions VALUES (?,?,?)",
            [(key(*k), encode(d), d.decided_at + self.decision_retention_ms) for k, d in state.decisions.items()],
        )
        db.executemany("INSERT OR REPLACE INTO nonces VALUES (?,?)", [(key(*n.key), n.expires_at) for n in state.nonces.values()])
        db.executemany(
            "INSERT OR REPLACE INTO windows VALUES (?,?,?,?)",
            [(key(*w.key), w.state.top, bitmap_bytes(w.state.bitmap), w.expires_at) for w in state.windows.values()],
        )
        # Insert-only, except over an expired row: the first admission stays the witness.
        db.executemany(
            "INSERT INTO tasks VALUES (?,?,?) ON CONFLICT(k) DO UPDATE SET body=excluded.body, exp=excluded.exp WHERE tasks.exp <= ?",
            [(key(t.kind, t.task_id), encode(t), t.admitted_at + self.task_retention_ms, now_ms) for t in state.tasks.values()],
        )
        db.executemany("INSERT OR REPLACE INTO policy VALUES (?,?,?)", [(key(*p.key), p.value, p.expires_at) for p in state.policy.values()])
        sealrows.write(db, state.heads, self.decision_retention_ms)

    def decision_at(self, source: Coordinates) -> Decision | None:
        row = self._db.execute("SELECT body FROM decisions WHERE k=?", (key(*source_key(source)),)).fetchone()
        return None if row is None else decision_decoder.decode(row[0])

    def task(self, kind: str, task_id: str, now_ms: int) -> TaskEntry | None:
        row = self._db.execute("SELECT body FROM tasks WHERE k=? AND exp > ?", (key(kind, task_id), now_ms)).fetchone()
        return None if row is None else task_decoder.decode(row[0])

    def expire(self, now_ms: int) -> int:
        with transaction(self._db) as db:
            return sum(db.execute(f"DELETE FROM {t} WHERE exp <= ?", (now_ms,)).rowcount for t in _TABLES) + sealrows.expire(db, now_ms)

    def counts(self) -> dict[str, int]:
        return {t: self._db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in _TABLES}

    def close(self) -> None:
        self._db.close()


def _trusted_from(db: sqlite3.Connection) -> int | None:
    row = db.execute("SELECT v FROM meta WHERE k='trusted_from_ms'").fetchone()
    return None if row is None else int(row[0])


def _source_of(k: str) -> tuple[str, int, int]:
    """Inverse of `key(topic, partition, offset)` (sqlitedb.key)."""
    n, _, rest = k.partition(":")
    topic, rest = rest[: int(n)], rest[int(n) + 1 :]
    m, _, rest = rest.partition(":")
    return topic, int(rest[: int(m)]), int(rest[int(m) + 1 :])

