"""The audit's per-notice report (busguard.audit.notices) from decision annotations alone."""

from __future__ import annotations

from busguard.audit.ledger import DecisionFact
from busguard.audit.notices import notice_reports
from busguard.protocol.records import Coordinates


def _fact(offset: int, kind: str, task_id: str, outcome: str, annotations: dict[str, str]) -> DecisionFact:
    return DecisionFact(
        decision_id=f"{offset:032x}",
        sha256="0" * 64,
        outcome=outcome,
        reason="admitted",
        source=Coordinates(topic="in", partition=0, offset=offset),
        kind=kind,
        task_id=task_id,
        principal="operator",
        decided_at=offset,
        annotations=annotations,
    )


def test_a_notice_lists_the_handoffs_that_counted_it_and_those_it_had_ended_for() -> None:
    facts = [
        _fact(3, "session-handoff", "h-after", "forward", {"lifted_notices": '[["n-1","expired"]]'}),
        _fact(
            1,
            "compromise-notice",
            "n-1",
            "forward",
            {"notice_id": "n-1", "subject": "s", "covers": "agent", "compromised_from": "x", "expires_at": "y"},
        ),
        _fact(2, "session-handoff", "h-before", "reject", {"compromise_notices": "n-1"}),
        _fact(4, "session-handoff", "h-succ", "forward", {"successor_notices": '["n-1"]'}),
        _fact(5, "compromise-notice", "n-2", "reject", {"notice_id": "n-2"}),  # refused: not reported
    ]
    (report,) = notice_reports(facts)
    assert (report.notice_id, report.expires_at, report.issuer) == ("n-1", "y", "operator")
    assert report.counted_by == ["h-before", "h-succ"] and report.lifted_for == ["h-after: expired"]
    assert notice_reports(facts[:1]) == []  # a handoff naming an unknown notice adds nothing
