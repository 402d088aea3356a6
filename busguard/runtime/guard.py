"""`busguard run`: admission as a stage of the shared batch loop (runtime/loop.py).

Per batch: precheck and verify signatures across a thread pool (PyNaCl
releases the GIL), then the policies' parse and keys for the records that
verified, in `prepare`, which the loop runs while the batch before is still
being produced and committed (it reads no state); then, in
`process_prepared`, decide and persist in one state transaction, seal, and
hand the outputs to the loop to produce and commit.

Sealing (`[batch] seal`): "batch" signs once per batch, inside the batch's
transaction: the tree over the new decisions' attestations and the head
that follows this process's chain tip are persisted with the decisions
(busguard.protocol.treehead), so a re-delivered record is re-emitted with
the same head and proof. "record" seals each decision once (one Ed25519
signature serves its primary output and audit record) on `_seal_pool` while
the store commits. Either way a decision that already has a persisted head
is re-emitted with it, and one that has none with a per-record seal: the
bytes first emitted, whichever mode is configured now.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import os
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import structlog

from busguard.admission.batch import Checked, Input, admit_checked, check_batch
from busguard.admission.decide import Candidate, verify
from busguard.admission.fence import behind, fence_ends
from busguard.config import Config
from busguard.protocol.attestation import attest, decision_bytes, seal
from busguard.protocol.keyfile import Identity
from busguard.protocol.merkle import leaf_hash
from busguard.protocol.reasons import Reason
from busguard.protocol.records import Coordinates, Decision
from busguard.protocol.registry import KeyRegistry, KeyWindow
from busguard.protocol.treehead import MAX_LEAVES, BatchTree, ChainTip, next_link, rebuild, seal_batch
from busguard.runtime.auditgroups import GroupKey, Member, audit_records, complete, group_key, member
from busguard.runtime.faults import Faults
from busguard.runtime.guardparts import BatchSeal, Ready, chunks, find_leaf
from busguard.runtime.ops import Metrics
from busguard.runtime.outputs import BatchProof, Output, OutputBudget, Sealed, outputs_for, worst_batch_sealed
from busguard.runtime.stage import SealingStage
from busguard.runtime.tolerant_fetch import preserved
from busguard.runtime.undecodable import Undecodable
from busguard.runtime.watched import WatchedFile
from busguard.state.keys import Partition, source_key
from busguard.state.snapshot import Snapshot, StoredHead, spans_of
from busguard.state.store import StateStore
from busguard.state.writes import BatchWrites

log = structlog.get_logger(__name__)


class Guard(SealingStage):
    def __init__(
        self,
        cfg: Config,
        *,
        keys: WatchedFile[KeyRegistry],
        identity: Identity,
        store: StateStore,
        metrics: Metrics | None = None,
        clock_ms: Callable[[], int] | None = None,
        faults: Faults | None = None,
    ) -> None:
        self.store = store
        self.keys = keys
        self.policy = cfg.policy()
        self.downstreams = cfg.downstreams
        self.receivers = cfg.receivers
        self.budget = OutputBudget(cfg.kafka.max_message_bytes, cfg.kafka.compression, identity.agent_id)
        self.batch_seal = cfg.batch.seal == "batch"
        #: batch audit records (busguard.protocol.auditbatch) for batch-sealed decisions
        self.audit_batch = self.batch_seal and cfg.batch.audit == "batch"
        #: this process's chain of batch seals: a new one at every start, so
        #: guard processes sharing a store never contend for one tip
        #: (docs/protocol.md 12.6, "Chains")
        self.chain = secrets.token_hex(8)
        #: the last head this process committed: the tip, should the store lose it
        self._tip: ChainTip | None = None
        self.threads = cfg.batch.threads(len(os.sched_getaffinity(0)))
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="busguard-crypto")
        # Its own threads, so a batch's seals do not queue behind the next
        # batch's signature checks (which the loop runs ahead on `_pool`).
        self._seal_pool = ThreadPoolExecutor(self.threads, thread_name_prefix="busguard-seal")
        self._start_stage(
            cfg,
            identity,
            metrics or Metrics(),
            clock_ms,
            faults,
            topics=cfg.input_topics,
            group_id=cfg.kafka.group_id,
            role="guard",
            before_first=self.check_store,
        )
        self._follow(keys, "key_registry")
        self._show_fence(store.trusted_from)

    async def run(self) -> None:
        log.info(
            "guard identity",
            guard=self.identity.agent_id,
            state=type(self.store).__name__,
            fence_ends_ms=fence_ends(self.store.trusted_from, self.policy.max_age_ms, self.policy.max_future_ms),
        )
        try:
            await self.loop.run()
        finally:
            self._pool.shutdown(wait=True)
            self._seal_pool.shutdown(wait=True)

    # -- the store-behind check (docs/operations.md, section 5) -----------------

    async def check_store(self, committed: Mapping[Partition, int | None] | None, ready: Ready | None = None) -> None:
        """Before the first batch of newly assigned partitions: a store the
        group has committed past (restored from a backup, a volume snapshot,
        or lost and recreated) has not seen decisions the group acted on, so
        it re-arms its fence instead of trusting itself (admission/fence.py).
        Committed offsets the broker would not give count as behind: the
        fence costs refusals, trusting a stale store costs replays.

        The fence is re-armed at `ready.now_ms`, the clock reading the batch
        about to be decided is judged at (its `decided_at`), not at a later
        reading: docs/protocol.md 6.4 promises T <= decided_at for the batch
        a re-arm refuses, and a later T would refuse records (issued at
        decided_at + max_future_ms + 1) that the rule spares. Without a
        batch (a caller outside the loop), the clock is read here."""
        at_ms = self.clock_ms() if ready is None else ready.now_ms
        marks = await asyncio.to_thread(self.store.partition_watermarks)
        if committed is None:
            await self._rearm("committed offsets unreadable", at_ms)
            return
        lagging = behind(marks, committed)
        for b in lagging:
            log.warning(
                "state store is behind the consumer group: the group committed past what this store decided",
                topic=b.topic,
                partition=b.partition,
                committed=b.committed,
                watermark=b.watermark,
            )
        if lagging:
            await self._rearm(f"{len(lagging)} partition(s) committed past the store", at_ms)

    async def _rearm(self, why: str, at_ms: int) -> None:
        trusted_from = await asyncio.to_thread(self.store.rearm, at_ms)
        self.metrics.store_rearms.inc()
        ends = self._show_fence(trusted_from)
        log.warning(
            "state store fence re-armed: refusing records it may have forgotten (store_warming)",
            why=why,
            trusted_from_ms=trusted_from,
            fence_ends_ms=ends,
        )

    def _show_fence(self, trusted_from: int | None) -> int | None:
        ends = fence_ends(trusted_from, self.policy.max_age_ms, self.policy.max_future_ms)
        self.metrics.store_fence_end.set(ends or 0)
        return ends

    # -- crypto across threads ---------------------------------------------

    def _verify_many(self, candidates: Sequence[Candidate]) -> list[KeyWindow | None]:
        """Across the pool when the batch splits; one chunk (a batch of a few
        records, or one verify thread) is verified on the calling thread,
        already off the event loop, instead of paying a hand-off to another
        thread and back for nothing."""
        if self.threads == 1 or len(candidates) < 2 * self.threads:
            return [verify(c) for c in candidates]
        parts = chunks(candidates, self.threads)
        return [k for part in self._pool.map(lambda cs: [verify(c) for c in cs], parts) for k in part]

    def _seal_one(self, d: Decision) -> Sealed:
        body = decision_bytes(d)
        att = attest(d, body, self.identity.agent_id)
        return Sealed(d, body, att, seal(self.signer, att))

    def _size_seal(self, d: Decision) -> Sealed:
        """What a would-be forward is sized with: batch-sealed, the longest
        head and proof its batch could give it (the tree is not built yet)."""
        if not self.batch_seal:
            return self._seal_one(d)
        body = decision_bytes(d)
        return worst_batch_sealed(d, body, attest(d, body, self.identity.agent_id), self.identity.agent_id, MAX_LEAVES)

    def _seal_in_transaction(self, snapshot: Snapshot, decisions: list[Decision], writes: BatchWrites, now_ms: int) -> BatchSeal:
        """Inside the batch's transaction, before the store writes: in batch
        mode attest the new decisions, build their tree, sign the head that
        follows the chain's tip and add it to `writes`; in either mode find
        re-emitted decisions under the heads they were persisted with."""
        new = list(writes.decisions.values())
        ids = {id(d) for d in new}
        guard_id = self.identity.agent_id
        attested: dict[int, tuple[bytes, bytes]] = {}
        tree, index, tip = None, {}, self._tip
        if self.batch_seal and new:
            for d in new:
                body = decision_bytes(d)
                attested[id(d)] = (body, attest(d, body, guard_id))
            stored = None if snapshot.tip is None else ChainTip(*snapshot.tip)
            if stored is not None and (tip is None or stored.seq >= tip.seq):
                tip = stored
            tree = seal_batch(self.signer, [attested[id(d)][1] for d in new], guard=guard_id, chain=self.chain, tip=tip, sealed_at=now_ms)
            seq, _ = next_link(tip)
            writes.heads.append(
                StoredHead(self.chain, seq, tree.head, tree.seal, b"".join(tree.leaves), spans_of(writes.decisions), now_ms)
            )
            index = {id(d): i for i, d in enumerate(new)}
            tip = ChainTip(seq, tree.head)
        reused: dict[int, Sealed] = {}
        if snapshot.heads:
            trees: dict[tuple[str, int], BatchTree] = {}
            for d in decisions:
                if id(d) not in ids and id(d) not in reused:
                    found = self._under_stored_head(d, snapshot.heads, trees)
                    if found is not None:
                        reused[id(d)] = found
        return BatchSeal(attested, tree, index, reused, tip, snapshot.heads)

    def _under_stored_head(self, d: Decision, heads: Sequence[StoredHead], trees: dict[tuple[str, int], BatchTree]) -> Sealed | None:
        """A decision persisted under a batch seal, sealed as first emitted."""
        body = decision_bytes(d)
        att = attest(d, body, self.identity.agent_id)
        leaf, where = leaf_hash(att), source_key(d.source)
        for h in heads:
            i = find_leaf(h.leaves, leaf) if h.covers(where) else None
            if i is not None:
                tree = trees.get((h.chain, h.seq))
                if tree is None:
                    tree = trees[(h.chain, h.seq)] = rebuild(h.head, h.seal, h.leaves)
                return Sealed(d, body, att, b"", BatchProof(h.head, h.seal, tree.inclusion(i)))
        return None

    def _under_stored(self, heads: Sequence[StoredHead], trees: dict[tuple[str, int], BatchTree], d: Decision) -> Sealed | None:
        return self._under_stored_head(d, heads, trees)

    def _seal_many(self, decisions: Sequence[Decision]) -> list[Sealed]:
        return [s for part in self._seal_pool.map(self._seal_part, chunks(decisions, self.threads)) for s in part]

    def _seal_part(self, decisions: Sequence[Decision]) -> list[Sealed]:
        return [self._seal_one(d) for d in decisions]

    def _check(self, inputs: list[Input], now_ms: int) -> Checked:
        return check_batch(
            inputs,
            registry=self.keys.current(),
            now_ms=now_ms,
            policy=self.policy,
            max_payload_bytes=self.cfg.batch.max_payload_bytes,
            verify_many=self._verify_many,
            receivers=self.receivers,
        )

    def _decide_and_persist(self, ready: Ready) -> tuple[list[Decision], list[Sealed], list[Output]]:
        """Decide and persist; batch mode seals inside the transaction, record
        mode on `_seal_pool` while the store writes and commits (nothing is
        emitted before it has)."""
        sealing: list[tuple[list[Decision], list[Future[list[Sealed]]]]] = []
        sealed_in: list[BatchSeal] = []

        def decided(decisions: list[Decision]) -> None:
            parts = chunks(decisions, self.threads)
            sealing[:] = [(decisions, [self._seal_pool.submit(self._seal_part, part) for part in parts])]

        def in_transaction(snapshot: Snapshot, decisions: list[Decision], writes: BatchWrites) -> None:
            sealed_in[:] = [self._seal_in_transaction(snapshot, decisions, writes, ready.now_ms)]

        decisions = admit_checked(
            ready.checked,
            store=self.store,
            now_ms=ready.now_ms,
            policy=self.policy,
            after_decide=lambda: self.faults.reached("decided"),
            oversize=lambda d, item: self.budget.refusal(d, item.key, item.value, item.headers, self._size_seal),
            on_replaced=self._replaced,
            on_decided=None if self.batch_seal else decided,
            on_writes=in_transaction,
            chain=self.chain if self.batch_seal else None,
        )
        t = time.perf_counter()
        (done,) = sealed_in
        self._tip = done.tip
        if self.batch_seal:
            sealed = [self._batch_sealed(d, done) for d in decisions]
        elif not sealing or sealing[0][0] is not decisions:
            sealed = self._seal_many(decisions)
        else:
            sealed = [s for f in sealing[0][1] for s in f.result()]
        if done.reused and not self.batch_seal:
            sealed = [done.reused.get(id(s.decision), s) for s in sealed]
        audits = self._audit_records(sealed, done) if self.audit_batch else []
        self.metrics.phase["seal"].observe(time.perf_counter() - t)  # what sealing adds after the commit
        return decisions, sealed, audits

    def _audit_records(self, sealed: Sequence[Sealed], done: BatchSeal) -> list[Output]:
        """The batch audit records of the batch-sealed decisions
        (runtime/auditgroups.py): a re-delivered group is completed from the
        store, so it is re-emitted as first emitted."""
        groups: dict[GroupKey, dict[int, Member]] = {}
        offsets: dict[GroupKey, set[int]] = {}
        seals: dict[bytes, bytes] = {}
        for s in sealed:
            if s.batch is None:
                continue
            key = group_key(s)
            m = member(s)
            found = groups.get(key)
            if found is None:
                groups[key], offsets[key], seals[s.batch.head] = {m.leaf: m}, set(), s.batch.head_seal
                found = groups[key]
            found[m.leaf] = m
            offsets[key].add(s.decision.source.offset)
        new_head = done.tree.head if done.tree is not None else None
        trees: dict[tuple[str, int], BatchTree] = {}
        for key, members in groups.items():
            if key[0] == new_head:
                continue  # every decision under the new head is in this batch
            stored = next((h for h in done.heads if h.head == key[0]), None)
            if stored is not None:
                complete(key, members, offsets[key], stored, functools.partial(self._under_stored, [stored], trees), self.store.decision_at)
        return audit_records(self.cfg.topics.audit, groups, seals, self.budget.batch_size)

    def _batch_sealed(self, d: Decision, done: BatchSeal) -> Sealed:
        reused = done.reused.get(id(d))
        if reused is not None:
            return reused
        i = done.leaf_at.get(id(d))
        if i is None or done.tree is None:
            return self._seal_one(d)  # persisted before batch seals, or under a head since expired
        body, att = done.attested[id(d)]
        return Sealed(d, body, att, b"", BatchProof(done.tree.head, done.tree.seal, done.tree.inclusion(i)))

    def _replaced(self, earlier: Decision, new: Decision) -> None:
        """A decided position now holds another record: its topic was
        recreated or rewritten under a kept store. Worth an operator's look."""
        self.metrics.replaced_decisions.labels(new.source.topic).inc()
        log.warning(
            "decided position holds a different record; judged afresh",
            topic=new.source.topic,
            partition=new.source.partition,
            offset=new.source.offset,
            decision_id=new.decision_id,
            earlier_outcome=earlier.outcome,
            earlier_receipt_id=earlier.receipt_id,
            earlier_record_sha256=earlier.record_sha256,
            record_sha256=new.record_sha256,
            outcome=new.outcome,
            reason=new.reason,
        )

    # -- Stage ---------------------------------------------------------------

    async def prepare(self, records: Sequence[Any]) -> Ready:
        """The stateless half of a batch: prechecks, signatures, and the
        policies' parse and keys for the records whose signature verified.
        Reads no state and persists nothing, so the loop may run it ahead
        (runtime/loop.py)."""
        max_payload = self.cfg.batch.max_payload_bytes
        inputs = [
            Input(Coordinates(topic=r.topic, partition=r.partition, offset=r.offset), r.value, r.headers, r.key)
            if type(r) is not Undecodable
            else self._undecodable(r, max_payload)
            for r in records
        ]
        now_ms = self.clock_ms()
        t0 = time.perf_counter()
        # off the event loop, so heartbeats and /healthz keep flowing
        checked = await asyncio.to_thread(self._check, inputs, now_ms)
        self.metrics.phase["verify"].observe(time.perf_counter() - t0)
        return Ready(records, inputs, checked, now_ms)

    async def process(self, records: Sequence[Any]) -> list[Output]:
        return await self.process_prepared(await self.prepare(records))

    async def process_prepared(self, ready: Ready) -> list[Output]:
        max_payload = self.cfg.batch.max_payload_bytes
        t0 = time.perf_counter()
        decisions, sealed, audits = await asyncio.to_thread(self._decide_and_persist, ready)
        self.metrics.phase["decide_persist"].observe(time.perf_counter() - t0)
        grouped = self.audit_batch
        outputs: list[Output] = []
        for record, s, item in zip(ready.records, sealed, ready.inputs, strict=True):
            outputs += outputs_for(
                s,
                record.key,
                item.value,
                item.headers,
                self.downstreams[record.topic],
                self.cfg.topics,
                max_payload,
                self.budget,
                audit=not grouped or s.batch is None,
            )
        self._account(decisions)
        return outputs + audits if audits else outputs

    @staticmethod
    def _undecodable(r: Undecodable, max_payload: int) -> Input:
        """A placeholder's input carries its preserved bytes (runtime/tolerant_fetch.py)
        as the value and headers its dead-letter record will hold."""
        _, value, headers = preserved(r, max_payload)
        source = Coordinates(topic=r.topic, partition=r.partition, offset=r.offset)
        return Input(source, value, headers, undecodable=(Reason(r.reason), r.detail), last_offset=r.last_offset)

    def _account(self, decisions: Sequence[Decision]) -> None:
        # one metric update per (outcome, reason) per batch, not per record
        for (outcome, reason), n in collections.Counter((d.outcome, d.reason) for d in decisions).items():
            self.metrics.decisions.labels(outcome, reason).inc(n)
        info = None
        for d in decisions:
            if d.outcome != "forward":
                if info is None:
                    # one bound logger per batch: structlog's lazy proxy binds a new one on
                    # every call, which a replay flood (every record refused) would pay per record
                    info = log.bind().info
                info(
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

    async def housekeeping(self) -> None:
        removed = await asyncio.to_thread(self.store.expire, self.clock_ms())
        if removed:
            log.info("expired state rows", rows=removed)
        for table, n in (await asyncio.to_thread(self.store.counts)).items():
            self.metrics.state_rows.labels(table).set(n)
