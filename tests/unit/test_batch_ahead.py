"""A batch's stateless half may run ahead of the batches before it
(runtime/loop.py, "Pipelining"): `check_batch` reads no state, so a batch
checked before an earlier one was persisted is still decided against the
state that earlier batch left. No Kafka."""

from __future__ import annotations

from busguard.admission.batch import Input, admit_batch, admit_checked, check_batch
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.records import Coordinates, Decision

from .harness import Harness, agent, sender

EXECUTOR = agent("executor")


def _input(offset: int, value: bytes | None, headers: list[tuple[str, bytes]]) -> Input:
    return Input(Coordinates(topic="in", partition=0, offset=offset), value, headers)


def test_a_copy_checked_ahead_of_its_original_is_decided_after_it() -> None:
    h = Harness()
    rec = sender("planner").sign(kind="handoff", task_id="t", receiver=EXECUTOR, payload=b"work")
    later = check_batch([_input(1, rec.value, rec.headers)], registry=h.registry, now_ms=h.now, policy=h.policy)
    (first,) = admit_batch([_input(0, rec.value, rec.headers)], store=h.store, registry=h.registry, now_ms=h.now, policy=h.policy)
    assert (first.outcome, first.reason) == (Outcome.FORWARD, Reason.ADMITTED)
    (copy,) = admit_checked(later, store=h.store, now_ms=h.now, policy=h.policy)
    assert (copy.outcome, copy.reason) == (Outcome.DUPLICATE, Reason.EXACT_DUPLICATE)


def test_on_decided_sees_the_decisions_that_are_returned_before_they_are_written() -> None:
    h = Harness()
    recs = [sender("planner").sign(kind="handoff", task_id=f"t{i}", receiver=EXECUTOR, payload=b"work") for i in range(3)]
    seen: list[list[Decision]] = []
    written: list[int] = []

    def decided(decisions: list[Decision]) -> None:
        seen.append(decisions)
        written.append(h.store.counts()["decisions"])

    checked = check_batch([_input(i, r.value, r.headers) for i, r in enumerate(recs)], registry=h.registry, now_ms=h.now, policy=h.policy)
    out = admit_checked(checked, store=h.store, now_ms=h.now, policy=h.policy, on_decided=decided)
    assert len(seen) == 1 and seen[0] is out and len(out) == 3
    assert written == [0]  # called before the store wrote the batch
    assert h.store.counts()["decisions"] == 3
