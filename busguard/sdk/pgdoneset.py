"""The done-set in PostgreSQL, for an agent whose own data lives there.

Why: the guarantee of `SqliteDoneSet` (the effect and its done-mark commit
together) holds only when the effect is written in the same database. An
agent that keeps its data in PostgreSQL (or runs several replicas that must
share one done-set) claims here: `claim` opens a transaction on the agent's
`psycopg` connection, inserts the mark with `ON CONFLICT DO NOTHING` and
hands the connection back for the effect. Two replicas claiming one id
serialize on the row: the second waits for the first to commit (and then
sees it done) or to roll back (and then claims it).

Tables: `busguard_done(decision_id text PRIMARY KEY, done_at_ms bigint)`,
`busguard_outbox(id bigserial, decision_id, topic, key bytea, value bytea,
headers bytea)` and `busguard_horizon(id, before_ms bigint)` (one row) in
`schema` (default: the connection's search path). The horizon is as in
busguard.sdk.doneset: a claim given `decided_at` reads the horizon row
`FOR SHARE` before it marks, and `forget_before` updates that row before it
deletes, so a claim and a forget on several connections serialize on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from busguard.sdk.doneset import Claim, Staged, check_decision_id, decode_headers, encode_headers, mark_time

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
        self._horizon = prefix + sql.Identifier("busguard_horizon")
        with self.connection.transaction():
            # CREATE ... IF NOT EXISTS races with itself (replicas opening a fresh schema
            # together meet a unique violation in the catalog): one at a time, as the TypeScript one
            self.connection.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"busguard_doneset:{schema or ''}",))
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
            self.connection.execute(
                sql.SQL("CREATE TABLE IF NOT EXISTS {} (id int PRIMARY KEY CHECK (id = 0), before_ms bigint)").format(self._horizon)
            )
            self.connection.execute(sql.SQL("INSERT INTO {} (id, before_ms) VALUES (0, NULL) ON CONFLICT DO NOTHING").format(self._horizon))

    @contextmanager
    def claim(
        self, decision_id: str, *, now_ms: int | None = None, decided_at: int | None = None
    ) -> Iterator[Claim[psycopg.Connection[tuple[object, ...]]]]:
        """Mark `decision_id` done in one transaction that commits when the
        block exits normally and rolls back (mark and effect) when it raises.
        With `decided_at`, a decision decided before the horizon is not claimed."""
        from psycopg import pq, sql

        check_decision_id(decision_id)
        at = mark_time(now_ms, decided_at)
        conn = self.connection
        with conn.transaction():
            horizon = None
            if decided_at is not None:
                row = conn.execute(sql.SQL("SELECT before_ms FROM {} WHERE id = 0 FOR SHARE").format(self._horizon)).fetchone()
                horizon = None if row is None or row[0] is None else int(row[0])  # type: ignore[call-overload]
            if decided_at is not None and horizon is not None and decided_at < horizon:
                tx = Claim(conn, decision_id, False, before_horizon=True, horizon_ms=horizon)
            else:
                cur = conn.execute(
                    sql.SQL("INSERT INTO {} (decision_id, done_at_ms) VALUES (%s, %s) ON CONFLICT DO NOTHING").format(self._done),
                    (decision_id, at),
                )
                tx = Claim(conn, decision_id, cur.rowcount == 1, horizon_ms=horizon)
            yield tx
            if conn.info.transaction_status == pq.TransactionStatus.INERROR:
                # PostgreSQL would answer the COMMIT with ROLLBACK, not an error: the
                # claim must not look committed (ActOnce would move past the task)
                raise RuntimeError(
                    f"claim {decision_id}: a statement in the transaction failed (the effect caught its error); "
                    "mark, effect and replies rolled back, nothing committed"
                )
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
        """Drop marks older than `at_ms` and make `at_ms` the horizon (unless
        it is already later), in one transaction; returns how many marks."""
        from psycopg import sql

        with self.connection.transaction():
            self.connection.execute(
                sql.SQL("UPDATE {} SET before_ms = GREATEST(COALESCE(before_ms, %s), %s) WHERE id = 0").format(self._horizon),
                (at_ms, at_ms),
            )
            return self.connection.execute(sql.SQL("DELETE FROM {} WHERE done_at_ms < %s").format(self._done), (at_ms,)).rowcount

    def horizon_ms(self) -> int | None:
        """The latest `forget_before` time (epoch ms), None if it never forgot."""
        from psycopg import sql

        row = self.connection.execute(sql.SQL("SELECT before_ms FROM {} WHERE id = 0").format(self._horizon)).fetchone()
        return None if row is None or row[0] is None else int(row[0])  # type: ignore[call-overload]

    def close(self) -> None:
        self.connection.close()


def _opt_bytes(value: object) -> bytes | None:
    return None if value is None else bytes(value)  # type: ignore[call-overload]
