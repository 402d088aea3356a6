"""What a batch wrote: a plain value the store persists in the batch's transaction.

The batch driver (busguard.admission.batch) builds it; a backend only reads
it, so no backend depends on how admission keeps its overlay. Rules every
backend applies (tests/unit/test_state_stores.py runs them on each one):

- `decisions` replace any earlier decision at the same position; they expire
  `decision_retention_ms` after `decided_at`. A decision is keyed by its own
  `source` (SQLite's runs store only the decisions and read the position
  back from them).
- `nonces`, `windows` and `policy` rows are written as given (last write
  wins) with the expiry they carry.
- `tasks` are insert-only: a task row is written only where none exists or
  the existing one has expired, so the first admission stays the witness;
  it expires `task_retention_ms` after `admitted_at`.
- the partition watermarks (`watermarks()`) only move forward.
- `heads` (batch seals) are insert-only: a (chain, seq) is written once, and
  a second head for it is an error, never an overwrite (a chain never
  forks). A head expires `decision_retention_ms` after its `sealed_at`,
  with the decisions it covers (they were all decided at `sealed_at`). The
  snapshot's `tip` is the highest seq of `KeySet.chain` still held.
"""

from __future__ import annotations

import msgspec

from busguard.protocol.records import Decision, TaskEntry
from busguard.state.keys import NonceKey, Partition, PolicyKey, SourceKey, TaskKey, WindowKey
from busguard.state.snapshot import StoredHead, WindowState


class NonceRecord(msgspec.Struct, frozen=True, gc=False):
    key: NonceKey
    expires_at: int


class WindowRecord(msgspec.Struct, frozen=True, gc=False):
    key: WindowKey
    state: WindowState
    expires_at: int


class PolicyRecord(msgspec.Struct, frozen=True, gc=False):
    """A policy's row (busguard.policies): opaque bytes the policy encodes."""

    key: PolicyKey
    value: bytes
    expires_at: int


class BatchWrites(msgspec.Struct, kw_only=True):
    """Everything one batch asks the store to persist, keyed for last-write-wins."""

    decisions: dict[SourceKey, Decision] = msgspec.field(default_factory=dict)
    nonces: dict[NonceKey, NonceRecord] = msgspec.field(default_factory=dict)
    windows: dict[WindowKey, WindowRecord] = msgspec.field(default_factory=dict)
    tasks: dict[TaskKey, TaskEntry] = msgspec.field(default_factory=dict)
    policy: dict[PolicyKey, PolicyRecord] = msgspec.field(default_factory=dict)
    heads: list[StoredHead] = msgspec.field(default_factory=list)

    def watermarks(self) -> dict[Partition, int]:
        """Per input partition, the highest offset this batch decided (a
        span decision decides every offset to its `last_offset`)."""
        marks: dict[Partition, int] = {}
        for (topic, partition, _), d in self.decisions.items():
            offset = d.covers_to
            if marks.get((topic, partition), -1) < offset:
                marks[(topic, partition)] = offset
        return marks
