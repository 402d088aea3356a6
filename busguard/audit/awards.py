"""Per call of a contract net (seed 002): awarded to whom, in which mode,
settled or escalated, computed from the decisions' annotations alone (the
award policy records them: docs/protocol.md, section 15), so the audit log
is enough to answer it, as for every other part of the report."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from busguard.audit.findings import CallReport
from busguard.audit.ledger import DecisionFact
from busguard.policies.award.wire import KIND_AWARD, KIND_BID, KIND_CALL, KIND_RESULT


def _order(f: DecisionFact) -> tuple[int, str, int, int]:
    return (f.decided_at or 0, f.source.topic, f.source.partition, f.source.offset)


def call_reports(decisions: Iterable[DecisionFact]) -> list[CallReport]:
    by_call: dict[str, list[DecisionFact]] = defaultdict(list)
    for f in decisions:
        if f.kind in (KIND_CALL, KIND_AWARD, KIND_RESULT) and f.task_id is not None:
            by_call[f.task_id].append(f)
        elif f.kind == KIND_BID and f.annotations and "call" in f.annotations:
            by_call[f.annotations["call"]].append(f)
    return [_report(call, sorted(facts, key=_order)) for call, facts in sorted(by_call.items())]


def _report(call: str, facts: list[DecisionFact]) -> CallReport:
    r = CallReport(call=call, awarder=None, bids=0, refused_awards=[])
    settled: str | None = None
    for f in facts:
        a = f.annotations or {}
        if f.kind == KIND_CALL and f.outcome == "forward":
            r.awarder = f.principal
        elif f.kind == KIND_BID and f.outcome == "forward":
            r.bids += 1
        elif f.kind == KIND_AWARD and f.outcome == "forward":
            r.winner, r.awarded_to, r.mode = a.get("winner"), a.get("bidder"), a.get("mode")
            r.delegated_to, r.risk_price = a.get("delegated_to"), a.get("risk_price")
        elif f.kind == KIND_AWARD and f.outcome == "reject":
            r.refused_awards.append(f.reason)
        elif f.kind == KIND_AWARD and f.outcome == "escalate":
            r.escalated_awards.append(f"{f.reason} from {f.principal}")
        elif f.kind == KIND_RESULT and f.outcome == "forward":
            settled = a.get("settlement", "settled")
        elif f.kind == KIND_RESULT and f.outcome == "escalate":
            r.escalations.append(f"{f.reason} attributed to {a.get('attributed_to', f.principal)}")
    if settled is not None:
        r.settlement = settled
    elif r.escalations:
        r.settlement = "escalated"
    elif r.winner is not None:
        r.settlement = "open"
    return r
