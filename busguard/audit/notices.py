"""Per compromise notice (seed 004, issue 22): what it said, when it
expires, which handoffs counted it and which it no longer counted for,
computed from the decisions' annotations alone (docs/protocol.md 14.1,
14.2), so the audit log is enough to answer it."""

from __future__ import annotations

import json
from collections.abc import Iterable

from busguard.audit.findings import NoticeReport
from busguard.audit.ledger import DecisionFact


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


def notice_reports(decisions: Iterable[DecisionFact]) -> list[NoticeReport]:
    reports: dict[str, NoticeReport] = {}
    facts = sorted(decisions, key=_order)
    for f in facts:
        a = f.annotations or {}
        if f.kind == "compromise-notice" and f.outcome == "forward" and "notice_id" in a:
            reports[a["notice_id"]] = NoticeReport(
                notice_id=a["notice_id"],
                issuer=f.principal,
                subject=a.get("subject"),
                covers=a.get("covers"),
                compromised_from=a.get("compromised_from"),
                expires_at=a.get("expires_at"),
            )
    for f in facts:
        a = f.annotations or {}
        if f.kind != "session-handoff" or f.task_id is None:
            continue
        counted = [n for n in a.get("compromise_notices", "").split(",") if n] + _ids(a.get("successor_notices"))
        for n in dict.fromkeys(counted):
            if n in reports:
                reports[n].counted_by.append(f.task_id)
        try:
            lifted = json.loads(a.get("lifted_notices", "[]"))
        except ValueError:
            lifted = []
        for item in lifted if isinstance(lifted, list) else []:
            if isinstance(item, list) and len(item) == 2 and str(item[0]) in reports:
                reports[str(item[0])].lifted_for.append(f"{f.task_id}: {item[1]}")
    return [reports[k] for k in sorted(reports)]
