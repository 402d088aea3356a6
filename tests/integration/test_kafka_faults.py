"""Issue 36 item 5: broker faults on a three-node Apache Kafka cluster, under load.

One cluster for the module (three KRaft combined nodes, every topic with
replication factor 3 and ``min.insync.replicas`` 2). In each test a `busguard
run` guard (idempotent producer, ``acks=all``) decides records that a second
idempotent ``acks=all`` producer keeps writing while a broker fault happens:
the leader of the input partition, of the downstream (output) partition or
of the audit partition is killed with SIGKILL; one broker is stopped and
started again; the whole cluster is stopped and started again on its data.
Each must leave every input decided once (0 lost, 0 admitted twice, every
re-emission byte-identical) and an audit log that `busguard audit` passes.

The time until decisions resume is measured (not asserted) and printed: from
the fault to the first audit record, by its CreateTime (set by the guard's
producer when it sends), of an input that no audit record written before the
fault decided. docs/notes-broker.md ("Apache Kafka") holds the figures.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from busguard.devtools import guardkit
from busguard.devtools.guardkit import GuardProcess, Setup, collect, distinct_sources, header, make_setup
from busguard.devtools.kafka import ApacheKafka
from busguard.protocol.auditbatch import audit_records_of
from busguard.protocol.records import Decision
from busguard.runtime.topics import create_topics

from .test_apache_kafka import ON_KAFKA
from .test_guard_crash import check_exactly_once, committed_offsets, workload

TXN = {"BUSGUARD_KAFKA__TRANSACTIONAL_ID": "guard-faults"}
RATE_S = 0.1  # one input every 100 ms: the stream goes on through the fault
SETTLE_S = 240.0
RESUME: dict[str, tuple[float, float]] = {}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafka]:
    with ApacheKafka(brokers=3, log_dir=tmp_path_factory.mktemp("faults")) as c:
        yield c
    print("\n(first new decision, longest pause) after the fault, s:", json.dumps({k: [round(x, 2) for x in v] for k, v in RESUME.items()}))


@pytest.fixture
def rf3(monkeypatch: pytest.MonkeyPatch) -> None:
    """make_setup creates busguard's topics with replication factor 3 (its own create_topics uses 1)."""
    monkeypatch.setattr(guardkit, "create_topics", functools.partial(create_topics, replication_factor=3, timeout_ms=30_000))


async def _leader(bootstrap: str, topic: str, partition: int) -> tuple[int, list[int]]:
    """(leader node id, replica ids) of one partition."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    (p,) = [p for p in described["partitions"] if p["partition"] == partition]
    return int(p["leader"]), sorted(int(r) for r in p["replicas"])


async def _feed(bootstrap: str, topic: str, records: list[Any], coords: list[tuple[int, int]]) -> None:
    """Keep producing, one record every RATE_S, idempotent with acks=all; (partition, offset) per record, in order.

    Its request timeout (120 s) outlasts any fault here, so a record is retried,
    never sent again as a new one: the inputs are exactly ``records``."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, request_timeout_ms=120_000, linger_ms=5, metadata_max_age_ms=2000
    )
    await producer.start()
    try:
        futures = []
        for rec in records:
            futures.append(await producer.send(topic, value=rec.value, key=b"planner", headers=list(rec.headers)))
            await asyncio.sleep(RATE_S)
        metas = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    coords.extend((m.partition, m.offset) for m in metas)


def _audit_times(s: Setup, got: Any) -> list[tuple[int, tuple[int, int]]]:
    """(CreateTime ms, input (partition, offset)) of every audit entry collected."""
    out = []
    for r in got[s.audit]:
        for value, _ in audit_records_of(r.value, r.headers):
            d = msgspec.json.decode(value or b"", type=Decision)
            out.append((int(r.timestamp), (d.source.partition, d.source.offset)))
    return out


def _resume_s(s: Setup, got: Any, fault_ms: int) -> tuple[float, float]:
    """Seconds from the fault to the first new decision, and the longest pause
    between new decisions from the fault on (inputs come every RATE_S)."""
    entries = _audit_times(s, got)
    before = {src for ts, src in entries if ts < fault_ms}
    first: dict[tuple[int, int], int] = {}
    for ts, src in entries:
        if ts >= fault_ms and src not in before:
            first[src] = min(ts, first.get(src, ts))
    assert first, "no new decision after the fault"
    times = [fault_ms, *sorted(first.values())]
    return (times[1] - fault_ms) / 1000, max(b - a for a, b in zip(times, times[1:], strict=False)) / 1000


def _audit_ok(s: Setup) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        [sys.executable, "-m", "busguard.cli", "audit", "--config", str(s.config), "--json", "--idle-ms", "1500"],
        capture_output=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    report = json.loads(done.stdout)
    assert report["ok"] is True and report["violations"] == [], report


async def _partition_of(s: Setup, topic: str) -> int:
    """The partition the guard writes this workload's records of ``topic`` to (one sender: one partition)."""
    got = await collect(s.bootstrap, [topic], lambda c: len(c[topic]) > 0, timeout=120)
    return int(got[topic][-1].partition)


async def _under_fault(
    cluster: ApacheKafka, tmp_path: Path, name: str, fault: Callable[[Setup], Awaitable[int]], env: dict[str, str] | None = None
) -> None:
    """A guard deciding a steady stream while ``fault`` happens; then every exactly-once check and the audit."""
    s = await make_setup(tmp_path, cluster.bootstrap, max_records=20)
    for topic in (s.handoffs, s.downstream_handoffs, s.audit):
        assert (await _leader(cluster.bootstrap, topic, 0))[1] == [1, 2, 3], f"{topic} is not replicated on all three nodes"
    guard = GuardProcess(s, env={**ON_KAFKA, **(env or {})})  # busguard's own timeouts (request 40 s)
    try:
        guard.wait_ready(60)
        records, expected = workload(tmp_path, n=150)
        coords: list[tuple[int, int]] = []
        feeder = asyncio.create_task(_feed(s.bootstrap, s.handoffs, records, coords))
        # the fault comes once the guard has decided a first part of the stream
        await collect(s.bootstrap, [s.audit], lambda c: distinct_sources(s, c) >= 40, timeout=120)
        fault_ms = await fault(s)
        await feeder
        assert len(coords) == len(records) and len({p for p, _ in coords}) == 1
        admitted = expected.count("admitted")

        def settled(c: Any) -> bool:
            ids = {header(r, "busguard-decision-id") for r in c[s.downstream_handoffs]}
            return distinct_sources(s, c) == len(records) and len(ids) == admitted

        got = await collect(s.bootstrap, s.outputs, settled, timeout=SETTLE_S)
        if env and "BUSGUARD_KAFKA__TRANSACTIONAL_ID" in env:  # a read_committed reader sees each output once
            committed = await collect(s.bootstrap, s.outputs, settled, timeout=SETTLE_S, read_committed=True)
            for topic in (s.audit, s.downstream_handoffs):
                counts = Counter(header(r, "busguard-decision-id") for r in committed[topic])
                assert max(counts.values()) == 1, f"{topic}: an output twice for a read_committed reader"
        assert guard.proc.poll() is None, f"the guard exited during the fault:\n{guard.tail()}"
    finally:
        rc = guard.terminate(120)
    assert rc == 0, guard.tail()
    check_exactly_once(s, got, coords, expected)
    assert await committed_offsets(s, s.handoffs) == len(records)
    _audit_ok(s)
    RESUME[name] = _resume_s(s, got, fault_ms)
    first, pause = RESUME[name]
    print(
        f"\n{name}: first new decision {first:.2f}s after the fault, longest pause {pause:.2f}s ({len(records)} inputs, {len(got[s.audit])} audit records)"
    )


def _now_ms() -> int:
    return int(time.time() * 1000)


async def _kill_leader_of(cluster: ApacheKafka, s: Setup, topic: str) -> int:
    """kill -9 the leader of the partition this workload's ``topic`` records are on; the time of the kill."""
    leader, _ = await _leader(cluster.bootstrap, topic, await _partition_of(s, topic))
    index = leader - 1  # ApacheKafka node i has node.id i + 1
    at = _now_ms()
    cluster.kill(index)
    await asyncio.sleep(15)  # decisions go on with two of three nodes; then the node comes back with its data
    await cluster.arestart(index)
    return at


@pytest.mark.usefixtures("rf3")
@pytest.mark.parametrize("which", ["input", "output", "audit"])
async def test_kill_9_of_a_partition_leader_under_load(cluster: ApacheKafka, tmp_path: Path, which: str) -> None:
    async def fault(s: Setup) -> int:
        topic = {"input": s.handoffs, "output": s.downstream_handoffs, "audit": s.audit}[which]
        return await _kill_leader_of(cluster, s, topic)

    await _under_fault(cluster, tmp_path, f"kill -9 {which} leader", fault)


@pytest.mark.usefixtures("rf3")
async def test_kill_9_of_the_input_leader_with_transactions(cluster: ApacheKafka, tmp_path: Path) -> None:
    async def fault(s: Setup) -> int:
        return await _kill_leader_of(cluster, s, s.handoffs)

    await _under_fault(cluster, tmp_path, "kill -9 input leader, transactions", fault, env=TXN)


@pytest.mark.usefixtures("rf3")
async def test_restart_of_one_broker_under_load(cluster: ApacheKafka, tmp_path: Path) -> None:
    async def fault(s: Setup) -> int:
        leader, _ = await _leader(cluster.bootstrap, s.handoffs, await _partition_of(s, s.handoffs))
        at = _now_ms()
        await asyncio.to_thread(cluster.terminate, leader - 1)  # a controlled shutdown, as in a rolling restart
        await cluster.arestart(leader - 1)
        return at

    await _under_fault(cluster, tmp_path, "restart one broker", fault)


@pytest.mark.usefixtures("rf3")
async def test_whole_cluster_stop_and_start_under_load(cluster: ApacheKafka, tmp_path: Path) -> None:
    async def fault(_s: Setup) -> int:
        at = _now_ms()
        await cluster.arestart_all()
        return at

    await _under_fault(cluster, tmp_path, "stop and start all three", fault)
