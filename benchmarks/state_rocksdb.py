"""busguard's per-batch state transaction on the RocksDB backend against SQLite.

Issue 20, lever 2 ("state laid out for keys that expire") names an LSM engine
built for random-key inserts, RocksDB through `rocksdict` (what Quix Streams
keeps its state in), as a single-host alternative to the SQLite store. This
benchmark measures the two backends' stores on the same batch workload as
benchmarks/state_postgres.py (its records, keys, batches and `admit_batch`
with the signature step skipped):

- `sqlite`: `SqliteStore.run_batch` (schema 4, time-bucketed nonce and task
  tables, `synchronous = FULL`, the guard's checkpoint thread as `busguard
  run` opens it: `checkpoint_every_s=1.0`), and
- `rocksdb`: the RocksDB backend's store (state/rocksdb/), opened as
  `busguard run` opens it, through `busguard.state.backends.open_store`
  with `RocksOptions(synchronous="FULL")` (one synced `WriteBatch` per
  batch, the call SQLite's FULL commit makes) and SQLite's retentions.

The layout, buckets and expiry of the RocksDB store: its package docstring
(busguard/state/rocksdb/__init__.py) and docs/operations.md section 1.

RocksDB options (Quix Streams' defaults, rocksdb/options.py, except where
said): 64 MiB write buffer, 3 of them, 64 MiB target SST size, block-based
tables with a 10-bit bloom filter, lz4, a 64 MiB block cache (SQLite's
`cache_size` here; Quix takes 1 GiB), `use_fsync = false` (Quix: true).

Measured, per store: the state part of each batch as state_postgres.py
times it (wall time inside `run_batch` minus the decision function), per
record, median over batches, then the median over `--repeat` runs on fresh
copies; the process CPU of the whole run per record (every thread:
admission, the store's own work, SQLite's checkpoint thread, RocksDB's
flush and compaction threads), whose difference between the stores is the
state's CPU difference (admission is the same work), and over the same run
on a `MemoryStore` (admission's own CPU: `memory_empty`) the state's CPU
per record (`state_cpu_us_per_record`); the CPU of what the run left
behind, per record of the run (`tail_cpu_us`: RocksDB's memtable flush and
the compactions it starts, waited for; SQLite's closing checkpoint; both
after the check below, so including its 1 000 records). Both on an empty
store and on one holding `--preload` live nonces and as many live tasks
(benchmarks/preload.py's rows, as compare.py `--preload` writes them, through each
store's own `run_batch` in transactions of 20 000, synced; its fill time
and disk size reported, then copied per repeat). Each run ends with a
check the stores must pass: the first batch again at its positions
re-emits its decisions, and at new positions every record is refused.
`--expire` also times dropping everything a preloaded copy holds.

    .venv/bin/python benchmarks/state_rocksdb.py \\
        [--records 10000] [--batch 500] [--repeat 3] [--preload 1000000 [--spread] [--expire]]

One JSON line at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.preload import preload  # noqa: E402
from benchmarks.state_postgres import build, registry, run, skip_verify  # noqa: E402
from busguard.admission.batch import Input, admit_batch  # noqa: E402
from busguard.admission.types import AdmissionPolicy  # noqa: E402
from busguard.protocol.records import Coordinates, Decision  # noqa: E402
from busguard.state.backends import StoreOptions, open_store  # noqa: E402
from busguard.state.keys import KeySet  # noqa: E402
from busguard.state.memory.store import MemoryStore  # noqa: E402
from busguard.state.rocksdb.backend import RocksOptions  # noqa: E402
from busguard.state.rocksdb.store import RocksStore  # noqa: E402
from busguard.state.snapshot import Snapshot  # noqa: E402
from busguard.state.sqlite.store import SqliteStore  # noqa: E402
from busguard.state.writes import BatchWrites  # noqa: E402

# --------------------------------------------------------------------------- the runs

Store = Any  # SqliteStore, RocksStore or MemoryStore: each has run_batch and close


def open_engine(engine: str, where: Path, created: int) -> Store:
    """Each store as `busguard run` opens it (`synchronous = full`)."""
    if engine == "sqlite":
        return SqliteStore(where, now_ms=created, synchronous="FULL", checkpoint_every_s=1.0)
    if engine == "memory":
        return MemoryStore(created)  # the baseline: admission's own CPU, next to nothing for state
    # the reconciler's SQLite file is named, never opened: the guard's store is measured
    options = RocksOptions(path=where, reconcile_path=where.with_name(f"{where.name}-reconcile.db"), synchronous="FULL")
    return open_store("rocksdb", options, StoreOptions(now_ms=created))  # SqliteStore's retentions (StoreOptions' defaults)


def settle(store: RocksStore) -> None:
    """Flush the memtable and wait for background compaction to finish
    (after a fill, so the measured runs do not pay for the fill's)."""
    db = store._db
    db.flush(True)
    while (db.property_int_value("rocksdb.compaction-pending") or 0) or (db.property_int_value("rocksdb.num-running-compactions") or 0):
        time.sleep(0.2)


def disk_mb(where: Path) -> float:
    if not where.exists():
        return 0.0  # the memory store's
    files = [where] if where.is_file() else [p for p in where.rglob("*") if p.is_file()]
    files += [Path(f"{where}{s}") for s in ("-wal", "-shm") if Path(f"{where}{s}").exists()]
    return round(sum(f.stat().st_size for f in files) / 2**20, 1)


def fill(store: Store, n: int, now_ms: int, spread: bool, chunk: int = 20_000) -> None:
    """`n` live nonces and `n` live tasks (benchmarks/preload.py), with this store's retentions."""
    preload(store, n, now_ms, AdmissionPolicy().nonce_retention_ms, 7 * 86_400_000, spread, chunk)  # the stores' retentions here


def check(store: Store, inputs: list[Input], decided: list[Decision], now: int) -> None:
    """What each store must get right for its number to count: the batch again
    at its positions re-emits the decisions stored for it (the decision runs
    read back), and at new positions every record is refused (its nonce or
    task read back)."""
    reg, policy = registry(), AdmissionPolicy()
    again = admit_batch(inputs, store=store, registry=reg, now_ms=now, policy=policy, verify_many=skip_verify)
    assert [msgspec.json.encode(d) for d in again] == [msgspec.json.encode(d) for d in decided], "decisions did not re-emit"
    moved = [
        Input(Coordinates(topic=i.source.topic, partition=i.source.partition, offset=i.source.offset + 10**6), i.value, i.headers)
        for i in inputs
    ]
    replayed = admit_batch(moved, store=store, registry=reg, now_ms=now, policy=policy, verify_many=skip_verify)
    assert all(d.outcome != "forward" for d in replayed), "a replay was forwarded"


def measure(engine: str, where: Path, inputs: list[Input], batch: int, now: int, created: int) -> dict[str, float]:
    store = open_engine(engine, where, created)
    closed = False
    try:
        c0 = time.process_time()
        samples, wall = run(store, inputs, batch, now)
        cpu = time.process_time() - c0
        first = inputs[:batch]
        check(store, first, stored_decisions(store, first), now)
        # the work the run left behind: RocksDB's memtable flush and the
        # compactions it starts, SQLite's closing checkpoint
        c0 = time.process_time()
        if isinstance(store, RocksStore):
            settle(store)
        store.close()
        closed = True
        tail = time.process_time() - c0
    finally:
        if not closed:
            store.close()
    return {
        "state_us": statistics.median(samples) / batch * 1e6,
        "state_us_mean": sum(samples) / len(samples) / batch * 1e6,
        "cpu_us": cpu / len(inputs) * 1e6,
        "tail_cpu_us": tail / len(inputs) * 1e6,
        "wall_us": wall / len(inputs) * 1e6,
    }


def stored_decisions(store: Store, inputs: list[Input]) -> list[Decision]:
    """The decisions the run stored for `inputs`, read through one batch (the stores' one read path)."""
    sources = [(i.source.topic, i.source.partition, i.source.offset) for i in inputs]
    got: list[Decision] = []

    def peek(snap: Snapshot) -> BatchWrites:
        got.extend(snap.decisions[sk] for sk in sources)
        return BatchWrites()

    store.run_batch(KeySet(sources=sources), time.time_ns() // 1_000_000, peek)
    return got


def copy(src: Path, dst: Path) -> None:
    """A template's copy, synced: otherwise the kernel writes the copy back
    during the measured run, and a batch's fsync waits for that too (the
    SQLite template is three times the RocksDB one)."""
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copyfile(src, dst)
    for f in [p for p in dst.rglob("*") if p.is_file()] if dst.is_dir() else [dst]:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove(where: Path) -> None:
    if not where.exists():
        return
    if where.is_dir():
        shutil.rmtree(where)
    else:
        for s in ("", "-wal", "-shm"):
            Path(f"{where}{s}").unlink(missing_ok=True)


def summarise(runs: list[dict[str, float]]) -> dict[str, object]:
    """Per measure: the median over runs, and every run's value."""
    out: dict[str, object] = {}
    for field in runs[0]:
        values = [r[field] for r in runs]
        out[f"{field}_per_record_median"] = round(statistics.median(values), 1)
        out[f"{field}_per_record_runs"] = [round(v, 1) for v in values]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=3, help="runs per store and mode, each on a fresh file or copy, interleaved")
    ap.add_argument("--preload", type=int, default=0, metavar="N", help="also run on stores holding N live nonces and N live tasks")
    ap.add_argument("--spread", action="store_true", help="with --preload: the rows' expiries spread over their lifetimes ahead")
    ap.add_argument("--expire", action="store_true", help="with --preload: time expiring everything a preloaded copy holds")
    ap.add_argument("--engines", default="sqlite,rocksdb")
    ap.add_argument("--dir", type=Path, default=None, help="where the stores go (default: a temporary directory)")
    args = ap.parse_args()
    engines = args.engines.split(",")
    now = time.time_ns() // 1_000_000
    created = now - 3_600_000
    result: dict[str, Any] = {
        "benchmark": "state_rocksdb",
        "records": args.records,
        "batch": args.batch,
        "repeat": args.repeat,
        "preload": args.preload,
        "spread": args.spread,
        "rocksdict": version("rocksdict"),
        "load_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp_s:
        tmp = Path(tmp_s)
        inputs = build(args.records, 0, tmp, now)
        suffix = {"sqlite": ".db", "rocksdb": ".rocks", "memory": ".none"}
        empty: dict[str, list[dict[str, float]]] = {e: [] for e in ["memory", *engines]}
        for i in range(args.repeat):
            for e in ["memory", *(engines if i % 2 == 0 else engines[::-1])]:
                where = tmp / f"empty{i}{suffix[e]}"
                empty[e].append(measure(e, where, inputs, args.batch, now, created))
                result.setdefault(f"{e}_empty_disk_mb", disk_mb(where))
                remove(where)
                print(f"empty {e} run {i}: {empty[e][-1]}", file=sys.stderr, flush=True)
        for e in empty:
            result[f"{e}_empty"] = summarise(empty[e])
        baseline = result["memory_empty"]["cpu_us_per_record_median"]
        for e in engines:
            result[f"{e}_empty"]["state_cpu_us_per_record"] = round(result[f"{e}_empty"]["cpu_us_per_record_median"] - baseline, 1)
        if args.preload:
            templates: dict[str, Path] = {}
            for e in engines:
                where = templates[e] = tmp / f"template{suffix[e]}"
                store = open_engine(e, where, created)
                t0 = time.perf_counter()
                c0 = time.process_time()
                fill(store, args.preload, now, args.spread)
                result[f"{e}_fill_s"] = round(time.perf_counter() - t0, 1)
                if isinstance(store, RocksStore):
                    settle(store)
                    result[f"{e}_fill_settled_s"] = round(time.perf_counter() - t0, 1)
                result[f"{e}_fill_cpu_s"] = round(time.process_time() - c0, 1)
                store.close()
                result[f"{e}_filled_disk_mb"] = disk_mb(where)
                print(f"filled {e}: {result[f'{e}_fill_s']} s, {result[f'{e}_filled_disk_mb']} MB", file=sys.stderr, flush=True)
            filled: dict[str, list[dict[str, float]]] = {e: [] for e in engines}
            for i in range(args.repeat):
                for e in engines if i % 2 == 0 else engines[::-1]:
                    where = tmp / f"filled{i}{suffix[e]}"
                    copy(templates[e], where)
                    filled[e].append(measure(e, where, inputs, args.batch, now, created))
                    if args.expire and i == args.repeat - 1:
                        store = open_engine(e, where, created)
                        t0 = time.perf_counter()
                        store.expire(now + 8 * 86_400_000)
                        result[f"{e}_expire_all_s"] = round(time.perf_counter() - t0, 3)
                        store.close()
                    remove(where)
                    print(f"filled {e} run {i}: {filled[e][-1]}", file=sys.stderr, flush=True)
            for e in engines:
                result[f"{e}_filled"] = summarise(filled[e])
                result[f"{e}_filled"]["state_cpu_us_per_record"] = round(result[f"{e}_filled"]["cpu_us_per_record_median"] - baseline, 1)
                e_state = result[f"{e}_empty"]["state_us_per_record_median"]
                result[f"{e}_filled_over_empty_state"] = round(result[f"{e}_filled"]["state_us_per_record_median"] / e_state, 3)
    if "sqlite" in engines and "rocksdb" in engines:
        for mode in ("empty", "filled") if args.preload else ("empty",):
            s, r = result[f"sqlite_{mode}"], result[f"rocksdb_{mode}"]
            result[f"rocksdb_over_sqlite_state_{mode}"] = round(r["state_us_per_record_median"] / s["state_us_per_record_median"], 3)
            result[f"sqlite_minus_rocksdb_cpu_us_{mode}"] = round(s["cpu_us_per_record_median"] - r["cpu_us_per_record_median"], 1)
            # the runs of one repeat ran next to each other: their differences, less exposed to the machine's drift
            for field in ("state_us", "cpu_us"):
                pairs = zip(s[f"{field}_per_record_runs"], r[f"{field}_per_record_runs"], strict=True)
                diffs = [round(a - b, 1) for a, b in pairs]
                result[f"sqlite_minus_rocksdb_{field}_{mode}_paired"] = {"median": round(statistics.median(diffs), 1), "runs": diffs}
    result["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
