"""The auditor bound to its deployment (busguard.audit.deployment): two
deployments that seal with one guard key (and one reconciler key), A and
B, with B's audit records, resolutions and forwards appended to A's log.
Everything is built as the guard builds it: real admission
(tests/unit/harness.py) in each deployment's namespace and on its input
topic, batch-sealed on per-process chains, routed by
busguard.runtime.outputs, and fed through the reader's per-record checks."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import msgspec

from busguard.admission.types import AdmissionPolicy
from busguard.audit.checks import apply_audit, apply_forwarded, check_audit_record, check_forwarded
from busguard.audit.lineage import AuditReport, Ledger, judge
from busguard.audit.report import render_table
from busguard.audit.run import new_ledger
from busguard.config import AdmissionConfig, AuditConfig, Config, Route
from busguard.protocol.attestation import attest, decision_bytes
from busguard.protocol.records import Coordinates, Decision, decision_id
from busguard.protocol.signing import Signer
from busguard.protocol.treehead import ChainTip, seal_batch
from busguard.runtime.outputs import BatchProof, Sealed, outputs_for
from busguard.sdk.sender import SignedRecord

from .harness import Harness, agent, sender
from .test_audit_lineage import GUARD_ID, GUARD_PK, GUARD_SEED, RECONCILER_PK, TOPICS, Fwd, Record, codes, resolution_record, resolve

SIGNER = Signer(GUARD_SEED)
A_NS, A_IN, A_DOWN = "busguard", "agents.in", "agents.admitted"
B_NS, B_IN, B_DOWN, B_RECONCILE = "staging", "staging.in", "staging.admitted", "staging.reconcile"
FOREIGN = {"foreign_decision", "foreign_resolution", "foreign_forward", "foreign_chain"}
#: a log record: (topic, value, headers)
Logged = tuple[str, bytes | None, list[tuple[str, bytes]]]


def config(namespace: str = A_NS, inputs: tuple[str, ...] = (A_IN,), audit: AuditConfig | None = None) -> Config:
    routes = [Route(name="agents", inputs=list(inputs), downstream=A_DOWN)] if inputs else []
    return Config(routes=routes, topics=TOPICS, admission=AdmissionConfig(namespace=namespace), audit=audit or AuditConfig())


class Deployment:
    """One deployment's log: a handoff admitted, its exact duplicate, an
    ambiguous legacy re-send (escalated, then resolved by its reconciler)
    and an ack, in two batches on one chain; and the forwards downstream."""

    def __init__(self, tmp: Path, namespace: str, topic: str, downstream: str, reconciliation: str, prefix: str) -> None:
        h = Harness(policy=AdmissionPolicy(namespace=namespace))
        h.topic, h.offsets = topic, itertools.count()
        planner = sender("planner", session_path=tmp / f"{namespace}.session")
        legacy, executor = sender("executor"), sender("executor")
        first = planner.sign(kind="handoff", task_id=f"{prefix}task-1", receiver=agent("executor"), payload=b'{"op":"x"}')
        old1 = legacy.sign(kind="handoff", task_id=f"{prefix}legacy-1", receiver=agent("executor"), payload=b"{}")
        old2 = legacy.sign(kind="handoff", task_id=f"{prefix}legacy-1", receiver=agent("executor"), payload=b"{}")
        ack = executor.sign(kind="ack", task_id=f"{prefix}task-1", receiver=agent("planner"), payload=b"ok")
        signed = [first, first, old1, old2, ack]
        self.decisions = h.feed(*signed)
        assert [d.reason for d in self.decisions] == ["admitted", "exact_duplicate", "admitted", "ambiguous_retransmission", "admitted"]
        self.esc = self.decisions[3]
        self.audit: list[Record] = []
        self.downstream: list[Fwd] = []
        self._seal(signed, downstream, chain=f"{namespace}-chain", batches=[(0, 2), (2, 5)])
        res = resolve(self.esc, source=Coordinates(topic=reconciliation, partition=0, offset=0))
        self.resolution = resolution_record(res)

    def _seal(self, signed: list[SignedRecord], downstream: str, chain: str, batches: list[tuple[int, int]]) -> None:
        tip: ChainTip | None = None
        for lo, hi in batches:
            ds = self.decisions[lo:hi]
            bodies = [decision_bytes(d) for d in ds]
            atts = [attest(d, b, GUARD_ID) for d, b in zip(ds, bodies, strict=True)]
            tree = seal_batch(SIGNER, atts, guard=GUARD_ID, chain=chain, tip=tip, sealed_at=7)
            tip = ChainTip(0 if tip is None else tip.seq + 1, tree.head)
            for i, (d, b, a, rec) in enumerate(zip(ds, bodies, atts, signed[lo:hi], strict=True)):
                primary, audit = outputs_for(
                    Sealed(d, b, a, b"", BatchProof(tree.head, tree.seal, tree.inclusion(i))),
                    b"k",
                    rec.value,
                    rec.headers,
                    downstream,
                    TOPICS,
                    1 << 20,
                )
                assert audit.value is not None
                self.audit.append((audit.value, audit.headers))
                if d.outcome == "forward":
                    self.downstream.append((primary.topic, primary.value, primary.headers))

    def log(self, audit_topic: str = TOPICS.audit, downstream: str | None = None) -> list[Logged]:
        """Its records as they sit in a log (the forwards on `downstream`, if given, else where they were sent)."""
        out: list[Logged] = [(audit_topic, v, h) for v, h in [*self.audit, self.resolution]]
        return out + [(downstream or t, v, h) for t, v, h in self.downstream]


def feed(led: Ledger, log: list[Logged], skip: int = 0) -> Ledger:
    """As busguard.audit.reader.read_log feeds it: each record at its offset
    in its topic, from the `skip`th on (a resumed read)."""
    offsets: dict[str, itertools.count[int]] = {}
    placed = [(topic, value, headers, (0, next(offsets.setdefault(topic, itertools.count())))) for topic, value, headers in log]
    for topic, value, headers, at in placed[skip:]:
        if topic == TOPICS.audit:
            apply_audit(led, check_audit_record(value, headers, GUARD_PK, RECONCILER_PK), at)
        else:
            apply_forwarded(led, check_forwarded(topic, value, headers, GUARD_PK), at)
    return led


def report(log: list[Logged], cfg: Config | None = None) -> AuditReport:
    return judge(feed(new_ledger(cfg or config()), log))


def counts(r: AuditReport) -> tuple[object, ...]:
    """Everything a report counts, except records and violations."""
    s = r.summary
    return (s.decisions, s.resolutions, s.tasks, s.forwarded, s.duplicates, s.escalations, s.pending, r.tasks, r.pending, r.calls, r.chains)


def two(tmp: Path) -> tuple[Deployment, Deployment]:
    return Deployment(tmp, A_NS, A_IN, A_DOWN, TOPICS.reconciliation, ""), Deployment(tmp, B_NS, B_IN, B_DOWN, B_RECONCILE, "b-")


def test_another_deployments_records_appended_with_the_same_keys_are_findings_and_not_counted(tmp_path: Path) -> None:
    a, b = two(tmp_path)
    alone = report(a.log())
    assert alone.ok, alone.violations
    assert (alone.summary.tasks, alone.summary.resolutions, len(alone.chains)) == (3, 1, 1)
    # B's audit records, resolution and forwards copied unchanged into A's topics
    mixed = report([*a.log(), *b.log(downstream=A_DOWN)])
    assert not mixed.ok
    assert set(codes(mixed)) == FOREIGN, mixed.violations
    assert counts(mixed) == counts(alone)  # not one of B's tasks, escalations, forwards or heads counted
    assert mixed.summary.foreign == len(b.audit) + 1 == mixed.summary.records - alone.summary.records
    assert not any(t.task_id.startswith("b-") for t in mixed.tasks)
    per_code = {c: codes(mixed).count(c) for c in FOREIGN}
    distinct_b = len({d.decision_id for d in b.decisions})
    assert per_code == {"foreign_decision": distinct_b, "foreign_resolution": 1, "foreign_forward": len(b.downstream), "foreign_chain": 1}
    assert f"{mixed.summary.foreign} record(s) of another deployment excluded" in render_table(mixed)
    # B's own audit of the same records is clean: the binding is per deployment
    assert report(b.log(), _b_config()).ok


def _b_config() -> Config:
    from busguard.config import TopicsConfig

    topics = TopicsConfig(audit=TOPICS.audit, reconciliation=B_RECONCILE, dead_letter="b.dlq", replies="b.replies")
    return Config(routes=[Route(name="agents", inputs=[B_IN], downstream=B_DOWN)], topics=topics, admission=AdmissionConfig(namespace=B_NS))


def test_each_finding_names_the_records_place_what_it_holds_and_what_was_expected(tmp_path: Path) -> None:
    a, b = two(tmp_path)
    mixed = report([*a.log(), *b.log(downstream=A_DOWN)])
    first_b = b.decisions[0]
    at = len(a.audit) + 1  # A's decisions and resolution come first on the audit topic
    v = next(v for v in mixed.violations if v.invariant == "foreign_decision" and v.decision_id == first_b.decision_id)
    assert f"audit record {TOPICS.audit}/0/{at} holds decision {first_b.decision_id} read from {B_IN}/0/0" in v.detail
    assert f"source topic '{B_IN}' is not an input topic of this deployment (inputs: {A_IN})" in v.detail
    assert f"expected {decision_id(A_NS, first_b.source)} (namespace '{A_NS}') for {B_IN}/0/0" in v.detail
    assert (v.kind, v.task_id) == ("handoff", "b-task-1")
    (res,) = [v for v in mixed.violations if v.invariant == "foreign_resolution"]
    assert f"it was made from {B_RECONCILE}/0/0, not from this deployment's reconciliation topic '{TOPICS.reconciliation}'" in res.detail
    assert f"its escalation {b.esc.decision_id} is another deployment's decision" in res.detail
    fwd = next(v for v in mixed.violations if v.invariant == "foreign_forward")
    assert f"downstream record {A_DOWN}/0/" in fwd.detail and "its decision is another deployment's" in fwd.detail
    (chain,) = [v for v in mixed.violations if v.invariant == "foreign_chain"]
    assert f"chain {B_NS}-chain of {GUARD_ID}: the whole chain (seq 0, 1)" in chain.detail and f"read from {B_IN}/0" in chain.detail


def test_the_verdict_does_not_depend_on_order_copies_or_a_checkpoint(tmp_path: Path) -> None:
    a, b = two(tmp_path)
    log = [*a.log(), *b.log(downstream=A_DOWN)]
    expected = report(log)
    for seed in range(3):
        shuffled = log + log[: 3 + seed]  # re-emissions and copies count once
        random.Random(seed).shuffle(shuffled)
        got = report(shuffled)
        assert (got.ok, counts(got), sorted(codes(got))) == (expected.ok, counts(expected), sorted(codes(expected)))
    half = feed(new_ledger(config()), log[: len(log) // 2])
    resumed = msgspec.json.decode(msgspec.json.encode(half), type=Ledger)
    assert resumed.deployment == half.deployment
    assert judge(feed(resumed, log, skip=len(log) // 2)) == expected


def test_part_of_a_foreign_chain_neither_breaks_nor_extends_the_own_chain(tmp_path: Path) -> None:
    a, b = two(tmp_path)
    alone = report(a.log())
    # one of B's records out of its second batch: its head would be a gap
    # and leaves missing in a chain of A's
    partial = report([*a.log(), (TOPICS.audit, *b.audit[3])])
    assert sorted(codes(partial)) == ["foreign_chain", "foreign_decision"]
    assert counts(partial) == counts(alone)
    # B's forwards alone on A's downstream topic: no audit record, no
    # missing leaves, no "forwarded without decision" for A
    only_fwd = report([*a.log(), *[(A_DOWN, v, h) for _, v, h in b.downstream]])
    assert sorted(set(codes(only_fwd))) == ["foreign_chain", "foreign_forward"]
    assert counts(only_fwd) == counts(alone)
    # and A's own chain is still checked: removing one of A's records is found
    assert "leaf_missing" in codes(report([*a.log()[1:], *b.log(downstream=A_DOWN)]))


def test_the_namespace_and_the_source_topic_are_each_checked(tmp_path: Path) -> None:
    a = Deployment(tmp_path, A_NS, A_IN, A_DOWN, TOPICS.reconciliation, "")
    same_ns = Deployment(tmp_path / "x", A_NS, B_IN, B_DOWN, TOPICS.reconciliation, "x-")  # another input topic
    same_topic = Deployment(tmp_path / "y", B_NS, A_IN, A_DOWN, TOPICS.reconciliation, "y-")  # another namespace
    for other, expect, absent in (
        (same_ns, "is not an input topic", "is not derived"),
        (same_topic, "is not derived from this deployment's namespace", "is not an input topic"),
    ):
        r = report([*a.log(), *other.log()])
        found = [v for v in r.violations if v.invariant == "foreign_decision"]
        assert len(found) == len({d.decision_id for d in other.decisions}) and all(
            expect in v.detail and absent not in v.detail for v in found
        )
        # its resolution comes from A's reconciliation topic, but settles a foreign escalation
        (res,) = [v for v in r.violations if v.invariant == "foreign_resolution"]
        assert "another deployment's decision" in res.detail and "was made from" not in res.detail
        assert counts(r) == counts(report(a.log()))


def test_a_resolution_from_another_reconciliation_topic_is_foreign_even_for_an_own_escalation(tmp_path: Path) -> None:
    a = Deployment(tmp_path, A_NS, A_IN, A_DOWN, TOPICS.reconciliation, "")
    elsewhere = resolution_record(resolve(a.esc, source=Coordinates(topic=B_RECONCILE, partition=0, offset=4)))
    r = report([*[x for x in a.log() if x[1] != a.resolution[0]], (TOPICS.audit, *elsewhere)])
    assert codes(r) == ["foreign_resolution"]
    assert r.summary.resolutions == 0 and [p.escalation_id for p in r.pending] == [a.esc.decision_id]  # still pending for A


def test_former_namespaces_and_inputs_keep_a_deployments_history_its_own(tmp_path: Path) -> None:
    a, b = two(tmp_path)
    log = [*a.log(), *b.log(downstream=A_DOWN)]
    assert "foreign_decision" in codes(report(log, config(audit=AuditConfig(former_namespaces=[B_NS]))))  # topic still foreign
    assert "foreign_decision" in codes(report(log, config(audit=AuditConfig(former_inputs=[B_IN]))))  # namespace still foreign
    both = report(
        [*a.log(), *[x for x in b.log(downstream=A_DOWN) if x[1] != b.resolution[0]]],
        config(audit=AuditConfig(former_namespaces=[B_NS], former_inputs=[B_IN])),
    )
    assert both.ok, both.violations
    assert both.summary.tasks == 6 and len(both.chains) == 2


def test_an_auditor_without_routes_owns_no_decision(tmp_path: Path) -> None:
    a = Deployment(tmp_path, A_NS, A_IN, A_DOWN, TOPICS.reconciliation, "")
    r = report(a.log(), config(inputs=()))
    assert not r.ok and r.summary.tasks == 0 and r.chains == []
    assert all("it has no [[routes]]" in v.detail for v in r.violations if v.invariant == "foreign_decision")


def test_the_namespace_defaults_to_the_group_id_as_the_guard_derives_it() -> None:
    cfg = msgspec.convert({"kafka": {"group_id": "guards-a"}, "routes": [{"name": "r", "inputs": [A_IN], "downstream": A_DOWN}]}, Config)
    dep = new_ledger(cfg).deployment
    assert dep is not None and dep.namespaces == ["guards-a"] == [cfg.policy().namespace] and dep.inputs == [A_IN]
    own = Decision(
        decision_id=decision_id("guards-a", Coordinates(topic=A_IN, partition=2, offset=9)),
        outcome="reject",
        reason="bad_signature",
        source=Coordinates(topic=A_IN, partition=2, offset=9),
        decided_at=1,
    )
    assert dep.source_problem(own.decision_id, own.source) is None
    assert dep.source_problem(decision_id("busguard", own.source), own.source) is not None


def test_a_sealed_decision_no_guard_could_derive_is_a_finding_not_a_crash() -> None:
    """Ids and coordinates are recomputed from what a record says: whatever
    it says (an offset out of range, an id of any length), the result is a
    finding."""
    from .test_audit_lineage import audit_record

    weird = [
        Decision(
            decision_id="x", outcome="reject", reason="bad_signature", source=Coordinates(topic=A_IN, partition=0, offset=-1), decided_at=1
        ),
        Decision(
            decision_id="",
            outcome="reject",
            reason="bad_signature",
            source=Coordinates(topic=A_IN, partition=-3, offset=1 << 70),
            decided_at=1,
        ),
        Decision(
            decision_id="y" * 40,
            outcome="reject",
            reason="bad_signature",
            source=Coordinates(topic=A_IN, partition=1, offset=5),
            decided_at=1,
        ),
    ]
    r = report([(TOPICS.audit, *audit_record(d)) for d in weird])
    assert codes(r) == ["foreign_decision"] * 3 and r.summary.decisions == 0
    assert sum("is not a Kafka offset" in v.detail for v in r.violations) == 2


def test_an_unattested_copy_next_to_a_foreign_forward_is_still_reported(tmp_path: Path) -> None:
    a, b = two(tmp_path)
    _, value, headers = b.downstream[0]
    stripped = [(k, v) for k, v in headers if k != "busguard-attestation"]
    r = report([*a.log(), (A_DOWN, value, headers), (A_DOWN, value, stripped)])
    assert sorted(set(codes(r))) == ["foreign_chain", "foreign_forward", "forwarded_unattested"]
    assert counts(r) == counts(report(a.log()))
