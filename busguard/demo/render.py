"""What the demo prints: the per-step summary and the auditor's table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from busguard.config import Config
from busguard.demo.scenario import DEAD_LETTER, DOWNSTREAM, RECONCILIATION, Scenario

if TYPE_CHECKING:
    from busguard.audit.lineage import AuditReport


def run_auditor(cfg: Config, guard_public_key: bytes, reconciler_public_key: bytes) -> AuditReport:
    """The auditor, imported lazily (it is the heaviest import and optional for the rest)."""
    from busguard.audit.run import run_audit

    return run_audit(cfg, guard_public_key=guard_public_key, reconciler_public_key=reconciler_public_key, idle_ms=1500)


def render_audit(report: AuditReport) -> str:
    from busguard.audit.report import render_table

    return render_table(report)


def summary(sc: Scenario, cfg: Config) -> list[str]:
    roles = {cfg.topics.reconciliation: RECONCILIATION, cfg.topics.dead_letter: DEAD_LETTER}
    width = max(len(s.label) for s in sc.steps)
    lines = []
    for s in sc.steps:
        d = s.decision
        dest = roles.get(s.dest_topic or "", DOWNSTREAM if s.dest_topic else "(nowhere)")
        reason = d.reason if d is not None else "(no decision)"
        if s.attested:
            reason += " (attested)"
        mark = "ok" if not s.problems else "!!"
        lines.append(f"{mark} {s.number:>2}. {s.label:<{width}}  -> {dest:<14} {reason}")
        for detail in s.details:
            lines.append(f"{'':7}{detail}")
        for problem in s.problems:
            lines.append(f"{'':7}PROBLEM: {problem} (wanted {s.expect_dest} / {s.expect_reason})")
    return lines
