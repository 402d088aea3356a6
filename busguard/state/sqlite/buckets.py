"""Time-bucketed SQLite tables for rows that expire (issue 20): nonces and tasks.

A row goes to the table of the bucket its expiry falls in, named
`<kind>_<lo>_<hi>` (every row in it has `lo <= exp < hi`, `hi - lo` the
kind's bucket width). Nothing indexes `exp`: an index on it cost a second
random B-tree insert per row, and expiry by DELETE walked it row by row.
Instead a table whose `hi` has passed holds nothing live and is dropped
whole (`DROP TABLE` frees its pages; no row is visited). A filled store's
new rows land in the newest bucket's table, a fraction of the live rows,
so an insert dirties pages of a small tree instead of a 1 M-row one.

The width comes from the kind's lifetime (`width_for`): a quarter of it, so
a row written at `now` expires in one of at most
`ceil(lifetime / width) + 1 = 5` buckets ahead of `now`, and a lookup
probes those, plus a table whose bucket passed since the last expiry pass
(docs/operations.md "Bounds"). Names carry both ends, so a width changed
between runs (a new lifetime) only adds tables; it never misreads one.

Each key is held by at most one table of its kind, expired row or live:
the store deletes a key's row from the table that held it before writing
it into another (`Catalog.locate` finds it). So a key's row reads back as
its newest write, and counts stay one per key.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Final

from busguard.state.sqlite.db import select_in

#: buckets per lifetime; the bound on live tables per kind is this + 1
BUCKETS_PER_LIFETIME: Final = 4
MIN_WIDTH_MS: Final = 1_000
KINDS: Final = ("nonces", "tasks")
COLUMNS: Final = {
    "nonces": "k TEXT PRIMARY KEY, exp INTEGER NOT NULL",
    "tasks": "k TEXT PRIMARY KEY, body BLOB NOT NULL, exp INTEGER NOT NULL",
}
_NAME: Final = re.compile(r"^(nonces|tasks)_(\d+)_(\d+)$")


def width_for(lifetime_ms: int) -> int:
    return max(MIN_WIDTH_MS, lifetime_ms // BUCKETS_PER_LIFETIME)


class Bucket:
    __slots__ = ("hi", "lo", "name")

    def __init__(self, name: str, lo: int, hi: int) -> None:
        self.name, self.lo, self.hi = name, lo, hi


class Catalog:
    """The bucket tables of one connection's file, re-read whenever the
    schema changed (another process created or dropped one), so a statement
    never names a table that is gone. Call `refresh` inside the transaction
    that uses it."""

    def __init__(self) -> None:
        self._version = -1
        self.tables: dict[str, list[Bucket]] = {k: [] for k in KINDS}

    def refresh(self, db: sqlite3.Connection) -> None:
        version = db.execute("PRAGMA schema_version").fetchone()[0]
        if version == self._version:
            return
        tables: dict[str, list[Bucket]] = {k: [] for k in KINDS}
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND (name GLOB 'nonces_*' OR name GLOB 'tasks_*')"):
            m = _NAME.match(name)
            if m:
                tables[m[1]].append(Bucket(name, int(m[2]), int(m[3])))
        for buckets in tables.values():
            buckets.sort(key=_lo)
        self.tables, self._version = tables, version

    def table_for(self, db: sqlite3.Connection, kind: str, exp: int, width: int) -> str:
        """The table a row of `kind` expiring at `exp` goes to, created if new."""
        lo = exp - exp % width
        hi = lo + width
        for b in self.tables[kind]:
            if b.lo == lo and b.hi == hi:
                return b.name
        name = f"{kind}_{lo}_{hi}"
        db.execute(
            f"CREATE TABLE IF NOT EXISTS {name}({COLUMNS[kind]}) WITHOUT ROWID"
            if kind == "nonces"
            else f"CREATE TABLE IF NOT EXISTS {name}({COLUMNS[kind]})"
        )
        self.tables[kind].append(Bucket(name, lo, hi))
        self.tables[kind].sort(key=_lo)
        self._version = -1  # re-read at the next refresh: a rolled-back CREATE must not stay listed
        return name

    def locate(
        self, db: sqlite3.Connection, kind: str, keys: Sequence[str], columns: str = "k, exp"
    ) -> Iterable[tuple[str, tuple[Any, ...]]]:
        """(table, row) for every row of `keys`, expired or not, in every table of `kind`."""
        if not keys:
            return
        for b in self.tables[kind]:
            for row in select_in(db, f"SELECT {columns} FROM {b.name} WHERE k IN ({{}})", keys):
                yield b.name, row

    def passed(self, kind: str, now_ms: int) -> list[Bucket]:
        """The tables of `kind` whose buckets have passed: nothing in them is live."""
        return [b for b in self.tables[kind] if b.hi <= now_ms]

    def drop(self, db: sqlite3.Connection, kind: str, bucket: Bucket, before: int) -> int:
        """Drop a passed table; returns its rows no expiry pass has counted yet (exp > `before`)."""
        n: int = db.execute(f"SELECT count(*) FROM {bucket.name} WHERE exp > ?", (before,)).fetchone()[0]
        db.execute(f"DROP TABLE {bucket.name}")
        self.tables[kind] = [b for b in self.tables[kind] if b is not bucket]
        self._version = -1
        return n

    def expiring(self, db: sqlite3.Connection, kind: str, before: int, now_ms: int) -> int:
        """Rows of `kind` in tables still live that expire in (`before`, `now_ms`]:
        counted, not deleted (they read as absent, and go with their table)."""
        n = 0
        for b in self.tables[kind]:
            if b.lo <= now_ms < b.hi and before < now_ms:
                n += db.execute(f"SELECT count(*) FROM {b.name} WHERE exp > ? AND exp <= ?", (before, now_ms)).fetchone()[0]
        return n

    def count(self, db: sqlite3.Connection, kind: str, horizon: int) -> int:
        """Rows of `kind` no expiry pass has passed (exp > `horizon`)."""
        total = 0
        for b in self.tables[kind]:
            if b.lo > horizon:
                total += db.execute(f"SELECT count(*) FROM {b.name}").fetchone()[0]
            elif b.hi > horizon:
                total += db.execute(f"SELECT count(*) FROM {b.name} WHERE exp > ?", (horizon,)).fetchone()[0]
        return total


def _lo(b: Bucket) -> int:
    return b.lo
