"""How the embedded broker's fetch cost grows with the batches a partition holds.

tansu's memory storage keeps every produced batch as an object of its own.
This fills one partition with single-record batches, step by step, and after
each step fetches the newest 2 000 of them from a consumer assigned to that
partition, measuring the broker's CPU time (from /proc) per record fetched;
a second partition holding 2 000 batches throughout is fetched the same way
for comparison. It is why benchmarks/compare.py's steady runs batch their
load (`--linger-ms`, docs/notes-broker.md "Fetch cost grows with the
batches a partition holds").

    .venv/bin/python benchmarks/broker_fetch_scaling.py [--step 10000] [--steps 4]

Prints one line per step and, last, one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: E402
from aiokafka.structs import TopicPartition  # noqa: E402

from busguard.devtools.broker import EmbeddedBroker  # noqa: E402
from busguard.runtime.topics import create_topics  # noqa: E402

TOPIC = "scaling"
FETCHED = 2_000


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def produce(producer: AIOKafkaProducer, partition: int, n: int) -> None:
    """`n` batches of one record each: each becomes one stored object."""
    pending = []
    for _ in range(n):
        batch = producer.create_batch()
        batch.append(key=None, value=b"y" * 1000, timestamp=None)
        batch.close()
        pending.append(await producer.send_batch(batch, TOPIC, partition=partition))
        if len(pending) >= 500:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)


async def fetch_tail(broker: EmbeddedBroker, partition: int, start: int) -> dict[str, float]:
    """Broker CPU and wall time per record to fetch `FETCHED` records from `start`."""
    assert broker.pid is not None
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, fetch_max_wait_ms=20, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(TOPIC, partition)
        consumer.assign([tp])
        consumer.seek(tp, start)
        cpu0, t0, got = cpu_s(broker.pid), time.perf_counter(), 0
        while got < FETCHED:
            batch = await consumer.getmany(timeout_ms=200)
            got += sum(len(v) for v in batch.values())
        return {"broker_us": (cpu_s(broker.pid) - cpu0) / got * 1e6, "wall_us": (time.perf_counter() - t0) / got * 1e6}
    finally:
        await consumer.stop()


async def main(args: argparse.Namespace) -> int:
    broker = await EmbeddedBroker().astart()
    steps: list[dict[str, Any]] = []
    try:
        await create_topics(broker.bootstrap, [TOPIC], partitions=2)
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False, linger_ms=0)
        await producer.start()
        try:
            await produce(producer, 1, FETCHED)
            held = 0
            for _ in range(args.steps):
                await produce(producer, 0, args.step)
                held += args.step
                big = await fetch_tail(broker, 0, held - FETCHED)
                small = await fetch_tail(broker, 1, 0)
                steps.append(
                    {
                        "batches": held,
                        "broker_us_per_record": round(big["broker_us"], 1),
                        "wall_us_per_record": round(big["wall_us"], 1),
                        "small_partition_broker_us": round(small["broker_us"], 1),
                    }
                )
                print(f"partition holding {held:>7,} batches: fetching its newest {FETCHED:,} cost the broker {big['broker_us']:6.1f} µs per record "
                      f"({big['wall_us']:.1f} µs wall); a partition of {FETCHED:,}: {small['broker_us']:.1f} µs", flush=True)  # fmt: skip
        finally:
            await producer.stop()
    finally:
        await broker.astop()
    print(json.dumps({"bench": "broker_fetch_scaling", "fetched": FETCHED, "steps": steps}))
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--step", type=int, default=10_000, help="single-record batches added to the partition per step")
    p.add_argument("--steps", type=int, default=4)
    sys.exit(asyncio.run(main(p.parse_args())))
