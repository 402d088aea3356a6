"""The demo's agents and its eyes: produce the scenario, read every output topic."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import msgspec

from busguard.config import Config
from busguard.demo.scenario import Step
from busguard.protocol.attestation import HEADER_DECISION_ID
from busguard.protocol.auditbatch import AuditBatchError, audit_records_of
from busguard.protocol.records import Decision, Reply, Resolution, audit_decoder
from busguard.runtime.undecodable import Undecodable


class Tap:
    """Reads output topics from the beginning, without a consumer group.

    tansu's end offsets are unreliable after batched produces
    (docs/notes-broker.md), so "done" is decided by what has arrived,
    with a timeout, never by comparing against end offsets.
    """

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.downstream = sorted({r.downstream for r in cfg.routes})
        t = cfg.topics
        self.topics = [*self.downstream, t.reconciliation, t.dead_letter, t.audit, t.replies]
        self.decisions: dict[tuple[str, int, int], Decision] = {}
        self.resolutions: dict[tuple[str, str], Resolution] = {}  # (escalation id, stage)
        self.replies: dict[str, Reply] = {}  # escalation id -> reply
        self.placed: dict[str, tuple[str, Any]] = {}  # decision id -> (topic, record) of its primary output
        self._consumer: Any = None

    async def start(self) -> None:
        from aiokafka import TopicPartition

        from busguard.runtime.clients import partitions_of, reader

        parts = await partitions_of(self.cfg, self.topics, name="tap")
        for _ in range(50):  # the topics were just created: wait until metadata shows them all
            if all(t in parts for t in self.topics):
                break
            await asyncio.sleep(0.1)
            parts = await partitions_of(self.cfg, self.topics, name="tap")
        tps = [TopicPartition(topic, p) for topic in self.topics for p in parts.get(topic, ())]
        consumer = reader(self.cfg, name="tap")
        await consumer.start()
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        self._consumer = consumer

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()

    def _take(self, record: Any) -> None:
        if type(record) is Undecodable:  # nothing the demo sends; a foreign record is not the demo's to judge
            return
        t = self.cfg.topics
        if record.topic == t.audit:
            try:
                recs = [audit_decoder.decode(v or b"") for v, _ in audit_records_of(record.value, record.headers)]
            except (msgspec.MsgspecError, AuditBatchError):
                return
            for rec in recs:
                if isinstance(rec, Decision):
                    self.decisions[(rec.source.topic, rec.source.partition, rec.source.offset)] = rec
                else:
                    self.resolutions[(rec.escalation_id, rec.stage)] = rec
        elif record.topic == t.replies:
            try:
                reply = msgspec.json.decode(record.value, type=Reply)
            except msgspec.MsgspecError:
                return
            self.replies[reply.escalation_id] = reply
        else:
            ids = [v for k, v in record.headers if k == HEADER_DECISION_ID]
            if ids:
                self.placed.setdefault(ids[0].decode(), (record.topic, record))

    async def until(self, done: Callable[[], bool], timeout_s: float, failure: Callable[[], str | None] = lambda: None) -> bool:
        deadline = time.monotonic() + timeout_s
        while not done():
            failed = failure()
            if failed is not None:
                raise RuntimeError(failed)
            if time.monotonic() > deadline:
                return False
            batch = await self._consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for r in records:
                    self._take(r)
        return True

    def decision(self, step: Step) -> Decision | None:
        return self.decisions.get((step.topic, step.partition, step.offset))


async def produce(cfg: Config, steps: list[Step]) -> None:
    from busguard.runtime.clients import producer as make_producer

    topics = {r.name: r.inputs[0] for r in cfg.routes}
    producer = make_producer(cfg, name="agents")
    await producer.start()
    try:
        for s in steps:  # one at a time, in order: keyed by sender, so each sender's records stay in order
            meta = await producer.send_and_wait(topics[s.route], value=s.value, key=s.key, headers=s.headers)
            s.topic, s.partition, s.offset = meta.topic, meta.partition, meta.offset
    finally:
        await producer.stop()
