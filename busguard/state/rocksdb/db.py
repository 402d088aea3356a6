"""The RocksDB database of a store: its options, how it is opened, and a
prefix scan, shared by the store (store.py) and the read-only view (view.py)."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import msgspec
import rocksdict

from busguard.state.rocksdb.directory import claim

#: a watermark row's value after its offset: the partition it names
partition_decoder: Final = msgspec.msgpack.Decoder(tuple[str, int])


def rocks_options() -> rocksdict.Options:
    """Quix Streams' RocksDB options (its rocksdb/options.py) but a 64 MiB
    block cache (SQLite's `cache_size`; Quix takes 1 GiB) and fdatasync
    (`use_fsync` false, as SQLite's commit on Linux; Quix: fsync)."""
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_write_buffer_size(64 * 2**20)
    opts.set_max_write_buffer_number(3)
    opts.set_target_file_size_base(64 * 2**20)
    opts.set_use_fsync(False)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(rocksdict.Cache(64 * 2**20))
    table.set_bloom_filter(10, False)  # most lookups miss: a filter per SST answers them without a read
    opts.set_block_based_table_factory(table)
    opts.set_compression_type(rocksdict.DBCompressionType.lz4())
    opts.set_max_total_wal_size(128 * 2**20)
    return opts


def open_db(path: Path) -> rocksdict.Rdict:
    """The store's database, with RocksDB's errors (plain Exceptions from
    rocksdict) turned into the OSError a caller reports as "cannot open it"."""
    if path.exists() and not path.is_dir():
        # mkdir would say FileExistsError, which callers read as "a store is already there"
        raise NotADirectoryError(errno.ENOTDIR, "not a directory (a RocksDB store is one)", str(path))
    claim(path)  # a directory of busguard's own, or refused before RocksDB writes a file there (directory.py)
    options = rocks_options()
    try:
        # the default family named with its options: without them rocksdict
        # reopens a store with default table options (no bloom filter, no cache)
        return rocksdict.Rdict(str(path), options, column_families={"default": options})
    except Exception as exc:  # rocksdict raises Exception for every RocksDB error
        said = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "lock" in said.lower():
            raise OSError(errno.EAGAIN, f"held by another process or handle: RocksDB admits one per store ({said})", str(path)) from None
        raise OSError(errno.EIO, said, str(path)) from None


def scan(db: rocksdict.Rdict, prefix: bytes, start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of every key under `prefix`, from `prefix + start` on."""
    it = db.iter()
    it.seek(prefix + start)
    n = len(prefix)
    while it.valid():
        k = it.key()
        if k[:n] != prefix:
            return
        yield k, it.value()
        it.next()
