"""The decision boundary of seed 004, gate by gate, through signed handoffs:
every failure mode the issue lists, and properties over arbitrary facts."""

from __future__ import annotations

import hashlib

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.policies.compromise.build import inline_component
from busguard.policies.compromise.manifest import manifest_input
from busguard.policies.compromise.message import (
    Component,
    CompromiseKind,
    IntegrityStatus,
    InteractionRule,
    StateScope,
    component_sha256,
    decode_strict,
    open_statement,
)
from busguard.policies.compromise.verdict import (
    Attester,
    ComponentFact,
    CompromisePolicy,
    HandoffFacts,
    HandoffVerdict,
    Route,
    ScopeMatch,
    ScopeState,
    StripReason,
    SuccessorEvidence,
    Verdict,
    VerdictReason,
    disposition,
    evaluate,
    gate,
    session_state,
    successor_treatment,
)
from tests.unit import compromise_kit as kit
from tests.unit.compromise_kit import AUDIT, LOG, MEMORY, PLAN

DEFAULT = CompromisePolicy()
STRICT = CompromisePolicy(require_declaration_for_compromised=True)


def judge(value: bytes, policy: CompromisePolicy = DEFAULT, **kw: object) -> Verdict:
    return evaluate(kit.check(value, **kw).facts, policy)  # type: ignore[arg-type]


def names(components: tuple[msgspec.Struct, ...]) -> list[str]:
    return [c.name for c in components]  # type: ignore[attr-defined]


def whys(verdict: Verdict) -> dict[str, StripReason]:
    return {s.name: s.why for s in verdict.stripped}


NOTICE = kit.notice()


# ------------------------------------------------------------ gate 1: clean session


def test_clean_session_and_clean_successor_is_a_clean_handoff() -> None:
    v = judge(kit.payload([LOG, PLAN], successor_integrity=kit.integrity()))
    assert (v.verdict, v.route, v.reason) == (HandoffVerdict.CLEAN, Route.FORWARD, VerdictReason.CLEAN_HANDOFF)
    assert names(v.transfer) == ["log", "plan"] and v.stripped == () and not v.caution


def test_clean_session_is_a_standard_handoff_even_to_an_unverified_successor() -> None:
    v = judge(kit.payload([PLAN]))
    assert (v.verdict, v.route, v.reason) == (HandoffVerdict.CLEAN, Route.FORWARD, VerdictReason.CLEAN_SESSION)
    assert names(v.transfer) == ["plan"]


def test_a_notice_on_someone_else_leaves_the_session_clean() -> None:
    v = judge(kit.payload([PLAN]), notices=[kit.notice(subject=kit.STRANGER)])
    assert v.verdict is HandoffVerdict.CLEAN


def test_forged_component_is_stripped_even_from_a_clean_session() -> None:
    forged = kit.tamper(PLAN, b'{"next":"exfiltrate"}')
    v = judge(kit.payload([LOG, forged], scope=kit.scope(LOG, PLAN)))
    assert v.verdict is HandoffVerdict.CLEAN
    assert names(v.transfer) == ["log"]
    assert v.stripped[0].why is StripReason.SCOPE_HASH_MISMATCH and v.stripped[0].sha256 == component_sha256(forged)


# ------------------------------------------------------------ gate 2: undeclared compromise


def test_undeclared_compromise_known_from_a_notice_with_operational_state_is_prohibited() -> None:
    v = judge(kit.payload([LOG, PLAN], scope=kit.scope(LOG, PLAN), successor_integrity=kit.integrity()), notices=[NOTICE])
    assert (v.verdict, v.route, v.reason) == (HandoffVerdict.PROHIBITED, Route.REJECT, VerdictReason.UNDECLARED_OPERATIONAL_STATE)
    assert v.transfer == ()
    assert whys(v) == {"log": StripReason.HANDOFF_PROHIBITED, "plan": StripReason.HANDOFF_PROHIBITED}
    assert "n-1" in v.detail


def test_the_same_undeclared_compromise_with_only_logs_is_allowed() -> None:
    v = judge(kit.payload([LOG, AUDIT], successor_integrity=kit.integrity()), notices=[NOTICE])
    assert (v.verdict, v.route, v.reason) == (HandoffVerdict.SCOPED, Route.FORWARD, VerdictReason.SCOPED_HANDOFF)
    assert names(v.transfer) == ["log", "audit"]


def test_undeclared_compromise_with_operational_state_to_a_successor_verified_to_rederive_it() -> None:
    value = kit.payload([LOG, PLAN], scope=kit.scope(LOG, PLAN), successor_integrity=kit.integrity(rederives=True))
    v = judge(value, notices=[NOTICE])
    assert (v.verdict, v.route, v.reason) == (HandoffVerdict.SCOPED, Route.FORWARD, VerdictReason.SCOPED_HANDOFF)
    assert names(v.transfer) == ["log", "plan"]
    # the claim only counts from the successor or a trusted attester
    value = kit.payload([LOG, PLAN], scope=kit.scope(LOG, PLAN), successor_integrity=kit.integrity(rederives=True, by=kit.STRANGER))
    assert judge(value, notices=[NOTICE]).reason is VerdictReason.UNDECLARED_OPERATIONAL_STATE
    value = kit.payload([LOG, PLAN], scope=kit.scope(LOG, PLAN), successor_integrity=kit.integrity(rederives=True, by=kit.ATTESTER))
    assert judge(value, notices=[NOTICE]).reason is VerdictReason.SCOPED_HANDOFF


def test_a_rederiving_successor_still_gets_no_operational_state_outside_the_scope() -> None:
    value = kit.payload([PLAN], successor_integrity=kit.integrity(rederives=True))
    v = judge(value, notices=[NOTICE])
    assert (v.verdict, v.reason) == (HandoffVerdict.PROHIBITED, VerdictReason.NOTHING_TRANSFERABLE)
    assert whys(v) == {"plan": StripReason.NO_SCOPE}


def test_sample_code_fall_through_is_closed() -> None:
    """The seed's sample lets an undeclared compromise pass gate 2 when
    require_declaration_for_compromised is false, and then returns SCOPED_HANDOFF
    for a clean successor with a scope. The text allows that only for
    non-operational data or a re-deriving successor."""
    assert (
        _sample_code(session_compromised=True, compromise_declared=False, successor_compromised=False, scope=True, require=False)
        == "SCOPED_HANDOFF"
    )
    value = kit.payload([PLAN], scope=kit.scope(PLAN), successor_integrity=kit.integrity())
    v = judge(value, CompromisePolicy(require_declaration_for_compromised=False), notices=[NOTICE])
    assert (v.verdict, v.reason) == (HandoffVerdict.PROHIBITED, VerdictReason.UNDECLARED_OPERATIONAL_STATE)
    # and with the flag set, no exception applies at all, not even to logs
    v = judge(kit.payload([LOG], successor_integrity=kit.integrity()), STRICT, notices=[NOTICE])
    assert (v.verdict, v.reason) == (HandoffVerdict.PROHIBITED, VerdictReason.UNDECLARED_COMPROMISE)
    assert judge(kit.payload([LOG], successor_integrity=kit.integrity()), DEFAULT, notices=[NOTICE]).verdict is HandoffVerdict.SCOPED


def _sample_code(*, session_compromised: bool, compromise_declared: bool, successor_compromised: bool, scope: bool, require: bool) -> str:
    """The gates of the seed's sample `evaluate_handoff`, for comparison only."""
    if not session_compromised and not successor_compromised:
        return "CLEAN_HANDOFF"
    if session_compromised and not compromise_declared and require:
        return "HANDOFF_PROHIBITED"
    if session_compromised and successor_compromised:
        return "DOUBLE_COMPROMISE_CAUTION"
    if not scope:
        return "HANDOFF_PROHIBITED"
    return "SCOPED_HANDOFF"


def test_declaration_overrides_notice() -> None:
    value = kit.payload([PLAN], declaration=kit.declaration(), scope=kit.scope(PLAN), successor_integrity=kit.integrity())
    v = judge(value, STRICT, notices=[NOTICE])
    assert (v.verdict, v.reason) == (HandoffVerdict.SCOPED, VerdictReason.SCOPED_HANDOFF)


def test_notice_not_yet_in_force_and_backdating() -> None:
    later = kit.notice(compromised_from=kit.NOW + 60_000)
    assert judge(kit.payload([PLAN]), notices=[later]).verdict is HandoffVerdict.CLEAN
    # a receipt backdated before compromised_from is judged at the receiver's clock too
    value = kit.payload([PLAN])
    backdated = kit.receipt_for(value, issued_at=kit.NOW - 120_000)
    assert judge(value, notices=[NOTICE], receipt=backdated).reason is VerdictReason.UNDECLARED_OPERATIONAL_STATE


@pytest.mark.parametrize(
    ("narrow", "covers"),
    [
        ({"session_id": "sess-1"}, True),
        ({"session_id": "sess-other"}, False),
        ({"subject_key_id": kit.SESSION_KEY}, True),
        ({"subject_key_id": "k-other"}, False),
        ({}, True),
    ],
)
def test_notice_scoped_to_a_session_or_key(narrow: dict[str, str], covers: bool) -> None:
    v = judge(kit.payload([PLAN]), notices=[kit.notice(**narrow)])  # type: ignore[arg-type]
    assert (v.verdict is HandoffVerdict.PROHIBITED) is covers


# ------------------------------------------------------------ gate 3: scope


def test_declared_compromise_without_scope_moves_only_non_operational_data() -> None:
    v = judge(kit.payload([LOG, PLAN], declaration=kit.declaration(), successor_integrity=kit.integrity()))
    assert v.verdict is HandoffVerdict.SCOPED
    assert names(v.transfer) == ["log"] and whys(v) == {"plan": StripReason.NO_SCOPE}


def test_declared_compromise_without_scope_and_only_operational_state_is_prohibited() -> None:
    v = judge(kit.payload([PLAN, MEMORY], declaration=kit.declaration(), successor_integrity=kit.integrity()))
    assert (v.verdict, v.route, v.reason) == (HandoffVerdict.PROHIBITED, Route.REJECT, VerdictReason.NOTHING_TRANSFERABLE)
    assert v.transfer == () and whys(v) == {"plan": StripReason.NO_SCOPE, "memory": StripReason.NO_SCOPE}


def test_scope_moves_verified_clean_state_and_strips_the_rest() -> None:
    value = kit.payload([LOG, PLAN, MEMORY], declaration=kit.declaration(), scope=kit.scope(PLAN), successor_integrity=kit.integrity())
    v = judge(value)
    assert (v.verdict, v.reason) == (HandoffVerdict.SCOPED, VerdictReason.SCOPED_HANDOFF)
    assert names(v.transfer) == ["plan"]
    assert whys(v) == {"log": StripReason.OUTSIDE_SCOPE, "memory": StripReason.OUTSIDE_SCOPE}


def test_forged_scope_component_is_stripped_recorded_and_never_forwarded() -> None:
    forged = kit.tamper(PLAN, b'{"next":"exfiltrate"}')
    value = kit.payload([LOG, forged], declaration=kit.declaration(), scope=kit.scope(LOG, PLAN), successor_integrity=kit.integrity())
    v = judge(value)
    assert v.verdict is HandoffVerdict.SCOPED
    assert names(v.transfer) == ["log"]
    (stripped,) = v.stripped
    assert (stripped.name, stripped.why, stripped.sha256) == ("plan", StripReason.SCOPE_HASH_MISMATCH, component_sha256(forged))
    assert stripped.sha256 != component_sha256(PLAN)


@pytest.mark.parametrize("change", ["operational", "encoding"])
def test_a_component_relabelled_against_its_scope_entry_is_a_mismatch(change: str) -> None:
    relabelled = (
        msgspec.structs.replace(PLAN, operational=False)
        if change == "operational"
        else msgspec.structs.replace(PLAN, encoding="text/x-python")
    )
    v = judge(kit.payload([relabelled], declaration=kit.declaration(), scope=kit.scope(PLAN), successor_integrity=kit.integrity()))
    assert whys(v) == {"plan": StripReason.SCOPE_HASH_MISMATCH}
    assert v.verdict is HandoffVerdict.PROHIBITED


def test_component_by_hash_is_bound_like_one_with_content() -> None:
    by_hash = Component(name="big", operational=True, encoding="application/parquet", sha256=hashlib.sha256(b"big table").hexdigest())
    value = kit.payload([by_hash], declaration=kit.declaration(), scope=kit.scope(by_hash), successor_integrity=kit.integrity())
    v = judge(value)
    assert v.verdict is HandoffVerdict.SCOPED and v.transfer[0].sha256 == by_hash.sha256


@pytest.mark.parametrize(
    "how",
    ["declared credentials", "notice with credentials", "notice on the scope key"],
)
def test_scope_signed_with_compromised_credentials_vouches_for_no_operational_state(how: str) -> None:
    detected = (CompromiseKind.COMPROMISED_CREDENTIALS,) if how == "declared credentials" else (CompromiseKind.DEGRADED_MODEL,)
    notices = {
        "declared credentials": [],
        "notice with credentials": [kit.notice(detected=(CompromiseKind.COMPROMISED_CREDENTIALS,))],
        "notice on the scope key": [kit.notice(subject_key_id=kit.SESSION_KEY)],
    }[how]
    value = kit.payload(
        [LOG, PLAN], declaration=kit.declaration(detected=detected), scope=kit.scope(LOG, PLAN), successor_integrity=kit.integrity()
    )
    checked = kit.check(value, notices=notices)
    assert checked.facts.scope is ScopeState.UNTRUSTED
    v = evaluate(checked.facts, DEFAULT)
    assert v.verdict is HandoffVerdict.SCOPED
    assert names(v.transfer) == ["log"] and whys(v) == {"plan": StripReason.SCOPE_UNTRUSTED}


def test_compromised_session_handing_off_no_state_is_not_paralysed() -> None:
    v = judge(kit.payload([], declaration=kit.declaration(), successor_integrity=kit.integrity()))
    assert (v.verdict, v.route) == (HandoffVerdict.SCOPED, Route.FORWARD)
    assert v.transfer == () == v.stripped


# ------------------------------------------------------------ gates 4-5: successor and interaction


def test_missing_successor_receipt_means_compromised_successor() -> None:
    value = kit.payload(
        [PLAN], declaration=kit.declaration(), scope=kit.scope(PLAN), interaction=kit.interaction(InteractionRule.PARTIAL_TRANSFER)
    )
    v = judge(value)
    assert (v.verdict, v.route, v.reason) == (
        HandoffVerdict.DOUBLE_COMPROMISE_CAUTION,
        Route.FORWARD_WITH_CAUTION,
        VerdictReason.DOUBLE_COMPROMISE_PARTIAL_TRANSFER,
    )
    assert "no successor integrity receipt" in v.detail


@pytest.mark.parametrize("status", [IntegrityStatus.UNKNOWN, IntegrityStatus.POTENTIALLY_COMPROMISED])
def test_unknown_or_potentially_compromised_successor_means_double_compromise(status: IntegrityStatus) -> None:
    value = kit.payload([PLAN], declaration=kit.declaration(), scope=kit.scope(PLAN), successor_integrity=kit.integrity(status))
    v = judge(value)
    assert (v.verdict, v.reason) == (HandoffVerdict.DOUBLE_COMPROMISE_CAUTION, VerdictReason.DOUBLE_COMPROMISE_NO_RULE)
    assert status.value in v.detail


@pytest.mark.parametrize(
    ("rule", "route", "reason"),
    [
        (InteractionRule.PARTIAL_TRANSFER, Route.FORWARD_WITH_CAUTION, VerdictReason.DOUBLE_COMPROMISE_PARTIAL_TRANSFER),
        (InteractionRule.QUARANTINED_STATE_ONLY, Route.QUARANTINE, VerdictReason.DOUBLE_COMPROMISE_QUARANTINE),
        (InteractionRule.ESCALATE, Route.ESCALATE, VerdictReason.DOUBLE_COMPROMISE_ESCALATE),
        (None, Route.ESCALATE, VerdictReason.DOUBLE_COMPROMISE_NO_RULE),
    ],
)
def test_double_compromise_under_each_interaction_rule(rule: InteractionRule | None, route: Route, reason: VerdictReason) -> None:
    value = kit.payload(
        [LOG, PLAN, MEMORY],
        declaration=kit.declaration(),
        scope=kit.scope(LOG, PLAN),
        successor_integrity=kit.integrity(IntegrityStatus.POTENTIALLY_COMPROMISED),
        interaction=kit.interaction(rule) if rule is not None else None,
    )
    v = judge(value)
    assert (v.verdict, v.route, v.reason) == (HandoffVerdict.DOUBLE_COMPROMISE_CAUTION, route, reason)
    assert v.caution is (route is Route.FORWARD_WITH_CAUTION)
    assert names(v.transfer) == ["log", "plan"] and whys(v) == {"memory": StripReason.OUTSIDE_SCOPE}


def test_double_compromise_without_scope_or_anything_transferable_is_prohibited_not_flagged() -> None:
    value = kit.payload([PLAN], declaration=kit.declaration(), interaction=kit.interaction(InteractionRule.PARTIAL_TRANSFER))
    assert judge(value).reason is VerdictReason.NOTHING_TRANSFERABLE
    assert (
        _sample_code(session_compromised=True, compromise_declared=True, successor_compromised=True, scope=False, require=True)
        == "DOUBLE_COMPROMISE_CAUTION"
    )


def test_integrity_receipt_by_a_trusted_attester_counts_and_by_a_stranger_does_not() -> None:
    def verdict_for(by: str) -> Verdict:
        return judge(kit.payload([PLAN], declaration=kit.declaration(), scope=kit.scope(PLAN), successor_integrity=kit.integrity(by=by)))

    assert verdict_for(kit.ATTESTER).verdict is HandoffVerdict.SCOPED
    stranger = verdict_for(kit.STRANGER)
    assert stranger.verdict is HandoffVerdict.DOUBLE_COMPROMISE_CAUTION and "trusted attester" in stranger.detail


@pytest.mark.parametrize("subject", [kit.SUCCESSOR, kit.ATTESTER])
def test_a_notice_against_the_successor_or_its_attester_overrides_verified_clean(subject: str) -> None:
    by = kit.SUCCESSOR if subject == kit.SUCCESSOR else kit.ATTESTER
    value = kit.payload(
        [PLAN], declaration=kit.declaration(), scope=kit.scope(PLAN), successor_integrity=kit.integrity(by=by, rederives=True)
    )
    checked = kit.check(value, notices=[kit.notice("n-succ", subject=subject)])
    assert checked.facts.successor_notices == ("n-succ",)
    v = evaluate(checked.facts, DEFAULT)
    assert v.verdict is HandoffVerdict.DOUBLE_COMPROMISE_CAUTION and "n-succ" in v.detail


# ------------------------------------------------------------ properties over arbitrary facts

_ids = st.text(alphabet="abcdef0123456789-", min_size=1, max_size=8)


@st.composite
def facts_st(draw: st.DrawFn) -> HandoffFacts:
    n = draw(st.integers(0, 5))
    component_names = draw(st.lists(_ids, min_size=n, max_size=n, unique=True))
    components = tuple(
        ComponentFact(
            name=name,
            sha256=hashlib.sha256(name.encode()).hexdigest(),
            operational=draw(st.booleans()),
            against_scope=draw(st.sampled_from(ScopeMatch)),
        )
        for name in component_names
    )
    evidence = draw(
        st.none()
        | st.builds(
            SuccessorEvidence,
            status=st.sampled_from(IntegrityStatus),
            attested_by=st.sampled_from(Attester),
            rederives_operational_state=st.booleans(),
        )
    )
    return HandoffFacts(
        handoff_id=draw(_ids),
        receipt_id=hashlib.sha256(draw(_ids).encode()).hexdigest(),
        declared=draw(st.booleans()),
        notices=tuple(sorted(set(draw(st.lists(_ids, max_size=2))))),
        scope=draw(st.sampled_from(ScopeState)),
        components=components,
        successor=evidence,
        successor_notices=tuple(sorted(set(draw(st.lists(_ids, max_size=1))))),
        interaction=draw(st.none() | st.sampled_from(InteractionRule)),
        declaration_id=draw(st.none() | _ids),
        scope_id=draw(st.none() | _ids),
    )


policies = st.builds(CompromisePolicy, require_declaration_for_compromised=st.booleans())


@settings(max_examples=400, deadline=None)
@given(facts_st(), policies)
def test_every_component_is_transferred_or_stripped_and_prohibited_moves_nothing(facts: HandoffFacts, policy: CompromisePolicy) -> None:
    v = evaluate(facts, policy)
    moved, stripped = names(v.transfer), names(v.stripped)
    assert sorted(moved + stripped) == sorted(c.name for c in facts.components)
    assert [n for n in names(facts.components) if n in set(moved)] == moved  # payload order kept
    if v.verdict is HandoffVerdict.PROHIBITED:
        assert v.route is Route.REJECT and v.transfer == ()
    assert (v.route is Route.REJECT) is (v.verdict is HandoffVerdict.PROHIBITED)
    assert v.caution is (v.route is Route.FORWARD_WITH_CAUTION)


@settings(max_examples=400, deadline=None)
@given(facts_st(), policies)
def test_nothing_that_contradicts_the_scope_moves_and_compromised_sessions_move_only_what_it_vouches_for(
    facts: HandoffFacts, policy: CompromisePolicy
) -> None:
    v = evaluate(facts, policy)
    by_name = {c.name: c for c in facts.components}
    for moved in v.transfer:
        fact = by_name[moved.name]
        assert (moved.sha256, moved.operational) == (fact.sha256, fact.operational)
        if facts.scope is not ScopeState.ABSENT:
            assert fact.against_scope is not ScopeMatch.MISMATCH
        if v.verdict in (HandoffVerdict.SCOPED, HandoffVerdict.DOUBLE_COMPROMISE_CAUTION):
            if facts.scope is ScopeState.ABSENT:
                assert not fact.operational
            else:
                assert fact.against_scope is ScopeMatch.MATCHES
            if fact.operational:
                assert facts.scope is ScopeState.SIGNED


@settings(max_examples=400, deadline=None)
@given(facts_st(), policies)
def test_evaluate_is_the_composition_of_the_three_tables(facts: HandoffFacts, policy: CompromisePolicy) -> None:
    v = evaluate(facts, policy)
    session = session_state(facts)
    compromised = session.value != "clean"
    dispositions = [disposition(compromised, facts.scope, c.operational, c.against_scope) for c in facts.components]
    successor, rederives = successor_treatment(facts.successor, bool(facts.successor_notices))
    expected = gate(
        session,
        policy,
        any(c.operational for c in facts.components),
        rederives,
        bool(facts.components) and all(d is not None for d in dispositions),
        successor,
        facts.interaction,
    )
    assert (v.verdict, v.route, v.reason) == expected


def _mutations(facts: HandoffFacts) -> list[HandoffFacts]:
    r = msgspec.structs.replace
    out = [
        r(facts, handoff_id=facts.handoff_id + "x"),
        r(facts, receipt_id="f" * 64),
        r(facts, declared=not facts.declared),
        r(facts, notices=(*facts.notices, "zz-new")),
        r(facts, scope=next(s for s in ScopeState if s is not facts.scope)),
        r(facts, successor_notices=(*facts.successor_notices, "zz-new")),
        r(facts, interaction=None if facts.interaction is not None else InteractionRule.ESCALATE),
        r(facts, declaration_id=(facts.declaration_id or "") + "x"),
        r(facts, scope_id=(facts.scope_id or "") + "x"),
        r(facts, successor_integrity_id="x"),
        r(facts, interaction_id="x"),
        r(
            facts,
            components=(
                *facts.components,
                ComponentFact(name="zz-new", sha256="0" * 64, operational=False, against_scope=ScopeMatch.UNLISTED),
            ),
        ),
        r(
            facts,
            successor=None
            if facts.successor is not None
            else SuccessorEvidence(status=IntegrityStatus.UNKNOWN, attested_by=Attester.SUCCESSOR, rederives_operational_state=False),
        ),
    ]
    if facts.successor is not None:
        out.append(r(facts, successor=r(facts.successor, rederives_operational_state=not facts.successor.rederives_operational_state)))
        out.append(r(facts, successor=r(facts.successor, attested_by=next(a for a in Attester if a is not facts.successor.attested_by))))
    if facts.components:
        first = facts.components[0]
        for change in ({"name": first.name + "x"}, {"sha256": "e" * 64}, {"operational": not first.operational}):
            out.append(r(facts, components=(r(first, **change), *facts.components[1:])))
        if facts.scope is not ScopeState.ABSENT:  # without a scope, against_scope is not a fact (it is read as unlisted)
            other = next(m for m in ScopeMatch if m is not first.against_scope)
            out.append(r(facts, components=(r(first, against_scope=other), *facts.components[1:])))
    return out


@settings(max_examples=200, deadline=None)
@given(facts_st(), policies)
def test_manifest_digest_is_deterministic_and_changes_with_any_fact(facts: HandoffFacts, policy: CompromisePolicy) -> None:
    v = evaluate(facts, policy)
    assert evaluate(msgspec.json.decode(msgspec.json.encode(facts), type=HandoffFacts), policy).manifest_digest == v.manifest_digest
    seen = {v.manifest_digest}
    for changed in _mutations(facts):
        digest = evaluate(changed, policy).manifest_digest
        assert digest != v.manifest_digest, changed
        seen.add(digest)
    flipped = CompromisePolicy(require_declaration_for_compromised=not policy.require_declaration_for_compromised)
    assert evaluate(facts, flipped).manifest_digest != v.manifest_digest
    assert len(seen) == len(_mutations(facts)) + 1


def test_manifest_is_over_the_disposition_not_the_prose() -> None:
    facts = HandoffFacts(handoff_id="h", receipt_id="0" * 64, declared=True)
    v = evaluate(facts, DEFAULT)
    raw = manifest_input(facts, DEFAULT, [], v.verdict, v.route, v.reason)
    assert hashlib.sha256(raw).hexdigest() == v.manifest_digest
    assert v.detail.encode() not in raw


# ------------------------------------------------------------ property through real signatures

_contents = st.binary(min_size=0, max_size=24)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(_contents, st.booleans(), st.sampled_from(["in", "forged", "out"])), min_size=1, max_size=5),
    st.booleans(),
    st.sampled_from(IntegrityStatus),
)
def test_scoped_forwards_only_bytes_whose_hash_the_session_signed(
    spec: list[tuple[bytes, bool, str]], declared: bool, status: IntegrityStatus
) -> None:
    components, scoped = [], []
    for i, (content, operational, where) in enumerate(spec):
        component = inline_component(f"c{i}", content, operational=operational)
        if where == "in":
            scoped.append(component)
        elif where == "forged":
            scoped.append(component)
            component = kit.tamper(component, content + b"!")
        components.append(component)
    signed_scope = kit.scope(*scoped)
    value = kit.payload(
        components,
        declaration=kit.declaration() if declared else None,
        scope=signed_scope,
        successor_integrity=kit.integrity(status),
        interaction=kit.interaction(InteractionRule.PARTIAL_TRANSFER),
    )
    v = judge(value, notices=[] if declared else [NOTICE])
    raw, _ = open_statement(signed_scope, "scope")
    signed = {e.name: e.sha256 for e in decode_strict(raw, StateScope, "scope").components}
    by_name = {c.name: c for c in components}
    for moved in v.transfer:
        assert component_sha256(by_name[moved.name]) == signed[moved.name] == moved.sha256
    for name, (_, _, where) in zip(by_name, spec, strict=True):
        if where == "forged":
            assert name in whys(v) and whys(v)[name] in (StripReason.SCOPE_HASH_MISMATCH, StripReason.HANDOFF_PROHIBITED)
