"""For the successor of a compromised session: check what was forwarded.

busguard forwards a scoped session handoff with only the components inside
the session's signed scope; the outer receipt then no longer covers the
payload as forwarded, so the successor checks each component against the
signed scope itself:

    report = verify_forwarded(payload, handoff_id=receipt.task_id,
                              session=receipt.sender, keys=lookup)
    for component in report.verified: use(component)

`keys` returns the handing-off session's keys as (key id, public key) pairs,
from the successor's own registry, never from the record.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from busguard.policies.compromise.checks import KeyLookup, principal, scope_index, scope_match, verify_statement
from busguard.policies.compromise.message import (
    Component,
    MessageCode,
    MessageError,
    SignedStatement,
    StateScope,
    component_content,
    component_sha256,
    decode_handoff,
)
from busguard.policies.compromise.verdict import ScopeMatch

__all__ = ["ComponentCheck", "ScopeReport", "verify_components", "verify_forwarded"]


class ComponentCheck(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    sha256: str
    operational: bool
    against_scope: ScopeMatch


class ScopeReport(msgspec.Struct, frozen=True, kw_only=True):
    """`verified`: the components whose (name, sha256, operational, encoding)
    the session signed, in the order received. Without a scope nothing is
    verified: busguard forwards such a handoff only with non-operational data,
    which `unverified_non_operational` lists for the caller to judge."""

    scope_present: bool
    checks: tuple[ComponentCheck, ...]
    verified: tuple[Component, ...]
    unverified_non_operational: tuple[Component, ...]

    @property
    def all_verified(self) -> bool:
        return self.scope_present and len(self.verified) == len(self.checks)


def verify_components(
    scope: SignedStatement | None, components: Sequence[Component], *, handoff_id: str, session: str, keys: KeyLookup
) -> ScopeReport:
    """Check each component against the session's signed scope.

    Raises MessageError if the scope itself is unusable (bad signature, not
    signed by `session`, about another handoff); a component that does not
    match is reported, not raised, so the caller can still use the rest."""
    statement: StateScope | None = None
    if scope is not None:
        statement, _ = verify_statement(scope, StateScope, "scope", keys)
        if statement.handoff_id != handoff_id:
            raise MessageError(MessageCode.WRONG_HANDOFF, "scope.handoff_id", f"{statement.handoff_id!r} is not {handoff_id!r}")
        if principal(statement.signer, "scope.signer") != principal(session, "session"):
            raise MessageError(MessageCode.WRONG_SIGNER, "scope.signer", f"{statement.signer!r} is not the handing-off session {session!r}")
    entries = scope_index(statement) if statement is not None else {}
    checks: list[ComponentCheck] = []
    verified: list[Component] = []
    loose: list[Component] = []
    for i, component in enumerate(components):
        component_content(component, f"components[{i}]")  # refuse bad base64 before hashing
        sha256 = component_sha256(component)
        against = scope_match(entries.get(component.name), sha256, component.operational, component.encoding)
        checks.append(ComponentCheck(name=component.name, sha256=sha256, operational=component.operational, against_scope=against))
        if against is ScopeMatch.MATCHES:
            verified.append(component)
        elif statement is None and not component.operational:
            loose.append(component)
    return ScopeReport(
        scope_present=statement is not None, checks=tuple(checks), verified=tuple(verified), unverified_non_operational=tuple(loose)
    )


def verify_forwarded(payload: bytes, *, handoff_id: str, session: str, keys: KeyLookup) -> ScopeReport:
    """`verify_components` on a forwarded session-handoff record value."""
    handoff = decode_handoff(payload)
    return verify_components(handoff.scope, handoff.components, handoff_id=handoff_id, session=session, keys=keys)
