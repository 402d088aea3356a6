"""kill -9 at each point of the batch protocol, then restart: nothing lost,
nothing judged twice, nothing mistaken for a replay of itself."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import msgspec
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import (
    GuardProcess,
    Setup,
    all_decided,
    collect,
    collect_all,
    decisions_by_source,
    header,
    identity,
    make_setup,
    produce,
    sender,
)
from busguard.protocol.attestation import verify_admitted
from busguard.protocol.records import Decision
from busguard.sdk.sender import SignedRecord

# also on the embedded broker, which the demo runs on
pytestmark = pytest.mark.brokers("kafka", "tansu")


def workload(tmp: Path, name: str = "planner", legacy_name: str = "executor", n: int = 150) -> tuple[list[SignedRecord], list[str]]:
    """Records for one partition, in order, with the reason each must get."""
    planner = sender(name, session=tmp / f"{name}.session")
    legacy = sender(legacy_name)
    receiver = identity("executor").agent_id
    records: list[SignedRecord] = []
    expected: list[str] = []
    for i in range(n):
        rec = planner.sign(kind="handoff", task_id=f"{name}-task-{i}", receiver=receiver, payload=f'{{"n":{i}}}'.encode())
        records.append(rec)
        expected.append("admitted")
        if i % 10 == 3:
            records.append(rec)
            expected.append("exact_duplicate")
        if i % 25 == 7:
            retry = planner.sign(kind="handoff", task_id=f"{name}-task-{i}", receiver=receiver, payload=f'{{"n":{i}}}'.encode())
            records.append(retry)
            expected.append("retransmission")
        if i % 30 == 11:
            forged = legacy.sign_receipt(rec.receipt, rec.value)
            records.append(forged)
            expected.append("bad_signature")
        if i % 20 == 13:
            first = legacy.sign(kind="handoff", task_id=f"{name}-legacy-{i}", receiver=receiver, payload=b"{}")
            again = legacy.sign(kind="handoff", task_id=f"{name}-legacy-{i}", receiver=receiver, payload=b"{}")
            records += [first, again]
            expected += ["admitted", "ambiguous_retransmission"]
    return records, expected


async def committed_offsets(s: Setup, topic: str) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=s.bootstrap, group_id=s.group, enable_auto_commit=False)
    await consumer.start()
    try:
        total = 0
        for p in range(4):
            total += (await consumer.committed(TopicPartition(topic, p))) or 0
        return total
    finally:
        await consumer.stop()


def check_exactly_once(s: Setup, got, coords: list[tuple[int, int]], expected: list[str]) -> None:  # type: ignore[no-untyped-def]
    gk = s.guard.public_key
    audit_by_source = decisions_by_source(s, got)
    # every input has exactly one decision (re-emissions are byte-identical)
    assert set(audit_by_source) == set(coords)
    assert all(len(v) == 1 for v in audit_by_source.values()), "an input got two different decisions"
    reasons = [msgspec.json.decode(next(iter(audit_by_source[c])), type=Decision).reason for c in coords]
    # nothing flagged as a replay of itself, nothing admitted twice
    assert reasons == expected
    # downstream: every admitted record, duplicates only as exact copies with the same decision id
    by_id: dict[bytes, set[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]]] = defaultdict(set)
    for r in got[s.downstream_handoffs]:
        verify_admitted(r.value, list(r.headers), gk, identity("executor").agent_id)
        by_id[header(r, "busguard-decision-id") or b""].add((r.key, r.value, tuple(r.headers)))
    assert len(by_id) == expected.count("admitted")
    assert all(len(v) == 1 for v in by_id.values()), "a downstream duplicate differs from the original"


@pytest.mark.parametrize("backend", ["sqlite", "rocksdb"])
@pytest.mark.parametrize("point", ["decided", "persisted", "produced"])
async def test_kill_9_then_restart_is_exactly_once(broker: EmbeddedBroker, tmp_path: Path, point: str, backend: str) -> None:
    on = {"backend": "rocksdb", "path": str(tmp_path / "state.rocksdb")} if backend == "rocksdb" else {}
    s = await make_setup(tmp_path, broker.bootstrap, max_records=20, state=on)
    victim = GuardProcess(s, fault=f"{point}:3")
    victim.wait_ready()
    records, expected = workload(tmp_path)  # signed after the store exists (else: store_warming)
    coords = await produce(s.bootstrap, s.handoffs, records, key=b"planner")
    assert len({p for p, _ in coords}) == 1
    assert victim.wait(60) == -9, victim.tail()  # it really died by SIGKILL at that point

    survivor = GuardProcess(s)
    try:
        survivor.wait_ready()
        await collect(s.bootstrap, s.outputs, lambda c: all_decided(s, c, len(records)) and _distinct_sources(s, c) == len(records))
    finally:
        assert survivor.terminate() == 0, survivor.tail()
    # the whole log once the survivor has drained: `collect` stops on the audit records, which
    # can be read before the forwards produced with them
    everything = await collect_all(s.bootstrap, s.outputs)
    check_exactly_once(s, everything, coords, expected)
    assert await committed_offsets(s, s.handoffs) == len(records)
    if point == "produced":
        # the batch in flight was emitted twice: same ids, same bytes (checked above), more records than decisions
        assert len(everything[s.audit]) > len(records)


def _distinct_sources(s: Setup, got) -> int:  # type: ignore[no-untyped-def]
    return len({(r.value and msgspec.json.decode(r.value, type=Decision).source.offset) for r in got[s.audit]})


async def test_sigterm_drains_and_commits(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, max_records=10)
    first = GuardProcess(s)
    first.wait_ready()
    records, expected = workload(tmp_path)
    half = len(records) // 2
    coords = await produce(s.bootstrap, s.handoffs, records[:half], key=b"planner")
    await collect(s.bootstrap, [s.audit], lambda c: len(c[s.audit]) >= 20)
    assert first.terminate() == 0, first.tail()  # mid-stream: drains the batch in hand, commits, leaves the group
    assert "stop requested; draining" in first.tail(200)
    done = await committed_offsets(s, s.handoffs)
    # everything committed was emitted, and nothing emitted is left uncommitted
    settled = await collect_all(s.bootstrap, [s.audit])
    assert 20 <= done < len(records)
    assert len(settled[s.audit]) == _distinct_sources(s, settled) == done
    coords += await produce(s.bootstrap, s.handoffs, records[half:], key=b"planner")
    second = GuardProcess(s)
    try:
        second.wait_ready()
        got = await collect(s.bootstrap, s.outputs, lambda c: all_decided(s, c, len(records)))
    finally:
        assert second.terminate() == 0
    check_exactly_once(s, got, coords, expected)
    assert len(got[s.audit]) == len(records)  # a clean drain re-emits nothing
