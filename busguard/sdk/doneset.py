"""A durable done-set: each admitted decision is acted on once, across crashes.

Why: busguard proves a task was *admitted* once; a receiver that acts and
then crashes before recording it (seed 000) acts twice unless the record of
"done" commits together with the effect. `SqliteDoneSet.claim` opens one
write transaction on the agent's own SQLite database: it marks the decision
id done and hands back the connection, so the agent's own effect (a row in
the same database) and the done-mark commit atomically, or neither does.
A re-delivered or re-emitted forward (same decision id) is then refused.

Where the guarantee ends: an effect outside that transaction (an HTTP call,
a Kafka send) cannot commit with it. For those, pass `idempotency_token`
of the decision id to the other system, which must deduplicate on it.

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

Bound: one row per decision id handled (about 100 bytes); `forget_before`
drops rows older than a time the caller picks (after the guard's retention
of re-emissions, docs/protocol.md 12, nothing re-delivers them).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # imported when a done-set opens: the pure core (busguard/__init__) loads no sqlite3
    import sqlite3

IDEMPOTENCY_CONTEXT: Final = b"busguard/sdk/idempotency/v1\x00"
MAX_DECISION_ID: Final = 256

_SCHEMA: Final = "CREATE TABLE IF NOT EXISTS busguard_done (decision_id TEXT PRIMARY KEY, done_at_ms INTEGER NOT NULL) WITHOUT ROWID"


def idempotency_token(decision_id: str) -> str:
    """A token derived only from the decision id, so a re-delivery or a
    re-emission after a crash presents the same token to an external system."""
    return hashlib.sha256(IDEMPOTENCY_CONTEXT + decision_id.encode()).hexdigest()


class Claim:
    """One open transaction: `claimed` is False when the id was already done
    (then do nothing); `connection` is where the agent writes its effect."""

    def __init__(self, connection: sqlite3.Connection, decision_id: str, claimed: bool) -> None:
        self.connection = connection
        self.decision_id = decision_id
        self.claimed = claimed
        self.token = idempotency_token(decision_id)


class SqliteDoneSet:
    """The default done-set: WAL and synchronous=FULL, so a committed
    done-mark (and the effect committed with it) survives `kill -9` and power loss."""

    def __init__(self, path: str | Path) -> None:
        import sqlite3

        self.connection = sqlite3.connect(str(path), isolation_level=None)
        self.connection.execute("PRAGMA journal_mode=WAL")
        self.connection.execute("PRAGMA synchronous=FULL")
        self.connection.execute(_SCHEMA)

    @contextmanager
    def claim(self, decision_id: str, *, now_ms: int | None = None) -> Iterator[Claim]:
        """Mark `decision_id` done inside one IMMEDIATE transaction that
        commits when the block exits normally and rolls back (mark and
        effect) when it raises."""
        if not decision_id or len(decision_id) > MAX_DECISION_ID:
            raise ValueError(f"decision_id: {len(decision_id)} characters; allowed 1..{MAX_DECISION_ID}")
        at = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        conn = self.connection
        conn.execute("BEGIN IMMEDIATE")
        try:
            cur = conn.execute("INSERT OR IGNORE INTO busguard_done (decision_id, done_at_ms) VALUES (?, ?)", (decision_id, at))
            yield Claim(conn, decision_id, cur.rowcount == 1)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def is_done(self, decision_id: str) -> bool:
        row = self.connection.execute("SELECT 1 FROM busguard_done WHERE decision_id = ?", (decision_id,)).fetchone()
        return row is not None

    def forget_before(self, at_ms: int) -> int:
        """Drop marks older than `at_ms`; returns how many."""
        return int(self.connection.execute("DELETE FROM busguard_done WHERE done_at_ms < ?", (at_ms,)).rowcount)

    def close(self) -> None:
        self.connection.close()
