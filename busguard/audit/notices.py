"""Per compromise notice (seed 004, issue 22): what it said, when it
expires, whether and by what its issuer cleared it, which handoffs counted
it (and which of those before the clearance) and which it no longer counted
for, computed from the decisions' annotations alone (docs/protocol.md 14.1,
14.2, 14.4), so the audit log is enough to answer it."""

from __future__ import annotations

import json
from collections.abc import Iterable

from busguard.audit.findings import NoticeReport
from busguard.audit.ledger import DecisionFact
from busguard.protocol.timestamps import parse_timestamp

CLEARED, EXPIRED, ACTIVE = "cleared", "expired", "active"


def _order(f: DecisionFact) -> tuple[int, str, int, int]:
    return (f.decided_at or 0, f.source.topic, f.source.partition, f.source.offset)


def _ids(raw: str | None) -> list[str]:
    if not raw:
        return []
    try:
        found = json.loads(raw)
    except ValueError:
        return []
    return [str(x) for x in found] if isinstance(found, list) else []


def _expired(expires_at: str | None, last_ms: int) -> bool:
    """Whether the log reaches the expiry: its last decision was made at or after it."""
    if expires_at is None:
        return False
    try:
        return last_ms >= parse_timestamp(expires_at)
    except ValueError:
        return False


def notice_reports(decisions: Iterable[DecisionFact]) -> list[NoticeReport]:
    reports: dict[str, NoticeReport] = {}
    cleared_in: dict[str, tuple[int, str, int, int]] = {}  # notice id -> where in the log its clearance was decided
    facts = sorted(decisions, key=_order)
    for f in facts:
        a = f.annotations or {}
        if f.outcome != "forward" or "notice_id" not in a:
            continue
        if f.kind == "compromise-notice":
            reports[a["notice_id"]] = NoticeReport(
                notice_id=a["notice_id"],
                issuer=f.principal,
                subject=a.get("subject"),
                covers=a.get("covers"),
                compromised_from=a.get("compromised_from"),
                expires_at=a.get("expires_at"),
            )
        elif f.kind == "compromise-clearance" and a["notice_id"] in reports:
            report = reports[a["notice_id"]]
            report.cleared_at, report.cleared_by = a.get("cleared_at"), f.receipt_id
            cleared_in[a["notice_id"]] = _order(f)
    for f in facts:
        a = f.annotations or {}
        if f.kind != "session-handoff" or f.task_id is None:
            continue
        counted = [n for n in a.get("compromise_notices", "").split(",") if n] + _ids(a.get("successor_notices"))
        for n in dict.fromkeys(counted):
            if n in reports:
                reports[n].counted_by.append(f.task_id)
                if n in cleared_in and _order(f) < cleared_in[n]:
                    reports[n].counted_before_clearance.append(f.task_id)
        try:
            lifted = json.loads(a.get("lifted_notices", "[]"))
        except ValueError:
            lifted = []
        for item in lifted if isinstance(lifted, list) else []:
            if isinstance(item, list) and len(item) == 2 and str(item[0]) in reports:
                reports[str(item[0])].lifted_for.append(f"{f.task_id}: {item[1]}")
    last_ms = max((f.decided_at or 0 for f in facts), default=0)
    for n, report in reports.items():
        report.status = CLEARED if n in cleared_in else EXPIRED if _expired(report.expires_at, last_ms) else ACTIVE
    return [reports[k] for k in sorted(reports)]
