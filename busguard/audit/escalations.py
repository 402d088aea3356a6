"""Invariant 2, judged from the audit log: each escalation settled once, by whom it may be. Pure.

Split from busguard.audit.lineage (the judge) like busguard.audit.chains:
the judge passes its `flag` in and gets back which resolutions are final and
which held, per escalation, to build each task's escalation statuses and the
pending list.
"""

from __future__ import annotations

from collections import defaultdict
from typing import NamedTuple, Protocol

from busguard.audit.authority import operator_problem
from busguard.audit.findings import EscalationStatus, PendingEscalation
from busguard.audit.ledger import DecisionFact, Ledger, ResolutionFact
from busguard.protocol.records import resolution_id


def source_order(f: DecisionFact) -> tuple[str, int, int, str]:
    """Decisions in input order (ties by id), so every list the audit emits is sorted the same way."""
    return (f.source.topic, f.source.partition, f.source.offset, f.decision_id)


class TaskFlag(Protocol):
    def __call__(self, code: str, detail: str, *, task: tuple[str | None, str | None] = ..., decision_id: str | None = ...) -> None: ...


class Resolutions(NamedTuple):
    finals: dict[str, list[ResolutionFact]]
    helds: dict[str, list[ResolutionFact]]
    #: resolutions that pass only because the deployment allows one key (`keys.single_key_audit`)
    single_key: int


def resolutions(led: Ledger, flag: TaskFlag) -> Resolutions:
    """Every resolution checked against its escalation; the final and held ones by escalation id."""
    finals: dict[str, list[ResolutionFact]] = defaultdict(list)
    helds: dict[str, list[ResolutionFact]] = defaultdict(list)
    excused = 0
    for r in sorted(led.resolutions.values(), key=lambda r: r.resolution_id):
        esc = led.decisions.get(r.escalation_id)
        task = (r.kind, r.task_id)
        if r.resolution_id != resolution_id(r.escalation_id, r.stage):
            flag(
                "bad_resolution_id",
                f"resolution {r.resolution_id} ({r.stage}) of escalation {r.escalation_id} is not the id derived from them",
                task=task,
                decision_id=r.escalation_id,
            )
        if esc is None or esc.outcome != "escalate":
            what = "is not in the audit log" if esc is None else f"is a {esc.outcome} decision, not an escalation"
            flag(
                "unknown_escalation",
                f"resolution {r.resolution_id} settles {r.escalation_id}, which {what}",
                task=task,
                decision_id=r.escalation_id,
            )
            continue
        excused += _authority(led, flag, r, esc)
        expected = {
            "kind": esc.kind,
            "task_id": esc.task_id,
            "receipt_id": esc.receipt_id,
            "supersedes": esc.supersedes,
            "prior_decision_id": esc.prior_decision_id,
        }
        wrong = [name for name, want in expected.items() if getattr(r, name) is not None and getattr(r, name) != want]
        if wrong:
            flag(
                "resolution_mismatch",
                f"resolution {r.resolution_id} differs from its escalation in {', '.join(wrong)}",
                task=(esc.kind, esc.task_id),
                decision_id=esc.decision_id,
            )
        (finals if r.stage == "final" else helds)[r.escalation_id].append(r)
    for esc_id, rs in finals.items():
        esc = led.decisions[esc_id]
        if len(rs) > 1:
            ids = ", ".join(r.resolution_id for r in rs)
            flag(
                "duplicate_resolution",
                f"escalation {esc_id} has {len(rs)} final resolution ids: {ids}",
                task=(esc.kind, esc.task_id),
                decision_id=esc_id,
            )
    for rid, shas in led.resolution_variants.items():
        r = led.resolutions[rid]
        if r.stage == "final":
            flag(
                "duplicate_resolution",
                f"final resolution {rid} of escalation {r.escalation_id} appears with {len(shas)} different contents",
                task=(r.kind, r.task_id),
                decision_id=r.escalation_id,
            )
        else:
            flag(
                "conflicting_reemission",
                f"{r.stage} resolution {rid} appears with {len(shas)} different contents",
                task=(r.kind, r.task_id),
                decision_id=r.escalation_id,
            )
    return Resolutions(finals, helds, excused)


def _authority(led: Ledger, flag: TaskFlag, r: ResolutionFact, esc: DecisionFact) -> bool:
    """Separate keys for separate roles: the reconciler's key seals the
    resolution, and an operator's name is proven by that operator's own
    signature. A one-key deployment's records pass only when the config
    says so (`keys.single_key_audit`), and after a move to separate keys
    only for escalations decided before `keys.single_key_until`."""
    led = led
    legacy = led.single_key_audit and (
        led.single_key_until is None or (esc.decided_at is not None and esc.decided_at < led.single_key_until)
    )
    task = (esc.kind, esc.task_id)
    excused = False
    if r.sealed_by == "guard":
        if legacy:
            excused = True
        else:
            why = (
                "keys.single_key_audit is off"
                if not led.single_key_audit
                else "its escalation was decided at or after keys.single_key_until"
            )
            flag(
                "guard_sealed_resolution",
                f"resolution {r.resolution_id} is sealed with the guard key, not the reconciler's ({why})",
                task=task,
                decision_id=r.escalation_id,
            )
    problem = operator_problem(r, led.operators)
    if problem is not None:
        if legacy:
            excused = True
        else:
            flag(
                "unproven_operator",
                f"resolution {r.resolution_id} says by {r.by}, but {problem}",
                task=task,
                decision_id=r.escalation_id,
            )
    return excused


def status(f: DecisionFact, finals: dict[str, list[ResolutionFact]], helds: dict[str, list[ResolutionFact]]) -> EscalationStatus:
    final = finals.get(f.decision_id)
    held = helds.get(f.decision_id)
    chosen = final[0] if final else held[0] if held else None
    return EscalationStatus(
        escalation_id=f.decision_id,
        reason=f.reason,
        receipt_id=f.receipt_id,
        supersedes=f.supersedes,
        prior_receipt_id=f.prior_receipt_id,
        status="resolved" if final else "held" if held else "pending",
        resolution_id=chosen.resolution_id if chosen else None,
        resolved_as=chosen.resolved_as if chosen else None,
        by=chosen.by if chosen else None,
    )


def pending(led: Ledger, finals: dict[str, list[ResolutionFact]], helds: dict[str, list[ResolutionFact]]) -> list[PendingEscalation]:
    out = []
    for f in sorted(led.decisions.values(), key=source_order):
        if f.outcome != "escalate" or f.decision_id in finals:
            continue
        held = helds.get(f.decision_id)
        out.append(
            PendingEscalation(
                escalation_id=f.decision_id,
                kind=f.kind,
                task_id=f.task_id,
                reason=f.reason,
                principal=f.principal,
                receipt_id=f.receipt_id,
                prior_receipt_id=f.prior_receipt_id,
                prior_decision_id=f.prior_decision_id,
                supersedes=f.supersedes,
                source=f.source,
                held=held[0].resolution_id if held else None,
            )
        )
    return out
