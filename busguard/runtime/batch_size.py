"""How many bytes a record and a record batch take on the wire (Kafka's v2
batch format), exactly or as a cheap upper bound, and how much a codec may
grow a batch: what `OutputBudget` (outputs.py) sizes every output with, and
what the producer's `max_batch_size` is derived from."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from busguard.config import Compression

if TYPE_CHECKING:
    from busguard.runtime.outputs import Output

#: A v2 record batch's header: base offset (8), length (4), leader epoch (4),
#: magic (1), CRC (4), attributes (2), last offset delta (4), first and max
#: timestamps (8 + 8), producer id (8), epoch (2), base sequence (4), count (4).
BATCH_OVERHEAD: Final = 61
_CODEC_IDS: Final = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _varint_size(n: int) -> int:
    """Bytes of Kafka's zigzag varint for a (32 or 64 bit) signed value."""
    z = (n << 1) ^ (n >> 63)
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


def record_size(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> int:
    """One record's bytes in a v2 batch, its length prefix included, as the
    first record of its batch (offset and timestamp deltas 0)."""
    body = 3  # attributes, timestamp delta, offset delta
    body += 1 if key is None else _varint_size(len(key)) + len(key)
    body += 1 if value is None else _varint_size(len(value)) + len(value)
    body += _varint_size(len(headers))
    for name, v in headers:
        n = len(name.encode())
        body += _varint_size(n) + n + (1 if v is None else _varint_size(len(v)) + len(v))
    return body + _varint_size(body)


def record_size_bound(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> int:
    """At least `record_size(key, value, headers)`, for lengths below 2**31
    (every length here: one record batch is at most a 32-bit size): each
    varint counted at its longest (5 bytes), a header name at 4 UTF-8 bytes
    per character. Run for every would-be forward, so no varint loop."""
    n = 3 + 5 + 5 + 5 + 5 + (0 if key is None else len(key)) + (0 if value is None else len(value))
    for name, v in headers:
        n += 10 + 4 * len(name) + (0 if v is None else len(v))
    return n


def batch_size(o: Output) -> int:
    """The uncompressed record batch holding only `o`."""
    return BATCH_OVERHEAD + record_size(o.key, o.value, o.headers)


def compressed_batch_size(o: Output, compression: Compression) -> int:
    """The record batch holding only `o`, built and compressed by the same
    aiokafka builder the producer uses: exactly what the broker is sent."""
    if compression == "none":
        return batch_size(o)
    builder = DefaultRecordBatchBuilder(2, _CODEC_IDS[compression], 0, -1, -1, 0, 0)
    builder.append(0, o.timestamp_ms or 0, key=o.key, value=o.value, headers=list(o.headers))
    return len(builder.build())


def codec_expansion(compression: Compression, n: int) -> int:
    """An upper bound on how much `compression` can grow n incompressible
    bytes (aiokafka's builder sends a batch compressed even when it grew).
    From each format's worst case: deflate stored blocks plus the gzip
    wrapper (zlib's deflateBound); snappy n/6 + 32 per 32 KiB xerial block;
    LZ4 frames store incompressible 64 KiB blocks raw (LZ4F_compressBound);
    zstd n/256 (ZSTD_COMPRESSBOUND); each with 64 bytes of framing slack."""
    if compression == "none":
        return 0
    if compression == "gzip":
        return n // 4096 + n // 16384 + n // (1 << 25) + 64
    if compression == "snappy":
        return n // 6 + 36 * (n // 32768 + 1) + 64
    if compression == "lz4":
        return n // 255 + 8 * (n // 65536 + 1) + 64
    return n // 256 + 128  # zstd


def producer_batch_size(max_message_bytes: int, compression: Compression) -> int:
    """The producer's max_batch_size: a batch of records filled to this many
    uncompressed bytes still fits max_message_bytes once compressed."""
    return max_message_bytes - codec_expansion(compression, max_message_bytes)
