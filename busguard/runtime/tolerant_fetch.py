"""Fetched Kafka bytes to records, with a decision for every offset.

aiokafka decodes a fetch lazily inside `getmany()`: a header name that is not
UTF-8, a codec it has no library for, a corrupt compressed frame or a CRC
mismatch raises out of `getmany()`, before busguard sees any record of that
poll. The process dies, dies again on the same record after every restart,
and the partition stalls. Anyone who may produce to an input topic can send
such a record.

This module is the one place busguard changes that. A consumer that opts in
(by passing `consumer_options()` to `AIOKafkaConsumer`) gets, for each
fetched partition, every record aiokafka would have returned plus, for each
record or batch that cannot be read, an `Undecodable` placeholder carrying its
coordinates and original bytes. Every offset a record batch's header covers
(base offset .. base offset + last offset delta) is covered by exactly one
item: a record, or a placeholder for a single record, or one
`undecodable_batch` placeholder for a whole span of offsets
([`offset`, `last_offset`]), so every offset gets exactly one decision, the
output per undecodable batch is a constant whatever its header claims, and
the committed position (`next_offset`) always moves past a bad record.

The decoding itself (how, per record batch, and what each placeholder
carries) is in busguard.runtime.decoding. Compressed batches are inflated
there with a bound (`batch.max_inflated_bytes`, carried by the consumer's
`RawKeys`), never by aiokafka: a batch that would inflate past it is one
more `undecodable_batch`, so a 20 KB zstd batch that inflates to hundreds of
MB costs the process at most that bound, once.

The hook: aiokafka 0.14 builds `PartitionRecords(..., key_deserializer, ...)`
from the raw partition bytes in `aiokafka.consumer.fetcher`, with no per
consumer extension point. `install()` replaces two names in that module, once,
for aiokafka 0.14 only: `MemoryRecords` (by a wrapper that keeps the raw
bytes and otherwise delegates) and `PartitionRecords` (by a subclass). The
subclass behaves exactly as aiokafka's unless the consumer's key
deserializer is a `RawKeys` (such as `RAW_KEYS`), so consumers that did not opt in
(tests' readers) see aiokafka's behaviour unchanged. A consumer with
`isolation_level="read_committed"` skips aborted transactions' batches on the
tolerant path as aiokafka does (the decoder is given the fetch's aborted
transactions).
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any, Final

import aiokafka
import msgspec
from aiokafka.structs import ConsumerRecord

from busguard.config import DEFAULT_MAX_INFLATED_BYTES
from busguard.protocol.reasons import Reason
from busguard.runtime.decoding import PartitionDecoder
from busguard.runtime.undecodable import Undecodable, next_offset

_READ_COMMITTED: Final = 1  # aiokafka.consumer.fetcher.READ_COMMITTED

__all__ = [
    "FORM_BATCH",
    "FORM_BATCH_REF",
    "FORM_PARTS",
    "FORM_RECORD",
    "HEADER_BATCH_OFFSET",
    "HEADER_BATCH_SHA256",
    "HEADER_LAST_OFFSET",
    "HEADER_ORIGINAL_FORM",
    "HEADER_ORIGINAL_HEADERS",
    "HEADER_ORIGINAL_HEADERS_LENGTH",
    "HEADER_ORIGINAL_HEADERS_SHA256",
    "RAW_KEYS",
    "RawKeys",
    "PartitionDecoder",
    "Undecodable",
    "consumer_options",
    "floors_of",
    "install",
    "next_offset",
    "preserved",
]

#: The preserved-bytes headers on a dead-letter record for an `Undecodable`
#: input (docs/protocol.md, "Undecodable records").
HEADER_ORIGINAL_FORM: Final = "busguard-original-form"
HEADER_ORIGINAL_HEADERS: Final = "busguard-original-headers"
HEADER_ORIGINAL_HEADERS_LENGTH: Final = "busguard-original-headers-length"
HEADER_ORIGINAL_HEADERS_SHA256: Final = "busguard-original-headers-sha256"
HEADER_BATCH_OFFSET: Final = "busguard-batch-offset"
HEADER_BATCH_SHA256: Final = "busguard-batch-sha256"
#: On the dead letter of a span decision: the last input offset it covers.
HEADER_LAST_OFFSET: Final = "busguard-last-offset"

FORM_PARTS: Final = "parts"
FORM_RECORD: Final = "record"
FORM_BATCH: Final = "batch"
FORM_BATCH_REF: Final = "batch-ref"


class RawKeys:
    """The key deserializer of a tolerant consumer: keys pass unchanged, and
    it carries the consumer's bound on inflated batches (the only per
    consumer channel aiokafka hands `PartitionRecords`)."""

    __slots__ = ("max_inflated_bytes", "floors")

    def __init__(self, max_inflated_bytes: int) -> None:
        self.max_inflated_bytes = max_inflated_bytes
        #: (topic, partition) -> the position a fetch from the offset just
        #: before it must resume at (busguard.runtime.unstick); used by that
        #: fetch, then dropped. At most one per assigned partition, dropped on
        #: any rebalance of it.
        self.floors: dict[tuple[str, int], int] = {}

    def __call__(self, key: bytes | None) -> bytes | None:
        return key


#: Passed as `key_deserializer`, it marks a consumer as tolerant with the
#: default bound (see module doc); `consumer_options` makes one per bound.
RAW_KEYS: Final[Callable[[bytes | None], bytes | None]] = RawKeys(DEFAULT_MAX_INFLATED_BYTES)


def consumer_options(max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES) -> dict[str, Any]:
    """Keyword arguments that make an `AIOKafkaConsumer` decode tolerantly,
    inflating no compressed batch past `max_inflated_bytes`."""
    install()
    return {"key_deserializer": RawKeys(max_inflated_bytes)}


def floors_of(consumer: Any) -> dict[tuple[str, int], int] | None:
    """The refetch floors of a tolerant consumer (`RawKeys.floors`), None for another."""
    keys = getattr(consumer, "_key_deserializer", None)
    return keys.floors if isinstance(keys, RawKeys) else None


# -- preserved bytes on the dead-letter record ---------------------------------

_pairs = msgspec.json.Encoder()


def preserved(item: Any, max_bytes: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]:
    """(key, value, headers) to dead-letter an input with. For an ordinary
    record, its own; for an `Undecodable`, the documented recoverable form
    (docs/protocol.md, "Undecodable records"). The dead-letter writer still
    replaces a value over `max_bytes` by its length and SHA-256."""
    if type(item) is not Undecodable:
        return item.key, item.value, list(item.headers)
    u: Undecodable = item
    if u.reason == Reason.UNDECODABLE_BATCH:
        ref = [(HEADER_BATCH_OFFSET, str(u.batch_offset).encode()), (HEADER_BATCH_SHA256, u.batch_sha256.encode())]
        if u.last_offset is not None:
            ref.append((HEADER_LAST_OFFSET, str(u.last_offset).encode()))
        if u.carrier:
            return None, u.raw, [(HEADER_ORIGINAL_FORM, FORM_BATCH.encode()), *ref]
        return None, None, [(HEADER_ORIGINAL_FORM, FORM_BATCH_REF.encode()), *ref]
    if u.raw_headers is None:
        return None, u.raw, [(HEADER_ORIGINAL_FORM, FORM_RECORD.encode())]
    encoded = _pairs.encode([[k, v] for k, v in u.raw_headers])
    # The dead letter must stay producible: headers, key and the value as
    # it will be kept (a value over the limit is replaced by its hash) fit
    # within max_bytes together, or the headers go by hash too.
    kept_value = len(u.value) if u.value is not None and len(u.value) <= max_bytes else 0
    if len(encoded) + kept_value + len(u.key or b"") > max_bytes:
        kept = [
            (HEADER_ORIGINAL_HEADERS_LENGTH, str(len(encoded)).encode()),
            (HEADER_ORIGINAL_HEADERS_SHA256, hashlib.sha256(encoded).hexdigest().encode()),
        ]
    else:
        kept = [(HEADER_ORIGINAL_HEADERS, encoded)]
    return u.key, u.value, [(HEADER_ORIGINAL_FORM, FORM_PARTS.encode()), *kept]


# -- the aiokafka hook ---------------------------------------------------------

_installed = False


def install() -> None:
    """Hook `PartitionDecoder` into aiokafka's fetcher (see module doc). Idempotent."""
    global _installed
    if _installed:
        return
    from aiokafka.consumer import fetcher

    if not aiokafka.__version__.startswith("0.14."):
        raise RuntimeError(f"busguard's tolerant fetch decoder is written for aiokafka 0.14.x; found {aiokafka.__version__}")
    original_records = fetcher.MemoryRecords
    original_partition = fetcher.PartitionRecords
    expected = [
        "self",
        "tp",
        "records",
        "aborted_transactions",
        "fetch_offset",
        "key_deserializer",
        "value_deserializer",
        "check_crcs",
        "isolation_level",
    ]
    if list(inspect.signature(original_partition.__init__).parameters) != expected or fetcher.READ_COMMITTED != _READ_COMMITTED:
        raise RuntimeError("aiokafka's PartitionRecords changed shape; busguard's tolerant fetch decoder needs updating")

    class RawMemoryRecords:
        """aiokafka's MemoryRecords, keeping the raw bytes for the tolerant path."""

        __slots__ = ("raw", "_inner")

        def __init__(self, raw: bytes) -> None:
            self.raw = raw
            self._inner = original_records(raw)

        def size_in_bytes(self) -> int:
            return int(self._inner.size_in_bytes())

        def has_next(self) -> bool:
            return bool(self._inner.has_next())

        def next_batch(self) -> Any:
            return self._inner.next_batch()

    class TolerantPartitionRecords(original_partition):  # type: ignore[misc, valid-type]
        def __init__(
            self, tp: Any, records: Any, aborted: Any, fetch_offset: int, key_des: Any, value_des: Any, check_crcs: bool, isolation: Any
        ) -> None:
            super().__init__(tp, records, aborted, fetch_offset, key_des, value_des, check_crcs, isolation)
            if isinstance(key_des, RawKeys) and isinstance(records, RawMemoryRecords):
                self._key_deserializer = None
                floor = key_des.floors.get((tp.topic, tp.partition))
                if floor is not None and fetch_offset == floor - 1:
                    del key_des.floors[(tp.topic, tp.partition)]  # the refetch it was set for
                else:
                    floor = None
                decoder = PartitionDecoder(
                    tp.topic,
                    tp.partition,
                    records.raw,
                    fetch_offset,
                    max_inflated_bytes=key_des.max_inflated_bytes,
                    floor=floor,
                    aborted=(aborted or []) if isolation == _READ_COMMITTED else None,
                )
                self._records_iterator = self._tolerant(decoder)

        def _tolerant(self, decoder: PartitionDecoder) -> Iterator[ConsumerRecord | Undecodable]:
            for item in decoder:
                self.next_fetch_offset = decoder.next_fetch_offset
                yield item
            self.next_fetch_offset = decoder.next_fetch_offset

    fetcher.MemoryRecords = RawMemoryRecords
    fetcher.PartitionRecords = TolerantPartitionRecords
    _installed = True
