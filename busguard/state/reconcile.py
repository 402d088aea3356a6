"""The reconciler's state: a second, smaller contract than the guard's.

Why a second contract and not the guard's KeySet/Snapshot/BatchWrites: the
reconciler keeps other things (what each input produced, and each
escalation's status), reads them whole, and overwrites them; nothing of the
guard's expiry or insert-only rules applies. Its shape is the guard's
discipline all the same: one transaction per batch, the batch's reads in,
its writes out as plain values, and every input's outputs kept under its
source coordinates, so a batch re-delivered after a crash is re-emitted byte
for byte instead of being resolved again (docs/design.md, "State").

The store is generic in the two value types, which the reconciler names
(busguard.reconcile.store), so this layer knows neither.

Layout: processed(k = topic,partition,offset) -> msgpack list of outputs;
escalations(k = escalation id) -> msgpack escalation state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, Generic, Protocol, TypeVar

import msgspec

from busguard.state.codecs import encode
from busguard.state.keys import SourceKey
from busguard.state.sqlitedb import connect, key, select_in, transaction

Out = TypeVar("Out")
S = TypeVar("S")

_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS processed(k TEXT PRIMARY KEY, outputs BLOB NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS escalations(k TEXT PRIMARY KEY, state BLOB NOT NULL) WITHOUT ROWID",
)


Processed = dict[SourceKey, list[Out]]
"""Per input position, the outputs it produced."""
ReconcileFn = Callable[[Processed[Out], dict[str, S]], tuple[Processed[Out], dict[str, S]]]
"""(processed, states) -> (new outputs, changed states)"""


class ReconcileStateStore(Protocol[Out, S]):
    def run_batch(self, sources: list[SourceKey], escalation_ids: set[str], fn: ReconcileFn[Out, S]) -> Processed[Out]:
        """Call `fn(processed, states)` with what is stored for these sources and
        escalations; persist the new outputs and changed states it returns, in
        one transaction. Returns the outputs of every source: re-read for those
        already processed, new for the rest."""
        ...

    def escalations(self) -> Iterator[S]: ...

    def close(self) -> None: ...


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
