"""The reconciler's state contract (state/reconcile.py) on PostgreSQL, next to
the guard's tables (same DSN and schema).

The contract: a batch reads what each input already
produced and the escalations it touches, decides, and writes, in one
transaction; a batch re-delivered after a crash is re-emitted from what was
recorded instead of being resolved again. Atomic across reconcilers on
several hosts the way the guard's store is (state/postgres/store.py): READ
COMMITTED, and every write conditional on the row being what the batch read
(an input position inserted only if still absent; an escalation inserted if
still absent, or updated only if its version is still the one read). A write
that finds another reconciler got there first aborts the batch, which runs
again on fresh reads.

Layout (in the guard's schema): reconcile_processed(k = topic,partition,offset)
-> msgpack list of Output; reconcile_escalations(k = escalation id) -> msgpack
EscalationState, ver.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

import msgspec

from busguard.state.codecs import encode as _encode
from busguard.state.keys import SourceKey
from busguard.state.postgres.db import Session, init_lock_id, returned
from busguard.state.reconcile import Processed, ReconcileFn
from busguard.state.sqlite.db import key as text_key

if TYPE_CHECKING:
    import psycopg

    Cursor = psycopg.Cursor[tuple[Any, ...]]

_DDL: Final = (
    "CREATE TABLE IF NOT EXISTS reconcile_processed(k bytea PRIMARY KEY, outputs bytea NOT NULL)",
    "CREATE TABLE IF NOT EXISTS reconcile_escalations(k text PRIMARY KEY, state bytea NOT NULL, ver bigint NOT NULL)",
)
_LOAD_PROCESSED: Final = "SELECT k, outputs FROM reconcile_processed WHERE k = ANY(%b::bytea[])"
_LOAD_ESCALATIONS: Final = "SELECT k, state, ver FROM reconcile_escalations WHERE k = ANY(%b::text[])"
_WRITE_PROCESSED: Final = """
INSERT INTO reconcile_processed(k, outputs) SELECT * FROM unnest(%b::bytea[], %b::bytea[])
ON CONFLICT (k) DO NOTHING RETURNING k"""
_WRITE_ESCALATIONS: Final = """
INSERT INTO reconcile_escalations(k, state, ver) SELECT * FROM unnest(%b::text[], %b::bytea[], %b::bigint[])
ON CONFLICT (k) DO UPDATE SET state = excluded.state, ver = excluded.ver WHERE reconcile_escalations.ver = excluded.ver - 1
RETURNING k"""

Out = TypeVar("Out")
S = TypeVar("S")


def _key(s: SourceKey) -> bytes:
    return text_key(*s).encode()


class PostgresReconcileStore(Generic[Out, S]):
    """Generic in the two value types, which the reconciler names (busguard.reconcile.store)."""

    def __init__(self, dsn: str, *, output: type[Out], state: type[S], schema: str = "busguard", retry_s: float = 120.0) -> None:
        import psycopg.sql

        self._outputs: msgspec.msgpack.Decoder[list[Out]] = msgspec.msgpack.Decoder(list[output])  # type: ignore[valid-type]
        self._state = msgspec.msgpack.Decoder(state)

        self.schema = schema
        self._session = Session(dsn, retry_s=retry_s, options=f"-c search_path={schema}", application_name="busguard-reconcile")
        self.target = self._session.target
        ident = psycopg.sql.Identifier(schema)

        def init(cur: Cursor) -> None:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (init_lock_id(schema),))
            cur.execute(psycopg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
            cur.execute(psycopg.sql.SQL("SET LOCAL search_path TO {}").format(ident))
            for statement in _DDL:
                cur.execute(statement)

        self._session.run(init, what="open reconciler store")

    @property
    def session(self) -> Session:
        return self._session

    def run_batch(self, sources: list[SourceKey], escalation_ids: set[str], fn: ReconcileFn[Out, S]) -> Processed[Out]:
        """Outputs for every source: re-read for those already processed, new for the rest."""

        def body(cur: Cursor) -> Processed[Out]:
            by_key = {_key(s): s for s in sources}
            processed: Processed[Out] = {}
            if by_key:
                cur.execute(_LOAD_PROCESSED, (list(by_key),), binary=True)
                processed = {by_key[k]: self._outputs.decode(v) for k, v in cur.fetchall()}
            states: dict[str, S] = {}
            versions: dict[str, int] = {}
            if escalation_ids:
                cur.execute(_LOAD_ESCALATIONS, (sorted(escalation_ids),), binary=True)
                for k, v, ver in cur.fetchall():
                    states[k], versions[k] = self._state.decode(v), ver
            new_processed, changed = fn(processed, states)
            rows = sorted((_key(s), _encode(o)) for s, o in new_processed.items())
            if rows:
                returned(cur, _WRITE_PROCESSED, ([k for k, _ in rows], [o for _, o in rows]), len(rows), "reconciler inputs")
            esc = sorted((k, _encode(v), versions.get(k, 0) + 1) for k, v in changed.items())
            if esc:
                returned(cur, _WRITE_ESCALATIONS, tuple(list(c) for c in zip(*esc, strict=True)), len(esc), "escalations")
            return {**processed, **new_processed}

        return self._session.run(body, what="run reconciler batch")

    def escalations(self) -> Iterator[S]:
        def body(cur: Cursor) -> list[S]:
            cur.execute("SELECT state FROM reconcile_escalations", binary=True)
            return [self._state.decode(v) for (v,) in cur.fetchall()]

        yield from self._session.run(body, what="read escalations")

    def close(self) -> None:
        self._session.close()
