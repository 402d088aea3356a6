"""RocksDB store: the layout, buckets and counters of the package docstring
(busguard/state/rocksdb/__init__.py) and layout.py, with the rules of
state/writes.py, as SQLite's store keeps them (state/sqlite/store.py).

One process holds the store (RocksDB's LOCK file), so what SQLite re-reads
inside every transaction because another process may have changed it (the
fence, the last expiry pass, the bucket catalog) is read once at open and
kept in memory, changed only under this process's lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

import rocksdict

from busguard.protocol.records import Decision
from busguard.state.codecs import bitmap_bytes, encode, run_decoder
from busguard.state.keys import KeySet, Partition, SourceKey
from busguard.state.rocksdb.db import open_db, partition_decoder
from busguard.state.rocksdb.directory import StoreDirectoryRefused
from busguard.state.rocksdb.layout import (
    BUCKETED,
    BY_EXPIRY,
    CATALOG,
    COUNTED,
    COUNTS,
    CREATED,
    GENESIS,
    HEADS,
    META,
    NONCES,
    POLICY,
    QI,
    QQ,
    RUNS,
    SCHEMA,
    SPANS,
    TASKS,
    WATERMARKS,
    WINDOWS,
    Q,
    bucket,
    by_expiry,
    chain,
    counter,
    partition,
    text,
)
from busguard.state.rocksdb.reads import RocksReads
from busguard.state.sqlite.store import RUN_SPAN
from busguard.state.store import BatchFn, rearmed
from busguard.state.writes import BatchWrites

#: deletes per expiry write batch for windows and policy rows (as SQLite's EXPIRE_CHUNK)
EXPIRE_CHUNK: Final = 20_000
#: (kind, exp, change): a batch's change to the live entries of one expiry
Count = Callable[[bytes, int, int], None]


class RocksStore(RocksReads):
    def __init__(
        self,
        path: str | Path,
        *,
        now_ms: int,
        synchronous: str = "FULL",
        task_retention_ms: int = 7 * 86_400_000,
        decision_retention_ms: int = 7 * 86_400_000,
        nonce_retention_ms: int = 600_000,
        genesis: bool = False,
    ) -> None:
        """Open the store at directory `path`, creating it if it holds none.

        `genesis=True` only with `busguard state init`: it refuses a
        directory that already holds a store. `synchronous` "FULL" syncs the
        WAL before a batch returns; "NORMAL" leaves it to the OS (a batch
        survives `kill -9`, not a power loss)."""
        self.path = Path(path)
        self.task_retention_ms = task_retention_ms
        self.decision_retention_ms = decision_retention_ms
        self.nonce_retention_ms = nonce_retention_ms
        self._write_options = rocksdict.WriteOptions()
        self._write_options.sync = synchronous.upper() != "NORMAL"
        self._lock = threading.Lock()
        self._closed = False
        self._db = open_db(self.path)
        try:
            self._buckets = {k: [] for k in BUCKETED}
            for k, _ in self._scan(CATALOG):
                self._buckets[k[1:2]].append(QQ.unpack_from(k, 2))
            for found in self._buckets.values():
                found.sort()
            meta = {k[1:].decode(): v for k, v in self._scan(META)}
            self._created = "created_at_ms" not in meta
            if self._created:
                meta = {"created_at_ms": Q.pack(now_ms), "schema": SCHEMA.encode(), "origin": (GENESIS if genesis else CREATED).encode()}
                if not genesis:
                    meta["trusted_from_ms"] = Q.pack(now_ms)
                wb = rocksdict.WriteBatch(raw_mode=True)
                for name, value in meta.items():
                    wb.put(META + name.encode(), value)
                self._db.write(wb, self._write_options)
            elif genesis:
                raise FileExistsError(
                    f"{self.path}: already holds a state store (created at {Q.unpack(meta['created_at_ms'])[0]}); genesis is for a new one"
                )
            elif meta.get("schema") != SCHEMA.encode():
                raise StoreDirectoryRefused(self.path, f"a busguard state store of schema {meta.get('schema')!r}, not {SCHEMA}")
            self._created_at: int = Q.unpack(meta["created_at_ms"])[0]
            self.origin: str = meta["origin"].decode()
            self._trusted_from = _int(meta.get("trusted_from_ms"))
            self._expired_to = _int(meta.get("expired_to_ms"))
        except BaseException:
            self._db.close()
            raise
        self._horizon = 0  # the running batch's: bucketed rows with exp <= it read as absent
        #: per key kind, the (bucket prefix, exp) of every key the running batch looked up, and the
        #: text key of each key it looked up (so its writes do not build them again)
        self._held = {NONCES: {}, TASKS: {}}
        self._texts = {NONCES: {}, TASKS: {}}

    # ------------------------------------------------------------ the contract's small parts

    @property
    def created(self) -> bool:
        return self._created

    @property
    def created_at(self) -> int:
        return self._created_at

    def location(self) -> str | None:
        return str(self.path)

    @property
    def trusted_from(self) -> int | None:
        return self._trusted_from

    def rearm(self, now_ms: int) -> int:
        """Fence the store from `now_ms` (never earlier than it already is); durable."""
        with self._lock:
            t = rearmed(self._trusted_from, now_ms)
            self._db.put(META + b"trusted_from_ms", Q.pack(t), self._write_options)
            self._trusted_from = t
            return t

    def partition_watermarks(self) -> dict[Partition, int]:
        with self._lock:
            return {partition_decoder.decode(v[8:]): Q.unpack_from(v)[0] for _, v in self._scan(WATERMARKS)}

    def close(self) -> None:
        """Flush the memtable first: the next open then reads its files
        instead of replaying the WAL (a million rows' replay is seconds of
        CPU, and the flush and compactions it starts run into the first
        batches)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                try:
                    self._db.flush(True)
                finally:
                    self._db.close()

    # ------------------------------------------------------------ writes

    def run_batch(self, keys: KeySet, now_ms: int, fn: BatchFn) -> None:
        with self._lock:
            writes = fn(self._load(keys, now_ms))
            wb = rocksdict.WriteBatch(raw_mode=True)
            self._write(wb, writes)
            self._db.write(wb, self._write_options)

    def _bucket(self, wb: rocksdict.WriteBatch, kind: bytes, exp: int) -> bytes:
        """The key prefix of `kind`'s bucket for `exp`, catalogued (in this batch) if new."""
        width = self._width(kind)
        lo = exp - exp % width
        b = (lo, lo + width)
        found = self._buckets[kind]
        if b not in found:
            wb.put(CATALOG + bucket(kind, *b), b"")
            found.append(b)
            found.sort()
        return bucket(kind, *b)

    def _prefixes(self, wb: rocksdict.WriteBatch, kind: bytes) -> Callable[[int], bytes]:
        """`_bucket` for one batch's rows of `kind`, once per distinct expiry
        (a batch's rows share one), not once per row."""
        seen: dict[int, bytes] = {}

        def prefix(exp: int) -> bytes:
            found = seen.get(exp)
            if found is None:
                found = seen[exp] = self._bucket(wb, kind, exp)
            return found

        return prefix

    def _keyed(self, kind: bytes, keys: list[tuple[str, str]]) -> tuple[list[bytes], dict[bytes, tuple[bytes, int]]]:
        """The text key of each of `keys`, and where each is held now: what
        the load found, and for a key it did not look up, a look now."""
        texts, held = self._texts[kind], self._held[kind]
        out, unseen = [], []
        for t in keys:
            k = texts.get(t)
            if k is None:
                k = text(*t)
                unseen.append(k)
            out.append(k)
        for b, k, v in self._locate(kind, unseen):
            held[k] = (b, Q.unpack_from(v)[0])
        return out, held

    def _write(self, wb: rocksdict.WriteBatch, state: BatchWrites) -> None:
        #: (kind, exp) -> the change in its live entries
        counted: dict[tuple[bytes, int], int] = {}
        floor = self._floor()

        def count(kind: bytes, exp: int, n: int) -> None:
            if exp > floor:  # an entry at or before the last pass was counted by it (and its counter deleted)
                counted[(kind, exp)] = counted.get((kind, exp), 0) + n

        marks = state.watermarks()
        if marks:
            mkeys = [WATERMARKS + text(t, p) for t, p in marks]
            for mk, old, (where, off) in zip(mkeys, self._multi(mkeys), marks.items(), strict=True):
                if old is None or Q.unpack_from(old)[0] < off:
                    wb.put(mk, Q.pack(off) + encode(where))
        if state.decisions:
            self._write_decisions(wb, state.decisions, count)
        # Each key is held by one bucket of its kind (so it reads back as its
        # newest write): a row moving to another bucket leaves the old one.
        if state.nonces:
            nonces = list(state.nonces.values())
            ks, held = self._keyed(NONCES, [n.key for n in nonces])
            prefix_for = self._prefixes(wb, NONCES)
            for k, n in zip(ks, nonces, strict=True):
                exp, prefix, prior = n.expires_at, prefix_for(n.expires_at), held.get(k)
                if prior is not None:
                    if prior[0] != prefix:
                        wb.delete(prior[0] + k)
                    count(NONCES, prior[1], -1)
                wb.put(prefix + k, Q.pack(exp))
                count(NONCES, exp, 1)
        if state.tasks:
            tasks = list(state.tasks.values())
            ks, held = self._keyed(TASKS, [(t.kind, t.task_id) for t in tasks])
            prefix_for, retention = self._prefixes(wb, TASKS), self.task_retention_ms
            for k, t in zip(ks, tasks, strict=True):
                prior = held.get(k)
                if prior is not None and prior[1] > self._horizon:
                    continue  # insert-only: the first admission stays the witness
                exp = t.admitted_at + retention
                prefix = prefix_for(exp)
                if prior is not None:
                    if prior[0] != prefix:
                        wb.delete(prior[0] + k)
                    count(TASKS, prior[1], -1)
                wb.put(prefix + k, Q.pack(exp) + encode(t))
                count(TASKS, exp, 1)
        self._write_expiring(
            wb,
            WINDOWS,
            [
                (text(*w.key), w.expires_at, QQ.pack(w.expires_at, w.state.top) + bitmap_bytes(w.state.bitmap))
                for w in state.windows.values()
            ],
        )
        self._write_expiring(wb, POLICY, [(text(*p.key), p.expires_at, Q.pack(p.expires_at) + p.value) for p in state.policy.values()])
        seen: set[bytes] = set()
        for h in state.heads:
            exp = h.sealed_at + self.decision_retention_ms
            cs = chain(h.chain) + Q.pack(h.seq)
            taken = self._multi([bucket(HEADS, *b) + cs for b in self._buckets[HEADS]])
            if cs in seen or any(v is not None and Q.unpack_from(v)[0] > floor for v in taken):
                raise ValueError(f"batch seal chain {h.chain!r} already has a head {h.seq}: a chain never forks")
            seen.add(cs)
            wb.put(self._bucket(wb, HEADS, exp) + cs, Q.pack(exp) + encode(h))
            count(HEADS, exp, 1)
            spans = self._bucket(wb, SPANS, exp)
            for topic, part, lo, hi in h.spans:
                wb.put(spans + partition(topic, part) + QQ.pack(hi, lo) + cs, Q.pack(exp))
        if counted:
            zkeys = [counter(kind, exp) for kind, exp in counted]
            for zk, old, change in zip(zkeys, self._multi(zkeys), counted.values(), strict=True):
                total = (0 if old is None else Q.unpack(old)[0]) + change
                if total > 0:
                    wb.put(zk, Q.pack(total))
                else:
                    wb.delete(zk)

    def _write_expiring(self, wb: rocksdict.WriteBatch, kind: bytes, rows: list[tuple[bytes, int, bytes]]) -> None:
        """Windows or policy rows (key, exp, value), last write wins, each indexed by its expiry."""
        if not rows:
            return
        for (k, exp, value), old in zip(rows, self._multi([kind + k for k, _, _ in rows]), strict=True):
            if old is not None:
                was = Q.unpack_from(old)[0]
                if was != exp:
                    wb.delete(by_expiry(kind, was, k))
            wb.put(kind + k, value)
            wb.put(by_expiry(kind, exp, k), b"")

    def _write_decisions(self, wb: rocksdict.WriteBatch, decisions: dict[SourceKey, Decision], count: Count) -> None:
        """Runs as SQLite's (`RUN_SPAN`, one expiry each); the positions taken
        out of the runs that held them first, per partition at once (the
        batch's writes are not readable before it is written)."""
        by_part: dict[tuple[str, int], dict[int, list[tuple[int, Decision]]]] = {}
        for (topic, part, offset), d in decisions.items():
            by_part.setdefault((topic, part), {}).setdefault(d.decided_at + self.decision_retention_ms, []).append((offset, d))
        for (topic, part), groups in by_part.items():
            tp = partition(topic, part)
            mine = {o for items in groups.values() for o, _ in items}
            for k, v in list(self._runs(tp, min(mine), max(mine))):
                old = run_decoder.decode(v[12:])
                kept = [d for d in old if d.source.offset not in mine]
                if len(kept) < len(old):
                    exp = Q.unpack_from(v)[0]
                    wb.delete(k)
                    count(RUNS, exp, len(kept) - len(old))
                    if kept:
                        wb.put(k[:-16] + QQ.pack(kept[-1].source.offset, kept[0].source.offset), QI.pack(exp, len(kept)) + encode(kept))
            for exp, items in groups.items():
                items.sort(key=_offset)
                start = 0
                for i in range(1, len(items) + 1):
                    if i == len(items) or items[i][0] - items[start][0] >= RUN_SPAN:
                        run = items[start:i]
                        key = self._bucket(wb, RUNS, exp) + tp + QQ.pack(run[-1][0], run[0][0])
                        wb.put(key, QI.pack(exp, len(run)) + encode([d for _, d in run]))
                        count(RUNS, exp, len(run))
                        start = i

    # ------------------------------------------------------------ expiry, counts

    def expire(self, now_ms: int) -> int:
        """Forget what has expired by `now_ms`; returns how many entries (a
        run counts its decisions; a head's spans are not counted).

        Bucketed rows are counted from their per-expiry counters and go
        with their bucket: one `delete_range` per passed bucket, no row
        visited. Rows of a bucket still live that expire by `now_ms` stay
        until it passes, reading as absent: `expired_to_ms` records the
        pass, and every read takes `max(now, expired_to_ms)` as its horizon.
        That, the counters and the dropped buckets are one write; windows
        and policy rows, found through their expiry index, are then deleted
        in writes of `EXPIRE_CHUNK`."""
        with self._lock:
            before = 0 if self._expired_to is None else self._expired_to
            wb = rocksdict.WriteBatch(raw_mode=True)
            total = 0
            for kind in COUNTED:
                for k, v in self._scan(COUNTS + kind):
                    if Q.unpack_from(k, 2)[0] > now_ms:
                        break
                    total += Q.unpack(v)[0]
                    wb.delete(k)
            passed = {kind: [b for b in found if b[1] <= now_ms] for kind, found in self._buckets.items()}
            for kind, gone in passed.items():
                for lo, hi in gone:
                    wb.delete_range(bucket(kind, lo, hi), bucket(kind, lo, hi + 1))
                    wb.delete(CATALOG + bucket(kind, lo, hi))
            if now_ms > before:
                wb.put(META + b"expired_to_ms", Q.pack(now_ms))
            self._db.write(wb, self._write_options)
            if now_ms > before:
                self._expired_to = now_ms
            for kind, gone in passed.items():
                self._buckets[kind] = [b for b in self._buckets[kind] if b not in gone]
            for kind in (WINDOWS, POLICY):
                total += self._expire_rows(kind, now_ms)
            return total

    def _expire_rows(self, kind: bytes, now_ms: int) -> int:
        n = 0
        while True:
            wb = rocksdict.WriteBatch(raw_mode=True)
            chunk = 0
            prefix = BY_EXPIRY + kind
            for k, _ in self._scan(prefix):
                if Q.unpack_from(k, 2)[0] > now_ms or chunk == EXPIRE_CHUNK:
                    break
                wb.delete(k)
                wb.delete(kind + k[10:])
                chunk += 1
            if chunk:
                self._db.write(wb, self._write_options)
            n += chunk
            if chunk < EXPIRE_CHUNK:
                return n

    def counts(self) -> dict[str, int]:
        """Entries held, as if every expiry pass had deleted what it expired."""
        with self._lock:
            live = {kind: sum(Q.unpack(v)[0] for _, v in self._scan(COUNTS + kind)) for kind in (NONCES, TASKS, RUNS)}
            return {
                "decisions": live[RUNS],
                "nonces": live[NONCES],
                "windows": sum(1 for _ in self._scan(WINDOWS)),
                "tasks": live[TASKS],
                "policy": sum(1 for _ in self._scan(POLICY)),
            }


def _int(raw: bytes | None) -> int | None:
    return None if raw is None else int(Q.unpack(raw)[0])


def _offset(item: tuple[int, Decision]) -> int:
    return item[0]
