"""Schema upgrades of the SQLite store, run in place on open, in the opening
transaction (state/sqlite/store.py calls them in order).

Upgrades run in place on open, in the opening transaction. Schema 1 (no
fence columns, no watermarks): origin `created`, fenced from its creation as
before, watermarks rebuilt from the decisions it still holds; then as schema
2. Schema 2 (a `decisions` row per position): every unexpired decision
becomes a one-decision run with its expiry, bytes unchanged, and the table
is dropped; they age out as before, and new batches write whole runs.
Schema 3 (one `nonces` and one `tasks` table, each with an `exp` index):
every unexpired row moves, bytes unchanged, into its bucket's table, and
the old tables are dropped.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, Final

from busguard.state.sqlite.buckets import Catalog
from busguard.state.sqlite.db import key

#: The schema these steps end at (the store's SCHEMA_VERSION).
SCHEMA_VERSION: Final = 4
CREATED: Final = "created"


def from_1(db: sqlite3.Connection, meta: dict[str, str]) -> dict[str, str]:
    marks: dict[tuple[str, int], int] = {}
    for (k,) in db.execute("SELECT k FROM decisions"):
        topic, partition, offset = _source_of(k)
        if marks.get((topic, partition), -1) < offset:
            marks[(topic, partition)] = offset
    db.executemany("INSERT INTO watermarks VALUES (?,?,?,?)", [(key(t, p), t, p, o) for (t, p), o in marks.items()])
    meta = {**meta, "schema": "2", "origin": CREATED, "trusted_from_ms": meta["created_at_ms"]}
    db.executemany("INSERT OR REPLACE INTO meta VALUES(?, ?)", [(k, meta[k]) for k in ("schema", "origin", "trusted_from_ms")])
    return meta


def from_2(db: sqlite3.Connection, meta: dict[str, str], now_ms: int) -> dict[str, str]:
    """Each unexpired decision row becomes a run of one, its bytes kept as
    they are (a one-element msgpack array around them); expired rows read
    as absent already and are dropped with the table."""
    rows = db.execute("SELECT k, body, exp FROM decisions WHERE exp > ?", (now_ms,))
    while chunk := rows.fetchmany(1000):
        runs = []
        for k, body, exp in chunk:
            topic, partition, offset = _source_of(k)
            runs.append((topic, partition, offset, offset, 1, exp, b"\x91" + body))
        db.executemany("INSERT INTO decision_runs(topic, part, first, last, n, exp, body) VALUES (?,?,?,?,?,?,?)", runs)
    db.execute("DROP TABLE decisions")
    db.execute("INSERT OR REPLACE INTO meta VALUES('schema', '3')")
    return {**meta, "schema": "3"}


def from_3(db: sqlite3.Connection, meta: dict[str, str], now_ms: int, buckets: Catalog, width_of: Callable[[str], int]) -> dict[str, str]:
    """Every unexpired nonce and task moves, bytes unchanged, into the
    table of its expiry's bucket; the single tables and their `exp`
    indexes are dropped, and expired rows with them (they read as
    absent already)."""
    buckets.refresh(db)
    present = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name IN ('nonces', 'tasks')")}
    for kind, columns, width in (("nonces", "k, exp", width_of("nonces")), ("tasks", "k, body, exp", width_of("tasks"))):
        if kind not in present:
            continue
        marks = ",".join("?" * len(columns.split(",")))
        rows = db.execute(f"SELECT {columns} FROM {kind} WHERE exp > ?", (now_ms,))
        while chunk := rows.fetchmany(10_000):
            by_table: dict[str, list[tuple[Any, ...]]] = {}
            for row in chunk:
                by_table.setdefault(buckets.table_for(db, kind, row[-1], width), []).append(row)
            for table, moved in by_table.items():
                db.executemany(f"INSERT INTO {table} VALUES ({marks})", moved)
        db.execute(f"DROP TABLE {kind}")
    db.execute("INSERT OR REPLACE INTO meta VALUES('schema', ?)", (str(SCHEMA_VERSION),))
    return {**meta, "schema": str(SCHEMA_VERSION)}


def _source_of(k: str) -> tuple[str, int, int]:
    """Inverse of `key(topic, partition, offset)` (state/sqlite/db.py key)."""
    n, _, rest = k.partition(":")
    topic, rest = rest[: int(n)], rest[int(n) + 1 :]
    m, _, rest = rest.partition(":")
    return topic, int(rest[: int(m)]), int(rest[int(m) + 1 :])
