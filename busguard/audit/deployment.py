"""Which records in a log belong to the deployment being audited. Pure.

A seal proves which key wrote a record, not which deployment it wrote it
for: two deployments that seal with one guard key (a cloned staging stack)
write records that verify with either's key. What binds a record to its
deployment is what the guard derived from its own config:

* a decision's id is `decision_id(namespace, source)` (docs/protocol.md
  4.4), so it names the deployment's namespace and the input record it
  judged, and that input is on one of the deployment's input topics;
* a tree head is this deployment's when a record it proves is;
* a resolution was made by this deployment's reconciler, from its
  reconciliation topic, about one of its escalations;
* a downstream record's attestation names one of its decisions.

`bind` splits a ledger into the deployment's own facts (judged as before)
and findings for everything else (never counted), so a foreign record can
neither add tasks nor hide or break the proof of the deployment's own
chain. It runs when the report is made, with the current config, so a
checkpoint holds facts, not verdicts, like every other check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final, NamedTuple

import msgspec

from busguard.audit.findings import Violation
from busguard.protocol.records import Coordinates, decision_id

if TYPE_CHECKING:
    from busguard.audit.ledger import ChainFacts, DecisionFact, Downstream, HeadFact, Ledger, ResolutionFact

#: The decision-id prefix (16 hex of the namespace, topic and partition hash).
PREFIX_CHARS: Final = 16
_SHOWN: Final = 4


class Deployment(msgspec.Struct, frozen=True, kw_only=True):
    """What the auditor is told about the deployment whose log it reads
    (busguard.audit.run.new_ledger fills it from the config).

    `namespaces`: the decision-id namespace (`admission.namespace`, else
    `kafka.group_id`) and any it used before (`audit.former_namespaces`).
    `inputs`: the input topics of its routes, and former ones
    (`audit.former_inputs`). `reconciliation`: `topics.reconciliation`."""

    namespaces: list[str]
    inputs: list[str]
    reconciliation: str
    audit: str = ""  # topics.audit: where the records named in findings are

    def source_problem(self, did: str, source: Coordinates) -> str | None:
        """Why a decision id read from `source` is not this deployment's, or None."""
        if source.topic in self.inputs and 0 <= source.offset < 1 << 64:
            for ns in self.namespaces:  # the common case allocates nothing the collector tracks
                if did == decision_id(ns, source):
                    return None
        problems = [self._topic_problem(source.topic)]
        if not 0 <= source.offset < 1 << 64:
            return "; ".join(p for p in [*problems, f"its source offset {source.offset} is not a Kafka offset"] if p)
        expected = [decision_id(ns, source) for ns in self.namespaces]
        if did not in expected:
            want = " or ".join(f"{e} (namespace {ns!r})" for e, ns in zip(expected, self.namespaces, strict=True))
            problems.append(f"its id is not derived from this deployment's namespace: expected {want} for {_at(source)}")
        return "; ".join(p for p in problems if p) or None

    def prefix_problem(self, topic: str, partition: int, prefix: str) -> str | None:
        """`source_problem` for a record known only by a tree head's summary:
        its source topic, partition and decision-id prefix."""
        problems = [self._topic_problem(topic)]
        expected = [decision_id(ns, Coordinates(topic=topic, partition=partition, offset=0))[:PREFIX_CHARS] for ns in self.namespaces]
        if prefix not in expected:
            want = " or ".join(f"{e}… (namespace {ns!r})" for e, ns in zip(expected, self.namespaces, strict=True))
            problems.append(f"its decision ids begin {prefix}…, not {want}")
        return "; ".join(p for p in problems if p) or None

    def _topic_problem(self, topic: str) -> str:
        if topic in self.inputs:
            return ""
        return f"source topic {topic!r} is not an input topic of this deployment ({_listed(self.inputs)})"


def _listed(topics: Iterable[str]) -> str:
    shown = sorted(topics)
    return "inputs: " + ", ".join(shown) if shown else "it has no [[routes]]"


def _at(c: Coordinates) -> str:
    return f"{c.topic}/{c.partition}/{c.offset}"


def _where(dep: Deployment, topic: str | None, at: tuple[int, int] | None) -> str:
    if at is None:
        return f"on {topic or dep.audit}"
    return f"{topic or dep.audit}/{at[0]}/{at[1]}"


class Bound(NamedTuple):
    """A ledger's own part, and the findings about the rest."""

    own: Ledger
    findings: list[Violation]
    foreign_records: int  # distinct foreign audit records (decisions and resolutions)


def bind(led: Ledger, dep: Deployment) -> Bound:
    """Split `led` into the deployment's own facts and findings for the rest."""
    findings: list[Violation] = []

    def flag(code: str, detail: str, kind: str | None = None, task_id: str | None = None, did: str | None = None) -> None:
        findings.append(Violation(invariant=code, detail=detail, kind=kind, task_id=task_id, decision_id=did))

    decisions: dict[str, DecisionFact] = {}
    foreign_ids: set[str] = set()
    for did, f in led.decisions.items():
        why = dep.source_problem(did, f.source)
        if why is None:
            decisions[did] = f
            continue
        foreign_ids.add(did)
        flag(
            "foreign_decision",
            f"audit record {_where(dep, None, f.at)} holds decision {did} read from {_at(f.source)}, not this deployment's (excluded): {why}",
            f.kind,
            f.task_id,
            did,
        )
    resolutions: dict[str, ResolutionFact] = {}
    foreign_res: set[str] = set()
    for rid, r in led.resolutions.items():
        why = _resolution_problem(r, dep, foreign_ids)
        if why is None:
            resolutions[rid] = r
            continue
        foreign_res.add(rid)
        flag(
            "foreign_resolution",
            f"audit record {_where(dep, None, r.at)} holds resolution {rid} of escalation {r.escalation_id}, not this deployment's (excluded): {why}",
            r.kind,
            r.task_id,
            r.escalation_id,
        )
    forwarded: dict[str, dict[str, Downstream]] = {}
    for did, topics in led.forwarded.items():
        kept, alien = _split_forwards(did, topics, dep, foreign_ids)
        if kept:
            forwarded[did] = kept
        for topic, seen, why in alien:
            flag(
                "foreign_forward",
                f"downstream record {_where(dep, topic, seen.at)} carries decision {did}, not this deployment's (excluded): {why}",
                did=did,
            )
    chains = _own_chains(led.chains, dep, flag)
    own = msgspec.structs.replace(
        led,
        decisions=decisions,
        decision_variants=_without(led.decision_variants, foreign_ids),
        resolutions=resolutions,
        resolution_variants=_without(led.resolution_variants, foreign_res),
        forwarded=forwarded,
        chains=chains,
    )
    foreign_records = sum(len(led.decision_variants.get(i, [""])) for i in foreign_ids) + sum(
        len(led.resolution_variants.get(i, [""])) for i in foreign_res
    )
    return Bound(own=own, findings=findings, foreign_records=foreign_records)


def _without(variants: dict[str, list[str]], ids: set[str]) -> dict[str, list[str]]:
    return {k: v for k, v in variants.items() if k not in ids}


def _resolution_problem(r: ResolutionFact, dep: Deployment, foreign_ids: set[str]) -> str | None:
    problems = []
    if r.source is not None and r.source.topic != dep.reconciliation:
        problems.append(f"it was made from {_at(r.source)}, not from this deployment's reconciliation topic {dep.reconciliation!r}")
    if r.escalation_id in foreign_ids:
        problems.append(f"its escalation {r.escalation_id} is another deployment's decision")
    return "; ".join(problems) or None


def _split_forwards(
    did: str, topics: dict[str, Downstream], dep: Deployment, foreign_ids: set[str]
) -> tuple[dict[str, Downstream], list[tuple[str, Downstream, str]]]:
    """A downstream record is foreign when its attested decision is: the one
    in the log, else the decision id and source its attestation names."""
    own: dict[str, Downstream] = {}
    alien: list[tuple[str, Downstream, str]] = []
    for topic, seen in sorted(topics.items()):
        why: str | None = None
        if seen.attested:
            if did in foreign_ids:
                why = "its decision is another deployment's"
            elif seen.source is not None:
                why = dep.source_problem(did, seen.source)
                why = None if why is None else f"its attestation names {_at(seen.source)}: {why}"
        if why is None:
            own[topic] = seen
        else:
            alien.append((topic, seen, why))
            if seen.unattested:  # a copy with no valid attestation stays a violation of its own
                own[topic] = type(seen)(unattested=True)
    return own, alien


def _own_chains(chains: dict[str, ChainFacts], dep: Deployment, flag: Callable[..., None]) -> dict[str, ChainFacts]:
    """Each head is judged by the records it proves: a head none of whose
    records is this deployment's is another's, excluded before the chain
    checks, so it can neither fork, extend nor gap a chain of this one."""
    out: dict[str, ChainFacts] = {}
    for name, c in sorted(chains.items()):
        kept: dict[int, list[HeadFact]] = {}
        alien: list[tuple[int, str]] = []
        for seq, heads in sorted(c.heads.items()):
            for h in heads:
                problems = [dep.prefix_problem(t, p, x) for t, p, x in h.proves]
                if not h.proves or any(p is None for p in problems):
                    kept.setdefault(seq, []).append(h)
                else:
                    t, p, _ = h.proves[0]
                    alien.append((seq, f"it proves records read from {t}/{p}, not this deployment's: {problems[0]}"))
        if alien:
            seqs = ", ".join(str(s) for s, _ in alien[:_SHOWN]) + (", …" if len(alien) > _SHOWN else "")
            whole = "the whole chain" if not kept else f"{len(alien)} of its heads"
            flag(
                "foreign_chain",
                f"chain {c.chain} of {c.guard}: {whole} (seq {seqs}) belong to another deployment (excluded): {alien[0][1]}",
            )
        if kept:
            out[name] = msgspec.structs.replace(c, heads=kept)
    return out
