"""The decision boundary of seed 004: one verdict for every session handoff.

Input: the facts `checks.py` established from the signed statements and the
notices (who declared what, which components verify against the signed
scope, what the successor's integrity receipt says and who signed it, which
interaction rule applies) plus the policy. Output: a `Verdict` saying which
components travel where, which were stripped and why, and a manifest digest
anyone can recompute. No I/O and no clock: time only matters for whether a
notice is in force, which `checks.py` decides from times it is given.

The logic is three small tables, each a function here and a table in
docs/compromise-handoff.md (tests compare the two exhaustively):

- A `successor_treatment`: how the successor is treated, from its receipt;
- B `disposition`: whether one component may be transferred;
- C `gate`: the verdict and route, from the session, the policy, the
  components' dispositions, the successor and the interaction rule.

Where the seed's sample code and its text disagree, this follows the text
(the doc lists each difference); most visibly, an undeclared compromise never
falls through to the later gates carrying operational state, whatever
`require_declaration_for_compromised` says.
"""

from __future__ import annotations

import enum
from typing import Final

import msgspec

from busguard.policies.compromise.manifest import manifest_digest
from busguard.policies.compromise.message import IntegrityStatus, InteractionRule


class HandoffVerdict(enum.StrEnum):
    CLEAN = "clean"
    SCOPED = "scoped"
    DOUBLE_COMPROMISE_CAUTION = "double_compromise_caution"
    PROHIBITED = "prohibited"


class Route(enum.StrEnum):
    """Where the handoff goes. `forward*` reach the successor; `quarantine`
    goes to the quarantine topic; `escalate` to reconciliation, where a third
    party decides; `reject` to the dead-letter topic."""

    FORWARD = "forward"
    FORWARD_WITH_CAUTION = "forward_with_caution"
    QUARANTINE = "quarantine"
    ESCALATE = "escalate"
    REJECT = "reject"


class VerdictReason(enum.StrEnum):
    """Stable codes, one per row of table C."""

    CLEAN_HANDOFF = "clean_handoff"
    CLEAN_SESSION = "clean_session"
    UNDECLARED_COMPROMISE = "undeclared_compromise"
    UNDECLARED_OPERATIONAL_STATE = "undeclared_operational_state"
    NOTHING_TRANSFERABLE = "nothing_transferable"
    SCOPED_HANDOFF = "scoped_handoff"
    DOUBLE_COMPROMISE_PARTIAL_TRANSFER = "double_compromise_partial_transfer"
    DOUBLE_COMPROMISE_QUARANTINE = "double_compromise_quarantine"
    DOUBLE_COMPROMISE_ESCALATE = "double_compromise_escalate"
    DOUBLE_COMPROMISE_NO_RULE = "double_compromise_no_rule"


class StripReason(enum.StrEnum):
    """Why one component was not transferred (table B, plus prohibition)."""

    SCOPE_HASH_MISMATCH = "scope_hash_mismatch"
    OUTSIDE_SCOPE = "outside_scope"
    NO_SCOPE = "no_scope"
    SCOPE_UNTRUSTED = "scope_untrusted"
    HANDOFF_PROHIBITED = "handoff_prohibited"


class SessionState(enum.StrEnum):
    CLEAN = "clean"
    DECLARED = "declared"
    UNDECLARED = "undeclared"


class ScopeState(enum.StrEnum):
    """`untrusted`: a valid signature, but by credentials that are themselves
    compromised (declared `compromised_credentials`, or under a notice that
    says so or names the key), so it can only exclude, never vouch."""

    ABSENT = "absent"
    SIGNED = "signed"
    UNTRUSTED = "untrusted"


class ScopeMatch(enum.StrEnum):
    """A component against the scope: an entry with its name and the same
    (sha256, operational, encoding); an entry with its name and anything else
    (a forged or altered component); no entry of that name."""

    MATCHES = "matches"
    MISMATCH = "mismatch"
    UNLISTED = "unlisted"


class Attester(enum.StrEnum):
    SUCCESSOR = "successor"
    TRUSTED_ATTESTER = "trusted_attester"
    OTHER = "other"


class SuccessorState(enum.StrEnum):
    CLEAN = "clean"
    COMPROMISED = "compromised"


class ComponentFact(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    sha256: str
    operational: bool
    against_scope: ScopeMatch


class SuccessorEvidence(msgspec.Struct, frozen=True, kw_only=True):
    """A successor-integrity receipt whose signature verified."""

    status: IntegrityStatus
    attested_by: Attester
    rederives_operational_state: bool


class HandoffFacts(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the verdict depends on, already signature-checked.

    `notices` / `successor_notices` are the ids of the compromise notices in
    force for the session / the successor. With `scope` absent every
    component counts as `unlisted`, whatever `against_scope` says."""

    handoff_id: str
    receipt_id: str
    declared: bool
    notices: tuple[str, ...] = ()
    scope: ScopeState = ScopeState.ABSENT
    components: tuple[ComponentFact, ...] = ()
    successor: SuccessorEvidence | None = None
    successor_notices: tuple[str, ...] = ()
    interaction: InteractionRule | None = None
    declaration_id: str | None = None
    scope_id: str | None = None
    successor_integrity_id: str | None = None
    interaction_id: str | None = None


class CompromisePolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`require_declaration_for_compromised`: false (default) applies the
    seed's two exceptions to an undeclared compromise (strictly
    non-operational data; a successor verified to re-derive operational
    state); true refuses every undeclared compromise. Neither lets an
    undeclared compromise carry operational state to an unprepared successor."""

    require_declaration_for_compromised: bool = False


class TransferredComponent(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    sha256: str
    operational: bool


class StrippedComponent(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    sha256: str
    operational: bool
    why: StripReason


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    """`transfer`: what the route carries — to the successor (`forward`,
    `forward_with_caution`), to the quarantine topic (`quarantine`), or held
    for the third party (`escalate`); always empty for `reject`. Every
    component of the handoff is in exactly one of `transfer` and `stripped`,
    in payload order."""

    verdict: HandoffVerdict
    route: Route
    reason: VerdictReason
    detail: str
    caution: bool
    transfer: tuple[TransferredComponent, ...]
    stripped: tuple[StrippedComponent, ...]
    manifest_digest: str


# ------------------------------------------------------------- table A


def successor_treatment(evidence: SuccessorEvidence | None, under_notice: bool) -> tuple[SuccessorState, bool]:
    """(how the successor is treated, whether its re-derivation claim counts).

    No receipt, an `unknown` or `potentially_compromised` one, one signed by
    neither the successor nor a trusted attester, or a notice against the
    successor: compromised. Only an accepted receipt can carry the claim that
    the successor re-derives operational state on its own."""
    if evidence is None or evidence.attested_by is Attester.OTHER or under_notice:
        return SuccessorState.COMPROMISED, False
    clean = evidence.status is IntegrityStatus.VERIFIED_CLEAN
    return (SuccessorState.CLEAN if clean else SuccessorState.COMPROMISED), evidence.rederives_operational_state


# ------------------------------------------------------------- table B


def disposition(session_compromised: bool, scope: ScopeState, operational: bool, against: ScopeMatch) -> StripReason | None:
    """None if the component may be transferred, else why it is stripped.

    A component that contradicts a signed scope is never transferred, even
    from a clean session. From a compromised session, a signed scope is
    authoritative; without one only non-operational data (logs, audit
    trails) moves; an untrusted scope may still exclude but vouches for no
    operational component."""
    if scope is ScopeState.ABSENT:
        against = ScopeMatch.UNLISTED
    if against is ScopeMatch.MISMATCH:
        return StripReason.SCOPE_HASH_MISMATCH
    if not session_compromised:
        return None
    if scope is ScopeState.ABSENT:
        return StripReason.NO_SCOPE if operational else None
    if against is ScopeMatch.UNLISTED:
        return StripReason.OUTSIDE_SCOPE
    if scope is ScopeState.UNTRUSTED and operational:
        return StripReason.SCOPE_UNTRUSTED
    return None


# ------------------------------------------------------------- table C


def gate(
    session: SessionState,
    policy: CompromisePolicy,
    operational: bool,
    rederives: bool,
    all_stripped: bool,
    successor: SuccessorState,
    interaction: InteractionRule | None,
) -> tuple[HandoffVerdict, Route, VerdictReason]:
    """The decision boundary, gate by gate (first match decides).

    `operational`: the handoff carries an operational component;
    `all_stripped`: it carries components and table B strips every one."""
    # Gate 1: is the session compromised? If not, standard handoff applies.
    if session is SessionState.CLEAN:
        if successor is SuccessorState.CLEAN:
            return HandoffVerdict.CLEAN, Route.FORWARD, VerdictReason.CLEAN_HANDOFF
        return HandoffVerdict.CLEAN, Route.FORWARD, VerdictReason.CLEAN_SESSION
    # Gate 2: compromised without its own declaration (known from a notice).
    if session is SessionState.UNDECLARED:
        if policy.require_declaration_for_compromised:
            return HandoffVerdict.PROHIBITED, Route.REJECT, VerdictReason.UNDECLARED_COMPROMISE
        if operational and not rederives:
            return HandoffVerdict.PROHIBITED, Route.REJECT, VerdictReason.UNDECLARED_OPERATIONAL_STATE
    # Gate 3: is anything inside a transferable scope?
    if all_stripped:
        return HandoffVerdict.PROHIBITED, Route.REJECT, VerdictReason.NOTHING_TRANSFERABLE
    # Gate 4: is the successor characterised as clean?
    if successor is SuccessorState.CLEAN:
        return HandoffVerdict.SCOPED, Route.FORWARD, VerdictReason.SCOPED_HANDOFF
    # Gate 5: double compromise: the interaction rule bounds it.
    if interaction is InteractionRule.PARTIAL_TRANSFER:
        return HandoffVerdict.DOUBLE_COMPROMISE_CAUTION, Route.FORWARD_WITH_CAUTION, VerdictReason.DOUBLE_COMPROMISE_PARTIAL_TRANSFER
    if interaction is InteractionRule.QUARANTINED_STATE_ONLY:
        return HandoffVerdict.DOUBLE_COMPROMISE_CAUTION, Route.QUARANTINE, VerdictReason.DOUBLE_COMPROMISE_QUARANTINE
    if interaction is InteractionRule.ESCALATE:
        return HandoffVerdict.DOUBLE_COMPROMISE_CAUTION, Route.ESCALATE, VerdictReason.DOUBLE_COMPROMISE_ESCALATE
    return HandoffVerdict.DOUBLE_COMPROMISE_CAUTION, Route.ESCALATE, VerdictReason.DOUBLE_COMPROMISE_NO_RULE


# ------------------------------------------------------------- the verdict


def session_state(facts: HandoffFacts) -> SessionState:
    if facts.declared:
        return SessionState.DECLARED
    return SessionState.UNDECLARED if facts.notices else SessionState.CLEAN


_DETAILS: Final = {
    VerdictReason.CLEAN_HANDOFF: "session and successor clean: standard handoff",
    VerdictReason.CLEAN_SESSION: "session not compromised (no declaration, no notice in force): standard handoff; successor not verified clean",
    VerdictReason.UNDECLARED_COMPROMISE: "session compromised per notice {notices} but did not declare it, and policy requires a declaration",
    VerdictReason.UNDECLARED_OPERATIONAL_STATE: (
        "session compromised per notice {notices} but did not declare it; it carries operational state "
        "and the successor is not verified to re-derive it"
    ),
    VerdictReason.NOTHING_TRANSFERABLE: "session compromised; no component lies inside a transferable scope ({stripped} stripped)",
    VerdictReason.SCOPED_HANDOFF: "session compromised, successor verified clean: {transfer} component(s) inside the scope transferred, {stripped} stripped",
    VerdictReason.DOUBLE_COMPROMISE_PARTIAL_TRANSFER: (
        "session and successor compromised ({successor}); interaction rule partial_transfer: {transfer} forwarded with caution"
    ),
    VerdictReason.DOUBLE_COMPROMISE_QUARANTINE: (
        "session and successor compromised ({successor}); interaction rule quarantined_state_only: {transfer} to quarantine"
    ),
    VerdictReason.DOUBLE_COMPROMISE_ESCALATE: "session and successor compromised ({successor}); interaction rule escalate: to a third party",
    VerdictReason.DOUBLE_COMPROMISE_NO_RULE: "session and successor compromised ({successor}); no interaction rule signed: escalated to a third party",
}


def _successor_words(facts: HandoffFacts) -> str:
    if facts.successor_notices:
        return "successor under notice " + ",".join(facts.successor_notices)
    if facts.successor is None:
        return "no successor integrity receipt"
    if facts.successor.attested_by is Attester.OTHER:
        return "integrity receipt not signed by the successor or a trusted attester"
    return f"successor integrity {facts.successor.status}"


def evaluate(facts: HandoffFacts, policy: CompromisePolicy) -> Verdict:
    """The one verdict for these facts under this policy."""
    session = session_state(facts)
    compromised = session is not SessionState.CLEAN
    whys = [disposition(compromised, facts.scope, c.operational, c.against_scope) for c in facts.components]
    successor, rederives = successor_treatment(facts.successor, bool(facts.successor_notices))
    verdict, route, reason = gate(
        session,
        policy,
        operational=any(c.operational for c in facts.components),
        rederives=rederives,
        all_stripped=bool(facts.components) and all(why is not None for why in whys),
        successor=successor,
        interaction=facts.interaction,
    )
    if route is Route.REJECT:
        whys = [why or StripReason.HANDOFF_PROHIBITED for why in whys]
    transfer = tuple(
        TransferredComponent(name=c.name, sha256=c.sha256, operational=c.operational)
        for c, why in zip(facts.components, whys, strict=True)
        if why is None
    )
    stripped = tuple(
        StrippedComponent(name=c.name, sha256=c.sha256, operational=c.operational, why=why)
        for c, why in zip(facts.components, whys, strict=True)
        if why is not None
    )
    detail = _DETAILS[reason].format(
        notices=",".join(facts.notices), transfer=len(transfer), stripped=len(stripped), successor=_successor_words(facts)
    )
    digest = manifest_digest(facts, policy, whys, verdict, route, reason)
    return Verdict(
        verdict=verdict,
        route=route,
        reason=reason,
        detail=detail,
        caution=route is Route.FORWARD_WITH_CAUTION,
        transfer=transfer,
        stripped=stripped,
        manifest_digest=digest,
    )
