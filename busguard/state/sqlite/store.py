"""SQLite store: the embedded default. Durable, WAL mode, one file.

Several guard processes on one host may share the file: every batch runs in a
`BEGIN IMMEDIATE` transaction (load, decide, write, commit), so two processes
can never both pass a nonce check before either records it. `synchronous` is
FULL by default: a committed batch survives a power loss, not just `kill -9`.

The layout, the time buckets, the decision runs and the fences: the
package's docstring (busguard/state/sqlite/__init__.py); schema upgrades:
state/sqlite/upgrade.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from busguard.protocol.records import Coordinates, Decision, TaskEntry
from busguard.state import sealrows
from busguard.state.codecs import bitmap_bytes, bitmap_int, encode, run_decoder, task_decoder
from busguard.state.keys import KeySet, Partition, SourceKey
from busguard.state.snapshot import Snapshot, WindowState, spans_of
from busguard.state.sqlite import upgrade
from busguard.state.sqlite.buckets import KINDS, Catalog, width_for
from busguard.state.sqlite.db import BACKSTOP_PAGES, Checkpointer, connect, key, reading, select_in, transaction
from busguard.state.sqlite.upgrade import CREATED, SCHEMA_VERSION
from busguard.state.store import BatchFn, rearmed
from busguard.state.writes import BatchWrites

#: A run's offsets span less than this (last - first < RUN_SPAN); the range
#: query relies on it, so changing it is a schema change.
RUN_SPAN: Final = 4096
GENESIS: Final = "genesis"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS decision_runs(id INTEGER PRIMARY KEY, topic TEXT NOT NULL, part INTEGER NOT NULL,
    first INTEGER NOT NULL, last INTEGER NOT NULL, n INTEGER NOT NULL, exp INTEGER NOT NULL, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS windows(k TEXT PRIMARY KEY, top INTEGER NOT NULL, bitmap BLOB NOT NULL, exp INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS policy(k TEXT PRIMARY KEY, body BLOB NOT NULL, exp INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS watermarks(k TEXT PRIMARY KEY, topic TEXT NOT NULL, part INTEGER NOT NULL, off INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS decision_runs_at ON decision_runs(topic, part, last, first);
CREATE INDEX IF NOT EXISTS decision_runs_exp ON decision_runs(exp);
CREATE INDEX IF NOT EXISTS windows_exp ON windows(exp);
CREATE INDEX IF NOT EXISTS policy_exp ON policy(exp);
"""
_TABLES: Final = ("windows", "policy")  # one row per entry, in one table; nonces and tasks are in buckets, decisions counted by run
#: every table `expire` deletes from, with the column that names a row (WITHOUT ROWID tables have no rowid)
_EXPIRING: Final = (("decision_runs", "id"), ("windows", "k"), ("policy", "rowid"), *((t, "rowid") for t in sealrows.TABLES))
EXPIRE_CHUNK: Final = 20_000  # rows per expiry transaction (as on PostgreSQL: state/postgres/db.py)
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
        nonce_retention_ms: int = 600_000,
        busy_timeout_ms: int = 30_000,
        genesis: bool = False,
        checkpoint_every_s: float | None = None,
    ) -> None:
        """Open the store at `path`, creating it if it has no store yet.

        `genesis=True` only with `busguard state init`: it refuses a path
        that already holds a store, since declaring "no history" over one
        would throw its fence away. `checkpoint_every_s` (the guard's
        long-lived store) moves checkpoints off the commits onto a
        `Checkpointer` thread; None keeps SQLite's auto-checkpoint.
        `nonce_retention_ms` (admission's) only sizes the nonce buckets
        (state/sqlite/buckets.py); each nonce carries its own expiry."""
        self.path = Path(path)
        self.task_retention_ms = task_retention_ms
        self.decision_retention_ms = decision_retention_ms
        self.nonce_retention_ms = nonce_retention_ms
        self._buckets = Catalog()
        self._horizon = 0  # the running batch's: rows with exp <= it read as absent
        #: per bucketed kind, the table and expiry of every key the batch being run looked up (state/sqlite/buckets.py)
        self._held: dict[str, dict[str, tuple[str, int]]] = {k: {} for k in KINDS}
        self._looked: dict[str, set[str]] = {k: set() for k in KINDS}
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
                    raise FileExistsError(
                        f"{self.path}: already holds a state store (created at {meta['created_at_ms']}); genesis is for a new one"
                    )
                else:
                    if meta.get("schema") == "1":
                        meta = upgrade.from_1(db, meta)
                    if meta.get("schema") == "2":
                        meta = upgrade.from_2(db, meta, now_ms)
                    if meta.get("schema") == "3":
                        meta = upgrade.from_3(db, meta, now_ms, self._buckets, self._width)
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

    def _width(self, kind: str) -> int:
        return width_for(self.nonce_retention_ms if kind == "nonces" else self.task_retention_ms)

    @property
    def created_at(self) -> int:
        return self._created_at

    def location(self) -> str | None:
        return str(self.path)

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
        trusted_from, expired_to = _meta_times(self._db)
        snap = Snapshot(trusted_from=trusted_from)
        horizon = now_ms if expired_to is None else max(now_ms, expired_to)
        self._horizon = horizon
        if keys.sources:
            self._load_decisions(keys.sources, now_ms, snap.decisions)
        self._buckets.refresh(self._db)
        by_key = {key(*n): n for n in keys.nonces}
        held = self._held["nonces"] = {}
        self._looked["nonces"] = set(by_key)
        for table, (k, exp) in self._buckets.locate(self._db, "nonces", list(by_key)):
            held[k] = (table, exp)
            if exp > horizon:
                snap.nonces.add(by_key[k])
        by_key = {key(*w): w for w in keys.windows}
        for k, top, bitmap in self._select("SELECT k, top, bitmap FROM windows WHERE +exp > ? AND k IN ({})", list(by_key), now_ms):
            snap.windows[by_key[k]] = WindowState(top, bitmap_int(bitmap))
        task_keys = [key(*t) for t in keys.tasks]
        held = self._held["tasks"] = {}
        self._looked["tasks"] = set(task_keys)
        for table, (k, exp, body) in self._buckets.locate(self._db, "tasks", task_keys, "k, exp, body"):
            held[k] = (table, exp)
            if exp > horizon:
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
        self._write_nonces(state)
        db.executemany(
            "INSERT OR REPLACE INTO windows VALUES (?,?,?,?)",
            [(key(*w.key), w.state.top, bitmap_bytes(w.state.bitmap), w.expires_at) for w in state.windows.values()],
        )
        self._write_tasks(state)
        db.executemany(
            "INSERT OR REPLACE INTO policy VALUES (?,?,?)", [(key(*p.key), p.value, p.expires_at) for p in state.policy.values()]
        )
        sealrows.write(db, state.heads, self.decision_retention_ms)

    def _prior(self, kind: str, keys: list[str]) -> dict[str, tuple[str, int]]:
        """Where each of `keys` is held now: what the batch's load found, and
        for a key it did not look up (a write with nothing read first) a look now."""
        held, looked = self._held[kind], self._looked[kind]
        unseen = [k for k in keys if k not in looked]
        if unseen:
            for table, (k, exp, *_) in self._buckets.locate(self._db, kind, unseen):
                held[k] = (table, exp)
        return held

    def _move(self, kind: str, rows: list[tuple[str, tuple[Any, ...]]], held: dict[str, tuple[str, int]]) -> None:
        """Write each (table, row), taking the key out of the table that held it before, if another."""
        db = self._db
        gone: dict[str, list[tuple[str]]] = {}
        into: dict[str, list[tuple[Any, ...]]] = {}
        for table, row in rows:
            prior = held.get(row[0])
            if prior is not None and prior[0] != table:
                gone.setdefault(prior[0], []).append((row[0],))
            into.setdefault(table, []).append(row)
        for table, ks in gone.items():
            db.executemany(f"DELETE FROM {table} WHERE k=?", ks)
        for table, written in into.items():
            db.executemany(f"INSERT OR REPLACE INTO {table} VALUES ({','.join('?' * len(written[0]))})", written)

    def _write_nonces(self, state: BatchWrites) -> None:
        if not state.nonces:
            return
        width = self._width("nonces")
        rows = [(key(*n.key), n.expires_at) for n in state.nonces.values()]
        held = self._prior("nonces", [r[0] for r in rows])
        table = self._tables_for("nonces", width)
        self._move("nonces", [(table(r[1]), r) for r in rows], held)

    def _tables_for(self, kind: str, width: int) -> Callable[[int], str]:
        """`Catalog.table_for` for one batch's rows of `kind`, once per
        distinct expiry (a batch's rows share one: its `now` plus the
        retention), not once per row."""
        seen: dict[int, str] = {}
        db, table_for = self._db, self._buckets.table_for

        def table(exp: int) -> str:
            name = seen.get(exp)
            if name is None:
                name = seen[exp] = table_for(db, kind, exp, width)
            return name

        return table

    def _write_tasks(self, state: BatchWrites) -> None:
        """Insert-only, except over an expired row: the first admission stays the witness."""
        if not state.tasks:
            return
        width, retention, horizon = self._width("tasks"), self.task_retention_ms, self._horizon
        keyed = [(key(t.kind, t.task_id), t) for t in state.tasks.values()]
        held = self._prior("tasks", [k for k, _ in keyed])
        table = self._tables_for("tasks", width)
        rows = []
        for k, t in keyed:
            prior = held.get(k)
            if prior is not None and prior[1] > horizon:
                continue
            exp = t.admitted_at + retention
            rows.append((table(exp), (k, encode(t), exp)))
        self._move("tasks", rows, held)

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
        with reading(self._db) as db:
            expired_to = _meta_times(db)[1]
            horizon = now_ms if expired_to is None else max(now_ms, expired_to)
            self._buckets.refresh(db)
            for _table, (exp, body) in self._buckets.locate(db, "tasks", [key(kind, task_id)], "exp, body"):
                if exp > horizon:
                    return task_decoder.decode(body)
        return None

    def expire(self, now_ms: int) -> int:
        """Delete what has expired; returns how many entries (a run counts its decisions).

        In chunks of `EXPIRE_CHUNK` rows, each its own write transaction: a
        backlog of millions of rows would otherwise hold the file's write lock
        for seconds and stall every other guard sharing it (past its busy
        timeout, "database is locked"). Partial expiry is invisible: every
        read already ignores rows with `exp <= now`.

        Nonces and tasks (state/sqlite/buckets.py) are not deleted row by row: each
        table whose bucket has passed is dropped, one per transaction, and
        the rows still in live tables that expire by `now_ms` are counted
        and left; `expired_to_ms` in meta records the pass, and from then
        on every read takes `max(now, expired_to_ms)` as its horizon, so
        those rows read as absent whatever a reader's clock says, as if
        deleted."""
        total = 0
        while True:
            with transaction(self._db) as db:
                before = _meta_times(db)[1] or 0
                self._buckets.refresh(db)
                passed = [(kind, b) for kind in KINDS for b in self._buckets.passed(kind, now_ms)]
                if not passed:
                    for kind in KINDS:
                        total += self._buckets.expiring(db, kind, before, now_ms)
                    if now_ms > before:
                        db.execute("INSERT OR REPLACE INTO meta VALUES('expired_to_ms', ?)", (str(now_ms),))
                    break
                kind, bucket = passed[0]
                total += self._buckets.drop(db, kind, bucket, before)
        for table, rowkey in _EXPIRING:
            counted = table == "decision_runs"  # a run counts as its decisions
            delete = f"DELETE FROM {table} WHERE {rowkey} IN (SELECT {rowkey} FROM {table} WHERE exp <= ? LIMIT {EXPIRE_CHUNK})" + (
                " RETURNING n" if counted else ""
            )
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
        """Entries held, as if every expiry pass had deleted what it expired
        (a nonce or task row past `expired_to_ms` waits for its table's drop)."""
        with reading(self._db) as db:
            decisions = db.execute("SELECT coalesce(sum(n), 0) FROM decision_runs").fetchone()[0]
            expired_to = _meta_times(db)[1]
            self._buckets.refresh(db)
            horizon = -1 if expired_to is None else expired_to
            buckets = {kind: self._buckets.count(db, kind, horizon) for kind in KINDS}
            rest = {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in _TABLES}
        return {
            "decisions": decisions,
            "nonces": buckets["nonces"],
            "windows": rest["windows"],
            "tasks": buckets["tasks"],
            "policy": rest["policy"],
        }

    def close(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.close()
        self._db.close()


def _trusted_from(db: sqlite3.Connection) -> int | None:
    row = db.execute("SELECT v FROM meta WHERE k='trusted_from_ms'").fetchone()
    return None if row is None else int(row[0])


def _meta_times(db: sqlite3.Connection) -> tuple[int | None, int | None]:
    """(trusted_from_ms, expired_to_ms), one read: the fence, and the last expiry pass's `now`."""
    got = dict(db.execute("SELECT k, v FROM meta WHERE k IN ('trusted_from_ms', 'expired_to_ms')").fetchall())
    t, e = got.get("trusted_from_ms"), got.get("expired_to_ms")
    return (None if t is None else int(t)), (None if e is None else int(e))


def _offset(item: tuple[int, Decision]) -> int:
    return item[0]
