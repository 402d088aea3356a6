"""The store interface every backend implements (docs/design.md, "State").

Contract:
- `run_batch` loads the rows for a KeySet into a Snapshot, calls the pure
  decision function with it, and persists the BatchWrites it returns
  (state/writes.py says how), all in one transaction. With several
  processes on one store this is what makes check-and-record atomic.
- Rows expire: a row whose `expires_at` is at or before `now_ms` reads as
  absent even before `expire` physically deletes it.
- `created_at` is fixed when the store is first created and survives
  restarts; a lost store comes back with a new one.
- `trusted_from` is the fence time of admission/fence.py: the creation time
  of a store `busguard run` had to create (it may replace a lost one), None
  for a genesis store (`busguard state init`: an operator said no history
  exists), and moved to "now" by `rearm` when the store finds itself behind
  the consumer group. It never moves backwards, survives restarts, and is
  read inside each batch's transaction, so every process sharing a store
  sees a re-arm from its next batch.
- `partition_watermarks` is, per input (topic, partition), the highest offset
  the store has decided, written in the same transaction as the decisions and
  never expired: what the store-behind check compares with the group's
  committed offsets.
- Tasks are insert-only: the first admission of a task is its witness forever
  (until it expires), whatever later batches say.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from busguard.protocol.records import Coordinates, Decision, TaskEntry
from busguard.state.keys import KeySet, Partition
from busguard.state.snapshot import Snapshot
from busguard.state.writes import BatchWrites

BatchFn = Callable[[Snapshot], BatchWrites]


class BatchStore(Protocol):
    """What the batch driver needs (busguard.admission.batch): one transaction."""

    def run_batch(self, keys: KeySet, now_ms: int, fn: BatchFn) -> None: ...


class StateStore(BatchStore, Protocol):
    @property
    def created(self) -> bool:
        """Whether opening it created it (it may replace a lost one: it warms)."""
        ...

    @property
    def created_at(self) -> int: ...

    @property
    def origin(self) -> str:
        """`genesis` (made by `busguard state init`: no history, no fence) or
        `created` (made because none was found: it may replace a lost store,
        fenced from its creation). In the protocol so `busguard state show`
        can print it for any backend without naming a backend class."""
        ...

    def location(self) -> str | None:
        """Where the store lives, fit for logs and errors (a DSN's password
        redacted); None for a store held in memory. In the protocol so
        callers print it without branching on the backend's name."""
        ...

    @property
    def trusted_from(self) -> int | None: ...

    def rearm(self, now_ms: int) -> int: ...

    def partition_watermarks(self) -> dict[Partition, int]: ...

    def decision_at(self, source: Coordinates) -> Decision | None: ...

    def task(self, kind: str, task_id: str, now_ms: int) -> TaskEntry | None: ...

    def expire(self, now_ms: int) -> int: ...

    def counts(self) -> dict[str, int]: ...

    def close(self) -> None: ...


def rearmed(trusted_from: int | None, now_ms: int) -> int:
    """The trusted-from time after a re-arm: now, never earlier than it was."""
    return now_ms if trusted_from is None else max(trusted_from, now_ms)


class StateUnavailable(RuntimeError):
    """The database stayed unreachable for the whole retry budget.

    `what` is the operation that gave up, `error` the driver's last word on
    it (first line, password scrubbed): what a one-line error names."""

    def __init__(self, message: str, *, what: str, error: str) -> None:
        super().__init__(message)
        self.what = what
        self.error = error
