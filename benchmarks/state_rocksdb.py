"""Would RocksDB make busguard's per-batch state transaction cheaper than SQLite?

Issue 20, lever 2 ("state laid out for keys that expire") names an LSM engine
built for random-key inserts, RocksDB through `rocksdict` (what Quix Streams
keeps its state in), as a single-host alternative to the SQLite store. This
benchmark answers that with numbers before anyone builds a backend: the same
batch workload as benchmarks/state_postgres.py (its records, keys, batches
and `admit_batch` with the signature step skipped) against

- `sqlite`: the real `SqliteStore.run_batch` (schema 4, time-bucketed
  nonce and task tables, `synchronous = FULL`, the guard's checkpoint
  thread as `busguard run` opens it: `checkpoint_every_s=1.0`), and
- `rocksdb`: `RocksBatchStore` below, a minimal store doing the same reads
  and writes in RocksDB, not a backend (no reconcile store, no CLI, no
  schema upgrades, one process).

Equal durability: each batch's writes are one `WriteBatch`, written with
`WriteOptions.sync = True` and the WAL on, so `write` returns only after
the WAL is synced (fdatasync, `use_fsync = false`: the call SQLite's
`synchronous = FULL` commit makes on Linux, one per commit), and a
WriteBatch is applied atomically, on recovery too
(`wal_recovery_mode` left at point-in-time). SQLite's `BEGIN IMMEDIATE` also
serialises several processes on one file; RocksDB's LOCK file admits one
process, so this store serialises batches with a lock in its process only:
the "several guards sharing one file" shape of docs/operations.md section 1
has no RocksDB equivalent.

Layout (one default column family, raw bytes keys; `!Q` is 8 bytes
big-endian, `K` the store's text key, state/sqlite/db.py `key`):

    N  lo!Q K                  -> exp!Q                   nonces, by expiry bucket
    T  lo!Q K                  -> exp!Q task msgpack       tasks, by expiry bucket
    R  lo!Q K(topic,part) last!Q first!Q -> exp!Q run msgpack   decision runs
    H  lo!Q chain NUL seq!Q    -> exp!Q head msgpack       batch seals
    S  lo!Q K(topic,part) hi!Q lo!Q chain NUL seq!Q -> exp!Q    seal spans
    V  K -> exp!Q top!Q bitmap       W  K -> offset!Q       M  name -> value
    C  kind lo!Q -> hi!Q            the bucket catalog

Expiry is by time-bucket key prefix, as in SQLite's schema 4: a row goes to
the bucket its expiry falls in (`lo = exp - exp % width`, the same widths:
buckets.width_for), and `expire` drops every passed bucket with one
`delete_range` (the tombstone is one record; compaction reclaims the
space later). Not a TTL database or a compaction filter: RocksDB's TTL is
one age per database from the write time, while a busguard row carries its
own expiry (a task's from its admission, a seal's from its batch), and
rocksdict has no Python compaction filter. A lookup probes every live
bucket of its kind (one `multi_get` each; bloom filters answer most
misses), as SQLite's probes every bucket table. Session windows and policy
rows are few (one per session, per policy key) and expire by a scan.

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
after the check below, so including its 1 000 records); for RocksDB also the
part of each batch spent reading (`read_us`), building the WriteBatch
(`build_us`) and in the synced write (`write_us`). Both on an empty
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
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any, Final, cast

import msgspec
import rocksdict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.preload import preload  # noqa: E402
from benchmarks.state_postgres import build, registry, run, skip_verify  # noqa: E402
from busguard.admission.batch import Input, admit_batch  # noqa: E402
from busguard.admission.types import AdmissionPolicy  # noqa: E402
from busguard.protocol.records import Coordinates, Decision  # noqa: E402
from busguard.state.codecs import bitmap_bytes, bitmap_int, encode, run_decoder, task_decoder  # noqa: E402
from busguard.state.keys import KeySet, SourceKey  # noqa: E402
from busguard.state.memory.store import MemoryStore  # noqa: E402
from busguard.state.snapshot import Snapshot, StoredHead, WindowState, spans_of  # noqa: E402
from busguard.state.sqlite.buckets import width_for  # noqa: E402
from busguard.state.sqlite.db import key  # noqa: E402
from busguard.state.sqlite.store import RUN_SPAN, SqliteStore  # noqa: E402
from busguard.state.store import BatchFn  # noqa: E402
from busguard.state.writes import BatchWrites  # noqa: E402

Q: Final = struct.Struct("!Q")
QQ: Final = struct.Struct("!QQ")
head_decoder: Final = msgspec.msgpack.Decoder(StoredHead)
#: the kinds kept in expiry buckets, by key prefix
BUCKETED: Final = (b"N", b"T", b"R", b"H", b"S")
SYNCED: Final = rocksdict.WriteOptions()
SYNCED.sync = True  # the WAL is synced before write() returns: synchronous = FULL's promise


def rocks_options() -> rocksdict.Options:
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_write_buffer_size(64 * 2**20)
    opts.set_max_write_buffer_number(3)
    opts.set_target_file_size_base(64 * 2**20)
    opts.set_use_fsync(False)  # fdatasync, as SQLite's commit on Linux (strace shows it)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(rocksdict.Cache(64 * 2**20))
    table.set_bloom_filter(10, False)  # a full filter per SST (Quix passes True, the legacy flag)
    opts.set_block_based_table_factory(table)
    opts.set_compression_type(rocksdict.DBCompressionType.lz4())
    opts.set_max_total_wal_size(128 * 2**20)
    return opts


def _multi(db: rocksdict.Rdict, keys: Sequence[bytes]) -> list[bytes | None]:
    """One multi_get (rocksdict's `get` of a list)."""
    return cast("list[bytes | None]", db.get(cast("list[str | int | float | bytes | bool]", list(keys))))


def _tp(topic: str, part: int) -> bytes:
    return key(topic, part).encode() + b"\x00"


class RocksBatchStore:
    """The reads and writes of `SqliteStore.run_batch` (state/writes.py's
    rules) in one RocksDB, for this benchmark only: see the module docstring."""

    def __init__(
        self,
        path: Path,
        *,
        now_ms: int,
        task_retention_ms: int = 7 * 86_400_000,
        decision_retention_ms: int = 7 * 86_400_000,
        nonce_retention_ms: int = 600_000,
    ) -> None:
        self.path = path
        self.task_retention_ms = task_retention_ms
        self.decision_retention_ms = decision_retention_ms
        options = rocks_options()
        # the default family named with its options: without, rocksdict reopens an
        # existing store with default table options (no bloom filter, no block cache)
        self._db = rocksdict.Rdict(str(path), options, column_families={"default": options})
        self._lock = threading.Lock()
        #: seconds spent by run_batch: reading the snapshot, building the WriteBatch, writing it (synced)
        self.spent = {"read": 0.0, "build": 0.0, "write": 0.0}
        self._horizon = 0  # the running batch's: rows with exp <= it read as absent
        #: per bucketed kind, the (bucket lo, exp) of every key the running batch looked up, and the keys it looked up
        self._held: dict[bytes, dict[bytes, tuple[int, int]]] = {b"N": {}, b"T": {}}
        self._looked: dict[bytes, set[bytes]] = {b"N": set(), b"T": set()}
        self._width = {
            b"N": width_for(nonce_retention_ms),
            b"T": width_for(task_retention_ms),
            b"R": width_for(decision_retention_ms),
            b"H": width_for(decision_retention_ms),
            b"S": width_for(decision_retention_ms),
        }
        #: per bucketed kind, the `lo` of every bucket it has (the C rows, read once: one process)
        self._buckets: dict[bytes, list[int]] = {k: [] for k in BUCKETED}
        it = self._db.iter()
        it.seek(b"C")
        while it.valid() and it.key()[:1] == b"C":
            k = it.key()
            self._buckets[k[1:2]].append(Q.unpack_from(k, 2)[0])
            it.next()
        for los in self._buckets.values():
            los.sort()
        if self._db.get(b"Mcreated_at_ms") is None:
            wb = rocksdict.WriteBatch(raw_mode=True)
            wb.put(b"Mcreated_at_ms", Q.pack(now_ms))
            wb.put(b"Mtrusted_from_ms", Q.pack(now_ms))
            self._db.write(wb, SYNCED)

    # ------------------------------------------------------------ reads

    def _locate(self, kind: bytes, keys: Sequence[bytes]) -> Iterable[tuple[int, bytes, bytes]]:
        """(bucket lo, key, value) of every row of `keys`, expired or not, in every bucket of `kind`."""
        if not keys:
            return
        for lo in self._buckets[kind]:
            prefix = kind + Q.pack(lo)
            for k, v in zip(keys, _multi(self._db, [prefix + k for k in keys]), strict=True):
                if v is not None:
                    yield lo, k, v

    def _runs(self, it: Any, lo_b: int, tp: bytes, lo: int, hi: int) -> Iterable[tuple[bytes, bytes]]:
        """(key, value) of the runs of bucket `lo_b` that may hold a position in [lo, hi]
        of one partition (SQLite's `_RUNS_IN`: last >= lo, last < hi + RUN_SPAN, first <= hi)."""
        prefix = b"R" + Q.pack(lo_b) + tp
        n = len(prefix)
        it.seek(prefix + Q.pack(lo))
        while it.valid():
            k = it.key()
            if k[:n] != prefix:
                break
            last, first = QQ.unpack_from(k, n)
            if last >= hi + RUN_SPAN:
                break
            if first <= hi:
                yield k, it.value()
            it.next()

    def _load(self, keys: KeySet, now_ms: int) -> Snapshot:
        db = self._db
        trusted, expired = _multi(db, [b"Mtrusted_from_ms", b"Mexpired_to_ms"])
        snap = Snapshot(trusted_from=None if trusted is None else Q.unpack(trusted)[0])
        horizon = now_ms if expired is None else max(now_ms, Q.unpack(expired)[0])
        self._horizon = horizon
        if keys.sources:
            wanted = set(keys.sources)
            it = db.iter()
            for topic, part, lo, hi in spans_of(wanted):
                tp = _tp(topic, part)
                for lo_b in self._buckets[b"R"]:
                    for _k, v in self._runs(it, lo_b, tp, lo, hi):
                        if Q.unpack_from(v)[0] > now_ms:
                            for d in run_decoder.decode(v[8:]):
                                sk = (topic, part, d.source.offset)
                                if sk in wanted:
                                    snap.decisions[sk] = d
            del it
        by_key = {key(*n).encode(): n for n in keys.nonces}
        self._held = {b"N": {}, b"T": {}}
        self._looked = {b"N": set(by_key), b"T": set()}
        for lo, k, v in self._locate(b"N", list(by_key)):
            exp = Q.unpack_from(v)[0]
            self._held[b"N"][k] = (lo, exp)
            if exp > horizon:
                snap.nonces.add(by_key[k])
        wkeys = {b"V" + key(*w).encode(): w for w in keys.windows}
        if wkeys:
            for k, row in zip(wkeys, _multi(db, list(wkeys)), strict=True):
                if row is not None:
                    exp, top = QQ.unpack_from(row)
                    if exp > now_ms:
                        snap.windows[wkeys[k]] = WindowState(top, bitmap_int(row[16:]))
        task_keys = [key(*t).encode() for t in keys.tasks]
        self._looked[b"T"] = set(task_keys)
        for lo, k, v in self._locate(b"T", task_keys):
            exp = Q.unpack_from(v)[0]
            self._held[b"T"][k] = (lo, exp)
            if exp > horizon:
                t = task_decoder.decode(v[8:])
                snap.tasks[(t.kind, t.task_id)] = t
        pkeys = {b"P" + key(*p).encode(): p for p in keys.policy}
        if pkeys:
            for k, row in zip(pkeys, _multi(db, list(pkeys)), strict=True):
                if row is not None and Q.unpack_from(row)[0] > now_ms:
                    snap.policy[pkeys[k]] = row[8:]
        self._load_heads(snap, keys.chain, now_ms)
        return snap

    def _load_heads(self, snap: Snapshot, chain: str | None, now_ms: int) -> None:
        db = self._db
        if chain is not None:
            # the tip: the highest seq of the chain in any bucket (expired or not, as SQLite's)
            best: tuple[int, bytes] | None = None
            it = db.iter()
            c = chain.encode() + b"\x00"
            for lo_b in self._buckets[b"H"]:
                prefix = b"H" + Q.pack(lo_b) + c
                it.seek_for_prev(prefix + b"\xff" * 8)
                if it.valid() and it.key()[: len(prefix)] == prefix:
                    seq = Q.unpack_from(it.key(), len(prefix))[0]
                    if best is None or seq > best[0]:
                        best = (seq, head_decoder.decode(it.value()[8:]).head)
            snap.tip = best
            del it
        if not snap.decisions:
            return
        wanted: set[bytes] = set()
        it = db.iter()
        for topic, part, lo, hi in spans_of(snap.decisions):
            tp = _tp(topic, part)
            for lo_b in self._buckets[b"S"]:
                prefix = b"S" + Q.pack(lo_b) + tp
                n = len(prefix)
                it.seek(prefix + Q.pack(lo))  # spans with hi >= lo ...
                while it.valid() and it.key()[:n] == prefix:
                    k = it.key()
                    if Q.unpack_from(k, n + 8)[0] <= hi and Q.unpack_from(it.value())[0] > now_ms:  # ... and lo <= hi
                        wanted.add(k[n + 16 :])
                    it.next()
        del it
        for cs in sorted(wanted):
            for lo_b in self._buckets[b"H"]:
                v = db.get(b"H" + Q.pack(lo_b) + cs)
                if v is not None and Q.unpack_from(v)[0] > now_ms:
                    head = head_decoder.decode(v[8:])
                    if any(map(head.covers, snap.decisions)):
                        snap.heads.append(head)

    # ------------------------------------------------------------ writes

    def _bucket(self, wb: rocksdict.WriteBatch, kind: bytes, exp: int) -> bytes:
        """The key prefix of `kind`'s bucket for `exp`, catalogued (in this batch) if new."""
        width = self._width[kind]
        lo = exp - exp % width
        los = self._buckets[kind]
        if lo not in los:
            wb.put(b"C" + kind + Q.pack(lo), Q.pack(lo + width))
            los.append(lo)
            los.sort()
        return kind + Q.pack(lo)

    def _prior(self, kind: bytes, keys: list[bytes]) -> dict[bytes, tuple[int, int]]:
        held, looked = self._held[kind], self._looked[kind]
        unseen = [k for k in keys if k not in looked]
        for lo, k, v in self._locate(kind, unseen):
            held[k] = (lo, Q.unpack_from(v)[0])
        return held

    def _write(self, wb: rocksdict.WriteBatch, state: BatchWrites, now_ms: int) -> None:
        db = self._db
        marks = state.watermarks()
        if marks:
            mkeys = [b"W" + key(t, p).encode() for t, p in marks]
            for mk, old, off in zip(mkeys, _multi(db, mkeys), marks.values(), strict=True):
                if old is None or Q.unpack(old)[0] < off:
                    wb.put(mk, Q.pack(off))
        if state.decisions:
            self._write_decisions(wb, state.decisions)
        if state.nonces:
            rows = [(key(*n.key).encode(), n.expires_at) for n in state.nonces.values()]
            held = self._prior(b"N", [k for k, _ in rows])
            for k, exp in rows:
                prefix = self._bucket(wb, b"N", exp)
                prior = held.get(k)
                if prior is not None and b"N" + Q.pack(prior[0]) != prefix:
                    wb.delete(b"N" + Q.pack(prior[0]) + k)
                wb.put(prefix + k, Q.pack(exp))
        for w in state.windows.values():
            wb.put(b"V" + key(*w.key).encode(), QQ.pack(w.expires_at, w.state.top) + bitmap_bytes(w.state.bitmap))
        if state.tasks:
            keyed = [(key(t.kind, t.task_id).encode(), t) for t in state.tasks.values()]
            held = self._prior(b"T", [k for k, _ in keyed])
            for k, t in keyed:
                prior = held.get(k)
                if prior is not None and prior[1] > self._horizon:
                    continue  # insert-only: the first admission stays the witness
                exp = t.admitted_at + self.task_retention_ms
                prefix = self._bucket(wb, b"T", exp)
                if prior is not None and b"T" + Q.pack(prior[0]) != prefix:
                    wb.delete(b"T" + Q.pack(prior[0]) + k)
                wb.put(prefix + k, Q.pack(exp) + encode(t))
        for p in state.policy.values():
            wb.put(b"P" + key(*p.key).encode(), Q.pack(p.expires_at) + p.value)
        for h in state.heads:
            exp = h.sealed_at + self.decision_retention_ms
            cs = h.chain.encode() + b"\x00" + Q.pack(h.seq)
            if any(v is not None for v in _multi(db, [b"H" + Q.pack(lo) + cs for lo in self._buckets[b"H"]])):
                raise ValueError(f"batch seal chain {h.chain!r} already has a head {h.seq}: a chain never forks")
            wb.put(self._bucket(wb, b"H", exp) + cs, Q.pack(exp) + encode(h))
            spans = self._bucket(wb, b"S", exp)
            for topic, part, lo, hi in h.spans:
                wb.put(spans + _tp(topic, part) + QQ.pack(hi, lo) + cs, Q.pack(exp))

    def _write_decisions(self, wb: rocksdict.WriteBatch, decisions: dict[SourceKey, Decision]) -> None:
        groups: dict[tuple[str, int, int], list[tuple[int, Decision]]] = {}
        for (topic, partition, offset), d in decisions.items():
            groups.setdefault((topic, partition, d.decided_at + self.decision_retention_ms), []).append((offset, d))
        it = self._db.iter()
        for (topic, partition, exp), items in groups.items():
            items.sort(key=_offset)
            start = 0
            for i in range(1, len(items) + 1):
                if i == len(items) or items[i][0] - items[start][0] >= RUN_SPAN:
                    self._write_run(wb, it, topic, partition, exp, items[start:i])
                    start = i
        del it

    def _write_run(
        self, wb: rocksdict.WriteBatch, it: Any, topic: str, partition: int, exp: int, items: list[tuple[int, Decision]]
    ) -> None:
        tp = _tp(topic, partition)
        first, last = items[0][0], items[-1][0]
        # the newest decision at a position wins: take these positions out of any run holding them
        held = [(k, v) for lo_b in self._buckets[b"R"] for k, v in self._runs(it, lo_b, tp, first, last)]
        mine = {o for o, _ in items} if held else set()
        for k, v in held:
            old = run_decoder.decode(v[8:])
            kept = [d for d in old if d.source.offset not in mine]
            if len(kept) < len(old):
                wb.delete(k)
                if kept:
                    prefix = k[:-16]
                    wb.put(prefix + QQ.pack(kept[-1].source.offset, kept[0].source.offset), v[:8] + encode(kept))
        prefix = self._bucket(wb, b"R", exp) + tp
        wb.put(prefix + QQ.pack(last, first), Q.pack(exp) + encode([d for _, d in items]))

    # ------------------------------------------------------------ the contract's batch

    def run_batch(self, keys: KeySet, now_ms: int, fn: BatchFn) -> None:
        with self._lock:
            t0 = time.perf_counter()
            snap = self._load(keys, now_ms)
            t1 = time.perf_counter()
            writes = fn(snap)
            t2 = time.perf_counter()
            wb = rocksdict.WriteBatch(raw_mode=True)
            self._write(wb, writes, now_ms)
            t3 = time.perf_counter()
            self._db.write(wb, SYNCED)
            t4 = time.perf_counter()
            spent = self.spent
            spent["read"] += t1 - t0
            spent["build"] += t3 - t2
            spent["write"] += t4 - t3

    def expire(self, now_ms: int) -> int:
        """Drop every passed bucket with one delete_range each, in one synced
        WriteBatch; windows and policy rows by a scan. Returns the buckets and
        rows dropped (a bucket's rows are not counted: nothing visits them)."""
        with self._lock:
            wb = rocksdict.WriteBatch(raw_mode=True)
            dropped = 0
            for kind, los in self._buckets.items():
                for lo in [lo for lo in los if lo + self._width[kind] <= now_ms]:
                    wb.delete_range(kind + Q.pack(lo), kind + Q.pack(lo + 1))
                    wb.delete(b"C" + kind + Q.pack(lo))
                    los.remove(lo)
                    dropped += 1
            for prefix in (b"V", b"P"):
                it = self._db.iter()
                it.seek(prefix)
                while it.valid() and it.key()[:1] == prefix:
                    if Q.unpack_from(it.value())[0] <= now_ms:
                        wb.delete(it.key())
                        dropped += 1
                    it.next()
                del it
            wb.put(b"Mexpired_to_ms", Q.pack(now_ms))
            self._db.write(wb, SYNCED)
            return dropped

    def settle(self) -> None:
        """Flush the memtable and wait for background compaction to finish
        (after a fill, so the measured runs do not pay for the fill's)."""
        self._db.flush(True)
        while (self._db.property_int_value("rocksdb.compaction-pending") or 0) or (
            self._db.property_int_value("rocksdb.num-running-compactions") or 0
        ):
            time.sleep(0.2)

    def close(self) -> None:
        self._db.close()


def _offset(item: tuple[int, Decision]) -> int:
    return item[0]


# --------------------------------------------------------------------------- the runs

Store = Any  # SqliteStore, RocksBatchStore or MemoryStore: each has run_batch and close


def open_store(engine: str, where: Path, created: int) -> Store:
    if engine == "sqlite":
        return SqliteStore(where, now_ms=created, synchronous="FULL", checkpoint_every_s=1.0)
    if engine == "memory":
        return MemoryStore(created)  # the baseline: admission's own CPU, next to nothing for state
    return RocksBatchStore(where, now_ms=created)


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
    store = open_store(engine, where, created)
    closed = False
    try:
        c0 = time.process_time()
        samples, wall = run(store, inputs, batch, now)
        cpu = time.process_time() - c0
        spent = dict(store.spent) if isinstance(store, RocksBatchStore) else {}
        first = inputs[:batch]
        check(store, first, stored_decisions(store, first), now)
        # the work the run left behind: RocksDB's memtable flush and the
        # compactions it starts, SQLite's closing checkpoint
        c0 = time.process_time()
        if isinstance(store, RocksBatchStore):
            store.settle()
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
        **{f"{part}_us": seconds / len(inputs) * 1e6 for part, seconds in spent.items()},
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
                store = open_store(e, where, created)
                t0 = time.perf_counter()
                c0 = time.process_time()
                fill(store, args.preload, now, args.spread)
                result[f"{e}_fill_s"] = round(time.perf_counter() - t0, 1)
                if isinstance(store, RocksBatchStore):
                    store.settle()
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
                        store = open_store(e, where, created)
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
