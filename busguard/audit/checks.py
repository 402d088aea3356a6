"""One audit or downstream record checked on its own, and applied to a Ledger. Pure.

The reader (busguard.audit.reader) consumes the topics and runs these on a
thread pool: a seal verified, a record decoded, a forward's attestation
matched to the receiver; then, on the event loop's thread in log order,
`apply_audit` / `apply_forwarded` put the result in the ledger.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container, Sequence
from typing import Final, NamedTuple

import msgspec

from busguard.audit.deployment import PREFIX_CHARS
from busguard.audit.lineage import Ledger, Sealer
from busguard.protocol.attestation import (
    HEADER_ATTESTATION,
    HEADER_DECISION_ID,
    HEADER_SEAL,
    Attestation,
    AttestationError,
    HeadCache,
    InclusionError,
    Opened,
    check_admitted,
    decode_attestation,
    open_decision_record,
    open_sealed,
    verify_decision_record,
)
from busguard.protocol.records import AuditRecord, Coordinates, Decision, Resolution, audit_decoder, carried_mismatch
from busguard.protocol.treehead import HEADER_HEAD_SEAL, HEADER_INCLUSION, HEADER_TREE_HEAD, head_digest


class RawRecord(NamedTuple):
    """One consumed record, as `scan` hands it on."""

    topic: str
    value: bytes | None
    headers: list[tuple[str, bytes]]
    #: why the Kafka client could not decode it (busguard.runtime.tolerant_fetch);
    #: busguard never writes such a record, so it is foreign to the log
    undecodable: str | None = None
    partition: int = -1
    offset: int = -1

    @property
    def at(self) -> tuple[int, int] | None:
        """Where it was read (findings name it), if known."""
        return (self.partition, self.offset) if self.partition >= 0 else None


class CheckedAudit(NamedTuple):
    value: bytes | None
    record: AuditRecord | None  # None: not a decision or resolution
    verified: bool
    why: str
    seal: bytes | None = None  # seal_digest() of a record verified with the guard key, for known_seals
    sealed_by: Sealer = "guard"  # whose key verified it (meaningful when verified)
    opened: Opened | None = None  # batch-sealed and verified: its head and leaf index
    bad_inclusion: str | None = None  # its head verified, its inclusion proof did not


class CheckedForward(NamedTuple):
    topic: str
    decision_id: str
    ok: bool
    decision_sha256: str | None
    opened: Opened | None = None  # batch-sealed and verified: its head
    source: Coordinates | None = None  # the input record the verified attestation names


_BATCH_SEAL: Final = (HEADER_TREE_HEAD, HEADER_HEAD_SEAL, HEADER_INCLUSION)


def seal_digest(headers: Sequence[tuple[str, bytes]]) -> bytes | None:
    """Identifies the exact (attestation, seal) pair on a record, or the
    attestation with its batch seal (head, head seal, inclusion proof); None
    unless there is exactly one of each (anything else never verifies)."""
    atts = [v for k, v in headers if k == HEADER_ATTESTATION]
    seals = [v for k, v in headers if k == HEADER_SEAL]
    if len(atts) != 1:
        return None
    if len(seals) == 1:
        return hashlib.sha256(len(atts[0]).to_bytes(4, "big") + atts[0] + seals[0]).digest()
    batch = [[v for k, v in headers if k == name] for name in _BATCH_SEAL]
    if seals or any(len(vs) != 1 for vs in batch):
        return None
    parts = [atts[0], *(vs[0] for vs in batch)]
    return hashlib.sha256(b"batch" + b"".join(len(p).to_bytes(4, "big") + p for p in parts)).digest()


def check_audit_record(
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]],
    guard_public_key: bytes,
    reconciler_public_key: bytes | None = None,
    undecodable: str | None = None,
    heads: HeadCache | None = None,
) -> CheckedAudit:
    """Verify one audit record's seal (with the guard's key, else the
    reconciler's) and decode it; the Ledger judges whose key may seal what.
    A batch-sealed record keeps its verified head and leaf index (`opened`)
    for the chain checks."""
    if undecodable is not None:
        return CheckedAudit(value, None, False, f"the Kafka record cannot be decoded ({undecodable})")
    if value is None:
        return CheckedAudit(None, None, False, "the record has no value")
    why = ""
    sealed_by: Sealer = "guard"
    opened: Opened | None = None
    try:
        opened = open_decision_record(value, headers, guard_public_key, heads)
        att, verified = opened.attestation, True
    except InclusionError as exc:
        return CheckedAudit(value, None, False, str(exc), bad_inclusion=str(exc))
    except AttestationError as exc:
        att, verified, why = None, False, str(exc)
        if reconciler_public_key is not None and reconciler_public_key != guard_public_key:
            try:
                att, verified, why, sealed_by = verify_decision_record(value, headers, reconciler_public_key), True, "", "reconciler"
            except AttestationError:
                why = f"{why} (nor with the reconciler's)"
    digest = seal_digest(headers) if verified and sealed_by == "guard" else None
    try:
        record: AuditRecord | None = audit_decoder.decode(value)
    except msgspec.MsgspecError as exc:
        return CheckedAudit(value, None, verified, f"not a decision or resolution: {exc}", digest)
    if verified and att is not None and record is not None:
        own = record.decision_id if isinstance(record, Decision) else record.resolution_id
        if att.decision_id != own:
            verified, why = False, f"the attestation names {att.decision_id}, the record is {own}"
        elif isinstance(record, Decision) and (carried := carried_mismatch(record, att.forwarded_sha256)) is not None:
            verified, why = False, carried
    return CheckedAudit(
        value, record, verified, why, digest, sealed_by, opened if verified and opened is not None and opened.head is not None else None
    )


def _admitted_with_known_seal(value: bytes, headers: Sequence[tuple[str, bytes]]) -> Attestation:
    """verify_admitted, minus the seal (this seal was already verified on its audit record)."""
    att = decode_attestation(next(v for k, v in headers if k == HEADER_ATTESTATION))
    return check_admitted(att, value, headers, unbound_annotations=True)


def check_forwarded(
    topic: str,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]],
    guard_public_key: bytes,
    known_seals: Container[bytes] = frozenset(),
    heads: HeadCache | None = None,
) -> CheckedForward:
    """Verify one downstream record's attestation (`verify_admitted`).
    Annotation headers that the attestation binds (`annotations_sha256`)
    are checked; unbound ones are let through, unlike a receiver: a log
    read back across the upgrade holds forwards written before annotations
    were sealed, and each of those is a legitimate forward of its decision."""
    ids = [v for k, v in headers if k == HEADER_DECISION_ID]
    did = ids[0].decode("utf-8", "replace") if len(ids) == 1 else ""
    body = value if value is not None else b""
    opened: Opened | None = None
    try:
        digest = seal_digest(headers)
        if digest is not None and digest in known_seals:
            att = _admitted_with_known_seal(body, headers)
        else:
            # the auditor acts for no receiver: verify_admitted's checks, minus the receiver's
            opened = open_sealed(headers, guard_public_key, heads)
            att = check_admitted(opened.attestation, body, headers, unbound_annotations=True)
    except (AttestationError, msgspec.MsgspecError):
        return CheckedForward(topic, did, False, None)
    ok = bool(did) and att.decision_id == did
    return CheckedForward(
        topic, did, ok, att.decision_sha256, opened if opened is not None and opened.head is not None else None, att.source if ok else None
    )


def note_head(ledger: Ledger, opened: Opened, leaf: bool) -> None:
    """Record a verified head (and, from an audit record, its leaf) in the
    ledger, with the source of the record it proves (whose head it is)."""
    head, raw, att = opened.head, opened.head_raw, opened.attestation
    if head is not None and raw is not None:
        proves = (att.source.topic, att.source.partition, att.decision_id[:PREFIX_CHARS])
        ledger.add_head(
            head.guard, head.chain, head.seq, head_digest(raw), head.prev, head.size, head.sealed_at, opened.index if leaf else None, proves
        )


def apply_audit(ledger: Ledger, checked: CheckedAudit, at: tuple[int, int] | None = None) -> None:
    """Feed one checked audit record; `at` is where it was read (partition, offset)."""
    rec = checked.record
    if checked.bad_inclusion is not None:
        try:
            claimed = audit_decoder.decode(checked.value or b"")
            claim: str | None = claimed.decision_id if isinstance(claimed, Decision) else claimed.resolution_id
        except msgspec.MsgspecError:
            claim = None
        ledger.add_bad_inclusion(checked.value, claim, checked.bad_inclusion)
        return
    if checked.opened is not None:
        note_head(ledger, checked.opened, leaf=True)
    if rec is None:
        ledger.add_unreadable(checked.value, checked.verified, checked.why)
    elif isinstance(rec, Resolution):
        ledger.add_resolution(checked.value or b"", rec, checked.verified, checked.why, checked.sealed_by, at)
    else:
        ledger.add_decision(checked.value or b"", rec, checked.verified, checked.why, checked.sealed_by, at)


def apply_forwarded(ledger: Ledger, checked: CheckedForward, at: tuple[int, int] | None = None) -> None:
    """Feed one checked downstream record (and the head it verified under)."""
    ledger.add_forwarded(checked.topic, checked.decision_id, checked.ok, checked.decision_sha256, checked.source, at)
    if checked.opened is not None:
        note_head(ledger, checked.opened, leaf=False)


class SealCache:
    """Digests of seals verified in this run, oldest forgotten first. Written
    only from the event loop's thread; read from workers."""

    def __init__(self, capacity: int = 262_144) -> None:
        self.capacity = capacity
        self._seen: dict[bytes, None] = {}

    def __contains__(self, digest: object) -> bool:
        return digest in self._seen

    def add(self, digest: bytes) -> None:
        self._seen[digest] = None
        while len(self._seen) > self.capacity:
            del self._seen[next(iter(self._seen))]
