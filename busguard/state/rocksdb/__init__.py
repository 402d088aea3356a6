"""The RocksDB backend (issue 20, lever 2): one directory on one host, one process.

An LSM engine takes a random-key insert as an append to its memtable and its
write-ahead log, where SQLite's B-tree dirties a page per key; a filled
store's batch then costs what an empty one's does. RocksDB (through
`rocksdict`) is what Quix Streams keeps its state in.

What differs from SQLite (docs/operations.md, section 1): RocksDB's LOCK file
admits one process per store, so several guards cannot share one directory;
each runs its own (or the deployment uses PostgreSQL). Durability is the
same: a batch is one `WriteBatch`, applied atomically (on recovery too), and
with `synchronous = "full"` (the default) `write` returns only after the WAL
is synced (fdatasync, the call SQLite's `synchronous = FULL` commit makes).

Only a directory busguard created is opened: its marker file, written
before RocksDB creates anything there, or a store an earlier busguard made,
recognised read-only by its own keys (state/rocksdb/directory.py).

The layout (state/rocksdb/layout.py builds every key): one column family,
byte keys, each kind under a one-byte prefix. Rows that expire by time
(nonces, tasks, decision runs, batch seals and their spans) live in
expiry buckets, as in SQLite's schema 4 (state/sqlite/buckets.py, the same
widths): a row goes under the prefix `kind lo hi` of the bucket its expiry
falls in, and a passed bucket goes with one `delete_range` (a single
tombstone; compaction reclaims the space). Session windows and policy rows,
whose expiry moves with every write, are keyed directly and found for
expiry through an index ordered by expiry (`X`). Per bucketed kind, a
counter per distinct expiry (`Z`; a batch's rows share one) makes `expire`
and `counts` exact without visiting a row.
"""
