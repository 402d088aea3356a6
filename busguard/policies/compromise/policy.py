"""Seed 004 on the stream: the `session-handoff` and `compromise-notice` policies.

Both parse in the seam's `PolicyContext` (busguard.policies.seam): the
statements inside a handoff are signed by their own authors, so parsing needs
the batch's key registry, and the trusted attesters / notice issuers and the
declaration flag come from the deployment's `[compromise]` settings.

State. A compromise notice is its own kind: an operator or detector sends a
receipt of kind `compromise-notice` whose value is the notice (message.py)
and whose sender is the notice's issuer, a trusted notice issuer. Its policy
keeps the notice under the one row it covers, in the `compromise` namespace:
the subject agent as a whole, one of its sessions, or one of its keys
(`agent_row`, `session_row`, `key_row`). A later handoff names every row
that could cover its session, its successor or whoever vouched for the
successor, and `checks.check_handoff` decides which notices are in force.
The issuer may lift a notice with a `compromise-clearance` (clearance.py),
kept on the notice's row entry; so a notice id held on a row stays its
issuer's and key's (a re-send by anyone else would carry the right to clear it).

TTL (`notice_retention_ms`, default 30 days, at least the admission's
`session_retention_ms`): a notice marks compromise "from a time on", with no
end, but state must expire. It must outlive every session it could name
(the session window is kept that long, so a session that could still hand
off is still covered), and the durable answer to a compromised key is to
revoke it in the key registry, which an operator does well within the
retention; a notice re-sent refreshes it.

Outcomes (docs/protocol.md, "Session handoffs"): `forward` for `clean` and
`scoped` and for a double compromise under `partial_transfer` (annotated
`caution`), with only the transferred components when any were stripped (a
replacement value: the guard's attestation then carries `forwarded_sha256`);
`quarantined_state_only` rejects the record and sends the transferable
components to the `quarantine` route; `escalate` and a missing rule escalate;
`prohibited` rejects with the verdict's reason. Every outcome carries the
verdict, its reason and route, the manifest digest and the stripped
components (by hash) as annotations, so they are on the audit topic.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Final

import msgspec

from busguard.policies.compromise.checks import KeyLookup, check_handoff, check_notice_fields, principal
from busguard.policies.compromise.lifecycle import MAX_NOTICES_PER_ROW as MAX_NOTICES_PER_ROW  # the row bound, for tests
from busguard.policies.compromise.lifecycle import NAMESPACE as NAMESPACE
from busguard.policies.compromise.lifecycle import NoticeEntry, capped, encode_row
from busguard.policies.compromise.lifecycle import agent_row as agent_row
from busguard.policies.compromise.lifecycle import covers_label as covers_label
from busguard.policies.compromise.lifecycle import entries_at as entries_at
from busguard.policies.compromise.lifecycle import key_row as key_row
from busguard.policies.compromise.lifecycle import notice_row as notice_row
from busguard.policies.compromise.lifecycle import row_for as row_for
from busguard.policies.compromise.lifecycle import session_row as session_row
from busguard.policies.compromise.message import (
    CompromiseNotice,
    MessageCode,
    MessageError,
    SessionHandoff,
    SuccessorIntegrity,
    decode_handoff,
    decode_strict,
    encode,
    open_statement,
)
from busguard.policies.compromise.verdict import CompromisePolicy, HandoffFacts, Route, Verdict, VerdictReason, evaluate
from busguard.policies.seam import (
    KeySource,
    Objection,
    PolicyContext,
    PolicyInput,
    PolicyKey,
    PolicyOutcome,
    PolicyView,
    PolicyWrite,
)
from busguard.protocol.envelope import Envelope
from busguard.protocol.identity import canonical_principal
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.receipt import signing_input as receipt_signing_input
from busguard.protocol.records import Notice
from busguard.protocol.signing import verify_signature
from busguard.protocol.timestamps import parse_timestamp

KIND_COMPROMISE_NOTICE: Final = "compromise-notice"
SETTINGS_KEY: Final = "compromise"
ROUTE_QUARANTINE: Final = "quarantine"
DEFAULT_NOTICE_RETENTION_MS: Final = 30 * 86_400_000
#: How far after the guard's clock a notice's `expires_at` or a clearance's
#: `cleared_at` may lie (docs/protocol.md 14.2): one day.
DEFAULT_EXPIRY_HORIZON_MS: Final = 86_400_000
#: Annotations a forwarded handoff carries as `busguard-annotation-<name>` headers.
FORWARD_ANNOTATIONS: Final = ("verdict", "manifest_digest", "caution", "compromise_notices")

_AUTHENTICITY: Final = frozenset(
    {
        MessageCode.UNKNOWN_SIGNER,
        MessageCode.BAD_SIGNATURE,
        MessageCode.WRONG_HANDOFF,
        MessageCode.WRONG_SIGNER,
        MessageCode.WRONG_SUCCESSOR,
        MessageCode.UNTRUSTED_ISSUER,
    }
)

_OBJECTIONS: Final[Mapping[VerdictReason, tuple[Outcome, Reason]]] = {
    VerdictReason.UNDECLARED_COMPROMISE: (Outcome.REJECT, Reason.UNDECLARED_COMPROMISE),
    VerdictReason.UNDECLARED_OPERATIONAL_STATE: (Outcome.REJECT, Reason.UNDECLARED_OPERATIONAL_STATE),
    VerdictReason.NOTHING_TRANSFERABLE: (Outcome.REJECT, Reason.NOTHING_TRANSFERABLE),
    VerdictReason.DOUBLE_COMPROMISE_QUARANTINE: (Outcome.REJECT, Reason.DOUBLE_COMPROMISE_QUARANTINE),
    VerdictReason.DOUBLE_COMPROMISE_ESCALATE: (Outcome.ESCALATE, Reason.DOUBLE_COMPROMISE_ESCALATE),
    VerdictReason.DOUBLE_COMPROMISE_NO_RULE: (Outcome.ESCALATE, Reason.DOUBLE_COMPROMISE_NO_RULE),
}

HANDOFF_REASONS: Final = (Reason.HANDOFF_MALFORMED, Reason.HANDOFF_UNAUTHENTIC, *(r for _, r in _OBJECTIONS.values()))
NOTICE_REASONS: Final = (Reason.NOTICE_MALFORMED, Reason.NOTICE_UNAUTHENTIC, Reason.NOTICE_EXPIRY_TOO_FAR, Reason.NOTICE_ALREADY_CLEARED)


class CompromiseSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The config's `[compromise]` table, shared by both compromise kinds
    (their `KindSpec.settings`): decoded by busguard.config like any kind's
    section, its cross-field rules checked by busguard.config_checks."""

    require_declaration_for_compromised: bool = False
    trusted_attesters: tuple[str, ...] = ()
    trusted_notice_issuers: tuple[str, ...] = ()
    notice_retention_ms: Annotated[int, msgspec.Meta(ge=1)] = DEFAULT_NOTICE_RETENTION_MS
    #: Bounds `expires_at` and `cleared_at` after the guard's clock, so an
    #: end always falls inside the row's retention (config_checks: the
    #: horizon plus admission.max_age_ms fits in notice_retention_ms).
    notice_expiry_horizon_ms: Annotated[int, msgspec.Meta(ge=1)] = DEFAULT_EXPIRY_HORIZON_MS


def settings_of(context: PolicyContext) -> CompromiseSettings:
    found = context.settings.get(SETTINGS_KEY)
    return found if isinstance(found, CompromiseSettings) else CompromiseSettings()


def key_lookup(registry: KeySource, now_ms: int) -> KeyLookup:
    """The registry as `checks.KeyLookup`: usable keys at the receiver's clock."""

    def lookup(agent_id: str, key_id: str | None) -> Sequence[tuple[str, bytes]]:
        try:
            p = canonical_principal(agent_id)
        except ValueError:
            return ()
        return tuple((k.key_id, k.public_key) for k in registry.lookup(p, key_id, now_ms).keys)

    return lookup


def _objection(reason: Reason, error: MessageError) -> PolicyOutcome:
    return PolicyOutcome(objection=Objection(Outcome.REJECT, reason, f"{error.code}: {error.where}: {error.detail}"))


# ---------------------------------------------------------------- the notice


class ParsedNotice(msgspec.Struct, frozen=True, kw_only=True):
    notice: CompromiseNotice
    row: PolicyKey
    sha256: str  # of the exact notice bytes: what a clearance names
    issuer_key_id: str | None  # the issuer's key that signed the receipt: the one a clearance must be signed with
    retention_ms: int
    horizon_ms: int


class NoticePolicy:
    """`compromise-notice`: remember a trusted issuer's notice under the row it covers."""

    def parse(self, record: PolicyInput, context: PolicyContext) -> ParsedNotice | Objection:
        envelope = record.envelope
        settings = settings_of(context)
        try:
            notice = decode_strict(envelope.payload, CompromiseNotice, "notice")
            issuer = principal(notice.issuer, "notice.issuer")
            check_notice_fields(notice)
        except MessageError as exc:
            return Objection(Outcome.REJECT, Reason.NOTICE_MALFORMED, f"{exc.code}: {exc.where}: {exc.detail}")
        # On the topic the receipt's signature (verified by admission, with the
        # registry) is the issuer's signature over the notice: it covers these
        # exact bytes through payload_hash. So the sender must be the issuer.
        sender = record.principal
        trusted = {canonical_principal(t) for t in settings.trusted_notice_issuers}
        if issuer not in trusted:
            return Objection(
                Outcome.REJECT,
                Reason.NOTICE_UNAUTHENTIC,
                f"{MessageCode.UNTRUSTED_ISSUER}: notice.issuer: {notice.issuer!r} is not a trusted notice issuer",
            )
        if sender != issuer:
            return Objection(
                Outcome.REJECT,
                Reason.NOTICE_UNAUTHENTIC,
                f"{MessageCode.WRONG_SIGNER}: notice.issuer: the receipt is signed by {envelope.receipt.sender!r}, not the issuer",
            )
        return ParsedNotice(
            notice=notice,
            row=notice_row(notice),
            sha256=hashlib.sha256(envelope.payload).hexdigest(),
            issuer_key_id=signing_key_id(envelope, context.keys, sender, context.now_ms),
            retention_ms=settings.notice_retention_ms,
            horizon_ms=settings.notice_expiry_horizon_ms,
        )

    def keys(self, parsed: ParsedNotice) -> Iterable[PolicyKey]:
        return (parsed.row,)

    def decide(self, parsed: ParsedNotice, view: PolicyView, now_ms: int) -> PolicyOutcome:
        notice = parsed.notice
        mark = {"notice_id": notice.notice_id}
        if notice.expires_at is not None and parse_timestamp(notice.expires_at) > now_ms + parsed.horizon_ms:
            detail = f"notice.expires_at: {notice.expires_at!r} is more than {parsed.horizon_ms} ms after the guard's clock"
            return PolicyOutcome(objection=Objection(Outcome.REJECT, Reason.NOTICE_EXPIRY_TOO_FAR, detail), annotations=mark)
        kept = {e.notice.notice_id: e for e in entries_at(view, parsed.row)}
        prior = kept.get(notice.notice_id)
        if prior is not None and prior.cleared_at is not None:
            # A cleared id stays cleared: re-sending the notice (or replaying it
            # once its nonce is forgotten) does not bring it back; a new
            # compromise takes a new notice id.
            detail = f"notice {notice.notice_id!r} was cleared by {prior.cleared_by} from {prior.cleared_at}; a new notice needs a new id"
            return PolicyOutcome(objection=Objection(Outcome.REJECT, Reason.NOTICE_ALREADY_CLEARED, detail), annotations=mark)
        if (
            prior is not None
            and prior.issuer_key_id is not None
            and (
                canonical_principal(prior.notice.issuer) != canonical_principal(notice.issuer)
                or prior.issuer_key_id != parsed.issuer_key_id
            )
        ):
            # Replacing the entry would hand its clearance to whoever replaced
            # it: another issuer, or another (perhaps stolen) key of this one.
            code = (
                MessageCode.WRONG_KEY
                if canonical_principal(prior.notice.issuer) == canonical_principal(notice.issuer)
                else MessageCode.WRONG_ISSUER
            )
            detail = (
                f"{code}: notice.notice_id: {notice.notice_id!r} is held on its row by {prior.notice.issuer!r} key {prior.issuer_key_id!r}"
            )
            return PolicyOutcome(objection=Objection(Outcome.REJECT, Reason.NOTICE_UNAUTHENTIC, detail), annotations=mark)
        kept[notice.notice_id] = NoticeEntry(notice=notice, sha256=parsed.sha256, issuer_key_id=parsed.issuer_key_id)
        expires = now_ms + parsed.retention_ms
        ordered = [msgspec.structs.replace(e, row_expires_ms=expires) for e in capped(kept.values(), now_ms)]
        write = PolicyWrite(parsed.row, encode_row(ordered), ttl_ms=parsed.retention_ms)
        annotations = {
            **mark,
            "subject": notice.subject,
            "covers": covers_label(notice.session_id, notice.subject_key_id),
            "compromised_from": notice.compromised_from,
            "notices_on_row": str(len(ordered)),
            "notice_sha256": parsed.sha256,
        }
        if notice.expires_at is not None:
            annotations["expires_at"] = notice.expires_at
        return PolicyOutcome(writes=(write,), annotations=annotations)


# ---------------------------------------------------------------- the handoff


class ParsedHandoff(msgspec.Struct, frozen=True, kw_only=True):
    envelope: Envelope
    handoff: SessionHandoff
    rows: tuple[PolicyKey, ...]
    sender_key_id: str | None
    settings: CompromiseSettings
    keys: KeyLookup


def signing_key_id(envelope: Envelope, registry: KeySource, session: str, now_ms: int) -> str | None:
    """Which of the sender's keys signed the receipt (a key-scoped notice may
    name it; a clearance must be signed by the key that signed its notice)."""
    if envelope.receipt.key_id is not None:
        return envelope.receipt.key_id
    usable = registry.lookup(session, None, now_ms).keys
    if len(usable) == 1:
        return usable[0].key_id
    message = receipt_signing_input(envelope.receipt_bytes)
    return next((k.key_id for k in usable if verify_signature(k.public_key, message, envelope.signature)), None)


def _integrity_signer(handoff: SessionHandoff) -> str | None:
    """Who signed the integrity receipt, read before verifying it only to name its notice rows."""
    if handoff.successor_integrity is None:
        return None
    try:
        raw, _ = open_statement(handoff.successor_integrity, "successor_integrity")
        return canonical_principal(decode_strict(raw, SuccessorIntegrity, "successor_integrity").signer)
    except (MessageError, ValueError):
        return None  # check_handoff refuses it with its code


class HandoffPolicy:
    """`session-handoff`: the decision boundary of seed 004 on one record."""

    def parse(self, record: PolicyInput, context: PolicyContext) -> ParsedHandoff | Objection:
        envelope, session = record.envelope, record.principal
        try:
            handoff = decode_handoff(envelope.payload)
            successor = principal(envelope.receipt.receiver, "receipt.receiver")
        except MessageError as exc:
            return Objection(Outcome.REJECT, Reason.HANDOFF_MALFORMED, f"{exc.code}: {exc.where}: {exc.detail}")
        registry, now = context.keys, context.now_ms
        rows = [agent_row(session), agent_row(successor)]
        if envelope.receipt.session_id is not None:
            rows.append(session_row(session, envelope.receipt.session_id))
        rows += [key_row(session, k.key_id) for k in registry.lookup(session, None, now).keys]
        voucher = _integrity_signer(handoff)
        if voucher is not None:
            rows += [agent_row(voucher), *(key_row(voucher, k.key_id) for k in registry.lookup(voucher, None, now).keys)]
        return ParsedHandoff(
            envelope=envelope,
            handoff=handoff,
            rows=tuple(dict.fromkeys(rows)),
            sender_key_id=signing_key_id(envelope, registry, session, now),
            settings=settings_of(context),
            keys=key_lookup(registry, now),
        )

    def keys(self, parsed: ParsedHandoff) -> Iterable[PolicyKey]:
        return parsed.rows

    def decide(self, parsed: ParsedHandoff, view: PolicyView, now_ms: int) -> PolicyOutcome:
        envelope, settings = parsed.envelope, parsed.settings
        notices = [e for row in parsed.rows for e in entries_at(view, row)]
        try:
            checked = check_handoff(
                receipt=envelope.receipt,
                receipt_id=envelope.receipt_id,
                payload=envelope.payload,
                sender_key_id=parsed.sender_key_id,
                keys=parsed.keys,
                trusted_attesters=settings.trusted_attesters,
                notices=notices,
                now_ms=now_ms,
            )
        except MessageError as exc:
            return _objection(Reason.HANDOFF_UNAUTHENTIC if exc.code in _AUTHENTICITY else Reason.HANDOFF_MALFORMED, exc)
        verdict = evaluate_handoff(checked.facts, settings)
        outcome = outcome_for(verdict, parsed.handoff, envelope.receipt.task_id, checked.facts.notices)
        lifecycle = lifecycle_annotations(checked.facts.successor_notices, checked.lifted)
        return msgspec.structs.replace(outcome, annotations={**(outcome.annotations or {}), **lifecycle}) if lifecycle else outcome


def evaluate_handoff(facts: HandoffFacts, settings: CompromiseSettings) -> Verdict:
    return evaluate(facts, CompromisePolicy(require_declaration_for_compromised=settings.require_declaration_for_compromised))


def annotations_for(verdict: Verdict, notices: Sequence[str]) -> dict[str, str]:
    """What the audit record (and, for the names in FORWARD_ANNOTATIONS, the forward) carries."""
    out = {
        "verdict": str(verdict.verdict),
        "handoff_reason": str(verdict.reason),
        "handoff_route": str(verdict.route),
        "manifest_digest": verdict.manifest_digest,
        "transferred": msgspec.json.encode([[c.name, c.sha256] for c in verdict.transfer]).decode(),
        "stripped": msgspec.json.encode(
            [{"name": c.name, "sha256": c.sha256, "operational": c.operational, "why": c.why} for c in verdict.stripped]
        ).decode(),
    }
    if notices:
        out["compromise_notices"] = ",".join(notices)
    if verdict.caution:
        out["caution"] = "double_compromise"
    return out


def lifecycle_annotations(successor_notices: Sequence[str], lifted: Sequence[tuple[str, str]]) -> dict[str, str]:
    """For the audit: the notices that put the successor under notice, and
    the covering notices that had ended for this handoff (JSON arrays: ids,
    and `[id, "expired" | "cleared"]`); each absent when empty."""
    out = {}
    if successor_notices:
        out["successor_notices"] = msgspec.json.encode(list(successor_notices)).decode()
    if lifted:
        out["lifted_notices"] = msgspec.json.encode([list(x) for x in lifted]).decode()
    return out


def transferred_payload(handoff: SessionHandoff, verdict: Verdict) -> bytes:
    """The handoff with only the components the verdict transfers; statements kept, so the receiver can check each."""
    names = {c.name for c in verdict.transfer}
    return encode(msgspec.structs.replace(handoff, components=tuple(c for c in handoff.components if c.name in names)))


def outcome_for(verdict: Verdict, handoff: SessionHandoff, handoff_id: str, notices: Sequence[str]) -> PolicyOutcome:
    annotations = annotations_for(verdict, notices)
    if verdict.route in (Route.FORWARD, Route.FORWARD_WITH_CAUTION):
        replacement = transferred_payload(handoff, verdict) if verdict.stripped else None
        return PolicyOutcome(annotations=annotations, replacement=replacement)
    outcome, reason = _OBJECTIONS[verdict.reason]
    objection = Objection(outcome, reason, f"{verdict.reason}: {verdict.detail}")
    if verdict.route is Route.QUARANTINE:
        quarantined = Notice(route=ROUTE_QUARANTINE, key=handoff_id.encode(), value=transferred_payload(handoff, verdict))
        return PolicyOutcome(objection=objection, annotations=annotations, notices=(quarantined,))
    return PolicyOutcome(objection=objection, annotations=annotations)


HANDOFF_POLICY: Final = HandoffPolicy()
NOTICE_POLICY: Final = NoticePolicy()
