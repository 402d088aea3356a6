"""The rows a preloaded store holds: `n` live nonces and `n` live tasks,
written through a store's `run_batch` in chunks. One definition for
benchmarks/compare.py `--preload` (a guard's SQLite file) and
benchmarks/state_rocksdb.py (SQLite against RocksDB), so both measure the
same filled store: same seed, sizes and expiries.

Expiries: nonces a day ahead and tasks admitted now, or with `spread`,
spread evenly over `nonce_life_ms` and `task_life_ms` ahead, as in a store
that has run at a steady rate for a whole lifetime (the newest rows then
share their expiry buckets with a quarter of the old ones).
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
from typing import Protocol

from busguard.protocol.records import Coordinates, TaskEntry
from busguard.state.keys import KeySet
from busguard.state.snapshot import Snapshot
from busguard.state.store import BatchFn
from busguard.state.writes import BatchWrites, NonceRecord

_RECEIPT = json.dumps(
    {
        "v": 1,
        "kind": "handoff",
        "task_id": "x" * 24,
        "sender": "tulpa:z" + "k" * 46,
        "receiver": "executor",
        "payload_hash": "0" * 64,
        "nonce": "n" * 22,
        "issued_at": "2026-12-01T09:00:00.000Z",
    }
).encode()


class BatchStore(Protocol):
    def run_batch(self, keys: KeySet, now_ms: int, fn: BatchFn) -> object: ...


def preload(store: BatchStore, n: int, now_ms: int, nonce_life_ms: int, task_life_ms: int, spread: bool, chunk: int = 20_000) -> None:
    rng = random.Random(13)
    for start in range(0, n, chunk):

        def rows(snap: Snapshot, start: int = start) -> BatchWrites:
            state = BatchWrites()
            for i in range(start, min(n, start + chunk)):
                nonce = base64.urlsafe_b64encode(rng.randbytes(16)).rstrip(b"=").decode()
                nonce_exp = now_ms + 1 + i * nonce_life_ms // n if spread else now_ms + 86_400_000
                state.nonces[("", nonce)] = NonceRecord(("", nonce), nonce_exp)
                tid = f"preload-{i}"
                state.tasks[("handoff", tid)] = TaskEntry(
                    "handoff",
                    tid,
                    hashlib.sha256(nonce.encode()).hexdigest(),
                    hashlib.sha256(tid.encode()).hexdigest(),
                    "tulpa:z" + "k" * 46,
                    nonce,
                    "0" * 64,
                    None,
                    None,
                    Coordinates(topic="preload", partition=0, offset=i),
                    _RECEIPT,
                    rng.randbytes(64),
                    now_ms - task_life_ms + 1 + i * task_life_ms // n if spread else now_ms,
                )
            return state

        store.run_batch(KeySet(), now_ms, rows)
