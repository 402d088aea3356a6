"""A kind's own settlement of its escalations, applied exactly once.

A kind with `KindSpec.reconciliation` (busguard.policies.seam.Reconciliation)
settles its escalations itself, automatically or by an operator's choice of
its own, and a settlement may change the kind's policy rows (admit the
escalated value as the key's high-water mark, say). Those rows are the
guard's: the reconciler changes them through the guard's state store
contract (`StateStore.run_batch`, the same transaction, locks and rules as
a guard batch), in one transaction with a marker row naming the
resolution. The marker makes it exactly once: the reconciler persists its
own outputs after the guard store committed, so a crash between the two
re-delivers the escalation or command, and the second run finds the marker,
applies nothing and answers the settlement the marker recorded (the rows
it read have moved since), so the resolution re-emitted is the same bytes.

So the guard's store must be one two processes can open: SQLite (a file
both reach) or PostgreSQL; `wiring.build_reconciler` refuses to start
otherwise while a registered kind has a reconciliation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

import msgspec

from busguard.policies import KINDS, KindSpec
from busguard.policies.seam import PERMANENT_EXPIRY_MS, PolicyKey, Settlement
from busguard.protocol.records import Decision, resolution_id
from busguard.state.keys import KeySet
from busguard.state.snapshot import Snapshot
from busguard.state.store import BatchStore
from busguard.state.writes import BatchWrites, PolicyRecord

#: The namespace of the markers: no kind can own it (a dot-free kind name
#: could be "busguard", so the marker's namespace has a character kinds' lack).
MARKER_NAMESPACE: Final = "busguard/settled"


class KindContractError(RuntimeError):
    """A kind's settlement broke the seam's rules (a bug in the kind)."""


class _Marker(msgspec.Struct, frozen=True):
    #: what was asked: None the automatic settlement, else the operator's choice
    choice: str | None
    resolved_as: str
    note: str


class _View:
    __slots__ = ("_keys", "_rows", "decision_id")

    def __init__(self, rows: Mapping[PolicyKey, bytes], keys: frozenset[PolicyKey], decision_id: str) -> None:
        self._rows, self._keys, self.decision_id = rows, keys, decision_id

    def get(self, key: PolicyKey) -> bytes | None:
        if key not in self._keys:
            raise KindContractError(f"settlement read {key!r}, which its keys() did not name")
        return self._rows.get(key)


def settles(escalation: Decision) -> KindSpec | None:
    """The escalation's kind, if it settles its own escalations."""
    spec = KINDS.get(escalation.kind) if escalation.kind is not None else None
    return spec if spec is not None and spec.reconciliation is not None else None


class KindSettler:
    """`settle(escalation, choice)` for the reconciler, over the guard's store."""

    def __init__(self, store: BatchStore, marker_ttl_ms: int, after_commit: Callable[[], None] | None = None) -> None:
        """`after_commit`: called once a settlement committed (the kill -9 tests' `settled` fault)."""
        self.store = store
        self.marker_ttl_ms = marker_ttl_ms
        self.after_commit = after_commit

    def settle(self, escalation: Decision, choice: str | None, now_ms: int) -> Settlement | None:
        spec = settles(escalation)
        if spec is None or spec.reconciliation is None:
            return None
        hooks = spec.reconciliation
        rid = resolution_id(escalation.decision_id, "final")
        marker: PolicyKey = (MARKER_NAMESPACE, rid)
        keys = frozenset(hooks.keys(escalation))
        stray = sorted(ns for ns, _ in keys if not spec.may_use(ns))
        if stray:
            raise KindContractError(f"kind {spec.kind!r} settlement reads namespaces {stray} it does not own (KindSpec.namespaces)")
        answer: list[Settlement | None] = []

        def fn(snap: Snapshot) -> BatchWrites:
            answer.clear()
            done = snap.policy.get(marker)
            if done is not None:
                # Settled before a crash that lost the reconciler's record of it: the
                # same question gets the same answer and changes nothing again. Another
                # question was answered "not settled" then: the automatic settlement of
                # an escalation an operator went on to settle was a hold.
                m = msgspec.json.decode(done, type=_Marker)
                answer.append(Settlement(resolved_as=m.resolved_as, note=m.note) if m.choice == choice else None)
                return BatchWrites()
            settled = hooks.settle(escalation, choice, _View(snap.policy, keys, escalation.decision_id))
            answer.append(settled)
            if settled is None:
                return BatchWrites()
            _check(spec, settled, choice)
            rows = {
                w.key: PolicyRecord(w.key, w.value, PERMANENT_EXPIRY_MS if w.ttl_ms is None else now_ms + w.ttl_ms) for w in settled.writes
            }
            rows[marker] = PolicyRecord(
                marker, msgspec.json.encode(_Marker(choice, settled.resolved_as, settled.note)), now_ms + self.marker_ttl_ms
            )
            return BatchWrites(policy=rows)

        self.store.run_batch(KeySet(policy={*keys, marker}), now_ms, fn)
        if self.after_commit is not None and answer[0] is not None:
            self.after_commit()
        return answer[0]


def _check(spec: KindSpec, settled: Settlement, choice: str | None) -> None:
    assert spec.reconciliation is not None
    if settled.resolved_as not in spec.reconciliation.choices:
        raise KindContractError(f"kind {spec.kind!r} settles as {settled.resolved_as!r}, not one of its choices")
    if choice is not None and settled.resolved_as != choice:
        raise KindContractError(f"kind {spec.kind!r} settles the operator's {choice!r} as {settled.resolved_as!r}")
    stray = sorted({w.key[0] for w in settled.writes if not spec.may_use(w.key[0])})
    if stray:
        raise KindContractError(f"kind {spec.kind!r} settlement writes namespaces {stray} it does not own (KindSpec.namespaces)")
