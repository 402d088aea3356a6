"""Small output batches go uncompressed, large ones with kafka.compression.

Each compressed record batch pays for a fresh codec context (zstd: more
than a hundred µs for a one-record batch), which at an agent's rate every
record paid twice (forward and audit record). `Publisher.publish` builds a
partition's outputs uncompressed while their bytes stay under
UNCOMPRESSED_BELOW; the records in the batch are the same either way.
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer
from aiokafka.record.default_records import DefaultRecordBatch

from busguard.runtime.outputs import Output
from busguard.runtime.publish import UNCOMPRESSED_BELOW, small, uncompressed_batch

ZSTD = 4  # the record batch attributes' codec id


def _out(n: int) -> Output:
    return Output("t", b"k", b"v" * n, [("h", b"x" * 10)])


def test_the_bound_counts_keys_values_and_headers() -> None:
    assert small([_out(100)] * 3)
    assert not small([_out(UNCOMPRESSED_BELOW)])
    just_under = UNCOMPRESSED_BELOW - (1 + 1 + 10) - 1
    assert small([_out(just_under)]) and not small([_out(just_under), _out(1)])


def _built(batch: object) -> DefaultRecordBatch:
    return DefaultRecordBatch(bytearray(batch._build()))  # type: ignore[attr-defined]


async def _producer(**kw: object) -> AIOKafkaProducer:
    return AIOKafkaProducer(bootstrap_servers="127.0.0.1:9", compression_type="zstd", **kw)


def test_an_uncompressed_batch_holds_the_same_records_as_a_compressed_one() -> None:
    async def run() -> None:
        producer = await _producer()
        outs = [_out(50), _out(70)]
        plain, packed = uncompressed_batch(producer), producer.create_batch()
        for b in (plain, packed):
            for o in outs:
                assert b.append(key=o.key, value=o.value, timestamp=1, headers=o.headers) is not None
        a, z = _built(plain), _built(packed)
        assert a.compression_type == 0 and z.compression_type == ZSTD
        assert [(r.key, r.value, list(r.headers)) for r in a] == [(r.key, r.value, list(r.headers)) for r in z]
        assert not a.is_transactional

    asyncio.run(run())


def test_a_transactional_producers_uncompressed_batch_is_transactional() -> None:
    async def run() -> None:
        producer = await _producer(transactional_id="tx-1", enable_idempotence=True)
        batch = uncompressed_batch(producer)
        assert batch.append(key=b"k", value=b"v", timestamp=1, headers=[]) is not None
        assert _built(batch).is_transactional

    asyncio.run(run())
