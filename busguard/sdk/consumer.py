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

An agent builds it with `AdmittingConsumer.open(...)`, which makes the
one consumer an agent must use: a group member that commits only what the
agent has acted on (`enable_auto_commit=False`), reads a new group's topic
from its beginning (`auto_offset_reset="earliest"`), and decodes tolerantly
(busguard.runtime.tolerant_fetch, the reader busguard's own processes use):
a record or batch aiokafka cannot decode (a header name that is not UTF-8, a
broken CRC, a corrupt compressed frame) arrives as an `Undecodable`
placeholder instead of raising out of `getmany`, and becomes one refusal
`undecodable` here, past which the position moves.

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
from typing import TYPE_CHECKING, Any, Final, NamedTuple

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

if TYPE_CHECKING:  # the placeholder's module loads aiokafka; admit imports it only when one can exist
    from busguard.runtime.undecodable import Undecodable
    from busguard.runtime.unstick import Unsticker

__all__ = ["AdmittingConsumer", "Batch", "Delivery", "Fetched", "Reader", "Refusal", "log_refusals"]

MAX_DETAIL: Final = 300
_PREFIX_LEN: Final = len(HEADER_ANNOTATION_PREFIX)
#: the reasons a record is refused, in the order they are checked
UNATTESTED: Final = "unattested"
NOT_FOR_ME: Final = "not_for_me"
UNREADABLE: Final = "unreadable"
#: the client could not decode the record (or a whole batch: one refusal for its span)
UNDECODABLE: Final = "undecodable"
#: decided before the done-set's horizon, the time before which it forgot its marks (ActOnce)
BEFORE_HORIZON: Final = "before_horizon"


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
    """A record this agent must not act on: `undecodable` (the Kafka client
    could not decode it; `last_offset` is set when a whole batch could not
    be, and the refusal covers `offset`..`last_offset`), `unattested` (no
    valid busguard seal, or not a forward, or a payload the guard did not
    admit, or annotation headers the attestation does not bind exactly),
    `not_for_me` (admitted, but addressed to another agent), `unreadable`
    (the kind's reader refused its payload); `before_horizon` comes from
    `ActOnce` (decided before the done-set forgot its marks)."""

    topic: str
    partition: int
    offset: int
    reason: str
    detail: str
    last_offset: int | None = None


class Batch(msgspec.Struct, kw_only=True):
    """One fetch, decided: `positions` maps (topic, partition) to the next
    offset to read, i.e. what to commit once every delivery is acted on."""

    deliveries: list[Delivery]
    refusals: list[Refusal]
    positions: dict[tuple[str, int], int]


#: A kind's reader: the typed view of an admitted payload, or ValueError.
Reader = Callable[[Delivery], object]


#: Settings `AdmittingConsumer.open` decides itself; `client_options` may not override them.
FIXED_OPTIONS: Final = frozenset({"bootstrap_servers", "group_id", "enable_auto_commit", "auto_offset_reset", "key_deserializer"})


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
        if not isinstance(guard_public_key, bytes) or len(guard_public_key) != 32:
            raise ValueError(
                f"guard_public_key: {type(guard_public_key).__name__} of {_length(guard_public_key)}; the raw 32 bytes of an Ed25519"
                " public key (`guard_key_from_multikey('z6Mk…')` converts the config's string)"
            )
        if max_records < 1:
            raise ValueError(f"max_records: {max_records}; allowed 1 or more")
        self.consumer = consumer
        self.guard_public_key = guard_public_key
        self.agent_id = agent_id
        self._me = canonical_principal(agent_id)  # a malformed own id is the caller's bug: ValueError now
        self.readers: dict[str, Reader] = dict(readers or {})
        self.heads = heads if heads is not None else HeadCache()
        self.max_records = max_records
        self._unsticker: Unsticker | None = None  # set by `open`, which owns the consumer's rebalances

    @classmethod
    async def open(
        cls,
        topics: str | Sequence[str],
        *,
        bootstrap_servers: str | Sequence[str],
        group_id: str,
        guard_public_key: bytes,
        agent_id: str,
        readers: Mapping[str, Reader] | None = None,
        heads: HeadCache | None = None,
        max_records: int = 500,
        max_inflated_bytes: int | None = None,
        client_options: Mapping[str, Any] | None = None,
    ) -> AdmittingConsumer:
        """Build and start the consumer an agent must read through (module
        doc): a member of `group_id` subscribed to `topics` (none: the agent
        assigns partitions itself on `.consumer`), offsets committed only by
        `commit`, a new group starting at each partition's beginning, and
        tolerant decoding, inflating no compressed batch past
        `max_inflated_bytes` (default: busguard's `batch.max_inflated_bytes`
        default, 16 MiB). `client_options` are further `AIOKafkaConsumer`
        settings (timeouts, fetch sizes, TLS), never the ones this decides."""
        fixed = sorted(FIXED_OPTIONS.intersection(client_options or {}))
        if fixed:
            raise ValueError(f"client_options: {', '.join(fixed)} set; AdmittingConsumer.open decides these (docs/sdk.md)")
        if not isinstance(group_id, str) or not group_id:
            raise ValueError(f"group_id: {group_id!r}; a non-empty consumer group id (offsets are committed to it)")
        inbox = cls(None, guard_public_key=guard_public_key, agent_id=agent_id, readers=readers, heads=heads, max_records=max_records)
        from aiokafka import AIOKafkaConsumer  # the pure path (admit) needs no Kafka client

        from busguard.runtime.tolerant_fetch import consumer_options

        tolerant = consumer_options() if max_inflated_bytes is None else consumer_options(max_inflated_bytes)
        names = (topics,) if isinstance(topics, str) else tuple(topics)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap_servers,
            group_id=group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **tolerant,
            **dict(client_options or {}),
        )
        from busguard.runtime.unstick import Unsticker, stuck_after_s

        inbox._unsticker = Unsticker(consumer, stuck_after_s(int((client_options or {}).get("fetch_max_wait_ms", 500))))
        if names:
            consumer.subscribe(names, listener=_forgetting_listener(inbox._unsticker))
        try:
            await consumer.start()
        except BaseException:
            await consumer.stop()
            raise
        inbox.consumer = consumer
        return inbox

    async def close(self) -> None:
        """Stop the wrapped consumer (it leaves its group)."""
        await self.consumer.stop()

    async def __aenter__(self) -> AdmittingConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def getmany(self, timeout_ms: int = 1000) -> Batch:
        """Fetch up to `max_records` records (waiting up to `timeout_ms`) and decide each."""
        fetched = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=self.max_records)
        # a partition the broker will not move past (busguard.runtime.unstick): its offsets are refused one by one
        skipped = await self._unsticker.check(fetched) if self._unsticker is not None else []
        batch = self.admit([*(r for records in fetched.values() for r in records), *(item for _, item in skipped)])
        log_refusals(batch.refusals)
        return batch

    async def commit(self, batch: Batch) -> None:
        """Commit the batch's positions: call only after acting on every delivery in it."""
        if not batch.positions:
            return
        from aiokafka.structs import TopicPartition  # the pure path (admit) needs no Kafka client

        await self.consumer.commit({TopicPartition(t, p): o for (t, p), o in batch.positions.items()})

    def admit(self, records: Iterable[Fetched | Any]) -> Batch:
        """Decide each record in order; no I/O and no logging (`getmany` logs
        each refusal), and never an exception for a record's contents. An
        `Undecodable` (the tolerant reader's placeholder) is refused as
        `undecodable`, and the position moves past everything it covers."""
        batch = Batch(deliveries=[], refusals=[], positions={})
        for r in records:
            u = None if type(r) is Fetched else _as_undecodable(r)
            if u is not None:
                batch.positions[(u.topic, u.partition)] = u.next_offset
                batch.refusals.append(_undecodable(u))
                continue
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


def log_refusals(refusals: Sequence[Refusal]) -> None:
    """One `record_refused` warning per refusal (structlog)."""
    if not refusals:
        return
    import structlog  # it loads asyncio; the pure core imports this module through busguard's facade

    log = structlog.get_logger("busguard.sdk.consumer")
    for refusal in refusals:
        log.warning("record_refused", **msgspec.structs.asdict(refusal))


def _as_undecodable(r: object) -> Undecodable | None:
    # Imported only for a record that is not a `Fetched`: an aiokafka record
    # or placeholder, so the Kafka client is loaded already.
    from busguard.runtime.undecodable import Undecodable

    return r if type(r) is Undecodable else None


def _undecodable(u: Undecodable) -> Refusal:
    span = None if u.last_offset is None or u.last_offset == u.offset else u.last_offset
    where = "" if span is None else f" (offsets {u.offset}..{span})"
    return Refusal(
        topic=u.topic,
        partition=u.partition,
        offset=u.offset,
        reason=UNDECODABLE,
        detail=f"{u.reason}{where}: {u.detail}"[:MAX_DETAIL],
        last_offset=span,
    )


def _length(value: object) -> str:
    try:
        return f"{len(value)} bytes"  # type: ignore[arg-type]
    except TypeError:
        return "no length"


def _principal(agent_id: str) -> str | None:
    try:
        return canonical_principal(agent_id)
    except ValueError:
        return None


def _refuse(r: Fetched | Any, reason: str, detail: str) -> Refusal:
    return Refusal(topic=r.topic, partition=r.partition, offset=r.offset, reason=reason, detail=detail[:MAX_DETAIL])


def _forgetting_listener(unsticker: Unsticker) -> Any:
    """A rebalance listener that drops the unsticker's state for partitions
    revoked or assigned: a refetch floor must not outlive its assignment."""
    from aiokafka import ConsumerRebalanceListener

    class Forget(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            unsticker.forget(revoked)

        async def on_partitions_assigned(self, assigned: Any) -> None:
            unsticker.forget(assigned)

    return Forget()
