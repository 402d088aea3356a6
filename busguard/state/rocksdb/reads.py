"""The store's reads (store.py): one batch's snapshot from the bucketed
rows, and the one-off lookups, with the horizon rule of the package
docstring (a bucketed row expiring at or before `max(now, expired_to_ms)`
reads as absent). The state they read is set up and kept by RocksStore."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Final, cast

import msgspec
import rocksdict

from busguard.protocol.records import Coordinates, Decision, TaskEntry
from busguard.state.codecs import bitmap_int, run_decoder, task_decoder
from busguard.state.keys import KeySet
from busguard.state.rocksdb.db import scan
from busguard.state.rocksdb.layout import HEADS, NONCES, POLICY, QQ, RUNS, SPANS, TASKS, WINDOWS, Q, bucket, chain, partition, text
from busguard.state.snapshot import Snapshot, StoredHead, WindowState, spans_of
from busguard.state.sqlite.buckets import width_for
from busguard.state.sqlite.store import RUN_SPAN

head_decoder: Final = msgspec.msgpack.Decoder(StoredHead)
_SEQ_MAX: Final = b"\xff" * 8


class RocksReads:
    _db: rocksdict.Rdict
    _lock: threading.Lock
    #: per bucketed kind, its buckets (lo, hi), sorted
    _buckets: dict[bytes, list[tuple[int, int]]]
    _trusted_from: int | None
    _expired_to: int | None
    _horizon: int
    _held: dict[bytes, dict[bytes, tuple[bytes, int]]]
    _texts: dict[bytes, dict[tuple[str, str], bytes]]
    nonce_retention_ms: int
    task_retention_ms: int
    decision_retention_ms: int

    # ------------------------------------------------------------ reads

    def _scan(self, prefix: bytes, start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        return scan(self._db, prefix, start)

    def _multi(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return cast("list[bytes | None]", self._db.get(cast("list[str | int | float | bytes | bool]", list(keys))))

    def _width(self, kind: bytes) -> int:
        if kind == NONCES:
            return width_for(self.nonce_retention_ms)
        return width_for(self.task_retention_ms if kind == TASKS else self.decision_retention_ms)

    def _locate(self, kind: bytes, keys: Sequence[bytes]) -> Iterable[tuple[bytes, bytes, bytes]]:
        """(bucket prefix, key, value) of every row of `keys`, expired or not, in every bucket of `kind`."""
        if not keys:
            return
        for b in self._buckets[kind]:
            prefix = bucket(kind, *b)
            for k, v in zip(keys, self._multi([prefix + k for k in keys]), strict=True):
                if v is not None:
                    yield prefix, k, v

    def _runs(self, tp: bytes, lo: int, hi: int) -> Iterable[tuple[bytes, bytes]]:
        """(key, value) of every run that may hold a position in [lo, hi] of
        one partition, expired or not: last >= lo, last < hi + RUN_SPAN
        (a run spans less than RUN_SPAN), first <= hi."""
        for b in self._buckets[RUNS]:
            prefix = bucket(RUNS, *b) + tp
            n = len(prefix)
            for k, v in self._scan(prefix, Q.pack(lo)):
                last, first = QQ.unpack_from(k, n)
                if last >= hi + RUN_SPAN:
                    break
                if first <= hi:
                    yield k, v

    def _load(self, keys: KeySet, now_ms: int) -> Snapshot:
        snap = Snapshot(trusted_from=self._trusted_from)
        horizon = self._horizon = now_ms if self._expired_to is None else max(now_ms, self._expired_to)
        if keys.sources:
            wanted = set(keys.sources)
            for topic, part, lo, hi in spans_of(wanted):
                for _k, v in self._runs(partition(topic, part), lo, hi):
                    if Q.unpack_from(v)[0] > horizon:
                        for d in run_decoder.decode(v[12:]):
                            sk = (topic, part, d.source.offset)
                            if sk in wanted:
                                snap.decisions[sk] = d
        texts = {n: text(*n) for n in keys.nonces}
        by_key = {k: n for n, k in texts.items()}
        held: dict[bytes, tuple[bytes, int]] = {}
        self._held, self._texts = {NONCES: held, TASKS: {}}, {NONCES: texts, TASKS: {}}
        for b, k, v in self._locate(NONCES, list(by_key)):
            exp = Q.unpack_from(v)[0]
            held[k] = (b, exp)
            if exp > horizon:
                snap.nonces.add(by_key[k])
        windows = {WINDOWS + text(*w): w for w in keys.windows}
        for k, row in zip(windows, self._multi(list(windows)), strict=True):
            if row is not None:
                exp, top = QQ.unpack_from(row)
                if exp > now_ms:
                    snap.windows[windows[k]] = WindowState(top, bitmap_int(row[16:]))
        texts = self._texts[TASKS] = {t: text(*t) for t in keys.tasks}
        held = self._held[TASKS]
        for b, k, v in self._locate(TASKS, list(texts.values())):
            exp = Q.unpack_from(v)[0]
            held[k] = (b, exp)
            if exp > horizon:
                t = task_decoder.decode(v[8:])
                snap.tasks[(t.kind, t.task_id)] = t
        policy = {POLICY + text(*p): p for p in keys.policy}
        for k, row in zip(policy, self._multi(list(policy)), strict=True):
            if row is not None and Q.unpack_from(row)[0] > now_ms:
                snap.policy[policy[k]] = row[8:]
        if keys.chain is not None:
            snap.tip = self._tip(keys.chain)
        if snap.decisions:
            self._load_heads(snap, horizon)
        return snap

    def _tip(self, name: str) -> tuple[int, bytes] | None:
        """The chain's newest head no expiry pass has deleted (as SQLite's: expired or not)."""
        best: tuple[int, bytes] | None = None
        floor = self._floor()
        c = chain(name)
        for b in self._buckets[HEADS]:
            prefix = bucket(HEADS, *b) + c
            it = self._db.iter()
            it.seek_for_prev(prefix + _SEQ_MAX)
            while it.valid() and it.key()[: len(prefix)] == prefix:
                v = it.value()
                if Q.unpack_from(v)[0] > floor:
                    seq = Q.unpack_from(it.key(), len(prefix))[0]
                    if best is None or seq > best[0]:
                        best = (seq, head_decoder.decode(v[8:]).head)
                    break
                it.prev()
        return best

    def _floor(self) -> int:
        """Bucketed rows expiring at or before this were counted and forgotten
        by an expiry pass: they read as deleted until their bucket goes."""
        return -1 if self._expired_to is None else self._expired_to

    def _load_heads(self, snap: Snapshot, horizon: int) -> None:
        """The unexpired heads covering a position of `snap.decisions`, found by their spans."""
        wanted: set[bytes] = set()
        for topic, part, lo, hi in spans_of(snap.decisions):
            tp = partition(topic, part)
            for b in self._buckets[SPANS]:
                prefix = bucket(SPANS, *b) + tp
                n = len(prefix)
                for k, v in self._scan(prefix, Q.pack(lo)):  # spans whose highest offset is >= lo ...
                    if Q.unpack_from(k, n + 8)[0] <= hi and Q.unpack_from(v)[0] > horizon:  # ... and lowest <= hi
                        wanted.add(k[n + 16 :])
        for cs in sorted(wanted):
            for row in self._multi([bucket(HEADS, *b) + cs for b in self._buckets[HEADS]]):
                if row is not None and Q.unpack_from(row)[0] > horizon:
                    head = head_decoder.decode(row[8:])
                    if any(map(head.covers, snap.decisions)):
                        snap.heads.append(head)

    def decision_at(self, source: Coordinates) -> Decision | None:
        """The decision stored at `source`, expired or not (but not forgotten by an expiry pass)."""
        with self._lock:
            offset, floor = source.offset, self._floor()
            for _k, v in self._runs(partition(source.topic, source.partition), offset, offset):
                if Q.unpack_from(v)[0] <= floor:
                    continue
                for d in run_decoder.decode(v[12:]):
                    if d.source.offset == offset:
                        return d
            return None

    def task(self, kind: str, task_id: str, now_ms: int) -> TaskEntry | None:
        with self._lock:
            horizon = now_ms if self._expired_to is None else max(now_ms, self._expired_to)
            for _b, _k, v in self._locate(TASKS, [text(kind, task_id)]):
                if Q.unpack_from(v)[0] > horizon:
                    return task_decoder.decode(v[8:])
            return None
