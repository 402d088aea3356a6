"""The PostgreSQL backend: `backend` (its BACKEND and options), `store` (the
guard's PostgresStore), `db` (the session, retries, the schema and its
statements), `locks` (advisory locks on policy rows), `reconcile` (the
reconciler's store).

Why two guards can never both pass one check (the isolation argument).

Transactions run at READ COMMITTED, and take no locks while reading: each
table is read with one `k = ANY(…)` statement. What makes check-and-record
atomic is that every write is conditional on the row still being what the
batch read, and a write whose condition fails aborts the whole batch, which
then runs again on fresh reads (the decision function is pure):

- a key the batch read as absent (a decision position, a nonce, a task, a
  session window) is written with `INSERT … ON CONFLICT (k) DO UPDATE … WHERE
  <the existing row is expired> RETURNING k`. If another guard inserted that
  key after our read, committed or not, PostgreSQL makes our INSERT wait for
  its transaction and then sees its row; the row is not expired, nothing is
  written, fewer rows come back than were sent, and the batch is retried. An
  INSERT on a unique key cannot miss an uncommitted concurrent insert: that
  is what the unique index guarantees at any isolation level.
- a session window the batch read as present is written only if its version
  (`ver`, +1 on every write) is still the one read; a decided position found
  holding another record is replaced only if its decision id is still the
  one read.
- a row the batch read as present and does not write is one whose truth
  cannot be undone by another guard: nonces, tasks and decisions are
  insert-only until they expire (a task's first admission stays its witness),
  and a window only moves forward, so a sequence it showed as seen or too old
  stays refused. A decision based on it stays right after any later commit.
- conversely, every absence a decision relies on is written by it: a record
  that passes the nonce check records its nonce, one that passes the window
  records the window, an admission records its task, and every input records
  its decision. (Records refused before those checks — bad signature, store
  warming, a policy objection — rely on no absence.)

Policy rows (busguard.policies: a kind's own state, e.g. an award's call
for bids) break the last point: a policy may read a row it does not write
(a settlement reads the award) and overwrite rows whatever they held. So a
batch takes transaction-scoped advisory locks covering the policy keys it
reads, before reading them, and another batch touching one of those keys
waits until it commits: two-phase locking for policy rows, conditional
writes for the rest. How many locks that is does not depend on the input:
at most `max_policy_locks` per batch (state/postgres/locks.py has the scheme and
the argument), and only records whose signature verified have policy keys
at all (admission/batch.py `check_batch`: a forged record adds no key).

So each committed batch is equivalent to running it alone at its commit
point, which is the guarantee SQLite's `BEGIN IMMEDIATE` gives on one host.
Two guards that receive copies of one receipt at the same moment both read
its nonce as absent; both try to insert it; the second waits for the first,
finds the row, and reruns its batch, which now reads the nonce (or the task)
and refuses the copy. tests/unit/test_state_postgres.py shows it with two
processes released by a barrier, and that it fails with the conditions
removed.

Why not SERIALIZABLE: it would be correct without this argument, but its
predicate locks for a 500-key batch are promoted to relation locks, after
which every pair of concurrent batches conflicts and aborts; at READ
COMMITTED only batches that really touch the same key wait or retry. Why not
advisory locks on every key: one lock-table slot per key per batch
(max_locks_per_transaction × max_connections is 6400 by default, a batch has
up to ~1500 keys), and an operator would have to size it; policy rows use
them within a fixed bound (above).

No deadlocks: a batch writes its tables in a fixed order (decisions, nonces,
windows, tasks, watermarks) with its keys sorted, so two batches never wait
on each other's rows in opposite orders. (A replaced decision is an UPDATE
outside that order; it is rare, and a deadlock is retried like a conflict.)

Expiry: rows carry their expiry time and a row at or before `now_ms` reads as
absent; `expire` deletes them in chunks of db.EXPIRE_CHUNK rows by the
`exp` index, one short transaction each. Time-partitioned tables (drop a
whole partition) were considered and rejected: PostgreSQL cannot enforce a
unique key across partitions unless the key includes the partition column,
and the unique key on `k` is exactly what the conflict checks above rely on.

The fences are the SQLite store's: `meta` holds created_at_ms, origin and
trusted_from_ms (read in every batch's transaction, so a re-arm by any guard
fences every guard from its next batch); `watermarks` holds per input
partition the highest offset decided, written in the batch's transaction and
never expired.
"""
