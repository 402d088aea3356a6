"""The audit's per-call report (busguard/audit/awards.py) and its documented
layout (docs/operations.md, section 16): every field in order, every status,
and an escalated second award in its call's section (issue 19 item 13)."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from busguard.audit.awards import call_reports
from busguard.audit.findings import CallReport
from busguard.audit.ledger import DecisionFact
from busguard.audit.report import _call_row
from busguard.protocol.records import Coordinates

OPS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def fact(offset: int, kind: str, task_id: str, outcome: str, reason: str, principal: str = "awarder", **annotations: str) -> DecisionFact:
    return DecisionFact(
        decision_id=f"d{offset}",
        sha256="0" * 64,
        outcome=outcome,
        reason=reason,
        source=Coordinates(topic="in", partition=0, offset=offset),
        kind=kind,
        task_id=task_id,
        principal=principal,
        decided_at=offset,
        annotations=annotations or None,
    )


def test_an_escalated_second_award_is_in_its_calls_section() -> None:
    facts = [
        fact(0, "cnet.call", "c1", "forward", "admitted", call="c1"),
        fact(1, "cnet.bid", "b1", "forward", "admitted", "bidder", call="c1"),
        fact(2, "cnet.award", "c1", "forward", "admitted", winner="b1", bidder="bidder", mode="verified"),
        fact(3, "cnet.award", "c1", "escalate", "task_conflict", "awarder"),
    ]
    (report,) = call_reports(facts)
    assert report.escalated_awards == ["task_conflict from awarder"] and report.winner == "b1" and report.settlement == "open"
    assert "escalated task_conflict from awarder" in _call_row(report)[2]


def _section() -> str:
    text = OPS.read_text(encoding="utf-8")
    return text[text.index("## 16. Contract-net awards") :]


def test_operations_16_documents_every_field_of_the_per_call_json_in_order() -> None:
    documented = re.findall(r"^\| `(\w+)` \|", _section().split("**Auditing.**", 1)[1].split("**Lifetimes", 1)[0], re.M)
    assert documented == [f.name for f in msgspec.structs.fields(CallReport)]


def test_operations_16_lists_every_settlement_status_the_report_prints() -> None:
    statuses = {"settled", "unverified", "escalated", "open", CallReport(call="c", awarder=None, bids=0, refused_awards=[]).settlement}
    row = next(line for line in _section().splitlines() if line.startswith("| `settlement` |"))
    assert all(f"`{s}`" in row for s in statuses), statuses
