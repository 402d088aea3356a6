"""How an escalation is settled. Pure: (record, state, clock) -> (items, state change).

Seed 000: an ambiguous receipt goes to "a reconciliation step that the
auditor can observe", and both receipts are recorded under an explicit
`supersedes` link. The automatic policy settles exactly one case, the one
that is provably harmless: an `ambiguous_retransmission` whose payload is
the one already admitted. It is resolved as a retransmission (never
forwarded again), and the first admission, which is the sender's
acknowledgment, is re-emitted to the sender. Everything else (a
`task_conflict`, or anything the policy is switched off for) is held for an
operator, who settles it with a sealed command.

Each escalation is resolved at most once: a second final resolution is
refused (dead-lettered with `already_resolved`), and resolution ids are
derived from the escalation id, so a re-processed escalation re-emits the
same id.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from busguard.policies import CORE_RESOLUTIONS, KINDS
from busguard.policies.seam import Settlement
from busguard.protocol.records import Coordinates, Decision, Reply, Resolution, ResolveCommand, SignedCommand, resolution_id


class EscalationState(msgspec.Struct, frozen=True, kw_only=True):
    escalation: Decision
    held: Resolution | None = None
    final: Resolution | None = None


class Rejected(msgspec.Struct, frozen=True):
    reason: str
    detail: str


Item = Resolution | Reply | Rejected
Verdict = tuple[list[Item], EscalationState | None]


#: A kind's settlement of an escalation (busguard.reconcile.kinds): `choice`
#: None asks for its automatic one (None back: hold it for an operator).
Settle = Callable[[Decision, str | None], Settlement | None]


def on_escalation(
    decision: Decision, known: EscalationState | None, source: Coordinates, now_ms: int, auto_resolve: bool, settle: Settle | None = None
) -> Verdict:
    """`settle`: the escalation's kind settles its own (KindSpec.reconciliation)."""
    if decision.outcome != "escalate":
        return [Rejected("not_an_escalation", f"outcome {decision.outcome!r} on the reconciliation topic")], None
    if known is not None:
        # The guard re-emitted this escalation after a crash (same decision id):
        # it has been handled; there is nothing new to say.
        return [], None
    prior = decision.prior
    common = {
        "escalation_id": decision.decision_id,
        "kind": decision.kind,
        "task_id": decision.task_id,
        "receipt_id": decision.receipt_id,
        "supersedes": decision.supersedes,
        "prior_decision_id": prior.decision_id if prior is not None else None,
        "source": source,
        "resolved_at": now_ms,
        "by": "policy",
    }
    settled = settle(decision, None) if settle is not None else None
    if settled is not None:
        final = Resolution(
            resolution_id=resolution_id(decision.decision_id, "final"),
            stage="final",
            resolved_as=settled.resolved_as,
            note=settled.note,
            **common,  # type: ignore[arg-type]
        )
        return [final], EscalationState(escalation=decision, final=final)
    if auto_resolve and decision.reason == "ambiguous_retransmission" and prior is not None and prior.payload_hash == decision.payload_hash:
        final = Resolution(
            resolution_id=resolution_id(decision.decision_id, "final"),
            stage="final",
            resolved_as="retransmission",
            note="same task and payload as the admitted receipt; recorded as a retransmission, not forwarded again",
            **common,  # type: ignore[arg-type]
        )
        return [final, _reply(final, decision)], EscalationState(escalation=decision, final=final)
    held = Resolution(
        resolution_id=resolution_id(decision.decision_id, "held"),
        stage="held",
        note=f"{decision.reason}: held for an operator (`busguard escalations resolve {decision.decision_id} --as ...`)",
        **common,  # type: ignore[arg-type]
    )
    return [held], EscalationState(escalation=decision, held=held)


def on_command(
    command: ResolveCommand,
    known: EscalationState | None,
    source: Coordinates,
    now_ms: int,
    signed: SignedCommand | None = None,
    settle: Settle | None = None,
) -> Verdict:
    """`signed`: the command as read (its bytes and seal), kept in the
    resolution so the auditor can check the operator's name itself.
    `settle`: the escalation's kind's settlement, for a choice of its own."""
    if known is None:
        return [Rejected("unknown_escalation", f"no escalation {command.escalation_id!r} has reached this reconciler")], None
    if known.final is not None:
        return [Rejected("already_resolved", f"escalation already resolved as {known.final.resolved_as} by {known.final.by}")], None
    d = known.escalation
    if command.resolve_as not in CORE_RESOLUTIONS:
        spec = KINDS.get(d.kind) if d.kind is not None else None
        choices = spec.reconciliation.choices if spec is not None and spec.reconciliation is not None else ()
        if command.resolve_as not in choices or settle is None:
            offered = ", ".join((*CORE_RESOLUTIONS, *choices))
            return [Rejected("unknown_resolution", f"{command.resolve_as[:64]!r} is not a resolution of kind {d.kind!r}: {offered}")], None
        # the kind's state change, applied once; the resolution's note stays the operator's (the command binds it)
        if settle(d, command.resolve_as) is None:
            return [Rejected("resolution_refused", f"kind {d.kind!r} cannot settle this escalation as {command.resolve_as!r} now")], None
    final = Resolution(
        resolution_id=resolution_id(d.decision_id, "final"),
        escalation_id=d.decision_id,
        stage="final",
        resolved_as=command.resolve_as,
        by=f"operator:{command.operator}",
        note=command.note,
        kind=d.kind,
        task_id=d.task_id,
        receipt_id=d.receipt_id,
        supersedes=d.supersedes if command.resolve_as == "retransmission" else None,
        prior_decision_id=d.prior.decision_id if d.prior is not None else None,
        source=source,
        resolved_at=now_ms,
        command=signed,
    )
    items: list[Item] = [final]
    if command.resolve_as == "retransmission" and d.prior is not None:
        items.append(_reply(final, d))
    return items, msgspec.structs.replace(known, final=final)


def _reply(final: Resolution, d: Decision) -> Reply:
    assert d.prior is not None
    return Reply(
        resolution_id=final.resolution_id,
        escalation_id=d.decision_id,
        to=d.sender or "",
        task_id=d.task_id or "",
        admission=d.prior,
    )
