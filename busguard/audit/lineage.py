"""Task lineage rebuilt from the audit log alone, and the invariants it must satisfy. Pure.

No I/O, no clock: the reader (busguard.audit.reader) verifies each record's
seal and feeds the result in; `judge(ledger)` is a pure function of what was
fed, and does not depend on the order records arrived in nor on how often an
identical record was fed (re-emissions after a crash are byte-identical
copies and count once). Where two different records claim one id (a
violation), the one with the smallest SHA-256 is used for the lineage, so the
choice is order-independent too.

Split by job: the ledger (busguard.audit.ledger: what was fed, what a
checkpoint holds), the report's types (busguard.audit.findings), the judge
here, which turns a ledger into a report, and the checks it calls with its
`flag`: escalations (invariant 2), chains (6), coverage (8), the
deployment binding (7).

The ledger is a msgspec Struct, so `--checkpoint` can save it and resume. It
keeps a compact fact per decision id (ids, outcome, task, nonce, receipt ids,
links, source coordinates and the SHA-256 of the record), never the record
bytes: `busguard escalations show` re-reads the log for the receipts.

Violation codes (stable; the invariant each one breaks, as numbered in
docs/design.md, "The auditor's invariants"):

| code | inv. | meaning |
| --- | --- | --- |
| `multiple_forwards` | 1 | two distinct `forward` decision ids for one witness: a (kind, task_id) (witness one per task), a key (one per key) |
| `missing_witness` | 1 | a task of a single-witness kind (`KindSpec.single_witness`, e.g. handoff) has a non-reject decision but no `forward` decision |
| `witness_key_missing` | 1 | a `forward` of a kind whose witness is one per key (`KindSpec.witness`) lacks an annotation of its `witness_key` |
| `prior_mismatch` | 1 | a duplicate/escalation names a prior admission that is not the task's witness (task index off: a non-`forward` of the kind) |
| `unknown_escalation` | 2 | a resolution settles an id that is not an `escalate` decision in the log |
| `duplicate_resolution` | 2 | two final resolution ids, or two different final records, for one escalation |
| `bad_resolution_id` | 2 | a resolution id is not `resolution_id(escalation_id, stage)` |
| `resolution_mismatch` | 2 | a resolution names another task, receipt, prior or link than its escalation |
| `forwarded_without_decision` | 3 | a downstream record's decision id has no `forward` decision in the log |
| `forwarded_unattested` | 3 | a downstream record's attestation does not verify with the guard key |
| `forwarded_wrong_topic` | 3 | a forwarded record is on another route's downstream topic |
| `forwarded_mismatch` | 3 | a downstream attestation is bound to another record than the audit log's |
| `nonce_reused` | 4 | one (scope, nonce) has two `forward` decisions |
| `forged_record` | 5 | an audit record's seal does not verify (decisions: the guard key; resolutions: the reconciler's or the guard's): excluded |
| `guard_sealed_resolution` | 5 | a resolution sealed with the guard key, not the reconciler's, beyond `keys.single_key_audit` / `single_key_until` |
| `unproven_operator` | 5 | `by: operator:<name>` without a command signed by the key listed for `<name>`, or one that says something else |
| `unreadable_record` | 5 | a sealed audit record is not a decision or resolution: excluded |
| `conflicting_reemission` | 3P | two different audit records with one decision (or resolution) id |
| `bad_inclusion` | 5 | a record under a verified tree head whose inclusion proof does not prove its attestation: excluded |
| `chain_fork` | 6 | two different signed tree heads with one (guard, chain, seq) |
| `chain_gap` | 6 | a chain's heads skip a seq (or do not start at 0): heads, and their records, were removed |
| `chain_broken` | 6 | a head's `prev` is not the SHA-256 of the chain's previous head |
| `leaf_missing` | 6 | a head's tree has leaves no audit record in the log proves: records were removed |
| `foreign_decision` | 7 | a sealed decision whose source topic is not an input of this deployment, or whose id is not derived from its namespace: excluded |
| `foreign_resolution` | 7 | a sealed resolution not made from this deployment's reconciliation topic, or of another deployment's escalation: excluded |
| `foreign_forward` | 7 | a downstream record attesting another deployment's decision: excluded |
| `foreign_chain` | 7 | tree heads that prove only another deployment's records: excluded before the chain checks |
| `offsets_overlap` | 8 | two decision ids cover one input offset (a span decision's range overlaps another decision; busguard.audit.coverage) |
| `offsets_undecided` | 8 | input offsets between decided ones that no decision covers |
| `offsets_unserved` | 9 | offsets below a read partition's end the broker answered every fetch at with nothing: stepped over, not read (audit.reach) |
| `offsets_rewound` | 9 | a read partition's high watermark fell below an offset the audit had read to: offsets given out again, not read |
| `partition_unfinished` | 9 | a partition of the audit or a downstream topic not read to its end offset: where the read stopped, the end, and why |
"""

from __future__ import annotations

from collections import defaultdict
from typing import Final

from busguard.audit.awards import call_reports
from busguard.audit.chains import chain_reports
from busguard.audit.coverage import coverage
from busguard.audit.deployment import bind
from busguard.audit.escalations import pending as escalation_pending
from busguard.audit.escalations import resolutions, source_order, status
from busguard.audit.findings import (
    AuditReport,
    EscalationStatus,
    KindRule,
    PendingEscalation,
    Summary,
    SupersedesLink,
    TaskLineage,
    Violation,
)
from busguard.audit.ledger import LEDGER_VERSION, DecisionFact, F, Ledger, ResolutionFact, Sealer
from busguard.audit.notices import notice_reports
from busguard.audit.reach import findings as read_findings
from busguard.policies import KINDS, single_witness, task_indexed, witness_rule

#: code -> invariant number (1-5 and 0 as docs/design.md, "The auditor's invariants", numbers them).
INVARIANTS: Final[dict[str, int]] = {
    "multiple_forwards": 1,
    "missing_witness": 1,
    "witness_key_missing": 1,
    "prior_mismatch": 1,
    "unknown_escalation": 2,
    "duplicate_resolution": 2,
    "bad_resolution_id": 2,
    "resolution_mismatch": 2,
    "forwarded_without_decision": 3,
    "forwarded_unattested": 3,
    "forwarded_wrong_topic": 3,
    "forwarded_mismatch": 3,
    "nonce_reused": 4,
    "forged_record": 5,
    "guard_sealed_resolution": 5,
    "unproven_operator": 5,
    "unreadable_record": 5,
    "conflicting_reemission": 0,
    "bad_inclusion": 5,
    "chain_fork": 6,
    "chain_gap": 6,
    "chain_broken": 6,
    "leaf_missing": 6,
    "foreign_decision": 7,
    "foreign_resolution": 7,
    "foreign_forward": 7,
    "foreign_chain": 7,
    "offsets_overlap": 8,
    "offsets_undecided": 8,
    "offsets_unserved": 9,
    "offsets_rewound": 9,
    "partition_unfinished": 9,
}


def _distinct(facts: dict[str, F], variants: dict[str, list[str]]) -> int:
    """Distinct records behind `facts`: one per id, more for conflicting ids."""
    return len(facts) + sum(len(v) - 1 for v in variants.values())


class _Judge:
    """One pass over the ledger's facts; every list it emits is sorted."""

    def __init__(self, ledger: Ledger) -> None:
        """Only the deployment's own records are judged; the rest are
        findings before the other checks start (busguard.audit.deployment)."""
        self.led = ledger
        self.reads = ledger.reads
        self.violations: list[Violation] = []
        self.single_key = 0
        self.foreign = 0
        if ledger.deployment is not None:
            bound = bind(ledger, ledger.deployment)
            self.led, self.foreign = bound.own, bound.foreign_records
            self.violations += bound.findings

    def flag(self, code: str, detail: str, *, task: tuple[str | None, str | None] = (None, None), decision_id: str | None = None) -> None:
        self.violations.append(Violation(invariant=code, detail=detail, kind=task[0], task_id=task[1], decision_id=decision_id))

    def run(self) -> AuditReport:
        led = self.led
        by_task: dict[tuple[str, str], list[DecisionFact]] = defaultdict(list)
        for f in led.decisions.values():
            if f.kind is not None and f.task_id is not None:
                by_task[(f.kind, f.task_id)].append(f)
        finals, helds, self.single_key = resolutions(led, self.flag)
        tasks = [self._task(key, sorted(facts, key=source_order), finals, helds) for key, facts in sorted(by_task.items())]
        pending = escalation_pending(led, finals, helds)
        self._witness_keys()
        self._nonces()
        self._forwarded()
        self._bad_records()
        self._conflicts()
        chains = chain_reports(self.led, self.flag)
        inputs, gaps = coverage(led.decisions.values())
        for g in gaps:
            self.flag(g.code, g.detail, decision_id=g.decision_id)
        for r in read_findings(self.reads):
            self.flag(r.code, r.detail)
        self.violations.sort(
            key=lambda v: (INVARIANTS.get(v.invariant, 9), v.invariant, v.kind or "", v.task_id or "", v.decision_id or "", v.detail)
        )
        decisions = led.decisions.values()
        summary = Summary(
            records=_distinct(led.decisions, led.decision_variants)
            + _distinct(led.resolutions, led.resolution_variants)
            + len(led.bad_records)
            + self.foreign,
            decisions=len(led.decisions),
            resolutions=len(led.resolutions),
            tasks=len(tasks),
            forwarded=sum(1 for topics in led.forwarded.values() if any(d.attested for d in topics.values())),
            duplicates=sum(1 for f in decisions if f.outcome == "duplicate"),
            escalations=sum(1 for f in decisions if f.outcome == "escalate"),
            pending=len(pending),
            violations=len(self.violations),
            single_key=self.single_key,
            foreign=self.foreign,
        )
        calls = call_reports(decisions)
        return AuditReport(
            ok=not self.violations,
            summary=summary,
            tasks=tasks,
            pending=pending,
            violations=self.violations,
            calls=calls,
            notices=notice_reports(decisions),
            chains=chains,
            inputs=inputs,
            reads=self.reads,
            kinds=[
                KindRule(
                    kind=k,
                    witness=witness_rule(k),
                    rule=KINDS[k].describe_witness() if k in KINDS else "one admitted per task (unknown kind)",
                )
                for k in sorted({f.kind for f in decisions if f.kind is not None})
            ],
        )

    # invariant 1 (and the table)
    def _task(
        self,
        key: tuple[str, str],
        facts: list[DecisionFact],
        finals: dict[str, list[ResolutionFact]],
        helds: dict[str, list[ResolutionFact]],
    ) -> TaskLineage:
        kind, task_id = key
        indexed = task_indexed(kind)
        forwards = [f for f in facts if f.outcome == "forward"]
        forward_ids = {f.decision_id for f in forwards}
        if len(forwards) > 1 and indexed:
            ids = ", ".join(f.decision_id for f in forwards)
            self.flag(
                "multiple_forwards",
                f"{kind} {task_id!r} was admitted {len(forwards)} times: {ids}",
                task=key,
                decision_id=forwards[1].decision_id,
            )
        if single_witness(kind) and not forwards and any(f.outcome != "reject" for f in facts):
            shown = ", ".join(f"{f.decision_id} ({f.reason})" for f in facts if f.outcome != "reject")
            self.flag("missing_witness", f"{kind} {task_id!r} has decisions but no admitted witness in the log: {shown}", task=key)
        for f in facts:
            if not indexed and f.prior_decision_id is not None:
                # a kind that owns its tasks names an admission of the kind, of any task (seam.duplicate_of)
                named = self.led.decisions.get(f.prior_decision_id)
                if named is not None and (named.outcome != "forward" or named.kind != kind):
                    self.flag(
                        "prior_mismatch",
                        f"{f.reason} decision names prior admission {f.prior_decision_id}, a {named.outcome} of kind {named.kind}",
                        task=key,
                        decision_id=f.decision_id,
                    )
            elif forwards and f.prior_decision_id is not None and f.prior_decision_id not in forward_ids:
                self.flag(
                    "prior_mismatch",
                    f"{f.reason} decision names prior admission {f.prior_decision_id}, but the task's witness is {forwards[0].decision_id}",
                    task=key,
                    decision_id=f.decision_id,
                )
        witness = forwards[0] if forwards else None
        escalations = [status(f, finals, helds) for f in facts if f.outcome == "escalate"]
        links = [
            SupersedesLink(decision_id=f.decision_id, reason=f.reason, receipt_id=f.receipt_id, supersedes=f.supersedes)
            for f in facts
            if f.supersedes is not None
        ]
        delivered = witness is not None and any(d.attested for d in self.led.forwarded.get(witness.decision_id, {}).values())
        return TaskLineage(
            kind=kind,
            task_id=task_id,
            witness=witness.decision_id if witness else None,
            witness_receipt_id=witness.receipt_id if witness else None,
            forwards=len(forwards),
            delivered=delivered,
            duplicates=sum(1 for f in facts if f.outcome == "duplicate"),
            rejects=sum(1 for f in facts if f.outcome == "reject"),
            escalations=escalations,
            supersedes=links,
        )

    # invariant 1, for a kind whose witness is one per key of its own
    def _witness_keys(self) -> None:
        by_key: dict[tuple[str, tuple[str, ...]], list[DecisionFact]] = defaultdict(list)
        for f in self.led.decisions.values():
            if f.outcome != "forward" or f.kind is None or witness_rule(f.kind) != "key":
                continue
            names = KINDS[f.kind].witness_key
            values = [(f.annotations or {}).get(n) for n in names]
            if any(v is None for v in values):
                self.flag(
                    "witness_key_missing",
                    f"forward of {f.kind} lacks its witness key annotation(s) {', '.join(names)}",
                    task=(f.kind, f.task_id),
                    decision_id=f.decision_id,
                )
                continue
            by_key[(f.kind, tuple(v for v in values if v is not None))].append(f)
        for (kind, key), facts in sorted(by_key.items()):
            if len(facts) > 1:
                facts.sort(key=source_order)
                self.flag(
                    "multiple_forwards",
                    f"{kind} key {'/'.join(key)!r} was admitted {len(facts)} times: {', '.join(f.decision_id for f in facts)}",
                    task=(kind, facts[1].task_id),
                    decision_id=facts[1].decision_id,
                )

    # invariant 4
    def _nonces(self) -> None:
        global_scope = self.led.nonce_scope == "global"
        by_nonce: dict[tuple[str, str], list[DecisionFact]] = defaultdict(list)
        for f in self.led.decisions.values():
            if f.outcome == "forward" and f.nonce is not None:
                by_nonce[("" if global_scope else f.principal or "", f.nonce)].append(f)
        for (scope, nonce), facts in by_nonce.items():
            if len(facts) > 1:
                facts.sort(key=source_order)
                where = "globally" if global_scope else f"for principal {scope}"
                ids = ", ".join(f.decision_id for f in facts)
                self.flag(
                    "nonce_reused",
                    f"nonce {nonce!r} was admitted {len(facts)} times {where}: {ids}",
                    task=(facts[1].kind, facts[1].task_id),
                    decision_id=facts[1].decision_id,
                )

    # invariant 3
    def _forwarded(self) -> None:
        for did, topics in self.led.forwarded.items():
            fact = self.led.decisions.get(did)
            task = (fact.kind, fact.task_id) if fact is not None else (None, None)
            for topic, seen in sorted(topics.items()):
                label = did or "(none)"
                if seen.unattested:
                    self.flag(
                        "forwarded_unattested",
                        f"a record on {topic} with decision id {label} does not carry a valid guard attestation",
                        task=task,
                        decision_id=did or None,
                    )
                if not seen.attested:
                    continue
                if not did:
                    self.flag("forwarded_without_decision", f"a record on {topic} has no busguard-decision-id header", decision_id=None)
                elif fact is None:
                    self.flag(
                        "forwarded_without_decision",
                        f"a record on {topic} names decision {did}, which is not in the audit log",
                        decision_id=did,
                    )
                elif fact.outcome != "forward":
                    self.flag(
                        "forwarded_without_decision",
                        f"a record on {topic} names decision {did}, a {fact.outcome} ({fact.reason}) decision",
                        task=task,
                        decision_id=did,
                    )
                else:
                    route = self.led.routes.get(fact.source.topic)
                    if route is not None and route != topic:
                        self.flag(
                            "forwarded_wrong_topic",
                            f"decision {did} read from {fact.source.topic} belongs on {route}, found on {topic}",
                            task=task,
                            decision_id=did,
                        )
                    known = set(self.led.decision_variants.get(did, [fact.sha256]))
                    stray = [s for s in seen.decision_sha256 if s not in known]
                    if stray:
                        self.flag(
                            "forwarded_mismatch",
                            f"a record on {topic} attests decision {did} with record SHA-256 {stray[0]}, not the audit log's",
                            task=task,
                            decision_id=did,
                        )

    # invariant 5
    def _bad_records(self) -> None:
        for sha, bad in self.led.bad_records.items():
            claim = f" claiming id {bad.claimed_id}" if bad.claimed_id else ""
            why = "; ".join(bad.reasons)
            if bad.sealed:
                self.flag(
                    "unreadable_record",
                    f"sealed audit record sha256 {sha[:16]}…{claim} is not a decision or resolution: {why}",
                    decision_id=bad.claimed_id,
                )
            else:
                self.flag(
                    "forged_record",
                    f"audit record sha256 {sha[:16]}…{claim} does not verify (excluded from the lineage): {why}",
                    decision_id=bad.claimed_id,
                )

    # "decide once, re-emit identically"
    def _conflicts(self) -> None:
        for did, shas in self.led.decision_variants.items():
            f = self.led.decisions[did]
            self.flag(
                "conflicting_reemission",
                f"decision {did} appears as {len(shas)} different audit records (re-emissions must be byte-identical)",
                task=(f.kind, f.task_id),
                decision_id=did,
            )


def judge(ledger: Ledger) -> AuditReport:
    return _Judge(ledger).run()


__all__ = [
    "INVARIANTS",
    "LEDGER_VERSION",
    "AuditReport",
    "EscalationStatus",
    "Ledger",
    "PendingEscalation",
    "Sealer",
    "TaskLineage",
    "judge",
]
