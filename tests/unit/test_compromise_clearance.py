"""Issue 22, the clearance: a notice lifted by its issuer, through the real
admission path (admit_batch on a MemoryStore). Who may clear, what a
clearance must name, when it takes effect (the guard's decision order, then
`cleared_at`), and that it is stored once without lengthening the row."""

from __future__ import annotations

import hashlib
import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.admission.types import AdmissionPolicy
from busguard.policies import KINDS
from busguard.policies.compromise.clearance import KIND_COMPROMISE_CLEARANCE, clearance_for
from busguard.policies.compromise.lifecycle import decode_row
from busguard.policies.compromise.message import CompromiseClearance, CompromiseKind, CompromiseNotice, encode
from busguard.policies.compromise.policy import CompromiseSettings, agent_row, notice_row
from busguard.policies.seam import Objection, PolicyContext, policy_input
from busguard.protocol.envelope import open_envelope
from busguard.protocol.identity import canonical_principal
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.records import Decision
from busguard.protocol.registry import KeyRegistry, KeyWindow
from busguard.protocol.signing import public_key_from_seed
from busguard.protocol.timestamps import format_timestamp
from busguard.sdk.sender import Sender, SignedRecord
from busguard.state.memory.store import MemoryStore
from tests.unit import compromise_kit as kit
from tests.unit.compromise_kit import NOW, OPERATOR, PLAN, SESSION
from tests.unit.harness import Harness
from tests.unit.test_compromise_admission import handoff, handoff_record, nonce, notice_record, registry, sender

#: A second trusted issuer, so "another issuer" and "a notice against the issuer" can be told apart from "untrusted".
AUDITOR = kit.ATTESTER


def harness(**overrides: object) -> Harness:
    fields: dict[str, object] = {"trusted_attesters": (kit.ATTESTER,), "trusted_notice_issuers": (OPERATOR,), **overrides}
    settings = msgspec.convert(fields, CompromiseSettings)
    return Harness(reg=registry(), policy=AdmissionPolicy(policy_settings={"compromise": settings}))


def two_issuers() -> Harness:
    return harness(trusted_notice_issuers=(OPERATOR, AUDITOR))


def notice_bytes(n: CompromiseNotice) -> bytes:
    return encode(n)


def clearance_record(
    clearance: CompromiseClearance, *, by: str = OPERATOR, key_id: str = kit.SESSION_KEY, seed: bytes | None = None, at: int = NOW
) -> SignedRecord:
    s = Sender(seed or kit.seed(by), agent_id=by, key_id=key_id, clock_ms=lambda: at)
    value = encode(clearance)
    return s.sign(kind=KIND_COMPROMISE_CLEARANCE, task_id=f"c-{nonce()}", receiver="busguard", payload=value, nonce=nonce())


def clear(n: CompromiseNotice, cleared_at: int = NOW - 1_000, **kwargs: object) -> SignedRecord:
    return clearance_record(clearance_for(notice_bytes(n), format_timestamp(cleared_at)), **kwargs)  # type: ignore[arg-type]


def under(d: Decision) -> bool:
    """Did this undeclared plan handoff count the notice (prohibited) or not (a standard handoff)?"""
    if d.reason == Reason.UNDECLARED_OPERATIONAL_STATE:
        return True
    assert (d.outcome, d.reason) == (Outcome.FORWARD, Reason.ADMITTED), d.detail
    return False


def lifted(d: Decision) -> list[list[str]]:
    out: list[list[str]] = json.loads((d.annotations or {}).get("lifted_notices", "[]"))
    return out


def resend(n: CompromiseNotice) -> SignedRecord:
    """The notice under a task id of its own: the task index would call the same task id a retransmission."""
    return sender(OPERATOR).sign(kind="compromise-notice", task_id=f"t-{nonce()}", receiver="busguard", payload=encode(n), nonce=nonce())


def plan_handoff(task_id: str) -> SignedRecord:
    return handoff_record(handoff([PLAN]), task_id=task_id)


# ---------------------------------------------------------------- registration


def test_the_clearance_kind_is_registered_in_the_compromise_namespace_with_its_codes() -> None:
    spec = KINDS[KIND_COMPROMISE_CLEARANCE]
    assert spec.policy is not None and spec.may_use("compromise") and spec.settings is CompromiseSettings
    assert Reason.NOTICE_ALREADY_CLEARED in spec.reasons and Reason.CLEARANCE_ISSUER_UNDER_NOTICE in spec.reasons


# ---------------------------------------------------------------- the order


def test_in_one_batch_a_handoff_before_the_clearance_is_under_the_notice_and_one_after_is_not() -> None:
    h = harness()
    n = kit.notice("n-1")
    h.one(notice_record(n))
    before, c, after = h.feed(plan_handoff("h-before"), clear(n), plan_handoff("h-after"))
    assert (c.outcome, c.reason) == (Outcome.FORWARD, Reason.ADMITTED), c.detail
    assert (
        c.annotations is not None and c.annotations["notice_id"] == "n-1" and c.annotations["cleared_at"] == format_timestamp(NOW - 1_000)
    )
    assert under(before) and (before.annotations or {})["compromise_notices"] == "n-1" and lifted(before) == []
    assert not under(after) and lifted(after) == [["n-1", "cleared"]]
    # And in a later batch.
    assert not under(h.one(plan_handoff("h-later")))


def test_a_future_cleared_at_leaves_the_notice_in_force_until_both_instants_reach_it() -> None:
    h = harness()
    n = kit.notice("n-1")
    h.one(notice_record(n))
    assert h.one(clear(n, cleared_at=NOW + 60_000)).reason == Reason.ADMITTED
    assert under(h.one(plan_handoff("h-early")))
    h.now = NOW + 120_000
    value = handoff([PLAN])
    backdated = msgspec.structs.replace(kit.receipt_for(value, task_id="h-back", issued_at=NOW + 30_000), nonce=nonce(), sequence=7_000)
    assert under(h.one(sender(SESSION).sign_receipt(backdated, value)))  # its issued_at is before cleared_at
    fresh = msgspec.structs.replace(kit.receipt_for(value, task_id="h-late", issued_at=NOW + 120_000), nonce=nonce(), sequence=7_001)
    assert not under(h.one(sender(SESSION).sign_receipt(fresh, value)))


# ---------------------------------------------------------------- who may clear


def test_a_clearance_by_another_trusted_issuer_is_refused_and_lifts_nothing() -> None:
    h = two_issuers()
    n = kit.notice("n-1")
    h.one(notice_record(n))
    other = clearance_for(notice_bytes(n), format_timestamp(NOW - 1_000))
    d = h.one(clearance_record(msgspec.structs.replace(other, issuer=AUDITOR), by=AUDITOR))
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.CLEARANCE_UNAUTHENTIC) and d.detail.startswith("wrong_issuer: ")
    assert under(h.one(plan_handoff("h-1")))


@pytest.mark.parametrize(
    ("by", "issuer", "code"),
    [(kit.STRANGER, kit.STRANGER, "untrusted_issuer"), (kit.STRANGER, OPERATOR, "wrong_signer")],
)
def test_a_clearance_not_signed_by_a_trusted_issuer_is_refused(by: str, issuer: str, code: str) -> None:
    h = harness()
    n = kit.notice("n-1")
    h.one(notice_record(n))
    c = msgspec.structs.replace(clearance_for(notice_bytes(n), format_timestamp(NOW - 1_000)), issuer=issuer)
    d = h.one(clearance_record(c, by=by))
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.CLEARANCE_UNAUTHENTIC) and d.detail.startswith(f"{code}: ")
    assert under(h.one(plan_handoff("h-1")))


def test_a_clearance_signed_with_another_key_of_the_issuer_is_refused() -> None:
    names = (SESSION, kit.SUCCESSOR, kit.ATTESTER, kit.STRANGER)
    windows = {canonical_principal(n): (KeyWindow(key_id=kit.SESSION_KEY, public_key=public_key_from_seed(kit.seed(n))),) for n in names}
    second = hashlib.sha256(b"operator second key").digest()
    windows[canonical_principal(OPERATOR)] = (
        KeyWindow(key_id=kit.SESSION_KEY, public_key=public_key_from_seed(kit.seed(OPERATOR))),
        KeyWindow(key_id="k2", public_key=public_key_from_seed(second)),
    )
    base = harness()
    h = Harness(reg=KeyRegistry(windows), policy=base.policy)
    n = kit.notice("n-1")
    h.one(notice_record(n))
    d = h.one(clear(n, key_id="k2", seed=second))
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.CLEARANCE_UNAUTHENTIC) and d.detail.startswith("wrong_key: ")
    assert h.one(clear(n)).reason == Reason.ADMITTED  # the notice's own key may


def test_an_issuer_under_a_notice_in_force_cannot_clear() -> None:
    h = two_issuers()
    n = kit.notice("n-1")
    h.one(notice_record(n))
    against = msgspec.structs.replace(kit.notice("n-op", subject=OPERATOR), issuer=AUDITOR)
    assert h.one(notice_record(against, by=AUDITOR)).reason == Reason.ADMITTED
    d = h.one(clear(n))
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.CLEARANCE_ISSUER_UNDER_NOTICE) and "n-op" in d.detail
    assert under(h.one(plan_handoff("h-1")))
    # Once the notice against the issuer is itself cleared by its issuer, the issuer's clearance is its word again.
    assert h.one(clear(against, by=AUDITOR)).reason == Reason.ADMITTED
    assert h.one(clear(n)).reason == Reason.ADMITTED
    assert not under(h.one(plan_handoff("h-2")))


# ---------------------------------------------------------------- what it names


def test_a_clearance_of_a_notice_not_seen_is_refused_and_does_not_pre_clear_it() -> None:
    h = harness()
    n = kit.notice("n-1")
    d = h.one(clear(n))
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.CLEARANCE_UNKNOWN_NOTICE)
    h.one(notice_record(n))
    assert under(h.one(plan_handoff("h-1")))


def test_a_clearance_naming_other_bytes_or_another_row_lifts_nothing() -> None:
    h = harness()
    n = kit.notice("n-1")
    h.one(notice_record(n))
    c = clearance_for(notice_bytes(n), format_timestamp(NOW - 1_000))
    wrong_hash = h.one(clearance_record(msgspec.structs.replace(c, notice_sha256="0" * 64)))
    assert (wrong_hash.outcome, wrong_hash.reason) == (Outcome.REJECT, Reason.CLEARANCE_NOTICE_MISMATCH)
    wrong_row = h.one(clearance_record(msgspec.structs.replace(c, session_id="sess-1")))
    assert (wrong_row.outcome, wrong_row.reason) == (Outcome.REJECT, Reason.CLEARANCE_UNKNOWN_NOTICE)
    assert under(h.one(plan_handoff("h-1")))


def test_a_notice_kept_before_clearances_existed_cannot_be_cleared() -> None:
    h = harness()
    n = kit.notice("n-1")
    store = h.store
    assert isinstance(store, MemoryStore)
    row = agent_row(canonical_principal(SESSION))
    h.one(notice_record(n))
    legacy = msgspec.json.encode([n])  # a row of bare notices, as written before entries existed
    store.policy[row] = msgspec.structs.replace(store.policy[row], value=legacy)
    d = h.one(clear(n))
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.CLEARANCE_NOTICE_MISMATCH) and "before clearances existed" in d.detail


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"cleared_at": "2026-11-29 11:59:00Z"}, "clearance.cleared_at"),
        ({"subject_key_id": "k1", "session_id": "s-1"}, "clearance"),
        ({"notice_id": ""}, "notice_id"),
        ({"notice_sha256": "ABC"}, "notice_sha256"),
    ],
)
def test_a_malformed_clearance_is_refused_with_its_code_and_place(change: dict[str, str], where: str) -> None:
    h = harness()
    n = kit.notice("n-1")
    h.one(notice_record(n))
    c = clearance_for(notice_bytes(n), format_timestamp(NOW - 1_000))
    d = h.one(clearance_record(msgspec.structs.replace(c, **change)))
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.CLEARANCE_MALFORMED) and where in d.detail, d.detail


def test_an_unknown_field_or_another_version_is_malformed() -> None:
    h = harness()
    n = kit.notice("n-1")
    h.one(notice_record(n))
    raw = json.loads(encode(clearance_for(notice_bytes(n), format_timestamp(NOW - 1_000))))
    for value, code in ((dict(raw, extra=1), "unknown_field"), (dict(raw, v=2), "unsupported_version")):
        rec = sender(OPERATOR).sign(
            kind=KIND_COMPROMISE_CLEARANCE, task_id=f"c-{nonce()}", receiver="busguard", payload=json.dumps(value).encode(), nonce=nonce()
        )
        d = h.one(rec)
        assert (d.reason, d.detail.split(":")[0]) == (Reason.CLEARANCE_MALFORMED, code)


def test_a_cleared_at_past_the_horizon_is_refused() -> None:
    h = harness(notice_expiry_horizon_ms=3_600_000)
    n = kit.notice("n-1")
    h.one(notice_record(n))
    d = h.one(clear(n, cleared_at=NOW + 3_600_001))
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.CLEARANCE_TOO_FAR)
    assert h.one(clear(n, cleared_at=NOW + 3_600_000)).reason == Reason.ADMITTED


# ---------------------------------------------------------------- once, and stored


def test_the_first_clearance_wins_and_a_cleared_id_stays_cleared() -> None:
    h = harness()
    n = kit.notice("n-1")
    h.one(notice_record(n))
    first = h.one(clear(n))
    assert first.reason == Reason.ADMITTED
    second = h.one(clear(n, cleared_at=NOW - 500))
    assert (second.outcome, second.reason) == (Outcome.REJECT, Reason.NOTICE_ALREADY_CLEARED) and first.receipt_id in second.detail
    resent = h.one(resend(n))  # the same notice again, under a new task id and nonce
    assert (resent.outcome, resent.reason) == (Outcome.REJECT, Reason.NOTICE_ALREADY_CLEARED)
    assert not under(h.one(plan_handoff("h-1")))


def test_a_replayed_clearance_is_refused_by_the_nonce_rules() -> None:
    h = harness()
    n = kit.notice("n-1")
    h.one(notice_record(n))
    rec = clear(n)
    assert h.one(rec).reason == Reason.ADMITTED
    again = h.one(rec)
    assert again.outcome != Outcome.FORWARD and again.reason == Reason.EXACT_DUPLICATE


def test_the_clearance_is_stored_once_on_the_entry_and_the_row_does_not_live_longer() -> None:
    h = harness(notice_retention_ms=10 * 86_400_000)
    store = h.store
    assert isinstance(store, MemoryStore)
    n = kit.notice("n-1")
    h.one(notice_record(n))
    row = notice_row(n)
    expires = store.policy[row].expires_at
    assert expires == NOW + 10 * 86_400_000
    h.now = NOW + 3_600_000
    c = h.one(clear(n, at=h.now))
    assert c.reason == Reason.ADMITTED
    assert store.policy[row].expires_at == expires  # not NOW + 1 h + 10 days
    (entry,) = decode_row(store.policy[row].value)
    assert (entry.cleared_at, entry.cleared_by, entry.sha256) == (
        format_timestamp(NOW - 1_000),
        c.receipt_id,
        hashlib.sha256(encode(n)).hexdigest(),
    )
    assert entry.issuer_key_id == kit.SESSION_KEY


# ---------------------------------------------------------------- against a model


OPS = st.lists(st.tuples(st.sampled_from(("notice", "clear", "handoff")), st.booleans()), min_size=1, max_size=10)


@settings(max_examples=60, deadline=None)
@given(ops=OPS)
def test_random_interleavings_match_the_reference_model(ops: list[tuple[str, bool]]) -> None:
    """Notices, clearances and handoffs in any order, cut into batches
    anywhere: a handoff is under the notice exactly when the notice was
    admitted before it and no clearance was admitted before it; the first
    clearance after the notice is admitted, later ones and re-sent notices
    are `notice_already_cleared`, one before any notice `clearance_unknown_notice`."""
    h = Harness(reg=registry(), policy=harness().policy)
    n = kit.notice("n-1")
    seen = cleared = False
    expected: list[tuple[str, Reason | bool]] = []
    records: list[list[SignedRecord]] = [[]]
    for i, (op, cut) in enumerate(ops):
        if cut and records[-1]:
            records.append([])
        if op == "notice":
            records[-1].append(resend(n))
            expected.append((op, Reason.NOTICE_ALREADY_CLEARED if cleared else Reason.ADMITTED))
            seen = seen or not cleared
        elif op == "clear":
            records[-1].append(clear(n))
            reason = Reason.CLEARANCE_UNKNOWN_NOTICE if not seen else Reason.NOTICE_ALREADY_CLEARED if cleared else Reason.ADMITTED
            expected.append((op, reason))
            cleared = cleared or reason == Reason.ADMITTED
        else:
            records[-1].append(plan_handoff(f"h-{i}"))
            expected.append((op, seen and not cleared))
    got = [d for batch in records for d in h.feed(*batch)]
    for (op, want), d in zip(expected, got, strict=True):
        if op == "handoff":
            assert under(d) is want
        else:
            assert d.reason == want, (op, d.detail)


def test_the_model_sees_a_re_sent_notice_before_any_clearance_as_admitted() -> None:
    h = harness()
    n = kit.notice("n-1", detected=(CompromiseKind.COMPROMISED_CREDENTIALS,))
    assert [d.reason for d in h.feed(resend(n), resend(n))] == [Reason.ADMITTED, Reason.ADMITTED]


def test_a_refused_clearance_writes_nothing_and_reads_at_most_four_rows() -> None:
    h = two_issuers()
    store = h.store
    assert isinstance(store, MemoryStore)
    n = kit.notice("n-1")
    h.one(notice_record(n))
    before = dict(store.policy)
    other = msgspec.structs.replace(clearance_for(notice_bytes(n), format_timestamp(NOW - 1_000)), issuer=AUDITOR)
    refusals = [
        clearance_record(other, by=AUDITOR),
        clear(n, cleared_at=NOW + 2 * 86_400_000),
        clearance_record(msgspec.structs.replace(other, issuer=OPERATOR, notice_sha256="1" * 64)),
    ]
    assert [h.one(r).outcome for r in refusals] == [Outcome.REJECT] * 3
    assert dict(store.policy) == before
    # The rows a clearance names: the notice's, and the issuer's agent, session and key rows.
    value = encode(clearance_for(notice_bytes(n), format_timestamp(NOW)))
    receipt = msgspec.structs.replace(
        kit.receipt_for(value, task_id="c-rows", sender=OPERATOR, receiver="busguard"), kind=KIND_COMPROMISE_CLEARANCE, session_id="op-sess"
    )
    rec = sender(OPERATOR).sign_receipt(receipt, value)
    policy = KINDS[KIND_COMPROMISE_CLEARANCE].policy
    assert policy is not None
    context = PolicyContext(registry(), NOW, dict(h.policy.policy_settings))
    parsed = policy.parse(policy_input(open_envelope(rec.value, rec.headers)), context)
    assert not isinstance(parsed, Objection)
    assert len(set(policy.keys(parsed))) == len(list(policy.keys(parsed))) == 4


def test_a_notice_id_held_by_one_issuer_and_key_cannot_be_taken_over_and_then_cleared() -> None:
    """Re-sending a notice replaces its entry, so a re-send by another
    issuer, or by another key of the issuer, would carry the right to clear
    it: both are refused, and the original entry (and its key) stays."""
    names = (SESSION, kit.SUCCESSOR, kit.ATTESTER, kit.STRANGER)
    windows = {canonical_principal(n): (KeyWindow(key_id=kit.SESSION_KEY, public_key=public_key_from_seed(kit.seed(n))),) for n in names}
    second = hashlib.sha256(b"operator second key").digest()
    windows[canonical_principal(OPERATOR)] = (
        KeyWindow(key_id=kit.SESSION_KEY, public_key=public_key_from_seed(kit.seed(OPERATOR))),
        KeyWindow(key_id="k2", public_key=public_key_from_seed(second)),
    )
    h = Harness(reg=KeyRegistry(windows), policy=two_issuers().policy)
    n = kit.notice("n-1")
    h.one(notice_record(n))
    takeover = msgspec.structs.replace(n, issuer=AUDITOR)
    d = h.one(
        sender(AUDITOR).sign(kind="compromise-notice", task_id="t-other", receiver="busguard", payload=encode(takeover), nonce=nonce())
    )
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.NOTICE_UNAUTHENTIC) and d.detail.startswith("wrong_issuer: ")
    s2 = Sender(second, agent_id=OPERATOR, key_id="k2", clock_ms=lambda: NOW)
    d2 = h.one(s2.sign(kind="compromise-notice", task_id="t-k2", receiver="busguard", payload=encode(n), nonce=nonce()))
    assert (d2.outcome, d2.reason) == (Outcome.REJECT, Reason.NOTICE_UNAUTHENTIC) and d2.detail.startswith("wrong_key: ")
    assert h.one(clear(n, key_id="k2", seed=second)).reason == Reason.CLEARANCE_UNAUTHENTIC
    assert under(h.one(plan_handoff("h-1")))
    assert h.one(resend(n)).reason == Reason.ADMITTED  # the holder itself may re-send it
