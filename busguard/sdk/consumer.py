"""An admitting consumer: an agent reads only what busguard admitted for it.

Why: every agent used to loop over its consumer calling `open_admitted`
record by record, and one bad record (unattested, addressed to someone
else, or a kind's payload it cannot read) raised in the middle of a batch,
so the agent either stalled on it or skipped the rest. `AdmittingConsumer`
wraps an `AIOKafkaConsumer` (anything with an async
`getmany(timeout_ms=, max_records=)` and `commit(offsets)`) and turns each
fetch into one `Batch`: every record is either a `Delivery` (attested,
addressed to this agent, read by its kind's reader) or a `Refusal` (with
a reason), never an exception, and the batch says which offsets to commit
once the agent has acted on it.

    >>> from busguard.testing import GUARD_PUBLIC_KEY, Harness, agent, sender
    >>> h = Harness()
    >>> rec = sender("planner").sign(kind="handoff", task_id="t-1", receiver=agent("executor"), payload=b"{}")
    >>> value, headers = h.forward(rec)
    >>> inbox = AdmittingConsumer(None, guard_public_key=GUARD_PUBLIC_KEY, agent_id=agent("executor"))
    >>> batch = inbox.admit([Fetched("agents.out", 0, 7, value, headers), Fetched("agents.out", 0, 8, b"{}", [])])
    >>> [d.receipt.task_id for d in batch.deliveries], [r.reason for r in batch.refusals]
    (['t-1'], ['unattested'])
    >>> batch.positions
    {('agents.out', 0): 9}

Cost per record: one inclusion proof (a few SHA-256 hashes) when the guard
seals per batch, since the tree head's signature is checked once per batch
(the `HeadCache`), or one Ed25519 verify when it seals per record; the
receipt is decoded and the payload hashed once. Bounds: a batch holds at
most `max_records` records (the wrapped consumer's own bound); a refusal's
detail is at most `MAX_DETAIL` characters; the head cache holds at most
its capacity (4096 heads).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, NamedTuple

import msgspec

from busguard.protocol.attestation import (
    HEADER_ANNOTATION_PREFIX,
    Attestation,
    AttestationError,
    HeadCache,
    check_admitted,
    open_attestation,
)
from busguard.protocol.envelope import HEADER_RECEIPT
from busguard.protocol.identity import canonical_principal
from busguard.protocol.receipt import Receipt, ReceiptError, decode_receipt

__all__ = ["AdmittingConsumer", "Batch", "Delivery", "Fetched", "Reader", "Refusal"]

MAX_DETAIL: Final = 300
_PREFIX_LEN: Final = len(HEADER_ANNOTATION_PREFIX)
#: the reasons a record is refused, in the order they are checked
UNATTESTED: Final = "unattested"
NOT_FOR_ME: Final = "not_for_me"
UNREADABLE: Final = "unreadable"


class Fetched(NamedTuple):
    """The parts of a consumed record the consumer reads (an aiokafka
    `ConsumerRecord` has them under the same names)."""

    topic: str
    partition: int
    offset: int
    value: bytes | None
    headers: Sequence[tuple[str, bytes]]


class Delivery(msgspec.Struct, frozen=True, kw_only=True):
    """An admitted record for this agent. `annotations` are the forward's
    `busguard-annotation-<name>` headers (docs/protocol.md 12): busguard's
    facts about the decision (award `verification`, taint `taint.unit`,
    compromise `verdict` / `caution` ...), each under the seal (the
    attestation's `annotations_sha256`; a forward carrying one the
    attestation does not bind is refused); `view` is what the kind's reader
    made of the payload (None without a reader for the kind)."""

    topic: str
    partition: int
    offset: int
    decision_id: str
    receipt: Receipt
    payload: bytes
    annotations: dict[str, str]
    attestation: Attestation
    view: Any = None


class Refusal(msgspec.Struct, frozen=True, kw_only=True):
    """A record this agent must not act on: `unattested` (no valid busguard
    seal, or not a forward, or a payload the guard did not admit, or
    annotation headers the attestation does not bind exactly),
    `not_for_me` (admitted, but addressed to another agent), `unreadable`
    (the kind's reader refused its payload)."""

    topic: str
    partition: int
    offset: int
    reason: str
    detail: str


class Batch(msgspec.Struct, kw_only=True):
    """One fetch, decided: `positions` maps (topic, partition) to the next
    offset to read, i.e. what to commit once every delivery is acted on."""

    deliveries: list[Delivery]
    refusals: list[Refusal]
    positions: dict[tuple[str, int], int]


#: A kind's reader: the typed view of an admitted payload, or ValueError.
Reader = Callable[[Delivery], object]


class AdmittingConsumer:
    def __init__(
        self,
        consumer: Any,
        *,
        guard_public_key: bytes,
        agent_id: str,
        readers: Mapping[str, Reader] | None = None,
        heads: HeadCache | None = None,
        max_records: int = 500,
    ) -> None:
        if len(guard_public_key) != 32:
            raise ValueError(f"guard_public_key: {len(guard_public_key)} bytes; an Ed25519 public key is 32")
        if max_records < 1:
            raise ValueError(f"max_records: {max_records}; allowed 1 or more")
        self.consumer = consumer
        self.guard_public_key = guard_public_key
        self.agent_id = agent_id
        self._me = canonical_principal(agent_id)  # a malformed own id is the caller's bug: ValueError now
        self.readers: dict[str, Reader] = dict(readers or {})
        self.heads = heads if heads is not None else HeadCache()
        self.max_records = max_records

    async def getmany(self, timeout_ms: int = 1000) -> Batch:
        """Fetch up to `max_records` records (waiting up to `timeout_ms`) and decide each."""
        fetched = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=self.max_records)
        batch = self.admit(r for records in fetched.values() for r in records)
        if batch.refusals:
            import structlog  # it loads asyncio; the pure core imports this module through busguard's facade

            log = structlog.get_logger("busguard.sdk.consumer")
            for refusal in batch.refusals:
                log.warning("record_refused", **msgspec.structs.asdict(refusal))
        return batch

    async def commit(self, batch: Batch) -> None:
        """Commit the batch's positions: call only after acting on every delivery in it."""
        if not batch.positions:
            return
        from aiokafka.structs import TopicPartition  # the pure path (admit) needs no Kafka client

        await self.consumer.commit({TopicPartition(t, p): o for (t, p), o in batch.positions.items()})

    def admit(self, records: Iterable[Fetched | Any]) -> Batch:
        """Decide each record in order; no I/O and no logging (`getmany` logs
        each refusal), and never an exception for a record's contents."""
        batch = Batch(deliveries=[], refusals=[], positions={})
        for r in records:
            batch.positions[(r.topic, r.partition)] = r.offset + 1
            outcome = self._open(r)
            if isinstance(outcome, Delivery):
                batch.deliveries.append(outcome)
            else:
                batch.refusals.append(outcome)
        return batch

    def _open(self, r: Fetched | Any) -> Delivery | Refusal:
        value: bytes = r.value if r.value is not None else b""
        headers = r.headers
        try:
            att = check_admitted(open_attestation(headers, self.guard_public_key, self.heads), value, headers)
            receipt = decode_receipt(next(v for k, v in headers if k == HEADER_RECEIPT))
        except (AttestationError, ReceiptError) as exc:
            return _refuse(r, UNATTESTED, str(exc))
        if receipt.receiver != self.agent_id and _principal(receipt.receiver) != self._me:
            return _refuse(r, NOT_FOR_ME, f"addressed to {receipt.receiver[:128]!r}, not to {self.agent_id[:128]!r}")
        annotations = {k[_PREFIX_LEN:]: v.decode("utf-8", "replace") for k, v in headers if k[:_PREFIX_LEN] == HEADER_ANNOTATION_PREFIX}
        delivery = Delivery(
            topic=r.topic,
            partition=r.partition,
            offset=r.offset,
            decision_id=att.decision_id,
            receipt=receipt,
            payload=value,
            annotations=annotations,
            attestation=att,
        )
        reader = self.readers.get(receipt.kind)
        if reader is None:
            return delivery
        try:
            return msgspec.structs.replace(delivery, view=reader(delivery))
        except ValueError as exc:
            return _refuse(r, UNREADABLE, f"{receipt.kind}: {exc}")


def _principal(agent_id: str) -> str | None:
    try:
        return canonical_principal(agent_id)
    except ValueError:
        return None


def _refuse(r: Fetched | Any, reason: str, detail: str) -> Refusal:
    return Refusal(topic=r.topic, partition=r.partition, offset=r.offset, reason=reason, detail=detail[:MAX_DETAIL])
