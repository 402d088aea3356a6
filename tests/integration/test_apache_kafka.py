"""Apache Kafka itself (kafka/pom.xml's version) does what busguard's runtime asks of a broker, with aiokafka.

No mocks: a real KRaft node from the session fixture ``kafka``; the
three-node cluster only for the test that needs it (and first in this file, so
that it runs before the session's single node is started: three JVMs at a
time, not four). What these tests found is in docs/notes-broker.md, "Apache Kafka".
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import InvalidSessionTimeoutError, UnknownTopicOrPartitionError
from aiokafka.structs import ConsumerRecord, TopicPartition

from busguard.devtools.guardkit import GuardProcess, collect, distinct_sources, header, make_setup, produce
from busguard.devtools.kafka import ApacheKafka, kafka_version
from busguard.runtime.topics import create_topics

from .test_guard_crash import check_exactly_once, committed_offsets, workload

pytestmark = pytest.mark.integration

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
GROUP: dict[str, Any] = {
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 500,
}
# A wait that is a bound, not a measurement: the cluster on a shared 2-core
# machine may take this long to put a restarted replica back in sync.
SETTLE_S = 120.0


def _name(what: str) -> str:
    return f"ak.{what}.{uuid.uuid4().hex[:8]}"


@asynccontextmanager
async def _admin(bootstrap: str) -> AsyncIterator[AIOKafkaAdminClient]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


@asynccontextmanager
async def _producer(bootstrap: str, **kw: Any) -> AsyncIterator[AIOKafkaProducer]:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, **kw)
    await p.start()
    try:
        yield p
    finally:
        await p.stop()


@asynccontextmanager
async def _consumer(bootstrap: str, *topics: str, **kw: Any) -> AsyncIterator[AIOKafkaConsumer]:
    c = AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap, **{**GROUP, **kw})
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


async def _drain(c: AIOKafkaConsumer, want: int, idle_polls: int = 3) -> list[ConsumerRecord[bytes, bytes]]:
    """Read until ``want`` records came, then a few more empty polls (to see any extra)."""
    got: list[ConsumerRecord[bytes, bytes]] = []
    idle = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (len(got) < want or idle < idle_polls):
        batch = await c.getmany(timeout_ms=500)
        records = [r for rs in batch.values() for r in rs]
        got.extend(records)
        idle = idle + 1 if not records and len(got) >= want else 0
    return got


async def _partition_info(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    async with _admin(bootstrap) as admin:
        described: list[dict[str, Any]] = await admin.describe_topics([topic])
    return sorted(described[0]["partitions"], key=lambda p: p["partition"])


# -- the three-node cluster (first: see the module docstring) ---------------------


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ApacheKafka]:
    with ApacheKafka(brokers=3, log_dir=tmp_path / "cluster") as c:
        yield c


async def test_three_node_cluster_keeps_an_rf3_topic_through_a_kill_9_of_its_leader(cluster: ApacheKafka) -> None:
    topic = _name("rf3")
    await create_topics(cluster.bootstrap, [topic], partitions=1, replication_factor=3, timeout_ms=30_000)
    async with _admin(cluster.bootstrap) as admin:
        configs = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    entries = {e[0]: e[1] for e in configs[0].resources[0][4]}
    assert entries["min.insync.replicas"] == "2"
    (p0,) = await _partition_info(cluster.bootstrap, topic)
    assert sorted(p0["replicas"]) == [1, 2, 3] and sorted(p0["isr"]) == [1, 2, 3]

    async with _producer(cluster.bootstrap, request_timeout_ms=30_000) as p:
        for i in range(50):
            await p.send_and_wait(topic, f"before-{i}".encode())
    leader = p0["leader"] - 1  # node index = node.id - 1
    cluster.kill(leader)
    assert cluster.pid_of(leader) is None

    survivors = cluster.bootstrap  # the two live nodes only
    async with _producer(survivors, request_timeout_ms=30_000) as p:
        for i in range(50):  # acks=all with 2 of 3 in sync: min.insync.replicas holds
            await p.send_and_wait(topic, f"during-{i}".encode())
    (during,) = await _partition_info(survivors, topic)
    assert during["leader"] - 1 != leader and p0["leader"] not in during["isr"]

    await cluster.arestart(leader)
    deadline = time.monotonic() + SETTLE_S
    while sorted((await _partition_info(cluster.bootstrap, topic))[0]["isr"]) != [1, 2, 3]:
        assert time.monotonic() < deadline, f"node {leader} not back in the ISR; log:\n{cluster.log_tail(index=leader)}"
        await asyncio.sleep(0.5)

    async with _consumer(cluster.bootstrap, topic, group_id=_name("g")) as c:
        got = await _drain(c, 100)
    values = [r.value for r in got]
    assert values == [f"before-{i}".encode() for i in range(50)] + [f"during-{i}".encode() for i in range(50)]
    assert [r.offset for r in got] == list(range(100))


# -- one node ----------------------------------------------------------------------


async def test_auto_topic_creation_is_off(kafka: ApacheKafka) -> None:
    topic = _name("never-created")
    async with _producer(kafka.bootstrap, request_timeout_ms=2000) as p:
        with pytest.raises(UnknownTopicOrPartitionError):
            await p.send_and_wait(topic, b"x")
    async with _admin(kafka.bootstrap) as admin:
        assert topic not in await admin.list_topics()


@pytest.mark.parametrize("codec", CODECS, ids=[str(c) for c in CODECS])
async def test_idempotent_acks_all_each_codec_with_headers(kafka: ApacheKafka, codec: str | None) -> None:
    topic = _name(f"codec-{codec}")
    await create_topics(kafka.bootstrap, [topic], partitions=2)
    sent = [
        (f"k{i % 3}".encode(), f"v{i}-{codec}".encode() * 20, [("n", str(i).encode()), ("codec", str(codec).encode())]) for i in range(40)
    ]
    async with _producer(kafka.bootstrap, compression_type=codec) as p:
        futures = [await p.send(topic, value, key=key, headers=headers) for key, value, headers in sent]
        metas = await asyncio.gather(*futures)
    assert all(m.offset >= 0 for m in metas)
    async with _consumer(kafka.bootstrap, topic, group_id=_name("g")) as c:
        got = await _drain(c, len(sent))
    assert sorted((r.key, r.value, list(r.headers)) for r in got) == sorted((k, v, h) for k, v, h in sent)
    for part in (0, 1):
        offsets = [r.offset for r in got if r.partition == part]
        assert offsets == list(range(len(offsets)))


async def test_transactions_send_offsets_and_read_committed(kafka: ApacheKafka) -> None:
    source, sink = _name("tx-in"), _name("tx-out")
    await create_topics(kafka.bootstrap, [source, sink], partitions=1)
    async with _producer(kafka.bootstrap) as p:
        for i in range(10):
            await p.send_and_wait(source, f"in-{i}".encode())
    group = _name("tx-group")
    tp = TopicPartition(source, 0)
    async with _consumer(kafka.bootstrap, source, group_id=group, isolation_level="read_committed") as c:
        inputs = await _drain(c, 10)
        assert len(inputs) == 10
        async with _producer(kafka.bootstrap, transactional_id=_name("txid")) as tx:
            async with tx.transaction():  # the first five: outputs and input offsets in one transaction
                for r in inputs[:5]:
                    await tx.send(sink, b"out-" + r.value)
                await tx.send_offsets_to_transaction({tp: inputs[4].offset + 1}, group)
            await tx.begin_transaction()  # the rest: aborted, offsets with it
            for r in inputs[5:]:
                await tx.send(sink, b"out-" + r.value)
            await tx.send_offsets_to_transaction({tp: inputs[9].offset + 1}, group)
            await tx.abort_transaction()
        assert await c.committed(tp) == 5

    async with _consumer(kafka.bootstrap, sink, group_id=_name("rc"), isolation_level="read_committed") as rc:
        committed = await _drain(rc, 5)
    assert [r.value for r in committed] == [f"out-in-{i}".encode() for i in range(5)]
    async with _consumer(kafka.bootstrap, sink, group_id=_name("ru"), isolation_level="read_uncommitted") as ru:
        everything = await _drain(ru, 10)
    assert [r.value for r in everything] == [f"out-in-{i}".encode() for i in range(10)]


async def test_group_manual_commit_and_static_member_rejoin(kafka: ApacheKafka) -> None:
    topic = _name("group")
    await create_topics(kafka.bootstrap, [topic], partitions=3)
    async with _producer(kafka.bootstrap) as p:
        for i in range(30):
            await p.send_and_wait(topic, f"r{i}".encode(), partition=i % 3)
    group, instance = _name("static"), "member-a"
    async with _consumer(kafka.bootstrap, topic, group_id=group, group_instance_id=instance) as c:
        first = await _drain(c, 30)
        assert len(first) == 30
        assert c.assignment() == {TopicPartition(topic, i) for i in range(3)}
        await c.commit({TopicPartition(topic, i): 5 for i in range(3)})  # manual: part of what was read
    async with _admin(kafka.bootstrap) as admin:
        offsets = await admin.list_consumer_group_offsets(group)
    assert {tp.partition: om.offset for tp, om in offsets.items()} == {0: 5, 1: 5, 2: 5}

    # the same static member comes back (within the session timeout, no LeaveGroup
    # sent by aiokafka for a static member) and resumes at the commits
    async with _consumer(kafka.bootstrap, topic, group_id=group, group_instance_id=instance) as c:
        again = await _drain(c, 15)
        assert c.assignment() == {TopicPartition(topic, i) for i in range(3)}
    assert sorted(r.value for r in again) == sorted(f"r{i}".encode() for i in range(30) if i // 3 >= 5)


async def test_a_session_timeout_under_the_brokers_minimum_is_refused(kafka: ApacheKafka) -> None:
    """Apache Kafka refuses a group member whose session timeout is under
    ``group.min.session.timeout.ms`` (6000 by default); tansu accepts it. The
    dev config's 3000 ms (busguard/devconfig.py) therefore needs 6000+ here."""
    topic = _name("session")
    await create_topics(kafka.bootstrap, [topic], partitions=1)
    c = AIOKafkaConsumer(topic, bootstrap_servers=kafka.bootstrap, group_id=_name("g"), session_timeout_ms=3000, heartbeat_interval_ms=300)
    try:
        with pytest.raises(InvalidSessionTimeoutError):
            await c.start()
    finally:
        await c.stop()
    async with _consumer(kafka.bootstrap, topic, group_id=_name("g"), session_timeout_ms=6000) as ok:
        assert ok.assignment() == {TopicPartition(topic, 0)}


# -- the guard on Apache Kafka ----------------------------------------------------

# What the guard needs changed from the dev config (busguard/devconfig.py, made
# for tansu) on Apache Kafka's defaults: a session timeout the broker accepts
# (above); the idempotent producer, which tansu refuses, is switched on.
ON_KAFKA = {"BUSGUARD_KAFKA__SESSION_TIMEOUT_MS": "6000", "BUSGUARD_KAFKA__IDEMPOTENCE": "true"}


async def test_guard_kill_9_after_producing_then_restart_is_exactly_once(kafka: ApacheKafka, tmp_path: Path) -> None:
    """tests/integration/test_guard_crash.py's kill -9 at "produced" (outputs
    sent, offsets not committed), run by `busguard run` processes on Apache Kafka."""
    s = await make_setup(tmp_path, kafka.bootstrap, max_records=20)  # creates every topic: auto-creation is off
    victim = GuardProcess(s, fault="produced:3", env=ON_KAFKA)
    victim.wait_ready()
    records, expected = workload(tmp_path)
    coords = await produce(s.bootstrap, s.handoffs, records, key=b"planner")
    assert victim.wait(60) == -9, victim.tail()

    admitted = expected.count("admitted")

    def settled(c: Any) -> bool:  # every input decided and every admitted record downstream (re-emissions not counted)
        ids = {header(r, "busguard-decision-id") for r in c[s.downstream_handoffs]}
        return distinct_sources(s, c) == len(records) and len(ids) == admitted

    survivor = GuardProcess(s, env=ON_KAFKA)
    try:
        survivor.wait_ready()
        got = await collect(s.bootstrap, s.outputs, settled, timeout=120)
    finally:
        assert survivor.terminate() == 0, survivor.tail()
    check_exactly_once(s, got, coords, expected)
    assert await committed_offsets(s, s.handoffs) == len(records)
    assert len(got[s.audit]) > len(records)  # the batch in flight was emitted twice, byte for byte


# -- the operator's command --------------------------------------------------------


def test_busguard_kafka_command_runs_until_ctrl_c(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "busguard.cli", "kafka", "--port", "0", "--dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        for line in proc.stdout:
            lines.append(line)
            if "ready at" in line:
                break
        ready = [line for line in lines if "ready at" in line]
        assert ready and f"Apache Kafka {kafka_version()} ready at 127.0.0.1:" in ready[0], "".join(lines)
        jvm_pids = _jvm_children(tmp_path)
        assert len(jvm_pids) == 1, (jvm_pids, "".join(lines))
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, "".join(lines) + rest
        assert all(not Path(f"/proc/{pid}").exists() for pid in jvm_pids), "".join(lines) + rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _jvm_children(base: Path) -> list[int]:
    """The pids of JVMs whose working directory is under ``base`` (the command's nodes)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")).is_relative_to(base):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def test_busguard_kafka_without_java_says_what_to_install(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # no java (and no mvn) on PATH
    done = subprocess.run([sys.executable, "-m", "busguard.cli", "kafka"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "busguard: Java 17+ is needed to run Apache Kafka: install a JDK 17+ (Debian: apt-get install openjdk-17-jdk-headless)"
    )
