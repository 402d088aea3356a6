"""The SQLite backend: `backend` (its BACKEND and options), `store` (the
guard's SqliteStore), `db` (connections, transactions, the checkpoint
thread), `buckets` (time-bucketed nonce and task tables), `reconcile` (the
reconciler's store).

Rows are msgpack-encoded msgspec Structs, so a decision read back after a
crash re-encodes to exactly the bytes that were first emitted.

Layout (schema version 4; every key is `key(parts…)`):
    meta(k, v)                                   created_at_ms, schema, origin, trusted_from_ms, expired_to_ms
    watermarks(k=topic,partition) -> topic, part, off  highest input offset decided; never expires
    decision_runs(id, topic, part, first, last, n, exp, body)
                                                 the decisions of one batch, per input partition
    nonces_<lo>_<hi>(k=scope,nonce) -> exp       recorded after signatures verify; one table per expiry bucket
    windows(k=principal,session_id) -> top, bitmap, exp
    tasks_<lo>_<hi>(k=kind,task_id) -> body, exp first admission per task (insert-only); one table per expiry bucket

Nonces and tasks are time-bucketed (state/sqlite/buckets.py has the why and the
bound): a row lives in the table whose [lo, hi) holds its expiry, nothing
indexes `exp`, and `expire` drops a table once `hi` has passed. Rows of a
live table that have expired stay until then, and read as absent from the
later of the batch's `now` and `expired_to_ms` (the `now` of the last
expiry pass, which counted them): exactly what the reads saw when that pass
deleted them. The one difference from deleting: a row written after a pass
with an expiry before that pass's `now` (a writer whose clock is behind
the expiring one's) reads as absent at once rather than until the next pass.

Decisions are stored a run at a time, not a row each (a row per
record was a third of the state transaction's cost, and every batch looked up
all its positions only to find nothing). A run holds, for one input
partition, the decisions one batch wrote that share one expiry (in practice:
all of that batch's decisions on that partition): `body` is the msgpack array
of the decisions in offset order, `first`/`last` their lowest and highest
offsets (`last - first < RUN_SPAN`: a batch whose offsets on a partition
spread wider is cut into several runs), `n` how many, `exp` when they expire
(so a run expires with its newest decision, which is every one of them).
A batch finds its earlier decisions with one range query per partition on
(topic, part, last): a run holding an offset in [lo, hi] has `last` in
[lo, hi + RUN_SPAN) and `first <= hi`, so the scan is bounded and, for a
batch past everything stored (the normal case), empty.

Every position is held by at most one run, expired or not: writing a run
first takes its positions out of the runs that held them (rewritten, or
deleted once empty). So a re-decided position (a different record found at
a decided offset, `busguard_replaced_decisions_total`) reads back as its
newest decision whatever the order of the runs, `counts()["decisions"]`
(the sum of `n`) counts each position once, and an older run's expiry can
never bring a superseded decision back. Reads also take runs in `id` order,
newest last, so the newest wins even if that ever failed to hold.

`origin` is `genesis` for a store `busguard state init` made (an operator
declared that no history exists: no fence) and `created` for one `busguard
run` had to make because the file was missing (it may replace a lost store:
fenced from its creation). `trusted_from_ms` is the fence time of
admission/fence.py, absent while a genesis store has never re-armed; it is
read inside every batch's transaction, so a re-arm by one guard process
fences every process sharing the file from its next batch. Watermarks are
written in the batch's own transaction, so they can never claim a decision
the store does not hold.
"""
