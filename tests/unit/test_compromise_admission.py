"""Session handoffs and compromise notices through the real admission path
(admit_batch on a MemoryStore): notice state, every route of seed 004's
verdicts, the replacement a scoped handoff is forwarded as, and the
successor's SDK check of it."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.admission.types import AdmissionPolicy
from busguard.policies import KINDS
from busguard.policies.compromise.message import (
    KIND_SESSION_HANDOFF,
    Component,
    CompromiseKind,
    CompromiseNotice,
    IntegrityStatus,
    InteractionRule,
    decode_handoff,
    encode,
)
from busguard.policies.compromise.policy import (
    KIND_COMPROMISE_NOTICE,
    MAX_NOTICES_PER_ROW,
    CompromiseSettings,
    agent_row,
    key_row,
    notice_row,
    session_row,
)
from busguard.protocol.identity import canonical_principal
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.records import Decision
from busguard.protocol.registry import KeyRegistry, KeyWindow
from busguard.protocol.signing import public_key_from_seed
from busguard.protocol.timestamps import format_timestamp
from busguard.sdk.scope import verify_forwarded
from busguard.sdk.sender import Sender, SignedRecord
from busguard.state.memory.store import MemoryStore
from tests.unit import compromise_kit as kit
from tests.unit.compromise_kit import AUDIT, LOG, MEMORY, NOW, OPERATOR, PLAN, SESSION, SUCCESSOR
from tests.unit.harness import Harness

_nonces = itertools.count()


def registry() -> KeyRegistry:
    names = (SESSION, SUCCESSOR, kit.ATTESTER, kit.STRANGER, OPERATOR)
    return KeyRegistry(
        {canonical_principal(n): (KeyWindow(key_id=kit.SESSION_KEY, public_key=public_key_from_seed(kit.seed(n))),) for n in names}
    )


def harness(**settings: object) -> Harness:
    policy = AdmissionPolicy(
        policy_settings={
            "compromise": CompromiseSettings(trusted_attesters=(kit.ATTESTER,), trusted_notice_issuers=(OPERATOR,), **settings)
        }
    )  # type: ignore[arg-type]
    return Harness(reg=registry(), policy=policy)


def sender(name: str) -> Sender:
    return Sender(kit.seed(name), agent_id=name, key_id=kit.SESSION_KEY, clock_ms=lambda: NOW)


def nonce() -> str:
    return f"nonce-{next(_nonces):012d}-abcdef"


def handoff_record(value: bytes, *, task_id: str = kit.HANDOFF_ID, by: str = SESSION) -> SignedRecord:
    receipt = msgspec.structs.replace(kit.receipt_for(value, task_id=task_id, sender=by), nonce=nonce(), sequence=next(_nonces))
    return sender(by).sign_receipt(receipt, value)


def notice_record(notice: CompromiseNotice, *, by: str = OPERATOR) -> SignedRecord:
    return sender(by).sign(
        kind=KIND_COMPROMISE_NOTICE, task_id=notice.notice_id, receiver="busguard", payload=encode(notice), nonce=nonce()
    )


def handoff(components: Sequence[Component], **statements: object) -> bytes:
    return kit.payload(components, **statements)  # type: ignore[arg-type]


def stripped(d: Decision) -> list[dict[str, object]]:
    assert d.annotations is not None
    out: list[dict[str, object]] = json.loads(d.annotations["stripped"])
    return out


def forwarded_components(d: Decision, original: bytes) -> list[str]:
    return [c.name for c in decode_handoff(d.replacement if d.replacement is not None else original).components]


# ---------------------------------------------------------------- registration


def test_both_kinds_are_registered_sharing_the_compromise_namespace() -> None:
    h, n = KINDS[KIND_SESSION_HANDOFF], KINDS[KIND_COMPROMISE_NOTICE]
    assert h.policy is not None and n.policy is not None
    assert h.may_use("compromise") and n.may_use("compromise") and not h.may_use(KIND_SESSION_HANDOFF)
    assert "quarantine" in h.routes
    assert set(h.reasons) >= {Reason.UNDECLARED_OPERATIONAL_STATE, Reason.DOUBLE_COMPROMISE_QUARANTINE, Reason.HANDOFF_UNAUTHENTIC}


# ---------------------------------------------------------------- notices


def test_a_notice_from_a_trusted_issuer_is_admitted_and_kept_under_the_row_it_covers() -> None:
    h = harness()
    n = kit.notice("n-1", session_id="sess-1")
    d = h.one(notice_record(n))
    assert (d.outcome, d.reason) == (Outcome.FORWARD, Reason.ADMITTED)
    assert d.annotations is not None and d.annotations["covers"] == "session" and d.annotations["notice_id"] == "n-1"
    assert notice_row(n) == session_row(canonical_principal(SESSION), "sess-1")
    assert notice_row(kit.notice(subject_key_id="k1")) == key_row(canonical_principal(SESSION), "k1")
    assert notice_row(kit.notice()) == agent_row(canonical_principal(SESSION))
    # A second notice on the same row is merged, not overwritten.
    d2 = h.one(notice_record(kit.notice("n-2", session_id="sess-1")))
    assert d2.annotations is not None and d2.annotations["notices_on_row"] == "2"


def test_a_row_keeps_at_most_64_notices() -> None:
    """An issuer cannot grow one row without bound (docs/operations.md,
    "Bounds"): past MAX_NOTICES_PER_ROW the row keeps the notices that start
    earliest, and its TTL is the retention from the latest admission."""
    h = harness()
    ds = [h.one(notice_record(kit.notice(f"n-{i:03d}", session_id="sess-1", compromised_from=NOW - 1_000_000 + i))) for i in range(70)]
    assert all(d.reason == Reason.ADMITTED for d in ds)
    assert [d.annotations["notices_on_row"] for d in ds if d.annotations is not None][-7:] == ["64"] * 7
    store = h.store
    assert isinstance(store, MemoryStore)
    kept = msgspec.json.decode(store.policy[session_row(canonical_principal(SESSION), "sess-1")].value)
    assert len(kept) == MAX_NOTICES_PER_ROW == 64
    assert {e["notice"]["notice_id"] for e in kept} == {f"n-{i:03d}" for i in range(64)}


@pytest.mark.parametrize(
    ("by", "issuer", "reason"),
    [
        (kit.STRANGER, kit.STRANGER, Reason.NOTICE_UNAUTHENTIC),  # not a trusted issuer
        (kit.STRANGER, OPERATOR, Reason.NOTICE_UNAUTHENTIC),  # the issuer's name on someone else's receipt
    ],
)
def test_a_notice_not_signed_by_a_trusted_issuer_is_refused(by: str, issuer: str, reason: Reason) -> None:
    n = msgspec.structs.replace(kit.notice(), issuer=issuer)
    h = harness()
    d = h.one(notice_record(n, by=by))
    assert (d.outcome, d.reason) == (Outcome.REJECT, reason)
    # Nothing was remembered: the session still hands off operational state as a clean one.
    later = h.one(handoff_record(handoff([PLAN])))
    assert later.outcome == Outcome.FORWARD and later.annotations is not None and later.annotations["verdict"] == "clean"


def test_a_malformed_notice_is_refused_with_its_code() -> None:
    d = harness().one(
        sender(OPERATOR).sign(kind=KIND_COMPROMISE_NOTICE, task_id="n-x", receiver="busguard", payload=b'{"v":1}', nonce=nonce())
    )
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.NOTICE_MALFORMED) and "missing_field" in d.detail


# ---------------------------------------------------------------- failure mode 1: compromise inheritance


def test_an_undeclared_compromise_known_from_a_notice_with_operational_state_is_prohibited() -> None:
    h = harness()
    h.one(notice_record(kit.notice("n-1")))
    value = handoff([PLAN, LOG], successor_integrity=kit.integrity())
    d = h.one(handoff_record(value))
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.UNDECLARED_OPERATIONAL_STATE)
    assert d.annotations is not None and d.annotations["verdict"] == "prohibited" and d.annotations["compromise_notices"] == "n-1"
    assert [(s["name"], s["why"]) for s in stripped(d)] == [("plan", "no_scope"), ("log", "handoff_prohibited")] and d.replacement is None
    # Without the notice the same handoff is a standard one: the notice is what made the difference.
    clean = harness().one(handoff_record(value))
    assert (clean.outcome, clean.annotations and clean.annotations["verdict"]) == (Outcome.FORWARD, "clean")


def test_the_same_with_only_logs_is_forwarded_marked_with_the_notice() -> None:
    h = harness()
    h.one(notice_record(kit.notice("n-1", session_id="sess-1")))
    value = handoff([LOG, AUDIT], successor_integrity=kit.integrity())
    d = h.one(handoff_record(value))
    assert (d.outcome, d.reason) == (Outcome.FORWARD, Reason.ADMITTED)
    assert d.annotations is not None and d.annotations["compromise_notices"] == "n-1" and d.annotations["verdict"] == "scoped"
    assert d.replacement is None  # nothing stripped: forwarded as signed


def test_a_notice_in_the_same_batch_as_the_handoff_is_seen_by_it() -> None:
    h = harness()
    a, b = h.feed(notice_record(kit.notice("n-1", subject_key_id="k1")), handoff_record(handoff([PLAN])))
    assert a.outcome == Outcome.FORWARD and (b.outcome, b.reason) == (Outcome.REJECT, Reason.UNDECLARED_OPERATIONAL_STATE)


def test_policy_requiring_a_declaration_refuses_even_logs() -> None:
    h = harness(require_declaration_for_compromised=True)
    h.one(notice_record(kit.notice("n-1")))
    d = h.one(handoff_record(handoff([LOG])))
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.UNDECLARED_COMPROMISE)


def test_an_undeclared_session_whose_successor_rederives_state_may_hand_off() -> None:
    h = harness()
    h.one(notice_record(kit.notice("n-1")))
    value = handoff([PLAN], scope=kit.scope(PLAN), successor_integrity=kit.integrity(rederives=True))
    d = h.one(handoff_record(value))
    assert d.outcome == Outcome.FORWARD and d.annotations is not None and d.annotations["verdict"] == "scoped"


# ---------------------------------------------------------------- SCOPED: strip, record, verify


def test_a_forged_scope_component_is_stripped_recorded_by_hash_and_never_forwarded() -> None:
    forged = kit.tamper(MEMORY, b"injected instructions")
    value = handoff(
        [PLAN, forged, LOG], declaration=kit.declaration(), scope=kit.scope(PLAN, MEMORY, LOG), successor_integrity=kit.integrity()
    )
    d = harness().one(handoff_record(value))
    assert (d.outcome, d.reason) == (Outcome.FORWARD, Reason.ADMITTED)
    assert d.annotations is not None and d.annotations["verdict"] == "scoped"
    from busguard.policies.compromise.message import component_sha256

    assert stripped(d) == [{"name": "memory", "sha256": component_sha256(forged), "operational": True, "why": "scope_hash_mismatch"}]
    assert d.replacement is not None and b"injected" not in d.replacement
    assert forwarded_components(d, value) == ["plan", "log"]
    # The successor's SDK checks the forwarded payload against the signed scope, component by component.
    report = verify_forwarded(d.replacement, handoff_id=kit.HANDOFF_ID, session=SESSION, keys=kit.keys)
    assert report.all_verified and [c.name for c in report.verified] == ["plan", "log"]
    # The forged original would not pass that check.
    assert not verify_forwarded(value, handoff_id=kit.HANDOFF_ID, session=SESSION, keys=kit.keys).all_verified


def test_a_compromised_session_with_a_scope_still_moves_its_verified_state() -> None:
    """No paralysis: the unscoped operational component stays, the scoped one moves."""
    value = handoff([PLAN, MEMORY], declaration=kit.declaration(), scope=kit.scope(PLAN), successor_integrity=kit.integrity())
    d = harness().one(handoff_record(value))
    assert d.outcome == Outcome.FORWARD and forwarded_components(d, value) == ["plan"]
    assert [s["why"] for s in stripped(d)] == ["outside_scope"]


def test_nothing_inside_a_scope_is_prohibited() -> None:
    value = handoff([MEMORY], declaration=kit.declaration(), successor_integrity=kit.integrity())
    d = harness().one(handoff_record(value))
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.NOTHING_TRANSFERABLE)


# ---------------------------------------------------------------- failure mode 2: double compromise


def _double(rule: InteractionRule | None, status: IntegrityStatus | None = IntegrityStatus.POTENTIALLY_COMPROMISED) -> bytes:
    return handoff(
        [PLAN, MEMORY],
        declaration=kit.declaration(),
        scope=kit.scope(PLAN),
        successor_integrity=kit.integrity(status) if status is not None else None,
        interaction=kit.interaction(rule) if rule is not None else None,
    )


def test_double_compromise_partial_transfer_is_forwarded_with_a_caution_flag() -> None:
    value = _double(InteractionRule.PARTIAL_TRANSFER)
    d = harness().one(handoff_record(value))
    assert d.outcome == Outcome.FORWARD and d.annotations is not None
    assert d.annotations["caution"] == "double_compromise" and d.annotations["verdict"] == "double_compromise_caution"
    assert forwarded_components(d, value) == ["plan"]


def test_double_compromise_quarantined_state_only_goes_to_the_quarantine_route_not_downstream() -> None:
    value = _double(InteractionRule.QUARANTINED_STATE_ONLY)
    d = harness().one(handoff_record(value))
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.DOUBLE_COMPROMISE_QUARANTINE)
    assert d.notices is not None and len(d.notices) == 1
    (q,) = d.notices
    assert (q.route, q.key) == ("quarantine", kit.HANDOFF_ID.encode())
    assert [c.name for c in decode_handoff(q.value).components] == ["plan"]
    assert verify_forwarded(q.value, handoff_id=kit.HANDOFF_ID, session=SESSION, keys=kit.keys).all_verified


@pytest.mark.parametrize(
    ("rule", "reason"),
    [(InteractionRule.ESCALATE, Reason.DOUBLE_COMPROMISE_ESCALATE), (None, Reason.DOUBLE_COMPROMISE_NO_RULE)],
)
def test_double_compromise_escalate_or_no_rule_goes_to_a_third_party(rule: InteractionRule | None, reason: Reason) -> None:
    d = harness().one(handoff_record(_double(rule)))
    assert (d.outcome, d.reason) == (Outcome.ESCALATE, reason) and d.replacement is None and d.notices is None


@pytest.mark.parametrize("status", [None, IntegrityStatus.UNKNOWN])
def test_a_missing_or_unknown_successor_receipt_counts_as_compromised(status: IntegrityStatus | None) -> None:
    d = harness().one(handoff_record(_double(InteractionRule.ESCALATE, status)))
    assert (d.outcome, d.reason) == (Outcome.ESCALATE, Reason.DOUBLE_COMPROMISE_ESCALATE)


def test_an_integrity_receipt_signed_by_a_trusted_attester_counts_and_a_strangers_does_not() -> None:
    attested = handoff([PLAN], declaration=kit.declaration(), scope=kit.scope(PLAN), successor_integrity=kit.integrity(by=kit.ATTESTER))
    d = harness().one(handoff_record(attested))
    assert d.annotations is not None and d.annotations["verdict"] == "scoped"
    vouched = handoff([PLAN], declaration=kit.declaration(), scope=kit.scope(PLAN), successor_integrity=kit.integrity(by=kit.STRANGER))
    d2 = harness().one(handoff_record(vouched))
    assert (d2.outcome, d2.reason) == (Outcome.ESCALATE, Reason.DOUBLE_COMPROMISE_NO_RULE)


def test_a_notice_against_the_successor_makes_it_compromised() -> None:
    h = harness()
    h.one(notice_record(kit.notice("n-s", subject=SUCCESSOR)))
    d = h.one(handoff_record(handoff([PLAN], declaration=kit.declaration(), scope=kit.scope(PLAN), successor_integrity=kit.integrity())))
    assert (d.outcome, d.reason) == (Outcome.ESCALATE, Reason.DOUBLE_COMPROMISE_NO_RULE)


def test_a_key_notice_with_compromised_credentials_makes_the_scope_untrusted() -> None:
    h = harness()
    h.one(notice_record(kit.notice("n-k", subject_key_id="k1", detected=(CompromiseKind.COMPROMISED_CREDENTIALS,))))
    value = handoff([PLAN, LOG], declaration=kit.declaration(), scope=kit.scope(PLAN, LOG), successor_integrity=kit.integrity())
    d = h.one(handoff_record(value))
    assert d.outcome == Outcome.FORWARD and forwarded_components(d, value) == ["log"]
    assert [s["why"] for s in stripped(d)] == ["scope_untrusted"]


# ---------------------------------------------------------------- unusable handoffs


def test_a_statement_signed_by_someone_else_is_unauthentic() -> None:
    value = handoff([PLAN], declaration=kit.declaration(by=kit.STRANGER), scope=kit.scope(PLAN), successor_integrity=kit.integrity())
    d = harness().one(handoff_record(value))
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.HANDOFF_UNAUTHENTIC) and "wrong_signer" in d.detail


def test_a_malformed_payload_is_refused_after_the_signature() -> None:
    d = harness().one(handoff_record(b'{"v":1,"components":[],"extra":1}'))
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.HANDOFF_MALFORMED) and "unknown_field" in d.detail


def test_every_verdict_carries_its_manifest_digest() -> None:
    values = [handoff([LOG]), _double(InteractionRule.PARTIAL_TRANSFER), _double(InteractionRule.QUARANTINED_STATE_ONLY), _double(None)]
    digests = [harness().one(handoff_record(v)).annotations for v in values]
    assert all(a is not None and len(a["manifest_digest"]) == 64 for a in digests)
    assert len({a["manifest_digest"] for a in digests if a is not None}) == len(values)


def test_a_replayed_handoff_is_decided_once() -> None:
    h = harness()
    record = handoff_record(_double(InteractionRule.QUARANTINED_STATE_ONLY))
    first = h.one(record, offset=5)
    again = h.one(record, offset=5)
    assert msgspec.json.encode(first) == msgspec.json.encode(again)
    assert first.notices is not None and first.notices[0].route == "quarantine"


def test_the_sample_codes_fall_through_is_closed_at_admission() -> None:
    """Sample code: require_declaration_for_compromised=false lets an undeclared
    compromise fall through gate 2 and end SCOPED with its operational state.
    Here (default flag, false) it is prohibited; the scope does not save it."""
    h = harness(require_declaration_for_compromised=False)
    h.one(notice_record(kit.notice("n-1")))
    d = h.one(handoff_record(handoff([PLAN], scope=kit.scope(PLAN), successor_integrity=kit.integrity())))
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.UNDECLARED_OPERATIONAL_STATE)


_COMPONENTS = (PLAN, MEMORY, LOG, AUDIT)
_STATUSES = (None, IntegrityStatus.VERIFIED_CLEAN, IntegrityStatus.POTENTIALLY_COMPROMISED, IntegrityStatus.UNKNOWN)
_RULES = (None, *InteractionRule)


@settings(max_examples=60, deadline=None)
@given(
    carried=st.lists(st.sampled_from(range(4)), min_size=1, max_size=4, unique=True),
    scoped=st.none() | st.sets(st.sampled_from(range(4))),
    forged=st.sets(st.sampled_from(range(4))),
    declared=st.booleans(),
    noticed=st.booleans(),
    status=st.sampled_from(_STATUSES),
    rule=st.sampled_from(_RULES),
)
def test_stripped_components_never_reach_the_successor(
    carried: list[int],
    scoped: set[int] | None,
    forged: set[int],
    declared: bool,
    noticed: bool,
    status: IntegrityStatus | None,
    rule: InteractionRule | None,
) -> None:
    """Whatever the inputs: one decision; what is forwarded (or quarantined) is
    exactly the verdict's `transfer`, never a stripped component's bytes, and
    with a scope the successor's SDK verifies every forwarded component."""
    components = [kit.tamper(_COMPONENTS[i], b"forged " + _COMPONENTS[i].name.encode()) if i in forged else _COMPONENTS[i] for i in carried]
    value = handoff(
        components,
        declaration=kit.declaration() if declared else None,
        scope=kit.scope(*(_COMPONENTS[i] for i in sorted(scoped))) if scoped is not None else None,
        successor_integrity=kit.integrity(status) if status is not None else None,
        interaction=kit.interaction(rule) if rule is not None else None,
    )
    h = harness()
    if noticed:
        h.one(notice_record(kit.notice("n-1")))
    d = h.one(handoff_record(value))
    assert d.annotations is not None
    transfer = [name for name, _ in json.loads(d.annotations["transferred"])]
    gone = {s["sha256"] for s in stripped(d)}
    assert len(transfer) + len(stripped(d)) == len(components)
    carried_on = d.replacement if d.outcome == Outcome.FORWARD else d.notices[0].value if d.notices else None
    if d.outcome == Outcome.FORWARD:
        assert d.annotations["handoff_route"] in ("forward", "forward_with_caution")
    if carried_on is None:
        carried_on = value if d.outcome == Outcome.FORWARD else None
    if carried_on is not None:
        sent = decode_handoff(carried_on).components
        from busguard.policies.compromise.message import component_sha256

        assert [c.name for c in sent] == transfer and not {component_sha256(c) for c in sent} & gone
        if scoped is not None and (declared or noticed):
            assert verify_forwarded(carried_on, handoff_id=kit.HANDOFF_ID, session=SESSION, keys=kit.keys).all_verified
    else:
        assert d.outcome in (Outcome.REJECT, Outcome.ESCALATE) and not d.notices


def test_the_handoff_policy_parses_with_the_principal_admission_derived() -> None:
    """The seam passes the canonical principal; the policy does not derive its own."""
    from busguard.admission import policystep
    from busguard.policies.seam import PolicyContext, policy_input
    from busguard.protocol.envelope import Envelope

    r = handoff_record(handoff([LOG]))
    env = Envelope(r.receipt, r.receipt_bytes, b"\x00" * 64, r.receipt_id, r.value)
    record = policy_input(env)
    context = PolicyContext(registry(), NOW, {})
    assert policystep.prepare(record, context).keys >= {agent_row(record.principal)}
    elsewhere = record._replace(principal="ink:zElsewhere")
    assert agent_row("ink:zElsewhere") in policystep.prepare(elsewhere, context).keys


# ---------------------------------------------------------------- lifecycle: expiry (issue 22)


def test_an_expired_notice_stops_counting_for_handoffs_decided_after_its_expiry() -> None:
    """Before `expires_at` the notice prohibits the undeclared handoff; once
    both the receipt's time and the guard's clock are past it, the same
    handoff is a standard one, and the decision says the notice was lifted."""
    h = harness()
    h.one(notice_record(msgspec.structs.replace(kit.notice("n-exp"), expires_at=format_timestamp(NOW + 60_000))))
    before = h.one(handoff_record(handoff([PLAN]), task_id="h-before"))
    assert (before.outcome, before.reason) == (Outcome.REJECT, Reason.UNDECLARED_OPERATIONAL_STATE)
    h.now = NOW + 120_000
    value = handoff([PLAN])
    receipt = msgspec.structs.replace(
        kit.receipt_for(value, task_id="h-after", issued_at=NOW + 120_000), nonce=nonce(), sequence=next(_nonces)
    )
    after = h.one(sender(SESSION).sign_receipt(receipt, value))
    assert after.outcome == Outcome.FORWARD and after.annotations is not None and after.annotations["verdict"] == "clean"
    assert json.loads(after.annotations["lifted_notices"]) == [["n-exp", "expired"]]


def test_a_receipt_backdated_to_before_the_expiry_is_still_under_the_notice() -> None:
    h = harness()
    h.one(notice_record(msgspec.structs.replace(kit.notice("n-exp"), expires_at=format_timestamp(NOW + 60_000))))
    h.now = NOW + 120_000
    value = handoff([PLAN])
    receipt = msgspec.structs.replace(
        kit.receipt_for(value, task_id="h-back", issued_at=NOW + 30_000), nonce=nonce(), sequence=next(_nonces)
    )
    d = h.one(sender(SESSION).sign_receipt(receipt, value))
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.UNDECLARED_OPERATIONAL_STATE)


def test_an_expiry_past_the_horizon_or_before_the_start_is_refused() -> None:
    h = harness(notice_expiry_horizon_ms=3_600_000)
    far = h.one(notice_record(msgspec.structs.replace(kit.notice("n-far"), expires_at=format_timestamp(NOW + 3_600_001))))
    assert (far.outcome, far.reason) == (Outcome.REJECT, Reason.NOTICE_EXPIRY_TOO_FAR)
    early = h.one(notice_record(msgspec.structs.replace(kit.notice("n-early"), expires_at=format_timestamp(NOW - 120_000))))
    assert (early.outcome, early.reason) == (Outcome.REJECT, Reason.NOTICE_MALFORMED) and "expires_at" in early.detail
    # Neither was remembered.
    d = h.one(handoff_record(handoff([PLAN])))
    assert d.outcome == Outcome.FORWARD
