"""The audit's per-notice report (busguard.audit.notices) from decision annotations alone."""

from __future__ import annotations

import msgspec

from busguard.audit.ledger import DecisionFact
from busguard.audit.notices import notice_reports
from busguard.protocol.records import Coordinates
from busguard.protocol.timestamps import parse_timestamp


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


def test_a_cleared_notice_reports_its_clearance_and_the_handoffs_that_counted_it_before() -> None:
    notice = {"notice_id": "n-1", "subject": "s", "covers": "agent", "compromised_from": "2026-11-29T11:00:00.000Z"}
    clearance = {"notice_id": "n-1", "cleared_at": "2026-11-29T12:00:00.000Z"}
    facts = [
        _fact(1, "compromise-notice", "n-1", "forward", notice),
        _fact(2, "session-handoff", "h-before", "reject", {"compromise_notices": "n-1"}),
        _fact(3, "compromise-clearance", "c-bad", "reject", {"notice_id": "n-1"}),  # refused: not a clearance
        _fact(4, "compromise-clearance", "c-1", "forward", clearance),
        _fact(5, "session-handoff", "h-future", "reject", {"compromise_notices": "n-1"}),  # cleared_at not reached yet
        _fact(6, "session-handoff", "h-after", "forward", {"lifted_notices": '[["n-1","cleared"]]'}),
    ]
    facts[3] = msgspec.structs.replace(facts[3], receipt_id="r" * 64)
    (report,) = notice_reports(facts)
    assert (report.status, report.cleared_at, report.cleared_by) == ("cleared", "2026-11-29T12:00:00.000Z", "r" * 64)
    assert report.counted_by == ["h-before", "h-future"] and report.counted_before_clearance == ["h-before"]
    assert report.lifted_for == ["h-after: cleared"]
    (uncleared,) = notice_reports(facts[:3])
    assert (uncleared.status, uncleared.cleared_by, uncleared.counted_before_clearance) == ("active", None, [])


def test_a_notice_whose_expiry_the_log_reaches_is_expired_and_one_it_does_not_is_active() -> None:
    expires = parse_timestamp("2026-11-29T12:00:00.000Z")
    notice = {"notice_id": "n-1", "expires_at": "2026-11-29T12:00:00.000Z"}
    at_expiry = msgspec.structs.replace(_fact(2, "session-handoff", "h", "forward", {}), decided_at=expires)
    assert [r.status for r in notice_reports([_fact(1, "compromise-notice", "n-1", "forward", notice), at_expiry])] == ["expired"]
    before = msgspec.structs.replace(at_expiry, decided_at=expires - 1)
    assert [r.status for r in notice_reports([_fact(1, "compromise-notice", "n-1", "forward", notice), before])] == ["active"]
