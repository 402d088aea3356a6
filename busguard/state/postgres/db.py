"""PostgreSQL plumbing for the state stores: one connection, retries, redaction.

Kept apart from the store contract (state/postgres/store.py) the way state/sqlite/db.py is
kept apart from sqlite.py, so the contract glue can change without touching
the SQL session handling.

Two kinds of failure are retried, both by running the whole transaction again
(the caller's body must therefore be a pure function of what it reads):

- the server is unreachable, restarting, or cut the connection
  (`OperationalError`, admin shutdown, "cannot connect now"): reconnect with
  backoff for up to `retry_s`, then raise `StateUnavailable`. A COMMIT whose
  answer was lost is retried too; the retry reads what the first attempt
  committed, if it did, so nothing is judged twice differently (the guard
  re-emits a decision it finds for the same record).
- a lost race (`Conflict`, raised by the caller when a conditional write
  found a row another guard wrote after this transaction read it; also
  serialization failures and deadlocks, which this scheme should never
  produce but which are safe to retry): retried at once, up to a bound.

Secrets: a DSN may carry a password (`postgresql://u:secret@h/db` or
`password=secret`). `redact` replaces it in anything that is logged or put in
an error, and `StateUnavailable` messages go through it too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

import structlog

from busguard.state.redact import redact, scrub
from busguard.state.store import StateUnavailable

if TYPE_CHECKING:
    import psycopg

    from busguard.state.snapshot import Snapshot, StoredHead

log = structlog.get_logger("busguard.state.postgres.store")

T = TypeVar("T")

MAX_CONFLICT_RETRIES: Final = 100


class Conflict(Exception):
    """A conditional write lost a race: rerun the transaction on fresh reads."""


def _transient(exc: BaseException) -> bool:
    """The server went away or is not accepting work yet: worth reconnecting."""
    import psycopg
    from psycopg import errors

    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return True
    return isinstance(exc, errors.AdminShutdown | errors.CannotConnectNow | errors.CrashShutdown | errors.ConnectionException)


def _retryable_race(exc: BaseException) -> bool:
    from psycopg import errors

    return isinstance(exc, Conflict | errors.SerializationFailure | errors.DeadlockDetected)


class Session:
    """One connection, used by one thread at a time, reopened after failures.

    The guard calls its store from worker threads; a lock keeps two calls
    from interleaving statements of two transactions on the connection."""

    def __init__(
        self,
        dsn: str,
        *,
        retry_s: float = 120.0,
        connect_timeout_s: int = 10,
        application_name: str = "busguard",
        options: str | None = None,
    ) -> None:
        """`options` is libpq's (server settings for every connection, e.g. the search_path)."""
        self.dsn = dsn
        self.options = options
        self.retry_s = retry_s
        self.connect_timeout_s = connect_timeout_s
        self.application_name = application_name
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self.reconnects = 0
        self.conflicts = 0
        #: +1 on every new connection: callers recheck what a reconnect may have changed
        self.generation = 0

    @property
    def target(self) -> str:
        return redact(self.dsn)

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        import psycopg
        from psycopg.conninfo import make_conninfo

        conninfo = self.dsn if self.options is None else make_conninfo(self.dsn, options=self.options)
        conn = psycopg.connect(conninfo, connect_timeout=self.connect_timeout_s, application_name=self.application_name, autocommit=False)
        # READ COMMITTED is what the conflict checks in state/postgres/store.py are
        # written for; set it explicitly so a server default cannot change it.
        conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
        return conn

    def run(self, body: Callable[[psycopg.Cursor[tuple[Any, ...]]], T], *, what: str) -> T:
        """Run `body` in one transaction, retrying as the module docstring says."""
        with self._lock:
            deadline: float | None = None
            delay = 0.05
            races = 0
            while True:
                try:
                    if self._conn is None or self._conn.closed:
                        self._conn = self._connect()
                        self.generation += 1
                    with self._conn.transaction(), self._conn.cursor() as cur:
                        return body(cur)
                except BaseException as exc:
                    if _retryable_race(exc):
                        races += 1
                        self.conflicts += 1
                        if races > MAX_CONFLICT_RETRIES:
                            raise StateUnavailable(
                                f"{what}: lost {races} races in a row on {self.target}", what=what, error=f"lost {races} races in a row"
                            ) from None
                        continue
                    if not _transient(exc):
                        raise
                    self._drop()
                    now = time.monotonic()
                    if deadline is None:
                        deadline = now + self.retry_s
                    message = scrub(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__, self.dsn)
                    if now >= deadline:
                        raise StateUnavailable(
                            f"{what}: PostgreSQL at {self.target} unreachable for {self.retry_s:g} s: {message}", what=what, error=message
                        ) from None
                    log.warning(
                        "state database unavailable; retrying",
                        target=self.target,
                        operation=what,
                        error=message,
                        retry_in_s=round(delay, 3),
                    )
                    time.sleep(min(delay, max(0.0, deadline - now)))
                    delay = min(delay * 2, 2.0)
                    self.reconnects += 1

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None

    def close(self) -> None:
        with self._lock:
            self._drop()


# --- the guard store's schema and statements (state/postgres/store.py) -------------
#
# Every key is one bytea column, state/sqlite/db.py key() in UTF-8 (bytea, since its
# separator and a task id may hold NUL, which text cannot), so a batch's lookups
# are `k = ANY(%s)` index scans, one statement per table. Conditional writes
# (`ON CONFLICT … DO UPDATE … WHERE … RETURNING k`) are how a transaction
# learns that another guard wrote a row after it read it: the rows it meant
# to write come back, or it raises Conflict (state/postgres/store.py explains why
# that is enough). Arrays go in binary (`%b`): sent as text, a batch's bytea
# rows cost twice the bytes and the hex decoding, measured 1.7x slower.

SCHEMA_VERSION: Final = 1

DDL: Final = (
    "CREATE TABLE IF NOT EXISTS meta(k text PRIMARY KEY, v text NOT NULL)",
    "CREATE TABLE IF NOT EXISTS decisions(k bytea PRIMARY KEY, did text NOT NULL, body bytea NOT NULL, exp bigint NOT NULL)",
    "CREATE TABLE IF NOT EXISTS nonces(k bytea PRIMARY KEY, exp bigint NOT NULL)",
    "CREATE TABLE IF NOT EXISTS windows(k bytea PRIMARY KEY, top bigint NOT NULL, bitmap bytea NOT NULL, ver bigint NOT NULL, exp bigint NOT NULL)",
    "CREATE TABLE IF NOT EXISTS tasks(k bytea PRIMARY KEY, body bytea NOT NULL, exp bigint NOT NULL)",
    "CREATE TABLE IF NOT EXISTS policy(k bytea PRIMARY KEY, body bytea NOT NULL, exp bigint NOT NULL)",
    "CREATE TABLE IF NOT EXISTS watermarks(topic text NOT NULL, part integer NOT NULL, off bigint NOT NULL, PRIMARY KEY (topic, part))",
    "CREATE INDEX IF NOT EXISTS decisions_exp ON decisions(exp)",
    "CREATE INDEX IF NOT EXISTS nonces_exp ON nonces(exp)",
    "CREATE INDEX IF NOT EXISTS windows_exp ON windows(exp)",
    "CREATE INDEX IF NOT EXISTS tasks_exp ON tasks(exp)",
    "CREATE INDEX IF NOT EXISTS policy_exp ON policy(exp)",
    # batch seals (state/sealrows.py has the SQLite twin and the why)
    "CREATE TABLE IF NOT EXISTS seal_heads(chain text NOT NULL, seq bigint NOT NULL, head bytea NOT NULL, seal bytea NOT NULL,"
    " leaves bytea NOT NULL, spans bytea NOT NULL, sealed_at bigint NOT NULL, exp bigint NOT NULL, PRIMARY KEY (chain, seq))",
    "CREATE TABLE IF NOT EXISTS seal_spans(topic text NOT NULL, part integer NOT NULL, lo bigint NOT NULL, hi bigint NOT NULL,"
    " chain text NOT NULL, seq bigint NOT NULL, exp bigint NOT NULL)",
    "CREATE INDEX IF NOT EXISTS seal_spans_at ON seal_spans(topic, part, hi)",
    "CREATE INDEX IF NOT EXISTS seal_heads_exp ON seal_heads(exp)",
    "CREATE INDEX IF NOT EXISTS seal_spans_exp ON seal_spans(exp)",
)
#: expired like the others, but not counted among the admission rows (`counts`)
SEAL_TABLES: Final = ("seal_heads", "seal_spans")
EXPIRING: Final = ("decisions", "nonces", "windows", "tasks", "policy")
EXPIRE_CHUNK: Final = 20_000  # rows per DELETE: short transactions, short row locks

LOAD_TRUSTED_FROM: Final = "SELECT v FROM meta WHERE k = 'trusted_from_ms'"
LOAD_DECISIONS: Final = "SELECT body FROM decisions WHERE k = ANY(%b::bytea[]) AND exp > %s"
LOAD_NONCES: Final = "SELECT k FROM nonces WHERE k = ANY(%b::bytea[]) AND exp > %s"
LOAD_WINDOWS: Final = "SELECT k, top, bitmap, ver FROM windows WHERE k = ANY(%b::bytea[]) AND exp > %s"
LOAD_TASKS: Final = "SELECT body FROM tasks WHERE k = ANY(%b::bytea[]) AND exp > %s"
LOAD_POLICY: Final = "SELECT k, body FROM policy WHERE k = ANY(%b::bytea[]) AND exp > %s"
# Policy rows are read-modify-write and locked, not conditionally written:
# state/postgres/locks.py.

# Statements run in this table order with keys sorted, so two transactions
# that both wait on each other's uncommitted rows cannot happen (no deadlock).
WRITE_DECISIONS: Final = """
INSERT INTO decisions(k, did, body, exp) SELECT * FROM unnest(%b::bytea[], %b::text[], %b::bytea[], %b::bigint[])
ON CONFLICT (k) DO UPDATE SET did = excluded.did, body = excluded.body, exp = excluded.exp WHERE decisions.exp <= %s
RETURNING k"""
REPLACE_DECISIONS: Final = """
UPDATE decisions d SET did = v.did, body = v.body, exp = v.exp
FROM unnest(%b::bytea[], %b::text[], %b::bytea[], %b::bigint[], %b::text[]) AS v(k, did, body, exp, old)
WHERE d.k = v.k AND d.did = v.old
RETURNING d.k"""
WRITE_NONCES: Final = """
INSERT INTO nonces(k, exp) SELECT * FROM unnest(%b::bytea[], %b::bigint[])
ON CONFLICT (k) DO UPDATE SET exp = excluded.exp WHERE nonces.exp <= %s
RETURNING k"""
WRITE_WINDOWS: Final = """
INSERT INTO windows(k, top, bitmap, ver, exp) SELECT * FROM unnest(%b::bytea[], %b::bigint[], %b::bytea[], %b::bigint[], %b::bigint[])
ON CONFLICT (k) DO UPDATE SET top = excluded.top, bitmap = excluded.bitmap, ver = excluded.ver, exp = excluded.exp
WHERE windows.exp <= %s OR windows.ver = excluded.ver - 1
RETURNING k"""
WRITE_TASKS: Final = """
INSERT INTO tasks(k, body, exp) SELECT * FROM unnest(%b::bytea[], %b::bytea[], %b::bigint[])
ON CONFLICT (k) DO UPDATE SET body = excluded.body, exp = excluded.exp WHERE tasks.exp <= %s
RETURNING k"""
WRITE_POLICY: Final = """
INSERT INTO policy(k, body, exp) SELECT * FROM unnest(%b::bytea[], %b::bytea[], %b::bigint[])
ON CONFLICT (k) DO UPDATE SET body = excluded.body, exp = excluded.exp"""
# Rows a batch writes without having read them (the contract's last-write-wins
# for keys outside its KeySet; admission always reads what it writes).
UPSERT_DECISIONS: Final = """
INSERT INTO decisions(k, did, body, exp) SELECT * FROM unnest(%b::bytea[], %b::text[], %b::bytea[], %b::bigint[])
ON CONFLICT (k) DO UPDATE SET did = excluded.did, body = excluded.body, exp = excluded.exp"""
UPSERT_NONCES: Final = """
INSERT INTO nonces(k, exp) SELECT * FROM unnest(%b::bytea[], %b::bigint[]) ON CONFLICT (k) DO UPDATE SET exp = excluded.exp"""
UPSERT_WINDOWS: Final = """
INSERT INTO windows(k, top, bitmap, ver, exp) SELECT * FROM unnest(%b::bytea[], %b::bigint[], %b::bytea[], %b::bigint[], %b::bigint[])
ON CONFLICT (k) DO UPDATE SET top = excluded.top, bitmap = excluded.bitmap, ver = windows.ver + 1, exp = excluded.exp"""
INSERT_TASKS: Final = """
INSERT INTO tasks(k, body, exp) SELECT * FROM unnest(%b::bytea[], %b::bytea[], %b::bigint[])
ON CONFLICT (k) DO UPDATE SET body = excluded.body, exp = excluded.exp WHERE tasks.exp <= %s"""
WRITE_WATERMARKS: Final = """
INSERT INTO watermarks(topic, part, off) SELECT * FROM unnest(%b::text[], %b::integer[], %b::bigint[])
ON CONFLICT (topic, part) DO UPDATE SET off = excluded.off WHERE excluded.off > watermarks.off"""


def lock_id(raw: bytes) -> int:
    """A row key as an advisory lock id (a collision only serialises two batches)."""
    import hashlib

    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big", signed=True)


def init_lock_id(schema: str) -> int:
    """The advisory lock that serialises schema creation among guards starting together."""
    import hashlib

    return int.from_bytes(hashlib.blake2b(f"busguard.state:{schema}".encode(), digest_size=8).digest(), "big", signed=True)


def returned(cur: psycopg.Cursor[tuple[Any, ...]], sql: str, params: tuple[Any, ...], expected: int, what: str) -> None:
    """Run a conditional write; Conflict unless every row it was given was written."""
    cur.execute(sql, params)
    got = cur.rowcount
    if got != expected:
        raise Conflict(f"{what}: wrote {got} of {expected} rows; another guard wrote the rest after this batch read them")


# --- batch seals -------------------------------------------------------------
#
# A head is inserted once per (chain, seq): if another writer took that seq
# after this batch read the tip (only possible when two processes share a
# chain id), the insert writes nothing, `returned` raises Conflict and the
# batch reruns on the new tip, like every other conditional write here.

LOAD_TIP: Final = "SELECT seq, head FROM seal_heads WHERE chain = %s ORDER BY seq DESC LIMIT 1"
LOAD_SPANS: Final = "SELECT DISTINCT chain, seq FROM seal_spans WHERE topic = %s AND part = %s AND hi >= %s AND lo <= %s AND exp > %s"
LOAD_HEAD: Final = "SELECT head, seal, leaves, spans, sealed_at FROM seal_heads WHERE chain = %s AND seq = %s AND exp > %s"
WRITE_HEAD: Final = "INSERT INTO seal_heads VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (chain, seq) DO NOTHING"
WRITE_SPANS: Final = (
    "INSERT INTO seal_spans SELECT * FROM unnest("
    "%s::text[], %s::integer[], %s::bigint[], %s::bigint[], %s::text[], %s::bigint[], %s::bigint[])"
)


def load_seals(cur: psycopg.Cursor[tuple[Any, ...]], snap: Snapshot, chain: str | None, now_ms: int) -> None:
    """The chain's tip and the heads covering the snapshot's decisions, into `snap`."""
    from busguard.state.sealrows import decode_spans
    from busguard.state.snapshot import StoredHead, spans_of

    if chain is not None:
        cur.execute(LOAD_TIP, (chain,))
        row = cur.fetchone()
        snap.tip = None if row is None else (int(row[0]), bytes(row[1]))
    if not snap.decisions:
        return
    wanted: set[tuple[str, int]] = set()
    for topic, part, lo, hi in spans_of(snap.decisions):
        cur.execute(LOAD_SPANS, (topic, part, lo, hi, now_ms))
        wanted.update((str(c), int(q)) for c, q in cur.fetchall())
    for c, seq in sorted(wanted):
        cur.execute(LOAD_HEAD, (c, seq, now_ms))
        found = cur.fetchone()
        if found is not None:
            head = StoredHead(c, seq, bytes(found[0]), bytes(found[1]), bytes(found[2]), decode_spans(bytes(found[3])), int(found[4]))
            if any(map(head.covers, snap.decisions)):
                snap.heads.append(head)


def write_seals(cur: psycopg.Cursor[tuple[Any, ...]], heads: Sequence[StoredHead], retention_ms: int) -> None:
    from busguard.state.sealrows import encode_spans

    for h in heads:
        exp = h.sealed_at + retention_ms
        returned(
            cur,
            WRITE_HEAD,
            (h.chain, h.seq, h.head, h.seal, h.leaves, encode_spans(h.spans), h.sealed_at, exp),
            1,
            f"batch seal {h.chain}/{h.seq}",
        )
        cols = list(zip(*[(t, p, lo, hi, h.chain, h.seq, exp) for t, p, lo, hi in h.spans], strict=True))
        if cols:
            cur.execute(WRITE_SPANS, tuple(list(c) for c in cols))
