"""Outputs never outgrow what the broker accepts (kafka.max_message_bytes).

The sizes are checked against aiokafka's own record batch builder, the one
the producer uses; the bounded dead-letter's bound is proved over its worst
case. No Kafka: the integration test (tests/integration/test_output_size.py)
runs the same inputs through a real guard.
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from aiokafka.codec import has_lz4, has_snappy, has_zstd
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.admission.batch import Input, admit_batch
from busguard.config import MIN_MAX_MESSAGE_BYTES, Compression, TopicsConfig, load_config
from busguard.errors import ConfigError
from busguard.protocol.attestation import attest, decision_bytes, open_attestation, seal
from busguard.protocol.keyfile import Identity, new_identity
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.records import Coordinates, Decision, headers_encoding
from busguard.protocol.signing import Signer
from busguard.runtime.batch_size import (
    batch_size,
    codec_expansion,
    compressed_batch_size,
    producer_batch_size,
    record_size,
    record_size_bound,
)
from busguard.runtime.outputs import MAX_DETAIL_BYTES, Output, OutputBudget, Sealed, bounded_dead_letter, outputs_for, worst_proof

from .harness import Harness, agent, sender

TOPICS = TopicsConfig()
GUARD = new_identity()
LIMIT = 1_048_588
CODECS: list[Compression] = ["none", "gzip"] + [c for c, ok in (("snappy", has_snappy()), ("lz4", has_lz4()), ("zstd", has_zstd())) if ok]
ALL_CODECS: list[Compression] = ["none", "gzip", "snappy", "lz4", "zstd"]


def _sealer(identity: Identity = GUARD):  # type: ignore[no-untyped-def]
    signer = Signer(identity.seed)

    def sealed(d: Decision) -> Sealed:
        body = decision_bytes(d)
        att = attest(d, body, identity.agent_id)
        return Sealed(d, body, att, seal(signer, att))

    return sealed


def _built(outputs: Sequence[Output], codec: Compression, max_batch: int) -> list[int]:
    """Pack outputs as runtime/loop.py's _publish does, one builder per batch; the built sizes."""
    codec_id = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[codec]
    sizes, builder = [], DefaultRecordBatchBuilder(2, codec_id, 0, -1, -1, 0, max_batch)
    offset = 0
    for o in outputs:
        if builder.append(offset, o.timestamp_ms or 0, key=o.key, value=o.value, headers=list(o.headers)) is None:
            sizes.append(len(builder.build()))
            builder, offset = DefaultRecordBatchBuilder(2, codec_id, 0, -1, -1, 0, max_batch), 0
            assert builder.append(0, o.timestamp_ms or 0, key=o.key, value=o.value, headers=list(o.headers)) is not None
        offset += 1
    sizes.append(len(builder.build()))
    return sizes


# -- measuring as Kafka counts ------------------------------------------------------------

_bytes = st.one_of(st.none(), st.binary(max_size=300))
_headers = st.lists(st.tuples(st.text(max_size=40), st.one_of(st.none(), st.binary(max_size=200))), max_size=20)


@settings(max_examples=300, deadline=None)
@given(key=_bytes, value=_bytes, headers=_headers, ts=st.integers(min_value=0, max_value=2**62))
def test_record_size_is_what_the_batch_builder_writes(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]], ts: int
) -> None:
    if key is None and value is None:
        value = b""
    o = Output("t", key, value, headers, ts)  # type: ignore[arg-type]
    assert batch_size(o) == compressed_batch_size(o, "none")
    b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, 0, 0)
    b.append(0, ts, key=key, value=value, headers=headers)
    assert batch_size(o) == len(b.build()) and record_size(key, value, headers) + 61 == batch_size(o)


_long = st.one_of(st.none(), st.binary(min_size=100, max_size=20_000))


@settings(max_examples=200, deadline=None)
@given(key=_long, value=_long, headers=st.lists(st.tuples(st.text(max_size=200), _long), max_size=12))
def test_the_cheap_size_bound_is_never_below_the_record_size(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]
) -> None:
    """`forward_refusal` passes a forward on `record_size_bound` alone: were
    the bound ever short, a record too large to produce would be persisted
    as a forward. Long values and non-ASCII names, so every varint is long."""
    assert record_size_bound(key, value, headers) >= record_size(key, value, headers)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("n", [0, 1, 100, 4095, 65_536, 300_000, LIMIT])
def test_codec_expansion_bounds_incompressible_data(codec: Compression, n: int) -> None:
    data = random.Random(n).randbytes(n)
    o = Output("t", None, data, [])
    assert compressed_batch_size(o, codec) - batch_size(o) <= codec_expansion(codec, batch_size(o))


@pytest.mark.parametrize("codec", CODECS)
def test_full_producer_batches_of_incompressible_records_fit_the_limit(codec: Compression) -> None:
    """Batches are filled to producer_batch_size uncompressed; compressed they stay within the limit."""
    limit = MIN_MAX_MESSAGE_BYTES
    rnd = random.Random(1)
    outputs = [
        Output("t", rnd.randbytes(16), rnd.randbytes(rnd.randrange(1, 9000)), [("h", rnd.randbytes(50))], 1_700_000_000_000 + i)
        for i in range(120)
    ]
    budget = OutputBudget(limit, codec, GUARD.agent_id)
    assert all(budget.fits(o) for o in outputs)
    sizes = _built(outputs, codec, producer_batch_size(limit, codec))
    assert len(sizes) > 5 and max(sizes) <= limit


def test_a_record_over_the_batch_size_travels_alone_at_its_measured_size() -> None:
    rnd = random.Random(2)
    small = Output("t", None, rnd.randbytes(100), [], 1)
    big = Output("t", None, b"{}" * 600_000, [("h", b"a" * 500_000)], 2)  # 1.7 MB, compresses to a few KB
    budget = OutputBudget(LIMIT, "gzip", GUARD.agent_id)
    assert batch_size(big) > LIMIT and budget.fits(big)
    sizes = _built([small, big, small], "gzip", budget.batch_size)
    assert sizes[1] == budget.sent_size(big) and len(sizes) == 3 and max(sizes) <= LIMIT


# -- the bounded dead-letter ----------------------------------------------------------------


def _worst_bounded(guard_id: str, headers: list[tuple[str, bytes]], value: bytes | None, key: bytes | None) -> Output:
    att_headers = worst_proof(guard_id)[1:]
    return bounded_dead_letter(
        "d" * 249,
        key,
        value,
        headers,
        "f" * 32,
        max(map(str, Reason), key=len),
        "\U0010ffff" * 5000,  # cut to MAX_DETAIL_BYTES
        Coordinates(topic="x" * 249, partition=2**31 - 1, offset=-(2**63)),
        max(map(str, Outcome), key=len),
        "f" * 32,
        att_headers,
        -(2**63),
    )


#: The worst case of what a bounded dead-letter can hold: the longest guard
#: id (512 UTF-16 units, each escaped to 6 bytes in the attestation JSON).
WORST_GUARD_ID = "\x01" * 512


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_the_bounded_dead_letter_fits_the_smallest_limit_whatever_the_input(codec: Compression) -> None:
    worst = _worst_bounded(WORST_GUARD_ID, [], b"", b"")
    headers = dict(worst.headers)
    assert len(headers["busguard-detail"]) == MAX_DETAIL_BYTES
    # Only three decimal lengths depend on the input (value, headers encoding,
    # key): here 1 digit each, at most 11 for anything a Kafka record holds.
    bound = batch_size(worst) + 3 * 10
    # so megabytes of value, key and 10 000 headers add only digits
    huge = _worst_bounded(
        WORST_GUARD_ID, [(f"h{i:05d}", os.urandom(300)) for i in range(10_000)], os.urandom(2_000_000), os.urandom(100_000)
    )
    assert batch_size(worst) < batch_size(huge) <= bound
    # and it fits any batch at the smallest accepted limit, under every codec's worst expansion
    assert bound <= producer_batch_size(MIN_MAX_MESSAGE_BYTES, codec)
    assert bound < 16_384


def test_a_dead_letter_with_megabytes_of_headers_is_written_bounded() -> None:
    rec = sender("planner").sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"work")
    junk = [(f"x-{i}", os.urandom(1000)) for i in range(3000)]  # 3 MB, as a compressed input can carry
    headers = [*rec.headers, *junk]
    d = Decision(
        "f" * 32, Outcome.REJECT, Reason.BAD_SIGNATURE, Coordinates(topic="in", partition=0, offset=0), 1, "x", receipt_id=rec.receipt_id
    )
    budget = OutputBudget(LIMIT, "gzip", GUARD.agent_id)
    full, _ = outputs_for(_sealer()(d), b"key", rec.value, headers, "down", TOPICS, 1 << 20)
    assert not budget.fits(full)
    primary, audit = outputs_for(_sealer()(d), b"key", rec.value, headers, "down", TOPICS, 1 << 20, budget)
    got = dict(primary.headers)
    assert primary.topic == TOPICS.dead_letter and primary.value is None and primary.key == d.decision_id.encode()
    assert got["busguard-reason"] == b"bad_signature" and got["busguard-original-length"] == str(len(rec.value)).encode()
    assert got["busguard-original-sha256"] == hashlib.sha256(rec.value).hexdigest().encode()
    assert got["busguard-original-headers-sha256"] == hashlib.sha256(headers_encoding(headers)).hexdigest().encode()
    assert got["busguard-original-headers-length"] == str(len(headers_encoding(headers))).encode()
    assert got["busguard-original-key-sha256"] == hashlib.sha256(b"key").hexdigest().encode()
    assert not any(k.startswith("x-") for k, _ in primary.headers)
    assert open_attestation(primary.headers, GUARD.public_key).decision_id == d.decision_id
    assert budget.fits(primary) and budget.fits(audit)


def test_a_dead_letter_that_fits_keeps_the_input() -> None:
    rec = sender("planner").sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"work")
    d = Decision("f" * 32, Outcome.REJECT, Reason.BAD_SIGNATURE, Coordinates(topic="in", partition=0, offset=0), 1, "x")
    budget = OutputBudget(LIMIT, "gzip", GUARD.agent_id)
    assert outputs_for(_sealer()(d), b"k", rec.value, rec.headers, "down", TOPICS, 1 << 20, budget) == outputs_for(
        _sealer()(d), b"k", rec.value, rec.headers, "down", TOPICS, 1 << 20
    )


# -- forwards: refused before the decision is persisted ------------------------------------------


def _admit(
    h: Harness, value: bytes, headers: list[tuple[str, bytes]], offset: int, budget: OutputBudget, key: bytes | None = b"k"
) -> Decision:
    sealed = _sealer()
    (d,) = admit_batch(
        [Input(Coordinates(topic=h.topic, partition=0, offset=offset), value, headers, key)],
        store=h.store,
        registry=h.registry,
        now_ms=h.now,
        policy=h.policy,
        oversize=lambda d, item: budget.refusal(d, item.key, item.value, item.headers, sealed),
    )
    return d


def test_an_incompressible_value_at_the_payload_limit_is_output_too_large_and_records_nothing() -> None:
    h = Harness()
    budget = OutputBudget(LIMIT, "gzip", GUARD.agent_id)
    big = random.Random(3).randbytes(1_048_576)
    s = sender("planner")
    rec = s.sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=big)
    d = _admit(h, rec.value, rec.headers, 0, budget)
    assert (d.outcome, d.reason) == (Outcome.REJECT, Reason.OUTPUT_TOO_LARGE)
    assert "kafka.max_message_bytes 1048588" in d.detail and d.record_sha256 is not None and d.receipt_id == rec.receipt_id
    assert h.store.decision_at(d.source) == d  # persisted as emitted: the audit record says output_too_large
    primary, audit = outputs_for(_sealer()(d), b"k", rec.value, rec.headers, "down", TOPICS, 1 << 20, budget)
    assert primary.topic == TOPICS.dead_letter and primary.value is None and budget.fits(primary) and budget.fits(audit)
    # nothing recorded: the same nonce and task id still go through with a payload that fits
    smaller = s.sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"work", nonce=rec.receipt.nonce)
    assert _admit(h, smaller.value, smaller.headers, 1, budget).reason == Reason.ADMITTED


def test_a_large_compressible_forward_is_admitted_and_fits_once_compressed() -> None:
    h = Harness()
    budget = OutputBudget(LIMIT, "gzip", GUARD.agent_id)
    payload = b'{"rows":[' + b'{"a":1,"b":"xyz"},' * 50_000 + b"{}]}"  # 900 KB of JSON
    rec = sender("planner").sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=payload)
    headers = [*rec.headers, ("trace", b"t" * 400_000)]
    d = _admit(h, rec.value, headers, 0, budget)
    assert d.reason == Reason.ADMITTED
    primary, _ = outputs_for(_sealer()(d), b"k", rec.value, headers, "down", TOPICS, 1 << 20, budget)
    assert batch_size(primary) > LIMIT and budget.sent_size(primary) <= LIMIT
    # without compression the same record does not fit
    assert _admit(Harness(), rec.value, headers, 0, OutputBudget(LIMIT, "none", GUARD.agent_id)).reason == Reason.OUTPUT_TOO_LARGE


def test_the_cheap_bound_never_admits_what_the_exact_size_refuses() -> None:
    """Right at the edge: values that put the real forward a few bytes either side of the batch size."""
    budget = OutputBudget(MIN_MAX_MESSAGE_BYTES, "none", GUARD.agent_id)
    s = sender("planner")
    seen = set()
    for n in range(budget.batch_size - 2 * 1024, budget.batch_size - 256, 7):
        rec = s.sign(kind="handoff", task_id=f"t{n}", receiver=agent("executor"), payload=b"\0" * n)
        d = _admit(Harness(), rec.value, rec.headers, 0, budget)
        primary, _ = outputs_for(_sealer()(d), b"k", rec.value, rec.headers, "down", TOPICS, 1 << 20)
        if d.reason == Reason.ADMITTED:
            assert batch_size(primary) <= budget.limit
        seen.add(d.reason)
    assert seen == {Reason.ADMITTED, Reason.OUTPUT_TOO_LARGE}


def test_a_decision_never_carries_the_inputs_unbounded_bytes() -> None:
    """Audit and escalation records carry the decision: nothing in it may grow with the input
    (a reserved header's name is the sender's, of any length)."""
    rec = sender("planner").sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"work")
    (d,) = Harness().feed_raw([(rec.value, [*rec.headers, ("busguard-" + "x" * 2_000_000, b"")])])
    assert d.reason == Reason.RESERVED_HEADER and len(d.detail) < 300
    _, audit = outputs_for(_sealer()(d), b"k", rec.value, rec.headers, "down", TOPICS, 1 << 20)
    assert batch_size(audit) < 16_384


# -- config -----------------------------------------------------------------------------------


def _cfg(tmp_path: Path, kafka: str) -> Path:
    p = tmp_path / "busguard.toml"
    p.write_text(f'[kafka]\n{kafka}\n[[routes]]\nname = "h"\ninputs = ["in"]\ndownstream = "out"\n')
    return p


def test_the_default_limit_is_apache_kafkas_and_outputs_are_zstd(tmp_path: Path) -> None:
    k = load_config(_cfg(tmp_path, "")).kafka
    assert (k.max_message_bytes, k.compression) == (1_048_588, "zstd")


def test_a_limit_below_the_bounded_dead_letters_room_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(_cfg(tmp_path, "max_message_bytes = 65535"))
    assert err.value.field == "kafka.max_message_bytes" and err.value.value == 65535


def test_a_codec_without_its_package_is_refused_at_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import aiokafka.codec

    monkeypatch.setattr(aiokafka.codec, "has_zstd", lambda: False)
    with pytest.raises(ConfigError) as err:
        load_config(_cfg(tmp_path, 'compression = "zstd"'))
    assert err.value.field == "kafka.compression" and err.value.value == "zstd"
    monkeypatch.setattr(aiokafka.codec, "has_zstd", lambda: True)
    assert load_config(_cfg(tmp_path, 'compression = "zstd"')).kafka.compression == "zstd"
