"""The auditor's ledger: what it learned from the log, compactly (see
busguard.audit.lineage for the judge that turns it into a report).

A msgspec Struct, so `--checkpoint` can save it and resume. It keeps a
compact fact per decision id (ids, outcome, task, nonce, receipt ids, links,
source coordinates and the SHA-256 of the record), never the record bytes.
"""

from __future__ import annotations

import hashlib
from typing import Final, Literal, TypeVar

import msgspec

from busguard.audit.deployment import Deployment
from busguard.audit.reach import PartitionRead, merge
from busguard.protocol.records import Coordinates, Decision, Resolution, SignedCommand, Stage

LEDGER_VERSION: Final = 1
#: Whose key verified an audit record's seal (busguard.audit.checks).
Sealer = Literal["guard", "reconciler"]
#: Where a record was read in the log: (partition, offset) of its topic.
At = tuple[int, int]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class DecisionFact(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """The part of a decision the invariants need (no receipt bytes)."""

    decision_id: str
    sha256: str
    outcome: str
    reason: str
    source: Coordinates
    kind: str | None = None
    task_id: str | None = None
    principal: str | None = None
    nonce: str | None = None
    receipt_id: str | None = None
    supersedes: str | None = None
    prior_decision_id: str | None = None
    prior_receipt_id: str | None = None
    decided_at: int | None = None
    annotations: dict[str, str] | None = None  # a kind policy's (the per-call award report reads them)
    at: At | None = None  # the first copy's place on the audit topic (findings name it)
    last_offset: int | None = None  # a span decision's last input offset (busguard.audit.coverage)


class ResolutionFact(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    resolution_id: str
    sha256: str
    escalation_id: str
    stage: Stage
    resolved_as: str | None = None
    by: str = ""
    kind: str | None = None
    task_id: str | None = None
    receipt_id: str | None = None
    supersedes: str | None = None
    prior_decision_id: str | None = None
    note: str = ""
    sealed_by: Sealer = "reconciler"
    command: SignedCommand | None = None
    source: Coordinates | None = None  # the reconciliation record it was made from
    at: At | None = None


class BadRecord(msgspec.Struct, kw_only=True, array_like=True):
    """An audit record excluded from the lineage: unsealed/forged or unreadable."""

    sealed: bool
    claimed_id: str | None
    reasons: list[str] = msgspec.field(default_factory=list)


class Downstream(msgspec.Struct, kw_only=True, array_like=True):
    """What was seen on one downstream topic for one decision id."""

    attested: bool = False  # at least one copy verified
    unattested: bool = False  # at least one copy did not
    decision_sha256: list[str] = msgspec.field(default_factory=list)
    source: Coordinates | None = None  # the input record an attested copy names
    at: At | None = None  # the first attested copy's place on the topic


class HeadFact(msgspec.Struct, kw_only=True, array_like=True):
    """One signed tree head of a batch seal (docs/protocol.md 12.6) and which
    of its leaves the audit topic has shown (`seen`: bit i of byte i // 8)."""

    sha256: str
    prev: str | None
    size: int
    sealed_at: int
    seen: bytes = b""
    #: (source topic, partition, decision-id prefix) of the records seen
    #: under it: whose deployment it is (busguard.audit.deployment)
    proves: list[tuple[str, int, str]] = msgspec.field(default_factory=list)

    def see(self, index: int) -> None:
        bits = bytearray(self.seen.ljust((self.size + 7) // 8, b"\x00"))
        bits[index // 8] |= 1 << (index % 8)
        self.seen = bytes(bits)

    def missing(self) -> list[int]:
        bits = self.seen.ljust((self.size + 7) // 8, b"\x00")
        return [i for i in range(self.size) if not bits[i // 8] >> (i % 8) & 1]


class ChainFacts(msgspec.Struct, kw_only=True):
    """The heads of one chain (a guard process's run), by seq; more than one
    head for a seq is a fork."""

    guard: str
    chain: str
    heads: dict[int, list[HeadFact]] = msgspec.field(default_factory=dict)


class Ledger(msgspec.Struct, kw_only=True):
    """Everything learned from the log so far. Feed it, then call `report()`.

    `routes` maps each input topic to its downstream topic (for the
    wrong-topic check; empty disables it). `nonce_scope` is the guard's
    `[admission] nonce_scope`. `operators` maps operator names to their
    multikeys (the operators file), to prove `by: operator:<name>`.
    `single_key_audit` / `single_key_until` (epoch ms) are the `[keys]`
    settings of a one-key deployment, or of one that moved to separate keys
    at `single_key_until`. `deployment` is what binds the log to one
    deployment (busguard.audit.deployment): its namespace, input topics and
    reconciliation topic; None judges the records as if they were all its
    own (the other invariants alone: `run_audit` always sets it). These six
    follow the current config on every run.
    """

    v: int = LEDGER_VERSION
    nonce_scope: Literal["global", "principal"] = "global"
    routes: dict[str, str] = msgspec.field(default_factory=dict)
    operators: dict[str, str] = msgspec.field(default_factory=dict)
    single_key_audit: bool = False
    single_key_until: int | None = None
    deployment: Deployment | None = None
    decisions: dict[str, DecisionFact] = msgspec.field(default_factory=dict)
    decision_variants: dict[str, list[str]] = msgspec.field(default_factory=dict)
    resolutions: dict[str, ResolutionFact] = msgspec.field(default_factory=dict)
    resolution_variants: dict[str, list[str]] = msgspec.field(default_factory=dict)
    bad_records: dict[str, BadRecord] = msgspec.field(default_factory=dict)
    forwarded: dict[str, dict[str, Downstream]] = msgspec.field(default_factory=dict)
    #: batch-seal chains, keyed "<guard> <chain>"
    chains: dict[str, ChainFacts] = msgspec.field(default_factory=dict)
    #: records whose tree head verified but whose inclusion proof did not: sha256 -> why
    bad_inclusions: dict[str, str] = msgspec.field(default_factory=dict)
    #: how far each partition of the audit and downstream topics was read (busguard.audit.reach), by topic and partition
    reads: list[PartitionRead] = msgspec.field(default_factory=list)

    # -- feeding ------------------------------------------------------------

    def note_reads(self, reads: list[PartitionRead]) -> None:
        """One read's reach into the partitions it read, merged with earlier runs'."""
        by = {(r.topic, r.partition): r for r in self.reads}
        for r in reads:
            by[(r.topic, r.partition)] = merge(by.get((r.topic, r.partition)), r)
        self.reads = [by[k] for k in sorted(by)]

    def add_decision(
        self, raw_value: bytes, decision: Decision, verified: bool, why: str = "", sealed_by: Sealer = "guard", at: At | None = None
    ) -> None:
        """One audit record holding a guard decision; `verified` = its seal
        verified (with `sealed_by`'s key) and is bound to these bytes
        (`verify_decision_record`). Only the guard decides."""
        sha = sha256_hex(raw_value)
        if verified and sealed_by != "guard":
            verified, why = False, f"a decision sealed with the {sealed_by}'s key; only the guard key seals decisions"
        if not verified:
            self._bad(sha, False, decision.decision_id, why or "the seal does not verify with the guard key")
            return
        prior = decision.prior
        fact = DecisionFact(
            decision_id=decision.decision_id,
            sha256=sha,
            outcome=decision.outcome,
            reason=decision.reason,
            source=decision.source,
            kind=decision.kind,
            task_id=decision.task_id,
            principal=decision.principal,
            nonce=decision.nonce,
            receipt_id=decision.receipt_id,
            supersedes=decision.supersedes,
            prior_decision_id=decision.prior_admission,
            prior_receipt_id=prior.receipt_id if prior is not None else None,
            decided_at=decision.decided_at,
            annotations=decision.annotations,
            at=at,
            last_offset=decision.last_offset,
        )
        _keep(self.decisions, self.decision_variants, decision.decision_id, sha, fact)

    def add_resolution(
        self,
        raw_value: bytes,
        resolution: Resolution,
        verified: bool,
        why: str = "",
        sealed_by: Sealer = "reconciler",
        at: At | None = None,
    ) -> None:
        """One audit record holding a reconciliation `Resolution`, sealed
        (when `verified`) with `sealed_by`'s key: whether the guard's may
        seal it is judged in `report()`, which knows its escalation."""
        sha = sha256_hex(raw_value)
        if not verified:
            self._bad(sha, False, resolution.resolution_id, why or "the seal does not verify with the reconciler's key")
            return
        r = resolution
        fact = ResolutionFact(
            resolution_id=r.resolution_id,
            sha256=sha,
            escalation_id=r.escalation_id,
            stage=r.stage,
            resolved_as=r.resolved_as,
            by=r.by,
            kind=r.kind,
            task_id=r.task_id,
            receipt_id=r.receipt_id,
            supersedes=r.supersedes,
            prior_decision_id=r.prior_decision_id,
            note=r.note,
            sealed_by=sealed_by,
            command=r.command,
            source=r.source,
            at=at,
        )
        _keep(self.resolutions, self.resolution_variants, r.resolution_id, sha, fact)

    def add_unreadable(self, raw_value: bytes | None, verified: bool, why: str) -> None:
        """An audit record that is not a decision or a resolution (or has no value)."""
        self._bad(sha256_hex(raw_value or b""), verified, None, why)

    def add_forwarded(
        self,
        topic: str,
        decision_id: str,
        attestation_ok: bool,
        decision_sha256: str | None = None,
        source: Coordinates | None = None,
        at: At | None = None,
    ) -> None:
        """One record on a downstream topic. `decision_id` is its
        `busguard-decision-id` header ('' when absent); `attestation_ok` that
        `verify_admitted` passed for it (and named that decision id);
        `decision_sha256` the attested SHA-256 of its audit record, if known;
        `source` the input record its attestation names; `at` its place."""
        seen = self.forwarded.setdefault(decision_id, {}).setdefault(topic, Downstream())
        if attestation_ok:
            seen.attested = True
            if source is not None and (seen.source is None or _coords(source) < _coords(seen.source)):
                seen.source = source
            if at is not None and (seen.at is None or at < seen.at):
                seen.at = at
            if decision_sha256 is not None and decision_sha256 not in seen.decision_sha256:
                seen.decision_sha256.append(decision_sha256)
                seen.decision_sha256.sort()
        else:
            seen.unattested = True

    def add_head(
        self,
        guard: str,
        chain: str,
        seq: int,
        sha: str,
        prev: str | None,
        size: int,
        sealed_at: int,
        leaf: int | None = None,
        proves: tuple[str, int, str] | None = None,
    ) -> HeadFact:
        """A tree head whose seal verified with the guard key, seen on a
        record; `leaf` is the index that record's (audit) proof put it at,
        `proves` its attestation's source topic, partition and decision-id
        prefix (a batch holds few partitions, so the list stays short)."""
        facts = self.chains.setdefault(f"{guard} {chain}", ChainFacts(guard=guard, chain=chain))
        found = facts.heads.setdefault(seq, [])
        head = next((h for h in found if h.sha256 == sha), None)
        if head is None:
            head = HeadFact(sha256=sha, prev=prev, size=size, sealed_at=sealed_at)
            found.append(head)
            found.sort(key=lambda h: h.sha256)
        if leaf is not None and 0 <= leaf < size:
            head.see(leaf)
        if proves is not None and proves not in head.proves:
            head.proves.append(proves)
            head.proves.sort()
        return head

    def add_bad_inclusion(self, raw_value: bytes | None, claimed: str | None, why: str) -> None:
        """A record under a verified head whose inclusion proof fails: not
        authentic, excluded from the lineage, reported as `bad_inclusion`."""
        sha = sha256_hex(raw_value or b"")
        self.bad_inclusions[sha] = why if claimed is None else f"{claimed}: {why}"

    def _bad(self, sha: str, sealed: bool, claimed: str | None, why: str) -> None:
        bad = self.bad_records.get(sha)
        if bad is None:
            bad = self.bad_records[sha] = BadRecord(sealed=sealed, claimed_id=claimed)
        if why not in bad.reasons:
            bad.reasons.append(why)
            bad.reasons.sort()
        if claimed is not None and (bad.claimed_id is None or claimed < bad.claimed_id):
            bad.claimed_id = claimed
        bad.sealed = bad.sealed or sealed


F = TypeVar("F", DecisionFact, ResolutionFact)


def _coords(c: Coordinates) -> tuple[str, int, int]:
    return (c.topic, c.partition, c.offset)


def _keep(facts: dict[str, F], variants: dict[str, list[str]], key: str, sha: str, fact: F) -> None:
    """Store one fact per id: identical copies count once; of different ones
    (a violation) the smallest SHA-256 is kept, whatever the arrival order."""
    current = facts.get(key)
    if current is None:
        facts[key] = fact
        return
    if current.sha256 == sha:
        if fact.at is not None and (current.at is None or fact.at < current.at):
            facts[key] = msgspec.structs.replace(current, at=fact.at)  # the first copy's place, whatever the arrival order
        return
    known = set(variants.get(key, [current.sha256]))
    known.add(sha)
    variants[key] = sorted(known)
    if sha < current.sha256:
        facts[key] = fact
