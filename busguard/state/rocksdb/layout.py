"""Every key and value shape of the RocksDB store, in one place.

`!Q` is 8 bytes big-endian (so byte order is numeric order), `K` the
store's text key (state/sqlite/db.py `key`: length-prefixed parts, so two
different key tuples never give one string), `B` a bucket's `lo!Q hi!Q`:

    N B K                              -> exp!Q                 nonces
    T B K                              -> exp!Q task            tasks (msgpack TaskEntry)
    R B part last!Q first!Q            -> exp!Q n!I run         decision runs (msgpack list)
    H B chain seq!Q                    -> exp!Q head            batch seals (msgpack StoredHead)
    S B part hi!Q lo!Q chain seq!Q     -> exp!Q                 seal spans (a head's per-partition offsets)
    V K -> exp!Q top!Q bitmap          P K -> exp!Q value       session windows, policy rows
    X kind exp!Q K -> ''               windows and policy by expiry
    Z kind exp!Q   -> count!Q          bucketed entries live per expiry
    W K(topic, part) -> off!Q topic+part (msgpack)              watermarks
    C kind B -> ''                     the bucket catalog
    M name -> value                    schema, origin, the fence and expiry times

`part` is `K(topic, partition)` and a NUL (the partition's digits end at
it); `chain` is its UTF-8 bytes after their length (`!I`), so no chain's
keys sort inside another's.
"""

from __future__ import annotations

import struct
from typing import Final

from busguard.state.sqlite.db import key

Q: Final = struct.Struct("!Q")
QQ: Final = struct.Struct("!QQ")
QI: Final = struct.Struct("!QI")
_LEN: Final = struct.Struct("!I")

NONCES: Final = b"N"
TASKS: Final = b"T"
RUNS: Final = b"R"
HEADS: Final = b"H"
SPANS: Final = b"S"
#: kinds kept in expiry buckets, and of them those `expire` and `counts` count
BUCKETED: Final = (NONCES, TASKS, RUNS, HEADS, SPANS)
COUNTED: Final = (NONCES, TASKS, RUNS, HEADS)
WINDOWS: Final = b"V"
POLICY: Final = b"P"
BY_EXPIRY: Final = b"X"
COUNTS: Final = b"Z"
WATERMARKS: Final = b"W"
CATALOG: Final = b"C"
META: Final = b"M"

#: `M schema`: the layout's version; `M origin`: how the store began (`state init`, or created fenced)
SCHEMA: Final = "1"
GENESIS: Final = "genesis"
CREATED: Final = "created"
#: The META names every store busguard made has from its first write (directory.py
#: recognises a store an earlier busguard made, before the marker, by them).
META_NAMES: Final = (b"schema", b"created_at_ms", b"origin")


def text(*parts: object) -> bytes:
    return key(*parts).encode()


def bucket(kind: bytes, lo: int, hi: int) -> bytes:
    return kind + QQ.pack(lo, hi)


def partition(topic: str, part: int) -> bytes:
    return text(topic, part) + b"\x00"


def chain(name: str) -> bytes:
    raw = name.encode()
    return _LEN.pack(len(raw)) + raw


def by_expiry(kind: bytes, exp: int, k: bytes) -> bytes:
    return BY_EXPIRY + kind + Q.pack(exp) + k


def counter(kind: bytes, exp: int) -> bytes:
    return COUNTS + kind + Q.pack(exp)
