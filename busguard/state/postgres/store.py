"""PostgreSQL store: one shared state for guards on many hosts.

The same contract as the SQLite store (the `StateStore` protocol, state/store.py): a batch loads the rows
for its keys, decides, and writes, in one transaction; rows are the same
msgpack-encoded Structs, so a decision read back re-encodes to the bytes
first emitted. SQL and connection handling live in state/postgres/db.py.

Why two guards can never both pass one check (the isolation argument).

Transactions run at READ COMMITTED, and take no locks while reading: each
table is read with one `k = ANY(…)` statement. What makes check-and-record
atomic is that every write is conditional on the row still being what the
batch read, and a write whose condition fails aborts the whole batch, which
then runs again on fresh reads (the decision function is pure):

- a key the batch read as absent (a decision position, a nonce, a task, a
  session window) is written with `INSERT … ON CONFLICT (k) DO UPDATE … WHERE
  <the existing row is expired> RETURNING k`. If another guard inserted that
  key after our read, committed or not, PostgreSQL makes our INSERT wait for
  its transaction and then sees its row; the row is not expired, nothing is
  written, fewer rows come back than were sent, and the batch is retried. An
  INSERT on a unique key cannot miss an uncommitted concurrent insert: that
  is what the unique index guarantees at any isolation level.
- a session window the batch read as present is written only if its version
  (`ver`, +1 on every write) is still the one read; a decided position found
  holding another record is replaced only if its decision id is still the
  one read.
- a row the batch read as present and does not write is one whose truth
  cannot be undone by another guard: nonces, tasks and decisions are
  insert-only until they expire (a task's first admission stays its witness),
  and a window only moves forward, so a sequence it showed as seen or too old
  stays refused. A decision based on it stays right after any later commit.
- conversely, every absence a decision relies on is written by it: a record
  that passes the nonce check records its nonce, one that passes the window
  records the window, an admission records its task, and every input records
  its decision. (Records refused before those checks — bad signature, store
  warming, a policy objection — rely on no absence.)

Policy rows (busguard.policies: a kind's own state, e.g. an award's call
for bids) break the last point: a policy may read a row it does not write
(a settlement reads the award) and overwrite rows whatever they held. So a
batch takes transaction-scoped advisory locks covering the policy keys it
reads, before reading them, and another batch touching one of those keys
waits until it commits: two-phase locking for policy rows, conditional
writes for the rest. How many locks that is does not depend on the input:
at most `max_policy_locks` per batch (state/postgres/locks.py has the scheme and
the argument), and only records whose signature verified have policy keys
at all (admission/batch.py `check_batch`: a forged record adds no key).

So each committed batch is equivalent to running it alone at its commit
point, which is the guarantee SQLite's `BEGIN IMMEDIATE` gives on one host.
Two guards that receive copies of one receipt at the same moment both read
its nonce as absent; both try to insert it; the second waits for the first,
finds the row, and reruns its batch, which now reads the nonce (or the task)
and refuses the copy. tests/unit/test_state_postgres.py shows it with two
processes released by a barrier, and that it fails with the conditions
removed.

Why not SERIALIZABLE: it would be correct without this argument, but its
predicate locks for a 500-key batch are promoted to relation locks, after
which every pair of concurrent batches conflicts and aborts; at READ
COMMITTED only batches that really touch the same key wait or retry. Why not
advisory locks on every key: one lock-table slot per key per batch
(max_locks_per_transaction × max_connections is 6400 by default, a batch has
up to ~1500 keys), and an operator would have to size it; policy rows use
them within a fixed bound (above).

No deadlocks: a batch writes its tables in a fixed order (decisions, nonces,
windows, tasks, watermarks) with its keys sorted, so two batches never wait
on each other's rows in opposite orders. (A replaced decision is an UPDATE
outside that order; it is rare, and a deadlock is retried like a conflict.)

Expiry: rows carry their expiry time and a row at or before `now_ms` reads as
absent; `expire` deletes them in chunks of pgsql.EXPIRE_CHUNK rows by the
`exp` index, one short transaction each. Time-partitioned tables (drop a
whole partition) were considered and rejected: PostgreSQL cannot enforce a
unique key across partitions unless the key includes the partition column,
and the unique key on `k` is exactly what the conflict checks above rely on.

The fences are the SQLite store's: `meta` holds created_at_ms, origin and
trusted_from_ms (read in every batch's transaction, so a re-arm by any guard
fences every guard from its next batch); `watermarks` holds per input
partition the highest offset decided, written in the batch's transaction and
never expired.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import structlog

from busguard.protocol.records import Coordinates, Decision, TaskEntry
from busguard.state.codecs import bitmap_bytes, bitmap_int, decision_decoder, encode, task_decoder
from busguard.state.keys import KeySet, Partition, source_key
from busguard.state.postgres import db as pgsql
from busguard.state.postgres import locks as pglocks
from busguard.state.postgres.db import Session, returned
from busguard.state.snapshot import Snapshot, WindowState
from busguard.state.sqlite.db import key as text_key
from busguard.state.store import BatchFn, rearmed
from busguard.state.writes import BatchWrites

if TYPE_CHECKING:
    import psycopg

    Cursor = psycopg.Cursor[tuple[Any, ...]]

log = structlog.get_logger("busguard.state.postgres.store")

GENESIS: Final = "genesis"
CREATED: Final = "created"


def key(*parts: object) -> bytes:
    """state/sqlite/db.py's text key in UTF-8: bytea, since it may hold NUL (text cannot)."""
    return text_key(*parts).encode()


class PostgresStore:
    def __init__(
        self,
        dsn: str,
        *,
        now_ms: int,
        schema: str = "busguard",
        task_retention_ms: int = 7 * 86_400_000,
        decision_retention_ms: int = 7 * 86_400_000,
        retry_s: float = 120.0,
        genesis: bool = False,
        max_policy_locks: int = pglocks.DEFAULT_CAP,
    ) -> None:
        """Connect to the store in `schema` at `dsn`, creating it if it does not exist.

        `genesis=True` only with `busguard state init`: it refuses a schema
        that already holds a store (declaring "no history" over one would
        throw its fence away)."""
        import psycopg.sql

        self.schema = schema
        self.task_retention_ms = task_retention_ms
        self.decision_retention_ms = decision_retention_ms
        if max_policy_locks < 2:
            raise ValueError(f"max_policy_locks = {max_policy_locks}: at least 2 (the schema's lock and one row's)")
        self.max_policy_locks = max_policy_locks
        self._session = Session(dsn, retry_s=retry_s, options=f"-c search_path={schema}")
        self.target = self._session.target
        self._ident = psycopg.sql.Identifier(schema)
        meta, self.created = self._session.run(lambda cur: self._init(cur, now_ms, genesis), what="open state store")
        self._created_at = int(meta["created_at_ms"])
        self.origin = meta["origin"]
        #: per partition, the highest offset this process has seen committed,
        #: and the connection it last compared them on (see _check_identity)
        self._committed: dict[Partition, int] = {}
        self._checked_generation = self._session.generation

    def _init(self, cur: Cursor, now_ms: int, genesis: bool) -> tuple[dict[str, str], bool]:
        """Create the schema and tables if missing; the store's meta, and whether it was new."""
        import psycopg.sql

        cur.execute("SELECT pg_advisory_xact_lock(%s)", (pgsql.init_lock_id(self.schema),))
        cur.execute(psycopg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(self._ident))
        cur.execute(psycopg.sql.SQL("SET LOCAL search_path TO {}").format(self._ident))
        for statement in pgsql.DDL:
            cur.execute(statement)
        meta = _meta(cur)
        if "created_at_ms" in meta:
            if genesis:
                raise FileExistsError(
                    f"{self.target} schema {self.schema}: already holds a state store (created at {meta['created_at_ms']}); genesis is for a new one"
                )
            if meta.get("schema") != str(pgsql.SCHEMA_VERSION):
                raise RuntimeError(f"{self.target} schema {self.schema}: state schema {meta.get('schema')} is not {pgsql.SCHEMA_VERSION}")
            return meta, False
        meta = {"created_at_ms": str(now_ms), "schema": str(pgsql.SCHEMA_VERSION), "origin": GENESIS if genesis else CREATED}
        if not genesis:
            meta["trusted_from_ms"] = str(now_ms)
        cur.executemany("INSERT INTO meta VALUES (%s, %s)", list(meta.items()))
        return meta, True

    @property
    def created_at(self) -> int:
        return self._created_at

    def location(self) -> str | None:
        return f"{self.target} schema {self.schema}"  # target: the DSN, password redacted

    @property
    def session(self) -> Session:
        return self._session

    @property
    def trusted_from(self) -> int | None:
        return self._session.run(_trusted_from, what="read trusted_from")

    def rearm(self, now_ms: int) -> int:
        """Fence the store from `now_ms` (never earlier than it already is); durable."""

        def body(cur: Cursor) -> int:
            cur.execute("SELECT v FROM meta WHERE k = 'created_at_ms' FOR UPDATE")  # serialises re-arms
            t = rearmed(_trusted_from(cur), now_ms)
            cur.execute(
                "INSERT INTO meta VALUES ('trusted_from_ms', %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
                (str(t),),
            )
            return t

        return self._session.run(body, what="re-arm the fence")

    def partition_watermarks(self) -> dict[Partition, int]:
        def body(cur: Cursor) -> dict[Partition, int]:
            cur.execute("SELECT topic, part, off FROM watermarks")
            return {(str(t), int(p)): int(o) for t, p, o in cur.fetchall()}

        return self._session.run(body, what="read watermarks")

    def run_batch(self, keys: KeySet, now_ms: int, fn: BatchFn) -> None:
        from psycopg import errors

        def body(cur: Cursor) -> tuple[BatchWrites, int, int]:
            generation = self._session.generation
            created_at, trusted_from = self._check_identity(cur, now_ms, generation)
            snap, versions, held = self._load(cur, keys, now_ms, trusted_from)
            writes = fn(snap)
            self._write(cur, keys, snap, versions, held, writes, now_ms)
            return writes, created_at, generation

        try:
            writes, created_at, generation = self._session.run(body, what="run batch")
        except errors.UndefinedTable:
            # The schema was dropped under us: the store is lost. Recreate it,
            # fenced from now, as `busguard run` would at its next start.
            log.warning("state store tables are gone; recreating the store fenced (store_warming)", target=self.target, schema=self.schema)
            meta, _ = self._session.run(lambda cur: self._init(cur, now_ms, False), what="recreate state store")
            self._created_at, self.origin, self._committed = int(meta["created_at_ms"]), meta["origin"], {}
            return self.run_batch(keys, now_ms, fn)
        self._created_at, self._checked_generation = created_at, generation
        for p, offset in writes.watermarks().items():
            if self._committed.get(p, -1) < offset:
                self._committed[p] = offset

    def _check_identity(self, cur: Cursor, now_ms: int, generation: int) -> tuple[int, int | None]:
        """Inside the batch's transaction, before its reads: is this still the
        store this process has been writing to, holding what it committed?

        - meta gone (tables emptied): the store is lost; recreate its meta
          fenced from now (a store `busguard run` creates);
        - another creation time (the database was replaced by another store):
          re-arm the fence;
        - on a new connection (after a restart, a failover, a cut): if the
          store holds a lower watermark than this process saw committed for
          some partition, it lost committed batches (a failover to a replica
          that was behind, a restore): re-arm the fence. Other guards check
          their own commits when they reconnect, and a re-arm fences all.

        Returns the store's creation time and trusted-from time (after any re-arm)."""
        meta = _meta(cur)
        if "created_at_ms" not in meta:
            log.warning("state store was emptied; recreating it fenced (store_warming)", target=self.target, schema=self.schema)
            meta = {"created_at_ms": str(now_ms), "schema": str(pgsql.SCHEMA_VERSION), "origin": CREATED, "trusted_from_ms": str(now_ms)}
            cur.executemany("INSERT INTO meta VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v", list(meta.items()))
            self._committed = {}
            return now_ms, now_ms
        created_at = int(meta["created_at_ms"])
        why = None
        if created_at != self._created_at:
            why = f"the store was replaced (created at {created_at}, not {self._created_at})"
        elif generation != self._checked_generation and self._committed:
            cur.execute("SELECT topic, part, off FROM watermarks")
            marks = {(str(t), int(p)): int(o) for t, p, o in cur.fetchall()}
            lost = sorted(p for p, o in self._committed.items() if marks.get(p, -1) < o)
            if lost:
                why = (
                    f"it lost committed batches on {len(lost)} partition(s), e.g. {lost[0][0]}:{lost[0][1]} (a failover or restore behind)"
                )
        trusted_from = None if meta.get("trusted_from_ms") is None else int(meta["trusted_from_ms"])
        if why is not None:
            t = trusted_from = rearmed(trusted_from, now_ms)
            cur.execute("INSERT INTO meta VALUES ('trusted_from_ms', %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v", (str(t),))
            log.warning("state store fence re-armed: " + why, target=self.target, schema=self.schema, trusted_from_ms=t)
            self._committed = {}
        return created_at, trusted_from

    def _load(self, cur: Cursor, keys: KeySet, now_ms: int, trusted_from: int | None) -> tuple[Snapshot, dict[bytes, int], pglocks.Held]:
        snap = Snapshot(trusted_from=trusted_from)
        if keys.sources:
            cur.execute(pgsql.LOAD_DECISIONS, ([key(*s) for s in keys.sources], now_ms), binary=True)
            for (body,) in cur.fetchall():
                d = decision_decoder.decode(body)
                snap.decisions[source_key(d.source)] = d
        if keys.nonces:
            by_key = {key(*n): n for n in keys.nonces}
            cur.execute(pgsql.LOAD_NONCES, (list(by_key), now_ms), binary=True)
            for (k,) in cur.fetchall():
                snap.nonces.add(by_key[k])
        versions: dict[bytes, int] = {}
        if keys.windows:
            by_key = {key(*w): w for w in keys.windows}
            cur.execute(pgsql.LOAD_WINDOWS, (list(by_key), now_ms), binary=True)
            for k, top, bitmap, ver in cur.fetchall():
                snap.windows[by_key[k]] = WindowState(top, bitmap_int(bitmap))
                versions[k] = ver
        if keys.tasks:
            cur.execute(pgsql.LOAD_TASKS, ([key(*t) for t in keys.tasks], now_ms), binary=True)
            for (body,) in cur.fetchall():
                t = task_decoder.decode(body)
                snap.tasks[(t.kind, t.task_id)] = t
        held = pglocks.Held()
        if keys.policy:
            by_key = {key(*p): p for p in keys.policy}
            held = pglocks.take(cur, self.schema, held, map(pgsql.lock_id, by_key), self.max_policy_locks)
            cur.execute(pgsql.LOAD_POLICY, (list(by_key), now_ms), binary=True)
            for k, body in cur.fetchall():
                snap.policy[by_key[k]] = body
        pgsql.load_seals(cur, snap, keys.chain, now_ms)
        return snap, versions, held

    def _write(
        self, cur: Cursor, keys: KeySet, snap: Snapshot, versions: dict[bytes, int], held: pglocks.Held, writes: BatchWrites, now_ms: int
    ) -> None:
        """Conditional writes for every key the batch read (the module docstring);
        plain last-write-wins for keys it did not read (none, from admission)."""
        read_sources = set(keys.sources)
        fresh: list[tuple[bytes, str, bytes, int]] = []
        replaced: list[tuple[bytes, str, bytes, int, str]] = []
        blind: list[tuple[bytes, str, bytes, int]] = []
        for sk, d in writes.decisions.items():
            row = (key(*sk), d.decision_id, encode(d), d.decided_at + self.decision_retention_ms)
            earlier = snap.decisions.get(sk)
            if sk not in read_sources:
                blind.append(row)
            elif earlier is None:
                fresh.append(row)
            else:
                replaced.append((*row, earlier.decision_id))
        if fresh:
            fresh.sort()
            returned(cur, pgsql.WRITE_DECISIONS, (*_columns(fresh, 4), now_ms), len(fresh), "decisions")
        if replaced:
            replaced.sort()
            returned(cur, pgsql.REPLACE_DECISIONS, _columns(replaced, 5), len(replaced), "replaced decisions")
        if blind:
            cur.execute(pgsql.UPSERT_DECISIONS, _columns(sorted(blind), 4))
        nonces = sorted((key(*n.key), n.expires_at) for n in writes.nonces.values() if n.key in keys.nonces and n.key not in snap.nonces)
        if nonces:
            returned(cur, pgsql.WRITE_NONCES, (*_columns(nonces, 2), now_ms), len(nonces), "nonces")
        others = sorted((key(*n.key), n.expires_at) for n in writes.nonces.values() if n.key not in keys.nonces or n.key in snap.nonces)
        if others:
            cur.execute(pgsql.UPSERT_NONCES, _columns(others, 2))
        windows: list[tuple[bytes, int, bytes, int, int]] = []
        loose: list[tuple[bytes, int, bytes, int, int]] = []
        for w in writes.windows.values():
            k = key(*w.key)
            wrow = (k, w.state.top, bitmap_bytes(w.state.bitmap), versions.get(k, 0) + 1, w.expires_at)
            (windows if w.key in keys.windows else loose).append(wrow)
        if windows:
            windows.sort()
            returned(cur, pgsql.WRITE_WINDOWS, (*_columns(windows, 5), now_ms), len(windows), "windows")
        if loose:
            cur.execute(pgsql.UPSERT_WINDOWS, _columns(sorted(loose), 5))
        # Insert-only, except over an expired row: the first admission stays the witness.
        tasks: list[tuple[bytes, bytes, int]] = []
        unread: list[tuple[bytes, bytes, int]] = []
        for tk, t in writes.tasks.items():
            if tk in snap.tasks:
                continue  # present when read, and insert-only: nothing to write
            trow = (key(t.kind, t.task_id), encode(t), t.admitted_at + self.task_retention_ms)
            (tasks if tk in keys.tasks else unread).append(trow)
        if tasks:
            tasks.sort()
            returned(cur, pgsql.WRITE_TASKS, (*_columns(tasks, 3), now_ms), len(tasks), "tasks")
        if unread:
            cur.execute(pgsql.INSERT_TASKS, (*_columns(sorted(unread), 3), now_ms))
        if writes.policy:
            # locked when read (_load); a key written unread is locked here, within the same bound
            rows = sorted((key(*p.key), p.value, p.expires_at) for p in writes.policy.values())
            late = [pgsql.lock_id(key(*p.key)) for p in writes.policy.values() if p.key not in keys.policy]
            if late:
                pglocks.take(cur, self.schema, held, late, self.max_policy_locks)
            cur.execute(pgsql.WRITE_POLICY, _columns(rows, 3))
        marks = writes.watermarks()
        if marks:
            cur.execute(pgsql.WRITE_WATERMARKS, _columns(sorted((t, p, o) for (t, p), o in marks.items()), 3))
        pgsql.write_seals(cur, writes.heads, self.decision_retention_ms)

    def decision_at(self, source: Coordinates) -> Decision | None:
        def body(cur: Cursor) -> Decision | None:
            cur.execute("SELECT body FROM decisions WHERE k = %s", (key(*source_key(source)),))
            row = cur.fetchone()
            return None if row is None else decision_decoder.decode(row[0])

        return self._session.run(body, what="read a decision")

    def task(self, kind: str, task_id: str, now_ms: int) -> TaskEntry | None:
        def body(cur: Cursor) -> TaskEntry | None:
            cur.execute("SELECT body FROM tasks WHERE k = %s AND exp > %s", (key(kind, task_id), now_ms))
            row = cur.fetchone()
            return None if row is None else task_decoder.decode(row[0])

        return self._session.run(body, what="read a task")

    def expire(self, now_ms: int) -> int:
        total = 0
        for table in (*pgsql.EXPIRING, *pgsql.SEAL_TABLES):
            while True:

                def body(cur: Cursor, table: str = table) -> int:
                    cur.execute(
                        f"DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {table} WHERE exp <= %s LIMIT {pgsql.EXPIRE_CHUNK}))",
                        (now_ms,),
                    )
                    return cur.rowcount

                n = self._session.run(body, what=f"expire {table}")
                total += n
                if n < pgsql.EXPIRE_CHUNK:
                    break
        return total

    def counts(self) -> dict[str, int]:
        def body(cur: Cursor) -> dict[str, int]:
            out = {}
            for t in pgsql.EXPIRING:
                cur.execute(f"SELECT count(*) FROM {t}")
                row = cur.fetchone()
                out[t] = int(row[0]) if row is not None else 0
            return out

        return self._session.run(body, what="count rows")

    def close(self) -> None:
        self._session.close()


def store_exists(dsn: str, *, schema: str, retry_s: float = 120.0) -> bool:
    """Whether `schema` at `dsn` holds a state store, creating nothing.

    Opening a PostgresStore creates a missing one (fenced): right for a guard,
    wrong for a command that only looks (`busguard state show`), which would
    otherwise leave a store behind that the next guard takes as a lost one's
    replacement (docs/operations.md, store warming)."""
    session = Session(dsn, retry_s=retry_s)

    def body(cur: Cursor) -> bool:
        cur.execute("SELECT to_regclass(format('%%I.meta', %s::text)) IS NOT NULL", (schema,))
        row = cur.fetchone()
        if row is None or not row[0]:
            return False
        import psycopg.sql

        cur.execute(psycopg.sql.SQL("SELECT 1 FROM {}.meta WHERE k = 'created_at_ms'").format(psycopg.sql.Identifier(schema)))
        return cur.fetchone() is not None

    try:
        return session.run(body, what="look for the state store")
    finally:
        session.close()


def _meta(cur: Cursor) -> dict[str, str]:
    cur.execute("SELECT k, v FROM meta")
    return {str(k): str(v) for k, v in cur.fetchall()}


def _trusted_from(cur: Cursor) -> int | None:
    cur.execute(pgsql.LOAD_TRUSTED_FROM)
    row = cur.fetchone()
    return None if row is None else int(row[0])


def _columns(rows: Sequence[tuple[Any, ...]], width: int) -> tuple[list[Any], ...]:
    """Row tuples as `width` parallel arrays, the form `unnest(…)` takes."""
    if not rows:
        return tuple([] for _ in range(width))
    return tuple(list(c) for c in zip(*rows, strict=True))
