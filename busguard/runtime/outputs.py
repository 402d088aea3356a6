"""Where each decision's records go, and what they carry. Pure.

Every input yields exactly two records: its primary output (downstream for
`forward`, reconciliation for `escalate`, dead-letter for `reject` and
`duplicate`) and one audit record. Both carry the same sealed attestation, so
one signature per input serves both (see busguard.protocol.attestation), or,
batch-sealed (`[batch] seal = "batch"`), one signature per batch serves all
of its outputs (busguard.protocol.treehead).

Because this is a pure function of the persisted decision and the input
record, a crash-restart re-emits byte-identical records with the same
decision id, which is what lets downstream consumers dedupe.

Sizes: a broker refuses a record batch larger than its message.max.bytes, and
a refused produce stops the guard on the same record at every restart. So
`OutputBudget` measures each output as Kafka counts it (a v2 record batch:
61 bytes of batch header plus the record's varint encoding; compressed with
aiokafka's own batch builder when only compression can make it fit). A
forward that cannot fit is refused before its decision is persisted (see
admission.batch, `oversize`), and so is a decision a kind's policy shaped
whose decision record or notice cannot (`OutputBudget.refusal`); a
dead-letter that cannot fit is replaced by a bounded one that carries no
input bytes, only their lengths and SHA-256. Every other output is bounded
by construction: a decision record carries what grows with the input by
hash (protocol.records.carried, docs/protocol.md 12.5), and a dead letter
that does not pass its writer's budget (the guard's and the reconciler's
`fits`; without one, what fits any allowed limit, `fits_any_limit`) falls
back to the bounded form.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Final, NamedTuple, get_args

from busguard.config import MIN_MAX_MESSAGE_BYTES, Compression, TopicsConfig
from busguard.policies import KINDS
from busguard.protocol.attestation import (
    HEADER_ATTESTATION,
    HEADER_DECISION_ID,
    HEADER_DETAIL,
    HEADER_OUTCOME,
    HEADER_PRIOR,
    HEADER_REASON,
    HEADER_REPLACED,
    HEADER_ROUTE,
    HEADER_SEAL,
    HEADER_SOURCE,
    annotation_headers,
    attest_record,
    decision_bytes,
)
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.records import Coordinates, Decision, headers_encoding
from busguard.protocol.treehead import HEADER_HEAD_SEAL, HEADER_INCLUSION, HEADER_TREE_HEAD, MAX_LEAVES, worst_head, worst_inclusion
from busguard.runtime.batch_size import (
    BATCH_OVERHEAD,
    batch_size,
    compressed_batch_size,
    producer_batch_size,
    record_size,
    record_size_bound,
)

MAX_DETAIL_BYTES = 1024
HEADER_ORIGINAL_LENGTH = "busguard-original-length"
HEADER_ORIGINAL_SHA256 = "busguard-original-sha256"
HEADER_ORIGINAL_HEADERS_LENGTH = "busguard-original-headers-length"
HEADER_ORIGINAL_HEADERS_SHA256 = "busguard-original-headers-sha256"
HEADER_ORIGINAL_KEY_LENGTH = "busguard-original-key-length"
HEADER_ORIGINAL_KEY_SHA256 = "busguard-original-key-sha256"


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


class BatchProof(NamedTuple):
    """A decision's place in its batch seal: the head, its seal, and the
    leaf's `busguard-inclusion` value."""

    head: bytes
    head_seal: bytes
    inclusion: bytes


class Sealed(NamedTuple):
    """A decision made ready to emit: its record bytes, attestation and seal
    (per record), or with `batch` set (and `seal` empty) its batch seal."""

    decision: Decision
    decision_json: bytes
    attestation: bytes
    seal: bytes
    batch: BatchProof | None = None

    def proof(self) -> list[tuple[str, bytes]]:
        d = self.decision.decision_id
        if self.batch is None:
            return proof_headers(d, self.attestation, self.seal)
        return batch_proof_headers(d, self.attestation, *self.batch)


def proof_headers(record_id: str, attestation: bytes, seal: bytes) -> list[tuple[str, bytes]]:
    """The headers that make any sealed output checkable on its own, in the
    one order every writer uses (docs/protocol.md, "Attestation"): the
    guard's outputs, the reconciler's and the size budget's worst case."""
    return [(HEADER_DECISION_ID, record_id.encode()), (HEADER_ATTESTATION, attestation), (HEADER_SEAL, seal)]


def batch_proof_headers(record_id: str, attestation: bytes, head: bytes, head_seal: bytes, inclusion: bytes) -> list[tuple[str, bytes]]:
    """`proof_headers` of a batch-sealed output (docs/protocol.md 12.6): the
    tree head, its seal and the inclusion proof take `busguard-seal`'s place."""
    return [
        (HEADER_DECISION_ID, record_id.encode()),
        (HEADER_ATTESTATION, attestation),
        (HEADER_TREE_HEAD, head),
        (HEADER_HEAD_SEAL, head_seal),
        (HEADER_INCLUSION, inclusion),
    ]


def outputs_for(
    sealed: Sealed,
    record_key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]],
    downstream: str,
    topics: TopicsConfig,
    max_payload_bytes: int,
    budget: OutputBudget | None = None,
    audit: bool = True,
) -> tuple[Output, ...]:
    """(primary, audit, *notices): a kind's policy may add notices to its
    routes (busguard.policies.seam); every other decision has two outputs.
    `audit` False: no audit record, the decision is an entry of its batch's
    batch audit record (runtime/auditgroups.py)."""
    d = sealed.decision
    proof = sealed.proof()
    did = proof[0][1]  # busguard-decision-id, first in either kind of proof
    task_key = d.task_id.encode() if d.task_id is not None else did
    at, part = d.decided_at, d.source.partition
    # The audit topic is placed by input partition, not by hashing unique task ids.
    verdict = verdict_headers(d.outcome, d.reason)
    audited = [*proof, *verdict]
    own = (Output(topics.audit, task_key, sealed.decision_json, audited, at, part),) if audit else ()
    notices = (
        tuple(
            Output(
                topics.route_topic(n.route),
                n.key,
                n.data,
                [*proof, *verdict, (HEADER_ROUTE, n.route.encode())],
                at,
                part if n.key is None else None,
            )
            for n in d.notices
        )
        if d.notices
        else ()
    )
    if d.outcome == Outcome.FORWARD:
        primary = forward_output(downstream, record_key, *forwarded(d, value, headers), proof, at, part)
        return (primary, *own, *notices)
    if d.outcome == Outcome.ESCALATE:
        # keyed by task id: operators' resolve commands follow it into the same partition
        return Output(topics.reconciliation, task_key, sealed.decision_json, audited, at), *own, *notices
    prior = d.prior_admission
    why = (d.decision_id, d.reason, d.detail, d.source, d.outcome, prior, proof[1:])
    fits = budget.fits if budget is not None else _any_size
    primary = dead_letter(topics.dead_letter, record_key, value, headers, *why, max_payload_bytes, at, fits)
    return primary, *own, *notices


def _any_size(o: Output) -> bool:
    """No budget: the caller sizes nothing (tests that look at the full form)."""
    return True


#: (outcome, reason) -> their two headers, built once: every output but a
#: dead letter carries them. Outcomes and reasons are the core's and the
#: kind policies' own codes, never a sender's text; bounded all the same.
_VERDICTS: dict[tuple[str, str], tuple[tuple[str, bytes], tuple[str, bytes]]] = {}
VERDICTS_MAX: Final = 1024


def verdict_headers(outcome: str, reason: str) -> tuple[tuple[str, bytes], tuple[str, bytes]]:
    """`busguard-outcome` and `busguard-reason`, in that order."""
    found = _VERDICTS.get((outcome, reason))
    if found is None:
        found = ((HEADER_OUTCOME, outcome.encode()), (HEADER_REASON, reason.encode()))
        if len(_VERDICTS) < VERDICTS_MAX:
            _VERDICTS[(outcome, reason)] = found
    return found


def forwarded(d: Decision, value: bytes | None, headers: Sequence[tuple[str, bytes]]) -> tuple[bytes | None, Sequence[tuple[str, bytes]]]:
    """The value and headers a forward carries: the input's, or a kind
    policy's replacement (flagged, and attested by `forwarded_sha256`), plus
    the annotations its kind surfaces on forwards: those the decision names
    in `surfaced` (and its attestation binds), or, for a decision stored
    before `surfaced` existed, those its kind's `forward_annotations` names
    (unbound, as that decision was first emitted)."""
    if d.surfaced is not None:
        extra = annotation_headers(d)
    elif d.replacement is None and not d.annotations:
        return value, headers  # every forward of a kind without a policy outcome
    else:
        spec = KINDS.get(d.kind) if d.kind is not None and d.annotations else None
        extra = annotation_headers(d, spec.forward_annotations if spec is not None else ())
    if d.replacement is not None:
        return d.replacement, [*headers, (HEADER_REPLACED, b"1"), *extra]
    return value, [*headers, *extra] if extra else headers


def forward_output(
    downstream: str,
    record_key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]],
    proof: Sequence[tuple[str, bytes]],
    timestamp_ms: int | None,
    partition: int,
) -> Output:
    return Output(downstream, record_key, value, [*headers, *proof], timestamp_ms, partition if record_key is None else None)


def _why(
    decision_id: str, outcome: str, reason: str, detail: str, source: Coordinates, prior_decision_id: str | None
) -> list[tuple[str, bytes]]:
    extra = [
        (HEADER_DECISION_ID, decision_id.encode()),
        (HEADER_OUTCOME, outcome.encode()),
        (HEADER_REASON, reason.encode()),
        (HEADER_DETAIL, detail.encode()[:MAX_DETAIL_BYTES]),
        (HEADER_SOURCE, f"{source.topic}/{source.partition}/{source.offset}".encode()),
    ]
    if prior_decision_id is not None:
        extra.append((HEADER_PRIOR, prior_decision_id.encode()))
    return extra


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
    fits: Callable[[Output], bool] | None = None,
) -> Output:
    """The original value and headers untouched, followed by why; or, if
    that record does not pass `fits`, the bounded form (`bounded_dead_letter`).
    `fits` None is `fits_any_limit`: a caller that does not size its outputs
    itself still never writes one a broker could refuse."""
    extra = _why(decision_id, outcome, reason, detail, source, prior_decision_id)
    original = value
    if value is not None and max_payload_bytes is not None and len(value) > max_payload_bytes:
        # Too big to re-produce safely: point at the original (still in the
        # input topic at busguard-source) and identify it by hash instead.
        extra += _original(HEADER_ORIGINAL_LENGTH, HEADER_ORIGINAL_SHA256, value)
        value = None
    if record_key is None:  # place it deterministically; Kafka also needs a key or a value
        key, spread = None if value is not None else decision_id.encode(), source.partition
    else:
        key, spread = record_key, None
    o = Output(topic, key, value, [*headers, *extra, *proof], timestamp_ms, spread)
    if (fits or fits_any_limit)(o):
        return o
    why = (decision_id, reason, detail, source, outcome, prior_decision_id, proof, timestamp_ms)
    return bounded_dead_letter(topic, record_key, original, headers, *why)


#: Every record batch of at most this many uncompressed bytes fits the
#: smallest `kafka.max_message_bytes` allowed, whatever the codec (each
#: codec's worst-case growth taken off; snappy's is the largest).
ANY_LIMIT_BATCH_SIZE: Final = min(producer_batch_size(MIN_MAX_MESSAGE_BYTES, c) for c in get_args(Compression))


def fits_any_limit(o: Output) -> bool:
    """Whether `o` fits every broker busguard may be configured for."""
    return batch_size(o) <= ANY_LIMIT_BATCH_SIZE


def bounded_dead_letter(
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
    timestamp_ms: int | None = None,
) -> Output:
    """A dead-letter too large to carry its input: why, plus the length and
    SHA-256 of the value, the headers (their `headers_encoding`) and the key,
    and nothing of the input itself, so its size has a bound that does not
    depend on the input (tests/unit/test_output_size.py). The original is
    still in the input topic at busguard-source."""
    extra = _why(decision_id, outcome, reason, detail, source, prior_decision_id)
    if value is not None:
        extra += _original(HEADER_ORIGINAL_LENGTH, HEADER_ORIGINAL_SHA256, value)
    extra += _original(HEADER_ORIGINAL_HEADERS_LENGTH, HEADER_ORIGINAL_HEADERS_SHA256, headers_encoding(headers))
    if record_key is not None:
        extra += _original(HEADER_ORIGINAL_KEY_LENGTH, HEADER_ORIGINAL_KEY_SHA256, record_key)
    return Output(topic, decision_id.encode(), None, [*extra, *proof], timestamp_ms, source.partition)


def _original(length_header: str, sha256_header: str, data: bytes) -> list[tuple[str, bytes]]:
    """What identifies input bytes a dead-letter does not carry: their length and SHA-256."""
    return [(length_header, str(len(data)).encode()), (sha256_header, hashlib.sha256(data).hexdigest().encode())]


def worst_proof(guard_id: str, max_leaves: int = MAX_LEAVES) -> list[tuple[str, bytes]]:
    """Proof headers at least as long as any the guard writes: the
    attestation of a decision whose every field is at its longest (with
    both optional hashes, `forwarded_sha256` and `annotations_sha256`), under the
    longest tree head with the longest inclusion proof of a batch of
    `max_leaves` (a batch seal is always the longer of the two kinds)."""
    att = attest_record(
        guard_id,
        "f" * 32,
        max(map(str, Outcome), key=len),
        max(map(str, Reason), key=len),
        "f" * 64,
        Coordinates(topic="x" * 249, partition=-(2**31), offset=-(2**63)),
        -(2**63),
        b"",
        forwarded_sha256="f" * 64,
        annotations_sha256="f" * 64,
    )
    return batch_proof_headers("f" * 32, att, *worst_batch_proof(guard_id, max_leaves))


def worst_batch_proof(guard_id: str, max_leaves: int) -> BatchProof:
    """The longest head, head seal and inclusion proof a batch of `max_leaves` can have."""
    return BatchProof(worst_head(guard_id), b"A" * 86, worst_inclusion(max_leaves))


def worst_batch_sealed(d: Decision, decision_json: bytes, attestation: bytes, guard_id: str, max_leaves: int) -> Sealed:
    """`d` as if batch-sealed with the longest head and proof its batch can
    have: what a forward is sized with before its batch's tree exists."""
    return Sealed(d, decision_json, attestation, b"", worst_batch_proof(guard_id, max_leaves))


class OutputBudget:
    """What fits under the brokers' kafka.max_message_bytes.

    An output whose uncompressed batch is at most the producer's batch size
    fits whatever batch it joins (the builder fills batches to that size,
    which compresses to at most the limit). A larger one travels alone in
    its batch (the builder admits it only into an empty batch and nothing
    after it), so building that single-record batch measures it exactly."""

    def __init__(self, max_message_bytes: int, compression: Compression, guard_id: str, max_leaves: int = MAX_LEAVES) -> None:
        self.limit = max_message_bytes
        self.compression = compression
        self.batch_size = producer_batch_size(max_message_bytes, compression)
        # What the worst-case proof headers add to any record: their own
        # bytes, plus a byte each for the header count's and the record
        # length's varints growing.
        proof = worst_proof(guard_id, max_leaves)
        self._proof_bytes = record_size(None, None, proof) - record_size(None, None, []) + 2

    def sent_size(self, o: Output) -> int:
        return compressed_batch_size(o, self.compression)

    def fits(self, o: Output) -> bool:
        if batch_size(o) <= self.batch_size:
            return True
        return self.compression != "none" and self.sent_size(o) <= self.limit

    def refusal(
        self,
        d: Decision,
        record_key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]],
        seal: Callable[[Decision], Sealed],
    ) -> str | None:
        """Why one of `d`'s outputs cannot be produced, or None: its forward,
        and, when a kind's policy gave it an outcome (annotations, a
        replacement, notices), its decision record (the audit record, or
        the escalation: the same value, key and headers) and each notice.
        A decision without a policy outcome needs no look at its decision
        record: that is bounded by the receipt (docs/protocol.md 12.5,
        tests/unit/test_output_size.py). Seals (and, past the cheap bound,
        compresses) only records that are close to the limit."""
        c = self.compression
        if d.outcome == Outcome.FORWARD:
            fwd_value, fwd_headers = forwarded(d, value, headers)
            size = self._too_big(d, seal, Output("", record_key, fwd_value, list(fwd_headers)), proof_last=True)
            if size is not None:
                return (
                    f"the forwarded record would be a {size}-byte record batch (compression {c}), "
                    f"over kafka.max_message_bytes {self.limit}: value {len(fwd_value or b'')} bytes, {len(fwd_headers)} headers, "
                    f"key {len(record_key or b'')} bytes"
                )
        if d.annotations is None and d.notices is None and d.replacement is None:
            return None
        verdict = list(verdict_headers(d.outcome, d.reason))
        body = decision_bytes(d)
        task_key = d.task_id.encode() if d.task_id is not None else d.decision_id.encode()
        size = self._too_big(d, seal, Output("", task_key, body, verdict))
        if size is not None:
            annotations = sum(len(k) + len(v) for k, v in (d.annotations or {}).items())
            return (
                f"its decision record would be a {size}-byte record batch (compression {c}), over kafka.max_message_bytes "
                f"{self.limit}: the decision is {len(body)} bytes, its annotations {annotations} characters"
            )
        for n in d.notices or ():
            size = self._too_big(d, seal, Output("", n.key, n.data, [*verdict, (HEADER_ROUTE, n.route.encode())]))
            if size is not None:
                return (
                    f"its notice to route {n.route[:64]!r} would be a {size}-byte record batch (compression {c}), "
                    f"over kafka.max_message_bytes {self.limit}: value {len(n.data)} bytes, key {len(n.key or b'')} bytes"
                )
        return None

    def _too_big(self, d: Decision, seal: Callable[[Decision], Sealed], o: Output, proof_last: bool = False) -> int | None:
        """The size of `o` with `d`'s proof headers (first, or after the
        others) as sent, if that cannot be produced; else None. The cheap
        bounds first (any proof fits in `_proof_bytes`), and only then the
        record with `d`'s own proof, built and compressed."""
        if BATCH_OVERHEAD + record_size_bound(o.key, o.value, o.headers) + self._proof_bytes <= self.batch_size:
            return None  # the common case, without record_size's varint loops
        if BATCH_OVERHEAD + record_size(o.key, o.value, o.headers) + self._proof_bytes <= self.batch_size:
            return None
        proof = seal(d).proof()
        sent = o._replace(headers=[*o.headers, *proof] if proof_last else [*proof, *o.headers])
        return None if self.fits(sent) else self.sent_size(sent)
