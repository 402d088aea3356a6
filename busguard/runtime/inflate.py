"""Bounded decompression of a record batch's records section.

A compressed batch is the one input whose cost is not its size: a 20 KB
zstd batch inflates to hundreds of MB, and aiokafka's codec functions (the
ones its own decoder, C or Python, calls) inflate all of it before anyone
can look at a record. So busguard never hands a compressed batch to them.
`inflate` decompresses into a buffer of at most `limit` bytes and refuses
(`OverLimit`) as soon as the output would not fit; the caller turns that into
an `undecodable_batch` decision (busguard.runtime.decoding), and hands the
client's decoder the batch uncompressed, so nothing ever inflates twice or
without a bound.

Per codec, with the library aiokafka itself uses (cramjam):

* gzip: the standard library's zlib with `max_length`, member by member
  and skipping zero padding between members, as `gzip.GzipFile` (aiokafka's
  `gzip_decode`) reads a stream, so both agree on what the bytes inflate to.
* lz4 (frame), zstd: `decompress_into` a fixed buffer, which stops
  writing when the buffer is full ("failed to write whole buffer"). The
  first buffer is the zstd frame's declared content size (aiokafka writes
  it; librdkafka 2.16 and the Java client do not), else sized from the compressed length; a batch that fills it is
  retried into one eight times larger, up to `limit`. The work is at most a
  small multiple of what the batch inflates to, or of `limit`.
* snappy, raw or xerial-framed (as aiokafka's `snappy_decode` detects it):
  every raw block states its uncompressed length in a varint header, so the
  total is known, and checked, before anything is inflated.

At most `len(prefix) + limit` bytes are held for the output.
"""

from __future__ import annotations

import struct
import zlib
from typing import Final, Protocol

import cramjam
from aiokafka import codec as aiokafka_codec

__all__ = ["OverLimit", "inflate", "legacy_wrapper_check", "uncompressed_batch"]

#: The first buffer: this many times the compressed size, at least
#: `_FIRST_MIN` bytes, at most the limit. Batches of ordinary records compress
#: 2-10 times, so they fit the first time.
_FIRST_RATIO: Final = 16
_FIRST_MIN: Final = 65_536
_GROWTH: Final = 8  # each retry's buffer: so many times the last, up to the limit
_FULL: Final = "failed to write whole buffer"
_XERIAL_HEADER: Final = 16


class OverLimit(Exception):
    """The records would inflate to more than the limit."""

    def __init__(self, limit: int, known: int | None = None) -> None:
        self.limit = limit
        self.known = known
        said = f" (its snappy length headers claim at least {known})" if known is not None else ""
        super().__init__(f"records inflate to more than {limit} bytes{said}")


_HEADER: Final = 61  # KIP-98 RecordBatch header, through recordCount
_LOG_OVERHEAD: Final = 12


class _Into(Protocol):
    def decompress_into(self, input: bytes | memoryview, output: memoryview) -> int: ...  # noqa: A002 - cramjam's name


_STREAMS: Final[dict[int, _Into]] = {3: cramjam.lz4, 4: cramjam.zstd}


def inflate(codec: int, body: bytes | memoryview, limit: int, prefix: bytes = b"") -> bytearray:
    """`prefix` followed by `body` decompressed with `codec` (1 gzip, 2
    snappy, 3 lz4, 4 zstd), at most `limit` bytes of it. Raises `OverLimit`
    past the limit, or the codec's own error for bytes that do not decompress."""
    if codec == 1:
        return _gzip(body, limit, prefix)
    if codec == 2:
        return _snappy(body, limit, prefix)
    stream = _STREAMS[codec]
    declared = _zstd_content_size(body) if codec == 4 else None
    size = min(limit, declared if declared else max(_FIRST_MIN, _FIRST_RATIO * len(body)))
    while True:
        try:
            return _into_bytearray(stream, body, prefix, size)
        except cramjam.DecompressionError as exc:
            if str(exc) != _FULL:
                raise
            if size >= limit:
                raise OverLimit(limit) from None
            size = min(limit, size * _GROWTH)


def _zstd_content_size(body: bytes | memoryview) -> int | None:
    """The first zstd frame's declared content size (RFC 8878 3.1.1.1), if
    it has one (aiokafka declares it; librdkafka 2.16 and the Java client do
    not, docs/notes-broker.md). Only a first guess; the bound is
    enforced by the buffer whatever the frame says."""
    if len(body) < 6 or bytes(body[:4]) != b"\x28\xb5\x2f\xfd":
        return None
    fhd = body[4]
    single, fcs_flag = (fhd >> 5) & 1, fhd >> 6
    size = (1, 2, 4, 8)[fcs_flag] if fcs_flag else single
    if not size:
        return None
    at = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
    if len(body) < at + size:
        return None
    value = int.from_bytes(bytes(body[at : at + size]), "little")
    return value + 256 if size == 2 else value


def _into_bytearray(stream: _Into, body: bytes | memoryview, prefix: bytes, size: int) -> bytearray:
    p = len(prefix)
    out = bytearray(p + size)
    out[:p] = prefix
    with memoryview(out) as view, view[p:] as tail:
        n = stream.decompress_into(body, tail)
    del out[p + n :]
    return out


def _snappy(body: bytes | memoryview, limit: int, prefix: bytes) -> bytearray:
    data = bytes(body)
    if aiokafka_codec._detect_xerial_stream(data):
        blocks: list[tuple[int, int]] = []
        cursor, end = _XERIAL_HEADER, len(data)
        while cursor < end:
            if end - cursor < 4:
                raise ValueError(f"xerial snappy block header truncated at byte {cursor}")
            (size,) = struct.unpack_from(">i", data, cursor)
            cursor += 4
            if size < 0 or cursor + size > end:
                raise ValueError(f"xerial snappy block of {size} bytes at byte {cursor - 4} runs past the {end}-byte stream")
            blocks.append((cursor, cursor + size))
            cursor += size
    else:
        blocks = [(0, len(data))]
    lengths = []
    total = 0
    for lo, hi in blocks:
        n = int(cramjam.snappy.decompress_raw_len(data[lo:hi]))
        total += n
        if total > limit:
            raise OverLimit(limit, known=total)
        lengths.append(n)
    p = len(prefix)
    out = bytearray(p + total)
    out[:p] = prefix
    at = p
    with memoryview(out) as view:
        for (lo, hi), n in zip(blocks, lengths, strict=True):
            with view[at : at + n] as tail:
                got = int(cramjam.snappy.decompress_raw_into(data[lo:hi], tail))
            if got != n:
                raise ValueError(f"snappy block at byte {lo} inflates to {got} bytes, its header says {n}")
            at += n
    return out


def _gzip(body: bytes | memoryview, limit: int, prefix: bytes) -> bytearray:
    out = bytearray(prefix)
    room = limit
    data = bytes(body)
    while data:
        member = zlib.decompressobj(wbits=31)  # gzip header and trailer, CRC-32 and length checked
        chunk = member.decompress(data, room + 1)
        if len(chunk) > room:
            raise OverLimit(limit)
        out += chunk
        room -= len(chunk)
        if not member.eof:
            raise EOFError("gzip stream ends before its end-of-stream marker")
        data = member.unused_data.lstrip(b"\0")
    return out


def uncompressed_batch(batch: bytes, limit: int) -> bytearray:
    """A v2 record batch with its records inflated (at most `limit` bytes of
    them) and its header saying so: codec bits cleared, batchLength
    matching, so aiokafka's decoder reads it without inflating anything. The
    CRC is the original's, already checked; no reader checks it again."""
    codec = struct.unpack_from(">h", batch, 21)[0] & 0x07
    if codec > 4:
        raise ValueError(f"unknown compression codec id {codec}")
    out = inflate(codec, memoryview(batch)[_HEADER:], limit, batch[:_HEADER]) if codec else bytearray(batch)
    attrs = struct.unpack_from(">h", out, 21)[0]
    struct.pack_into(">h", out, 21, attrs & ~0x07)
    struct.pack_into(">i", out, 8, len(out) - _LOG_OVERHEAD)
    return out


def legacy_wrapper_check(batch: bytes, magic: int, limit: int) -> None:
    """Raises `OverLimit` if a compressed legacy (v0/v1) wrapper message's
    value would inflate past `limit`. aiokafka's legacy decoder inflates the
    value itself afterwards, knowing now that it is at most the bound (gzip
    is read here as `gzip.GzipFile` reads it, snappy and lz4 by the same
    library). Bytes that do not parse are left to that decoder to report."""
    if len(batch) < 18 or not 1 <= batch[17] & 0x07 <= 4:
        return
    codec = batch[17] & 0x07
    pos = 18 if magic == 0 else 26  # past offset, length, crc, magic, attributes (and v1's timestamp)
    try:
        (key_len,) = struct.unpack_from(">i", batch, pos)
        pos += 4 + max(key_len, 0)
        (value_len,) = struct.unpack_from(">i", batch, pos)
    except struct.error:
        return
    pos += 4
    if value_len < 0 or pos + value_len > len(batch):
        return
    try:
        inflate(codec, memoryview(batch)[pos : pos + value_len], limit)
    except OverLimit:
        raise
    except Exception:  # noqa: BLE001 - a codec library's error: aiokafka's decoder reports it
        return
