"""Generate tests/vectors/batches.json: fetched Kafka bytes and the item each
offset must decode to (protocol.md sections 2.1 and 11). Deterministic.

    python tests/vectors/generate_batches.py [--out DIR]

Each vector is one partition's fetch (record batches back to back, hex) and
the offset the consumer asked for; `expect` lists, in order, every item the
decoder must yield as [first offset, last offset, what]: "record" (handed to
admission as a record; first = last) or the reject reason
(`undecodable_header`, `undecodable_record`, `undecodable_batch`). An
`undecodable_batch` item covers a span, however long (protocol.md 2.1).
Compressed vectors avoid gzip, whose frames carry a timestamp (a gzip vector
is a corrupt frame given byte for byte).

A vector with `aborted` is read as read_committed: `aborted` is the Fetch
response's aborted transactions, [producer id, first offset]; a vector
without it is read as read_uncommitted (every batch). `next`, where given,
is the offset to fetch next (past skipped batches and markers); elsewhere it
is the one after the last item's, or `fetch_offset` when there is none.

`span_decisions` are decision records (protocol.md 12.3) for the spans of
some vectors: the exact audit-topic value the guard writes for the span's one
decision with namespace `NAMESPACE` at `decided_at` `NOW`.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from busguard.admission.decide import undecodable  # noqa: E402
from busguard.admission.types import AdmissionPolicy  # noqa: E402
from busguard.protocol.attestation import decision_bytes  # noqa: E402
from busguard.protocol.reasons import Reason  # noqa: E402
from busguard.protocol.records import Coordinates, record_sha256  # noqa: E402
from busguard.runtime.tolerant_fetch import PartitionDecoder, preserved  # noqa: E402
from busguard.runtime.undecodable import Undecodable  # noqa: E402
from tests.fuzz.batches import CODECS, batch, claimed_span, marker, record, transactional, with_base_offset  # noqa: E402

R, H, U, B = "record", "undecodable_header", "undecodable_record", "undecodable_batch"
NAMESPACE, NOW, MAX_PAYLOAD = "busguard", 1_767_225_600_000, 1_048_576
#: the vectors whose spans `span_decisions` gives the decision record of
SPAN_DECISIONS = ("crc_mismatch", "claimed_span_20000", "claimed_span_2147483647", "fetch_offset_mid_batch")
BROKEN = b"\x16\x00\x00\x02\x7ekk" + b"\x00" * 5  # key length 63 in an 11-byte record


def three(middle: list[tuple[bytes, bytes | None]], codec: int = 0, base: int = 0) -> bytes:
    return batch(
        [record(0, b"k", b"v0", [(b"a", b"1")]), record(1, b"k", b"v1", middle), record(2, b"k", b"v2", [])], codec=codec, base_offset=base
    )


def txn(base: int, producer_id: int, *values: bytes) -> bytes:
    return transactional([record(i, b"k", v, []) for i, v in enumerate(values)], base, producer_id)


#: producer 7's transaction at 0 and producer 8's at 1 interleaved, 7 aborted (its marker at 4), 8 committed (at 5)
INTERLEAVED = (
    txn(0, 7, b"a0") + txn(1, 8, b"c1") + txn(2, 7, b"a2") + txn(3, 8, b"c3") + marker(4, 7, commit=False) + marker(5, 8, commit=True)
)


def log_end(raw: bytes) -> int:
    """The offset after the last batch of `raw` (its base offset plus its lastOffsetDelta, plus one)."""
    pos = end = 0
    while pos < len(raw):
        base, length = struct.unpack_from(">qi", raw, pos)
        end = base + struct.unpack_from(">i", raw, pos + 23)[0] + 1
        pos += 12 + length
    return end


def read_committed() -> list[tuple[str, str, bytes, int, list[tuple[int, int, str]], list[tuple[int, int]] | None]]:
    """Transactions (KIP-98) read as read_committed (`aborted` given) and read_uncommitted."""
    return [
        (
            "read_committed_aborted_skipped",
            "producer 7's transaction at 0-1 aborted (marker at 2), a plain batch at 3: only 3",
            txn(0, 7, b"a0", b"a1") + marker(2, 7, commit=False) + batch([record(0, None, b"p", [])], base_offset=3),
            0,
            [(3, 3, R)],
            [(7, 0)],
        ),
        (
            "read_committed_committed_kept",
            "producer 8's transaction at 0-1 committed (marker at 2): both records",
            txn(0, 8, b"c0", b"c1") + marker(2, 8, commit=True),
            0,
            [(0, 0, R), (1, 1, R)],
            [],
        ),
        (
            "read_committed_marker_ends_the_abort",
            "producer 7 aborts at 0-1 (marker at 2), then commits at 3 (marker at 4): 3 is kept",
            txn(0, 7, b"a0", b"a1") + marker(2, 7, commit=False) + txn(3, 7, b"c3") + marker(4, 7, commit=True),
            0,
            [(3, 3, R)],
            [(7, 0)],
        ),
        (
            "read_committed_two_producers_interleaved",
            "7 aborted, 8 committed, batches interleaved",
            INTERLEAVED,
            0,
            [(1, 1, R), (3, 3, R)],
            [(7, 0)],
        ),
        (
            "read_committed_abort_starts_mid_fetch",
            "producer 7 commits at 0 (marker 1), aborts at 2 (marker 3); its idempotent non-transactional batch at 4 is kept",
            txn(0, 7, b"c0")
            + marker(1, 7, commit=True)
            + txn(2, 7, b"a2")
            + marker(3, 7, commit=False)
            + transactional([record(0, None, b"p4", [])], 4, 7, attributes=0),
            0,
            [(0, 0, R), (4, 4, R)],
            [(7, 2)],
        ),
        (
            "read_committed_aborted_batch_is_not_read",
            "an aborted transaction's CRC-broken batch is skipped unread, as Kafka's consumers skip it",
            txn(0, 7, b"x")[:17] + b"\x00\x00\x00\x01" + txn(0, 7, b"x")[21:] + marker(1, 7, commit=False),
            0,
            [],
            [(7, 0)],
        ),
        (
            "read_uncommitted_hands_out_everything",
            "the interleaved log without `aborted`: every record",
            INTERLEAVED,
            0,
            [(i, i, R) for i in range(4)],
            None,
        ),
    ]


def vectors() -> list[dict[str, object]]:
    """(name, description, fetch, fetch offset, items as (first, last, what))."""
    v: list[tuple[str, str, bytes, int, list[tuple[int, int, str]]]] = [
        ("plain", "three records, no compression", three([(b"h", b"x"), (b"n", None)]), 0, [(0, 0, R), (1, 1, R), (2, 2, R)]),
        *[
            (f"valid_{c}", f"three records, {c}", three([(b"h", b"x")], CODECS[c]), 0, [(0, 0, R), (1, 1, R), (2, 2, R)])
            for c in ("snappy", "lz4", "zstd")
        ],
        (
            "non_utf8_header_name",
            "the middle record has header name FF FE",
            three([(b"ok", b"1"), (b"\xff\xfe", b"x")]),
            0,
            [(0, 0, R), (1, 1, H), (2, 2, R)],
        ),
        (
            "non_utf8_header_name_zstd",
            "the same, zstd-compressed",
            three([(b"\xc0\xaf", b"")], CODECS["zstd"]),
            0,
            [(0, 0, R), (1, 1, H), (2, 2, R)],
        ),
        (
            "unparseable_record",
            "the middle record's key length runs past it",
            batch([record(0, b"k", b"v0", []), BROKEN, record(2, b"k", b"v2", [])]),
            0,
            [(0, 0, R), (1, 1, U), (2, 2, R)],
        ),
        (
            "crc_mismatch",
            "CRC field 1; the next batch is fine",
            batch([record(i, None, b"x", []) for i in range(3)], base_offset=10, crc=1)
            + batch([record(0, None, b"y", [])], base_offset=13),
            10,
            [(10, 12, B), (13, 13, R)],
        ),
        ("unknown_codec", "attributes codec id 5", batch([record(i, None, b"x", []) for i in range(2)], attributes=5), 0, [(0, 1, B)]),
        (
            "corrupt_gzip_frame",
            "gzip attributes over bytes that are not gzip",
            batch([], payload=b"\x1f\x8b\x08\x00garbage", count=2, last_offset_delta=1, attributes=1),
            0,
            [(0, 1, B)],
        ),
        (
            "corrupt_snappy_frame",
            "snappy attributes over bytes that are not snappy",
            batch([], payload=b"\x00garbage", count=2, last_offset_delta=1, attributes=2),
            0,
            [(0, 1, B)],
        ),
        ("out_of_order_deltas", "offset deltas 1, 0", batch([record(1, None, b"a", []), record(0, None, b"b", [])]), 0, [(0, 1, B)]),
        (
            "truncated_records",
            "4 records declared, the section ends inside the third",
            batch([], payload=b"".join(record(i, b"k", b"v", []) for i in range(4))[:20], count=4, last_offset_delta=3),
            0,
            [(0, 0, R), (1, 1, R), (2, 3, B)],
        ),
        (
            "control_outside_transaction",
            "control bit without the transactional bit",
            batch([record(0, None, b"x", [])], attributes=0x20),
            0,
            [(0, 0, B)],
        ),
        (
            "transaction_marker",
            "a control batch inside a transaction: no record",
            batch([record(0, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", [])], attributes=0x30)
            + batch([record(0, None, b"y", [])], base_offset=1),
            0,
            [(1, 1, R)],
        ),
        (
            "fetch_offset_mid_batch",
            "fetched at 21 inside a CRC-broken batch at 20",
            batch([record(i, None, b"x", []) for i in range(4)], base_offset=20, crc=1),
            21,
            [(21, 23, B)],
        ),
        (
            "header_does_not_cover_fetch_offset",
            "last offset delta -3: the fetched offset 5 is decided anyway",
            with_base_offset(batch([record(0, None, b"v", [])], last_offset_delta=-3, crc=3), 0),
            5,
            [(5, 5, B)],
        ),
        (
            "span_capped_by_next_batch",
            "a broken batch claiming 1 000 001 offsets, the next batch at 2",
            batch([record(0, None, b"v", [])], last_offset_delta=1_000_000, crc=7) + three([], base=2),
            0,
            [(0, 1, B), (2, 2, R), (3, 3, R), (4, 4, R)],
        ),
        *[
            (
                f"claimed_span_{n}",
                f"one record, CRC broken, lastOffsetDelta {n - 1}: one item for {n} offsets",
                claimed_span(n, base_offset=7),
                7,
                [(7, 7 + n - 1, B)],
            )
            for n in (1, 20_000, 2**31 - 1)
        ],
    ]
    out: list[dict[str, object]] = [
        {"name": n, "description": d, "fetch_offset": fo, "fetch_hex": raw.hex(), "expect": [[lo, hi, what] for lo, hi, what in e]}
        for n, d, raw, fo, e in v
    ]
    for n, d, raw, fo, e, aborted in read_committed():
        vec: dict[str, object] = {"name": n, "description": d, "fetch_offset": fo, "fetch_hex": raw.hex()}
        if aborted is not None:
            vec["aborted"] = [list(a) for a in aborted]
        out.append(vec | {"expect": [[lo, hi, what] for lo, hi, what in e], "next": log_end(raw)})
    return out


def span_decisions(vecs: list[dict[str, object]]) -> list[dict[str, object]]:
    """The decision record of each span of the `SPAN_DECISIONS` vectors, made
    the way the guard makes it (busguard.runtime.guard, admission.decide)."""
    out: list[dict[str, object]] = []
    for vec in vecs:
        if vec["name"] not in SPAN_DECISIONS:
            continue
        fetch = bytes.fromhex(str(vec["fetch_hex"]))
        fetch_offset = vec["fetch_offset"]
        assert isinstance(fetch_offset, int)
        for item in PartitionDecoder("t", 0, fetch, fetch_offset):
            if type(item) is not Undecodable or item.reason != Reason.UNDECODABLE_BATCH:
                continue
            _, value, headers = preserved(item, MAX_PAYLOAD)
            source = Coordinates(topic="t", partition=0, offset=item.offset)
            d = undecodable(
                source,
                NOW,
                AdmissionPolicy(namespace=NAMESPACE),
                Reason(item.reason),
                item.detail,
                record_sha256(None, value, headers),
                item.last_offset,
            )
            out.append(
                {
                    "vector": vec["name"],
                    "first_offset": item.offset,
                    "last_offset": item.next_offset - 1,
                    "decision": decision_bytes(d).decode("ascii"),
                }
            )
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = ap.parse_args()
    vecs = vectors()
    doc = {
        "format": "busguard.batches.v2",
        "topic": "t",
        "partition": 0,
        "namespace": NAMESPACE,
        "decided_at": NOW,
        "max_payload_bytes": MAX_PAYLOAD,
        "vectors": vecs,
        "span_decisions": span_decisions(vecs),
    }
    (args.out / "batches.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="ascii")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
