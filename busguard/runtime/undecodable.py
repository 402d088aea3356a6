"""The placeholder for an offset the Kafka client could not decode.

Its own module because everything downstream of the fetch (the guard, the
reconciler, the auditor's reader, the demo's tap) handles it beside
ordinary records, while only the fetch path (busguard.runtime.decoding and
busguard.runtime.tolerant_fetch) makes one.
"""

from __future__ import annotations

import msgspec
from aiokafka.structs import ConsumerRecord


class Undecodable(msgspec.Struct, frozen=True, gc=False):
    """An offset whose record the client could not decode.

    Has the attributes the loop reads from a `ConsumerRecord` (topic,
    partition, offset, key, value, headers, timestamp), so it travels
    through the batch loop beside ordinary records.

    * `undecodable_header` / `undecodable_record`: `key` and `value` are the
      record's own (when they could be read), `raw_headers` its header pairs
      as bytes, `raw` the record's exact bytes as encoded inside the
      (decompressed) batch;
    * `undecodable_batch`: one placeholder for a span of offsets,
      [`offset`, `last_offset`]; `raw` is the whole batch as fetched
      (`carrier`), `batch_offset` and `batch_sha256` name it. The span is
      whatever the batch header claims (capped below the next batch of the
      fetch), one item however long.

    `last_offset` is None for an item that covers its own offset only.
    """

    topic: str
    partition: int
    offset: int
    reason: str
    detail: str
    raw: bytes | None
    batch_offset: int
    batch_sha256: str
    key: bytes | None = None
    value: bytes | None = None
    raw_headers: tuple[tuple[bytes, bytes | None], ...] | None = None
    timestamp: int | None = None
    carrier: bool = False
    last_offset: int | None = None

    @property
    def headers(self) -> tuple[tuple[str, bytes], ...]:
        return ()

    @property
    def next_offset(self) -> int:
        """The offset after everything this item covers: where a consumer
        that has decided it commits."""
        return (self.offset if self.last_offset is None else self.last_offset) + 1


def next_offset(item: ConsumerRecord | Undecodable) -> int:
    """The offset to commit after deciding `item`: past a whole span."""
    if type(item) is Undecodable:
        return item.next_offset
    return int(item.offset) + 1
