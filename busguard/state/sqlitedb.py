"""SQLite plumbing shared by the guard's and the reconciler's stores.

WAL mode, `BEGIN IMMEDIATE` transactions (so several processes on one file
serialise their check-and-record), and single-column text keys so that
`k IN (?, …)` lookups use the primary key (SQLite plans row-value IN lists
as table scans).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

_CHUNK: Final = 300  # keys per IN (...) lookup; far below SQLite's variable limit


def connect(path: str | Path, *, synchronous: str = "FULL", busy_timeout_ms: int = 30_000) -> sqlite3.Connection:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    db.execute("PRAGMA cache_size=-65536")  # 64 MiB: a batch's lookups stay in memory
    db.execute("PRAGMA wal_autocheckpoint=10000")  # checkpoint every ~40 MiB, not every 4 MiB
    return db


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def key(*parts: object) -> str:
    """One text key from several parts, unambiguous whatever the parts contain
    (each but the last is length-prefixed). Called several times per record,
    hence the unrolled common cases."""
    if len(parts) == 2:
        a, b = parts
        return f"{len(str(a))}:{a}\x00{b}"
    if len(parts) == 3:
        a, b, c = parts
        return f"{len(str(a))}:{a}\x00{len(str(b))}:{b}\x00{c}"
    *head, last = (str(p) for p in parts)
    return "".join(f"{len(p)}:{p}\x00" for p in head) + last


def select_in(db: sqlite3.Connection, sql: str, keys: Sequence[str], *params: Any) -> Iterable[tuple[Any, ...]]:
    """Run `sql` (with one `{}` for the IN list, after `params`) over `keys` in chunks."""
    for i in range(0, len(keys), _CHUNK):
        chunk = keys[i : i + _CHUNK]
        yield from db.execute(sql.format(",".join("?" * len(chunk))), (*params, *chunk))
