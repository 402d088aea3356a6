"""From a decoded session handoff to the facts the verdict needs.

Pure: public keys come from a lookup function the caller supplies (the
runtime adapts its key registry, judged at its own clock), notices are given
already verified, and time is given as numbers. So the interceptor that wires
this into the stream stays thin, and every rule here is unit-tested.

What must hold, or the handoff is unusable (`MessageError`, a reject):

- the payload and each statement decode strictly (message.py);
- every statement names this handoff (`handoff_id` = the receipt's `task_id`);
- the declaration, the scope and the interaction rule are signed by the
  handing-off session itself (the receipt's sender, as canonical principal);
- the integrity receipt is about this successor (the receipt's `receiver`);
- every statement's signature verifies with one of its signer's keys.

Who signed the integrity receipt (the successor, a trusted attester, anyone
else) is not an error but a fact: the verdict treats an unaccepted signer like
no receipt at all (table A).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Final

import msgspec

from busguard.policies.compromise.lifecycle import NoticeEntry, Standing, as_entry, standing
from busguard.policies.compromise.message import (
    CompromiseDeclaration,
    CompromiseInteraction,
    CompromiseKind,
    CompromiseNotice,
    MessageCode,
    MessageError,
    S,
    ScopeEntry,
    SessionHandoff,
    SignedStatement,
    StateScope,
    SuccessorIntegrity,
    component_sha256,
    decode_handoff,
    decode_strict,
    open_statement,
    signing_input,
    statement_id,
)
from busguard.policies.compromise.verdict import (
    Attester,
    ComponentFact,
    HandoffFacts,
    ScopeMatch,
    ScopeState,
    SuccessorEvidence,
)
from busguard.protocol.identity import canonical_principal
from busguard.protocol.receipt import Receipt
from busguard.protocol.signing import verify_signature
from busguard.protocol.timestamps import parse_timestamp

#: (signer agent id, key id or None) -> the signer's usable keys as (key id, 32-byte public key).
KeyLookup = Callable[[str, str | None], Sequence[tuple[str, bytes]]]

_CREDENTIALS: Final = CompromiseKind.COMPROMISED_CREDENTIALS


class CheckedHandoff(msgspec.Struct, frozen=True, kw_only=True):
    """The decoded handoff, its verified statements, and the verdict's facts."""

    handoff: SessionHandoff
    facts: HandoffFacts
    declaration: CompromiseDeclaration | None = None
    scope: StateScope | None = None
    successor_integrity: SuccessorIntegrity | None = None
    interaction: CompromiseInteraction | None = None
    #: (notice id, `expired` | `cleared`): notices that cover a party and had
    #: begun, but ended for this handoff (so they did not count). Not a fact
    #: of the verdict; the audit reports it.
    lifted: tuple[tuple[str, str], ...] = ()


class Verified(msgspec.Struct, frozen=True, kw_only=True):
    statement_id: str
    key_id: str


def principal(agent_id: str, where: str) -> str:
    try:
        return canonical_principal(agent_id)
    except ValueError as exc:
        raise MessageError(MessageCode.MALFORMED_AGENT_ID, where, str(exc)) from None


def timestamp_ms(value: str, where: str) -> int:
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise MessageError(MessageCode.MALFORMED_TIMESTAMP, where, str(exc)) from None


def verify_statement(signed: SignedStatement, cls: type[S], where: str, keys: KeyLookup) -> tuple[S, Verified]:
    """Decode a signed statement and check its signature with its signer's keys.

    The bytes are parsed before the signature is checked only because the
    signer's id is inside them; nothing read from them is used unless the
    signature over exactly those bytes verifies."""
    raw, signature = open_statement(signed, where)
    statement = decode_strict(raw, cls, where)
    principal(statement.signer, f"{where}.signer")
    candidates = keys(statement.signer, statement.key_id)
    if not candidates:
        key = "" if statement.key_id is None else f" with key id {statement.key_id!r}"
        raise MessageError(MessageCode.UNKNOWN_SIGNER, where, f"no usable key for signer {statement.signer!r}{key}")
    message = signing_input(cls, raw)
    for key_id, public_key in candidates:
        if verify_signature(public_key, message, signature):
            return statement, Verified(statement_id=statement_id(cls, raw), key_id=key_id)
    raise MessageError(MessageCode.BAD_SIGNATURE, where, f"signature does not verify with any usable key of {statement.signer!r}")


def verify_notice(raw: bytes, signature: bytes, keys: KeyLookup, trusted_issuers: Collection[str]) -> CompromiseNotice:
    """A compromise notice as read from the notice topic: its issuer must be
    one policy trusts (compared as canonical principals) and its signature
    over `busguard/compromise-notice/v1` 0x00 || raw must verify."""
    notice = decode_strict(raw, CompromiseNotice, "notice")
    issuer = principal(notice.issuer, "notice.issuer")
    if issuer not in {principal(t, "trusted_issuers") for t in trusted_issuers}:
        raise MessageError(MessageCode.UNTRUSTED_ISSUER, "notice.issuer", f"{notice.issuer!r} is not a trusted notice issuer")
    check_notice_fields(notice)
    candidates = keys(notice.issuer, notice.key_id)
    if not candidates:
        raise MessageError(MessageCode.UNKNOWN_SIGNER, "notice", f"no usable key for issuer {notice.issuer!r}")
    message = signing_input(CompromiseNotice, raw)
    if not any(verify_signature(pk, message, signature) for _, pk in candidates):
        raise MessageError(MessageCode.BAD_SIGNATURE, "notice", f"signature does not verify with any usable key of {notice.issuer!r}")
    return notice


def check_notice_fields(notice: CompromiseNotice) -> None:
    """What the schema cannot say about a notice: its subject is an agent
    id, its timestamps follow protocol 6.1, it narrows to at most one of a
    session and a key, and it expires (if at all) after it begins."""
    principal(notice.subject, "notice.subject")
    start = timestamp_ms(notice.compromised_from, "notice.compromised_from")
    timestamp_ms(notice.issued_at, "notice.issued_at")
    if notice.expires_at is not None and timestamp_ms(notice.expires_at, "notice.expires_at") <= start:
        raise MessageError(
            MessageCode.MALFORMED_FIELD,
            "notice.expires_at",
            f"{notice.expires_at!r} must be after compromised_from {notice.compromised_from!r}",
        )
    if notice.session_id is not None and notice.subject_key_id is not None:
        raise MessageError(MessageCode.MALFORMED_FIELD, "notice", "at most one of session_id and subject_key_id may be given")


def notice_covers(notice: CompromiseNotice, subject: str, session_id: str | None, key_ids: Collection[str]) -> bool:
    """Does the notice name this principal and, if it is narrower, this session or one of these keys?"""
    try:
        if canonical_principal(notice.subject) != subject:
            return False
    except ValueError:
        return False
    if notice.session_id is not None:
        return notice.session_id == session_id
    if notice.subject_key_id is not None:
        return notice.subject_key_id in key_ids
    return True


def scope_match(entry: ScopeEntry | None, sha256: str, operational: bool, encoding: str) -> ScopeMatch:
    """A component against the scope entry of its name (None: no such entry)."""
    if entry is None:
        return ScopeMatch.UNLISTED
    if (entry.sha256, entry.operational, entry.encoding) == (sha256, operational, encoding):
        return ScopeMatch.MATCHES
    return ScopeMatch.MISMATCH


def scope_index(scope: StateScope, where: str = "scope") -> dict[str, ScopeEntry]:
    entries: dict[str, ScopeEntry] = {}
    for i, entry in enumerate(scope.components):
        if entry.name in entries:
            raise MessageError(MessageCode.DUPLICATE_NAME, f"{where}.components[{i}]", f"scope names {entry.name!r} twice")
        entries[entry.name] = entry
    return entries


def _bound(statement: CompromiseDeclaration | StateScope | SuccessorIntegrity | CompromiseInteraction, where: str, handoff_id: str) -> None:
    if statement.handoff_id != handoff_id:
        raise MessageError(
            MessageCode.WRONG_HANDOFF, f"{where}.handoff_id", f"{statement.handoff_id!r} is not this handoff ({handoff_id!r})"
        )


def _by_session(statement: CompromiseDeclaration | StateScope | CompromiseInteraction, where: str, session: str) -> None:
    if principal(statement.signer, f"{where}.signer") != session:
        raise MessageError(
            MessageCode.WRONG_SIGNER, f"{where}.signer", f"{statement.signer!r} is not the handing-off session; it must sign this itself"
        )


def check_handoff(
    *,
    receipt: Receipt,
    receipt_id: str,
    payload: bytes,
    sender_key_id: str | None,
    keys: KeyLookup,
    trusted_attesters: Collection[str],
    notices: Sequence[CompromiseNotice | NoticeEntry],
    now_ms: int,
) -> CheckedHandoff:
    """Verify a session handoff and establish the facts for `verdict.evaluate`.

    `receipt` is the outer receipt, already admitted (its signature, freshness
    and `payload_hash` over `payload` checked); `sender_key_id` is the key
    that verified it. A notice is in force when its `compromised_from` is at
    or before the later of the receipt's `issued_at` and `now_ms`: the
    receipt's own time alone could be backdated by whoever holds a
    compromised key (freshness bounds by how much, not whether). It has
    ended (expired, or cleared by its issuer) only when the EARLIER of the
    two is past the end (lifecycle.standing): no `issued_at` escapes it.
    Covering notices that began but ended are reported in `lifted`."""
    handoff = decode_handoff(payload)
    handoff_id = receipt.task_id
    session = principal(receipt.sender, "receipt.sender")
    successor_principal = principal(receipt.receiver, "receipt.receiver")
    receipt_ms = timestamp_ms(receipt.issued_at, "receipt.issued_at")
    standings = [(e.notice, standing(e, receipt_ms, now_ms)) for e in map(as_entry, notices)]
    in_force = [n for n, s in standings if s is Standing.IN_FORCE]
    ended = [(n, s) for n, s in standings if s in (Standing.EXPIRED, Standing.CLEARED)]

    declaration = scope = integrity = interaction = None
    declaration_v = scope_v = integrity_v = interaction_v = None
    if handoff.declaration is not None:
        declaration, declaration_v = verify_statement(handoff.declaration, CompromiseDeclaration, "declaration", keys)
        _bound(declaration, "declaration", handoff_id)
        _by_session(declaration, "declaration", session)
        timestamp_ms(declaration.detected_at, "declaration.detected_at")
    if handoff.scope is not None:
        scope, scope_v = verify_statement(handoff.scope, StateScope, "scope", keys)
        _bound(scope, "scope", handoff_id)
        _by_session(scope, "scope", session)
    if handoff.interaction is not None:
        interaction, interaction_v = verify_statement(handoff.interaction, CompromiseInteraction, "interaction", keys)
        _bound(interaction, "interaction", handoff_id)
        _by_session(interaction, "interaction", session)
    if handoff.successor_integrity is not None:
        integrity, integrity_v = verify_statement(handoff.successor_integrity, SuccessorIntegrity, "successor_integrity", keys)
        _bound(integrity, "successor_integrity", handoff_id)
        if principal(integrity.successor, "successor_integrity.successor") != successor_principal:
            raise MessageError(
                MessageCode.WRONG_SUCCESSOR,
                "successor_integrity.successor",
                f"{integrity.successor!r} is not this handoff's successor {receipt.receiver!r}",
            )

    # The session's own keys: the one that signed the receipt and those that signed its statements.
    session_keys = {v.key_id for v in (declaration_v, scope_v, interaction_v) if v is not None}
    if sender_key_id is not None:
        session_keys.add(sender_key_id)
    session_notices = [n for n in in_force if notice_covers(n, session, receipt.session_id, session_keys)]

    scope_state = ScopeState.ABSENT
    entries: dict[str, ScopeEntry] = {}
    if scope is not None and scope_v is not None:
        entries = scope_index(scope)
        credentials = (declaration is not None and _CREDENTIALS in declaration.detected) or any(
            _CREDENTIALS in n.detected or (n.subject_key_id is not None and n.subject_key_id == scope_v.key_id) for n in session_notices
        )
        scope_state = ScopeState.UNTRUSTED if credentials else ScopeState.SIGNED

    components = []
    for component in handoff.components:
        sha256 = component_sha256(component)
        against = (
            scope_match(entries.get(component.name), sha256, component.operational, component.encoding)
            if scope is not None
            else ScopeMatch.UNLISTED
        )
        components.append(ComponentFact(name=component.name, sha256=sha256, operational=component.operational, against_scope=against))

    evidence = None
    voucher: tuple[str, str] | None = None  # who vouched for the successor, with which key
    successor_notices: list[CompromiseNotice] = []
    if integrity is not None and integrity_v is not None:
        signer = principal(integrity.signer, "successor_integrity.signer")
        voucher = (signer, integrity_v.key_id)
        trusted = {principal(t, "trusted_attesters") for t in trusted_attesters}
        attested_by = (
            Attester.SUCCESSOR if signer == successor_principal else Attester.TRUSTED_ATTESTER if signer in trusted else Attester.OTHER
        )
        evidence = SuccessorEvidence(
            status=integrity.status, attested_by=attested_by, rederives_operational_state=integrity.rederives_operational_state
        )
        # A notice against whoever vouched for the successor voids the voucher.
        successor_notices = [n for n in in_force if notice_covers(n, signer, None, {integrity_v.key_id})]
    # Session-scoped notices on the successor cannot be matched: which of its sessions takes over is not known here.
    successor_notices += [n for n in in_force if notice_covers(n, successor_principal, None, ()) and n not in successor_notices]

    facts = HandoffFacts(
        handoff_id=handoff_id,
        receipt_id=receipt_id,
        declared=declaration is not None,
        notices=tuple(sorted({n.notice_id for n in session_notices})),
        scope=scope_state,
        components=tuple(components),
        successor=evidence,
        successor_notices=tuple(sorted({n.notice_id for n in successor_notices})),
        interaction=interaction.rule if interaction is not None else None,
        declaration_id=declaration_v.statement_id if declaration_v is not None else None,
        scope_id=scope_v.statement_id if scope_v is not None else None,
        successor_integrity_id=integrity_v.statement_id if integrity_v is not None else None,
        interaction_id=interaction_v.statement_id if interaction_v is not None else None,
    )
    lifted = {
        (n.notice_id, str(s))
        for n, s in ended
        if notice_covers(n, session, receipt.session_id, session_keys)
        or notice_covers(n, successor_principal, None, ())
        or (voucher is not None and notice_covers(n, voucher[0], None, {voucher[1]}))
    }
    return CheckedHandoff(
        handoff=handoff,
        facts=facts,
        declaration=declaration,
        scope=scope,
        successor_integrity=integrity,
        interaction=interaction,
        lifted=tuple(sorted(lifted)),
    )
