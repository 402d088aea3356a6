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

from busguard.admission.types import Decision
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
    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]


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
    audit = Output(topics.audit, task_key, sealed.decision_json, [*proof, (HEADER_OUTCOME, d.outcome.encode()), (HEADER_REASON, d.reason.encode())])
    if d.outcome == Outcome.FORWARD:
        return Output(downstream, record_key, value, [*headers, *proof]), audit
    if d.outcome == Outcome.ESCALATE:
        return Output(topics.reconciliation, task_key, sealed.decision_json, audit.headers), audit
    extra = [
        (HEADER_OUTCOME, d.outcome.encode()),
        (HEADER_REASON, d.reason.encode()),
        (HEADER_DETAIL, d.detail.encode()[:MAX_DETAIL_BYTES]),
        (HEADER_SOURCE, f"{d.source.topic}/{d.source.partition}/{d.source.offset}".encode()),
    ]
    if d.prior is not None:
        extra.append((HEADER_PRIOR, d.prior.decision_id.encode()))
    if value is not None and len(value) > max_payload_bytes:
        # Too big to re-produce safely: point at the original (still in the
        # input topic at busguard-source) and identify it by hash instead.
        extra += [(HEADER_ORIGINAL_LENGTH, str(len(value)).encode()), (HEADER_ORIGINAL_SHA256, hashlib.sha256(value).hexdigest().encode())]
        value = None
    return Output(topics.dead_letter, record_key, value, [*headers, *extra, *proof]), audit
