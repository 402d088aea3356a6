"""Build signed session handoffs for the compromise tests: keys, statements, payloads."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import msgspec

from busguard.policies.compromise.build import inline_component, scope_entry, sign_statement
from busguard.policies.compromise.checks import CheckedHandoff, check_handoff
from busguard.policies.compromise.message import (
    KIND_SESSION_HANDOFF,
    Component,
    CompromiseDeclaration,
    CompromiseInteraction,
    CompromiseKind,
    CompromiseNotice,
    IntegrityStatus,
    InteractionRule,
    ScopeEntry,
    SessionHandoff,
    SignedStatement,
    StateScope,
    SuccessorIntegrity,
    encode,
)
from busguard.protocol.identity import canonical_principal
from busguard.protocol.receipt import Receipt, encode_receipt, payload_hash, receipt_id
from busguard.protocol.signing import Signer, public_key_from_seed
from busguard.protocol.timestamps import format_timestamp, parse_timestamp

NOW = parse_timestamp("2026-11-29T12:00:00.000Z")
HANDOFF_ID = "handoff-0001"
SESSION = "session-a"
SUCCESSOR = "successor-b"
ATTESTER = "attester"
STRANGER = "stranger"
OPERATOR = "operator"
SESSION_KEY = "k1"


def seed(name: str) -> bytes:
    return hashlib.sha256(b"busguard-compromise-test:" + name.encode()).digest()


def signer(name: str) -> Signer:
    return Signer(seed(name))


#: Named agents, one key each, key id "k1" (so key-scoped notices can name it).
KEYS: dict[str, list[tuple[str, bytes]]] = {
    canonical_principal(n): [(SESSION_KEY, public_key_from_seed(seed(n)))] for n in (SESSION, SUCCESSOR, ATTESTER, STRANGER, OPERATOR)
}


def keys(agent_id: str, key_id: str | None) -> Sequence[tuple[str, bytes]]:
    found = KEYS.get(canonical_principal(agent_id), [])
    return [k for k in found if key_id is None or k[0] == key_id]


LOG = inline_component("log", b"2026-11-29 step 1 ok\n", operational=False, encoding="text/plain")
AUDIT = inline_component("audit", b'{"events":3}', operational=False, encoding="application/json")
PLAN = inline_component("plan", b'{"next":"deploy"}', operational=True, encoding="application/json")
MEMORY = inline_component("memory", b"working memory", operational=True)


def declaration(
    *, handoff_id: str = HANDOFF_ID, by: str = SESSION, detected: tuple[CompromiseKind, ...] = (CompromiseKind.CORRUPTED_CONTEXT,)
) -> SignedStatement:
    return sign_statement(
        signer(by),
        CompromiseDeclaration(
            v=1,
            handoff_id=handoff_id,
            signer=by,
            detected=detected,
            detected_at="2026-11-29T11:59:00.000Z",
            detail="context window overwritten",
        ),
    )


def scope(*entries: ScopeEntry | Component, handoff_id: str = HANDOFF_ID, by: str = SESSION) -> SignedStatement:
    listed = tuple(e if isinstance(e, ScopeEntry) else scope_entry(e) for e in entries)
    return sign_statement(signer(by), StateScope(v=1, handoff_id=handoff_id, signer=by, components=listed))


def integrity(
    status: IntegrityStatus = IntegrityStatus.VERIFIED_CLEAN,
    *,
    by: str = SUCCESSOR,
    successor: str = SUCCESSOR,
    rederives: bool = False,
    handoff_id: str = HANDOFF_ID,
) -> SignedStatement:
    return sign_statement(
        signer(by),
        SuccessorIntegrity(
            v=1, handoff_id=handoff_id, signer=by, successor=successor, status=status, rederives_operational_state=rederives
        ),
    )


def interaction(rule: InteractionRule, *, by: str = SESSION, handoff_id: str = HANDOFF_ID) -> SignedStatement:
    return sign_statement(signer(by), CompromiseInteraction(v=1, handoff_id=handoff_id, signer=by, rule=rule))


def notice(
    notice_id: str = "n-1",
    *,
    subject: str = SESSION,
    session_id: str | None = None,
    subject_key_id: str | None = None,
    detected: tuple[CompromiseKind, ...] = (CompromiseKind.CORRUPTED_CONTEXT,),
    compromised_from: int = NOW - 60_000,
) -> CompromiseNotice:
    return CompromiseNotice(
        v=1,
        notice_id=notice_id,
        issuer=OPERATOR,
        subject=subject,
        detected=detected,
        compromised_from=format_timestamp(compromised_from),
        issued_at=format_timestamp(NOW - 30_000),
        session_id=session_id,
        subject_key_id=subject_key_id,
    )


def payload(
    components: Sequence[Component],
    *,
    declaration: SignedStatement | None = None,
    scope: SignedStatement | None = None,
    successor_integrity: SignedStatement | None = None,
    interaction: SignedStatement | None = None,
) -> bytes:
    return encode(
        SessionHandoff(
            v=1,
            components=tuple(components),
            declaration=declaration,
            scope=scope,
            successor_integrity=successor_integrity,
            interaction=interaction,
        )
    )


def receipt_for(
    value: bytes, *, task_id: str = HANDOFF_ID, sender: str = SESSION, receiver: str = SUCCESSOR, issued_at: int = NOW
) -> Receipt:
    return Receipt(
        v=1,
        kind=KIND_SESSION_HANDOFF,
        task_id=task_id,
        sender=sender,
        receiver=receiver,
        payload_hash=payload_hash(value),
        nonce="ACrg0cgWc89vFeQwdDPopw",
        issued_at=format_timestamp(issued_at),
        session_id="sess-1",
        sequence=3,
        key_id=SESSION_KEY,
    )


def check(
    value: bytes,
    *,
    notices: Sequence[CompromiseNotice] = (),
    trusted: Sequence[str] = (ATTESTER,),
    receipt: Receipt | None = None,
    now: int = NOW,
) -> CheckedHandoff:
    r = receipt if receipt is not None else receipt_for(value)
    return check_handoff(
        receipt=r,
        receipt_id=receipt_id(encode_receipt(r)),
        payload=value,
        sender_key_id=r.key_id,
        keys=keys,
        trusted_attesters=trusted,
        notices=notices,
        now_ms=now,
    )


def tamper(component: Component, content: bytes) -> Component:
    """The same name, operational flag and encoding, other bytes: a forgery of a scoped component."""
    return msgspec.structs.replace(component, content=inline_component(component.name, content, operational=component.operational).content)
