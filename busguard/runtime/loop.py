"""The crash-safe consume → process → produce → commit loop, shared by
`busguard run` and `busguard reconcile`.

The batch commit protocol (docs/design.md, "Commit protocol"), in this order and why:

1. process the batch           the stage decides (pure) and persists its state
                               and its outputs-to-be in one transaction, so a
                               crash after this point re-derives the same outputs
2. produce every output,       an undelivered output is an error: the batch is
   await every delivery        not committed and the process exits
3. commit offsets              never past an undelivered output

A record re-delivered after a crash finds its persisted result by source
coordinates and is re-emitted byte for byte; consumers dedupe on the
`busguard-decision-id` header. (Kafka transactions are not available on the
embedded broker, so delivery is at-least-once with deterministic
re-emission.)

Rebalances: the loop holds a lock for steps 1-3, and `on_partitions_revoked`
waits for it (within a budget), so by the time a partition moves, every batch
read from it is either committed or not emitted at all.

Pipelining: while a batch goes through steps 1-3, the loop already polls the
next one and, for a stage that `Prepares`, runs its stateless half (the
guard's prechecks, signature checks and policy parsing: nothing read from
or written to the state, nothing emitted). Steps 1-3 stay strictly one batch after another, so
the commit order and the crash protocol are as above. A batch read ahead
belongs to the assignment it was polled under: if a rebalance happened since
(`generation` moved), it is dropped unprocessed. That loses nothing: aiokafka
makes a new assignment for every rebalance and resets each of its partitions
to the group's committed offset, which is never past a record that was not
processed, so the dropped records are read again.

Newly assigned partitions: before the first batch after an assignment, the
loop reads the group's committed offsets for every assigned partition it has
not checked since it was assigned (not only those in the batch: a replay can
arrive on any partition, and nonces are not per partition) and hands them to
the stage's `before_first` hook (the guard's store-behind check: docs/operations.md, section 5),
inside the batch's lock and before step 1. Doing it there rather than in
`on_partitions_assigned` is what guarantees the order: aiokafka may start
fetching a partition before the assignment callback has finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError, ProducerFenced

from busguard.config import Config
from busguard.config_checks import transactional_id
from busguard.runtime.clients import group_consumer, loop_producer
from busguard.runtime.faults import Faults
from busguard.runtime.ops import Liveness, Metrics, OpsServer
from busguard.runtime.outputs import Output
from busguard.runtime.publish import Publisher
from busguard.runtime.rejoin import SessionBridge
from busguard.runtime.undecodable import next_offset
from busguard.runtime.unstick import Unsticker, stuck_after_s

log = structlog.get_logger(__name__)

#: Called with {(topic, partition): committed offset or None} for partitions
#: new to this process (None for the whole map: the broker would not say),
#: and the batch about to be processed as the stage's `prepare` made it (None
#: for a stage that does not prepare): what the hook does belongs to that
#: batch, at the clock reading it is judged at (the guard re-arms its fence
#: at that reading, docs/protocol.md 6.4).
BeforeFirst = Callable[[Mapping[tuple[str, int], int | None] | None, Any], Awaitable[None]]


class Stage(Protocol):
    """What a loop runs. `process` must persist before returning."""

    async def process(self, records: Sequence[Any]) -> list[Output]: ...

    async def housekeeping(self) -> None: ...


@runtime_checkable
class Prepares(Protocol):
    """A stage whose batches have a stateless half the loop may run ahead,
    while the batch before is produced and committed. `prepare` must not read
    or write state or emit anything; `process_prepared` is `process` for a
    prepared batch."""

    async def prepare(self, records: Sequence[Any]) -> Any: ...

    async def process_prepared(self, prepared: Any) -> list[Output]: ...


class _Polled(NamedTuple):
    #: BatchLoop.generation when the poll returned: the assignment the records came from
    generation: int
    batch: dict[TopicPartition, list[Any]]
    records: list[Any]
    #: what the stage's `prepare` made of `records` (None: the stage does not prepare)
    prepared: Any


async def until_stopped(step: Awaitable[None], stop: asyncio.Event) -> bool:
    """Await a client's start unless a stop comes first (then cancel it and
    return False). A group join can wait on the broker indefinitely (tansu
    has held a static member's rejoin for minutes, docs/notes-broker.md), and
    SIGTERM must still stop the process then: nothing was polled, so there is
    nothing to drain. The step's own errors propagate."""
    task = asyncio.ensure_future(step)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if task.done():
        task.result()
        return True
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    return False


def _names(tps: set[TopicPartition]) -> list[str]:
    return sorted(f"{tp.topic}:{tp.partition}" for tp in tps)


class _Revocations(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, loop: BatchLoop) -> None:
        self.loop = loop

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.loop.generation += 1  # a batch read ahead under the old assignment is dropped
        started = time.monotonic()
        budget = self.loop.revoke_budget_s
        try:
            await asyncio.wait_for(self.loop.lock.acquire(), budget)
        except TimeoutError:
            log.warning("revocation budget exceeded; in-flight batch will be re-delivered to the new owner", budget_s=budget)
            return
        self.loop.lock.release()
        self.loop.checked -= revoked
        self.loop.forget_stuck(revoked)
        log.info(
            "partitions revoked after the in-flight batch committed",
            partitions=_names(revoked),
            waited_s=round(time.monotonic() - started, 3),
        )

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.loop.generation += 1
        self.loop.checked -= assigned  # checked again before their first batch (BatchLoop._first_batch_of)
        self.loop.forget_stuck(assigned)  # positions start again from the committed offsets
        log.info("partitions assigned", partitions=_names(assigned))


class BatchLoop:
    def __init__(
        self,
        cfg: Config,
        stage: Stage,
        *,
        topics: Sequence[str],
        group_id: str,
        role: str,
        metrics: Metrics,
        faults: Faults | None = None,
        before_first: BeforeFirst | None = None,
    ) -> None:
        self.cfg = cfg
        self.stage = stage
        self.prepares = stage if isinstance(stage, Prepares) else None
        #: moved by every rebalance callback (see "Pipelining" above)
        self.generation = 0
        self._ahead: asyncio.Future[_Polled | None] | None = None
        self.before_first = before_first
        self.checked: set[TopicPartition] = set()
        self.topics = list(topics)
        self.group_id = group_id
        self.role = role
        self.metrics = metrics
        self.faults = faults or Faults(None)
        self.lock = asyncio.Lock()
        self.revoke_budget_s = cfg.batch.revoke_budget_ms / 1000
        self.liveness = Liveness(stall_after_s=max(30.0, cfg.kafka.max_poll_interval_ms / 1000))
        self._stop = asyncio.Event()
        self.publisher = Publisher()
        self.ops_port: int | None = None
        #: partitions the broker will not move on (busguard.runtime.unstick), made with the consumer
        self._unsticker: Unsticker | None = None
        #: steps 2 and 3 in one Kafka transaction (kafka.transactional_id)
        self.transactional = transactional_id(cfg, role) is not None

    def request_stop(self) -> None:
        """SIGTERM: finish the batch in hand, commit it, leave the group."""
        if not self._stop.is_set():
            log.info("stop requested; draining", role=self.role)
        self.liveness.stopping = True
        self._stop.set()

    async def run(self) -> None:
        producer = loop_producer(self.cfg, role=self.role)
        consumer = group_consumer(self.cfg, group_id=self.group_id, role=self.role)
        ops = OpsServer(self.metrics, self.liveness.check, self.cfg.ops.host, self.cfg.ops.port) if self.cfg.ops.port else None
        if not await until_stopped(producer.start(), self._stop):
            log.warning("stop requested before the producer connected; exiting", role=self.role)
            return
        try:
            consumer.subscribe(self.topics, listener=_Revocations(self))
            # a static member's session would expire during tansu's held join (busguard.runtime.rejoin)
            bridge = SessionBridge(self.cfg, group_id=self.group_id, role=self.role)
            bridge.start()
            try:
                joined = await until_stopped(consumer.start(), self._stop)
            finally:
                await bridge.done()
            if not joined:
                log.warning("stop requested while joining the consumer group; exiting without a batch", role=self.role, group=self.group_id)
                await consumer.stop()
                return
            try:
                if ops is not None:
                    self.ops_port = await ops.start()
                self.liveness.started = True
                self.liveness.polled()
                log.info(f"{self.role} running", inputs=self.topics, group=self.group_id)
                await self._loop(consumer, producer)
            finally:
                self.liveness.stopping = True
                if ops is not None:
                    await ops.stop()
                await consumer.stop()
        finally:
            await producer.stop()
            log.info(f"{self.role} stopped")

    async def _loop(self, consumer: AIOKafkaConsumer, producer: AIOKafkaProducer) -> None:
        next_housekeeping = 0.0
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            while not self._stop.is_set():
                poll, self._ahead = self._ahead or asyncio.ensure_future(self._poll(consumer)), None
                waiting: set[asyncio.Future[Any]] = {poll, stop}
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if not poll.done():
                    poll.cancel()
                    break
                polled = poll.result()
                if polled is not None:
                    async with self.lock:
                        if polled.generation == self.generation:
                            await self._batch(polled, consumer, producer)
                        else:
                            log.info("batch read ahead of a rebalance dropped unprocessed; it is read again", records=len(polled.records))
                if time.monotonic() >= next_housekeeping:
                    next_housekeeping = time.monotonic() + self.cfg.state.expire_interval_s
                    started = time.perf_counter()
                    await self.stage.housekeeping()
                    self.metrics.housekeeping_seconds.observe(time.perf_counter() - started)
                    await self._lag(consumer)
        finally:
            stop.cancel()
            if self._ahead is not None:
                self._ahead.cancel()  # read ahead, not processed: nothing of it was persisted or emitted

    async def _poll(self, consumer: AIOKafkaConsumer) -> _Polled | None:
        batch = await consumer.getmany(timeout_ms=self.cfg.batch.linger_ms or 1, max_records=self.cfg.batch.max_records)
        generation = self.generation  # no await since getmany returned: the records' assignment
        self.liveness.polled()
        if self._unsticker is None:
            self._unsticker = Unsticker(consumer, stuck_after_s(self.cfg.kafka.fetch_max_wait_ms))
        for tp, item in await self._unsticker.check(batch):
            batch[tp] = [item]
        if not batch:
            return None
        records = [r for tp in sorted(batch, key=lambda t: (t.topic, t.partition)) for r in batch[tp]]
        prepared = await self.prepares.prepare(records) if self.prepares is not None else None
        return _Polled(generation, batch, records, prepared)

    def forget_stuck(self, tps: set[TopicPartition]) -> None:
        if self._unsticker is not None:
            self._unsticker.forget(tps)

    async def _batch(self, polled: _Polled, consumer: AIOKafkaConsumer, producer: AIOKafkaProducer) -> None:
        started = time.perf_counter()
        batch, records = polled.batch, polled.records
        if not self._stop.is_set():
            # the next batch's poll (and stateless half) overlaps this one's steps 1-3
            self._ahead = asyncio.ensure_future(self._poll(consumer))
        if self.before_first is not None:
            assigned = consumer.assignment()
            if not self.checked.issuperset(assigned) or not self.checked.issuperset(batch):
                await self._first_batch_of(sorted(assigned.union(batch) - self.checked), consumer, polled.prepared)
        # 1. decide and persist (the stage's transaction)
        if self.prepares is not None:
            outputs = await self.prepares.process_prepared(polled.prepared)
        else:
            outputs = await self.stage.process(records)
        self.faults.reached("persisted")
        produced = time.perf_counter()
        # past the whole span of an undecodable batch's one decision (runtime/decoding.py)
        offsets = {tp: next_offset(recs[-1]) for tp, recs in batch.items() if recs}
        if self.transactional:
            await self._commit_in_transaction(producer, outputs, offsets)
            committed = produced
        else:
            # 2. produce everything, then await every delivery
            await self.publisher.publish(producer, outputs)
            self.faults.reached("produced")
            committed = time.perf_counter()
            # 3. commit offsets: only now is every output of this batch durable
            try:
                await consumer.commit(offsets)
            except (CommitFailedError, IllegalStateError) as exc:
                # The group moved on; the new owner re-reads these records and,
                # finding their results by coordinates, re-emits them identically.
                self.metrics.commit_failures.inc()
                log.warning("offset commit refused after rebalance; outputs will be re-emitted identically", error=str(exc))
        self.faults.reached("committed")
        done = time.perf_counter()
        self.metrics.phase["process"].observe(produced - started)
        self.metrics.phase["produce"].observe(committed - produced)
        self.metrics.phase["commit"].observe(done - committed)
        self.metrics.batch_seconds.observe(done - started)
        self.metrics.batch_records.observe(len(records))

    async def _commit_in_transaction(
        self, producer: AIOKafkaProducer, outputs: Sequence[Output], offsets: Mapping[TopicPartition, int]
    ) -> None:
        """Steps 2 and 3 as one Kafka transaction (kafka.transactional_id):
        the outputs and the input offsets commit together or not at all, so
        a `read_committed` reader sees each decision's outputs once. Step 1
        has persisted the decisions already, so a batch whose transaction is
        aborted (a rebalance took the group's partitions, or the process
        died) is read again and re-emitted byte for byte in a new one. A
        process fenced by another with the same transactional id
        (ProducerFenced) raises out of the loop and exits: the newer one
        owns the id."""
        try:
            await producer.begin_transaction()
            try:
                await self.publisher.publish(producer, outputs)
                self.faults.reached("produced")
                await producer.send_offsets_to_transaction(offsets, self.group_id)
                self.faults.reached("offsets")
            except (CommitFailedError, IllegalStateError) as exc:
                await producer.abort_transaction()
                self.metrics.commit_failures.inc()
                log.warning("offsets refused after rebalance; transaction aborted, outputs will be re-emitted identically", error=str(exc))
                return
            except ProducerFenced:
                raise
            except BaseException:
                with contextlib.suppress(Exception):  # a producer in a fatal state can do nothing more, abort included
                    await asyncio.shield(producer.abort_transaction())
                raise
            await producer.commit_transaction()
        except ProducerFenced:
            log.error("fenced: another process started with this transactional id and owns it now; exiting", role=self.role)
            raise

    async def _first_batch_of(self, tps: list[TopicPartition], consumer: AIOKafkaConsumer, prepared: Any) -> None:
        """The group's committed offsets for partitions new to this process, to
        the stage's hook; None if the broker would not say (aiokafka retries
        retriable errors itself), which the hook must treat as the worst case."""
        assert self.before_first is not None
        committed: dict[tuple[str, int], int | None] | None
        try:
            offsets = await asyncio.gather(*(consumer.committed(tp) for tp in tps))
            committed = {(tp.topic, tp.partition): c for tp, c in zip(tps, offsets, strict=True)}
        except KafkaError as exc:
            log.warning("committed offsets unreadable for newly assigned partitions", partitions=_names(set(tps)), error=str(exc))
            committed = None
        await self.before_first(committed, prepared)
        self.checked.update(tps)

    async def _lag(self, consumer: AIOKafkaConsumer) -> None:
        for tp in consumer.assignment():
            high, stable = consumer.highwater(tp), consumer.last_stable_offset(tp)
            if high is not None and stable is not None:
                high = min(high, stable)  # records behind an open transaction are not stuck, only pending
            if high is not None:
                position = await consumer.position(tp)
                self.metrics.lag.labels(tp.topic, str(tp.partition)).set(max(0, high - position))
