"""The embedded broker does what busguard's runtime relies on (real tansu, no mocks)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.structs import ConsumerRecord, TopicPartition

from busguard.devtools.broker import EmbeddedBroker

from .conftest import TopicFactory

# the embedded broker's contract with aiokafka (Apache Kafka's: test_apache_kafka.py)
pytestmark = [pytest.mark.integration, pytest.mark.brokers("tansu")]

# Fast group membership for tests. tansu honours the session timeout and holds
# a JoinGroup for max(1 s, session_timeout / 2); see docs/notes-broker.md.
GROUP_SETTINGS: dict[str, Any] = {
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
    "session_timeout_ms": 2000,
    "heartbeat_interval_ms": 300,
}


@asynccontextmanager
async def producer(broker: EmbeddedBroker) -> AsyncIterator[AIOKafkaProducer]:
    p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False, acks="all")
    await p.start()
    try:
        yield p
    finally:
        await p.stop()


@asynccontextmanager
async def consumer(broker: EmbeddedBroker, topic: str, group: str, **kw: Any) -> AsyncIterator[AIOKafkaConsumer]:
    c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, **GROUP_SETTINGS)
    c.subscribe([topic], **kw)
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


async def produce(broker: EmbeddedBroker, topic: str, n: int, partitions: int) -> list[tuple[int, bytes, list[tuple[str, bytes]]]]:
    """Send n records round-robin over partitions; return (partition, value, headers)."""
    sent = []
    async with producer(broker) as p:
        futures = []
        for i in range(n):
            headers = [("seq", str(i).encode()), ("kind", b"smoke"), ("empty", b"")]
            value = f"value-{i}".encode()
            part = i % partitions
            futures.append(await p.send(topic, value, key=b"k%d" % i, partition=part, headers=headers))
            sent.append((part, value, headers))
        await asyncio.gather(*futures)
    return sent


async def drain(c: AIOKafkaConsumer, n: int, timeout: float = 20.0) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        assert time.monotonic() < deadline, f"got {len(got)} of {n} records"
        for records in (await c.getmany(timeout_ms=200)).values():
            got.extend(records)
    return got


async def test_headers_and_values_round_trip(broker: EmbeddedBroker, topic_factory: TopicFactory, group_id: str) -> None:
    topic = await topic_factory("roundtrip", partitions=4)
    sent = await produce(broker, topic, 100, partitions=4)

    async with consumer(broker, topic, group_id) as c:
        got = await drain(c, 100)
        await c.commit()
        committed = {p: await c.committed(TopicPartition(topic, p)) for p in range(4)}

    assert committed == {0: 25, 1: 25, 2: 25, 3: 25}
    by_seq = {int(dict(r.headers)["seq"]): r for r in got}
    assert sorted(by_seq) == list(range(100))
    for i, (part, value, headers) in enumerate(sent):
        r = by_seq[i]
        assert isinstance(r.headers, tuple)  # consumed headers are a tuple...
        assert list(r.headers) == headers  # ...of (str, bytes), order kept
        assert (r.partition, r.value, r.key) == (part, value, b"k%d" % i)

    # Re-sending consumed headers needs a list: aiokafka rejects the tuple.
    async with producer(broker) as p:
        with pytest.raises(TypeError):
            await p.send(topic, b"x", headers=got[0].headers)
        await (await p.send(topic, b"x", headers=list(got[0].headers)))


class CommitOnRevoke(ConsumerRebalanceListener):  # type: ignore[misc]
    """Commits what the consumer has processed before its partitions go away."""

    def __init__(self) -> None:
        self.consumer: AIOKafkaConsumer | None = None
        self.processed: dict[TopicPartition, int] = {}  # next offset to read
        self.revoked: list[set[TopicPartition]] = []
        self.assigned: list[set[TopicPartition]] = []
        self.committed_on_revoke: dict[TopicPartition, int] = {}

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.revoked.append(set(revoked))
        assert self.consumer is not None
        offsets = {tp: off for tp, off in self.processed.items() if tp in revoked}
        if offsets:
            await self.consumer.commit(offsets)  # raises on failure; see below
            self.committed_on_revoke.update(offsets)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned.append(set(assigned))


async def test_two_members_split_partitions_and_commit_on_revoke(
    broker: EmbeddedBroker, topic_factory: TopicFactory, group_id: str
) -> None:
    topic = await topic_factory("split", partitions=4)
    await produce(broker, topic, 40, partitions=4)
    all_tps = {TopicPartition(topic, p) for p in range(4)}

    first = CommitOnRevoke()
    async with consumer(broker, topic, group_id, listener=first) as c1:
        first.consumer = c1
        for r in await drain(c1, 40):  # the only member: owns all 4, processes all 40
            first.processed[TopicPartition(r.topic, r.partition)] = r.offset + 1
        assert c1.assignment() == all_tps

        stop = asyncio.Event()

        async def keep_polling() -> int:
            # A member must keep calling getmany(): the rebalance runs in the
            # background, but records are only handed out between rebalances.
            n = 0
            while not stop.is_set():
                n += sum(len(v) for v in (await c1.getmany(timeout_ms=100)).values())
            return n

        poller = asyncio.create_task(keep_polling())
        second = CommitOnRevoke()
        async with consumer(broker, topic, group_id, listener=second) as c2:
            second.consumer = c2
            deadline = time.monotonic() + 20
            late: list[ConsumerRecord] = []
            while not (len(c1.assignment()) == 2 and len(c2.assignment()) == 2):
                assert time.monotonic() < deadline, (c1.assignment(), c2.assignment())
                for records in (await c2.getmany(timeout_ms=100)).values():
                    late.extend(records)
            late.extend(await drain_for(c2, 1.0))
            stop.set()
            late_c1 = await poller

            assert c1.assignment() | c2.assignment() == all_tps
            assert not c1.assignment() & c2.assignment()
            # c1 gave up all 4 (eager protocol) and committed them in the callback
            assert all_tps in first.revoked
            assert first.committed_on_revoke == {tp: 10 for tp in all_tps}
            for tp in all_tps:
                assert await c2.committed(tp) == 10
            # so nobody re-reads anything after the rebalance
            assert late == [] and late_c1 == 0
            assert second.assigned[-1] == c2.assignment()


async def drain_for(c: AIOKafkaConsumer, seconds: float) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for records in (await c.getmany(timeout_ms=100)).values():
            got.extend(records)
    return got


async def test_committed_offsets_survive_consumer_restart(broker: EmbeddedBroker, topic_factory: TopicFactory, group_id: str) -> None:
    topic = await topic_factory("restart", partitions=2)
    await produce(broker, topic, 20, partitions=2)  # offsets 0..9 in each partition
    tps = [TopicPartition(topic, p) for p in range(2)]

    async with consumer(broker, topic, group_id) as c:
        await drain(c, 20)
        await c.commit({tps[0]: 4, tps[1]: 7})  # processed 0..3 and 0..6 only
    # stop() does not commit (auto-commit is off): the explicit commit stands.

    async with consumer(broker, topic, group_id) as c:
        assert [await c.committed(tp) for tp in tps] == [4, 7]
        resumed = await drain(c, 6 + 3)
        assert await drain_for(c, 0.5) == []
    firsts = {p: min(r.offset for r in resumed if r.partition == p) for p in range(2)}
    assert firsts == {0: 4, 1: 7}
    assert sorted((r.partition, r.offset) for r in resumed) == ([(0, o) for o in range(4, 10)] + [(1, o) for o in range(7, 10)])


# A group member in another process: consumes, commits offset 5 on every
# partition it reads, and prints its state as one JSON line per poll.
VICTIM = """
import asyncio, json, sys
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition
bootstrap, topic, group, settings = sys.argv[1:5]
async def main():
    c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, **json.loads(settings))
    await c.start()
    committed = set()
    while True:
        for tp, records in (await c.getmany(timeout_ms=100)).items():
            if tp.partition not in committed and any(r.offset == 4 for r in records):
                await c.commit({tp: 5})
                committed.add(tp.partition)
        mine = sorted(tp.partition for tp in c.assignment())
        print(json.dumps({"assigned": mine, "committed": sorted(committed)}), flush=True)
asyncio.run(main())
"""


async def test_killed_member_partitions_move_to_survivor_from_last_commit(
    broker: EmbeddedBroker, topic_factory: TopicFactory, group_id: str
) -> None:
    topic = await topic_factory("kill9", partitions=4)
    await produce(broker, topic, 40, partitions=4)  # offsets 0..9 in each partition
    victim = await asyncio.create_subprocess_exec(
        sys.executable, "-c", VICTIM, broker.bootstrap, topic, group_id, json.dumps(GROUP_SETTINGS),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    state: dict[str, list[int]] = {}

    async def follow() -> None:
        assert victim.stdout is not None
        while line := await victim.stdout.readline():
            state.update(json.loads(line))

    follower = asyncio.create_task(follow())
    try:
        deadline = time.monotonic() + 30
        while state.get("committed") != [0, 1, 2, 3]:  # victim alone, commits 5 everywhere
            assert time.monotonic() < deadline and victim.returncode is None, state
            await asyncio.sleep(0.05)

        async with consumer(broker, topic, group_id) as survivor:
            seen: dict[int, list[int]] = {}

            async def poll(until: float) -> None:
                while time.monotonic() < until:
                    for tp, records in (await survivor.getmany(timeout_ms=50)).items():
                        seen.setdefault(tp.partition, []).extend(r.offset for r in records)

            while not (len(survivor.assignment()) == 2 and len(state["assigned"]) == 2):
                assert time.monotonic() < deadline, (survivor.assignment(), state)
                await poll(time.monotonic() + 0.05)
            victims = state["assigned"]
            await poll(time.monotonic() + 0.3)
            seen.clear()

            os.kill(victim.pid, signal.SIGKILL)
            killed_at = time.monotonic()
            await victim.wait()
            while len(survivor.assignment()) < 4:
                assert time.monotonic() - killed_at < 20, "no takeover after kill -9"
                await poll(time.monotonic() + 0.05)
            takeover = time.monotonic() - killed_at
            await poll(time.monotonic() + 1.0)

        # the dead member's commits stand: the survivor resumes right after them
        assert {p: sorted(seen.get(p, [])) for p in victims} == {p: [5, 6, 7, 8, 9] for p in victims}
        # session 2 s + join window 1 s (+ heartbeat); measured ~3 s
        assert takeover < 10, takeover
    finally:
        if victim.returncode is None:
            victim.kill()
            await victim.wait()
        follower.cancel()
