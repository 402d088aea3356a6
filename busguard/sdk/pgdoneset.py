"""The done-set in PostgreSQL, for an agent whose own data lives there.

Why: the guarantee of `SqliteDoneSet` (the effect and its done-mark commit
together) holds only when the effect is written in the same database. An
agent that keeps its data in PostgreSQL (or runs several replicas that must
share one done-set) claims here: `claim` opens a transaction on the agent's
`psycopg` connection, inserts the mark with `ON CONFLICT DO NOTHING` and
hands the connection back for the effect. Two replicas claiming one id
serialize on the row: the second waits for the first to commit (and then
sees it done) or to roll back (and then claims it).

Tables: `busguard_done(decision_id text PRIMARY KEY, done_at_ms bigint)` and
`busguard_outbox(id bigserial, decision_id, topic, key bytea, value bytea,
headers bytea)` in `schema` (default: the connection's search path).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from busguard.sdk.doneset import Claim, Staged, check_decision_id, decode_headers, encode_headers

if TYPE_CHECKING:  # psycopg is the `postgres` extra, imported when a done-set opens
    import psycopg

__all__ = ["PostgresDoneSet"]


class PostgresDoneSet:
    def __init__(self, dsn: str, *, schema: str | None = None) -> None:
        import psycopg
        from psycopg import sql

        self.connection: psycopg.Connection[tuple[object, ...]] = psycopg.connect(dsn, autocommit=True)
        prefix = sql.SQL("{}.").format(sql.Identifier(schema)) if schema is not None else sql.SQL("")
        self._done = prefix + sql.Identifier("busguard_done")
        self._outbox = prefix + sql.Identifier("busguard_outbox")
        with self.connection.transaction():
            if schema is not None:
                self.connection.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            self.connection.execute(
                sql.SQL("CREATE TABLE IF NOT EXISTS {} (decision_id text PRIMARY KEY, done_at_ms bigint NOT NULL)").format(self._done)
            )
            self.connection.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (id bigserial PRIMARY KEY, decision_id text NOT NULL,"
                    " topic text NOT NULL, key bytea, value bytea NOT NULL, headers bytea NOT NULL)"
                ).format(self._outbox)
            )

    @contextmanager
    def claim(self, decision_id: str, *, now_ms: int | None = None) -> Iterator[Claim[psycopg.Connection[tuple[object, ...]]]]:
        """Mark `decision_id` done in one transaction that commits when the
        block exits normally and rolls back (mark and effect) when it raises."""
        from psycopg import sql

        check_decision_id(decision_id)
        at = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        conn = self.connection
        with conn.transaction():
            cur = conn.execute(
                sql.SQL("INSERT INTO {} (decision_id, done_at_ms) VALUES (%s, %s) ON CONFLICT DO NOTHING").format(self._done),
                (decision_id, at),
            )
            tx = Claim(conn, decision_id, cur.rowcount == 1)
            yield tx
            if tx.staged:
                with conn.cursor() as c:
                    c.executemany(
                        sql.SQL("INSERT INTO {} (decision_id, topic, key, value, headers) VALUES (%s, %s, %s, %s, %s)").format(
                            self._outbox
                        ),
                        [(s.decision_id, s.topic, s.key, s.value, encode_headers(s.headers)) for s in tx.staged],
                    )

    def is_done(self, decision_id: str) -> bool:
        from psycopg import sql

        row = self.connection.execute(sql.SQL("SELECT 1 FROM {} WHERE decision_id = %s").format(self._done), (decision_id,)).fetchone()
        return row is not None

    def outbox(self) -> list[Staged]:
        from psycopg import sql

        rows = self.connection.execute(
            sql.SQL("SELECT id, decision_id, topic, key, value, headers FROM {} ORDER BY id").format(self._outbox)
        )
        return [Staged(int(i), str(d), str(t), _opt_bytes(k), bytes(v), decode_headers(bytes(h))) for i, d, t, k, v, h in rows]  # type: ignore[call-overload]

    def sent(self, staged: Staged) -> None:
        from psycopg import sql

        self.connection.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(self._outbox), (staged.id,))

    def forget_before(self, at_ms: int) -> int:
        """Drop marks older than `at_ms`; returns how many."""
        from psycopg import sql

        return self.connection.execute(sql.SQL("DELETE FROM {} WHERE done_at_ms < %s").format(self._done), (at_ms,)).rowcount

    def close(self) -> None:
        self.connection.close()


def _opt_bytes(value: object) -> bytes | None:
    return None if value is None else bytes(value)  # type: ignore[call-overload]
