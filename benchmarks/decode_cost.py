"""What busguard's tolerant fetch decoding costs on records that decode normally.

Decodes the same fetch (5 batches of 100 records of ~1.4 KB, uncompressed and
zstd) through aiokafka's fetcher `PartitionRecords` with and without
busguard's hook (busguard/runtime/tolerant_fetch.py), checks both give identical
records, and prints the median µs per record of each, interleaved.

    .venv/bin/python benchmarks/decode_cost.py [--rounds 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka.consumer import fetcher  # noqa: E402
from aiokafka.structs import TopicPartition  # noqa: E402

from busguard.runtime.tolerant_fetch import RAW_KEYS, consumer_options  # noqa: E402
from tests.fuzz.batches import CODECS, batch, record  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    consumer_options()
    value = b'{"op":"summarize","doc":"' + b"x" * 900 + b'"}'
    headers = [(b"busguard-receipt", b"r" * 400), (b"busguard-signature", b"s" * 86)]
    out = {}
    for codec in ("none", "zstd"):
        raw = b"".join(
            batch([record(i, b"key", value, headers) for i in range(100)], base_offset=100 * k, codec=CODECS[codec]) for k in range(5)
        )

        def run(tolerant: bool, raw: bytes = raw) -> list[object]:
            pr = fetcher.PartitionRecords(
                TopicPartition("t", 0), fetcher.MemoryRecords(raw), None, 0, RAW_KEYS if tolerant else None, None, True, 0
            )
            return list(pr)

        assert run(True) == run(False)
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.rounds):
            for tolerant in (False, True):
                t = time.perf_counter()
                run(tolerant)
                times[tolerant].append((time.perf_counter() - t) / 500 * 1e6)
        out[codec] = {
            "aiokafka_us_per_record": round(statistics.median(times[False]), 3),
            "tolerant_us_per_record": round(statistics.median(times[True]), 3),
        }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
