"""SQLite store: the embedded default. Durable, WAL mode, one file.

Several guard processes on one host may share the file: every batch runs in a
`BEGIN IMMEDIATE` transaction (load, decide, write, commit), so two processes
can never both pass a nonce check before either records it. `synchronous` is
FULL by default: a committed batch survives a power loss, not just `kill -9`.

Rows are msgpack-encoded msgspec Structs, so a decision read back after a
crash re-encodes to exactly the bytes that were first emitted.

Layout (schema version 3; every key is `key(parts…)`):
    meta(k, v)                                   created_at_ms, schema, origin, trusted_from_ms
    watermarks(k=topic,partition) -> topic, part, off  highest input offset decided; never expires
    decision_runs(id, topic, part, first, last, n, exp, body)
                                                 the decisions of one batch, per input partition
    nonces(k=scope,nonce) -> exp                 recorded after signatures verify
    windows(k=principal,session_id) -> top, bitmap, exp
    tasks(k=kind,task_id) -> body, exp           first admission per task (insert-only)

Decisions are stored a run at a time, not a row each (a row per
record was a third of the state transaction's cost, and every batch looked up
all its positions only to find nothing). A run holds, for one input
partition, the decisions one batch wrote that share one expiry (in practice:
all of that batch's decisions on that partition): `body` is the msgpack array
of the decisions in offset order, `first`/`last` their lowest and highest
offsets (`last - first < RUN_SPAN`: a batch whose offsets on a partition
spread wider is cut into several runs), `n` how many, `exp` when they expire
(so a run expires with its newest decision, which is every one of them).
A batch finds its earlier decisions with one range query per partition on
(topic, part, last): a run holding an offset in [lo, hi] has `last` in
[lo, hi + RUN_SPAN) and `first <= hi`, so the scan is bounded and, for a
batch past everything stored (the normal case), empty.

Every position is held by at most one run, expired or not: writing a run
first takes its positions out of the runs that held them (rewritten, or
deleted once empty). So a re-decided position (a different record found at
a decided offset, `busguard_replaced_decisions_total`) reads back as its
newest decision whatever the order of the runs, `counts()["decisions"]`
(the sum of `n`) counts each position once, and an older run's expiry can
never bring a superseded decision back. Reads also take runs in `id` order,
newest last, so the newest wins even if that ever failed to hold.

`origin` is `genesis` for a store `busguard state init` made (an operator
declared that no history exists: no fence) and `created` for one `busguard
run` had to make because the file was missing (it may replace a lost store:
fenced from its creation). `trusted_from_ms` is the fence time of
admission/fence.py, absent while a genesis store has never re-armed; it is
read inside every batch's transaction, so a re-arm by one guard process
fences every process sharing the file from its next batch. Watermarks are
written in the batch's own transaction, so they can never claim a decision
the store does not hold.

Upgrades run in place on open, in the opening transaction. Schema 1 (no
fence columns, no watermarks): origin `created`, fenced from its creation as
before, watermarks rebuilt from the decisions it still holds; then as schema
2. Schema 2 (a `decisions` row per position): every unexpired decision
becomes a one-decision run with its expiry, bytes unchanged, and the table
is dropped; they age out as before, and new batches write whole runs.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final


from busguard.protocol.records import Coordinates, Decision, TaskEntry
from busguard.state import sealrows
from busguard.state.codecs import bitmap_bytes, bitmap_int, encode, run_decoder, task_decoder
from busguard.state.keys import KeySet, Partition, SourceKey
from busguard.state.snapshot import Snapshot, WindowState, spans_of
from busguard.state.sqlitedb import BACKSTOP_PAGES, Checkpointer, connect, key, select_in, transaction
from busguard.state.store import BatchFn, rearmed
from busguard.state.writes import BatchWrites

SCHEMA_VERSION: Final = 3
#: A run's offsets span less than this (last - first < RUN_SPAN); the range
#: query relies on it, so changing it is a schema change.
RUN_SPAN: Final = 4096
GENESIS: Final = "genesis"
CREATED: Final = "created"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS decision_runs(id INTEGER PRIMARY KEY, topic TEXT NOT NULL, part INTEGER NOT NULL, first INTEGER NOT NULL, last INTEGER NOT NULL, n INTEGER NOT NULL, exp INTEGER NOT NULL, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS nonces(k TEXT PRIMARY KEY, exp INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS windows(k TEXT PRIMARY KEY, top INTEGER NOT NULL, bitmap BLOB NOT NULL, exp INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tasks(k TEXT PRIMARY KEY, body BLOB NOT NULL, exp INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS policy(k TEXT PRIMARY KEY, body BLOB NOT NULL, exp INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS watermarks(k TEXT PRIMARY KEY, topic TEXT NOT NULL, part INTEGER NOT NULL, off INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS decision_runs_at ON decision_runs(topic, part, last, first);
CREATE INDEX IF NOT EXISTS decision_runs_exp ON decision_runs(exp);
CREATE INDEX IF NOT EXISTS nonces_exp ON nonces(exp);
CREATE INDEX IF NOT EXISTS windows_exp ON windows(exp);
CREATE INDEX IF NOT EXISTS tasks_exp ON tasks(exp);
CREATE INDEX IF NOT EXISTS policy_exp ON policy(exp);
"""
_TABLES: Final = ("nonces", "windows", "tasks", "policy")  # one row per entry; decisions are counted by run
#: every table `expire` deletes from, with the column that names a row (WITHOUT ROWID tables have no rowid)
_EXPIRING: Final = (("decision_runs", "id"), ("nonces", "k"), ("windows", "k"), ("tasks", "rowid"), ("policy", "rowid"), *((t, "rowid") for t in sealrows.TABLES))
EXPIRE_CHUNK: Final = 20_000  # rows per expiry transaction (as on PostgreSQL: state/pgsql.py)
#: Runs that may hold a position in [lo, hi] of one partition (see the module docstring).
_RUNS_IN: Final = "FROM decision_runs WHERE topic=? AND part=? AND last>=? AND last<? AND first<=?"


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
        checkpoint_every_s: float | None = None,
    ) -> None:
        """Open the store at `path`, creating it if it has no store yet.

        `genesis=True` only with `busguard state init`: it refuses a path
        that already holds a store, since declaring "no history" over one
        would throw its fence away. `checkpoint_every_s` (the guard's
        long-lived store) moves checkpoints off the commits onto a
        `Checkpointer` thread; None keeps SQLite's auto-checkpoint."""
        self.path = Path(path)
        self.task_retention_ms = task_retention_ms
        self.decision_retention_ms = decision_retention_ms
        self._db = connect(self.path, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms)
        self.checkpointer: Checkpointer | None = None
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
                else:
                    if meta.get("schema") == "1":
                        meta = self._upgrade_from_1(db, meta)
                    if meta.get("schema") == "2":
                        meta = self._upgrade_from_2(db, meta, now_ms)
                if meta.get("schema") != str(SCHEMA_VERSION):
                    raise RuntimeError(f"{self.path}: state schema {meta.get('schema')} is not {SCHEMA_VERSION}")
                self._created_at = int(meta["created_at_ms"])
                self.origin = meta["origin"]
            if checkpoint_every_s is not None:
                self._db.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}")
                self._db.execute(f"PRAGMA journal_size_limit={64 * 2**20}")  # a WAL started over is cut back to 64 MiB
                self.checkpointer = Checkpointer(self.path, every_s=checkpoint_every_s)
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
        meta = {**meta, "schema": "2", "origin": CREATED, "trusted_from_ms": meta["created_at_ms"]}
        db.executemany("INSERT OR REPLACE INTO meta VALUES(?, ?)", [(k, meta[k]) for k in ("schema", "origin", "trusted_from_ms")])
        return meta

    @staticmethod
    def _upgrade_from_2(db: sqlite3.Connection, meta: dict[str, str], now_ms: int) -> dict[str, str]:
        """Each unexpired decision row becomes a run of one, its bytes kept as
        they are (a one-element msgpack array around them); expired rows read
        as absent already and are dropped with the table."""
        rows = db.execute("SELECT k, body, exp FROM decisions WHERE exp > ?", (now_ms,))
        while chunk := rows.fetchmany(1000):
            runs = []
            for k, body, exp in chunk:
                topic, partition, offset = _source_of(k)
                runs.append((topic, partition, offset, offset, 1, exp, b"\x91" + body))
            db.executemany("INSERT INTO decision_runs(topic, part, first, last, n, exp, body) VALUES (?,?,?,?,?,?,?)", runs)
        db.execute("DROP TABLE decisions")
        db.execute("INSERT OR REPLACE INTO meta VALUES('schema', ?)", (str(SCHEMA_VERSION),))
        return {**meta, "schema": str(SCHEMA_VERSION)}

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
        if self.checkpointer is not None:
            self.checkpointer.committed()

    def _select(self, sql: str, keys: Sequence[str], now_ms: int) -> Iterable[tuple[Any, ...]]:
        return select_in(self._db, sql, keys, now_ms)

    def _load(self, keys: KeySet, now_ms: int) -> Snapshot:
        snap = Snapshot(trusted_from=_trusted_from(self._db))
        if keys.sources:
            self._load_decisions(keys.sources, now_ms, snap.decisions)
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

    def _load_decisions(self, sources: Sequence[SourceKey], now_ms: int, into: dict[SourceKey, Decision]) -> None:
        wanted = set(sources)
        for topic, partition, lo, hi in spans_of(wanted):
            sql = f"SELECT body {_RUNS_IN} AND +exp > ? ORDER BY id"
            for (body,) in self._db.execute(sql, (topic, partition, lo, hi + RUN_SPAN, hi, now_ms)):
                for d in run_decoder.decode(body):
                    sk = (topic, partition, d.source.offset)
                    if sk in wanted:
                        into[sk] = d

    def _write_decisions(self, decisions: dict[SourceKey, Decision]) -> None:
        groups: dict[tuple[str, int, int], list[tuple[int, Decision]]] = {}
        retention = self.decision_retention_ms
        for (topic, partition, offset), d in decisions.items():
            group = (topic, partition, d.decided_at + retention)
            found = groups.get(group)
            if found is None:
                groups[group] = [(offset, d)]
            else:
                found.append((offset, d))
        for (topic, partition, exp), items in groups.items():
            items.sort(key=_offset)
            start = 0
            for i in range(1, len(items) + 1):
                if i == len(items) or items[i][0] - items[start][0] >= RUN_SPAN:
                    self._write_run(topic, partition, exp, items[start:i])
                    start = i

    def _write_run(self, topic: str, partition: int, exp: int, items: list[tuple[int, Decision]]) -> None:
        db = self._db
        first, last = items[0][0], items[-1][0]
        # Take these positions out of any run that holds them (expired or
        # not), so each position stays in one run: the newest wins.
        held_elsewhere = db.execute(f"SELECT id, body {_RUNS_IN}", (topic, partition, first, last + RUN_SPAN, last)).fetchall()
        mine = {o for o, _ in items} if held_elsewhere else set()
        for run_id, body in held_elsewhere:
            held = run_decoder.decode(body)
            kept = [d for d in held if d.source.offset not in mine]
            if not kept:
                db.execute("DELETE FROM decision_runs WHERE id=?", (run_id,))
            elif len(kept) < len(held):
                db.execute(
                    "UPDATE decision_runs SET first=?, last=?, n=?, body=? WHERE id=?",
                    (kept[0].source.offset, kept[-1].source.offset, len(kept), encode(kept), run_id),
                )
        db.execute(
            "INSERT INTO decision_runs(topic, part, first, last, n, exp, body) VALUES (?,?,?,?,?,?,?)",
            (topic, partition, first, last, len(items), exp, encode([d for _, d in items])),
        )

    def _write(self, state: BatchWrites, now_ms: int) -> None:
        db = self._db
        marks = state.watermarks()
        db.executemany(
            "INSERT INTO watermarks VALUES (?,?,?,?) ON CONFLICT(k) DO UPDATE SET off=excluded.off WHERE excluded.off > watermarks.off",
            [(key(t, p), t, p, o) for (t, p), o in marks.items()],
        )
        if state.decisions:
            self._write_decisions(state.decisions)
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
        """The decision stored at `source`, expired or not (as before runs)."""
        offset = source.offset
        sql = f"SELECT body {_RUNS_IN} ORDER BY id DESC"
        for (body,) in self._db.execute(sql, (source.topic, source.partition, offset, offset + RUN_SPAN, offset)):
            for d in run_decoder.decode(body):
                if d.source.offset == offset:
                    return d
        return None

    def task(self, kind: str, task_id: str, now_ms: int) -> TaskEntry | None:
        row = self._db.execute("SELECT body FROM tasks WHERE k=? AND exp > ?", (key(kind, task_id), now_ms)).fetchone()
        return None if row is None else task_decoder.decode(row[0])

    def expire(self, now_ms: int) -> int:
        """Delete what has expired; returns how many entries (a run counts its decisions).

        In chunks of `EXPIRE_CHUNK` rows, each its own write transaction: a
        backlog of millions of rows would otherwise hold the file's write lock
        for seconds and stall every other guard sharing it (past its busy
        timeout, "database is locked"). Partial expiry is invisible: every
        read already ignores rows with `exp <= now`."""
        total = 0
        for table, rowkey in _EXPIRING:
            counted = table == "decision_runs"  # a run counts as its decisions
            delete = f"DELETE FROM {table} WHERE {rowkey} IN (SELECT {rowkey} FROM {table} WHERE exp <= ? LIMIT {EXPIRE_CHUNK})" + (" RETURNING n" if counted else "")
            while True:
                with transaction(self._db) as db:
                    cur = db.execute(delete, (now_ms,))
                    rows = cur.fetchall() if counted else None
                    n = len(rows) if rows is not None else cur.rowcount
                    total += sum(r[0] for r in rows) if rows is not None else n
                if n < EXPIRE_CHUNK:
                    break
        return total

    def counts(self) -> dict[str, int]:
        decisions = self._db.execute("SELECT coalesce(sum(n), 0) FROM decision_runs").fetchone()[0]
        return {"decisions": decisions} | {t: self._db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in _TABLES}

    def close(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.close()
        self._db.close()


def _trusted_from(db: sqlite3.Connection) -> int | None:
    row = db.execute("SELECT v FROM meta WHERE k='trusted_from_ms'").fetchone()
    return None if row is None else int(row[0])


def _offset(item: tuple[int, Decision]) -> int:
    return item[0]


def _source_of(k: str) -> tuple[str, int, int]:
    """Inverse of `key(topic, partition, offset)` (sqlitedb.key)."""
    n, _, rest = k.partition(":")
    topic, rest = rest[: int(n)], rest[int(n) + 1 :]
    m, _, rest = rest.partition(":")
    return topic, int(rest[: int(m)]), int(rest[int(m) + 1 :])

