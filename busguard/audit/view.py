"""`busguard decisions`: where each record of an input topic went, from the audit log. Pure.

An operator's view, not a proof (`busguard audit` is the proof): one row
per decision, in input order, with its kind, task, outcome and reason, the
topic its primary output went to, the earlier admission a duplicate names,
the key a kind's witness rule names (`KindSpec.witness_key`), and how an
escalation was settled. The records come from the audit topic as
`busguard audit` reads it (busguard.audit.reader.scan: a batch audit record
as its entries); a decision whose seal does not verify with the guard key
is shown, marked unverified, and never silently dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

from busguard.policies import KINDS
from busguard.protocol.records import Decision, Resolution

#: a kind without a witness key shows no KEY; one with, its annotations' values joined by this
KEY_JOIN: Final = "/"


class Where(msgspec.Struct, frozen=True, kw_only=True):
    """The deployment's topics, for naming where each outcome went."""

    downstreams: dict[str, str]  # input topic -> downstream topic
    reconciliation: str
    dead_letter: str
    routes: dict[str, str] = {}  # notice route -> topic


class Row(msgspec.Struct, frozen=True, kw_only=True):
    record: str  # topic/partition/offset (a span decision: first-last)
    decision_id: str
    kind: str | None
    task_id: str | None
    key: str | None  # the kind's witness key, when it declares one
    outcome: str
    reason: str
    went_to: list[str]  # the primary output's topic, then any notices'
    prior_decision_id: str | None  # a duplicate's (or escalation's) earlier admission
    settled: str | None  # an escalation: "resolved as X by Y", "held", or "pending"
    verified: bool


class Filter(msgspec.Struct, frozen=True, kw_only=True):
    topic: str | None = None
    kind: str | None = None
    task_id: str | None = None
    key: str | None = None  # the witness key, or any one annotation value of it


EVERYTHING: Final = Filter()


def witness_key(d: Decision) -> str | None:
    spec = KINDS.get(d.kind) if d.kind is not None else None
    if spec is None or not spec.witness_key or not d.annotations:
        return None
    values = [d.annotations.get(n) for n in spec.witness_key]
    return KEY_JOIN.join(v for v in values if v is not None) or None


def _went(d: Decision, where: Where) -> list[str]:
    if d.outcome == "forward":
        primary = where.downstreams.get(d.source.topic, "?")
    elif d.outcome == "escalate":
        primary = where.reconciliation
    else:
        primary = where.dead_letter
    return [primary, *(where.routes.get(n.route, f"busguard.{n.route}") for n in d.notices or ())]


def _settled(d: Decision, resolutions: Mapping[str, list[Resolution]]) -> str | None:
    if d.outcome != "escalate":
        return None
    found = resolutions.get(d.decision_id, [])
    final = next((r for r in found if r.stage == "final"), None)
    if final is not None:
        return f"resolved as {final.resolved_as} by {final.by}"
    return "held" if found else "pending"


def _matches(d: Decision, key: str | None, f: Filter) -> bool:
    if f.topic is not None and d.source.topic != f.topic:
        return False
    if f.kind is not None and d.kind != f.kind:
        return False
    if f.task_id is not None and d.task_id != f.task_id:
        return False
    return f.key is None or (key is not None and (f.key == key or f.key in key.split(KEY_JOIN)))


def rows(
    decisions: Iterable[tuple[Decision, bool]], resolutions: Iterable[Resolution], where: Where, wanted: Filter = EVERYTHING
) -> list[Row]:
    """One row per decision id (re-emissions are one decision; a verified
    copy wins over an unverified one), in input order."""
    by_id: dict[str, tuple[Decision, bool]] = {}
    for d, ok in decisions:
        held = by_id.get(d.decision_id)
        if held is None or (ok and not held[1]):
            by_id[d.decision_id] = (d, ok)
    settled: dict[str, list[Resolution]] = {}
    for r in resolutions:
        settled.setdefault(r.escalation_id, []).append(r)
    out = []
    for d, ok in sorted(by_id.values(), key=lambda x: (x[0].source.topic, x[0].source.partition, x[0].source.offset)):
        key = witness_key(d)
        if not _matches(d, key, wanted):
            continue
        s = d.source
        span = f"-{d.last_offset}" if d.last_offset is not None else ""
        out.append(
            Row(
                record=f"{s.topic}/{s.partition}/{s.offset}{span}",
                decision_id=d.decision_id,
                kind=d.kind,
                task_id=d.task_id,
                key=key,
                outcome=d.outcome,
                reason=d.reason,
                went_to=_went(d, where),
                prior_decision_id=d.prior_admission,
                settled=_settled(d, settled),
                verified=ok,
            )
        )
    return out


def render(found: list[Row]) -> str:
    if not found:
        return "no decisions match"
    header = ["RECORD", "KIND", "TASK", "KEY", "OUTCOME", "REASON", "WENT TO", "PRIOR", "SETTLED"]
    table = [
        [
            r.record if r.verified else f"{r.record} (UNVERIFIED)",
            r.kind or "-",
            _clip(r.task_id or "-", 40),
            _clip(r.key or "-", 40),
            r.outcome,
            r.reason,
            ", ".join(r.went_to),
            r.prior_decision_id or "-",
            r.settled or "-",
        ]
        for r in found
    ]
    widths = [max([len(h), *(len(row[i]) for row in table)]) for i, h in enumerate(header)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip() for cells in [header, *table])


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
