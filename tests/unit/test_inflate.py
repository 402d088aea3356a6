"""Bounded decompression (busguard/runtime/inflate.py) and what the fetch
decoder makes of a batch that would inflate past `batch.max_inflated_bytes`:
one `undecodable_batch` for its offset, its compressed bytes kept, the
next batch read, and the process's memory bounded by the limit, not by what
the batch would inflate to."""

from __future__ import annotations

import gzip
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
from aiokafka import codec as aiokafka_codec
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder
from aiokafka.structs import ConsumerRecord

from busguard.protocol.reasons import Reason
from busguard.runtime.inflate import _FIRST_MIN, OverLimit, inflate
from busguard.runtime.tolerant_fetch import PartitionDecoder
from busguard.runtime.undecodable import Undecodable
from tests.fuzz.batches import CODECS, batch, bomb_batch, bomb_inflated_size, compress_stream, record, snappy_length_lie
from tests.fuzz.bomb_memory import bombs

LIMIT = 1 << 20
COMPRESSED = sorted(name for name, code in CODECS.items() if code)


def _value_for(inflated: int) -> int:
    """The value size whose one-record bomb inflates to exactly `inflated` bytes."""
    value = inflated - 16
    while bomb_inflated_size(value) < inflated:
        value += 1
    while bomb_inflated_size(value) > inflated:
        value -= 1
    assert bomb_inflated_size(value) == inflated
    return value


def _decode(raw: bytes, limit: int = LIMIT, fetch_offset: int = 0) -> list[Any]:
    return list(PartitionDecoder("t", 0, raw, fetch_offset, max_inflated_bytes=limit))


@pytest.mark.parametrize("codec", COMPRESSED)
def test_a_batch_that_inflates_to_exactly_the_limit_is_read(codec: str) -> None:
    value = _value_for(LIMIT)
    items = _decode(bomb_batch(CODECS[codec], value, base_offset=7), fetch_offset=7)
    assert [(type(i), i.offset) for i in items] == [(ConsumerRecord, 7)]
    assert items[0].value == bytes(value)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_one_byte_past_the_limit_is_one_undecodable_batch_and_the_next_batch_is_read(codec: str) -> None:
    bomb = bomb_batch(CODECS[codec], _value_for(LIMIT + 1), base_offset=7)
    good = batch([record(0, b"k", b"after", [])], codec=CODECS[codec], base_offset=8)
    items = _decode(bomb + good, fetch_offset=7)
    assert [(type(i), i.offset) for i in items] == [(Undecodable, 7), (ConsumerRecord, 8)]
    u = items[0]
    assert u.reason == Reason.UNDECODABLE_BATCH and u.carrier and u.raw == bomb  # the compressed bytes, as fetched
    assert f"{codec} records inflate to more than {LIMIT} bytes (batch.max_inflated_bytes)" in u.detail
    assert items[1].value == b"after"


@pytest.mark.parametrize("codec", COMPRESSED)
def test_a_bomb_of_many_records_is_refused_as_a_whole(codec: str) -> None:
    bomb = bomb_batch(CODECS[codec], LIMIT // 4, records=5)
    items = _decode(bomb + batch([record(0, None, b"x", [])], base_offset=5))
    covered = sorted({i.offset for i in items if type(i) is Undecodable} | {i.batch_offset for i in items if type(i) is Undecodable})
    assert covered[0] == 0 and all(type(i) is Undecodable for i in items[:-1])
    assert type(items[-1]) is ConsumerRecord and items[-1].offset == 5
    assert not any(type(i) is ConsumerRecord and i.offset < 5 for i in items)


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize("size", [0, 1, _FIRST_MIN - 1, _FIRST_MIN, _FIRST_MIN + 1, 3 * _FIRST_MIN + 5, LIMIT - 1, LIMIT])
def test_inflate_returns_exactly_what_aiokafkas_codec_returns_up_to_the_limit(codec: str, size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    body = compress_stream(CODECS[codec], iter([data[: size // 2], data[size // 2 :]]))
    decode = {
        "gzip": aiokafka_codec.gzip_decode,
        "snappy": aiokafka_codec.snappy_decode,
        "lz4": aiokafka_codec.lz4_decode,
        "zstd": aiokafka_codec.zstd_decode,
    }
    assert bytes(decode[codec](body)) == data
    assert bytes(inflate(CODECS[codec], body, LIMIT, b"head")) == b"head" + data
    if size:
        with pytest.raises(OverLimit):
            inflate(CODECS[codec], body, size - 1)


def test_gzip_members_and_zero_padding_are_read_as_gzip_file_reads_them() -> None:
    body = gzip.compress(b"one") + b"\0\0\0" + gzip.compress(b"two")
    assert bytes(inflate(1, body, LIMIT)) == aiokafka_codec.gzip_decode(body) == b"onetwo"
    with pytest.raises(OverLimit):
        inflate(1, gzip.compress(b"one") + gzip.compress(bytes(LIMIT)), LIMIT)
    with pytest.raises((zlib.error, EOFError)):
        inflate(1, gzip.compress(b"one")[:-3], LIMIT)  # truncated trailer


def test_a_snappy_length_header_is_checked_before_anything_is_allocated() -> None:
    with pytest.raises(OverLimit, match="snappy length headers claim at least 4294967295"):
        inflate(2, snappy_length_lie(), LIMIT)
    items = _decode(batch([], payload=snappy_length_lie(), count=1, last_offset_delta=0, attributes=CODECS["snappy"]))
    assert [(i.offset, i.reason) for i in items] == [(0, Reason.UNDECODABLE_BATCH)]


def test_xerial_snappy_blocks_that_lie_are_undecodable() -> None:
    framed = compress_stream(2, iter([b"abc" * 1000]))
    for broken in (framed[:-3], framed[:16] + b"\xff\xff\xff\xff" + framed[20:], framed + b"\x00\x00"):
        items = _decode(batch([], payload=broken, count=1, last_offset_delta=0, attributes=2))
        assert [(i.offset, i.reason) for i in items] == [(0, Reason.UNDECODABLE_BATCH)], broken[-8:]


@pytest.mark.parametrize(("codec", "magic"), [(1, 0), (1, 1), (2, 0), (2, 1), (3, 1)])
def test_a_compressed_legacy_wrapper_past_the_limit_is_one_undecodable_batch(codec: int, magic: int) -> None:
    def legacy(value: bytes) -> bytes:
        b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 30)
        b.append(0, timestamp=None if magic == 0 else 1_700_000_000_000, key=None, value=value)
        return bytes(b.build())

    small = legacy(b"small")
    assert [(type(i), i.value) for i in _decode(small)] == [(ConsumerRecord, b"small")]
    items = _decode(legacy(bytes(LIMIT + 64)) + batch([record(0, None, b"x", [])], base_offset=1))
    assert [(type(i), i.offset) for i in items] == [(Undecodable, 0), (ConsumerRecord, 1)]
    assert "records inflate to more than" in items[0].detail and items[0].reason == Reason.UNDECODABLE_BATCH


def test_a_bomb_of_each_codec_grows_the_process_by_the_limit_not_by_its_size(tmp_path: Path) -> None:
    """Each bomb inflates to 128 MiB; the default limit is 16 MiB. Without the
    bound the decoder's peak RSS grew by about twice the inflated size."""
    out = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.bomb_memory", "--inflated-mib", "128"],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    rows = {line.split("\t")[0]: line.split("\t") for line in out.splitlines()[2:]}
    assert set(rows) == set(bombs(1)), out
    for name, (_, _, growth, got) in rows.items():
        assert got == "undecodable_batch (1 item(s))", out
        assert float(growth) <= 2 * 16 + 8, f"{name}: {growth} MiB\n{out}"
