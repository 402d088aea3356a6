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
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import cramjam
from aiokafka import codec as codecs
from aiokafka.record.util import calc_crc32c

HeaderPairs = Sequence[tuple[bytes, bytes | None]]
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_HEADER = struct.Struct(">qiibIhiqqqhii")


def varint(value: int) -> bytes:
    """Zigzag varint, as Kafka records use (values beyond 64 bits allowed, for edge tests)."""
    return _uvarint((value << 1) ^ (value >> 63) if -(2**63) <= value < 2**63 else value << 1)


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


def transactional(records: Sequence[bytes], base_offset: int, producer_id: int, attributes: int = 0x10) -> bytes:
    """A batch of a transactional producer (KIP-98: the transactional bit, a producer id)."""
    raw = bytearray(batch(records, base_offset=base_offset, attributes=attributes))
    raw[43:51] = producer_id.to_bytes(8, "big", signed=True)
    return fix_crc(raw)


def marker(base_offset: int, producer_id: int, commit: bool) -> bytes:
    """A transaction marker: a control batch whose record's key is (version 0, type 1 COMMIT or 0 ABORT)."""
    key = (0).to_bytes(2, "big") + (1 if commit else 0).to_bytes(2, "big")
    return transactional([record(0, key, (0).to_bytes(2, "big") + (5).to_bytes(4, "big"), [])], base_offset, producer_id, 0x30)


# -- bombs: small compressed batches that inflate far past any bound --------------

_BOMB_CHUNK = 1 << 20
_XERIAL_BLOCK = 32 * 1024


def _bomb_parts(value_bytes: int, offset_delta: int) -> tuple[bytes, bytes]:
    """The bytes around a record's `value_bytes` zero bytes of value: one
    record, no key, no headers."""
    after_length = b"\x00" + varint(0) + varint(offset_delta) + varint(-1) + varint(value_bytes)
    suffix = varint(0)
    return varint(len(after_length) + value_bytes + len(suffix)) + after_length, suffix


def bomb_inflated_size(value_bytes: int, records: int = 1) -> int:
    """How many bytes the records section of `bomb_batch(…, value_bytes, records)` inflates to."""
    return sum(len(p) + value_bytes + len(s) for p, s in (_bomb_parts(value_bytes, i) for i in range(records)))


def _stream(value_bytes: int, records: int) -> Iterator[bytes]:
    zeros = bytes(_BOMB_CHUNK)
    for i in range(records):
        prefix, suffix = _bomb_parts(value_bytes, i)
        yield prefix
        left = value_bytes
        while left:
            n = min(left, _BOMB_CHUNK)
            yield zeros[:n]
            left -= n
        yield suffix


def _xerial(chunks: Iterator[bytes]) -> bytes:
    """xerial-framed snappy (as aiokafka and the Java client write it), 32 KiB
    blocks; identical blocks are compressed once."""
    out = [struct.pack("!" + codecs._XERIAL_V1_FORMAT, *codecs._XERIAL_V1_HEADER)]
    seen: dict[bytes, bytes] = {}
    pending = bytearray()

    def flush(block: bytes) -> None:
        c = seen.get(block)
        if c is None:
            c = bytes(cramjam.snappy.compress_raw(block))
            if len(seen) < 4:
                seen[block] = c
        out.append(struct.pack("!i", len(c)) + c)

    for chunk in chunks:
        pending += chunk
        while len(pending) >= _XERIAL_BLOCK:
            flush(bytes(pending[:_XERIAL_BLOCK]))
            del pending[:_XERIAL_BLOCK]
    if pending or len(out) == 1:
        flush(bytes(pending))  # an empty stream still has one block: a bare header reads as raw snappy
    return b"".join(out)


def compress_stream(codec: int, chunks: Iterator[bytes]) -> bytes:
    """The concatenated `chunks` compressed with `codec` as Kafka producers
    frame it, never holding the inflated bytes whole."""
    if codec == 1:
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        return b"".join([*(z.compress(c) for c in chunks), z.flush()])
    if codec == 2:
        return _xerial(chunks)
    if codec in (3, 4):
        comp: Any = cramjam.lz4.Compressor() if codec == 3 else cramjam.zstd.Compressor()
        for c in chunks:
            comp.compress(c)
        return bytes(comp.finish())
    raise ValueError(f"bomb codec must be 1-4, not {codec}")


def bomb_batch(codec: int, value_bytes: int, *, records: int = 1, base_offset: int = 0) -> bytes:
    """A valid batch (right CRC, count and deltas) of `records` records whose
    values are `value_bytes` zero bytes each, compressed with `codec`: the
    records section inflates to exactly `bomb_inflated_size(value_bytes,
    records)` bytes."""
    body = compress_stream(codec, _stream(value_bytes, records))
    return batch([], payload=body, count=records, last_offset_delta=records - 1, attributes=codec, base_offset=base_offset)


def snappy_length_lie(claimed: int = 2**32 - 1) -> bytes:
    """A raw snappy records section whose length header claims `claimed`
    bytes and whose data is a few literal bytes: a decoder that allocates
    what the header says before inflating allocates `claimed` bytes."""
    return _uvarint(claimed) + b"\x0c" + b"abcd"  # the header, then one 4-byte literal


def _uvarint(value: int) -> bytes:
    """Unsigned LEB128 varint (snappy's length header; Kafka's, zigzagged)."""
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def claimed_span(n: int, *, base_offset: int = 0, crc: int = 1) -> bytes:
    """A 69-byte record batch of one record whose header claims `n` offsets
    (lastOffsetDelta n - 1) and whose CRC does not match, so no reader can
    trust it: what tansu accepts raw and advances the partition by n for
    (issue 19 item 2). n is at most 2^31."""
    if not 1 <= n <= 2**31:
        raise ValueError(f"claimed span {n}: lastOffsetDelta is an int32, so 1 <= n <= 2^31")
    return batch([record(0, None, b"v", [])], base_offset=base_offset, last_offset_delta=n - 1, crc=crc)
