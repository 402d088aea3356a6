"""Read the audit topic and the downstream topics into a Ledger. The Kafka shell.

No consumer group: partitions are assigned by hand and read from the saved
offsets (or from the beginning), so an audit never moves anybody's committed
offsets and can be repeated at will.

Each partition is read to the end offset it has when the read starts
(busguard.audit.reach), not until an idle gap, which a broker that answers
nothing at one offset (tansu after an empty record batch) fakes. Seals are
checked across a small thread pool (PyNaCl releases the GIL) while aiokafka
keeps prefetching; the Ledger itself is only touched from the event loop's
thread, in log order per partition.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, NamedTuple, TypeVar

import msgspec
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from busguard.audit.checks import (
    CheckedAudit,
    RawRecord,
    SealCache,
    apply_audit,
    apply_forwarded,
    check_audit_record,
    check_forwarded,
)
from busguard.audit.lineage import Ledger
from busguard.audit.reach import PartitionRead, Reach, Step, findings
from busguard.config import Config
from busguard.protocol.attestation import (
    HeadCache,
)
from busguard.protocol.auditbatch import AuditBatchError, expand, is_batch
from busguard.protocol.reasons import Reason
from busguard.protocol.records import Decision, Resolution, audit_decoder
from busguard.runtime.clients import partitions_of, reader
from busguard.runtime.undecodable import Undecodable

Offsets = dict[str, dict[int, int]]
"""topic -> partition -> next offset to read."""

Progress = Callable[[int], None]
"""Called with the number of records just processed."""

MAX_RECORDS_PER_POLL: Final = 5000
#: the fetch long poll: an empty answer (reach.EMPTY_ANSWERS make an unserved offset) comes back after this
FETCH_WAIT_MS: Final = 100
VERIFY_THREADS: Final = 2
_POLL_MS: Final = 200
_R = TypeVar("_R")


class AuditReadError(RuntimeError):
    """The log cannot be read as configured (e.g. the audit topic does not exist)."""


class Scan(NamedTuple):
    offsets: Offsets  # where to resume
    reads: list[PartitionRead]  # how far each partition was read this time


# -- the consume loop ---------------------------------------------------------


def _headers(record: Any) -> list[tuple[str, bytes]]:
    return [(k, v if v is not None else b"") for k, v in record.headers]


def _raws(topic: str, r: Any, audit: str | None) -> list[RawRecord]:
    """A consumed record as the records the checks judge: a batch audit
    record on the audit topic as the per-record audit records its entries
    stand for (busguard.protocol.auditbatch), read at its place; anything
    else as itself."""
    if topic == audit and type(r) is not Undecodable:
        headers = _headers(r)
        if is_batch(headers):
            try:
                return [RawRecord(topic, v, h, None, r.partition, r.offset) for v, h in expand(r.value, headers)]
            except AuditBatchError as exc:
                return [RawRecord(topic, r.value, headers, f"not a well-formed batch audit record: {exc}", r.partition, r.offset)]
        return [RawRecord(topic, r.value, headers, None, r.partition, r.offset)]
    return [_raw(topic, r)]


def _raw(topic: str, r: Any) -> RawRecord:
    if type(r) is not Undecodable:
        return RawRecord(topic, r.value, _headers(r), None, r.partition, r.offset)
    # No seal can be read from it: it is reported as a forged (unsealed)
    # record, identified by its preserved bytes (or, for the offsets of an
    # undecodable batch that do not carry its bytes, by its coordinates).
    ident = r.raw if r.carrier or r.reason != Reason.UNDECODABLE_BATCH else None
    value = ident if ident is not None else f"{r.topic}/{r.partition}/{r.offset}".encode()
    return RawRecord(topic, value, [], f"{r.reason} at {r.topic}/{r.partition}/{r.offset}: {r.detail}", r.partition, r.offset)


# -- per-record checks (run in worker threads; pure apart from the crypto) ------
#
# The guard puts one attestation and seal on both outputs of an input (the
# audit record and the downstream copy), so a seal already verified on the
# audit record need not be verified again downstream: `known_seals` holds
# digests of (attestation, seal) pairs that verified with the guard key in
# this run, and `check_forwarded` then runs only verify_admitted's other,
# cheap checks. This halves the Ed25519 work of a log that is mostly forwards.


async def scan(
    cfg: Config,
    topics: Sequence[str],
    offsets: Offsets | None,
    idle_ms: int,
    handle: Callable[[list[RawRecord]], Awaitable[None]],
    progress: Progress | None = None,
    required: str | None = None,
    audit: str | None = None,
) -> Scan:
    """Read every partition of `topics` from `offsets` (or the beginning)
    to the end offset it has when the read starts (busguard.audit.reach),
    handing each poll's records to `handle` (in log order per partition; a
    batch audit record on the `audit` topic as its entries). When no
    partition's position moves for `idle_ms`, every one not at its end is
    unfinished. Returns the offsets to resume from and how far each
    partition was read."""
    parts = await partitions_of(cfg, topics, name="audit")
    if required is not None and required not in parts:
        raise AuditReadError(f"topic {required!r} does not exist on {cfg.kafka.bootstrap_servers}")
    position: Offsets = {t: {p: (offsets or {}).get(t, {}).get(p, 0) for p in ps} for t, ps in parts.items()}
    for t, old in (offsets or {}).items():  # keep what we cannot see now (a topic deleted, a route removed)
        for p, o in old.items():
            position.setdefault(t, {}).setdefault(p, o)
    tps = [TopicPartition(t, p) for t, ps in parts.items() for p in ps]
    if not tps:
        return Scan(position, [])
    # an undecodable record is reported, not fatal; an empty fetch answer
    # comes back after fetch_max_wait_ms, and an unserved offset takes
    # reach.EMPTY_ANSWERS of them
    consumer = reader(cfg, name="audit", min_partition_fetch_bytes=4_194_304, fetch_max_wait_ms=FETCH_WAIT_MS)
    await consumer.start()
    try:
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        reach: dict[TopicPartition, Reach] = {}
        for tp in tps:
            start = position[tp.topic][tp.partition]
            consumer.seek(tp, start)
            reach[tp] = Reach(tp.topic, tp.partition, start, ends[tp])
        await _read(consumer, reach, idle_ms, handle, progress, audit)
    finally:
        await consumer.stop()
    for tp, r in reach.items():
        position[tp.topic][tp.partition] = r.position
    return Scan(position, [r.result() for r in reach.values()])


async def _read(
    consumer: AIOKafkaConsumer,
    reach: dict[TopicPartition, Reach],
    idle_ms: int,
    handle: Callable[[list[RawRecord]], Awaitable[None]],
    progress: Progress | None,
    audit: str | None,
) -> None:
    """Poll until every partition is settled (busguard.audit.reach). One
    poll's records are checked (in handle's worker threads) while the next
    is fetched and parsed on this thread; polls are handled in order."""
    answered_at: dict[TopicPartition, int | None] = {tp: None for tp in reach}
    idle_s = idle_ms / 1000
    last_move = time.monotonic()
    in_hand: tuple[asyncio.Task[None], int] | None = None

    async def settle() -> None:
        nonlocal in_hand, last_move
        if in_hand is None:
            return
        task, count = in_hand
        in_hand = None
        await task
        if progress is not None:
            progress(count)
        last_move = time.monotonic()  # the time bound runs from when nothing is in hand

    def pause_settled() -> None:
        done = [tp for tp, r in reach.items() if r.settled and tp not in consumer.paused()]
        if done:
            consumer.pause(*done)

    try:
        pause_settled()
        while not all(r.settled for r in reach.values()):
            try:
                batch = await consumer.getmany(timeout_ms=_POLL_MS, max_records=MAX_RECORDS_PER_POLL)
            except KafkaError as exc:
                for r in reach.values():
                    r.stop(f"fetch error: {type(exc).__name__}: {exc}")
                break
            drained = sum(len(v) for v in batch.values()) < MAX_RECORDS_PER_POLL
            moved = False
            for tp, r in reach.items():
                if r.settled:
                    continue
                at = consumer.last_poll_timestamp(tp)
                answered = drained and at is not None and at != answered_at[tp]
                if answered:
                    answered_at[tp] = at
                before = r.position
                if r.observe(await consumer.position(tp), len(batch.get(tp, ())), answered, consumer.highwater(tp)) is Step.SKIP:
                    consumer.seek(tp, r.position)  # an unserved offset, stepped over (a finding)
                moved = moved or r.position != before or r.settled
            records = [
                x for tp in sorted(batch, key=lambda t: (t.topic, t.partition)) for r in batch[tp] for x in _raws(tp.topic, r, audit)
            ]
            await settle()
            if records:
                in_hand = (asyncio.ensure_future(handle(records)), len(records))
            now = time.monotonic()
            if moved or records:
                last_move = now
            elif now - last_move >= idle_s:
                for r in reach.values():
                    r.stop(f"the position did not move for {idle_ms} ms (--idle-ms)")
                break
            pause_settled()
        await settle()
    finally:
        if in_hand is not None:
            in_hand[0].cancel()
            await asyncio.gather(in_hand[0], return_exceptions=True)


async def read_log(
    cfg: Config,
    guard_public_key: bytes,
    ledger: Ledger,
    offsets: Offsets | None,
    idle_ms: int,
    progress: Progress | None,
    reconciler_public_key: bytes | None = None,
) -> Offsets:
    """Feed the audit topic and every route's downstream topic into `ledger`,
    from `offsets` (None: from the beginning) to each partition's end offset,
    and how far it got into `ledger.reads`. Returns the offsets to resume
    from."""
    audit = cfg.topics.audit
    downstream = sorted({r.downstream for r in cfg.routes} - {audit})
    pool = ThreadPoolExecutor(VERIFY_THREADS, thread_name_prefix="busguard-audit")
    loop = asyncio.get_running_loop()

    seals = SealCache()
    heads = HeadCache()

    async def in_threads(fn: Callable[[RawRecord], _R], raws: list[RawRecord]) -> list[_R]:
        size = max(1, -(-len(raws) // VERIFY_THREADS))
        chunks = [raws[i : i + size] for i in range(0, len(raws), size)]
        parts = await asyncio.gather(*(loop.run_in_executor(pool, lambda c: [fn(r) for r in c], c) for c in chunks))
        return [x for part in parts for x in part]

    async def handle(raws: list[RawRecord]) -> None:
        # audit records first, so their verified seals spare the downstream copies a second verify
        audits, forwards = [r for r in raws if r.topic == audit], [r for r in raws if r.topic != audit]
        for r, checked in zip(
            audits,
            await in_threads(
                lambda r: check_audit_record(r.value, r.headers, guard_public_key, reconciler_public_key, r.undecodable, heads), audits
            ),
            strict=True,
        ):
            if checked.seal is not None:
                seals.add(checked.seal)
            apply_audit(ledger, checked, r.at)
        for r, f in zip(
            forwards,
            await in_threads(lambda r: check_forwarded(r.topic, r.value, r.headers, guard_public_key, seals, heads), forwards),
            strict=True,
        ):
            apply_forwarded(ledger, f, r.at)

    try:
        done = await scan(cfg, [audit, *downstream], offsets, idle_ms, handle, progress, required=audit, audit=audit)
    finally:
        pool.shutdown(wait=True)
    ledger.note_reads(done.reads)
    return done.offsets


class EscalationRecords(NamedTuple):
    """Every audit record about one escalation, as found in the log."""

    decisions: list[tuple[Decision, bool]]  # (decision, seal verified)
    resolutions: list[tuple[Resolution, bool]]


async def read_audit_log(
    cfg: Config,
    guard_public_key: bytes,
    reconciler_public_key: bytes | None,
    idle_ms: int,
    keep: Callable[[Decision | Resolution], bool],
    progress: Progress | None = None,
) -> list[tuple[bytes, Decision | Resolution, CheckedAudit]]:
    """Every decision and resolution on the audit topic that `keep` accepts,
    with its value and seal check (seals are checked only for kept records).
    Records that are not decisions or resolutions are `busguard audit`'s to
    report, so they are passed over. AuditReadError if a partition of the
    topic was not read to its end (offsets the broker serves nothing at are
    `busguard audit`'s findings)."""
    found: list[tuple[bytes, Decision | Resolution, CheckedAudit]] = []

    async def handle(raws: list[RawRecord]) -> None:
        for r in raws:
            if r.value is None or r.undecodable is not None:
                continue
            try:
                rec = audit_decoder.decode(r.value)
            except msgspec.MsgspecError:
                continue
            if keep(rec):
                found.append((r.value, rec, check_audit_record(r.value, r.headers, guard_public_key, reconciler_public_key)))

    audit = cfg.topics.audit
    done = await scan(cfg, [audit], None, idle_ms, handle, progress, required=audit, audit=audit)
    gaps = [f.detail for f in findings(done.reads) if f.code != "offsets_unserved"]
    if gaps:
        raise AuditReadError("the audit topic was not read to its end: " + "; ".join(gaps))
    return found


async def find_escalation(
    cfg: Config,
    guard_public_key: bytes,
    escalation_id: str,
    idle_ms: int,
    progress: Progress | None = None,
    reconciler_public_key: bytes | None = None,
) -> EscalationRecords:
    """Scan the whole audit topic for one escalation's decision and resolutions
    (the Ledger keeps no receipts, so `escalations show` reads them here).
    AuditReadError if a partition of it was not read to its end."""

    def mine(rec: Decision | Resolution) -> bool:
        return rec.decision_id == escalation_id if isinstance(rec, Decision) else rec.escalation_id == escalation_id

    found = EscalationRecords([], [])
    seen: set[tuple[bytes, bool]] = set()  # identical re-emissions are shown once
    for value, rec, checked in await read_audit_log(cfg, guard_public_key, reconciler_public_key, idle_ms, mine, progress):
        # whose key may seal what, as the Ledger judges it (the single-key cut-off aside)
        verified = checked.verified and (
            checked.sealed_by == "guard" if isinstance(rec, Decision) else checked.sealed_by == "reconciler" or cfg.keys.single_key_audit
        )
        if (value, verified) in seen:
            continue
        seen.add((value, verified))
        if isinstance(rec, Decision):
            found.decisions.append((rec, verified))
        else:
            found.resolutions.append((rec, verified))
    return found
