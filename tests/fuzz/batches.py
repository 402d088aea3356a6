"""Kafka v2 record batches built byte by byte, for hostile-input tests.

aiokafka's own builder (and every real producer) only writes header names
given as `str`, so it cannot make the records this suite needs: header names
that are not UTF-8, bad lengths, out-of-order offset deltas, unknown codec
ids, broken CRCs. This encoder writes the KIP-98 format directly; a unit test
checks that for ordinary records it produces exactly what aiokafka's
`DefaultRecordBatchBuilder` produces.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from aiokafka import codec as codecs
from aiokafka.record.util import calc_crc32c

HeaderPairs = Sequence[tuple[bytes, bytes | None]]
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_HEADER = struct.Struct(">qiibIhiqqqhii")


def varint(value: int) -> bytes:
    """Zigzag varint, as Kafka records use (values beyond 64 bits allowed, for edge tests)."""
    v = (value << 1) ^ (value >> 63) if -(2**63) <= value < 2**63 else value << 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def record(offset_delta: int, key: bytes | None, value: bytes | None, headers: HeaderPairs, timestamp_delta: int = 0) -> bytes:
    """One record, length prefix included."""
    body = b"\x00" + varint(timestamp_delta) + varint(offset_delta) + _field(key) + _field(value) + varint(len(headers))
    body += b"".join(_field(k) + _field(v) for k, v in headers)
    return varint(len(body)) + body


def compress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return bytes(codecs.gzip_encode(data))
    if codec == 2:
        return bytes(codecs.snappy_encode(data))
    if codec == 3:
        return bytes(codecs.lz4_encode(data))
    if codec == 4:
        return bytes(codecs.zstd_encode(data))
    raise ValueError(codec)


def batch(
    records: Sequence[bytes],
    *,
    base_offset: int = 0,
    codec: int = 0,
    first_timestamp: int = 1_700_000_000_000,
    last_offset_delta: int | None = None,
    count: int | None = None,
    attributes: int | None = None,
    payload: bytes | None = None,
    crc: int | None = None,
) -> bytes:
    """A record batch. Every field can be overridden to make it hostile;
    `payload` replaces the (compressed) records section outright."""
    body = payload if payload is not None else compress(codec, b"".join(records))
    attrs = codec if attributes is None else attributes
    n = len(records) if count is None else count
    last = (len(records) - 1 if records else 0) if last_offset_delta is None else last_offset_delta
    after_crc = struct.pack(">hiqqqhii", attrs, last, first_timestamp, first_timestamp, -1, -1, -1, n) + body
    checksum = calc_crc32c(after_crc) if crc is None else crc
    length = _HEADER.size - 12 + len(body)
    return struct.pack(">qiibI", base_offset, length, -1, 2, checksum) + after_crc


def with_base_offset(raw: bytes, base_offset: int) -> bytes:
    """The same batch at another base offset (outside the CRC, as a broker rewrites it)."""
    return struct.pack(">q", base_offset) + raw[8:]


def fix_crc(raw: bytearray) -> bytes:
    """Recompute the CRC after a mutation, so it reaches the record parser."""
    if len(raw) >= 21:
        raw[17:21] = struct.pack(">I", calc_crc32c(bytes(raw[21:])))
    return bytes(raw)


def claimed_span(n: int, *, base_offset: int = 0, crc: int = 1) -> bytes:
    """A 69-byte record batch of one record whose header claims `n` offsets
    (lastOffsetDelta n - 1) and whose CRC does not match, so no reader can
    trust it: what tansu accepts raw and advances the partition by n for
    (issue 19 item 2). n is at most 2^31."""
    if not 1 <= n <= 2**31:
        raise ValueError(f"claimed span {n}: lastOffsetDelta is an int32, so 1 <= n <= 2^31")
    return batch([record(0, None, b"v", [])], base_offset=base_offset, last_offset_delta=n - 1, crc=crc)
