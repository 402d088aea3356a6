"""`busguard run`: the consume → decide → persist → produce → commit loop.

The batch commit protocol (DESIGN principle 3), in this order and why:

1. decide the batch            pure; signatures verified across a thread pool
2. persist state + decisions   one transaction, so a crash after this point
                               re-derives the same decision from the store
3. produce every output,       an undelivered output is an error: the batch
   await every delivery        is not committed and the process exits
4. commit offsets              never past an undelivered output

A record re-delivered after a crash finds its decision by source coordinates
(step 2 of the previous life) and is re-emitted byte for byte with the same
decision id; it is never mistaken for a replay of itself. On this broker
(tansu) Kafka transactions are not available, so delivery is at-least-once
with deterministic re-emission; consumers dedupe on `busguard-decision-id`.

Rebalances: the loop holds a lock for the whole of steps 1-4, and
`on_partitions_revoked` waits for it (within a budget), so by the time a
partition moves every batch read from it is either committed or not emitted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError

from busguard.admission.batch import Input, admit_batch
from busguard.admission.decide import Candidate, verify
from busguard.admission.types import Coordinates, Decision
from busguard.config import Config
from busguard.protocol.attestation import attest, decision_bytes, seal
from busguard.protocol.keyfile import Identity
from busguard.protocol.keys import KeyRegistry, KeyWindow
from busguard.runtime.faults import Faults
from busguard.runtime.ops import Liveness, Metrics, OpsServer
from busguard.runtime.outputs import Sealed, outputs_for
from busguard.state.base import StateStore

log = structlog.get_logger(__name__)


def _chunks(items: Sequence[Any], n: int) -> list[Sequence[Any]]:
    size = max(1, -(-len(items) // n))
    return [items[i : i + size] for i in range(0, len(items), size)]


def _names(tps: set[TopicPartition]) -> list[str]:
    return sorted(f"{tp.topic}:{tp.partition}" for tp in tps)


class _Revocations(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, guard: Guard) -> None:
        self.guard = guard

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        started = time.monotonic()
        budget = self.guard.cfg.batch.revoke_budget_ms / 1000
        try:
            await asyncio.wait_for(self.guard.lock.acquire(), budget)
        except TimeoutError:
            log.warning("revocation budget exceeded; in-flight batch will be re-delivered to the new owner", budget_s=budget)
            return
        self.guard.lock.release()
        log.info("partitions revoked after the in-flight batch committed", partitions=_names(revoked), waited_s=round(time.monotonic() - started, 3))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        log.info("partitions assigned", partitions=_names(assigned))


class Guard:
    def __init__(
        self,
        cfg: Config,
        *,
        registry: KeyRegistry,
        identity: Identity,
        store: StateStore,
        metrics: Metrics | None = None,
        clock_ms: Callable[[], int] | None = None,
        faults: Faults | None = None,
    ) -> None:
        self.cfg = cfg
        self.registry = registry
        self.identity = identity
        self.store = store
        self.metrics = metrics or Metrics()
        self.clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self.faults = faults or Faults(None)
        self.policy = cfg.policy()
        self.lock = asyncio.Lock()
        self.liveness = Liveness(stall_after_s=max(30.0, cfg.kafka.max_poll_interval_ms / 1000))
        self._stop = asyncio.Event()
        self._pool = ThreadPoolExecutor(cfg.batch.verify_threads, thread_name_prefix="busguard-crypto")
        self.ops_port: int | None = None

    def request_stop(self) -> None:
        """SIGTERM: finish the batch in hand, commit it, leave the group."""
        if not self._stop.is_set():
            log.info("stop requested; draining")
        self.liveness.stopping = True
        self._stop.set()

    # -- crypto across threads (PyNaCl releases the GIL) -------------------

    def _verify_many(self, candidates: Sequence[Candidate]) -> list[KeyWindow | None]:
        parts = _chunks(candidates, self.cfg.batch.verify_threads)
        return [k for part in self._pool.map(lambda cs: [verify(c) for c in cs], parts) for k in part]

    def _seal_one(self, d: Decision) -> Sealed:
        body = decision_bytes(d)
        att = attest(d, body, self.identity.agent_id)
        return Sealed(d, body, att, seal(self.identity.seed, att))

    def _seal_many(self, decisions: Sequence[Decision]) -> list[Sealed]:
        parts = _chunks(decisions, self.cfg.batch.verify_threads)
        return [s for part in self._pool.map(lambda ds: [self._seal_one(d) for d in ds], parts) for s in part]

    def _decide_and_persist(self, inputs: list[Input], now_ms: int) -> list[Decision]:
        return admit_batch(
            inputs,
            store=self.store,
            registry=self.registry,
            now_ms=now_ms,
            policy=self.policy,
            max_payload_bytes=self.cfg.batch.max_payload_bytes,
            verify_many=self._verify_many,
            after_decide=lambda: self.faults.reached("decided"),
        )

    # -- the loop ------------------------------------------------------------

    async def run(self) -> None:
        k = self.cfg.kafka
        producer = AIOKafkaProducer(
            bootstrap_servers=k.bootstrap_servers,
            client_id=f"{k.client_id}-producer",
            acks="all" if k.acks == "all" else 1,
            enable_idempotence=k.idempotence,
            linger_ms=5,
            max_batch_size=1_048_576,
            max_request_size=self.cfg.batch.max_payload_bytes + 262_144,
            request_timeout_ms=k.request_timeout_ms,
        )
        consumer = AIOKafkaConsumer(
            bootstrap_servers=k.bootstrap_servers,
            group_id=k.group_id,
            client_id=f"{k.client_id}-consumer",
            enable_auto_commit=False,
            auto_offset_reset=k.auto_offset_reset,
            session_timeout_ms=k.session_timeout_ms,
            heartbeat_interval_ms=k.heartbeat_interval_ms,
            max_poll_interval_ms=k.max_poll_interval_ms,
            request_timeout_ms=k.request_timeout_ms,
            max_partition_fetch_bytes=max(1_048_576, self.cfg.batch.max_payload_bytes + 262_144),
            fetch_max_bytes=52_428_800,
        )
        ops = OpsServer(self.metrics, self.liveness.check, self.cfg.ops.host, self.cfg.ops.port) if self.cfg.ops.port else None
        await producer.start()
        try:
            consumer.subscribe(self.cfg.input_topics, listener=_Revocations(self))
            await consumer.start()
            try:
                if ops is not None:
                    self.ops_port = await ops.start()
                self.liveness.started = True
                self.liveness.polled()
                log.info("guard running", inputs=self.cfg.input_topics, group=k.group_id, guard=self.identity.agent_id, state=type(self.store).__name__)
                await self._loop(consumer, producer)
            finally:
                self.liveness.stopping = True
                if ops is not None:
                    await ops.stop()
                await consumer.stop()
        finally:
            await producer.stop()
            self._pool.shutdown(wait=True)
            log.info("guard stopped")

    async def _loop(self, consumer: AIOKafkaConsumer, producer: AIOKafkaProducer) -> None:
        next_housekeeping = 0.0
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            while not self._stop.is_set():
                poll = asyncio.ensure_future(consumer.getmany(timeout_ms=self.cfg.batch.linger_ms or 1, max_records=self.cfg.batch.max_records))
                await asyncio.wait({poll, stop}, return_when=asyncio.FIRST_COMPLETED)
                if not poll.done():
                    poll.cancel()
                    break
                batch = poll.result()
                self.liveness.polled()
                if batch:
                    async with self.lock:
                        await self._process(batch, consumer, producer)
                if time.monotonic() >= next_housekeeping:
                    next_housekeeping = time.monotonic() + self.cfg.state.expire_interval_s
                    await self._housekeeping(consumer)
        finally:
            stop.cancel()

    async def _process(self, batch: dict[TopicPartition, list[Any]], consumer: AIOKafkaConsumer, producer: AIOKafkaProducer) -> None:
        started = time.perf_counter()
        records = [r for tp in sorted(batch, key=lambda t: (t.topic, t.partition)) for r in batch[tp]]
        inputs = [Input(Coordinates(topic=r.topic, partition=r.partition, offset=r.offset), r.value, list(r.headers)) for r in records]
        # 1 + 2. decide and persist, off the event loop so heartbeats keep flowing
        decisions = await asyncio.to_thread(self._decide_and_persist, inputs, self.clock_ms())
        self.faults.reached("persisted")
        sealed = await asyncio.to_thread(self._seal_many, decisions)
        # 3. produce everything, then await every delivery
        deliveries = []
        for record, s, item in zip(records, sealed, inputs, strict=True):
            downstream = self.cfg.downstream_for(record.topic)
            for out in outputs_for(s, record.key, record.value, item.headers, downstream, self.cfg.topics, self.cfg.batch.max_payload_bytes):
                deliveries.append(await producer.send(out.topic, value=out.value, key=out.key, headers=out.headers))
        await asyncio.gather(*deliveries)
        self.faults.reached("produced")
        # 4. commit offsets: only now is every output of this batch durable
        offsets = {tp: recs[-1].offset + 1 for tp, recs in batch.items() if recs}
        try:
            await consumer.commit(offsets)
        except (CommitFailedError, IllegalStateError) as exc:
            # The group moved on; the new owner re-reads these records and,
            # finding their decisions by coordinates, re-emits them identically.
            self.metrics.commit_failures.inc()
            log.warning("offset commit refused after rebalance; outputs will be re-emitted identically", error=str(exc))
        self.faults.reached("committed")
        elapsed = time.perf_counter() - started
        self.metrics.batch_seconds.observe(elapsed)
        self.metrics.batch_records.observe(len(records))
        for d in decisions:
            self.metrics.decisions.labels(d.outcome, d.reason).inc()
            if d.outcome != "forward":
                log.info(
                    "decision",
                    decision_id=d.decision_id,
                    outcome=d.outcome,
                    reason=d.reason,
                    topic=d.source.topic,
                    partition=d.source.partition,
                    offset=d.source.offset,
                    principal=d.principal,
                    task_id=d.task_id,
                )
        log.debug("batch done", records=len(records), seconds=round(elapsed, 4))

    async def _housekeeping(self, consumer: AIOKafkaConsumer) -> None:
        removed = await asyncio.to_thread(self.store.expire, self.clock_ms())
        if removed:
            log.info("expired state rows", rows=removed)
        for table, n in (await asyncio.to_thread(self.store.counts)).items():
            self.metrics.state_rows.labels(table).set(n)
        for tp in consumer.assignment():
            high = consumer.highwater(tp)
            if high is not None:
                position = await consumer.position(tp)
                self.metrics.lag.labels(tp.topic, str(tp.partition)).set(max(0, high - position))
