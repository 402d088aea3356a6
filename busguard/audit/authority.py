"""Invariant 5's operator rule: is a resolution's `by` proven by what it carries?

A resolution made by an operator carries the command the operator signed
(busguard.commands.resolve); the name in `by` counts only when that
command's seal verifies with the key the operators file lists for the name
and the command says what the resolution records. Pure.
"""

from __future__ import annotations

from typing import Final

import msgspec

from busguard.audit.ledger import ResolutionFact
from busguard.protocol.identity import multikey_decode
from busguard.protocol.records import ResolveCommand, command_seal_ok

_OPERATOR: Final = "operator:"


def operator_problem(r: ResolutionFact, operators: dict[str, str]) -> str | None:
    """Why `r.by` is not proven by the signed command it carries, or None."""
    c = r.command
    if r.by == "policy":
        return None if c is None else "a policy resolution carries an operator's command"
    if not r.by.startswith(_OPERATOR):
        return f"{r.by!r} is neither 'policy' nor 'operator:<name>'"
    name = r.by[len(_OPERATOR) :]
    if c is None:
        return "it carries no signed command, so the name is not proven"
    if c.signer is None:
        return "its command was signed with the guard key, which proves no operator's name"
    listed = operators.get(name)
    if listed is None:
        return f"{name!r} is not in the operators file"
    if c.signer != listed:
        return f"its command was signed with {c.signer}, not {listed}, the key the operators file lists for {name!r}"
    try:
        key = multikey_decode(c.signer)
    except ValueError as exc:
        return f"its command's signer is not a multikey ({exc})"
    if not command_seal_ok(c.body, c.seal, key):
        return f"its command's seal does not verify with {name!r}'s key"
    try:
        cmd = msgspec.json.decode(c.body, type=ResolveCommand)
    except msgspec.MsgspecError as exc:
        return f"its signed command is not a resolve command ({exc})"
    signed = {"escalation_id": cmd.escalation_id, "resolved_as": cmd.resolve_as, "operator": cmd.operator, "note": cmd.note}
    recorded = {"escalation_id": r.escalation_id, "resolved_as": r.resolved_as, "operator": name, "note": r.note}
    wrong = [k for k in signed if signed[k] != recorded[k]]
    if wrong:
        return f"the command {name!r} signed differs in {', '.join(wrong)}"
    return None
