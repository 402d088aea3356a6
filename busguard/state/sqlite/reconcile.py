"""The reconciler's store on SQLite (the contract: busguard.state.reconcile).

Layout: processed(k = topic,partition,offset) -> msgpack list of outputs;
escalations(k = escalation id) -> msgpack escalation state.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Final, Generic, TypeVar

import msgspec

from busguard.state.codecs import encode
from busguard.state.keys import SourceKey
from busguard.state.reconcile import Processed, ReconcileFn
from busguard.state.sqlite.db import connect, key, select_in, transaction

Out = TypeVar("Out")
S = TypeVar("S")

_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS processed(k TEXT PRIMARY KEY, outputs BLOB NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS escalations(k TEXT PRIMARY KEY, state BLOB NOT NULL) WITHOUT ROWID",
)


class SqliteReconcileStore(Generic[Out, S]):
    def __init__(self, path: str | Path, *, output: type[Out], state: type[S], synchronous: str = "FULL") -> None:
        self._outputs: msgspec.msgpack.Decoder[list[Out]] = msgspec.msgpack.Decoder(list[output])  # type: ignore[valid-type]
        self._state = msgspec.msgpack.Decoder(state)
        self._db = connect(path, synchronous=synchronous)
        with transaction(self._db) as db:
            for statement in _SCHEMA:
                db.execute(statement)

    def run_batch(self, sources: list[SourceKey], escalation_ids: set[str], fn: ReconcileFn[Out, S]) -> Processed[Out]:
        with transaction(self._db) as db:
            by_key = {key(*s): s for s in sources}
            rows = select_in(db, "SELECT k, outputs FROM processed WHERE k IN ({})", list(by_key))
            processed = {by_key[k]: self._outputs.decode(v) for k, v in rows}
            states = {
                k: self._state.decode(v)
                for k, v in select_in(db, "SELECT k, state FROM escalations WHERE k IN ({})", sorted(escalation_ids))
            }
            new_processed, changed = fn(processed, states)
            db.executemany("INSERT INTO processed VALUES (?, ?)", [(key(*s), encode(o)) for s, o in new_processed.items()])
            db.executemany("INSERT OR REPLACE INTO escalations VALUES (?, ?)", [(k, encode(v)) for k, v in changed.items()])
        return {**processed, **new_processed}

    def escalations(self) -> Iterator[S]:
        for (blob,) in self._db.execute("SELECT state FROM escalations"):
            yield self._state.decode(blob)

    def close(self) -> None:
        self._db.close()
