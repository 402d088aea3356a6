"""Fuzz campaign at the Kafka record level (issue 8).

Generates records — valid signed ones mixed with bit-flipped copies, random
header names and values, non-UTF-8 names, huge and many headers, deep JSON,
NUL bytes, integer edges in sequences, timestamps at the grammar's edges —
packs them into Kafka v2 record batches in every codec, mutates about half of
the batches (bit flips with and without a fixed CRC, truncation, unknown
codec ids, corrupt compressed frames, out-of-order offsets, wrong counts,
control bits, junk), adds a compression bomb (gzip, snappy, lz4, zstd:
at, just past and far past batch.max_inflated_bytes; snappy length
headers that lie) to about one fetch in 100 and batches whose header
claims up to 2^31 offsets to about one batch in 33, and runs each fetch
through aiokafka's fetcher decode path with busguard's tolerant hook and
the guard's whole decide step (tests/fuzz/campaign.py). Prints its figures
as JSON; exits 1 on any crash, missing or duplicate decision, valid record
not admitted, input whose outputs pass the per-input bound, or bomb fetch
whose peak memory growth (VmHWM, reset before it) passed its bound.

    .venv/bin/python -m tests.fuzz.fuzz_records --records 1000000 [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

from busguard.runtime.logs import configure

from .campaign import Campaign
from .generator import Generator


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000, help="records to generate (default 100000)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    configure("json", "error")  # the guard logs every reject at info: keep the figures readable
    camp = Campaign()
    gen = Generator(camp, random.Random(args.seed))
    started = time.perf_counter()
    base, last_report = 0, 0
    try:
        while camp.stats.records < args.records:
            batches, fetch_offset, base = gen.fetch(base)
            base = max(base, camp.decide_fetch(batches, fetch_offset))
            if camp.stats.records - last_report >= 100_000:
                last_report = camp.stats.records
                print(f"… {camp.stats.records} records, {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    finally:
        camp.close()
    elapsed = time.perf_counter() - started
    s = camp.stats
    report = {
        "records_generated": s.records,
        "offsets_decided": s.decided,
        "fetches": s.fetches,
        "seconds": round(elapsed, 1),
        "records_per_s": round(s.records / elapsed),
        "crashes": s.crashes,
        "missing_decisions": s.missing,
        "duplicate_decisions": s.duplicates,
        "valid_not_admitted": s.valid_not_admitted,
        "fetches_stopped_at_cap": s.truncated,
        "bomb_fetches": s.bombs,
        "bomb_fetches_over_memory_bound": s.bombs_over_bound,
        "bomb_peak_rss_growth_mib": round(s.bomb_peak_growth / 2**20, 1),
        "offsets_passed_over": s.passed_over,
        "span_decisions": s.spans,
        "span_offsets": s.span_offsets,
        "max_output_bytes_per_input": s.max_output_bytes,
        "inputs_over_output_bound": s.oversized_outputs,
        "by_reason": dict(s.reasons.most_common()),
        "samples": s.crash_samples[:20],
    }
    print(json.dumps(report, indent=2))
    bad = s.crashes or s.missing or s.duplicates or s.oversized_outputs or s.valid_not_admitted or s.bombs_over_bound or s.crash_samples
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
