"""The readers' fuzz campaign, end to end on the embedded broker: an SDK
receiver among a few hundred hostile records.

A real `busguard run` forwards genuine tasks to the downstream topic;
between them a key-less writer (raw record batches, as no client library
writes them) puts there the fuzz campaign's hostile records
(tests/fuzz/generator.py) in every codec, half of the batches mutated
(broken CRCs, truncations, unknown codecs, corrupt compressed sections, lying
counts and offset deltas, junk), hostile variants of genuine forwards (null,
repeated, dropped and reordered busguard-* headers, truncated seals, altered
values: tests/fuzz/readers.py `variant`) and exact copies of them. A
receiver (`ActOnce` over `AdmittingConsumer.open`, tests/integration/
test_sdk_hostile.py `open_receiver`) acts on every admitted task exactly
once, across a restart, never raises, and commits the end of the topic.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, collect, make_setup
from busguard.protocol.identity import agent_id_for_key
from busguard.protocol.signing import public_key_from_seed
from busguard.sdk import ActOnce, SqliteDoneSet
from busguard.sdk.sender import Sender
from tests.fuzz.batches import CODECS, batch, record
from tests.fuzz.generator import NOW, Generator, seed
from tests.fuzz.readers import variant

from .test_sdk_hostile import forward_tasks, open_receiver

TASKS_PER_ROUND = 6


@dataclass
class _Counts:
    records: int = 0


@dataclass
class _Host:
    """What the generator signs its (unregistered, never forwarded) valid records with."""

    planner: Sender = field(default_factory=lambda: Sender(seed("planner"), clock_ms=lambda: NOW))
    receiver: str = agent_id_for_key(public_key_from_seed(seed("executor")))
    tasks: int = 0
    stats: _Counts = field(default_factory=_Counts)


async def write_hostile(s: Setup, gen: Generator, donors: list[tuple[bytes, list[tuple[str, bytes]]]], records: int) -> int:
    """At least `records` hostile records, in batches, by a writer with no
    key (as the batch is built: aiokafka sends it untouched); the records
    the broker took (tansu refuses some batches whole)."""
    written = 0
    producer = AIOKafkaProducer(bootstrap_servers=s.bootstrap, enable_idempotence=False, acks="all")
    await producer.start()
    try:
        while written < records:
            raw, n = hostile_batch(gen, donors)
            b = producer.create_batch()
            b._buffer, b._relative_offset = raw, n
            b.close()
            try:
                await (await producer.send_batch(b, s.downstream_handoffs, partition=0))
            except KafkaError:
                continue
            written += n
    finally:
        await producer.stop()
    return written


def hostile_batch(gen: Generator, donors: list[tuple[bytes, list[tuple[str, bytes]]]]) -> tuple[bytes, int]:
    """One batch of hostile records, hostile variants and exact copies of genuine forwards; mutated half the time."""
    rng = gen.rng
    recs = []
    for _ in range(rng.choice([1, 2, 5, 10, 20])):
        x = rng.random()
        if x < 0.1:
            v, h = rng.choice(donors)
            recs.append((None, v, [(k.encode(), val) for k, val in h]))  # an exact copy of a genuine forward
        elif x < 0.35:
            v, h = rng.choice(donors)
            recs.append(variant(rng, v, h, donors))
        else:
            recs.append(gen.hostile())
    codec = rng.choice(list(CODECS.values()))
    encoded = [record(i, k, v, h) for i, (k, v, h) in enumerate(recs)]
    raw = batch(encoded, codec=codec)
    if rng.random() < 0.45:
        raw = gen.mutate(raw, encoded, 0, codec)
    return raw, len(recs)


async def act_until(s: Setup, loop: ActOnce, done: SqliteDoneSet, acted: int, timeout: float = 120) -> tuple[int, int]:
    """Step until `acted` tasks were acted on and the committed position is
    at the end of the partition, then two more steps; (acted, refused).
    At, not equal: tansu's ListOffsets may answer below what a fetch returns
    (busguard/audit/reader.py), e.g. for a batch it stored whole whose
    header claims more offsets than it has yet counted."""
    tp = TopicPartition(s.downstream_handoffs, 0)
    consumer: Any = loop.inbox.consumer
    total_acted = refused = 0
    deadline, extra = time.monotonic() + timeout, 2
    while extra:
        step = await loop.step(timeout_ms=300)
        total_acted += step.acted
        refused += step.refused
        end = (await consumer.end_offsets([tp]))[tp]
        committed = await consumer.committed(tp)
        assert time.monotonic() < deadline, f"stalled: acted {total_acted}, refused {refused}, committed {committed} of {end}"
        if total_acted >= acted and committed is not None and committed >= end:
            extra -= 1
    return total_acted, refused


async def test_a_receiver_acts_once_on_every_task_among_hundreds_of_fuzzed_records(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1)
    guard = GuardProcess(s)
    guard.wait_ready()
    gen = Generator(_Host(), random.Random(35))
    group, db = f"{s.group}.executor", tmp_path / "executor.db"
    names = [f"t-{i}" for i in range(4 * TASKS_PER_ROUND)]
    hostile = 0
    try:
        await forward_tasks(s, names[:TASKS_PER_ROUND], TASKS_PER_ROUND)
        got = await collect(s.bootstrap, [s.downstream_handoffs], lambda c: len(c[s.downstream_handoffs]) >= TASKS_PER_ROUND)
        donors = [(r.value, list(r.headers)) for r in got[s.downstream_handoffs]]
        for r in range(1, 4):
            hostile += await write_hostile(s, gen, donors, 80)
            await forward_tasks(s, names[r * TASKS_PER_ROUND : (r + 1) * TASKS_PER_ROUND], (r + 1) * TASKS_PER_ROUND)
            if r == 2:  # a receiver reads the first half, then stops
                loop, done = await open_receiver(s, group, db)
                try:
                    first, _ = await act_until(s, loop, done, 3 * TASKS_PER_ROUND)
                finally:
                    await loop.inbox.close()
                    done.close()
                assert first == 3 * TASKS_PER_ROUND
        hostile += await write_hostile(s, gen, donors, 80)

        loop, done = await open_receiver(s, group, db)  # the restarted receiver reads the rest
        try:
            second, _ = await act_until(s, loop, done, TASKS_PER_ROUND)
            work = done.connection.execute("SELECT task_id FROM work").fetchall()
        finally:
            await loop.inbox.close()
            done.close()
    finally:
        assert guard.terminate() == 0, guard.tail()
    print(f"{hostile} hostile records written; acted {first} + {second}")
    assert hostile >= 300
    assert second == TASKS_PER_ROUND
    assert sorted(t for (t,) in work) == sorted(names)  # each admitted task acted on once, nothing else
