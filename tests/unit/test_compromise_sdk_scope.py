"""The successor's own check of a forwarded handoff against the signed scope."""

from __future__ import annotations

import msgspec
import pytest

from busguard.policies.compromise.message import MessageCode, MessageError, decode_handoff, encode
from busguard.policies.compromise.verdict import CompromisePolicy, ScopeMatch, evaluate
from busguard.sdk.scope import verify_components, verify_forwarded
from tests.unit import compromise_kit as kit
from tests.unit.compromise_kit import AUDIT, LOG, MEMORY, PLAN


def test_every_component_inside_the_scope_verifies() -> None:
    value = kit.payload([LOG, PLAN], declaration=kit.declaration(), scope=kit.scope(LOG, PLAN))
    report = verify_forwarded(value, handoff_id=kit.HANDOFF_ID, session=kit.SESSION, keys=kit.keys)
    assert report.all_verified and [c.name for c in report.verified] == ["log", "plan"]
    assert [c.against_scope for c in report.checks] == [ScopeMatch.MATCHES, ScopeMatch.MATCHES]


def test_forged_and_unlisted_components_are_reported_not_verified() -> None:
    forged = kit.tamper(PLAN, b"other plan")
    value = kit.payload([LOG, forged, MEMORY], scope=kit.scope(LOG, PLAN))
    report = verify_forwarded(value, handoff_id=kit.HANDOFF_ID, session=kit.SESSION, keys=kit.keys)
    assert not report.all_verified
    assert [c.against_scope for c in report.checks] == [ScopeMatch.MATCHES, ScopeMatch.MISMATCH, ScopeMatch.UNLISTED]
    assert [c.name for c in report.verified] == ["log"]
    assert report.unverified_non_operational == ()


def test_without_a_scope_nothing_verifies_and_logs_are_listed_for_the_caller() -> None:
    report = verify_forwarded(kit.payload([LOG, AUDIT, PLAN]), handoff_id=kit.HANDOFF_ID, session=kit.SESSION, keys=kit.keys)
    assert not report.scope_present and not report.all_verified and report.verified == ()
    assert [c.name for c in report.unverified_non_operational] == ["log", "audit"]


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"handoff_id": "another"}, MessageCode.WRONG_HANDOFF),
        ({"session": kit.STRANGER}, MessageCode.WRONG_SIGNER),
    ],
)
def test_a_scope_for_another_handoff_or_session_is_refused(kwargs: dict[str, str], code: MessageCode) -> None:
    args = {"handoff_id": kit.HANDOFF_ID, "session": kit.SESSION} | kwargs
    with pytest.raises(MessageError) as info:
        verify_forwarded(kit.payload([PLAN], scope=kit.scope(PLAN)), keys=kit.keys, **args)
    assert info.value.code is code


def test_a_scope_the_session_did_not_sign_is_refused() -> None:
    forged_scope = msgspec.structs.replace(kit.scope(PLAN), signature=kit.scope(LOG).signature)
    with pytest.raises(MessageError) as info:
        verify_forwarded(kit.payload([PLAN], scope=forged_scope), handoff_id=kit.HANDOFF_ID, session=kit.SESSION, keys=kit.keys)
    assert info.value.code is MessageCode.BAD_SIGNATURE


def test_what_busguard_transfers_under_scoped_is_what_the_successor_verifies() -> None:
    """The forwarded payload (the transferred components, the statements kept)
    passes the successor's check component by component."""
    forged = kit.tamper(MEMORY, b"implanted")
    original = kit.payload(
        [LOG, PLAN, forged], declaration=kit.declaration(), scope=kit.scope(PLAN, MEMORY), successor_integrity=kit.integrity()
    )
    verdict = evaluate(kit.check(original).facts, CompromisePolicy())
    handoff = decode_handoff(original)
    moved = {c.name for c in verdict.transfer}
    forwarded = encode(msgspec.structs.replace(handoff, components=tuple(c for c in handoff.components if c.name in moved)))
    report = verify_forwarded(forwarded, handoff_id=kit.HANDOFF_ID, session=kit.SESSION, keys=kit.keys)
    assert report.all_verified and [c.name for c in report.verified] == ["plan"]
    direct = verify_components(handoff.scope, handoff.components, handoff_id=kit.HANDOFF_ID, session=kit.SESSION, keys=kit.keys)
    assert [c.against_scope for c in direct.checks] == [ScopeMatch.UNLISTED, ScopeMatch.MATCHES, ScopeMatch.MISMATCH]
