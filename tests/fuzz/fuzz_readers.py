"""The readers' fuzz campaign: hostile records on the downstream, reconciliation and audit topics.

The guard's inputs get `python -m tests.fuzz.fuzz_records`; this puts the
same hostile generator (hostile records, mutated batches in every codec,
bombs, claimed spans) and hostile variants of genuine sealed records on the
three topics busguard's other readers consume, among genuine records two
real guards wrote: the SDK receiver (`ActOnce` over `AdmittingConsumer` on
a SQLite done-set), the reconciler (`Reconciler.process`) and the auditor
(its record expansion, per-record checks and `judge`), each through
aiokafka's fetcher with busguard's tolerant hook (tests/fuzz/readers.py).
Prints its figures and exits 1 on any crash, stall, item without exactly
one outcome, or genuine task not acted on exactly once.

    .venv/bin/python -m tests.fuzz.fuzz_readers --records 1000000 [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

from busguard.runtime.logs import configure

from .readers import Readers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000, help="records to put on the three topics in all (default 100000)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    configure("json", "error")  # every refusal and dead letter is logged at warning: keep the figures readable
    camp = Readers(random.Random(args.seed))
    started = time.perf_counter()
    last_report = 0
    try:
        while camp.stats.total < args.records:
            camp.round()
            if camp.stats.total - last_report >= 100_000:
                last_report = camp.stats.total
                print(f"… {camp.stats.total} records, {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        camp.finish()
        figures = camp.figures(time.perf_counter() - started)
    finally:
        camp.close()
    print(json.dumps(figures, indent=2))
    return 1 if camp.stats.violations() else 0


if __name__ == "__main__":
    raise SystemExit(main())
