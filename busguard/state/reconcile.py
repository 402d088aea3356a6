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

The backends: state/sqlite/reconcile.py and state/postgres/reconcile.py,
opened through state/backends.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

from busguard.state.keys import SourceKey

Out = TypeVar("Out")
S = TypeVar("S")


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
