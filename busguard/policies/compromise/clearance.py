"""Issue 22: a compromise notice lifted by its issuer (`compromise-clearance`).

A clearance is the issuer's signed word that one notice no longer holds from
`cleared_at` on. It travels like the notice on busguard's input topics: the
value of a receipt of kind `compromise-clearance` whose sender is the
issuer, so the receipt's signature (which covers the value through
`payload_hash`) is the issuer's signature of the clearance. There is no
separate clearance signature and no notice-topic form.

It names the notice three ways: the row the notice is kept under (`subject`
and at most one of `session_id`, `subject_key_id`, exactly as in the
notice), its `notice_id`, and `notice_sha256`, the SHA-256 of the notice's
exact bytes as the row entry keeps it. The hash is what stops a clearance
written for one notice from lifting another that happens to share its id
and row (a re-issued notice, another deployment's).

Why each refusal (docs/protocol.md 14.4 gives the order):

- only the notice's own issuer, signing with the same key that signed the
  notice, may lift it: the notice's authority was that key's, and an issuer
  whose other key was stolen must not be able to undo a notice with it;
- the issuer must still be trusted and must not itself be under a notice in
  force at the clearance's decision (lifecycle.standing, the same two
  instants as a handoff): a compromised issuer's word lifts nothing;
- the notice must be on its row (no pre-clearance of a notice busguard has
  not seen: it would lift the notice the moment it arrives), with that hash;
- the first admitted clearance wins; another is `notice_already_cleared`,
  and so is the notice re-sent (policy.py), so a cleared id stays cleared;
- `cleared_at` at most `notice_expiry_horizon_ms` after the guard's clock,
  like `expires_at`: a clearance may schedule an end no further ahead than
  a notice could. (The row's retention still bounds the notice's life: a
  row that expires before `cleared_at` ends the notice there, as it would
  without a clearance.)

When it counts: the clearance is stored on the notice's row entry
(`cleared_at`, `cleared_by` = the clearance's receipt id), so a handoff
decided before the clearance was admitted (earlier in the batch, or an
earlier batch) read the row without it and stays under the notice; one
decided after it is not, once the EARLIER of its `issued_at` and the guard's
clock is at or past `cleared_at` (lifecycle.py says why the earlier). The
row is rewritten with exactly the time it had left: a clearance never makes
state live longer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Final

import msgspec

from busguard.policies.compromise.checks import notice_covers, principal, timestamp_ms
from busguard.policies.compromise.lifecycle import Standing, encode_row, standing
from busguard.policies.compromise.message import (
    CompromiseClearance,
    CompromiseNotice,
    MessageCode,
    MessageError,
    decode_strict,
)
from busguard.policies.compromise.policy import (
    agent_row,
    covers_label,
    entries_at,
    key_row,
    row_for,
    session_row,
    settings_of,
    signing_key_id,
)
from busguard.policies.seam import Objection, PolicyContext, PolicyInput, PolicyKey, PolicyOutcome, PolicyView, PolicyWrite
from busguard.protocol.identity import canonical_principal
from busguard.protocol.reasons import Outcome, Reason

KIND_COMPROMISE_CLEARANCE: Final = "compromise-clearance"
CLEARANCE_REASONS: Final = (
    Reason.CLEARANCE_MALFORMED,
    Reason.CLEARANCE_UNAUTHENTIC,
    Reason.CLEARANCE_TOO_FAR,
    Reason.CLEARANCE_UNKNOWN_NOTICE,
    Reason.CLEARANCE_NOTICE_MISMATCH,
    Reason.CLEARANCE_ISSUER_UNDER_NOTICE,
    Reason.NOTICE_ALREADY_CLEARED,
)


def clearance_for(notice_bytes: bytes, cleared_at: str, detail: str = "") -> CompromiseClearance:
    """The clearance of the notice whose exact value was `notice_bytes`, by
    its issuer: what a sender signs as a `compromise-clearance` receipt."""
    notice = decode_strict(notice_bytes, CompromiseNotice, "notice")
    return CompromiseClearance(
        v=1,
        notice_id=notice.notice_id,
        notice_sha256=hashlib.sha256(notice_bytes).hexdigest(),
        issuer=notice.issuer,
        subject=notice.subject,
        cleared_at=cleared_at,
        session_id=notice.session_id,
        subject_key_id=notice.subject_key_id,
        detail=detail,
    )


def check_clearance_fields(clearance: CompromiseClearance) -> None:
    """What the schema cannot say: agent ids, a protocol 6.1 `cleared_at`,
    at most one of `session_id` and `subject_key_id` (as in the notice)."""
    principal(clearance.issuer, "clearance.issuer")
    principal(clearance.subject, "clearance.subject")
    timestamp_ms(clearance.cleared_at, "clearance.cleared_at")
    if clearance.session_id is not None and clearance.subject_key_id is not None:
        raise MessageError(MessageCode.MALFORMED_FIELD, "clearance", "at most one of session_id and subject_key_id may be given")


def clearance_row(clearance: CompromiseClearance) -> PolicyKey:
    """The row its notice is kept under (policy.notice_row of the notice)."""
    return row_for(canonical_principal(clearance.subject), clearance.session_id, clearance.subject_key_id)


class ParsedClearance(msgspec.Struct, frozen=True, kw_only=True):
    clearance: CompromiseClearance
    issuer: str  # canonical principal
    row: PolicyKey  # the notice's
    issuer_rows: tuple[PolicyKey, ...]  # where a notice against the issuer would be kept
    key_id: str | None  # the issuer's key that signed the receipt
    session_id: str | None  # the receipt's
    receipt_id: str
    receipt_ms: int
    horizon_ms: int


def _refuse(reason: Reason, detail: str, clearance: CompromiseClearance) -> PolicyOutcome:
    return PolicyOutcome(objection=Objection(Outcome.REJECT, reason, detail), annotations={"notice_id": clearance.notice_id})


class ClearancePolicy:
    """`compromise-clearance`: mark the named notice cleared on its row, once."""

    def parse(self, record: PolicyInput, context: PolicyContext) -> ParsedClearance | Objection:
        envelope = record.envelope
        settings = settings_of(context)
        try:
            clearance = decode_strict(envelope.payload, CompromiseClearance, "clearance")
            check_clearance_fields(clearance)
            receipt_ms = timestamp_ms(envelope.receipt.issued_at, "receipt.issued_at")
        except MessageError as exc:
            return Objection(Outcome.REJECT, Reason.CLEARANCE_MALFORMED, f"{exc.code}: {exc.where}: {exc.detail}")
        issuer = canonical_principal(clearance.issuer)
        if issuer not in {canonical_principal(t) for t in settings.trusted_notice_issuers}:
            detail = f"{MessageCode.UNTRUSTED_ISSUER}: clearance.issuer: {clearance.issuer!r} is not a trusted notice issuer"
            return Objection(Outcome.REJECT, Reason.CLEARANCE_UNAUTHENTIC, detail)
        if record.principal != issuer:
            detail = f"{MessageCode.WRONG_SIGNER}: clearance.issuer: the receipt is signed by {envelope.receipt.sender!r}, not the issuer"
            return Objection(Outcome.REJECT, Reason.CLEARANCE_UNAUTHENTIC, detail)
        key_id = signing_key_id(envelope, context.keys, issuer, context.now_ms)
        rows = [agent_row(issuer)]
        if envelope.receipt.session_id is not None:
            rows.append(session_row(issuer, envelope.receipt.session_id))
        if key_id is not None:
            rows.append(key_row(issuer, key_id))
        return ParsedClearance(
            clearance=clearance,
            issuer=issuer,
            row=clearance_row(clearance),
            issuer_rows=tuple(rows),
            key_id=key_id,
            session_id=envelope.receipt.session_id,
            receipt_id=envelope.receipt_id,
            receipt_ms=receipt_ms,
            horizon_ms=settings.notice_expiry_horizon_ms,
        )

    def keys(self, parsed: ParsedClearance) -> Iterable[PolicyKey]:
        return dict.fromkeys((parsed.row, *parsed.issuer_rows))

    def decide(self, parsed: ParsedClearance, view: PolicyView, now_ms: int) -> PolicyOutcome:
        c = parsed.clearance
        if timestamp_ms(c.cleared_at, "clearance.cleared_at") > now_ms + parsed.horizon_ms:
            detail = f"clearance.cleared_at: {c.cleared_at!r} is more than {parsed.horizon_ms} ms after the guard's clock"
            return _refuse(Reason.CLEARANCE_TOO_FAR, detail, c)
        kept = {e.notice.notice_id: e for e in entries_at(view, parsed.row)}
        entry = kept.get(c.notice_id)
        if entry is None:
            covers = covers_label(c.session_id, c.subject_key_id)
            detail = f"no notice {c.notice_id!r} is kept for {c.subject!r} ({covers}); a notice must be admitted before it can be cleared"
            return _refuse(Reason.CLEARANCE_UNKNOWN_NOTICE, detail, c)
        if entry.sha256 != c.notice_sha256 or entry.issuer_key_id is None or entry.row_expires_ms is None:
            detail = (
                f"notice {c.notice_id!r} is kept with sha256 {entry.sha256!r}, not {c.notice_sha256!r}"
                if entry.sha256 and entry.issuer_key_id is not None and entry.row_expires_ms is not None
                else f"notice {c.notice_id!r} was kept before clearances existed (no hash or key recorded): it lasts its retention"
            )
            return _refuse(Reason.CLEARANCE_NOTICE_MISMATCH, detail, c)
        if canonical_principal(entry.notice.issuer) != parsed.issuer:
            detail = f"{MessageCode.WRONG_ISSUER}: clearance.issuer: notice {c.notice_id!r} was issued by {entry.notice.issuer!r}, not {c.issuer!r}"
            return _refuse(Reason.CLEARANCE_UNAUTHENTIC, detail, c)
        if parsed.key_id != entry.issuer_key_id:
            detail = f"{MessageCode.WRONG_KEY}: receipt: signed with key {parsed.key_id!r}, the notice with {entry.issuer_key_id!r}"
            return _refuse(Reason.CLEARANCE_UNAUTHENTIC, detail, c)
        keys = () if parsed.key_id is None else (parsed.key_id,)
        against = sorted(
            {
                e.notice.notice_id
                for row in parsed.issuer_rows
                for e in entries_at(view, row)
                if notice_covers(e.notice, parsed.issuer, parsed.session_id, keys)
                and standing(e, parsed.receipt_ms, now_ms) is Standing.IN_FORCE
            }
        )
        if against:
            detail = f"issuer {c.issuer!r} is under notice {','.join(against)}: a compromised issuer's clearance lifts nothing"
            return _refuse(Reason.CLEARANCE_ISSUER_UNDER_NOTICE, detail, c)
        if entry.cleared_at is not None:
            detail = f"notice {c.notice_id!r} was cleared by {entry.cleared_by} from {entry.cleared_at}; the first clearance stands"
            return _refuse(Reason.NOTICE_ALREADY_CLEARED, detail, c)
        kept[c.notice_id] = msgspec.structs.replace(entry, cleared_at=c.cleared_at, cleared_by=parsed.receipt_id)
        # Exactly the time the row had left (at least 1 ms: a row read here has not expired).
        write = PolicyWrite(parsed.row, encode_row(kept.values()), ttl_ms=max(1, entry.row_expires_ms - now_ms))
        annotations = {
            "notice_id": c.notice_id,
            "notice_sha256": c.notice_sha256,
            "subject": c.subject,
            "covers": covers_label(c.session_id, c.subject_key_id),
            "cleared_at": c.cleared_at,
        }
        return PolicyOutcome(writes=(write,), annotations=annotations)


CLEARANCE_POLICY: Final = ClearancePolicy()
