"""Read the audit topic and the downstream topics into a Ledger. The Kafka shell.

No consumer group: partitions are assigned by hand and read from the saved
offsets (or from the beginning), so an audit never moves anybody's committed
offsets and can be repeated at will.

The end of the log is found by silence, not by asking: tansu's ListOffsets
answers lag behind what a fetch returns, so "caught up" means no new record
for `idle_ms`. Seals are checked across a small thread pool (PyNaCl releases
the GIL) while aiokafka keeps prefetching; the Ledger itself is only touched
from the event loop's thread, in log order per partition.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Container, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, NamedTuple, TypeVar

import msgspec
from aiokafka import TopicPartition

from busguard.protocol.records import Decision
from busguard.audit.deployment import PREFIX_CHARS
from busguard.audit.lineage import Ledger, Sealer
from busguard.config import Config
from busguard.protocol.attestation import (
    HEADER_ATTESTATION,
    HEADER_DECISION_ID,
    HEADER_SEAL,
    Attestation,
    AttestationError,
    HeadCache,
    InclusionError,
    Opened,
    check_admitted,
    decode_attestation,
    open_decision_record,
    open_sealed,
    verify_decision_record,
)
from busguard.protocol.treehead import HEADER_HEAD_SEAL, HEADER_INCLUSION, HEADER_TREE_HEAD, head_digest
from busguard.protocol.reasons import Reason
from busguard.protocol.records import AuditRecord, Coordinates, Resolution, audit_decoder
from busguard.runtime.clients import partitions_of, reader
from busguard.runtime.records import Undecodable

Offsets = dict[str, dict[int, int]]
"""topic -> partition -> next offset to read."""

Progress = Callable[[int], None]
"""Called with the number of records just processed."""

MAX_RECORDS_PER_POLL: Final = 5000
VERIFY_THREADS: Final = 2
_POLL_MS: Final = 200
_R = TypeVar("_R")


class AuditReadError(RuntimeError):
    """The log cannot be read as configured (e.g. the audit topic does not exist)."""


class RawRecord(NamedTuple):
    """One consumed record, as `scan` hands it on."""

    topic: str
    value: bytes | None
    headers: list[tuple[str, bytes]]
    #: why the Kafka client could not decode it (busguard.runtime.records);
    #: busguard never writes such a record, so it is foreign to the log
    undecodable: str | None = None
    partition: int = -1
    offset: int = -1

    @property
    def at(self) -> tuple[int, int] | None:
        """Where it was read (findings name it), if known."""
        return (self.partition, self.offset) if self.partition >= 0 else None


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


class CheckedAudit(NamedTuple):
    value: bytes | None
    record: AuditRecord | None  # None: not a decision or resolution
    verified: bool
    why: str
    seal: bytes | None = None  # seal_digest() of a record verified with the guard key, for known_seals
    sealed_by: Sealer = "guard"  # whose key verified it (meaningful when verified)
    opened: Opened | None = None  # batch-sealed and verified: its head and leaf index
    bad_inclusion: str | None = None  # its head verified, its inclusion proof did not


class CheckedForward(NamedTuple):
    topic: str
    decision_id: str
    ok: bool
    decision_sha256: str | None
    opened: Opened | None = None  # batch-sealed and verified: its head
    source: Coordinates | None = None  # the input record the verified attestation names




_BATCH_SEAL: Final = (HEADER_TREE_HEAD, HEADER_HEAD_SEAL, HEADER_INCLUSION)


def seal_digest(headers: Sequence[tuple[str, bytes]]) -> bytes | None:
    """Identifies the exact (attestation, seal) pair on a record, or the
    attestation with its batch seal (head, head seal, inclusion proof); None
    unless there is exactly one of each (anything else never verifies)."""
    atts = [v for k, v in headers if k == HEADER_ATTESTATION]
    seals = [v for k, v in headers if k == HEADER_SEAL]
    if len(atts) != 1:
        return None
    if len(seals) == 1:
        return hashlib.sha256(len(atts[0]).to_bytes(4, "big") + atts[0] + seals[0]).digest()
    batch = [[v for k, v in headers if k == name] for name in _BATCH_SEAL]
    if seals or any(len(vs) != 1 for vs in batch):
        return None
    parts = [atts[0], *(vs[0] for vs in batch)]
    return hashlib.sha256(b"batch" + b"".join(len(p).to_bytes(4, "big") + p for p in parts)).digest()


def check_audit_record(
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]],
    guard_public_key: bytes,
    reconciler_public_key: bytes | None = None,
    undecodable: str | None = None,
    heads: HeadCache | None = None,
) -> CheckedAudit:
    """Verify one audit record's seal (with the guard's key, else the
    reconciler's) and decode it; the Ledger judges whose key may seal what.
    A batch-sealed record keeps its verified head and leaf index (`opened`)
    for the chain checks."""
    if undecodable is not None:
        return CheckedAudit(value, None, False, f"the Kafka record cannot be decoded ({undecodable})")
    if value is None:
        return CheckedAudit(None, None, False, "the record has no value")
    why = ""
    sealed_by: Sealer = "guard"
    opened: Opened | None = None
    try:
        opened = open_decision_record(value, headers, guard_public_key, heads)
        att, verified = opened.attestation, True
    except InclusionError as exc:
        return CheckedAudit(value, None, False, str(exc), bad_inclusion=str(exc))
    except AttestationError as exc:
        att, verified, why = None, False, str(exc)
        if reconciler_public_key is not None and reconciler_public_key != guard_public_key:
            try:
                att, verified, why, sealed_by = verify_decision_record(value, headers, reconciler_public_key), True, "", "reconciler"
            except AttestationError:
                why = f"{why} (nor with the reconciler's)"
    digest = seal_digest(headers) if verified and sealed_by == "guard" else None
    try:
        record: AuditRecord | None = audit_decoder.decode(value)
    except msgspec.MsgspecError as exc:
        return CheckedAudit(value, None, verified, f"not a decision or resolution: {exc}", digest)
    if verified and att is not None and record is not None:
        own = record.decision_id if isinstance(record, Decision) else record.resolution_id
        if att.decision_id != own:
            verified, why = False, f"the attestation names {att.decision_id}, the record is {own}"
    return CheckedAudit(value, record, verified, why, digest, sealed_by, opened if verified and opened is not None and opened.head is not None else None)


def _admitted_with_known_seal(value: bytes, headers: Sequence[tuple[str, bytes]]) -> Attestation:
    """verify_admitted, minus the seal (this seal was already verified on its audit record)."""
    return check_admitted(decode_attestation(next(v for k, v in headers if k == HEADER_ATTESTATION)), value, headers)


def check_forwarded(
    topic: str,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]],
    guard_public_key: bytes,
    known_seals: Container[bytes] = frozenset(),
    heads: HeadCache | None = None,
) -> CheckedForward:
    """Verify one downstream record's attestation (`verify_admitted`)."""
    ids = [v for k, v in headers if k == HEADER_DECISION_ID]
    did = ids[0].decode("utf-8", "replace") if len(ids) == 1 else ""
    body = value if value is not None else b""
    opened: Opened | None = None
    try:
        digest = seal_digest(headers)
        if digest is not None and digest in known_seals:
            att = _admitted_with_known_seal(body, headers)
        else:
            # the auditor acts for no receiver: verify_admitted's checks, minus the receiver's
            opened = open_sealed(headers, guard_public_key, heads)
            att = check_admitted(opened.attestation, body, headers)
    except (AttestationError, msgspec.MsgspecError):
        return CheckedForward(topic, did, False, None)
    ok = bool(did) and att.decision_id == did
    return CheckedForward(topic, did, ok, att.decision_sha256, opened if opened is not None and opened.head is not None else None, att.source if ok else None)


def note_head(ledger: Ledger, opened: Opened, leaf: bool) -> None:
    """Record a verified head (and, from an audit record, its leaf) in the
    ledger, with the source of the record it proves (whose head it is)."""
    head, raw, att = opened.head, opened.head_raw, opened.attestation
    if head is not None and raw is not None:
        proves = (att.source.topic, att.source.partition, att.decision_id[:PREFIX_CHARS])
        ledger.add_head(head.guard, head.chain, head.seq, head_digest(raw), head.prev, head.size, head.sealed_at, opened.index if leaf else None, proves)


def apply_audit(ledger: Ledger, checked: CheckedAudit, at: tuple[int, int] | None = None) -> None:
    """Feed one checked audit record; `at` is where it was read (partition, offset)."""
    rec = checked.record
    if checked.bad_inclusion is not None:
        try:
            claimed = audit_decoder.decode(checked.value or b"")
            claim: str | None = claimed.decision_id if isinstance(claimed, Decision) else claimed.resolution_id
        except msgspec.MsgspecError:
            claim = None
        ledger.add_bad_inclusion(checked.value, claim, checked.bad_inclusion)
        return
    if checked.opened is not None:
        note_head(ledger, checked.opened, leaf=True)
    if rec is None:
        ledger.add_unreadable(checked.value, checked.verified, checked.why)
    elif isinstance(rec, Resolution):
        ledger.add_resolution(checked.value or b"", rec, checked.verified, checked.why, checked.sealed_by, at)
    else:
        ledger.add_decision(checked.value or b"", rec, checked.verified, checked.why, checked.sealed_by, at)


def apply_forwarded(ledger: Ledger, checked: CheckedForward, at: tuple[int, int] | None = None) -> None:
    """Feed one checked downstream record (and the head it verified under)."""
    ledger.add_forwarded(checked.topic, checked.decision_id, checked.ok, checked.decision_sha256, checked.source, at)
    if checked.opened is not None:
        note_head(ledger, checked.opened, leaf=False)


class SealCache:
    """Digests of seals verified in this run, oldest forgotten first. Written
    only from the event loop's thread; read from workers."""

    def __init__(self, capacity: int = 262_144) -> None:
        self.capacity = capacity
        self._seen: dict[bytes, None] = {}

    def __contains__(self, digest: object) -> bool:
        return digest in self._seen

    def add(self, digest: bytes) -> None:
        self._seen[digest] = None
        while len(self._seen) > self.capacity:
            del self._seen[next(iter(self._seen))]


# -- the consume loop ---------------------------------------------------------


def _headers(record: Any) -> list[tuple[str, bytes]]:
    return [(k, v if v is not None else b"") for k, v in record.headers]


async def scan(
    cfg: Config,
    topics: Sequence[str],
    offsets: Offsets | None,
    idle_ms: int,
    handle: Callable[[list[RawRecord]], Awaitable[None]],
    progress: Progress | None = None,
    required: str | None = None,
) -> Offsets:
    """Read `topics` from `offsets` (or the beginning) until `idle_ms` pass
    without a new record, handing each poll's records to `handle` (in log
    order per partition). Returns the offsets to resume from."""
    parts = await partitions_of(cfg, topics, name="audit")
    if required is not None and required not in parts:
        raise AuditReadError(f"topic {required!r} does not exist on {cfg.kafka.bootstrap_servers}")
    position: Offsets = {t: {p: (offsets or {}).get(t, {}).get(p, 0) for p in ps} for t, ps in parts.items()}
    for t, old in (offsets or {}).items():  # keep what we cannot see now (a topic deleted, a route removed)
        for p, o in old.items():
            position.setdefault(t, {}).setdefault(p, o)
    tps = [TopicPartition(t, p) for t, ps in parts.items() for p in ps]
    if not tps:
        return position
    # an undecodable record is reported, not fatal
    consumer = reader(cfg, name="audit", min_partition_fetch_bytes=4_194_304)
    await consumer.start()
    try:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, position[tp.topic][tp.partition])
        idle_s = idle_ms / 1000
        last_new = time.monotonic()
        # One batch is checked (in handle's worker threads) while the next is
        # fetched and parsed on this thread; batches are handled in order.
        in_hand: tuple[asyncio.Task[None], dict[TopicPartition, list[Any]], int] | None = None

        async def settle() -> None:
            nonlocal in_hand, last_new
            if in_hand is None:
                return
            task, done, count = in_hand
            in_hand = None
            await task
            for tp, recs in done.items():
                if recs:
                    position[tp.topic][tp.partition] = recs[-1].offset + 1
            if progress is not None:
                progress(count)
            last_new = time.monotonic()  # silence is measured from when nothing is in hand

        try:
            while True:
                batch = await consumer.getmany(timeout_ms=max(1, min(_POLL_MS, idle_ms)), max_records=MAX_RECORDS_PER_POLL)
                records = [_raw(tp.topic, r) for tp in sorted(batch, key=lambda t: (t.topic, t.partition)) for r in batch[tp]]
                await settle()
                if not records:
                    if time.monotonic() - last_new >= idle_s:
                        break
                    continue
                in_hand = (asyncio.ensure_future(handle(records)), batch, len(records))
        finally:
            if in_hand is not None:
                in_hand[0].cancel()
                await asyncio.gather(in_hand[0], return_exceptions=True)
    finally:
        await consumer.stop()
    return position


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
    from `offsets` (None: from the beginning) to the end of the log. Returns
    the offsets to resume from."""
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
        for r, checked in zip(audits, await in_threads(lambda r: check_audit_record(r.value, r.headers, guard_public_key, reconciler_public_key, r.undecodable, heads), audits), strict=True):
            if checked.seal is not None:
                seals.add(checked.seal)
            apply_audit(ledger, checked, r.at)
        for r, f in zip(forwards, await in_threads(lambda r: check_forwarded(r.topic, r.value, r.headers, guard_public_key, seals, heads), forwards), strict=True):
            apply_forwarded(ledger, f, r.at)

    try:
        return await scan(cfg, [audit, *downstream], offsets, idle_ms, handle, progress, required=audit)
    finally:
        pool.shutdown(wait=True)


class EscalationRecords(NamedTuple):
    """Every audit record about one escalation, as found in the log."""

    decisions: list[tuple[Decision, bool]]  # (decision, seal verified)
    resolutions: list[tuple[Resolution, bool]]


async def find_escalation(
    cfg: Config, guard_public_key: bytes, escalation_id: str, idle_ms: int, progress: Progress | None = None, reconciler_public_key: bytes | None = None
) -> EscalationRecords:
    """Scan the whole audit topic for one escalation's decision and resolutions
    (the Ledger keeps no receipts, so `escalations show` reads them here)."""
    found = EscalationRecords([], [])
    seen: set[tuple[bytes, bool]] = set()  # identical re-emissions are shown once

    async def handle(raws: list[RawRecord]) -> None:
        for r in raws:
            if r.value is None or r.undecodable is not None:
                continue
            try:
                rec = audit_decoder.decode(r.value)
            except msgspec.MsgspecError:
                continue
            mine = rec.decision_id == escalation_id if isinstance(rec, Decision) else rec.escalation_id == escalation_id
            if not mine:
                continue
            checked = check_audit_record(r.value, r.headers, guard_public_key, reconciler_public_key)
            # whose key may seal what, as the Ledger judges it (the single-key cut-off aside)
            verified = checked.verified and (checked.sealed_by == "guard" if isinstance(rec, Decision) else checked.sealed_by == "reconciler" or cfg.keys.single_key_audit)
            if (r.value, verified) in seen:
                continue
            seen.add((r.value, verified))
            if isinstance(rec, Decision):
                found.decisions.append((rec, verified))
            else:
                found.resolutions.append((rec, verified))

    await scan(cfg, [cfg.topics.audit], None, idle_ms, handle, progress, required=cfg.topics.audit)
    return found
