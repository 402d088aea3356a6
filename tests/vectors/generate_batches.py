"""Generate tests/vectors/batches.json: fetched Kafka bytes and the item each
offset must decode to (protocol.md sections 2.1 and 11). Deterministic.

    python tests/vectors/generate_batches.py [--out DIR]

Each vector is one partition's fetch (record batches back to back, hex) and
the offset the consumer asked for; `expect` lists, in order, every offset
the decoder must yield and what: "record" (handed to admission as a record)
or the reject reason (`undecodable_header`, `undecodable_record`,
`undecodable_batch`). Compressed vectors avoid gzip, whose frames carry a
timestamp (a gzip vector is a corrupt frame given byte for byte).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fuzz.batches import CODECS, batch, record, with_base_offset  # noqa: E402

R, H, U, B = "record", "undecodable_header", "undecodable_record", "undecodable_batch"
BROKEN = b"\x16\x00\x00\x02\x7ekk" + b"\x00" * 5  # key length 63 in an 11-byte record


def three(middle: list[tuple[bytes, bytes | None]], codec: int = 0, base: int = 0) -> bytes:
    return batch([record(0, b"k", b"v0", [(b"a", b"1")]), record(1, b"k", b"v1", middle), record(2, b"k", b"v2", [])], codec=codec, base_offset=base)


def vectors() -> list[dict[str, object]]:
    v: list[tuple[str, str, bytes, int, list[tuple[int, str]]]] = [
        ("plain", "three records, no compression", three([(b"h", b"x"), (b"n", None)]), 0, [(0, R), (1, R), (2, R)]),
        *[(f"valid_{c}", f"three records, {c}", three([(b"h", b"x")], CODECS[c]), 0, [(0, R), (1, R), (2, R)]) for c in ("snappy", "lz4", "zstd")],
        ("non_utf8_header_name", "the middle record has header name FF FE", three([(b"ok", b"1"), (b"\xff\xfe", b"x")]), 0, [(0, R), (1, H), (2, R)]),
        ("non_utf8_header_name_zstd", "the same, zstd-compressed", three([(b"\xc0\xaf", b"")], CODECS["zstd"]), 0, [(0, R), (1, H), (2, R)]),
        ("unparseable_record", "the middle record's key length runs past it", batch([record(0, b"k", b"v0", []), BROKEN, record(2, b"k", b"v2", [])]), 0, [(0, R), (1, U), (2, R)]),
        ("crc_mismatch", "CRC field 1; the next batch is fine", batch([record(i, None, b"x", []) for i in range(3)], base_offset=10, crc=1) + batch([record(0, None, b"y", [])], base_offset=13), 10, [(10, B), (11, B), (12, B), (13, R)]),
        ("unknown_codec", "attributes codec id 5", batch([record(i, None, b"x", []) for i in range(2)], attributes=5), 0, [(0, B), (1, B)]),
        ("corrupt_gzip_frame", "gzip attributes over bytes that are not gzip", batch([], payload=b"\x1f\x8b\x08\x00garbage", count=2, last_offset_delta=1, attributes=1), 0, [(0, B), (1, B)]),
        ("corrupt_snappy_frame", "snappy attributes over bytes that are not snappy", batch([], payload=b"\x00garbage", count=2, last_offset_delta=1, attributes=2), 0, [(0, B), (1, B)]),
        ("out_of_order_deltas", "offset deltas 1, 0", batch([record(1, None, b"a", []), record(0, None, b"b", [])]), 0, [(0, B), (1, B)]),
        ("truncated_records", "4 records declared, the section ends inside the third", batch([], payload=b"".join(record(i, b"k", b"v", []) for i in range(4))[:20], count=4, last_offset_delta=3), 0, [(0, R), (1, R), (2, B), (3, B)]),
        ("control_outside_transaction", "control bit without the transactional bit", batch([record(0, None, b"x", [])], attributes=0x20), 0, [(0, B)]),
        ("transaction_marker", "a control batch inside a transaction: no record", batch([record(0, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", [])], attributes=0x30) + batch([record(0, None, b"y", [])], base_offset=1), 0, [(1, R)]),
        ("fetch_offset_mid_batch", "fetched at 21 inside a CRC-broken batch at 20", batch([record(i, None, b"x", []) for i in range(4)], base_offset=20, crc=1), 21, [(21, B), (22, B), (23, B)]),
        ("header_does_not_cover_fetch_offset", "last offset delta -3: the fetched offset 5 is decided anyway", with_base_offset(batch([record(0, None, b"v", [])], last_offset_delta=-3, crc=3), 0), 5, [(5, B)]),
        ("span_capped_by_next_batch", "a broken batch claiming 1 000 001 offsets, the next batch at 2", batch([record(0, None, b"v", [])], last_offset_delta=1_000_000, crc=7) + three([], base=2), 0, [(0, B), (1, B), (2, R), (3, R), (4, R)]),
    ]
    return [{"name": n, "description": d, "fetch_offset": fo, "fetch_hex": raw.hex(), "expect": [[o, what] for o, what in e]} for n, d, raw, fo, e in v]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = ap.parse_args()
    doc = {"format": "busguard.batches.v1", "topic": "t", "partition": 0, "vectors": vectors()}
    (args.out / "batches.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="ascii")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
