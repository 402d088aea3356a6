"""A durable done-set: each admitted decision is acted on once, across crashes.

Why: busguard proves a task was *admitted* once; a receiver that acts and
then crashes before recording it (seed 000) acts twice unless the record of
"done" commits together with the effect. `SqliteDoneSet.claim` opens one
write transaction on the agent's own SQLite database: it marks the decision
id done and hands back the connection, so the agent's own effect (a row in
the same database) and the done-mark commit atomically, or neither does.
A re-delivered or re-emitted forward (same decision id) is then refused.

Replies (an ack, the next handoff) are Kafka sends and cannot commit with
the effect, so they are *staged*: `tx.stage(topic, key, value, headers)`
stores the signed bytes in the same transaction (the outbox), and the
agent sends them after the commit and then drops them (`outbox`, `sent`).
A crash between the commit and the send re-sends the very same bytes,
which busguard admits once and records as an `exact_duplicate`, never as
a second witness (the seed-000 incident was a second, re-signed ack).

Where the guarantee ends: any other effect outside that transaction (an
HTTP call) cannot commit with it. For those, pass `idempotency_token` of
the decision id to the other system, which must deduplicate on it.

    >>> done = SqliteDoneSet(":memory:")
    >>> with done.claim("d-1") as tx:
    ...     tx.claimed
    True
    >>> with done.claim("d-1") as tx:
    ...     tx.claimed
    False
    >>> done.is_done("d-1"), done.is_done("d-2")
    (True, False)
    >>> idempotency_token("d-1")[:16]
    'a5698ebf8738cd42'

The horizon. `forget_before(t)` drops the marks older than `t` and, in the
same transaction, records `t` as the done-set's horizon (never moved back):
the time before which it no longer remembers what it did. A claim given the
decision's `decided_at` (the attestation's, which a re-emission keeps)
refuses a decision decided before the horizon (`tx.before_horizon`), since
its mark may be among those forgotten, and anyone who can write the topic
can put an exact copy of an old forward back on it. A mark is stamped at
the later of the agent's clock and `decided_at`, so every forgotten mark is
of a decision decided before the horizon, whatever the two clocks say.

    >>> with done.claim("d-3", now_ms=100, decided_at=90) as tx:
    ...     tx.claimed
    True
    >>> done.forget_before(200), done.horizon_ms()
    (1, 200)
    >>> with done.claim("d-3", now_ms=300, decided_at=90) as tx:
    ...     tx.claimed, tx.before_horizon
    (False, True)

Bound: one row per decision id handled (about 100 bytes), plus one row for
the horizon; `forget_before` drops rows older than a time the caller picks.
The outbox holds at most `MAX_STAGED` replies per claim, and only until sent.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Final, Generic, NamedTuple, Protocol, TypeVar

import msgspec

if TYPE_CHECKING:  # imported when a done-set opens: the pure core (busguard/__init__) loads no sqlite3
    import sqlite3

IDEMPOTENCY_CONTEXT: Final = b"busguard/sdk/idempotency/v1\x00"
MAX_DECISION_ID: Final = 256
MAX_STAGED: Final = 16

_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS busguard_done (decision_id TEXT PRIMARY KEY, done_at_ms INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS busguard_outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, decision_id TEXT NOT NULL,"
    " topic TEXT NOT NULL, key BLOB, value BLOB NOT NULL, headers BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS busguard_horizon (id INTEGER PRIMARY KEY CHECK (id = 0), before_ms INTEGER NOT NULL)",
)
_headers_codec: Final = msgspec.msgpack.Encoder()
_headers_decoder: Final = msgspec.msgpack.Decoder(list[tuple[str, bytes]])


def idempotency_token(decision_id: str) -> str:
    """A token derived only from the decision id, so a re-delivery or a
    re-emission after a crash presents the same token to an external system."""
    return hashlib.sha256(IDEMPOTENCY_CONTEXT + decision_id.encode()).hexdigest()


C = TypeVar("C")


def check_decision_id(decision_id: str) -> None:
    if not decision_id or len(decision_id) > MAX_DECISION_ID:
        raise ValueError(f"decision_id: {len(decision_id)} characters; allowed 1..{MAX_DECISION_ID}")


def mark_time(now_ms: int | None, decided_at: int | None) -> int:
    """When a mark is stamped: the agent's clock, or the decision's time when
    that is later, so `forget_before(t)` forgets only decisions decided before `t`."""
    at = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    return at if decided_at is None else max(at, decided_at)


class Claim(Generic[C]):
    """One open transaction: `claimed` is False when the id was already done
    or, with `before_horizon` True, decided before the done-set's horizon
    `horizon_ms` (then do nothing); `connection` is where the agent writes
    its effect (a `sqlite3.Connection`, or a `psycopg.Connection` for the
    PostgreSQL done-set)."""

    def __init__(
        self, connection: C, decision_id: str, claimed: bool, *, before_horizon: bool = False, horizon_ms: int | None = None
    ) -> None:
        self.connection = connection
        self.decision_id = decision_id
        self.claimed = claimed
        self.before_horizon = before_horizon
        self.horizon_ms = horizon_ms
        self.token = idempotency_token(decision_id)
        self.staged: list[Staged] = []

    def stage(self, topic: str, key: bytes | None, value: bytes, headers: Sequence[tuple[str, bytes]]) -> None:
        """Keep a reply to send once this transaction commits (the outbox)."""
        if not self.claimed:
            why = "was decided before the done-set's horizon" if self.before_horizon else "was already done"
            raise ValueError(f"decision {self.decision_id!r} {why}: nothing to reply")
        if len(self.staged) >= MAX_STAGED:
            raise ValueError(f"more than {MAX_STAGED} replies staged for one decision")
        self.staged.append(Staged(0, self.decision_id, topic, key, value, list(headers)))


class Staged(NamedTuple):
    """A reply in the outbox; `id` orders the outbox (0 until stored)."""

    id: int
    decision_id: str
    topic: str
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]


def encode_headers(headers: Sequence[tuple[str, bytes]]) -> bytes:
    return _headers_codec.encode(list(headers))


def decode_headers(raw: bytes) -> list[tuple[str, bytes]]:
    return _headers_decoder.decode(raw)


class SqliteDoneSet:
    """The default done-set: WAL and synchronous=FULL, so a committed
    done-mark (and the effect committed with it) survives `kill -9` and power loss."""

    def __init__(self, path: str | Path, *, timeout_s: float = 5.0) -> None:
        import sqlite3

        # timeout_s: how long a claim waits for another process's claim on the same file
        self.connection = sqlite3.connect(str(path), isolation_level=None, timeout=timeout_s)
        self.connection.execute("PRAGMA journal_mode=WAL")
        self.connection.execute("PRAGMA synchronous=FULL")
        for statement in _SCHEMA:
            self.connection.execute(statement)

    @contextmanager
    def claim(self, decision_id: str, *, now_ms: int | None = None, decided_at: int | None = None) -> Iterator[Claim[sqlite3.Connection]]:
        """Mark `decision_id` done inside one IMMEDIATE transaction that
        commits when the block exits normally and rolls back (mark and
        effect) when it raises. With `decided_at`, a decision decided
        before the horizon is not claimed (module doc)."""
        check_decision_id(decision_id)
        at = mark_time(now_ms, decided_at)
        conn = self.connection
        conn.execute("BEGIN IMMEDIATE")  # serializes claims and forget_before, across processes too
        try:
            horizon = self._horizon() if decided_at is not None else None
            if decided_at is not None and horizon is not None and decided_at < horizon:
                tx = Claim(conn, decision_id, False, before_horizon=True, horizon_ms=horizon)
            else:
                cur = conn.execute("INSERT OR IGNORE INTO busguard_done (decision_id, done_at_ms) VALUES (?, ?)", (decision_id, at))
                tx = Claim(conn, decision_id, cur.rowcount == 1, horizon_ms=horizon)
            yield tx
            conn.executemany(
                "INSERT INTO busguard_outbox (decision_id, topic, key, value, headers) VALUES (?, ?, ?, ?, ?)",
                [(s.decision_id, s.topic, s.key, s.value, encode_headers(s.headers)) for s in tx.staged],
            )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def outbox(self) -> list[Staged]:
        """The committed replies not yet sent, oldest first."""
        rows = self.connection.execute("SELECT id, decision_id, topic, key, value, headers FROM busguard_outbox ORDER BY id").fetchall()
        return [Staged(i, d, t, k, v, decode_headers(h)) for i, d, t, k, v, h in rows]

    def sent(self, staged: Staged) -> None:
        """Drop a reply the broker acknowledged."""
        self.connection.execute("DELETE FROM busguard_outbox WHERE id = ?", (staged.id,))

    def is_done(self, decision_id: str) -> bool:
        row = self.connection.execute("SELECT 1 FROM busguard_done WHERE decision_id = ?", (decision_id,)).fetchone()
        return row is not None

    def forget_before(self, at_ms: int) -> int:
        """Drop marks older than `at_ms` and make `at_ms` the horizon (unless
        it is already later), in one transaction; returns how many marks."""
        conn = self.connection
        conn.execute("BEGIN IMMEDIATE")
        try:
            dropped = int(conn.execute("DELETE FROM busguard_done WHERE done_at_ms < ?", (at_ms,)).rowcount)
            conn.execute(
                "INSERT INTO busguard_horizon (id, before_ms) VALUES (0, ?)"
                " ON CONFLICT (id) DO UPDATE SET before_ms = max(before_ms, excluded.before_ms)",
                (at_ms,),
            )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return dropped

    def horizon_ms(self) -> int | None:
        """The latest `forget_before` time (epoch ms), None if it never forgot."""
        return self._horizon()

    def _horizon(self) -> int | None:
        row = self.connection.execute("SELECT before_ms FROM busguard_horizon WHERE id = 0").fetchone()
        return None if row is None else int(row[0])

    def close(self) -> None:
        self.connection.close()


class DoneSet(Protocol[C]):
    """What the act-once loop needs of a done-set (SQLite or PostgreSQL)."""

    def claim(self, decision_id: str, *, now_ms: int | None = None, decided_at: int | None = None) -> AbstractContextManager[Claim[C]]: ...

    def is_done(self, decision_id: str) -> bool: ...

    def horizon_ms(self) -> int | None: ...

    def outbox(self) -> list[Staged]: ...

    def sent(self, staged: Staged) -> None: ...
