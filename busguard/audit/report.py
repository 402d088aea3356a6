"""Rendering an AuditReport: a table for people, JSON for machines; and the
stderr progress indicator of long reads."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Final, TextIO

import msgspec

from busguard.audit.findings import CallReport
from busguard.audit.lineage import AuditReport, EscalationStatus, PendingEscalation, TaskLineage
from busguard.policies import witness_rule

_encoder: Final = msgspec.json.Encoder()
SHORT: Final = 12  # receipt ids are shown by their first 12 hex digits in tables
MAX_TASK_ID: Final = 40


def render_json(report: AuditReport) -> bytes:
    """The report as JSON (stable field names; see AuditReport)."""
    return _encoder.encode(report)


def _short(receipt_id: str | None) -> str:
    return receipt_id[:SHORT] if receipt_id else "-"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return [fmt(header), *(fmt(r) for r in rows)]


def _escalation(e: EscalationStatus) -> str:
    if e.status == "resolved":
        state = f"resolved as {e.resolved_as} by {e.by}"
    elif e.status == "held":
        state = f"held by {e.by}"
    else:
        state = "PENDING"
    return f"{e.escalation_id} {e.reason}: {state}"


def _task_row(t: TaskLineage) -> list[str]:
    witness = t.witness or "-"
    if t.forwards > 1:
        # a warning mark only where the kind's witness rule is one per task
        witness += f" (+{t.forwards - 1} more{'!' if witness_rule(t.kind) == 'task' else ''})"
    elif t.witness and not t.delivered:
        witness += " (not seen downstream)"
    return [
        t.kind,
        _clip(t.task_id, MAX_TASK_ID),
        witness,
        str(t.duplicates),
        str(t.rejects),
        "; ".join(_escalation(e) for e in t.escalations) or "-",
        "; ".join(f"{_short(s.receipt_id)}->{_short(s.supersedes)}" for s in t.supersedes) or "-",
    ]


def _call_row(c: CallReport) -> list[str]:
    mode = c.mode or "-"
    if c.delegated_to:
        mode += f" via {c.delegated_to}"
    elif c.risk_price is not None:
        mode += f" (risk priced {c.risk_price})"
    settlement = c.settlement + "".join(f"; {e}" for e in c.escalations)
    awarded = f"{_clip(c.awarded_to, 28)} ({c.winner})" if c.awarded_to else "-"
    refused = [*c.refused_awards, *(f"escalated {e}" for e in c.escalated_awards)]
    return [_clip(c.call, MAX_TASK_ID), str(c.bids), ", ".join(refused) or "-", awarded, mode, settlement]


def _pending_row(p: PendingEscalation) -> list[str]:
    return [
        p.escalation_id,
        p.kind or "-",
        _clip(p.task_id or "-", MAX_TASK_ID),
        p.reason,
        _short(p.receipt_id),
        _short(p.prior_receipt_id),
        _short(p.supersedes),
        p.held or "-",
    ]


def render_pending(pending: Sequence[PendingEscalation]) -> str:
    if not pending:
        return "no pending escalations"
    header = ["ESCALATION", "KIND", "TASK", "REASON", "RECEIPT", "PRIOR RECEIPT", "SUPERSEDES", "HELD"]
    return "\n".join(_table(header, [_pending_row(p) for p in pending]))


def render_table(report: AuditReport) -> str:
    """The human-readable audit: verdict, counts, one line per task, pending
    escalations and violations."""
    s = report.summary
    lines = [
        f"busguard audit: {'OK' if report.ok else f'{s.violations} VIOLATION(S)'}",
        f"records {s.records}  decisions {s.decisions}  resolutions {s.resolutions}  tasks {s.tasks}  "
        f"forwarded {s.forwarded}  duplicates {s.duplicates}  escalations {s.escalations}  pending {s.pending}",
        "",
    ]
    if s.foreign:
        lines[-1:-1] = [f"{s.foreign} record(s) of another deployment excluded (foreign_* violations)"]
    if s.single_key:
        lines[-1:-1] = [
            f"note: {s.single_key} resolution(s) accepted only under keys.single_key_audit (sealed with the guard key, or an operator's name not proven)"
        ]
    if report.kinds:
        lines += _table(["KIND", "WITNESS RULE (checked)"], [[k.kind, k.rule] for k in report.kinds]) + [""]
    if report.tasks:
        header = ["KIND", "TASK", "WITNESS", "DUPS", "REJECTS", "ESCALATIONS", "SUPERSEDES"]
        lines += _table(header, [_task_row(t) for t in report.tasks])
    else:
        lines.append("no tasks in the log")
    if report.calls:
        lines += ["", f"contract-net calls ({len(report.calls)}):"]
        lines += _table(["CALL", "BIDS", "REFUSED AWARDS", "AWARDED TO", "MODE", "SETTLEMENT"], [_call_row(c) for c in report.calls])
    if report.notices:
        lines += ["", f"compromise notices ({len(report.notices)}):"]
        lines += _table(
            ["NOTICE", "SUBJECT", "COVERS", "FROM", "EXPIRES", "STATUS", "COUNTED BY", "LIFTED FOR"],
            [
                [
                    _clip(n.notice_id, MAX_TASK_ID),
                    _clip(n.subject or "-", 28),
                    n.covers or "-",
                    n.compromised_from or "-",
                    n.expires_at or "-",
                    n.status if n.cleared_at is None else f"{n.status} from {n.cleared_at}",
                    ", ".join(n.counted_by) or "-",
                    ", ".join(n.lifted_for) or "-",
                ]
                for n in report.notices
            ],
        )
    if report.pending:
        lines += ["", f"pending escalations ({len(report.pending)}):", render_pending(report.pending)]
    if report.chains:
        lines += ["", f"batch-seal chains ({len(report.chains)}; keep each tip: a truncated chain end shows only against it):"]
        lines += _table(
            ["GUARD", "CHAIN", "HEADS", "RECORDS", "TIP SEQ", "TIP SHA-256"],
            [[_clip(c.guard, 30), c.chain, str(c.heads), str(c.leaves), str(c.tip_seq), c.tip_sha256] for c in report.chains],
        )
    if report.inputs:
        lines += ["", f"input partitions ({len(report.inputs)}; the offsets their decisions cover):"]
        lines += _table(
            ["TOPIC", "PARTITION", "FIRST", "LAST", "OFFSETS", "DECISIONS", "SPANS", "UNDECIDED", "OVERLAPPING"],
            [
                [_clip(c.topic, 40), *map(str, (c.partition, c.first, c.last, c.offsets, c.decisions, c.spans, c.undecided, c.overlapping))]
                for c in report.inputs
            ],
        )
    if report.reads:
        lines += ["", f"partitions read ({len(report.reads)}; every one must reach its end offset):"]
        lines += _table(
            ["TOPIC", "PARTITION", "FROM", "TO", "END", "RECORDS", "UNSERVED", "STATUS"],
            [
                [
                    r.topic,
                    *map(str, (r.partition, r.start, r.position, r.end, r.records)),
                    str(sum(hi - lo + 1 for lo, hi in r.unserved)),
                    "REWOUND" if r.rewound else "UNFINISHED" if r.unfinished is not None or r.position < r.end else "read to the end",
                ]
                for r in report.reads
            ],
        )
    if report.violations:
        lines += ["", f"violations ({len(report.violations)}):"]
        for v in report.violations:
            where = " ".join(
                x
                for x in (f"{v.kind} {v.task_id!r}" if v.task_id is not None else "", f"decision {v.decision_id}" if v.decision_id else "")
                if x
            )
            lines.append(f"  [{v.invariant}] {where + ': ' if where else ''}{v.detail}")
    return "\n".join(lines)


class StderrProgress:
    """A one-line counter on stderr: records read so far and the rate (no
    percentage: the end offsets count offsets, not records)."""

    _SPIN: Final = "|/-\\"

    def __init__(self, label: str = "reading", stream: TextIO | None = None, min_interval_s: float = 0.1) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.min_interval_s = min_interval_s
        self.count = 0
        self.started = time.monotonic()
        self._shown = 0.0
        self._turn = 0

    def __call__(self, n: int) -> None:
        self.count += n
        now = time.monotonic()
        if now - self._shown >= self.min_interval_s:
            self._shown = now
            self._turn += 1
            self._draw(self._SPIN[self._turn % 4])

    def _draw(self, mark: str) -> None:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        self.stream.write(f"\r{mark} {self.label}: {self.count:,} records  {self.count / elapsed:,.0f}/s   ")
        self.stream.flush()

    def close(self) -> None:
        self._draw("✓" if self.stream.encoding and "utf" in self.stream.encoding.lower() else "*")
        self.stream.write("\n")
        self.stream.flush()


def progress_bar(label: str) -> StderrProgress:
    """The one place a progress indicator is made (swap for tqdm here)."""
    return StderrProgress(label)
