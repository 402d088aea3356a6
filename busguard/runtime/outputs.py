"""Where each decision's records go, and what they carry. Pure.

Every input yields exactly two records: its primary output (downstream for
`forward`, reconciliation for `escalate`, dead-letter for `reject` and
`duplicate`) and one audit record. Both carry the same sealed attestation, so
one signature per input serves both (see busguard.protocol.attestation).

Because this is a pure function of the persisted decision and the input
record, a crash-restart re-emits byte-identical records with the same
decision id, which is what lets downstream consumers dedupe.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import NamedTuple

from busguard.admission.types import Coordinates, Decision
from busguard.config import TopicsConfig
from busguard.protocol.attestation import (
    HEADER_ATTESTATION,
    HEADER_DECISION_ID,
    HEADER_DETAIL,
    HEADER_OUTCOME,
    HEADER_PRIOR,
    HEADER_REASON,
    HEADER_SEAL,
    HEADER_SOURCE,
)
from busguard.protocol.reasons import Outcome

MAX_DETAIL_BYTES = 1024
HEADER_ORIGINAL_LENGTH = "busguard-original-length"
HEADER_ORIGINAL_SHA256 = "busguard-original-sha256"


class Output(NamedTuple):
    """One record to produce. Placement and timestamp are part of the value
    object so that a re-emission lands in the same partition with the same
    record timestamp: `spread` (when set) picks the partition as
    `spread mod partition count` instead of hashing the key."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp_ms: int | None = None
    spread: int | None = None


class Sealed(NamedTuple):
    """A decision made ready to emit: its record bytes, attestation and seal."""

    decision: Decision
    decision_json: bytes
    attestation: bytes
    seal: bytes


def outputs_for(
    sealed: Sealed,
    record_key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]],
    downstream: str,
    topics: TopicsConfig,
    max_payload_bytes: int,
) -> tuple[Output, Output]:
    d = sealed.decision
    did = d.decision_id.encode()
    proof = [(HEADER_DECISION_ID, did), (HEADER_ATTESTATION, sealed.attestation), (HEADER_SEAL, sealed.seal)]
    task_key = d.task_id.encode() if d.task_id is not None else did
    at, part = d.decided_at, d.source.partition
    # The audit topic is placed by input partition, not by hashing unique task ids.
    audit = Output(topics.audit, task_key, sealed.decision_json, [*proof, (HEADER_OUTCOME, d.outcome.encode()), (HEADER_REASON, d.reason.encode())], at, part)
    if d.outcome == Outcome.FORWARD:
        return Output(downstream, record_key, value, [*headers, *proof], at, part if record_key is None else None), audit
    if d.outcome == Outcome.ESCALATE:
        # keyed by task id: operators' resolve commands follow it into the same partition
        return Output(topics.reconciliation, task_key, sealed.decision_json, audit.headers, at), audit
    prior = d.prior.decision_id if d.prior is not None else None
    return dead_letter(
        topics.dead_letter, record_key, value, headers, d.decision_id, d.reason, d.detail, d.source, d.outcome, prior, proof[1:], max_payload_bytes, at
    ), audit


def dead_letter(
    topic: str,
    record_key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]],
    decision_id: str,
    reason: str,
    detail: str,
    source: Coordinates,
    outcome: str = Outcome.REJECT,
    prior_decision_id: str | None = None,
    proof: Sequence[tuple[str, bytes]] = (),
    max_payload_bytes: int | None = None,
    timestamp_ms: int | None = None,
) -> Output:
    """The original value and headers untouched, followed by why."""
    extra = [
        (HEADER_DECISION_ID, decision_id.encode()),
        (HEADER_OUTCOME, outcome.encode()),
        (HEADER_REASON, reason.encode()),
        (HEADER_DETAIL, detail.encode()[:MAX_DETAIL_BYTES]),
        (HEADER_SOURCE, f"{source.topic}/{source.partition}/{source.offset}".encode()),
    ]
    if prior_decision_id is not None:
        extra.append((HEADER_PRIOR, prior_decision_id.encode()))
    if value is not None and max_payload_bytes is not None and len(value) > max_payload_bytes:
        # Too big to re-produce safely: point at the original (still in the
        # input topic at busguard-source) and identify it by hash instead.
        extra += [(HEADER_ORIGINAL_LENGTH, str(len(value)).encode()), (HEADER_ORIGINAL_SHA256, hashlib.sha256(value).hexdigest().encode())]
        value = None
    if record_key is None:  # place it deterministically; Kafka also needs a key or a value
        record_key, spread = None if value is not None else decision_id.encode(), source.partition
    else:
        spread = None
    return Output(topic, record_key, value, [*headers, *extra, *proof], timestamp_ms, spread)
