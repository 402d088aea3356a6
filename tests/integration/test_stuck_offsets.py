"""Issue 35 finding 6a: offsets the broker will not move a consumer past.

tansu stores a record batch with no records (61 bytes, count 0, valid CRC)
as it is, advances the partition by its lastOffsetDelta + 1, and then
answers every fetch AT an offset inside it with nothing, for ever. A guard
whose position reached it used to stop there for good: valid records after
it were never decided, and a restart stalled at the same offset. Through
`busguard run` on the embedded broker: the guard fetches again from the
offset before (the batch then arrives and its claimed offsets become one
span decision), or, at the very start of a log where there is no offset
before, decides each offset it cannot read as a span of one; every record
after it is decided, and `busguard audit` finds every offset decided once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from busguard.audit.run import run_audit
from busguard.config import load_config
from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, collect, collect_all, identity, make_setup, produce, sender
from busguard.protocol.records import Decision
from tests.fuzz.batches import batch, claimed_span, record

from .test_hostile_records import produce_batches
from .test_sdk_hostile import forward_tasks, open_receiver, run_until

# Apache Kafka refuses these batches at produce (docs/notes-broker.md): only tansu stores them
pytestmark = pytest.mark.brokers("tansu")


def _decisions(s: Setup, got: dict[str, list[object]]) -> list[Decision]:
    by_id = {d.decision_id: d for d in (msgspec.json.decode(r.value, type=Decision) for r in got[s.audit])}  # type: ignore[attr-defined]
    return sorted(by_id.values(), key=lambda d: d.source.offset)


async def _audit_ok(s: Setup, first: int, last: int) -> None:
    report = await asyncio.to_thread(run_audit, load_config(s.config), guard_public_key=s.guard.public_key, idle_ms=2000)
    assert report.ok, report.violations
    (cov,) = report.inputs
    assert (cov.first, cov.last, cov.offsets, cov.undecided, cov.overlapping) == (first, last, last - first + 1, 0, 0)


async def test_an_empty_batch_behind_the_position_is_fetched_from_before_and_decided_as_one_span(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1)
    planner, to = sender("planner"), identity("executor").agent_id
    guard = GuardProcess(s)
    try:
        guard.wait_ready()
        ((_, first),) = await produce(s.bootstrap, s.handoffs, [planner.sign(kind="handoff", task_id="before", receiver=to, payload=b"w")])
        await collect(s.bootstrap, [s.audit], lambda c: len(c[s.audit]) >= 1, timeout=60)
        # the guard's position is now the empty batch's offset: tansu answers a fetch there with nothing
        (span,) = await produce_batches(s.bootstrap, s.handoffs, [(batch([], count=0, last_offset_delta=9), 10)])
        after = [planner.sign(kind="handoff", task_id=f"after-{i}", receiver=to, payload=b"w") for i in range(3)]
        offsets = [o for _, o in await produce(s.bootstrap, s.handoffs, after)]
        got = await collect(s.bootstrap, [s.audit], lambda c: len(c[s.audit]) >= 5, timeout=90)
        assert guard.proc.poll() is None, guard.tail()
    finally:
        assert guard.terminate() == 0, guard.tail()
    assert (first, span, offsets) == (0, range(1, 11), [11, 12, 13])
    decisions = _decisions(s, got)
    assert [(d.source.offset, d.covers_to, d.reason) for d in decisions] == [
        (0, 0, "admitted"),
        (1, 10, "undecodable_batch"),
        (11, 11, "admitted"),
        (12, 12, "admitted"),
        (13, 13, "admitted"),
    ]
    assert "holds no record" in (decisions[1].detail or "")
    assert "partition stuck: fetching again from the offset before" in guard.log.read_text(errors="replace")
    await _audit_ok(s, 0, 13)

    # a restart starts past it: nothing is read or decided again
    again = GuardProcess(s)
    again.wait_ready()
    await asyncio.sleep(3)
    assert again.terminate() == 0, again.tail()
    assert len((await collect_all(s.bootstrap, [s.audit]))[s.audit]) == 5


async def test_an_empty_batch_at_the_start_of_the_log_is_skipped_offset_by_offset(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1)
    planner, to = sender("planner"), identity("executor").agent_id
    (span,) = await produce_batches(s.bootstrap, s.handoffs, [(batch([], count=0, last_offset_delta=2), 3)])
    after = [planner.sign(kind="handoff", task_id=f"after-{i}", receiver=to, payload=b"w") for i in range(2)]
    offsets = [o for _, o in await produce(s.bootstrap, s.handoffs, after)]
    assert (span, offsets) == (range(0, 3), [3, 4])
    guard = GuardProcess(s)
    try:
        got = await collect(s.bootstrap, [s.audit, s.dead_letter], lambda c: len(c[s.audit]) >= 5, timeout=120)
        assert guard.proc.poll() is None, guard.tail()
    finally:
        assert guard.terminate() == 0, guard.tail()
    decisions = _decisions(s, got)
    assert [(d.source.offset, d.covers_to, d.reason) for d in decisions] == [
        (0, 0, "undecodable_batch"),
        (1, 1, "undecodable_batch"),
        (2, 2, "undecodable_batch"),
        (3, 3, "admitted"),
        (4, 4, "admitted"),
    ]
    assert all("the broker returns no record at offset" in (d.detail or "") for d in decisions[:3])
    # each skipped offset's dead letter: the batch form, with nothing fetched to carry
    assert sorted(len(r.value or b"") for r in got[s.dead_letter]) == [0, 0, 0]  # type: ignore[attr-defined]
    assert guard.log.read_text(errors="replace").count("offset unfetchable") == 3
    await _audit_ok(s, 0, 4)


async def test_offsets_claimed_without_records_and_a_negative_delta_are_each_decided_and_named(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """Findings 6c and 6b through `busguard run`: a well-formed one-record
    batch claiming six offsets leaves none undecided (the audit used to fail
    with `offsets_undecided` on an honest guard), and a batch with a negative
    lastOffsetDelta, which makes tansu store the next records at offsets the
    guard has read past, is refused with a decision naming those offsets."""
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1)
    planner, to = sender("planner"), identity("executor").agent_id
    guard = GuardProcess(s)
    try:
        guard.wait_ready()
        six = batch([record(0, b"planner", b"six", [])], last_offset_delta=5)
        (six_span,) = await produce_batches(s.bootstrap, s.handoffs, [(six, 6)])
        ((_, valid),) = await produce(s.bootstrap, s.handoffs, [planner.sign(kind="handoff", task_id="t", receiver=to, payload=b"w")])
        (claimed,) = await produce_batches(s.bootstrap, s.handoffs, [(claimed_span(10), 10)])
        await collect(s.bootstrap, [s.audit], lambda c: len(c[s.audit]) >= 4, timeout=90)
        # tansu stores this batch at 17 and moves its log end back to 9, below the guard's position
        (neg,) = await produce_batches(s.bootstrap, s.handoffs, [(batch([record(0, None, b"neg", [])], last_offset_delta=-9), 1)])
        said = "log end moved back below the decided position"
        for _ in range(120):
            if said in guard.log.read_text(errors="replace"):
                break
            await asyncio.sleep(0.5)
        got = await collect_all(s.bootstrap, [s.audit])
        assert guard.proc.poll() is None, guard.tail()
    finally:
        assert guard.terminate() == 0, guard.tail()
    assert (six_span, valid, claimed, neg) == (range(0, 6), 6, range(7, 17), range(17, 18))
    lines = [line for line in guard.log.read_text(errors="replace").splitlines() if said in line]
    assert len(lines) == 1 and '"offsets": "9-16"' in lines[0], lines
    decisions = _decisions(s, got)
    assert [(d.source.offset, d.covers_to, d.reason) for d in decisions] == [
        (0, 0, "missing_header"),
        (1, 5, "undecodable_batch"),
        (6, 6, "admitted"),
        (7, 16, "undecodable_batch"),
    ]
    assert "holds no record" in (decisions[1].detail or "")
    await _audit_ok(s, 0, 16)


async def test_an_sdk_receiver_moves_past_an_empty_batch_on_its_downstream_topic(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """The same stall in the agent's SDK: a key-less writer puts an empty
    batch on the downstream topic right at a receiver's position; the
    receiver (ActOnce over `AdmittingConsumer.open`) refuses its offsets once
    and acts on every task behind it."""
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1)
    guard = GuardProcess(s)
    try:
        guard.wait_ready()
        loop, done = await open_receiver(s, "receiver", tmp_path / "done.db")
        try:
            await forward_tasks(s, ["first"], 1)
            assert (await run_until(loop, acted=1, refused=0))[0].acted == 1
            (span,) = await produce_batches(s.bootstrap, s.downstream_handoffs, [(batch([], count=0, last_offset_delta=3), 4)])
            await forward_tasks(s, ["second", "third"], 3)
            total, reasons = await run_until(loop, acted=2, refused=1, timeout=120)
        finally:
            await loop.inbox.close()
        assert guard.proc.poll() is None, guard.tail()
    finally:
        assert guard.terminate() == 0, guard.tail()
    assert span == range(1, 5)
    assert (total.acted, total.refused, dict(reasons)) == (2, 1, {"undecodable": 1})
    assert [t for (t,) in done.connection.execute("SELECT task_id FROM work ORDER BY rowid")] == ["first", "second", "third"]
