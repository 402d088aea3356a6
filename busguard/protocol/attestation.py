"""busguard's own signed statement about each decision.

Every record busguard emits (forwarded, escalated, dead-lettered, audited)
carries two headers:

    busguard-attestation   JSON bytes of an `Attestation`
    busguard-seal          unpadded base64url Ed25519 signature by the guard's key over
                           b"busguard/attestation/v1" 0x00 || attestation bytes

The attestation binds the decision id, outcome, reason, the receipt it judged
and where that receipt was read, plus the SHA-256 of the decision record
(the audit topic's value), and on a forward that surfaces annotations the
SHA-256 of its `busguard-annotation-*` headers (`annotations_sha256`). So
one signature per input serves all outputs: a receiver checks the forwarded
receipt against `receipt_id` (and the annotation headers against
`annotations_sha256`); the auditor checks the decision record against
`decision_sha256`.

Deterministic (Ed25519 signatures are, and the attestation is a pure
function of the persisted decision), so a re-emission after a crash is
byte-identical.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import Final

import msgspec

from busguard.protocol.envelope import HEADER_RECEIPT, b64url_decode_strict, b64url_encode
from busguard.protocol.identity import canonical_principal
from busguard.protocol.receipt import ReceiptError, decode_receipt, payload_hash, receipt_id
from busguard.protocol.records import Coordinates, Decision, carried, headers_encoding, replacement_sha256
from busguard.protocol.signing import Signer, verify_signature
from busguard.protocol.treehead import (
    HEADER_HEAD_SEAL,
    HEADER_INCLUSION,
    HEADER_TREE_HEAD,
    TreeHead,
    TreeHeadError,
    decode_head,
    head_message,
    included,
)

ATTESTATION_CONTEXT: Final = b"busguard/attestation/v1\x00"
HEADER_ATTESTATION: Final = "busguard-attestation"
HEADER_SEAL: Final = "busguard-seal"
HEADER_DECISION_ID: Final = "busguard-decision-id"
HEADER_OUTCOME: Final = "busguard-outcome"
HEADER_REASON: Final = "busguard-reason"
HEADER_DETAIL: Final = "busguard-detail"
HEADER_SOURCE: Final = "busguard-source"
HEADER_PRIOR: Final = "busguard-prior-decision-id"
#: On a forward whose value a kind's policy replaced ("1"), and on a kind's
#: notice (the route it was sent to); `busguard-annotation-<name>` carries
#: an annotation the kind surfaces on its forwards (KindSpec.forward_annotations).
HEADER_REPLACED: Final = "busguard-replaced"
HEADER_ROUTE: Final = "busguard-route"
HEADER_ANNOTATION_PREFIX: Final = "busguard-annotation-"
_ANNOTATION_PREFIX_LEN: Final = len(HEADER_ANNOTATION_PREFIX)
#: The headers that carry a seal, of either kind (`open_sealed`).
_SEAL_HEADERS: Final = (HEADER_ATTESTATION, HEADER_SEAL, HEADER_TREE_HEAD, HEADER_HEAD_SEAL, HEADER_INCLUSION)

_decision_encoder: Final = msgspec.json.Encoder()


class Attestation(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """`forwarded_sha256` is present only on the attestation of a decision whose
    kind's policy replaced the forwarded value (docs/protocol.md, "Replaced
    forwards"): the value a receiver holds is then that one, not the value the
    receipt's `payload_hash` names. `annotations_sha256` is present only on
    the attestation of a forward whose decision has `surfaced`: the SHA-256
    of the `headers_encoding` of exactly the `busguard-annotation-*` headers
    the forward carries, in order (`annotation_headers`), so they are under
    the seal. Absent, either field, the attestation encodes exactly as before
    that field existed."""

    v: int
    guard: str
    decision_id: str
    outcome: str
    reason: str
    receipt_id: str | None
    source: Coordinates
    decided_at: int
    decision_sha256: str
    forwarded_sha256: str | None = None
    annotations_sha256: str | None = None


_attestation_decoder: Final = msgspec.json.Decoder(Attestation)


class AttestationError(ValueError):
    pass


class InclusionError(AttestationError):
    """A batch seal whose head verifies but whose inclusion proof does not
    prove this attestation: the auditor reports it apart (`bad_inclusion`)."""


def decision_bytes(decision: Decision) -> bytes:
    """The canonical bytes of a decision record (the audit topic's value):
    the decision as its record carries it (`carried`: a policy's
    replacement and notice values by hash, docs/protocol.md 12.5)."""
    return _decision_encoder.encode(carried(decision))


def annotation_headers(decision: Decision, names: Sequence[str] | None = None) -> list[tuple[str, bytes]]:
    """The `busguard-annotation-<name>` headers of a forward, in order, for
    each of `names` (default: the decision's `surfaced`; for a decision
    stored before `surfaced` existed, its kind's `forward_annotations`) that
    the decision's `annotations` has: one function for the guard's forward
    (runtime.outputs.forwarded) and its attestation, so they cannot differ."""
    values = decision.annotations or {}
    chosen = (decision.surfaced or ()) if names is None else names
    return [(HEADER_ANNOTATION_PREFIX + name, values[name].encode()) for name in chosen if name in values]


def annotations_sha256(headers: Sequence[tuple[str, bytes | None]]) -> str:
    """Lowercase hex SHA-256 of the `headers_encoding` of annotation headers
    (docs/protocol.md 12.1); of the empty list, SHA-256 of four zero bytes."""
    return hashlib.sha256(headers_encoding(headers)).hexdigest()


def attest(decision: Decision, decision_json: bytes, guard_id: str) -> bytes:
    replaced = replacement_sha256(decision)
    surfaced = None if decision.surfaced is None else annotations_sha256(annotation_headers(decision))
    return attest_record(
        guard_id,
        decision.decision_id,
        decision.outcome,
        decision.reason,
        decision.receipt_id,
        decision.source,
        decision.decided_at,
        decision_json,
        forwarded_sha256=replaced,
        annotations_sha256=surfaced,
    )


def attest_record(
    guard_id: str,
    record_id: str,
    outcome: str,
    reason: str,
    receipt_id: str | None,
    source: Coordinates,
    at_ms: int,
    body: bytes,
    *,
    forwarded_sha256: str | None = None,
    annotations_sha256: str | None = None,
) -> bytes:
    """The attestation for any record busguard writes; `body` is the record's
    value (a decision, a resolution, a reply) and is bound by its SHA-256."""
    return _decision_encoder.encode(
        Attestation(
            v=1,
            guard=guard_id,
            decision_id=record_id,
            outcome=outcome,
            reason=reason,
            receipt_id=receipt_id,
            source=source,
            decided_at=at_ms,
            decision_sha256=hashlib.sha256(body).hexdigest(),
            forwarded_sha256=forwarded_sha256,
            annotations_sha256=annotations_sha256,
        )
    )


def seal(signer: Signer, attestation: bytes) -> bytes:
    return b64url_encode(signer.sign(ATTESTATION_CONTEXT + attestation)).encode("ascii")


class HeadCache:
    """Tree heads whose seal verified with one key, so a reader checks one
    signature per batch, not per record. Bounded: the oldest is forgotten
    first. Shared by worker threads: reads take no lock (a miss costs one
    more verify), writes do."""

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._heads: dict[tuple[bytes, bytes, bytes], TreeHead] = {}
        self._lock = threading.Lock()

    def get(self, key: bytes, raw: bytes, seal_b64: bytes) -> TreeHead | None:
        return self._heads.get((key, raw, seal_b64))

    def add(self, key: bytes, raw: bytes, seal_b64: bytes, head: TreeHead) -> None:
        with self._lock:
            self._heads[(key, raw, seal_b64)] = head
            while len(self._heads) > self.capacity:
                del self._heads[next(iter(self._heads))]


class Opened(msgspec.Struct, frozen=True, kw_only=True):
    """A sealed output opened: its attestation and, when batch-sealed, the
    head and the leaf index the inclusion proof put it at."""

    attestation: Attestation
    raw: bytes
    head: TreeHead | None = None
    head_raw: bytes | None = None
    index: int | None = None


def open_sealed(headers: Sequence[tuple[str, bytes]], guard_public_key: bytes, heads: HeadCache | None = None) -> Opened:
    """The attestation on a busguard output after checking its seal: either
    a per-record `busguard-seal`, or a batch seal (a tree head whose seal
    verifies, and an inclusion proof of this attestation in its tree)."""
    found: dict[str, list[bytes]] = {}
    for k, v in headers:
        if k in _SEAL_HEADERS:
            if v is None:  # Kafka allows a null header value; anyone who may write the topic can send one
                raise AttestationError(f"{k} has a null value")
            found.setdefault(k, []).append(v)
    if any(len(vs) != 1 for vs in found.values()) or HEADER_ATTESTATION not in found:
        raise AttestationError("exactly one busguard-attestation header, and at most one of each seal header, are required")
    att_raw = found[HEADER_ATTESTATION][0]
    batch = {HEADER_TREE_HEAD, HEADER_HEAD_SEAL, HEADER_INCLUSION}
    if HEADER_SEAL in found:
        if batch & found.keys():
            raise AttestationError("busguard-seal and a batch seal (busguard-tree-head) on one record")
        try:
            signature = b64url_decode_strict(found[HEADER_SEAL][0], 64)
        except ValueError as exc:
            raise AttestationError(f"busguard-seal: {exc}") from None
        if not verify_signature(guard_public_key, ATTESTATION_CONTEXT + att_raw, signature):
            raise AttestationError("busguard-seal does not verify with the guard's public key")
        return Opened(attestation=decode_attestation(att_raw), raw=att_raw)
    if not batch <= found.keys():
        raise AttestationError("no busguard-seal, and not all of busguard-tree-head, busguard-head-seal and busguard-inclusion")
    head_raw, head_seal = found[HEADER_TREE_HEAD][0], found[HEADER_HEAD_SEAL][0]
    head = heads.get(guard_public_key, head_raw, head_seal) if heads is not None else None
    if head is None:
        try:
            signature = b64url_decode_strict(head_seal, 64)
        except ValueError as exc:
            raise AttestationError(f"busguard-head-seal: {exc}") from None
        if not verify_signature(guard_public_key, head_message(head_raw), signature):
            raise AttestationError("busguard-head-seal does not verify with the guard's public key")
        try:
            head = decode_head(head_raw)
        except TreeHeadError as exc:
            raise AttestationError(str(exc)) from None
        if heads is not None:
            heads.add(guard_public_key, head_raw, head_seal, head)
    try:
        index = included(att_raw, head, found[HEADER_INCLUSION][0])
    except TreeHeadError as exc:
        raise InclusionError(str(exc)) from None
    return Opened(attestation=decode_attestation(att_raw), raw=att_raw, head=head, head_raw=head_raw, index=index)


def open_attestation(headers: Sequence[tuple[str, bytes]], guard_public_key: bytes, heads: HeadCache | None = None) -> Attestation:
    """The attestation on a busguard output, after checking the guard's seal
    (per record, or the batch's head and this record's inclusion proof)."""
    return open_sealed(headers, guard_public_key, heads).attestation


def verify_admitted(
    value: bytes,
    headers: Sequence[tuple[str, bytes]],
    guard_public_key: bytes,
    receiver: str | None,
    *,
    any_receiver: bool = False,
    heads: HeadCache | None = None,
) -> Attestation:
    """For downstream agents: prove a record was admitted by busguard, for you.

    Checks the guard's seal, then everything `check_admitted` checks, then
    that the admitted receipt is addressed to `receiver` (the opener's own
    agent id, compared as canonical principals): a handoff signed for
    someone else must not be acted on, or a receipt could be redirected.
    `receiver=None, any_receiver=True` skips that last check, for readers
    that act for no one (auditors, taps). Raises AttestationError otherwise.
    """
    if (receiver is None) != any_receiver:
        raise TypeError("pass the opener's agent id as receiver, or receiver=None with any_receiver=True")
    att = check_admitted(open_attestation(headers, guard_public_key, heads), value, headers)
    if receiver is not None:
        check_receiver(headers, receiver)
    return att


def check_receiver(headers: Sequence[tuple[str, bytes]], receiver: str) -> None:
    """The (single) receipt in `headers` is addressed to `receiver`, as canonical principals."""
    want = canonical_principal(receiver)  # a malformed own id is the caller's bug: ValueError
    raw = [v for k, v in headers if k == HEADER_RECEIPT]
    if len(raw) != 1 or raw[0] is None:
        raise AttestationError("exactly one busguard-receipt header, with a value, is required")
    try:
        addressed = decode_receipt(raw[0]).receiver
        to = canonical_principal(addressed)
    except (ReceiptError, ValueError) as exc:
        raise AttestationError(f"busguard-receipt: {exc}") from None
    if to != want:
        raise AttestationError(f"the receipt is addressed to {addressed[:128]!r}, not to {receiver[:128]!r}")


def check_admitted(
    att: Attestation, value: bytes, headers: Sequence[tuple[str, bytes]], *, unbound_annotations: bool = False
) -> Attestation:
    """The checks after the seal (for callers that already verified it):
    the outcome is `forward`, the `busguard-decision-id` header (what
    consumers dedupe on) is the attested one, the attestation names the
    receipt in this record, the payload is the one the receipt hashed —
    or, when a kind's policy replaced the forwarded value, the one the
    attestation's `forwarded_sha256` names (the receipt still names the
    value the sender signed, which the guard judged) — and the annotation
    headers are the attested ones (`check_annotations`).
    `unbound_annotations=True` is for the auditor alone (see there)."""
    if att.outcome != "forward":
        raise AttestationError(f"outcome is {att.outcome!r}, not 'forward'")
    ids = [v for k, v in headers if k == HEADER_DECISION_ID]
    if ids != [att.decision_id.encode()]:
        raise AttestationError("busguard-decision-id is missing, repeated, or not the attested decision id")
    receipts = [v for k, v in headers if k == HEADER_RECEIPT]
    if len(receipts) != 1 or receipts[0] is None:
        raise AttestationError("exactly one busguard-receipt header, with a value, is required")
    if receipt_id(receipts[0]) != att.receipt_id:
        raise AttestationError("the attestation is for a different receipt")
    check_annotations(att, headers, unbound=unbound_annotations)
    if att.forwarded_sha256 is not None:
        if hashlib.sha256(value).hexdigest() != att.forwarded_sha256:
            raise AttestationError("the payload is not the replacement the guard attested (forwarded_sha256)")
        return att
    try:
        claimed = msgspec.json.decode(receipts[0], type=dict[str, object]).get("payload_hash")
    except msgspec.DecodeError:
        raise AttestationError("busguard-receipt is not JSON") from None
    if claimed != payload_hash(value):
        raise AttestationError("the payload is not the one the receipt hashed")
    return att


def check_annotations(att: Attestation, headers: Sequence[tuple[str, bytes]], *, unbound: bool = False) -> None:
    """Every header whose name starts, in any letter case, with
    `busguard-annotation-` (the guard writes them lowercase; a case-folding
    reader must not find one the seal does not cover), in record order, must
    be exactly what `annotations_sha256` binds: a changed, added, removed,
    duplicated or reordered one is refused. An attestation without it binds
    no annotation, so a forward carrying one is refused: it is a forward
    from before the field existed, or a copy someone added headers to, and
    a reader cannot tell which. `unbound=True` (the auditor, reading a log
    that spans the upgrade) lets those through; a bound one is checked
    whatever `unbound` says."""
    found = [
        (k, v) for k, v in headers if len(k) >= _ANNOTATION_PREFIX_LEN and k[:_ANNOTATION_PREFIX_LEN].lower() == HEADER_ANNOTATION_PREFIX
    ]
    if att.annotations_sha256 is None:
        if found and not unbound:
            raise AttestationError(
                f"{len(found)} busguard-annotation-* header(s) ({found[0][0][:64]!r} first) that the attestation does not bind "
                "(no annotations_sha256: a forward from before annotations were sealed, or headers added to one)"
            )
        return
    if annotations_sha256(found) != att.annotations_sha256:
        names = ", ".join(k[:64] for k, _ in found[:8]) or "none"
        raise AttestationError(
            f"the busguard-annotation-* headers ({len(found)}: {names}) are not the ones the guard attested (annotations_sha256)"
        )


def decode_attestation(raw: bytes) -> Attestation:
    try:
        return _attestation_decoder.decode(raw)
    except msgspec.MsgspecError as exc:
        raise AttestationError(f"busguard-attestation is malformed: {exc}") from None


def verify_decision_record(
    value: bytes, headers: Sequence[tuple[str, bytes]], guard_public_key: bytes, heads: HeadCache | None = None
) -> Attestation:
    """For auditors: the attestation on an audit/escalation record, bound to its value."""
    return open_decision_record(value, headers, guard_public_key, heads).attestation


def open_decision_record(
    value: bytes, headers: Sequence[tuple[str, bytes]], guard_public_key: bytes, heads: HeadCache | None = None
) -> Opened:
    """`verify_decision_record`, keeping the head and leaf index (the auditor's chain check)."""
    opened = open_sealed(headers, guard_public_key, heads)
    if hashlib.sha256(value).hexdigest() != opened.attestation.decision_sha256:
        raise AttestationError("the record's value is not the decision the guard attested")
    return opened
