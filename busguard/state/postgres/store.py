"""PostgreSQL store: one shared state for guards on many hosts.

The same contract as the SQLite store (the `StateStore` protocol, state/store.py): a batch loads the rows
for its keys, decides, and writes, in one transaction; rows are the same
msgpack-encoded Structs, so a decision read back re-encodes to the bytes
first emitted. SQL and connection handling live in state/postgres/db.py.

Why two guards can never both pass one check, why READ COMMITTED and not
SERIALIZABLE, why no deadlocks, expiry and the fences: the package's
docstring (busguard/state/postgres/__init__.py).
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
