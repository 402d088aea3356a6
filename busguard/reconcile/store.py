"""The reconciler's store: the state layer's reconcile contract
(busguard.state.reconcile) bound to the reconciler's own value types."""

from __future__ import annotations

from busguard.reconcile.policy import EscalationState
from busguard.runtime.outputs import Output
from busguard.state import reconcile as contract

Processed = contract.Processed[Output]
States = dict[str, EscalationState]
BatchFn = contract.ReconcileFn[Output, EscalationState]
ReconcileState = contract.ReconcileStateStore[Output, EscalationState]
"""What the reconciler needs from a store: a backend's `open_reconcile` (busguard.wiring.open_reconcile_store)."""
