"""Seed 000, replayed: the executor crashes after signing its ack and before
committing it, restarts, and resends. Whatever it does, there is never a
second admitted ack for the task."""

from __future__ import annotations

from pathlib import Path

import pytest

from busguard.protocol.envelope import b64url_decode_strict
from busguard.protocol.receipt import signing_input
from busguard.protocol.records import Decision
from busguard.protocol.signing import verify_signature

from .harness import NOW, Harness, agent, sender

TASK = "task-incident-7"
WORK = b'{"op":"summarize","doc":"q3-report"}'
ACK = b'{"status":"accepted","task":"task-incident-7"}'


def admitted_acks(decisions: list[Decision]) -> list[Decision]:
    return [d for d in decisions if d.kind == "ack" and d.outcome == "forward"]


def _handoff(h: Harness) -> Decision:
    return h.one(sender("planner").sign(kind="handoff", task_id=TASK, receiver=agent("executor"), payload=WORK))


@pytest.mark.parametrize("first_ack_reached_the_bus", [True, False])
def test_legacy_nonce_only_receipts_escalate_and_never_admit_a_second_ack(first_ack_reached_the_bus: bool) -> None:
    h = Harness()
    log = [_handoff(h)]
    executor = sender("executor")
    # The executor's nonce counter: 41 was signed but never flushed.
    signed = executor.sign(
        kind="ack", task_id=TASK, receiver=agent("planner"), payload=ACK, nonce="executor-ctr-000000041", issued_at_ms=NOW - 2_000
    )
    if first_ack_reached_the_bus:
        log += h.feed(signed)
    # -- crash; restart from the journal: counter rolled back to 41, ack re-derived and re-sent
    restarted = sender("executor")
    rederived = restarted.sign(kind="ack", task_id=TASK, receiver=agent("planner"), payload=ACK, nonce="executor-ctr-000000041")
    log += h.feed(rederived)
    # -- the planner side said no (or nothing); the executor retries with a fresh nonce
    fresh = restarted.sign(kind="ack", task_id=TASK, receiver=agent("planner"), payload=ACK, nonce="executor-ctr-000000042")
    log += h.feed(fresh)
    acks = admitted_acks(log)
    assert len(acks) == 1
    reasons = [d.reason for d in log if d.kind == "ack"]
    if first_ack_reached_the_bus:
        assert reasons == ["admitted", "exact_duplicate", "ambiguous_retransmission"]
    else:
        assert reasons == ["admitted", "ambiguous_retransmission"]
    escalation = log[-1]
    assert escalation.outcome == "escalate" and escalation.supersedes == acks[0].receipt_id
    assert escalation.prior is not None and escalation.prior.receipt == acks[0].receipt  # both receipts recorded
    # and a replay of either ack is still refused
    assert h.one(fresh).reason == "nonce_replay"
    assert admitted_acks(log + h.feed(signed)) == acks


def test_session_sequence_receipts_are_admitted_as_a_retransmission_with_supersedes(tmp_path: Path) -> None:
    h = Harness()
    log = [_handoff(h)]
    journal = tmp_path / "executor-session.json"
    executor = sender("executor", session_path=journal)
    first = executor.sign(kind="ack", task_id=TASK, receiver=agent("planner"), payload=ACK)
    log += h.feed(first)
    # -- crash before the ack was committed locally; the new process re-opens the session
    del executor
    restarted = sender("executor", session_path=journal)
    resend = restarted.sign(kind="ack", task_id=TASK, receiver=agent("planner"), payload=ACK)
    assert resend.receipt.session_id == first.receipt.session_id
    assert resend.receipt.sequence is not None and first.receipt.sequence is not None
    assert resend.receipt.sequence > first.receipt.sequence  # jumped past the reserved block
    log += h.feed(resend)
    # an exact re-send of either copy is idempotent, never a second admission
    log += h.feed(first, resend)
    acks = admitted_acks(log)
    assert len(acks) == 1 and acks[0].receipt_id == first.receipt_id
    retrans = [d for d in log if d.reason == "retransmission"]
    assert len(retrans) == 1 and retrans[0].supersedes == first.receipt_id and retrans[0].outcome == "duplicate"
    assert [d.reason for d in log[-2:]] == ["exact_duplicate", "nonce_replay"]


def test_the_same_incident_without_busguard_yields_two_valid_acks() -> None:
    """What the auditor in seed 000 saw: two cryptographically valid acks for one task."""
    executor = sender("executor")
    a1 = executor.sign(kind="ack", task_id=TASK, receiver=agent("planner"), payload=ACK, nonce="executor-ctr-000000041")
    a2 = executor.sign(kind="ack", task_id=TASK, receiver=agent("planner"), payload=ACK, nonce="executor-ctr-000000042")
    for a in (a1, a2):
        sig = b64url_decode_strict(dict(a.headers)["busguard-signature"])
        assert verify_signature(executor.public_key, signing_input(a.receipt_bytes), sig)
    assert a1.receipt.task_id == a2.receipt.task_id and a1.receipt_id != a2.receipt_id
