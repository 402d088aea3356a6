"""The reconciler's store: the state layer's reconcile contract
(busguard.state.reconcile) bound to the reconciler's own value types."""

from __future__ import annotations

from pathlib import Path

from busguard.reconcile.policy import EscalationState
from busguard.runtime.outputs import Output
from busguard.state import reconcile as contract
from busguard.state.pgreconcile import PostgresReconcileStore
from busguard.state.reconcile import SqliteReconcileStore

Processed = contract.Processed[Output]
States = dict[str, EscalationState]
BatchFn = contract.ReconcileFn[Output, EscalationState]
ReconcileState = contract.ReconcileStateStore[Output, EscalationState]
"""What the reconciler needs from a store: either backend below."""


class ReconcileStore(SqliteReconcileStore[Output, EscalationState]):
    def __init__(self, path: str | Path, *, synchronous: str = "FULL") -> None:
        super().__init__(path, output=Output, state=EscalationState, synchronous=synchronous)


class PgReconcileStore(PostgresReconcileStore[Output, EscalationState]):
    """On PostgreSQL, with `state.backend = "postgres"`: the guard's DSN and schema."""

    def __init__(self, dsn: str, *, schema: str = "busguard", retry_s: float = 120.0) -> None:
        super().__init__(dsn, output=Output, state=EscalationState, schema=schema, retry_s=retry_s)
