"""Reading and authenticating a session handoff: every way it can be unusable
gets its own code, and nothing unsigned or mis-bound reaches the verdict."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence

import msgspec
import pytest

from busguard.policies.compromise.build import scope_entry, sign_notice, sign_statement
from busguard.policies.compromise.checks import check_handoff, notice_covers, verify_notice
from busguard.policies.compromise.message import (
    DECLARATION_CONTEXT,
    MAX_STATEMENT_BYTES,
    Component,
    CompromiseDeclaration,
    CompromiseKind,
    CompromiseNotice,
    IntegrityStatus,
    InteractionRule,
    MessageCode,
    MessageError,
    SignedStatement,
    StateScope,
    decode_handoff,
    encode,
)
from busguard.policies.compromise.verdict import Attester
from busguard.protocol.envelope import b64url_encode
from busguard.protocol.identity import agent_id_for_key, canonical_principal
from busguard.protocol.receipt import encode_receipt, receipt_id
from busguard.protocol.signing import Signer, public_key_from_seed
from tests.unit import compromise_kit as kit
from tests.unit.compromise_kit import LOG, PLAN


def code_of(value: bytes, **kw: object) -> MessageCode:
    with pytest.raises(MessageError) as info:
        kit.check(value, **kw)  # type: ignore[arg-type]
    return info.value.code


def raw_payload(**fields: object) -> bytes:
    base: dict[str, object] = {"v": 1, "components": []}
    base.update(fields)
    return msgspec.json.encode(base)


# ------------------------------------------------------------ the payload


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (b"", MessageCode.NOT_JSON),
        (b"\xff", MessageCode.NOT_JSON),
        (b"[]", MessageCode.NOT_JSON),
        (b'{"v":1,"components":[]} x', MessageCode.NOT_JSON),
        (b'{"v":"1","components":[]}', MessageCode.WRONG_TYPE),
        (b'{"v":1}', MessageCode.MISSING_FIELD),
        (b'{"v":1,"components":[],"extra":0}', MessageCode.UNKNOWN_FIELD),
        (b'{"v":2,"components":[]}', MessageCode.UNSUPPORTED_VERSION),
        (b'{"v":1,"components":[],"v":1}', MessageCode.DUPLICATE_KEY),
        (b'{"v":1,"components":[],"\\u0076":1}', MessageCode.DUPLICATE_KEY),
        (b'{"v":1,"components":[{"name":"a","operational":true,"encoding":"x","content":"","name":"a"}]}', MessageCode.DUPLICATE_KEY),
        (b'{"v":1,"components":[{"name":"a","operational":1,"encoding":"x","content":""}]}', MessageCode.WRONG_TYPE),
        (b'{"v":1,"components":[{"name":"","operational":true,"encoding":"x","content":""}]}', MessageCode.MALFORMED_FIELD),
        (b'{"v":1,"components":[{"name":"a","operational":true,"encoding":"x"}]}', MessageCode.MALFORMED_FIELD),
        (
            b'{"v":1,"components":[{"name":"a","operational":true,"encoding":"x","content":"","sha256":"' + b"0" * 64 + b'"}]}',
            MessageCode.MALFORMED_FIELD,
        ),
        (
            b'{"v":1,"components":[{"name":"a","operational":true,"encoding":"x","sha256":"' + b"A" * 64 + b'"}]}',
            MessageCode.MALFORMED_FIELD,
        ),
        (b'{"v":1,"components":[{"name":"a","operational":true,"encoding":"x","content":"AB"}]}', MessageCode.BAD_BASE64),
        (b'{"v":1,"components":[{"name":"a","operational":true,"encoding":"x","content":"A"}]}', MessageCode.BAD_BASE64),
        (b'{"v":1,"components":[{"name":"a","operational":true,"encoding":"x","content":"AA=="}]}', MessageCode.MALFORMED_FIELD),
    ],
)
def test_payload_that_cannot_be_read(value: bytes, code: MessageCode) -> None:
    assert code_of(value) is code


def test_duplicate_component_names_are_refused() -> None:
    assert code_of(kit.payload([LOG, msgspec.structs.replace(PLAN, name="log")])) is MessageCode.DUPLICATE_NAME


def test_null_optional_statement_is_absent_and_sdk_encoding_round_trips() -> None:
    assert decode_handoff(b'{"v":1,"components":[],"scope":null}').scope is None
    value = kit.payload([LOG, PLAN], declaration=kit.declaration(), scope=kit.scope(PLAN))
    assert encode(decode_handoff(value)) == value


def test_any_json_spelling_of_the_payload_is_accepted() -> None:
    value = kit.payload([PLAN], declaration=kit.declaration(), scope=kit.scope(PLAN))
    spaced = msgspec.json.format(value, indent=2)
    assert kit.check(spaced).facts.components == kit.check(value).facts.components


# ------------------------------------------------------------ statements


def test_statement_encodings_are_strict() -> None:
    good = kit.declaration()
    short_sig = b'{"v":1,"components":[],"declaration":{"statement":"' + good.statement.encode() + b'","signature":"AAAA"}}'
    assert code_of(short_sig) is MessageCode.MALFORMED_FIELD
    padded = (
        b'{"v":1,"components":[],"declaration":{"statement":"'
        + good.statement.encode()
        + b'=","signature":"'
        + good.signature.encode()
        + b'"}}'
    )
    assert code_of(padded) is MessageCode.MALFORMED_FIELD
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    assert good.signature[-1] in "AQgw"
    noncanonical = good.signature[:-1] + alphabet[alphabet.index(good.signature[-1]) + 1]
    assert code_of(kit.payload([], declaration=SignedStatement(statement=good.statement, signature=noncanonical))) is MessageCode.BAD_BASE64
    huge = SignedStatement(statement=b64url_encode(b" " * (MAX_STATEMENT_BYTES + 1)), signature=good.signature)
    assert code_of(kit.payload([], declaration=huge)) is MessageCode.OVERSIZED


def test_trailing_bits_in_a_statement_are_bad_base64() -> None:
    declaration = CompromiseDeclaration(
        v=1, handoff_id=kit.HANDOFF_ID, signer=kit.SESSION, detected=(CompromiseKind.OTHER,), detected_at="2026-11-29T11:00:00Z", detail="x"
    )
    good = sign_statement(kit.signer(kit.SESSION), declaration)
    assert len(encode(declaration)) % 3 != 0  # so the last character carries unused bits
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    sibling = alphabet[alphabet.index(good.statement[-1]) ^ 1]
    tampered = SignedStatement(statement=good.statement[:-1] + sibling, signature=good.signature)
    assert code_of(kit.payload([], declaration=tampered)) is MessageCode.BAD_BASE64
    assert kit.check(kit.payload([], declaration=good)).facts.declared


def test_statement_signed_by_another_key_or_under_another_domain_does_not_verify() -> None:
    forged = sign_statement(kit.signer(kit.STRANGER), msgspec.json.decode(_statement_bytes(kit.declaration()), type=CompromiseDeclaration))
    assert code_of(kit.payload([], declaration=forged)) is MessageCode.BAD_SIGNATURE
    scope = StateScope(v=1, handoff_id=kit.HANDOFF_ID, signer=kit.SESSION, components=(scope_entry(PLAN),))
    raw = encode(scope)
    cross = SignedStatement(statement=b64url_encode(raw), signature=b64url_encode(kit.signer(kit.SESSION).sign(DECLARATION_CONTEXT + raw)))
    assert code_of(kit.payload([PLAN], declaration=kit.declaration(), scope=cross)) is MessageCode.BAD_SIGNATURE
    bare = SignedStatement(statement=b64url_encode(raw), signature=b64url_encode(kit.signer(kit.SESSION).sign(raw)))
    assert code_of(kit.payload([PLAN], scope=bare)) is MessageCode.BAD_SIGNATURE


def _statement_bytes(signed: SignedStatement) -> bytes:
    return base64.urlsafe_b64decode(signed.statement + "=" * (-len(signed.statement) % 4))


def test_a_statement_type_in_the_wrong_slot_does_not_decode() -> None:
    assert code_of(kit.payload([], scope=kit.declaration())) in (MessageCode.UNKNOWN_FIELD, MessageCode.MISSING_FIELD)


def test_duplicate_key_inside_a_signed_statement() -> None:
    raw = b'{"v":1,"handoff_id":"handoff-0001","signer":"session-a","rule":"escalate","rule":"partial_transfer"}'
    signed = SignedStatement(
        statement=b64url_encode(raw), signature=b64url_encode(kit.signer(kit.SESSION).sign(b"busguard/compromise-interaction/v1\x00" + raw))
    )
    assert code_of(kit.payload([], interaction=signed)) is MessageCode.DUPLICATE_KEY


@pytest.mark.parametrize(
    ("slot", "statement", "code"),
    [
        ("declaration", lambda: kit.declaration(handoff_id="other"), MessageCode.WRONG_HANDOFF),
        ("scope", lambda: kit.scope(PLAN, handoff_id="other"), MessageCode.WRONG_HANDOFF),
        ("successor_integrity", lambda: kit.integrity(handoff_id="other"), MessageCode.WRONG_HANDOFF),
        ("interaction", lambda: kit.interaction(InteractionRule.ESCALATE, handoff_id="other"), MessageCode.WRONG_HANDOFF),
        ("declaration", lambda: kit.declaration(by=kit.STRANGER), MessageCode.WRONG_SIGNER),
        ("scope", lambda: kit.scope(PLAN, by=kit.SUCCESSOR), MessageCode.WRONG_SIGNER),
        ("interaction", lambda: kit.interaction(InteractionRule.ESCALATE, by=kit.ATTESTER), MessageCode.WRONG_SIGNER),
        ("successor_integrity", lambda: kit.integrity(successor=kit.STRANGER, by=kit.STRANGER), MessageCode.WRONG_SUCCESSOR),
        ("successor_integrity", lambda: kit.integrity(by="nobody-registered"), MessageCode.UNKNOWN_SIGNER),
    ],
)
def test_statements_are_bound_to_this_handoff_and_its_parties(slot: str, statement: object, code: MessageCode) -> None:
    make = statement
    assert callable(make)
    assert code_of(kit.payload([PLAN], **{slot: make()})) is code


def test_named_key_id_must_exist() -> None:
    declaration = msgspec.json.decode(_statement_bytes(kit.declaration()), type=CompromiseDeclaration)
    signed = sign_statement(kit.signer(kit.SESSION), msgspec.structs.replace(declaration, key_id="k9"))
    assert code_of(kit.payload([], declaration=signed)) is MessageCode.UNKNOWN_SIGNER


def test_malformed_declaration_time() -> None:
    declaration = msgspec.json.decode(_statement_bytes(kit.declaration()), type=CompromiseDeclaration)
    signed = sign_statement(kit.signer(kit.SESSION), msgspec.structs.replace(declaration, detected_at="2026-11-29 11:59:00Z"))
    assert code_of(kit.payload([], declaration=signed)) is MessageCode.MALFORMED_TIMESTAMP


def test_duplicate_scope_entries_are_refused() -> None:
    assert code_of(kit.payload([PLAN], scope=kit.scope(PLAN, PLAN))) is MessageCode.DUPLICATE_NAME


def test_integrity_signer_is_classified_not_rejected() -> None:
    for by, attested in ((kit.SUCCESSOR, Attester.SUCCESSOR), (kit.ATTESTER, Attester.TRUSTED_ATTESTER), (kit.STRANGER, Attester.OTHER)):
        facts = kit.check(kit.payload([PLAN], successor_integrity=kit.integrity(by=by))).facts
        assert facts.successor is not None and facts.successor.attested_by is attested
    facts = kit.check(kit.payload([PLAN], successor_integrity=kit.integrity(by=kit.ATTESTER)), trusted=()).facts
    assert facts.successor is not None and facts.successor.attested_by is Attester.OTHER


def test_self_certifying_spellings_are_one_principal() -> None:
    seed = hashlib.sha256(b"self-certifying session").digest()
    public_key = public_key_from_seed(seed)
    tulpa = agent_id_for_key(public_key)
    ink = "ink:" + tulpa.removeprefix("tulpa:")

    def keys(agent_id: str, key_id: str | None) -> Sequence[tuple[str, bytes]]:
        if canonical_principal(agent_id) == canonical_principal(tulpa):
            return [(tulpa.removeprefix("tulpa:"), public_key)]
        return kit.keys(agent_id, key_id)

    declaration = sign_statement(
        Signer(seed),
        CompromiseDeclaration(
            v=1, handoff_id=kit.HANDOFF_ID, signer=ink, detected=(CompromiseKind.OTHER,), detected_at="2026-11-29T11:00:00Z"
        ),
    )
    value = kit.payload([], declaration=declaration)
    receipt = kit.receipt_for(value, sender=tulpa)
    checked = check_handoff(
        receipt=receipt,
        receipt_id=receipt_id(encode_receipt(receipt)),
        payload=value,
        sender_key_id=None,
        keys=keys,
        trusted_attesters=(),
        notices=[],
        now_ms=kit.NOW,
    )
    assert checked.facts.declared and checked.declaration is not None


def test_statement_ids_name_the_statements() -> None:
    facts = kit.check(kit.payload([PLAN], declaration=kit.declaration(), scope=kit.scope(PLAN))).facts
    assert facts.declaration_id == hashlib.sha256(DECLARATION_CONTEXT + _statement_bytes(kit.declaration())).hexdigest()
    assert facts.scope_id is not None and facts.successor_integrity_id is None


# ------------------------------------------------------------ notices


def test_a_notice_verifies_from_a_trusted_issuer_only() -> None:
    raw, signature = sign_notice(kit.signer(kit.OPERATOR), kit.notice())
    notice = verify_notice(raw, signature, kit.keys, [kit.OPERATOR])
    assert notice.notice_id == "n-1"
    with pytest.raises(MessageError) as info:
        verify_notice(raw, signature, kit.keys, [kit.ATTESTER])
    assert info.value.code is MessageCode.UNTRUSTED_ISSUER
    with pytest.raises(MessageError) as info:
        verify_notice(raw, kit.signer(kit.STRANGER).sign(b"busguard/compromise-notice/v1\x00" + raw), kit.keys, [kit.OPERATOR])
    assert info.value.code is MessageCode.BAD_SIGNATURE
    with pytest.raises(MessageError) as info:
        verify_notice(raw, kit.signer(kit.OPERATOR).sign(raw), kit.keys, [kit.OPERATOR])
    assert info.value.code is MessageCode.BAD_SIGNATURE
    with pytest.raises(MessageError) as info:
        verify_notice(raw, signature, lambda a, k: [], [kit.OPERATOR])
    assert info.value.code is MessageCode.UNKNOWN_SIGNER


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"compromised_from": "yesterday"}, MessageCode.MALFORMED_TIMESTAMP),
        ({"issued_at": "2026-13-01T00:00:00Z"}, MessageCode.MALFORMED_TIMESTAMP),
        ({"session_id": "s", "subject_key_id": "k1"}, MessageCode.MALFORMED_FIELD),
        ({"detected": ()}, MessageCode.MALFORMED_FIELD),
    ],
)
def test_malformed_notices(change: dict[str, object], code: MessageCode) -> None:
    notice = msgspec.structs.replace(kit.notice(), **change)
    raw, signature = sign_notice(kit.signer(kit.OPERATOR), notice)
    with pytest.raises(MessageError) as info:
        verify_notice(raw, signature, kit.keys, [kit.OPERATOR])
    assert info.value.code is code


def test_notice_duplicate_key_and_unknown_field() -> None:
    raw, _ = sign_notice(kit.signer(kit.OPERATOR), kit.notice())
    for bad, code in (
        (raw[:-1] + b',"notice_id":"n-2"}', MessageCode.DUPLICATE_KEY),
        (raw[:-1] + b',"until":"x"}', MessageCode.UNKNOWN_FIELD),
    ):
        signature = kit.signer(kit.OPERATOR).sign(b"busguard/compromise-notice/v1\x00" + bad)
        with pytest.raises(MessageError) as info:
            verify_notice(bad, signature, kit.keys, [kit.OPERATOR])
        assert info.value.code is code


def test_notice_coverage() -> None:
    session = canonical_principal(kit.SESSION)
    agent_wide = kit.notice()
    assert notice_covers(agent_wide, session, None, ())
    assert not notice_covers(agent_wide, canonical_principal(kit.SUCCESSOR), None, ())
    assert notice_covers(kit.notice(session_id="s1"), session, "s1", ()) and not notice_covers(
        kit.notice(session_id="s1"), session, None, ()
    )
    assert notice_covers(kit.notice(subject_key_id="k1"), session, None, {"k1"}) and not notice_covers(
        kit.notice(subject_key_id="k1"), session, None, {"k2"}
    )
    weird: CompromiseNotice = msgspec.structs.replace(agent_wide, subject="x" * 600)
    assert not notice_covers(weird, session, None, ())


def test_successor_session_scoped_notice_is_not_matched() -> None:
    facts = kit.check(
        kit.payload([PLAN], successor_integrity=kit.integrity()), notices=[kit.notice(subject=kit.SUCCESSOR, session_id="any")]
    ).facts
    assert facts.successor_notices == ()
    facts = kit.check(
        kit.payload([PLAN], successor_integrity=kit.integrity()), notices=[kit.notice(subject=kit.SUCCESSOR, subject_key_id="k1")]
    ).facts
    assert facts.successor_notices == ("n-1",)


def test_status_enum_values_are_the_wire_strings() -> None:
    assert [s.value for s in IntegrityStatus] == ["verified_clean", "potentially_compromised", "unknown"]
    component = Component(name="x", operational=False, encoding="e", sha256="0" * 64)
    assert encode(component) == b'{"name":"x","operational":false,"encoding":"e","sha256":"' + b"0" * 64 + b'"}'
