"""SQLite plumbing shared by the guard's and the reconciler's stores.

WAL mode, `BEGIN IMMEDIATE` transactions (so several processes on one file
serialise their check-and-record), and single-column text keys so that
`k IN (?, …)` lookups use the primary key (SQLite plans row-value IN lists
as table scans).

Checkpoints run on a thread of their own (`Checkpointer`), not inside a
batch's commit: with the WAL's default auto-checkpoint, the commit that
crossed the threshold copied every frame into the database file and synced
it, and on a store holding a million live nonces (random keys, so each
record dirties its own pages) that one commit took 0.55 s against 12 ms for
the others (benchmarks/compare.py --preload).
"""

from __future__ import annotations

import contextlib
import errno
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import structlog

_CHUNK: Final = 300  # keys per IN (...) lookup; far below SQLite's variable limit
#: Pages of WAL after which a writer checkpoints on its own commit even with a
#: Checkpointer running: the backstop if that thread cannot keep up (~400 MiB).
BACKSTOP_PAGES: Final = 100_000
log = structlog.get_logger("busguard.state.sqlite.store")


def connect(path: str | Path, *, synchronous: str = "FULL", busy_timeout_ms: int = 30_000) -> sqlite3.Connection:
    path = Path(path)
    if path.parent.exists() and not path.parent.is_dir():
        # mkdir would say FileExistsError, which callers read as "a store is already there"
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(path.parent))
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    db.execute("PRAGMA cache_size=-65536")  # 64 MiB: a batch's lookups stay in memory
    db.execute("PRAGMA wal_autocheckpoint=10000")  # checkpoint every ~40 MiB, not every 4 MiB
    return db


class Checkpointer:
    """Moves committed WAL frames into the database file on its own
    connection and thread, so that no batch's commit pays for it.

    A pass starts when the writer says it committed (`committed`), at most
    every `min_gap_s` and at least every `every_s`: right after a commit is
    when the writer is busy elsewhere (producing the batch's outputs), so a
    pass usually copies the whole WAL before the next commit, and then that
    commit starts the WAL over from its beginning: the file stays a few
    batches long. PASSIVE checkpoints never wait for, or block, a reader or a
    writer; frames committed while one runs are left for the next pass. The
    writer's own auto-checkpoint stays on at `BACKSTOP_PAGES` in case this
    thread falls behind. A failed pass is logged and retried on the next:
    a checkpoint decides nothing, so it cannot lose a committed batch.
    """

    def __init__(self, path: str | Path, *, every_s: float = 1.0, min_gap_s: float = 0.25) -> None:
        self.every_s = every_s
        self.min_gap_s = min_gap_s
        self.passes = 0
        #: the last pass's answer: (frames in the WAL, of them in the database file)
        self.last = (0, 0)
        self._db = connect(path, synchronous="FULL")
        self._stop = threading.Event()
        self._committed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sqlite-checkpoint", daemon=True)
        self._thread.start()

    def committed(self) -> None:
        """The writer committed: there are frames to copy."""
        self._committed.set()

    def run_once(self) -> tuple[int, int]:
        """One PASSIVE pass: (frames in the WAL, frames now in the database file)."""
        _busy, in_wal, moved = self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self.passes += 1
        self.last = (in_wal, moved)
        return self.last

    def _run(self) -> None:
        while not self._stop.is_set():
            self._committed.wait(self.every_s)
            if self._stop.is_set():
                break
            self._committed.clear()
            try:
                self.run_once()
            except sqlite3.Error as exc:
                log.warning("background checkpoint failed; retried on the next pass", error=str(exc))
            self._stop.wait(self.min_gap_s)

    def close(self) -> None:
        self._stop.set()
        self._committed.set()
        self._thread.join()
        self._db.close()


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


@contextlib.contextmanager
def reading(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A read transaction: several statements see one snapshot of the file
    (a table another process drops between them would otherwise vanish)."""
    db.execute("BEGIN")
    try:
        yield db
    finally:
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
