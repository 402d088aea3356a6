"""The reconciler's durable state: what each input produced, and each escalation's status.

Same discipline as the guard's store: one `BEGIN IMMEDIATE` transaction per
batch, and every input's outputs kept under its source coordinates, so a
batch re-delivered after a crash is re-emitted byte for byte instead of
being resolved again.

Layout: processed(k = topic,partition,offset) -> msgpack list of Output;
escalations(k = escalation id) -> msgpack EscalationState.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, Protocol

import msgspec

from busguard.admission.batch import SourceKey
from busguard.reconcile.policy import EscalationState
from busguard.runtime.outputs import Output
from busguard.state.sqlitedb import connect, key, select_in, transaction

_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS processed(k TEXT PRIMARY KEY, outputs BLOB NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS escalations(k TEXT PRIMARY KEY, state BLOB NOT NULL) WITHOUT ROWID",
)
_outputs = msgspec.msgpack.Decoder(list[Output])
_state = msgspec.msgpack.Decoder(EscalationState)
_encode = msgspec.msgpack.Encoder().encode

Processed = dict[SourceKey, list[Output]]
States = dict[str, EscalationState]
BatchFn = Callable[[Processed, States], tuple[Processed, States]]


class ReconcileState(Protocol):
    """What the reconciler needs from a store: this SQLite one, or
    reconcile/pgstore.py's on PostgreSQL."""

    def run_batch(self, sources: list[SourceKey], escalation_ids: set[str], fn: BatchFn) -> Processed: ...

    def escalations(self) -> Iterator[EscalationState]: ...

    def close(self) -> None: ...


class ReconcileStore:
    def __init__(self, path: str | Path, *, synchronous: str = "FULL") -> None:
        self._db = connect(path, synchronous=synchronous)
        with transaction(self._db) as db:
            for statement in _SCHEMA:
                db.execute(statement)

    def run_batch(self, sources: list[SourceKey], escalation_ids: set[str], fn: BatchFn) -> Processed:
        """Outputs for every source: re-read for those already processed, new for the rest."""
        with transaction(self._db) as db:
            by_key = {key(*s): s for s in sources}
            processed = {by_key[k]: _outputs.decode(v) for k, v in select_in(db, "SELECT k, outputs FROM processed WHERE k IN ({})", list(by_key))}
            states = {k: _state.decode(v) for k, v in select_in(db, "SELECT k, state FROM escalations WHERE k IN ({})", sorted(escalation_ids))}
            new_processed, changed = fn(processed, states)
            db.executemany("INSERT INTO processed VALUES (?, ?)", [(key(*s), _encode(o)) for s, o in new_processed.items()])
            db.executemany("INSERT OR REPLACE INTO escalations VALUES (?, ?)", [(k, _encode(v)) for k, v in changed.items()])
        return {**processed, **new_processed}

    def escalations(self) -> Iterator[EscalationState]:
        for (blob,) in self._db.execute("SELECT state FROM escalations"):
            yield _state.decode(blob)

    def close(self) -> None:
        self._db.close()
