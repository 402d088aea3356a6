"""The auditor's report: what `busguard audit` prints (as JSON or a table,
busguard.audit.report) and `--expect-ok` judges."""

from __future__ import annotations

from typing import Literal

import msgspec

from busguard.audit.coverage import InputCoverage
from busguard.audit.reach import PartitionRead
from busguard.protocol.records import Coordinates

EscalationState = Literal["pending", "held", "resolved"]


class Summary(msgspec.Struct, kw_only=True):
    records: int  # distinct audit records (identical re-emissions count once)
    decisions: int  # distinct verified decision ids
    resolutions: int  # distinct verified resolution ids
    tasks: int  # distinct (kind, task_id)
    forwarded: int  # distinct decision ids seen on downstream topics
    duplicates: int  # decisions with outcome `duplicate`
    escalations: int  # decisions with outcome `escalate`
    pending: int  # escalations without a final resolution
    violations: int
    single_key: int = 0  # resolutions accepted only under keys.single_key_audit (guard-sealed, or the operator's name unproven)
    foreign: int = 0  # distinct sealed audit records of another deployment (counted in `records` only; each a violation)


class EscalationStatus(msgspec.Struct, kw_only=True):
    escalation_id: str
    reason: str
    receipt_id: str | None
    supersedes: str | None
    prior_receipt_id: str | None
    status: EscalationState
    resolution_id: str | None = None  # the final one, else the held one
    resolved_as: str | None = None
    by: str | None = None


class SupersedesLink(msgspec.Struct, kw_only=True):
    decision_id: str
    reason: str
    receipt_id: str | None
    supersedes: str


class TaskLineage(msgspec.Struct, kw_only=True):
    kind: str
    task_id: str
    witness: str | None  # decision id of the (first) forward decision
    witness_receipt_id: str | None
    forwards: int  # distinct forward decision ids (more than 1 is a violation)
    delivered: bool  # the witness was seen, attested, on a downstream topic
    duplicates: int
    rejects: int
    escalations: list[EscalationStatus]
    supersedes: list[SupersedesLink]


class PendingEscalation(msgspec.Struct, kw_only=True):
    escalation_id: str
    kind: str | None
    task_id: str | None
    reason: str
    principal: str | None
    receipt_id: str | None
    prior_receipt_id: str | None
    prior_decision_id: str | None
    supersedes: str | None
    source: Coordinates
    held: str | None = None  # the `held` resolution id, if an operator was asked


class Violation(msgspec.Struct, kw_only=True):
    invariant: str
    detail: str
    task_id: str | None = None
    decision_id: str | None = None
    kind: str | None = None


class CallReport(msgspec.Struct, kw_only=True):
    call: str
    awarder: str | None  # the call's signer (principal); None if the call itself is not in the log
    bids: int  # admitted bids
    refused_awards: list[str]  # reason codes of refused awards, in log order (each sent a rebid notice)
    #: awards the core escalated (a second award under the call id while its
    #: task entry lived: task_conflict, ambiguous_retransmission), "<reason> from <agent id>", in log order
    escalated_awards: list[str] = []
    winner: str | None = None  # the awarded bid id
    awarded_to: str | None = None  # the winning bidder's agent id
    mode: str | None = None  # verified, delegated, best_effort
    delegated_to: str | None = None  # the verifier manifest of a delegated award
    risk_price: str | None = None  # a best-effort award's price
    #: settled (recomputed or attested), unverified (best-effort), escalated
    #: (only escalations so far), open (awarded, no result), not awarded
    settlement: str = "not awarded"
    escalations: list[str] = []  # "<reason> attributed to <agent id>", in log order


class NoticeReport(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One admitted compromise notice as the log shows it (busguard.audit.notices)."""

    notice_id: str
    issuer: str | None  # the notice's signer (principal)
    subject: str | None
    covers: str | None  # agent, session, key
    compromised_from: str | None
    expires_at: str | None = None
    status: str = ""  # cleared, expired or active, as of the log's last decision (busguard.audit.notices)
    cleared_at: str | None = None  # the admitted clearance's cleared_at
    cleared_by: str | None = None  # the admitted clearance's receipt id
    counted_by: list[str] = []  # handoff task ids that counted it (session or successor), in log order
    counted_before_clearance: list[str] = []  # those of counted_by decided before the clearance, in log order
    lifted_for: list[str] = []  # "<task id>: expired|cleared": handoffs it covered but no longer counted for


class ChainReport(msgspec.Struct, kw_only=True):
    """One batch-seal chain as the log shows it. `tip_seq` / `tip_sha256`
    name its newest head: truncating a chain's end leaves no trace inside
    the log, so an operator keeps the tip (or the checkpoint) and compares
    the next audit's chain against it."""

    guard: str
    chain: str
    heads: int  # distinct heads seen
    leaves: int  # leaves of those heads (one audit record each)
    first_seq: int
    tip_seq: int
    tip_sha256: str
    tip_sealed_at: int


class KindRule(msgspec.Struct, kw_only=True):
    """A kind in the log and the witness rule it declares (`KindSpec.witness`),
    which invariant 1 was checked against."""

    kind: str
    witness: str  # "task", "key" or "several"
    rule: str  # as printed


class AuditReport(msgspec.Struct, kw_only=True, omit_defaults=True):  # calls and chains omitted when there are none
    ok: bool
    summary: Summary
    tasks: list[TaskLineage]
    pending: list[PendingEscalation]
    violations: list[Violation]
    calls: list[CallReport] = []  # contract-net calls (busguard.audit.awards)
    notices: list[NoticeReport] = []  # compromise notices (busguard.audit.notices)
    chains: list[ChainReport] = []  # batch-seal chains (docs/protocol.md 12.6), by guard and chain
    inputs: list[InputCoverage] = []  # per input partition, the offsets its decisions cover (busguard.audit.coverage)
    #: per partition of the audit and downstream topics, how far the audit read it (busguard.audit.reach)
    reads: list[PartitionRead] = []
    #: the kinds with decisions in the log and their declared witness rules
    kinds: list[KindRule] = []
