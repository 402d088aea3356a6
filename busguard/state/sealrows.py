"""Batch seals (state/snapshot.py `StoredHead`) in the SQLite store: two tables
of their own, kept apart from the decisions table so either can change alone.

    seal_heads(chain, seq) -> head, seal, leaves, spans, sealed_at, exp
    seal_spans(topic, part, lo, hi) -> chain, seq, exp

A head is written once (a plain INSERT: a second head for one (chain, seq)
fails the batch instead of forking the chain). `seal_spans` holds, per input
partition a head covers, its lowest and highest offset: a re-delivered
record's head is found by its position, without a row per decision. Both
expire with the decisions (`sealed_at` + decision retention). The tables are
created if missing, so an existing store simply gains them; the schema
version does not change.

The spans are also kept, msgpack-encoded, in the head's row, so a loaded
head is whole without a second read.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Final

import msgspec

from busguard.state.snapshot import Snapshot, StoredHead, spans_of

SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS seal_heads(chain TEXT NOT NULL, seq INTEGER NOT NULL, head BLOB NOT NULL, seal BLOB NOT NULL,"
    " leaves BLOB NOT NULL, spans BLOB NOT NULL, sealed_at INTEGER NOT NULL, exp INTEGER NOT NULL, UNIQUE (chain, seq))",
    "CREATE TABLE IF NOT EXISTS seal_spans(topic TEXT NOT NULL, part INTEGER NOT NULL, lo INTEGER NOT NULL, hi INTEGER NOT NULL,"
    " chain TEXT NOT NULL, seq INTEGER NOT NULL, exp INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS seal_spans_at ON seal_spans(topic, part, hi)",
    "CREATE INDEX IF NOT EXISTS seal_heads_exp ON seal_heads(exp)",
    "CREATE INDEX IF NOT EXISTS seal_spans_exp ON seal_spans(exp)",
)
TABLES: Final = ("seal_heads", "seal_spans")

encode_spans: Final = msgspec.msgpack.Encoder().encode
decode_spans: Final = msgspec.msgpack.Decoder(list[tuple[str, int, int, int]]).decode


def create(db: sqlite3.Connection) -> None:
    for statement in SCHEMA:
        db.execute(statement)


def load(db: sqlite3.Connection, snap: Snapshot, chain: str | None, now_ms: int) -> None:
    """The chain's tip and the heads covering the snapshot's decisions, into `snap`."""
    if chain is not None:
        row = db.execute("SELECT seq, head FROM seal_heads WHERE chain = ? ORDER BY seq DESC LIMIT 1", (chain,)).fetchone()
        snap.tip = None if row is None else (int(row[0]), bytes(row[1]))
    if not snap.decisions:
        return
    wanted: set[tuple[str, int]] = set()
    for topic, part, lo, hi in spans_of(snap.decisions):
        wanted.update(
            db.execute(
                "SELECT chain, seq FROM seal_spans WHERE topic = ? AND part = ? AND hi >= ? AND lo <= ? AND exp > ?",
                (topic, part, lo, hi, now_ms),
            )
        )
    for c, seq in sorted(wanted):
        row = db.execute(
            "SELECT head, seal, leaves, spans, sealed_at FROM seal_heads WHERE chain = ? AND seq = ? AND exp > ?", (c, seq, now_ms)
        ).fetchone()
        if row is not None:
            head = StoredHead(c, seq, bytes(row[0]), bytes(row[1]), bytes(row[2]), decode_spans(row[3]), int(row[4]))
            if any(map(head.covers, snap.decisions)):
                snap.heads.append(head)


def write(db: sqlite3.Connection, heads: Iterable[StoredHead], retention_ms: int) -> None:
    for h in heads:
        exp = h.sealed_at + retention_ms
        db.execute(
            "INSERT INTO seal_heads VALUES (?,?,?,?,?,?,?,?)",
            (h.chain, h.seq, h.head, h.seal, h.leaves, encode_spans(h.spans), h.sealed_at, exp),
        )
        db.executemany("INSERT INTO seal_spans VALUES (?,?,?,?,?,?,?)", [(t, p, lo, hi, h.chain, h.seq, exp) for t, p, lo, hi in h.spans])
