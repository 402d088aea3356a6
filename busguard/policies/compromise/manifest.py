"""The manifest digest of a compromise verdict (docs/compromise-handoff.md 8).

Why a module of its own: it is the one byte layout of seed 004 a verifier in
another language must reproduce exactly, and it changes only with the doc.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from busguard.policies.compromise.verdict import CompromisePolicy, HandoffFacts, HandoffVerdict, Route, StripReason, VerdictReason

MANIFEST_CONTEXT: Final = b"busguard/compromise-manifest/v1\x00"

_U32: Final = struct.Struct(">I")


def _str(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _U32.pack(len(raw)) + raw


def _bool(value: bool) -> bytes:
    return b"\x01" if value else b"\x00"


def _strs(values: Sequence[str]) -> bytes:
    return _U32.pack(len(values)) + b"".join(_str(v) for v in values)


def manifest_input(
    facts: HandoffFacts,
    policy: CompromisePolicy,
    whys: Sequence[StripReason | None],
    verdict: HandoffVerdict,
    route: Route,
    reason: VerdictReason,
) -> bytes:
    """The canonical bytes the manifest digest is taken over.

    Length-prefixed fields in a fixed order (docs/compromise-handoff.md,
    "Manifest digest"): every fact the verdict depends on, each component's
    disposition, and the verdict itself. `detail` is left out on purpose: it
    is prose for people and may be reworded without changing any decision."""
    evidence = facts.successor
    parts = [
        MANIFEST_CONTEXT,
        _str(facts.handoff_id),
        _str(facts.receipt_id),
        _bool(facts.declared),
        _strs(facts.notices),
        _str(facts.scope),
        _str(evidence.status if evidence is not None else "absent"),
        _str(evidence.attested_by if evidence is not None else ""),
        _bool(evidence.rederives_operational_state if evidence is not None else False),
        _strs(facts.successor_notices),
        _str(facts.interaction or ""),
        _bool(policy.require_declaration_for_compromised),
        _str(facts.declaration_id or ""),
        _str(facts.scope_id or ""),
        _str(facts.successor_integrity_id or ""),
        _str(facts.interaction_id or ""),
        _U32.pack(len(facts.components)),
    ]
    for component, why in zip(facts.components, whys, strict=True):
        # ScopeState.ABSENT and ScopeMatch.UNLISTED, by value (verdict.py imports this module)
        against = component.against_scope if facts.scope != "absent" else "unlisted"
        parts += [
            _str(component.name),
            _str(component.sha256),
            _bool(component.operational),
            _str(against),
            _str(why or "transfer"),
        ]
    parts += [_str(verdict), _str(route), _str(reason)]
    return b"".join(parts)


def manifest_digest(
    facts: HandoffFacts,
    policy: CompromisePolicy,
    whys: Sequence[StripReason | None],
    verdict: HandoffVerdict,
    route: Route,
    reason: VerdictReason,
) -> str:
    return hashlib.sha256(manifest_input(facts, policy, whys, verdict, route, reason)).hexdigest()
