"""How the batch loop reads (runtime/loop.py, "Reading"), on the real broker.

A consumer polled once per batch leaves aiokafka's fetch for a whole batch
before it asks the broker for more, so records waited three to four batch
times at moderate load (issue 13). The loop now keeps polling into its own
queue while a batch is in hand, bounded at one batch. These tests hold a
batch open with a stage that waits for the test, produce while it waits,
and check which records the following batches get. No time is asserted:
every wait is for a condition, with a generous deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from busguard.config import load_config
from busguard.devtools.broker import EmbeddedBroker
from busguard.runtime.loop import BatchLoop
from busguard.runtime.ops import Metrics
from busguard.runtime.outputs import Output

from .guardkit import make_setup


class HeldStage:
    """A stage that records each batch's offsets and holds its first batch
    until `release` is set; it emits nothing."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.release = asyncio.Event()

    async def process(self, records: Sequence[Any]) -> list[Output]:
        self.batches.append([r.offset for r in records])
        if len(self.batches) == 1:
            await self.release.wait()
        return []

    async def housekeeping(self) -> None:
        return None


async def _until(cond: Callable[[], bool], what: str, task: asyncio.Task[None], timeout: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if task.done():
            task.result()
            raise AssertionError(f"loop ended while waiting for {what}")
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not reached: {what}")
        await asyncio.sleep(0.02)


async def _run(tmp_path: Path, broker: EmbeddedBroker, max_records: int) -> tuple[BatchLoop, HeldStage, asyncio.Task[None], AIOKafkaProducer, str]:
    setup = await make_setup(tmp_path, broker.bootstrap, partitions=1, max_records=max_records)
    cfg = load_config(setup.config)
    stage = HeldStage()
    loop = BatchLoop(cfg, stage, topics=[setup.handoffs], group_id=setup.group, role="guard", metrics=Metrics())
    task = asyncio.create_task(loop.run())
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False, acks="all")
    await producer.start()
    return loop, stage, task, producer, setup.handoffs


async def _finish(loop: BatchLoop, task: asyncio.Task[None], producer: AIOKafkaProducer) -> None:
    await producer.stop()
    loop.request_stop()
    await asyncio.wait_for(task, 60)


async def test_records_read_while_a_batch_is_held_all_join_the_next_batch(broker: EmbeddedBroker, tmp_path: Path) -> None:
    loop, stage, task, producer, topic = await _run(tmp_path, broker, max_records=100)
    try:
        await (await producer.send(topic, b"r0", key=b"k"))
        await _until(lambda: len(stage.batches) == 1, "the first batch", task)
        # Three records, one at a time, each read by the loop before the next
        # is sent: a loop that polled once per batch would have taken only
        # the first of them into its read-ahead batch.
        for i in range(1, 4):
            await (await producer.send(topic, b"r%d" % i, key=b"k"))
            await _until(lambda i=i: loop._fetched_count == i, f"{i} record(s) queued behind the held batch", task)
        stage.release.set()
        await _until(lambda: sum(map(len, stage.batches)) == 4, "all four records processed", task)
        assert stage.batches == [[0], [1, 2, 3]]
    finally:
        stage.release.set()
        await _finish(loop, task, producer)


async def test_the_loop_reads_at_most_one_batch_ahead(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """The queue is bounded: a held batch stops the polls after one more
    batch's worth, so a stuck loop is still seen as not polling."""
    loop, stage, task, producer, topic = await _run(tmp_path, broker, max_records=2)
    try:
        await (await producer.send(topic, b"r0", key=b"k"))
        await _until(lambda: len(stage.batches) == 1, "the first batch", task)
        await asyncio.gather(*[await producer.send(topic, b"r%d" % i, key=b"k") for i in range(1, 7)])
        await _until(lambda: loop._fetched_count == 2, "one batch queued", task)
        await asyncio.sleep(1.0)  # room for the drain task to overreach, if it would
        assert loop._fetched_count == 2
        stage.release.set()
        await _until(lambda: sum(map(len, stage.batches)) == 7, "all seven records processed", task)
        assert [o for b in stage.batches for o in b] == list(range(7))
        assert all(len(b) <= 2 for b in stage.batches)
    finally:
        stage.release.set()
        await _finish(loop, task, producer)
