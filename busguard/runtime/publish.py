"""Step 2 of the batch loop (runtime/loop.py): a batch's outputs to their
topics' partitions, as few produce requests as the partitions they go to,
small batches uncompressed."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import murmur2
from aiokafka.producer.message_accumulator import BatchBuilder

from busguard.runtime.outputs import Output

#: A partition's outputs of a batch smaller than this go uncompressed.
#: Every compressed record batch pays for a fresh codec context: zstd
#: (busguard's default) took 125-225 µs for a 1.2 KB batch, lz4's frame
#: 55 µs, for ratios of 0.43 and 0.63, while a 250 KB batch took 510 µs.
#: At an agent's rate a batch holds a record or two and each output
#: partition got such a batch; these now go as they are (a topic with the
#: broker's default compression.type=producer stores each batch as sent,
#: and every reader reads both). Large batches keep the configured codec.
#: Measured: docs/performance.md, "What each design choice bought".
UNCOMPRESSED_BELOW = 16 * 1024


def small(outs: Sequence[Output]) -> bool:
    """Whether the records' own bytes (keys, values, headers), about what
    compression would act on, stay under UNCOMPRESSED_BELOW; stops counting
    once they do not."""
    n = 0
    for o in outs:
        n += len(o.key or b"") + len(o.value or b"") + sum(len(k) + len(v or b"") for k, v in o.headers)
        if n >= UNCOMPRESSED_BELOW:
            return False
    return True


def uncompressed_batch(producer: AIOKafkaProducer) -> BatchBuilder:
    """`producer.create_batch()`, but without compression (aiokafka has no
    per-batch codec of its own): the same batch size and transactional flag."""
    acc = producer._message_accumulator
    txn = acc._txn_manager
    return BatchBuilder(
        acc._batch_size,
        0,
        is_transactional=txn is not None and txn.transactional_id is not None,
        key_serializer=producer._key_serializer,
        value_serializer=producer._value_serializer,
    )


@functools.lru_cache(maxsize=65_536)
def key_partition(key: bytes, count: int) -> int:
    """The Java client's partitioner (murmur2), so keyed outputs co-partition
    with anything else producing by key. Cached: aiokafka's murmur2 is pure
    Python and keys (sender ids) repeat."""
    return int(murmur2(key) & 0x7FFFFFFF) % count


class Publisher:
    def __init__(self) -> None:
        #: each output topic's partitions, looked up once
        self._partitions: dict[str, list[int]] = {}

    async def publish(self, producer: AIOKafkaProducer, outputs: Sequence[Output]) -> None:
        """Produce in per-partition batches (one request per partition, no
        per-record futures), keeping each partition's order; raise if any
        delivery fails.

        The outputs are grouped by partition first and each partition's
        batch is filled in one go: a record batch's buffer grows as records
        are appended, and with a dozen of them growing in turn (every output
        topic's partitions) none could grow in place, so appending cost
        three to six times what it costs into one buffer at a time (about
        5 µs more per output, measured in `busguard run`). The records of a
        partition, and so the batches sent to it, are the same either way."""
        slots: dict[tuple[str, int], list[Output]] = {}
        for o in outputs:
            parts = self._partitions.get(o.topic)
            if parts is None:
                parts = self._partitions[o.topic] = sorted(await producer.partitions_for(o.topic))
            if o.spread is not None:
                partition = parts[o.spread % len(parts)]
            else:
                partition = parts[key_partition(o.key or b"", len(parts))]
            slot = slots.get((o.topic, partition))
            if slot is None:
                slots[(o.topic, partition)] = [o]
            else:
                slot.append(o)
        deliveries = []
        for (topic, partition), outs in slots.items():
            batch = uncompressed_batch(producer) if small(outs) else producer.create_batch()
            for o in outs:
                if batch.append(key=o.key, value=o.value, timestamp=o.timestamp_ms, headers=o.headers) is None:
                    batch.close()
                    deliveries.append(await producer.send_batch(batch, topic, partition=partition))
                    batch = producer.create_batch()
                    if batch.append(key=o.key, value=o.value, timestamp=o.timestamp_ms, headers=o.headers) is None:
                        raise RuntimeError(f"record for {topic} larger than the producer batch size")
            # Closed: aiokafka sends a closed batch at once instead of
            # holding it for the producer's linger_ms (nothing more joins it).
            batch.close()
            deliveries.append(await producer.send_batch(batch, topic, partition=partition))
        await asyncio.gather(*deliveries)
