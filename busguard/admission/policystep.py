"""Running a kind's stateful policy inside admission (busguard.policies.seam).

Two halves, because the state a policy reads must be known before the
batch's transaction opens: `prepare` (parse and keys, before the
transaction) and `run` (decide, inside it, against the batch's view).
`admission.batch.check_batch` calls `prepare` only for candidates whose
signature verified and whose kind's interceptors did not object, so a
forged record costs no policy work and adds no key to the snapshot load;
`decide` calls `run` only for a record the core would forward.
A policy that breaks the seam's rules (reads a key it did not name, writes
or names a namespace its kind does not own, emits to a route its kind does
not declare, objects with a forward) is a bug in the policy, not bad input:
it raises `PolicyContractError`, which unit tests of the policy find.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Set
from typing import Final, NamedTuple, Protocol

from busguard.policies import KINDS, KindSpec
from busguard.policies.seam import Objection, PolicyContext, PolicyInput, PolicyOutcome
from busguard.protocol.reasons import Outcome, Reason
from busguard.state.keys import PolicyKey


class PolicyContractError(RuntimeError):
    pass


_CORE_REASONS: frozenset[str] = frozenset(Reason)
_DECISION_ID: Final = re.compile(r"[0-9a-f]{32}")


class PolicyState(Protocol):
    def policy_value(self, key: PolicyKey) -> bytes | None: ...


class Prepared(NamedTuple):
    spec: KindSpec
    parsed: object
    keys: frozenset[PolicyKey]


def policy_kinds() -> frozenset[str]:
    """The kinds whose spec has a policy (read per batch: tests register kinds)."""
    return frozenset(k for k, s in KINDS.items() if s.policy is not None)


def prepare(record: PolicyInput, context: PolicyContext) -> Prepared:
    """Parse and keys for a record of a kind with a policy (`policy_kinds`).

    Call it only for an authentic record (its signature verified): the work
    a policy does here is bounded by the payload, not by who sent it."""
    spec = KINDS[record.envelope.receipt.kind]
    if spec.policy is None:
        raise PolicyContractError(f"kind {spec.kind!r} has no policy")
    parsed = spec.policy.parse(record, context)
    if isinstance(parsed, Objection):
        return Prepared(spec, parsed, frozenset())
    keys = frozenset(spec.policy.keys(parsed))
    _check_namespaces(spec, keys, "reads")
    return Prepared(spec, parsed, keys)


class _View:
    __slots__ = ("_keys", "_state", "decision_id")

    def __init__(self, state: PolicyState, keys: Set[PolicyKey], decision_id: str) -> None:
        self._state = state
        self._keys = keys
        self.decision_id = decision_id

    def get(self, key: PolicyKey) -> bytes | None:
        if key not in self._keys:
            raise PolicyContractError(f"policy read {key!r}, which its keys() did not name")
        return self._state.policy_value(key)


def run(prepared: Prepared, state: PolicyState, now_ms: int, decision_id: str) -> PolicyOutcome:
    """`decide` for one record (`decision_id`: the decision being made),
    its answer checked against the seam's rules."""
    spec, parsed = prepared.spec, prepared.parsed
    if isinstance(parsed, Objection):
        outcome = PolicyOutcome(objection=parsed)
    else:
        assert spec.policy is not None
        outcome = spec.policy.decide(parsed, _View(state, prepared.keys, decision_id), now_ms)
    o = outcome.objection
    if o is not None and o.outcome not in (Outcome.REJECT, Outcome.ESCALATE, Outcome.DUPLICATE):
        raise PolicyContractError(f"kind {spec.kind!r}: an objection must reject, escalate or be a duplicate, not {o.outcome}")
    if o is not None and (o.outcome == Outcome.DUPLICATE) != (o.prior_decision_id is not None):
        raise PolicyContractError(
            f"kind {spec.kind!r}: a duplicate names the admission it repeats (seam.duplicate_of), and only a duplicate does"
        )
    if o is not None and o.prior_decision_id is not None and not _DECISION_ID.fullmatch(o.prior_decision_id):
        raise PolicyContractError(
            f"kind {spec.kind!r}: duplicate of {o.prior_decision_id[:80]!r}, not a decision id (32 lowercase hex digits)"
        )
    if o is not None and o.reason not in _CORE_REASONS and o.reason not in spec.reasons:
        raise PolicyContractError(
            f"kind {spec.kind!r} objects with reason {o.reason!r}, neither busguard's nor one it declares (KindSpec.reasons)"
        )
    _check_namespaces(spec, (w.key for w in outcome.writes), "writes")
    stray = sorted({n.route for n in outcome.notices} - set(spec.routes))
    if stray:
        raise PolicyContractError(f"kind {spec.kind!r} emits to routes {stray} it does not declare (KindSpec.routes)")
    return outcome


def _check_namespaces(spec: KindSpec, keys: Iterable[PolicyKey], what: str) -> None:
    for namespace, _ in keys:
        if not spec.may_use(namespace):
            raise PolicyContractError(f"kind {spec.kind!r} {what} namespace {namespace!r} it does not own (KindSpec.namespaces)")
