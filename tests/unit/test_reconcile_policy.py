"""The reconciliation policy, as a pure function."""

from __future__ import annotations

from pathlib import Path

from busguard.protocol.records import Coordinates, Decision, Reply, Resolution, ResolveCommand, resolution_id
from busguard.reconcile.policy import EscalationState, Rejected, on_command, on_escalation

from .harness import Harness, agent, sender

SRC = Coordinates(topic="busguard.reconciliation", partition=0, offset=5)


def escalations(tmp_path: Path) -> tuple[Decision, Decision]:
    h = Harness()
    s = sender("planner")
    first = s.sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"p")
    retry = s.sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"p")
    other = s.sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"different")
    _, ambiguous, conflict = h.feed(first, retry, other)
    assert (ambiguous.reason, conflict.reason) == ("ambiguous_retransmission", "task_conflict")
    return ambiguous, conflict


def test_ambiguous_retransmission_is_resolved_and_the_first_admission_re_emitted(tmp_path: Path) -> None:
    ambiguous, _ = escalations(tmp_path)
    items, state = on_escalation(ambiguous, None, SRC, 1000, auto_resolve=True)
    final, reply = items
    assert isinstance(final, Resolution) and isinstance(reply, Reply)
    assert (final.stage, final.resolved_as, final.by) == ("final", "retransmission", "policy")
    assert final.supersedes == ambiguous.supersedes and final.prior_decision_id == ambiguous.prior.decision_id  # type: ignore[union-attr]
    assert final.resolution_id == resolution_id(ambiguous.decision_id, "final")
    assert reply.admission == ambiguous.prior and reply.to == ambiguous.sender
    assert state is not None and state.final == final


def test_conflicts_and_disabled_policy_are_held_for_an_operator(tmp_path: Path) -> None:
    ambiguous, conflict = escalations(tmp_path)
    for d, auto in ((conflict, True), (ambiguous, False)):
        (held,), state = on_escalation(d, None, SRC, 1000, auto_resolve=auto)
        assert isinstance(held, Resolution) and held.stage == "held" and held.resolved_as is None
        assert state is not None and state.final is None and state.held == held


def test_a_re_emitted_escalation_changes_nothing(tmp_path: Path) -> None:
    ambiguous, _ = escalations(tmp_path)
    _, state = on_escalation(ambiguous, None, SRC, 1000, auto_resolve=True)
    assert on_escalation(ambiguous, state, SRC, 2000, auto_resolve=True) == ([], None)


def test_only_escalations_belong_on_the_topic(tmp_path: Path) -> None:
    ambiguous, _ = escalations(tmp_path)
    import msgspec

    forwarded = msgspec.structs.replace(ambiguous, outcome="forward")
    (item,), state = on_escalation(forwarded, None, SRC, 1, auto_resolve=True)
    assert isinstance(item, Rejected) and item.reason == "not_an_escalation" and state is None


def test_operator_settles_a_held_escalation_exactly_once(tmp_path: Path) -> None:
    _, conflict = escalations(tmp_path)
    _, held_state = on_escalation(conflict, None, SRC, 1000, auto_resolve=True)
    assert isinstance(held_state, EscalationState)
    cmd = ResolveCommand(escalation_id=conflict.decision_id, resolve_as="reject", operator="ana", note="bad payload", issued_at=5)
    (final,), state = on_command(cmd, held_state, SRC, 2000)
    assert isinstance(final, Resolution) and (final.by, final.resolved_as, final.stage) == ("operator:ana", "reject", "final")
    assert state is not None and state.final == final and state.held == held_state.held
    (again,), unchanged = on_command(cmd, state, SRC, 3000)
    assert isinstance(again, Rejected) and again.reason == "already_resolved" and unchanged is None


def test_operator_retransmission_re_emits_the_acknowledgment(tmp_path: Path) -> None:
    ambiguous, _ = escalations(tmp_path)
    _, state = on_escalation(ambiguous, None, SRC, 1000, auto_resolve=False)
    cmd = ResolveCommand(escalation_id=ambiguous.decision_id, resolve_as="retransmission", operator="ana", note="", issued_at=5)
    items, _ = on_command(cmd, state, SRC, 2000)
    assert [type(i) for i in items] == [Resolution, Reply]


def test_unknown_escalation_is_refused() -> None:
    cmd = ResolveCommand(escalation_id="nope", resolve_as="reject", operator="ana", note="", issued_at=5)
    (item,), state = on_command(cmd, None, SRC, 1)
    assert isinstance(item, Rejected) and item.reason == "unknown_escalation" and state is None
