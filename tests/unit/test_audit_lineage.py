"""The auditor's pure core: every invariant both ways, re-emissions, forgeries,
checkpoints, and order/duplication independence. No Kafka: decisions come from
real admission (tests/unit/harness.py), are sealed and routed exactly as the
guard does (busguard.runtime.outputs), and enter the Ledger through the same
per-record checks the reader uses."""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import random
import tempfile
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from busguard.audit.checks import apply_audit, check_audit_record, check_forwarded
from busguard.audit.lineage import INVARIANTS, AuditReport, Ledger, judge
from busguard.audit.report import StderrProgress, render_json, render_pending, render_table
from busguard.audit.run import Checkpoint, load_checkpoint, new_ledger, save_checkpoint
from busguard.commands.audit import add_commands
from busguard.config import Config, Route, TopicsConfig, load_config
from busguard.errors import ConfigError
from busguard.policies import KINDS
from busguard.protocol.attestation import attest, attest_record, decision_bytes, seal
from busguard.protocol.envelope import b64url_encode
from busguard.protocol.identity import agent_id_for_key, multikey_encode
from busguard.protocol.records import COMMAND_CONTEXT, Coordinates, Decision, Resolution, ResolveCommand, SignedCommand, resolution_id
from busguard.protocol.signing import Signer, public_key_from_seed, sign
from busguard.runtime.outputs import Sealed, outputs_for
from busguard.sdk.sender import SignedRecord

from .harness import Harness, agent, sender

GUARD_SEED = hashlib.sha256(b"audit-test-guard").digest()
GUARD_PK = public_key_from_seed(GUARD_SEED)
GUARD_ID = agent_id_for_key(GUARD_PK)
OTHER_SEED = hashlib.sha256(b"audit-test-impostor").digest()
RECONCILER_SEED = hashlib.sha256(b"audit-test-reconciler").digest()
RECONCILER_PK = public_key_from_seed(RECONCILER_SEED)
TOPICS = TopicsConfig(audit="t.audit", reconciliation="t.reconcile", dead_letter="t.dlq", replies="t.replies")
INPUT, DOWNSTREAM = "agents.in", "agents.admitted"
ROUTES = {INPUT: DOWNSTREAM}

Record = tuple[bytes, list[tuple[str, bytes]]]  # an audit record: value, headers
Fwd = tuple[str, bytes | None, list[tuple[str, bytes]]]  # a downstream record: topic, value, headers


# -- building real, sealed records -----------------------------------------------


def sealed_decision(d: Decision, seed: bytes = GUARD_SEED) -> Sealed:
    body = decision_bytes(d)
    att = attest(d, body, agent_id_for_key(public_key_from_seed(seed)))
    return Sealed(d, body, att, seal(Signer(seed), att))


def audit_record(d: Decision, seed: bytes = GUARD_SEED) -> Record:
    s = sealed_decision(d, seed)
    _, audit = outputs_for(s, b"k", b"", [], DOWNSTREAM, TOPICS, 1 << 20)
    assert audit.value is not None
    return audit.value, audit.headers


def forwarded(d: Decision, rec: SignedRecord, topic: str = DOWNSTREAM) -> Fwd:
    """The downstream record the guard emits for `d` (for a non-forward
    decision: what a buggy guard would put downstream with its proof)."""
    s = sealed_decision(d)
    if d.outcome != "forward":
        proof = [("busguard-decision-id", d.decision_id.encode()), ("busguard-attestation", s.attestation), ("busguard-seal", s.seal)]
        return topic, rec.value, [*rec.headers, *proof]
    primary, _ = outputs_for(s, b"k", rec.value, rec.headers, topic, TOPICS, 1 << 20)
    assert primary.topic == topic
    return primary.topic, primary.value, primary.headers


def resolution_record(r: Resolution, seed: bytes = RECONCILER_SEED) -> Record:
    """Sealed as the reconciler seals it: with its own key."""
    body = msgspec.json.encode(r)
    att = attest_record(
        agent_id_for_key(public_key_from_seed(seed)),
        r.resolution_id,
        "resolved" if r.stage == "final" else "held",
        r.resolved_as or "held",
        r.receipt_id,
        r.source,
        r.resolved_at,
        body,
    )
    return body, [
        ("busguard-decision-id", r.resolution_id.encode()),
        ("busguard-attestation", att),
        ("busguard-seal", seal(Signer(seed), att)),
    ]


def resolve(esc: Decision, stage: str = "final", resolved_as: str | None = "retransmission", **kw: object) -> Resolution:
    fields: dict[str, object] = dict(
        resolution_id=resolution_id(esc.decision_id, stage),  # type: ignore[arg-type]
        escalation_id=esc.decision_id,
        stage=stage,
        resolved_as=resolved_as if stage == "final" else None,
        by="policy",
        kind=esc.kind,
        task_id=esc.task_id,
        receipt_id=esc.receipt_id,
        supersedes=esc.supersedes,
        prior_decision_id=esc.prior.decision_id if esc.prior else None,
        source=Coordinates(topic="t.reconcile", partition=0, offset=3),
        resolved_at=1_000,
    )
    fields.update(kw)
    return Resolution(**fields)  # type: ignore[arg-type]


def ledger(scope: str = "global") -> Ledger:
    return Ledger(nonce_scope=scope, routes=dict(ROUTES))  # type: ignore[arg-type]


def feed(led: Ledger, *records: Record) -> Ledger:
    for value, headers in records:
        apply_audit(led, check_audit_record(value, headers, GUARD_PK, RECONCILER_PK))
    return led


def feed_fwd(led: Ledger, *records: Fwd) -> Ledger:
    for topic, value, headers in records:
        c = check_forwarded(topic, value, headers, GUARD_PK)
        led.add_forwarded(c.topic, c.decision_id, c.ok, c.decision_sha256)
    return led


def codes(report: AuditReport) -> list[str]:
    """The report's violation codes, but `offsets_undecided`: these tests
    feed hand-picked records of a log (decisions at offsets 0 and 100 of one
    partition, say), whose gaps are real but not what they test
    (tests/unit/test_audit_coverage.py tests coverage)."""
    return [v.invariant for v in report.violations if v.invariant != "offsets_undecided"]


def harness(start: int = 0, **kw: object) -> Harness:
    h = Harness(**kw)  # type: ignore[arg-type]
    h.topic = INPUT
    h.offsets = itertools.count(start)
    return h


def handoff(s, task: str = "task-1", payload: bytes = b'{"op":"x"}', **kw):  # type: ignore[no-untyped-def]
    return s.sign(kind="handoff", task_id=task, receiver=agent("executor"), payload=payload, **kw)


class World:
    """A clean log: a handoff admitted, its exact duplicate, a proven
    retransmission, an ambiguous legacy re-send (escalated), a forged
    receipt (rejected), and an ack admitted; plus their downstream copies."""

    def __init__(self, tmp: Path) -> None:
        h = harness()
        planner = sender("planner", session_path=tmp / "planner.session")
        legacy = sender("executor")
        self.first = handoff(planner)
        self.retx = handoff(planner)
        self.legacy1 = handoff(legacy, task="legacy-1")
        self.legacy2 = handoff(legacy, task="legacy-1")
        self.ack = sender("executor").sign(kind="ack", task_id="task-1", receiver=agent("planner"), payload=b"ok")
        forged = sender("executor").sign_receipt(handoff(planner, task="task-2").receipt, b'{"op":"x"}')
        self.decisions = h.feed(self.first, self.first, self.retx, self.legacy1, self.legacy2, forged, self.ack)
        reasons = [d.reason for d in self.decisions]
        assert reasons == [
            "admitted",
            "exact_duplicate",
            "retransmission",
            "admitted",
            "ambiguous_retransmission",
            "bad_signature",
            "admitted",
        ]
        self.fwd, self.dup, self.retx_d, self.legacy_fwd, self.esc, self.bad, self.ack_d = self.decisions
        self.audit = [audit_record(d) for d in self.decisions]
        self.downstream = [forwarded(self.fwd, self.first), forwarded(self.legacy_fwd, self.legacy1), forwarded(self.ack_d, self.ack)]

    def ledger(self, scope: str = "global") -> Ledger:
        return feed_fwd(feed(ledger(scope), *self.audit), *self.downstream)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


# -- a clean log --------------------------------------------------------------------


def test_clean_log_proves_every_invariant_and_lists_the_pending_escalation(world: World) -> None:
    report = judge(world.ledger())
    assert report.ok, report.violations
    s = report.summary
    assert (s.records, s.decisions, s.resolutions, s.forwarded, s.duplicates, s.escalations, s.pending, s.violations) == (
        7,
        7,
        0,
        3,
        2,
        1,
        1,
        0,
    )
    tasks = {(t.kind, t.task_id): t for t in report.tasks}
    assert set(tasks) == {("handoff", "task-1"), ("handoff", "legacy-1"), ("handoff", "task-2"), ("ack", "task-1")}
    t1 = tasks[("handoff", "task-1")]
    assert (t1.witness, t1.witness_receipt_id, t1.forwards, t1.delivered, t1.duplicates, t1.rejects) == (
        world.fwd.decision_id,
        world.first.receipt_id,
        1,
        True,
        2,
        0,
    )
    assert [(x.decision_id, x.reason, x.supersedes) for x in t1.supersedes] == [
        (world.retx_d.decision_id, "retransmission", world.first.receipt_id)
    ]
    leg = tasks[("handoff", "legacy-1")]
    (e,) = leg.escalations
    assert (e.escalation_id, e.status, e.receipt_id, e.supersedes, e.prior_receipt_id) == (
        world.esc.decision_id,
        "pending",
        world.legacy2.receipt_id,
        world.legacy1.receipt_id,
        world.legacy1.receipt_id,
    )
    assert tasks[("handoff", "task-2")].witness is None and tasks[("handoff", "task-2")].rejects == 1  # only rejects: no violation
    (p,) = report.pending
    assert (p.escalation_id, p.task_id, p.reason, p.receipt_id, p.prior_receipt_id, p.supersedes, p.held) == (
        world.esc.decision_id, "legacy-1", "ambiguous_retransmission", world.legacy2.receipt_id, world.legacy1.receipt_id, world.legacy1.receipt_id, None,
    )  # fmt: skip


def test_a_witness_missing_downstream_is_shown_but_is_not_a_violation(world: World) -> None:
    report = judge(feed(ledger(), *world.audit))
    assert report.ok
    assert not any(t.delivered for t in report.tasks)


# -- invariant 1: one witness per task ------------------------------------------------


def test_two_admissions_of_one_task_are_a_violation(tmp_path: Path) -> None:
    # two guards with separate state (or a lost store) each admit the task
    legacy = sender("planner")
    a, b = handoff(legacy), handoff(legacy)
    first, second = harness(0).one(a), harness(100).one(b)
    assert first.outcome == second.outcome == "forward"
    report = judge(feed(ledger(), audit_record(first), audit_record(second)))
    assert codes(report) == ["multiple_forwards"]
    v = report.violations[0]
    assert (v.kind, v.task_id, v.decision_id) == ("handoff", "task-1", second.decision_id)
    assert report.tasks[0].forwards == 2 and report.tasks[0].witness == first.decision_id


def test_at_most_one_ack_but_an_ack_without_witness_is_allowed(world: World) -> None:
    dup_ack = harness(0).feed(world.ack, world.ack)[1]
    assert dup_ack.reason == "exact_duplicate"
    assert judge(feed(ledger(), audit_record(dup_ack))).ok  # "at most one" for acks
    second_ack = harness(100).one(sender("executor").sign(kind="ack", task_id="task-1", receiver=agent("planner"), payload=b"ok"))
    assert codes(judge(feed(ledger(), audit_record(world.ack_d), audit_record(second_ack)))) == ["multiple_forwards"]


def test_a_handoff_with_decisions_but_no_witness_is_a_violation(world: World) -> None:
    report = judge(feed(ledger(), audit_record(world.dup), audit_record(world.esc)))
    assert [(v.invariant, v.task_id) for v in report.violations if v.invariant != "offsets_undecided"] == [
        ("missing_witness", "legacy-1"),
        ("missing_witness", "task-1"),
    ]


def test_missing_witness_for_each_task_without_one(world: World) -> None:
    report = judge(feed(ledger(), audit_record(world.dup), audit_record(world.esc), audit_record(world.legacy_fwd)))
    assert [(v.invariant, v.task_id) for v in report.violations if v.invariant != "offsets_undecided"] == [("missing_witness", "task-1")]


def test_a_duplicate_naming_another_prior_is_a_violation(world: World) -> None:
    assert world.dup.prior is not None
    lying = msgspec.structs.replace(world.dup, prior=msgspec.structs.replace(world.dup.prior, decision_id="f" * 32))
    report = judge(feed(ledger(), audit_record(world.fwd), audit_record(lying)))
    assert codes(report) == ["prior_mismatch"] and report.violations[0].decision_id == world.dup.decision_id


# -- invariant 2: escalations resolved or pending -----------------------------------------


def test_escalation_resolved_held_and_pending(world: World) -> None:
    held = resolve(world.esc, "held")
    report = judge(feed(world.ledger(), resolution_record(held)))
    assert report.ok and report.summary.pending == 1 and report.pending[0].held == held.resolution_id
    (e,) = next(t for t in report.tasks if t.task_id == "legacy-1").escalations
    assert (e.status, e.resolution_id) == ("held", held.resolution_id)

    final = resolve(world.esc)
    report = judge(feed(world.ledger(), resolution_record(held), resolution_record(final), resolution_record(final)))
    assert report.ok and report.pending == [] and report.summary.resolutions == 2
    (e,) = next(t for t in report.tasks if t.task_id == "legacy-1").escalations
    assert (e.status, e.resolution_id, e.resolved_as, e.by) == ("resolved", final.resolution_id, "retransmission", "policy")


def test_a_resolution_of_an_unknown_escalation_is_a_violation(world: World) -> None:
    ghost = resolve(world.esc, escalation_id="e" * 32, resolution_id=resolution_id("e" * 32, "final"))
    assert codes(judge(feed(world.ledger(), resolution_record(ghost)))) == ["unknown_escalation"]
    of_a_forward = resolve(world.fwd, resolution_id=resolution_id(world.fwd.decision_id, "final"))
    report = judge(feed(world.ledger(), resolution_record(of_a_forward)))
    assert codes(report) == ["unknown_escalation"] and "forward decision" in report.violations[0].detail


def test_two_final_resolution_ids_for_one_escalation_are_violations(world: World) -> None:
    right = resolve(world.esc)
    other = resolve(world.esc, resolution_id="d" * 32, resolved_as="reject")
    report = judge(feed(world.ledger(), resolution_record(right), resolution_record(other)))
    assert sorted(codes(report)) == ["bad_resolution_id", "duplicate_resolution"]
    assert all(v.decision_id == world.esc.decision_id for v in report.violations)


def test_two_different_final_records_under_one_id_are_a_duplicate_resolution(world: World) -> None:
    a = resolve(world.esc)
    b = resolve(world.esc, resolved_as="replay")
    report = judge(feed(world.ledger(), resolution_record(a), resolution_record(b)))
    assert codes(report) == ["duplicate_resolution"]
    assert report.summary.records == 9  # 7 decisions + two different resolution records


def test_conflicting_held_re_emission(world: World) -> None:
    a, b = resolve(world.esc, "held"), resolve(world.esc, "held", note="again")
    assert codes(judge(feed(world.ledger(), resolution_record(a), resolution_record(b)))) == ["conflicting_reemission"]


def test_a_resolution_about_another_task_is_a_violation(world: World) -> None:
    wrong = resolve(world.esc, task_id="someone-else")
    assert codes(judge(feed(world.ledger(), resolution_record(wrong)))) == ["resolution_mismatch"]


# -- invariant 3: every forwarded record has a forward decision ------------------------------


def test_forwarded_record_without_its_decision(world: World) -> None:
    led = feed(ledger(), *[r for r, d in zip(world.audit, world.decisions, strict=True) if d is not world.fwd])
    report = judge(feed_fwd(led, *world.downstream))
    # (the task's duplicate and retransmission now lack their witness, too)
    assert codes(report) == ["missing_witness", "forwarded_without_decision"] and report.violations[1].decision_id == world.fwd.decision_id


def test_tampered_or_unsealed_downstream_records_are_violations(world: World) -> None:
    topic, value, headers = world.downstream[0]
    tampered = (topic, b'{"op":"rm -rf"}', headers)
    unsealed = (topic, value, [h for h in headers if h[0] != "busguard-seal"])
    for bad in (tampered, unsealed):
        report = judge(feed_fwd(world.ledger(), bad))
        assert codes(report) == ["forwarded_unattested"] and report.violations[0].decision_id == world.fwd.decision_id


def test_a_forwarded_copy_of_a_non_forward_decision_is_refused(world: World) -> None:
    # a guard bug: the duplicate's attestation says `duplicate`, so verify_admitted refuses it
    report = judge(feed_fwd(world.ledger(), forwarded(world.dup, world.first)))
    assert codes(report) == ["forwarded_unattested"]
    led = world.ledger()
    led.add_forwarded(DOWNSTREAM, world.dup.decision_id, True)
    assert codes(judge(led)) == ["forwarded_without_decision"]


def test_forwarded_on_the_wrong_route_and_bound_to_another_record(world: World) -> None:
    report = judge(feed_fwd(world.ledger(), forwarded(world.fwd, world.first, topic="other.admitted")))
    assert codes(report) == ["forwarded_wrong_topic"]
    led = world.ledger()
    led.add_forwarded(DOWNSTREAM, world.fwd.decision_id, True, "0" * 64)
    assert codes(judge(led)) == ["forwarded_mismatch"]


def test_a_downstream_record_without_decision_id_header(world: World) -> None:
    topic, value, headers = world.downstream[0]
    report = judge(feed_fwd(world.ledger(), (topic, value, [h for h in headers if h[0] != "busguard-decision-id"])))
    assert codes(report) == ["forwarded_unattested"]


def test_the_known_seal_shortcut_agrees_with_verify_admitted(world: World) -> None:
    """A seal verified on the audit record is not verified again downstream;
    the remaining checks must judge exactly as verify_admitted does."""
    from busguard.audit.checks import SealCache, seal_digest
    from busguard.protocol.attestation import AttestationError, verify_admitted

    seals = SealCache(capacity=2)
    for value, headers in world.audit:
        checked = check_audit_record(value, headers, GUARD_PK)
        assert checked.seal is not None and checked.seal == seal_digest(headers)
        seals.add(checked.seal)
    assert len(seals._seen) == 2  # bounded: the oldest were forgotten
    seals = SealCache()
    for value, headers in world.audit:
        seals.add(check_audit_record(value, headers, GUARD_PK).seal)  # type: ignore[arg-type]
    topic, fwd_value, headers = world.downstream[0]
    value = fwd_value or b""
    other_receipt = dict(world.downstream[1][2])["busguard-receipt"]
    variants: list[tuple[bytes | None, list[tuple[str, bytes]]]] = [
        (value, headers),
        (b"tampered", headers),
        (None, headers),
        (value, [(k, other_receipt if k == "busguard-receipt" else v) for k, v in headers]),
        (value, [h for h in headers if h[0] != "busguard-receipt"]),
        (value, [*headers, ("busguard-receipt", other_receipt)]),
        (value, [(k, b"{not json" if k == "busguard-receipt" else v) for k, v in headers]),
        (value, [*headers, headers[-1]]),  # a second seal header
        forwarded(world.dup, world.first)[1:],  # outcome duplicate
    ]
    for v, h in variants:
        try:
            expected = verify_admitted(v if v is not None else b"", h, GUARD_PK, None, any_receiver=True).decision_sha256
        except AttestationError:
            expected = None
        got = check_forwarded(topic, v, h, GUARD_PK, seals)
        assert got.decision_sha256 == expected and got.ok == (expected is not None)
        assert check_forwarded(topic, v, h, GUARD_PK) == got


# -- invariant 4: no nonce admitted twice ----------------------------------------------------


def nonce_pair(tmp: Path) -> tuple[Decision, Decision]:
    """Two different principals admit (in two stores) receipts with one nonce."""
    a = harness(0).one(handoff(sender("planner"), task="n-1", nonce="shared-nonce-0123456789"))
    b = harness(100).one(handoff(sender("executor"), task="n-2", nonce="shared-nonce-0123456789"))
    assert a.outcome == b.outcome == "forward" and a.principal != b.principal
    return a, b


def test_nonce_scope_global_vs_principal(tmp_path: Path) -> None:
    a, b = nonce_pair(tmp_path)
    report = judge(feed(ledger("global"), audit_record(a), audit_record(b)))
    assert codes(report) == ["nonce_reused"] and "globally" in report.violations[0].detail
    assert not codes(judge(feed(ledger("principal"), audit_record(a), audit_record(b))))


def test_nonce_reuse_by_one_principal_violates_either_scope(tmp_path: Path) -> None:
    s = sender("planner")
    a = harness(0).one(handoff(s, task="n-1", nonce="same-nonce-0123456789ab"))
    b = harness(100).one(handoff(s, task="n-2", nonce="same-nonce-0123456789ab"))
    for scope in ("global", "principal"):
        assert codes(judge(feed(ledger(scope), audit_record(a), audit_record(b)))) == ["nonce_reused"]


def test_nonces_of_non_forward_decisions_do_not_count(world: World) -> None:
    # the exact duplicate carries the witness's nonce: not a second admission
    assert world.dup.nonce == world.fwd.nonce
    assert judge(world.ledger()).ok


# -- invariant 5: the records themselves verify --------------------------------------------------


def test_a_forged_audit_record_is_a_violation_and_excluded(world: World) -> None:
    legacy = sender("planner")
    second = harness(100).one(handoff(legacy))  # a second "admission" of task-1 ...
    forged = audit_record(second, seed=OTHER_SEED)  # ... sealed by someone else
    report = judge(feed(world.ledger(), forged))
    assert codes(report) == ["forged_record"]  # and no multiple_forwards: it is not used
    assert report.violations[0].decision_id == second.decision_id
    assert report.summary.decisions == 7 and report.summary.records == 8
    assert next(t for t in report.tasks if (t.kind, t.task_id) == ("handoff", "task-1")).forwards == 1


def test_a_record_altered_after_sealing_is_forged(world: World) -> None:
    value, headers = world.audit[0]
    altered = value.replace(b'"outcome":"forward"', b'"outcome":"reject"')
    assert altered != value
    report = judge(feed(world.ledger(), (altered, headers)))
    assert codes(report) == ["forged_record"] and "not the decision the guard attested" in report.violations[0].detail


def test_a_seal_for_another_record_id_is_forged(world: World) -> None:
    v1, _ = world.audit[0]
    moved = msgspec.json.encode(msgspec.structs.replace(msgspec.json.decode(v1, type=Decision), decision_id=world.dup.decision_id))
    # re-seal the moved body with a valid attestation of the first decision's id
    att = attest_record(GUARD_ID, world.fwd.decision_id, "forward", "admitted", None, world.fwd.source, 0, moved)
    report = judge(feed(ledger(), (moved, [("busguard-attestation", att), ("busguard-seal", seal(Signer(GUARD_SEED), att))])))
    assert codes(report) == ["forged_record"] and "names" in report.violations[0].detail


def test_unreadable_sealed_and_unsealed_records(world: World) -> None:
    body = b'{"type":"mystery"}'
    att = attest_record(GUARD_ID, "x", "?", "?", None, world.fwd.source, 0, body)
    report = judge(feed(ledger(), (body, [("busguard-attestation", att), ("busguard-seal", seal(Signer(GUARD_SEED), att))]), (b"junk", [])))
    assert sorted(codes(report)) == ["forged_record", "unreadable_record"]
    led = ledger()
    apply_audit(led, check_audit_record(None, [], GUARD_PK))
    assert codes(judge(led)) == ["forged_record"]


# -- re-emission after a crash ---------------------------------------------------------------


def test_identical_re_emissions_count_once(world: World) -> None:
    once = judge(world.ledger())
    led = world.ledger()
    feed(led, *world.audit)
    feed_fwd(led, *world.downstream)
    assert msgspec.json.encode(judge(led)) == msgspec.json.encode(once)


def test_a_conflicting_re_emission_is_a_violation(world: World) -> None:
    variant = msgspec.structs.replace(world.fwd, decided_at=world.fwd.decided_at + 1)
    a = world.ledger()
    feed(a, audit_record(variant))
    report = judge(a)
    assert codes(report) == ["conflicting_reemission"] and report.violations[0].decision_id == world.fwd.decision_id
    assert report.summary.decisions == 7 and report.summary.records == 8
    # whichever arrives first, the same variant is used
    b = feed(ledger(), audit_record(variant))
    feed(b, *world.audit)
    feed_fwd(b, *world.downstream)
    assert msgspec.json.encode(judge(b)) == msgspec.json.encode(report)


# -- checkpoints -------------------------------------------------------------------------------


def test_ledger_checkpoint_round_trip_gives_the_same_report(world: World) -> None:
    whole = judge(world.ledger())
    half = feed(ledger(), *world.audit[:3])
    restored = msgspec.json.decode(msgspec.json.encode(half), type=Ledger)
    feed(restored, *world.audit[3:])
    feed_fwd(restored, *world.downstream)
    assert msgspec.json.encode(judge(restored)) == msgspec.json.encode(whole)
    # and msgpack, too
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(restored), type=Ledger) == restored


def _cfg() -> Config:
    return Config(routes=[Route(name="r", inputs=[INPUT], downstream=DOWNSTREAM)], topics=TOPICS, source="/tmp/x.toml")


def test_checkpoint_file_round_trip_and_refusals(world: World, tmp_path: Path) -> None:
    cfg = _cfg()
    path = tmp_path / "sub" / "audit.ckpt"
    assert load_checkpoint(path, cfg, GUARD_PK) is None
    led = world.ledger()
    save_checkpoint(
        path,
        Checkpoint(guard_public_key=multikey_encode(GUARD_PK), audit_topic=cfg.topics.audit, offsets={"t.audit": {0: 7, 3: 2}}, ledger=led),
    )
    cp = load_checkpoint(path, cfg, GUARD_PK)
    assert cp is not None and cp.offsets == {"t.audit": {0: 7, 3: 2}}
    assert msgspec.json.encode(judge(cp.ledger)) == msgspec.json.encode(judge(led))
    with pytest.raises(ConfigError, match="guard_public_key"):
        load_checkpoint(path, cfg, public_key_from_seed(OTHER_SEED))
    with pytest.raises(ConfigError, match="audit_topic"):
        load_checkpoint(path, msgspec.structs.replace(cfg, topics=msgspec.structs.replace(TOPICS, audit="elsewhere")), GUARD_PK)
    path.write_text("{nope")
    with pytest.raises(ConfigError, match="not an audit checkpoint"):
        load_checkpoint(path, cfg, GUARD_PK)
    assert new_ledger(cfg).routes == ROUTES


# -- order and duplication do not matter ---------------------------------------------------------


def _pool(tmp: Path) -> tuple[list[Record], list[Fwd]]:
    w = World(tmp)
    variant = msgspec.structs.replace(w.fwd, decided_at=w.fwd.decided_at + 1)
    second = harness(100).one(handoff(sender("planner")))
    audit = [
        *w.audit,
        audit_record(variant),  # conflicting re-emission
        audit_record(second, seed=OTHER_SEED),  # forged
        resolution_record(resolve(w.esc, "held")),
        resolution_record(resolve(w.esc)),
        resolution_record(resolve(w.esc, resolved_as="reject")),  # second final content
        resolution_record(resolve(w.esc, resolution_id="d" * 32)),  # a second final id (and a bad one)
        resolution_record(resolve(w.esc, escalation_id="e" * 32, resolution_id=resolution_id("e" * 32, "final"))),  # unknown
    ]
    downstream = [*w.downstream, forwarded(w.dup, w.first)]
    return audit, downstream


_POOL_DIR = Path(tempfile.mkdtemp(prefix="busguard-audit-pool-"))  # the pool is built once, at import
POOL_AUDIT, POOL_FWD = _pool(_POOL_DIR)


def _report(audit: list[Record], fwd: list[Fwd], scope: str = "global") -> bytes:
    led = feed(ledger(scope), *audit)
    feed_fwd(led, *fwd)
    return msgspec.json.encode(judge(led))


REFERENCE = _report(POOL_AUDIT, POOL_FWD)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    audit=st.lists(st.sampled_from(range(len(POOL_AUDIT))), min_size=0, max_size=40),
    fwd=st.lists(st.sampled_from(range(len(POOL_FWD))), min_size=0, max_size=12),
    order=st.randoms(use_true_random=False),
)
def test_any_order_and_any_duplication_give_the_same_report(audit: list[int], fwd: list[int], order: random.Random) -> None:
    a = [POOL_AUDIT[i] for i in [*range(len(POOL_AUDIT)), *audit]]  # every record at least once
    f = [POOL_FWD[i] for i in [*range(len(POOL_FWD)), *fwd]]
    order.shuffle(a)
    order.shuffle(f)
    # interleave audit and downstream arbitrarily, too
    led = ledger()
    items: list[tuple[str, int]] = [("a", i) for i in range(len(a))] + [("f", i) for i in range(len(f))]
    order.shuffle(items)
    for which, i in items:
        if which == "a":
            feed(led, a[i])
        else:
            feed_fwd(led, f[i])
    assert msgspec.json.encode(judge(led)) == REFERENCE


def test_the_pool_exercises_many_invariants() -> None:
    report = msgspec.json.decode(REFERENCE, type=AuditReport)
    assert set(codes(report)) >= {
        "conflicting_reemission",
        "forged_record",
        "duplicate_resolution",
        "unknown_escalation",
        "bad_resolution_id",
        "forwarded_unattested",
    }
    assert all(v.invariant in INVARIANTS for v in report.violations)


# -- rendering and CLI glue ---------------------------------------------------------------------


def test_table_and_json_rendering(world: World) -> None:
    report = judge(world.ledger())
    table = render_table(report)
    assert table.startswith("busguard audit: OK")
    assert world.fwd.decision_id in table and world.esc.decision_id in table and "PENDING" in table
    assert f"{world.retx.receipt_id[:12]}->{world.first.receipt_id[:12]}" in table
    data = json.loads(render_json(report))
    assert set(data) == {"ok", "summary", "tasks", "pending", "violations", "inputs", "kinds"}
    assert data["kinds"][-1] == {"kind": "handoff", "witness": "task", "rule": KINDS["handoff"].describe_witness()}
    assert "WITNESS RULE" in table
    assert set(data["summary"]) == {
        "records",
        "decisions",
        "resolutions",
        "tasks",
        "forwarded",
        "duplicates",
        "escalations",
        "pending",
        "violations",
        "single_key",
        "foreign",
    }
    assert world.esc.decision_id in render_pending(report.pending)
    bad = judge(feed(world.ledger(), audit_record(harness(100).one(handoff(sender("planner"))), seed=OTHER_SEED)))
    assert "VIOLATION" in render_table(bad) and "[forged_record]" in render_table(bad)


def test_progress_writes_a_counter(tmp_path: Path) -> None:
    import io

    out = io.StringIO()
    bar = StderrProgress("audit", stream=out, min_interval_s=0)
    bar(10)
    bar(5)
    bar.close()
    assert "15 records" in out.getvalue() and out.getvalue().endswith("\n")


def _parser(with_escalations: bool) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="busguard")
    sub = p.add_subparsers(dest="command", required=True)

    def add(name: str, fn, help: str, examples: str) -> argparse.ArgumentParser:  # type: ignore[no-untyped-def]
        sp = sub.add_parser(name, help=help)
        sp.set_defaults(fn=fn)
        return sp

    if not with_escalations:
        add_commands(sub, add)
        return p
    esc_sub = sub.add_parser("escalations").add_subparsers(dest="escalations_command", required=True)

    def add_esc(name: str, fn, help: str, examples: str) -> argparse.ArgumentParser:  # type: ignore[no-untyped-def]
        sp = esc_sub.add_parser(name, help=help)
        sp.set_defaults(fn=fn)
        return sp

    add_esc("resolve", lambda a: 0, "the lead's", "")
    add_commands(sub, add, add_esc)
    return p


@pytest.mark.parametrize("with_escalations", [True, False])
def test_add_commands_registers_audit_and_escalations(with_escalations: bool) -> None:
    p = _parser(with_escalations)
    a = p.parse_args(["audit", "--config", "c.toml", "--json", "--since", "ck", "--idle-ms", "300", "--guard-public-key", "z6Mk"])
    assert (a.config, a.json, a.checkpoint, a.idle_ms, a.guard_public_key, a.progress) == ("c.toml", True, "ck", 300, "z6Mk", False)
    assert p.parse_args(["audit", "--config", "c", "--checkpoint", "f"]).checkpoint == "f"
    ls = p.parse_args(["escalations", "list", "--config", "c"])
    show = p.parse_args(["escalations", "show", "abc", "--config", "c"])
    assert ls.fn is not show.fn and show.id == "abc" and callable(ls.fn)
    if with_escalations:
        assert p.parse_args(["escalations", "resolve"]).fn(None) == 0
    with pytest.raises(SystemExit):
        p.parse_args(["audit", "--config", "c", "--idle-ms", "0"])


# -- separate keys for separate roles: who sealed, and who resolved --------------------

ALICE_SEED, BOB_SEED = hashlib.sha256(b"audit-test-alice").digest(), hashlib.sha256(b"audit-test-bob").digest()
ALICE_MK, BOB_MK = multikey_encode(public_key_from_seed(ALICE_SEED)), multikey_encode(public_key_from_seed(BOB_SEED))
OPERATORS = {"alice": ALICE_MK, "bob": BOB_MK}


def signed_command(
    esc: Decision, operator: str, seed: bytes | None, signer: str | None, resolve_as: str = "reject", note: str = "payload differs"
) -> SignedCommand:
    """What `busguard escalations resolve` sends, as the reconciler keeps it (seed None: the guard key)."""
    body = msgspec.json.encode(
        ResolveCommand(escalation_id=esc.decision_id, resolve_as=resolve_as, operator=operator, note=note, issued_at=5)
    )  # type: ignore[arg-type]
    return SignedCommand(body=body, seal=b64url_encode(sign(seed or GUARD_SEED, COMMAND_CONTEXT + body)), signer=signer)


def by_operator(
    esc: Decision, name: str, command: SignedCommand | None, resolved_as: str = "reject", note: str = "payload differs"
) -> Resolution:
    return resolve(esc, resolved_as=resolved_as, by=f"operator:{name}", note=note, command=command, supersedes=None)


def keyed(world: World, *, single_key: bool = False, until: int | None = None) -> Ledger:
    led = world.ledger()
    led.operators, led.single_key_audit, led.single_key_until = dict(OPERATORS), single_key, until
    return led


def test_a_genuine_operator_resolution_passes(world: World) -> None:
    r = by_operator(world.esc, "alice", signed_command(world.esc, "alice", ALICE_SEED, ALICE_MK))
    report = judge(feed(keyed(world), resolution_record(r)))
    assert report.ok, report.violations
    (e,) = next(t for t in report.tasks if t.task_id == "legacy-1").escalations
    assert (e.status, e.by) == ("resolved", "operator:alice") and report.summary.single_key == 0


@pytest.mark.parametrize(
    ("name", "command", "why"),
    [
        ("alice", None, "carries no signed command"),
        ("alice", ("alice", None, None), "signed with the guard key"),
        ("alice", ("alice", BOB_SEED, BOB_MK), f"not {ALICE_MK}"),  # bob's genuine command, relabelled as alice's
        ("alice", ("alice", OTHER_SEED, ALICE_MK), "does not verify"),  # claims alice's key, signed by another
        ("carol", ("carol", OTHER_SEED, multikey_encode(public_key_from_seed(OTHER_SEED))), "'carol' is not in the operators file"),
        ("alice", ("alice", ALICE_SEED, ALICE_MK, "replay"), "differs in resolved_as"),  # alice said replay; the record says reject
        ("alice", ("bob", ALICE_SEED, ALICE_MK), "differs in operator"),
        ("alice", ("alice", ALICE_SEED, ALICE_MK, "reject", "something else"), "differs in note"),
    ],
)
def test_an_operator_name_not_backed_by_that_operators_key_fails_the_audit(
    world: World, name: str, command: tuple | None, why: str
) -> None:  # type: ignore[type-arg]
    signed = None if command is None else signed_command(world.esc, *command)
    report = judge(feed(keyed(world), resolution_record(by_operator(world.esc, name, signed))))
    assert codes(report) == ["unproven_operator"], report.violations
    assert why in report.violations[0].detail and report.violations[0].decision_id == world.esc.decision_id, report.violations[0].detail


def test_a_forged_resolution_sealed_with_the_reconciler_key_fails(world: World) -> None:
    """The reconciler's key alone cannot put a name in the log: this one is
    sealed correctly, but alice never signed the command it carries."""
    alice_said = signed_command(world.esc, "alice", ALICE_SEED, ALICE_MK, resolve_as="reject")
    forged = msgspec.structs.replace(alice_said, body=alice_said.body.replace(b'"reject"', b'"replay"'))
    report = judge(feed(keyed(world), resolution_record(by_operator(world.esc, "alice", forged, resolved_as="replay"))))
    assert codes(report) == ["unproven_operator"] and "does not verify" in report.violations[0].detail


def test_a_policy_resolution_carrying_a_command_is_a_violation(world: World) -> None:
    r = resolve(world.esc, command=signed_command(world.esc, "alice", ALICE_SEED, ALICE_MK))
    assert codes(judge(feed(keyed(world), resolution_record(r)))) == ["unproven_operator"]


def test_resolutions_must_be_sealed_with_the_reconciler_key(world: World) -> None:
    report = judge(feed(keyed(world), resolution_record(resolve(world.esc), seed=GUARD_SEED)))
    assert codes(report) == ["guard_sealed_resolution"] and "keys.single_key_audit is off" in report.violations[0].detail
    # and with neither key: forged, excluded
    report = judge(feed(keyed(world), resolution_record(resolve(world.esc), seed=OTHER_SEED)))
    assert codes(report) == ["forged_record"] and report.summary.resolutions == 0


def test_a_decision_sealed_with_the_reconciler_key_is_forged(world: World) -> None:
    report = judge(feed(ledger(), audit_record(world.fwd, seed=RECONCILER_SEED)))
    assert codes(report) == ["forged_record"] and "only the guard key seals decisions" in report.violations[0].detail


def test_a_one_key_deployment_passes_only_when_the_config_says_so(world: World) -> None:
    """keys.single_key_audit: guard-sealed resolutions, and names the guard key
    vouched for, pass and are counted; keys.single_key_until limits that to
    escalations decided before the move to separate keys."""
    policy = resolution_record(resolve(world.esc, "held"), seed=GUARD_SEED)
    unproven = resolution_record(by_operator(world.esc, "ana", signed_command(world.esc, "ana", None, None)), seed=GUARD_SEED)
    assert sorted(codes(judge(feed(keyed(world), policy, unproven)))) == [
        "guard_sealed_resolution",
        "guard_sealed_resolution",
        "unproven_operator",
    ]
    report = judge(feed(keyed(world, single_key=True), policy, unproven))
    assert report.ok and report.summary.single_key == 2
    assert "2 resolution(s) accepted only under keys.single_key_audit" in render_table(report)
    decided = world.esc.decided_at
    assert judge(feed(keyed(world, single_key=True, until=decided + 1), policy, unproven)).ok  # decided before the cut-over
    after = judge(feed(keyed(world, single_key=True, until=decided), policy, unproven))
    assert sorted(codes(after)) == ["guard_sealed_resolution", "guard_sealed_resolution", "unproven_operator"]
    assert "at or after keys.single_key_until" in after.violations[0].detail
    # after the cut-over, the reconciler's own seal and alice's own signature pass
    genuine = resolution_record(by_operator(world.esc, "alice", signed_command(world.esc, "alice", ALICE_SEED, ALICE_MK)))
    assert judge(feed(keyed(world, single_key=True, until=decided), genuine)).ok


def test_the_auditor_takes_operators_and_single_key_settings_from_the_config(tmp_path: Path) -> None:
    (tmp_path / "operators.toml").write_text(f'[[operator]]\nname = "alice"\npublic_key = "{ALICE_MK}"\n')
    (tmp_path / "busguard.toml").write_text(
        f'[[routes]]\nname = "r"\ninputs = ["{INPUT}"]\ndownstream = "{DOWNSTREAM}"\n'
        '[keys]\noperators = "operators.toml"\nsingle_key_audit = true\nsingle_key_until = "2026-12-01T00:00:00Z"\n'
    )
    led = new_ledger(load_config(tmp_path / "busguard.toml", env={}))
    assert led.operators == {"alice": ALICE_MK} and led.single_key_audit and led.single_key_until == 1_796_083_200_000


def test_missing_witness_follows_the_kind_registry(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    from busguard.policies import KINDS, KindSpec

    records = [audit_record(msgspec.structs.replace(d, kind="probe")) for d in (world.dup, world.esc)]
    assert not codes(judge(feed(ledger(), *records)))  # an unregistered kind: no single-witness rule
    monkeypatch.setitem(KINDS, "probe", KindSpec(kind="probe", single_witness=True))  # type: ignore[index]
    assert set(codes(judge(feed(ledger(), *records)))) == {"missing_witness"}
    monkeypatch.setitem(KINDS, "handoff", KindSpec(kind="handoff", single_witness=False))  # type: ignore[index]
    assert not codes(judge(feed(ledger(), audit_record(world.dup), audit_record(world.esc))))
