"""RSS of a process that only churns a SqliteStore the way `compare.py --soak` does.

The soak's guard RSS kept climbing for minutes; this separates the store
from the rest of the guard: 500 records/s simulated (batches of 250 every
simulated 0.5 s), nonces and tasks expiring after 15 s, `expire` every 5
simulated seconds, for 600 simulated seconds, written through
`SqliteStore.run_batch` with the guard's connection settings. Prints the
process RSS, the live rows and the file size once a simulated minute.
`--decisions` also writes each record's decision (as the guard does, read
back by the batch's source positions), so the decision layout's share of the
file and of the time shows; the last line is one JSON summary.

    .venv/bin/python benchmarks/store_churn.py [--decisions]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from busguard.protocol.records import Coordinates, Decision, TaskEntry  # noqa: E402
from busguard.state.keys import KeySet  # noqa: E402
from busguard.state.snapshot import Snapshot  # noqa: E402
from busguard.state.sqlite.store import SqliteStore  # noqa: E402
from busguard.state.writes import BatchWrites, NonceRecord  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--decisions", action="store_true", help="also write a decision per record")
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="busguard-churn-"))
    now = 1_000_000_000_000
    store = SqliteStore(d / "s.db", now_ms=now - 1000, task_retention_ms=15_000, decision_retention_ms=15_000)
    rng = random.Random(1)
    receipt = b"r" * 330
    print(f"start: {rss_mb():.1f} MB")
    i = 0
    busy = 0.0
    for step in range(1, 1201):
        now += 500

        def fill(snap: Snapshot, i0: int = i, now: int = now) -> BatchWrites:
            st = BatchWrites()
            for k in range(i0, i0 + 250):
                nonce = base64.urlsafe_b64encode(rng.randbytes(16)).decode()
                st.nonces[("", nonce)] = NonceRecord(("", nonce), now + 15_000)
                tid = f"task-{k}"
                at = Coordinates(topic="t", partition=k % 4, offset=k // 4)
                st.tasks[("handoff", tid)] = TaskEntry(
                    "handoff",
                    tid,
                    hashlib.sha256(nonce.encode()).hexdigest(),
                    "d" * 64,
                    "p" * 50,
                    nonce,
                    "0" * 64,
                    None,
                    None,
                    at,
                    receipt,
                    rng.randbytes(64),
                    now,
                )
                if args.decisions:
                    st.decisions[("t", at.partition, at.offset)] = Decision(
                        rng.randbytes(16).hex(),
                        "forward",
                        "admitted",
                        at,
                        now,
                        "",
                        hashlib.sha256(receipt + nonce.encode()).hexdigest(),
                        "handoff",
                        tid,
                        "s" * 54,
                        "p" * 52,
                        "executor",
                        nonce,
                        None,
                        None,
                        "0" * 64,
                        "2026-12-01T00:00:00.000Z",
                        "1",
                        rng.randbytes(32),
                        receipt,
                        rng.randbytes(64),
                        record_sha256=rng.randbytes(32).hex(),
                    )
            return st

        sources = [("t", k % 4, k // 4) for k in range(i, i + 250)] if args.decisions else []
        t0 = time.perf_counter()
        store.run_batch(KeySet(sources=sources), now, fill)
        busy += time.perf_counter() - t0
        i += 250
        if step % 10 == 0:
            store.expire(now)
        if step % 120 == 0:
            size = sum(f.stat().st_size for f in d.iterdir()) / 2**20
            print(f"{step // 2:4d} s simulated: RSS {rss_mb():.1f} MB, rows {store.counts()}, files {size:.1f} MB", flush=True)
    print(
        json.dumps(
            {
                "benchmark": "store_churn",
                "decisions": args.decisions,
                "rss_mb": round(rss_mb(), 1),
                "files_mb": round(size, 1),
                "run_batch_us_per_record": round(busy / i * 1e6, 1),
            }
        )
    )
    store.close()


if __name__ == "__main__":
    main()
