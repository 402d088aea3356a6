"""The tolerant fetch decoder (busguard/runtime/tolerant_fetch.py): every offset of a
fetch is covered by exactly one item (an undecodable span by one placeholder,
however long), and what aiokafka would raise on becomes a placeholder
carrying its bytes."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import msgspec
import pytest
from aiokafka.consumer import fetcher
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.structs import ConsumerRecord, TopicPartition

from busguard.admission.batch import Input, admit_batch
from busguard.admission.types import AdmissionPolicy
from busguard.protocol.reasons import Reason
from busguard.protocol.records import Coordinates
from busguard.runtime.outputs import dead_letter
from busguard.runtime.tolerant_fetch import (
    FORM_BATCH,
    FORM_BATCH_REF,
    FORM_PARTS,
    FORM_RECORD,
    HEADER_BATCH_OFFSET,
    HEADER_BATCH_SHA256,
    HEADER_LAST_OFFSET,
    HEADER_ORIGINAL_FORM,
    HEADER_ORIGINAL_HEADERS,
    HEADER_ORIGINAL_HEADERS_SHA256,
    RAW_KEYS,
    PartitionDecoder,
    Undecodable,
    consumer_options,
    preserved,
)
from busguard.state.memory.store import MemoryStore
from tests.fuzz.batches import CODECS, batch, claimed_span, fix_crc, record, with_base_offset

from .harness import NOW, registry

consumer_options()  # install the hook, as busguard's consumers do


def _partition_records(raw: bytes, fetch_offset: int = 0, tolerant: bool = True) -> Any:
    """aiokafka's fetcher object for one partition's bytes, as _proc_fetch_request builds it."""
    return fetcher.PartitionRecords(
        TopicPartition("t", 0), fetcher.MemoryRecords(raw), None, fetch_offset, RAW_KEYS if tolerant else None, None, True, 0
    )


def _decode(raw: bytes, fetch_offset: int = 0) -> list[Any]:
    return list(_partition_records(raw, fetch_offset))


def _kinds(items: list[Any]) -> list[tuple[int, str]]:
    """(offset, reason or "ok") for every offset the items cover, a span's each."""
    out: list[tuple[int, str]] = []
    for i in items:
        if type(i) is Undecodable:
            out += [(o, i.reason) for o in range(i.offset, i.next_offset)]
        else:
            out.append((i.offset, "ok"))
    return out


def _three(middle_headers: list[tuple[bytes, bytes | None]], codec: int = 0, base: int = 0) -> bytes:
    return batch(
        [record(0, b"k", b"v0", [(b"a", b"1")]), record(1, b"k", b"v1", middle_headers), record(2, b"k", b"v2", [])],
        codec=codec,
        base_offset=base,
    )


# -- the test encoder is Kafka's format --------------------------------------------


def test_test_encoder_matches_aiokafkas_builder() -> None:
    b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 10**7)
    b.append(0, 1_700_000_000_000, b"k", b"v", [("h", b"x"), ("n", None)])
    b.append(1, 1_700_000_000_000, None, b"", [])
    assert bytes(b.build()) == batch([record(0, b"k", b"v", [(b"h", b"x"), (b"n", None)]), record(1, None, b"", [])])


# -- the fast path: what aiokafka returns, unchanged ---------------------------------


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_valid_batches_in_every_codec_decode_as_aiokafka_decodes_them(codec: str) -> None:
    raw = _three([(b"h", b"x"), (b"n", None)], CODECS[codec]) + _three([], CODECS[codec], base=3)
    mine = _decode(raw)
    theirs = list(_partition_records(raw, tolerant=False))
    assert mine == theirs and [r.offset for r in mine] == [0, 1, 2, 3, 4, 5]
    assert all(type(r) is ConsumerRecord for r in mine)
    assert mine[1].headers == (("h", b"x"), ("n", None))


def test_consumers_that_did_not_opt_in_keep_aiokafkas_behaviour() -> None:
    raw = _three([(b"\xff", b"x")])
    # what kills a guard without the tolerant path (the pure-Python decoder wraps it)
    with pytest.raises((UnicodeDecodeError, CorruptRecordException)):
        list(_partition_records(raw, tolerant=False))


# -- record-level placeholders -------------------------------------------------------


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_a_non_utf8_header_name_is_one_placeholder_and_its_neighbours_are_records(codec: str) -> None:
    raw = _three([(b"ok", b"1"), (b"\xff\xfe", b"x"), (b"n", None)], CODECS[codec])
    items = _decode(raw)
    assert _kinds(items) == [(0, "ok"), (1, Reason.UNDECODABLE_HEADER), (2, "ok")]
    u = items[1]
    assert (u.key, u.value, u.raw_headers) == (b"k", b"v1", ((b"ok", b"1"), (b"\xff\xfe", b"x"), (b"n", None)))
    assert u.raw == record(1, b"k", b"v1", [(b"ok", b"1"), (b"\xff\xfe", b"x"), (b"n", None)])
    assert items[2].value == b"v2" and items[0].headers == (("a", b"1"),)


def test_a_record_whose_fields_do_not_parse_is_undecodable_record() -> None:
    good = record(0, b"k", b"v0", [])
    # a key length that runs past the end of its record
    broken = b"\x16" + b"\x00\x00\x02" + b"\x7e" + b"kk" + b"\x00" * 5
    raw = batch([good, broken, record(2, b"k", b"v2", [])])
    items = _decode(raw)
    assert _kinds(items) == [(0, "ok"), (1, Reason.UNDECODABLE_RECORD), (2, "ok")]
    assert items[1].raw == broken and items[1].raw_headers is None


# -- batch-level placeholders --------------------------------------------------------


def test_a_crc_mismatch_makes_every_offset_of_the_batch_one_placeholder() -> None:
    bad = batch([record(i, b"k", b"v", []) for i in range(3)], base_offset=10, crc=1)
    good = batch([record(0, b"k", b"w", [])], base_offset=13)
    items = _decode(bad + good, 10)
    assert _kinds(items) == [(10, Reason.UNDECODABLE_BATCH), (11, Reason.UNDECODABLE_BATCH), (12, Reason.UNDECODABLE_BATCH), (13, "ok")]
    span, _ = items
    assert (span.offset, span.last_offset, span.next_offset) == (10, 12, 13)
    assert span.carrier and span.raw == bad and span.batch_sha256 == hashlib.sha256(bad).hexdigest() and span.batch_offset == 10


@pytest.mark.parametrize("attributes", [5, 6, 7])
def test_an_unknown_codec_id_is_undecodable_batch(attributes: int) -> None:
    raw = batch([record(i, None, b"v", []) for i in range(2)], attributes=attributes)
    items = _decode(raw)
    assert _kinds(items) == [(0, Reason.UNDECODABLE_BATCH), (1, Reason.UNDECODABLE_BATCH)]
    assert "unknown compression codec id" in items[0].detail


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_a_corrupt_compressed_frame_is_undecodable_batch_and_the_next_batch_is_read(codec: str) -> None:
    raw = batch([], payload=b"\x00garbage-frame", count=2, last_offset_delta=1, attributes=CODECS[codec])
    items = _decode(raw + _three([], base=2))
    assert _kinds(items) == [(0, Reason.UNDECODABLE_BATCH), (1, Reason.UNDECODABLE_BATCH), (2, "ok"), (3, "ok"), (4, "ok")]
    assert f"{codec} records do not decompress" in items[0].detail


def test_out_of_order_offset_deltas_make_the_whole_batch_undecodable() -> None:
    raw = batch([record(1, b"k", b"a", []), record(0, b"k", b"b", [])])
    assert _kinds(_decode(raw)) == [(0, Reason.UNDECODABLE_BATCH), (1, Reason.UNDECODABLE_BATCH)]


def test_records_that_cannot_be_delimited_end_the_batch_after_the_good_ones() -> None:
    recs = [record(i, b"k", b"v%d" % i, []) for i in range(4)]
    body = b"".join(recs)
    raw = batch([], payload=body[: len(recs[0]) + len(recs[1]) + 3], count=4, last_offset_delta=3)
    assert _kinds(_decode(raw)) == [(0, "ok"), (1, "ok"), (2, Reason.UNDECODABLE_BATCH), (3, Reason.UNDECODABLE_BATCH)]


def test_a_control_batch_outside_a_transaction_is_not_silently_skipped() -> None:
    raw = batch([record(0, b"k", b"v", [])], attributes=0x20)
    assert _kinds(_decode(raw)) == [(0, Reason.UNDECODABLE_BATCH)]


def test_a_span_is_capped_below_the_next_batchs_base_offset() -> None:
    liar = batch([record(0, None, b"v", [])], last_offset_delta=1_000_000, crc=7)
    items = _decode(liar + _three([], base=2))
    assert _kinds(items) == [(0, Reason.UNDECODABLE_BATCH), (1, Reason.UNDECODABLE_BATCH), (2, "ok"), (3, "ok"), (4, "ok")]


# -- offsets a batch claims but holds no record at (issue 35 finding 6) -------------


def test_an_empty_batch_is_one_placeholder_for_every_offset_it_claims() -> None:
    empty = batch([], count=0, last_offset_delta=9, base_offset=1)
    items = _decode(batch([record(0, b"k", b"v", [])]) + empty + _three([], base=11))
    assert _kinds(items) == [(0, "ok"), *[(o, Reason.UNDECODABLE_BATCH) for o in range(1, 11)], (11, "ok"), (12, "ok"), (13, "ok")]
    (span,) = [i for i in items if type(i) is Undecodable]
    assert (span.offset, span.last_offset, span.carrier, span.raw) == (1, 10, True, empty)
    assert "holds no record" in span.detail


def test_a_well_formed_record_claiming_six_offsets_leaves_none_undecided() -> None:
    raw = batch([record(0, b"k", b"six", [])], last_offset_delta=5) + _three([], base=6)
    assert _kinds(_decode(raw)) == [(0, "ok"), *[(o, Reason.UNDECODABLE_BATCH) for o in range(1, 6)], (6, "ok"), (7, "ok"), (8, "ok")]


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_offset_deltas_that_skip_are_spans_and_only_the_first_carries_the_batch(codec: str) -> None:
    raw = batch(
        [record(0, b"k", b"a", []), record(3, b"k", b"b", [(b"\xff", b"")]), record(7, b"k", b"c", [])],
        codec=CODECS[codec],
        last_offset_delta=7,
    )
    items = _decode(raw)
    assert _kinds(items) == [
        (0, "ok"),
        (1, Reason.UNDECODABLE_BATCH),
        (2, Reason.UNDECODABLE_BATCH),
        (3, Reason.UNDECODABLE_HEADER),
        *[(o, Reason.UNDECODABLE_BATCH) for o in range(4, 7)],
        (7, "ok"),
    ]
    spans = [i for i in items if type(i) is Undecodable and i.reason == Reason.UNDECODABLE_BATCH]
    assert [sp.carrier for sp in spans] == [True, False]
    assert [form for sp in spans for k, form in preserved(sp, 1 << 20)[2] if k == HEADER_ORIGINAL_FORM] == [
        FORM_BATCH.encode(),
        FORM_BATCH_REF.encode(),
    ]


def test_a_fetch_from_inside_a_claimed_gap_starts_the_span_there() -> None:
    raw = batch([record(0, b"k", b"six", [])], last_offset_delta=5, base_offset=10)
    assert _kinds(_decode(raw, 13)) == [(13, Reason.UNDECODABLE_BATCH), (14, Reason.UNDECODABLE_BATCH), (15, Reason.UNDECODABLE_BATCH)]


def test_a_negative_last_offset_delta_is_refused_whole_and_names_the_offsets_it_rewinds_over() -> None:
    """Issue 35 finding 6b: tansu stores the records after such a batch at
    offsets already read past; the decision says exactly which."""
    raw = batch([record(0, None, b"neg", [])], last_offset_delta=-9, base_offset=11)
    (item,) = _decode(raw, 11)
    assert (item.offset, item.reason, item.last_offset) == (11, Reason.UNDECODABLE_BATCH, None)
    assert "offsets 3-10 may then hold records no decision covers" in item.detail


# -- read_committed (issue 36: a downstream reader of a transactional guard) -------


def _txn(records: list[bytes], base: int, producer_id: int, attributes: int = 0x10) -> bytes:
    raw = bytearray(batch(records, base_offset=base, attributes=attributes))
    raw[43:51] = producer_id.to_bytes(8, "big", signed=True)
    return fix_crc(raw)


def _marker(base: int, producer_id: int, commit: bool) -> bytes:
    key = (0).to_bytes(2, "big") + (1 if commit else 0).to_bytes(2, "big")
    return _txn([record(0, key, (0).to_bytes(2, "big") + (5).to_bytes(4, "big"), [])], base, producer_id, attributes=0x30)


def _read_committed(raw: bytes, aborted: list[tuple[int, int]], tolerant: bool) -> list[Any]:
    return list(
        fetcher.PartitionRecords(
            TopicPartition("t", 0),
            fetcher.MemoryRecords(raw),
            aborted,
            0,
            RAW_KEYS if tolerant else None,
            None,
            True,
            fetcher.READ_COMMITTED,
        )
    )


def test_read_committed_skips_aborted_transactions_as_aiokafka_does() -> None:
    log = (
        _txn([record(0, b"k", b"aborted-0", []), record(1, b"k", b"aborted-1", [])], 0, 7)
        + _marker(2, 7, commit=False)
        + _txn([record(0, b"k", b"committed-3", []), record(1, b"k", b"committed-4", [])], 3, 8)
        + _marker(5, 8, commit=True)
        + _txn([record(0, b"k", b"after-abort-6", [])], 6, 7)  # the same producer's next transaction, not aborted
        + batch([record(0, b"k", b"plain-7", [])], base_offset=7)
    )
    ours = _read_committed(log, [(7, 0)], tolerant=True)
    theirs = _read_committed(log, [(7, 0)], tolerant=False)
    assert [(r.offset, r.value) for r in ours] == [(r.offset, r.value) for r in theirs]
    assert [r.value for r in ours] == [b"committed-3", b"committed-4", b"after-abort-6", b"plain-7"]
    # read_uncommitted (busguard's own processes) reads every record batch
    assert [i.value for i in _decode(log)] == [b"aborted-0", b"aborted-1", b"committed-3", b"committed-4", b"after-abort-6", b"plain-7"]


def test_read_committed_positions_move_past_an_aborted_batch_at_the_end() -> None:
    log = _txn([record(0, b"k", b"a", [])], 0, 9) + _marker(1, 9, commit=False)
    records = fetcher.PartitionRecords(
        TopicPartition("t", 0), fetcher.MemoryRecords(log), [(9, 0)], 0, RAW_KEYS, None, True, fetcher.READ_COMMITTED
    )
    assert list(records) == [] and records.next_fetch_offset == 2


# -- position ---------------------------------------------------------------------


def test_offsets_before_the_fetch_offset_are_skipped_in_every_path() -> None:
    bad = batch([record(i, b"k", b"v", []) for i in range(4)], base_offset=20, crc=1)
    assert [(o, r) for o, r in _kinds(_decode(bad, 22))] == [(22, Reason.UNDECODABLE_BATCH), (23, Reason.UNDECODABLE_BATCH)]
    assert [i.offset for i in _decode(_three([(b"\xff", b"")], base=20), 21)] == [21, 22]
    assert [i.offset for i in _decode(_three([], base=20), 22)] == [22]


def test_the_position_moves_past_the_fetched_offset_even_when_the_header_lies() -> None:
    # CRC fixed over a header whose last offset delta is negative: the batch
    # "covers" nothing at the fetched offset 5, which the broker says it holds
    raw = with_base_offset(batch([record(0, None, b"v", [])], last_offset_delta=-3, crc=3), 0)
    records = _partition_records(raw, 5)
    items = list(records)
    assert _kinds(items) == [(5, Reason.UNDECODABLE_BATCH)] and items[0].carrier and items[0].last_offset is None
    assert records.next_fetch_offset == 6


def test_a_stop_after_max_records_resumes_at_the_next_offset() -> None:
    raw = batch([record(i, b"k", b"v", []) for i in range(5)]) + batch([record(0, b"k", b"v", [])], base_offset=5, crc=9)
    records = _partition_records(raw)
    first = [next(records), next(records)]
    assert [i.offset for i in first] == [0, 1] and records.next_fetch_offset == 2
    rest = list(records)
    assert _kinds(rest)[-1] == (5, Reason.UNDECODABLE_BATCH) and records.next_fetch_offset == 6


def test_decoder_is_pure_over_its_bytes() -> None:
    raw = _three([(b"\xff", b"x")], CODECS["zstd"]) + batch([record(0, None, b"v", [])], base_offset=3, crc=1)
    assert list(PartitionDecoder("t", 0, raw, 0)) == list(PartitionDecoder("t", 0, raw, 0))


def test_mutated_bytes_with_a_fixed_crc_still_yield_one_item_per_offset() -> None:
    raw = bytearray(_three([(b"h", b"x")]))
    assert raw[70] == 0x02  # the first record's header count (1, zigzag)
    raw[70] ^= 0x40  # now 33 headers, which its length cannot hold
    assert _kinds(_decode(fix_crc(raw))) == [(0, Reason.UNDECODABLE_RECORD), (1, "ok"), (2, "ok")]


# -- the preserved, recoverable form --------------------------------------------------


def _h(headers: list[tuple[str, bytes]], name: str) -> bytes:
    return dict(headers)[name]


def test_preserved_parts_decode_back_to_the_original_record() -> None:
    (u,) = [i for i in _decode(_three([(b"\xff\xfe", b"x"), (b"n", None)])) if type(i) is Undecodable]
    key, value, headers = preserved(u, 1_048_576)
    assert (key, value, _h(headers, HEADER_ORIGINAL_FORM)) == (b"k", b"v1", FORM_PARTS.encode())
    pairs = msgspec.json.decode(_h(headers, HEADER_ORIGINAL_HEADERS))
    assert [(base64.b64decode(k), None if v is None else base64.b64decode(v)) for k, v in pairs] == [(b"\xff\xfe", b"x"), (b"n", None)]
    # too large to copy: identified by hash instead
    _, _, small = preserved(u, 8)
    assert HEADER_ORIGINAL_HEADERS not in dict(small) and len(_h(small, HEADER_ORIGINAL_HEADERS_SHA256)) == 64
    # the JSON alone fits, but not with the key and value the dead letter keeps
    json_len = len(_h(headers, HEADER_ORIGINAL_HEADERS))
    assert HEADER_ORIGINAL_HEADERS in dict(preserved(u, json_len + 3)[2])
    assert HEADER_ORIGINAL_HEADERS not in dict(preserved(u, json_len + 2)[2])


def test_preserved_record_and_batch_forms() -> None:
    rec = [i for i in _decode(batch([record(0, None, b"v", []), b"\x16\x00\x00\x02\x7ekk\x00\x00\x00\x00\x00"])) if type(i) is Undecodable][
        0
    ]
    assert preserved(rec, 10**6) == (None, rec.raw, [(HEADER_ORIGINAL_FORM, FORM_RECORD.encode())])
    one = batch([record(0, None, b"v", [])], crc=1)
    (single,) = _decode(one)
    sha = hashlib.sha256(one).hexdigest().encode()
    assert preserved(single, 10**6) == (
        None,
        one,
        [(HEADER_ORIGINAL_FORM, FORM_BATCH.encode()), (HEADER_BATCH_OFFSET, b"0"), (HEADER_BATCH_SHA256, sha)],
    )
    bad = batch([record(i, None, b"v", []) for i in range(2)], crc=1)
    (span,) = _decode(bad)
    sha = hashlib.sha256(bad).hexdigest().encode()
    form = [
        (HEADER_ORIGINAL_FORM, FORM_BATCH.encode()),
        (HEADER_BATCH_OFFSET, b"0"),
        (HEADER_BATCH_SHA256, sha),
        (HEADER_LAST_OFFSET, b"1"),
    ]
    assert preserved(span, 10**6) == (None, bad, form)
    # the form guards before span decisions wrote for a batch's other offsets
    ref = msgspec.structs.replace(span, carrier=False, raw=None, offset=1, last_offset=None)
    assert preserved(ref, 10**6) == (
        None,
        None,
        [(HEADER_ORIGINAL_FORM, FORM_BATCH_REF.encode()), (HEADER_BATCH_OFFSET, b"0"), (HEADER_BATCH_SHA256, sha)],
    )


# -- into admission and the dead letter -------------------------------------------------


def test_a_placeholder_becomes_one_reject_with_its_reason_and_a_dead_letter_with_its_bytes() -> None:
    items = _decode(_three([(b"\xff", b"x")]))
    policy = AdmissionPolicy()
    inputs = []
    for r in items:
        c = Coordinates(topic=r.topic, partition=r.partition, offset=r.offset)
        if type(r) is Undecodable:
            _, value, headers = preserved(r, 1_048_576)
            inputs.append(Input(c, value, headers, undecodable=(Reason(r.reason), r.detail)))
        else:
            inputs.append(Input(c, r.value, list(r.headers)))
    store = MemoryStore(created_at=NOW - 3_600_000)
    decisions = admit_batch(inputs, store=store, registry=registry("planner"), now_ms=NOW, policy=policy)
    assert [(d.outcome, d.reason) for d in decisions] == [
        ("reject", "missing_header"),
        ("reject", "undecodable_header"),
        ("reject", "missing_header"),
    ]
    # re-delivered after a crash: the same decision, not a second one
    again = admit_batch(inputs, store=store, registry=registry("planner"), now_ms=NOW + 5, policy=policy)
    assert again == decisions
    d = decisions[1]
    dl = dead_letter(
        "dlq", items[1].key, inputs[1].value, inputs[1].headers, d.decision_id, d.reason, d.detail, d.source, max_payload_bytes=1_048_576
    )
    assert dl.key == b"k" and dl.value == b"v1" and _h(dl.headers, HEADER_ORIGINAL_FORM) == b"parts"
    assert _h(dl.headers, "busguard-reason") == b"undecodable_header" and _h(dl.headers, "busguard-source") == b"t/0/1"


# -- claimed spans (issue 19 item 2) ----------------------------------------------------


@pytest.mark.parametrize("n", [1, 20_000, 2**31 - 1])
def test_a_claimed_span_is_one_placeholder_of_constant_size_whatever_it_claims(n: int) -> None:
    # a 69-byte batch, CRC broken, whose header claims n offsets; then a good record
    bad = claimed_span(n, base_offset=100)
    good = batch([record(0, b"k", b"after", [])], base_offset=100 + n)
    records = _partition_records(bad + good, 100)
    span, after = list(records)
    assert type(span) is Undecodable and span.reason == Reason.UNDECODABLE_BATCH and span.offset == 100
    assert span.next_offset == 100 + n and span.last_offset == (None if n == 1 else 100 + n - 1)
    assert type(after) is ConsumerRecord and after.offset == 100 + n and after.value == b"after"
    assert records.next_fetch_offset == 100 + n + 1
    # what it costs downstream does not grow with n: one input, its bytes kept once
    _, value, headers = preserved(span, 1_048_576)
    assert value == bad and len(bad) == 69
    assert sum(len(k) + len(v) for k, v in headers) <= 200  # names, batch offset, SHA-256, last offset (<= 19 digits)


def test_a_span_decision_is_one_reject_and_re_admission_returns_it_unchanged() -> None:
    (span,) = _decode(claimed_span(2**31 - 1, base_offset=5), 5)
    _, value, headers = preserved(span, 1_048_576)
    source = Coordinates(topic="t", partition=0, offset=5)
    inputs = [Input(source, value, headers, undecodable=(Reason(span.reason), span.detail), last_offset=span.last_offset)]
    store = MemoryStore(created_at=NOW - 3_600_000)
    (d,) = admit_batch(inputs, store=store, registry=registry("planner"), now_ms=NOW, policy=AdmissionPolicy())
    assert (d.outcome, d.reason, d.source.offset, d.last_offset, d.covers_to) == (
        "reject",
        "undecodable_batch",
        5,
        5 + 2**31 - 2,
        5 + 2**31 - 2,
    )
    assert store.partition_watermarks() == {("t", 0): 5 + 2**31 - 2}  # the store has decided the whole span
    again = admit_batch(inputs, store=store, registry=registry("planner"), now_ms=NOW + 5, policy=AdmissionPolicy())
    assert again == [d]  # re-delivered after a crash: the one decision, unchanged
    dl = dead_letter("dlq", None, value, headers, d.decision_id, d.reason, d.detail, d.source, max_payload_bytes=1_048_576)
    assert _h(dl.headers, HEADER_LAST_OFFSET) == str(5 + 2**31 - 2).encode() and _h(dl.headers, "busguard-source") == b"t/0/5"
