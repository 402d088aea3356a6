"""The I/O half of busguard.runtime.stuck, for one aiokafka consumer.

Shared by the batch loop (`busguard run`, `busguard reconcile`) and the SDK's
`AdmittingConsumer`: after a poll, it feeds the pure tracker each assigned
partition that returned nothing (its position, the broker's high watermark
capped by the last stable offset, and the time of the broker's last answer),
and carries out what the tracker says: a refetch from the offset before
(seek, with a floor the tolerant decoder keeps nothing below), or a skip
(seek past the offset; the caller decides the returned placeholder). It
looks at most every quarter of the stuck time, so a quiet poll costs a
clock read. Whoever owns the consumer calls `forget` for partitions that
are revoked or assigned: a floor must never outlive the assignment it was
set under, or a position reset to an older committed offset would drop
records below it.

A partition whose records the client holds, fetched and not yet handed out,
is not stuck: it is queued behind the other partitions' records (aiokafka
hands a poll's `max_records` out partition by partition). On Apache Kafka a
backlog (a guard started behind, or slower than its input) fills the client
with a fetch's worth of records per partition, and the last partitions
waited longer than the stuck time: they were refetched, and then one real
record of each was decided as unfetchable (measured with
benchmarks/compare.py, 20 000 records over 8 partitions). Such a partition
is passed over like one the poll returned, and its position is judged again
once the client has handed its records out.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer, TopicPartition

from busguard.runtime.stuck import Refetch, Rewound, StuckPartitions, unfetchable
from busguard.runtime.tolerant_fetch import floors_of
from busguard.runtime.undecodable import Undecodable

__all__ = ["Unsticker", "stuck_after_s"]

log = structlog.get_logger(__name__)


def stuck_after_s(fetch_max_wait_ms: int) -> float:
    """How long a position may stand still below the broker's end: well
    past any fetch's own wait, and never under 2 s."""
    return max(2.0, fetch_max_wait_ms / 50)


class Unsticker:
    def __init__(self, consumer: AIOKafkaConsumer, after_s: float) -> None:
        self.consumer = consumer
        self.tracker = StuckPartitions(after_s)
        self._floors = floors_of(consumer)  # None for a consumer that does not decode tolerantly
        self._next = 0.0

    async def check(self, fetched: Mapping[TopicPartition, Any]) -> list[tuple[TopicPartition, Undecodable]]:
        """The offsets to decide as skipped, after a poll that returned `fetched`."""
        now = time.monotonic()
        if now < self._next:
            return []
        self._next = now + self.tracker.after_s / 4
        consumer = self.consumer
        skipped: list[tuple[TopicPartition, Undecodable]] = []
        for tp in consumer.assignment():
            if tp in fetched:
                continue
            position = await consumer.position(tp)
            if tp in self._held_records():
                continue  # queued in the client behind other partitions' records, not stuck
            high, stable = consumer.highwater(tp), consumer.last_stable_offset(tp)
            if high is not None and stable is not None:
                high = min(high, stable)  # records behind an open transaction are not stuck, only pending
            action = self.tracker.observe(tp.topic, tp.partition, position, high, consumer.last_poll_timestamp(tp), now)
            where = f"{tp.topic}:{tp.partition}"
            if action is None:
                continue
            if isinstance(action, Rewound):
                log.error(
                    "log end moved back below the decided position: records the broker stores at these offsets get no decision",
                    partition=where,
                    offsets=f"{action.high_watermark}-{action.position - 1}",
                )
            elif isinstance(action, Refetch):
                if self._floors is None:
                    continue  # a consumer that cannot keep a floor would read the offset before again
                self._floors[(tp.topic, tp.partition)] = action.floor
                consumer.seek(tp, action.start)
                log.warning(
                    "partition stuck: fetching again from the offset before", partition=where, position=position, high_watermark=high
                )
            else:
                consumer.seek(tp, action.offset + 1)
                skipped.append((tp, unfetchable(action)))
                log.error("offset unfetchable: decided as a span of one", partition=where, offset=action.offset, high_watermark=high)
        return skipped

    def _held_records(self) -> Mapping[TopicPartition, Any]:
        """Read after the last await before a partition is judged: aiokafka
        files a fetch answer's records and its high watermark in one step,
        so no answer can be counted whose records are not seen here."""
        fetcher = getattr(self.consumer, "_fetcher", None)
        held = getattr(fetcher, "_records", None)
        return held if held is not None else {}

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.tracker.forget(tp.topic, tp.partition)
            if self._floors is not None:
                self._floors.pop((tp.topic, tp.partition), None)
