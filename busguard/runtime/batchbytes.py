"""The bytes of a KIP-98 record batch, for the tolerant reader of
runtime/decoding.py: the header layout and attribute bits, zigzag varints
and length-prefixed fields read within a bound, and the detail texts of
its decisions (clipped, so a hostile batch cannot make a long one)."""

from __future__ import annotations

import struct
from typing import Final

from busguard.runtime.inflate import OverLimit

BATCH_HEADER: Final = struct.Struct(">qiibIhiqqqhii")  # 61 bytes: KIP-98 RecordBatch header
LOG_OVERHEAD: Final = 12  # baseOffset int64 + batchLength int32
MIN_V2_LENGTH: Final = BATCH_HEADER.size - LOG_OVERHEAD
CODEC_NAMES: Final = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CONTROL: Final = 0x20
TRANSACTIONAL: Final = 0x10
LOG_APPEND_TIME: Final = 0x08
MAX_DETAIL: Final = 512


class Corrupt(Exception):
    """The bytes do not parse; the message says where."""


def varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Zigzag varint (as Kafka's records use), at most 10 bytes, within `end`."""
    shift = value = 0
    for _ in range(10):
        if pos >= end:
            raise Corrupt("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
    raise Corrupt("varint longer than 10 bytes")


def read_bytes(buf: bytes, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    n, pos = varint(buf, pos, end)
    if n < 0:
        return None, pos
    if pos + n > end:
        raise Corrupt(f"{what} length {n} runs past the record")
    return buf[pos : pos + n], pos + n


def over_limit(codec_name: str, exc: OverLimit) -> str:
    claim = f"; its snappy length headers claim at least {exc.known}" if exc.known is not None else ""
    return f"{codec_name} records inflate to more than {exc.limit} bytes (batch.max_inflated_bytes){claim}; refused unread, the batch is kept compressed"


def is_abort_marker(batch: bytes) -> bool:
    """The control batch's first record's key is (version, type 0 = ABORT);
    control batches are never compressed. Bytes that do not parse are no
    abort marker."""
    try:
        pos, end = BATCH_HEADER.size, len(batch)
        _, pos = varint(batch, pos, end)  # record length
        pos += 1  # attributes
        _, pos = varint(batch, pos, end)  # timestamp delta
        _, pos = varint(batch, pos, end)  # offset delta
        key, _ = read_bytes(batch, pos, end, "control key")
    except Corrupt:
        return False
    return key is not None and len(key) >= 4 and struct.unpack_from(">h", key, 2)[0] == 0


def no_record(lo: int, hi: int) -> str:
    span = f"offset {lo}" if lo == hi else f"offsets {lo}-{hi}"
    return f"the batch header claims {span} but the batch holds no record there"


def rewinds(base: int, last_delta: int) -> str:
    lo = base + last_delta + 1
    behind = f"; offsets {max(lo, 0)}-{base - 1} may then hold records no decision covers" if lo < base else ""
    return f"lastOffsetDelta {last_delta} is negative: a broker that trusts it stores the next records from offset {lo}{behind}"


def clip(text: str) -> str:
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 1] + "…"
