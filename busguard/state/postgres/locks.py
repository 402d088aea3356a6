"""Advisory locks on policy rows: at most `cap` per batch, whatever it holds.

Why policy rows are locked at all (the rest of the store needs no lock:
state/postgres/store.py). A policy may read a row it does not write and overwrite
rows whatever they held, so conditional writes cannot catch a lost race on
them; a batch locks the policy rows it reads before reading them, and
another batch touching one of them waits until it commits (two-phase
locking). Transaction-scoped advisory locks do that without touching the
rows themselves.

Why a bound. One lock per key made the lock count a function of the input:
a session handoff names about three rows (its sender, its receiver, its
session, its voucher), so 500 handoffs with distinct names took about 1 500
locks, forged or not. PostgreSQL's lock table is shared by
every session of the server and sized `max_locks_per_transaction ×
(max_connections + max_prepared_transactions)` (6 400 by default); a few
guards with such batches, or a raised `batch.max_records`, fill it and every
session gets "out of shared memory".

The scheme: two levels, with one "policy rows" lock per schema above the
per-row locks.

- A batch whose policy keys hash to at most `cap - 1` lock ids takes the
  schema's lock SHARED, then one exclusive lock per id, ascending: batches
  touching different rows run side by side, batches touching one row
  serialise on that row's lock. `cap` locks at most.
- A batch with more takes the schema's lock EXCLUSIVE and nothing else: one
  lock, and it runs alone among the batches of this schema that touch policy
  rows (the others wait for it, or it for them) for its transaction.

Any two batches that touch a common row conflict: both fine, on that row's
id; otherwise the exclusive schema lock of one conflicts with the other's
shared or exclusive one. Hash collisions only serialise more. Every batch
takes the schema lock before any row lock, and row locks in ascending
order, so reads never deadlock. A batch that writes a policy row it did not
read (no built-in policy does) locks it when it writes, after the rest: a
row lock while it stays within `cap`, else the exclusive schema lock on top
of its shared one. Those late locks can deadlock with another batch's;
PostgreSQL detects it and the batch is retried like a conflict
(state/postgres/db.py). A batch with no policy keys takes no lock.

What the bound costs: a batch past the threshold serialises against every
other batch with policy rows in its schema, for the length of its
transaction. Records of kinds without a policy never take these locks.

Compatibility: the row lock ids are the ones earlier versions took (one per
key, `pgsql.lock_id`), so a guard of an earlier version and a fine batch of
this one still exclude each other; a batch of this version above the
threshold does not exclude an earlier guard's batch. Upgrade every guard of
a deployment together.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final, NamedTuple

if TYPE_CHECKING:
    import psycopg

#: the default of `state.max_policy_locks`
DEFAULT_CAP: Final = 64
_SHARED: Final = "SELECT pg_advisory_xact_lock_shared(%s)"
_EXCLUSIVE: Final = "SELECT pg_advisory_xact_lock(%s)"
_ROWS: Final = "SELECT count(pg_advisory_xact_lock(k)) FROM unnest(%b::bigint[]) AS k"


def schema_lock_id(schema: str) -> int:
    """The lock above every policy row of `schema` (two deployments sharing a
    database do not serialise each other's large batches)."""
    return int.from_bytes(hashlib.blake2b(f"busguard.policy-rows:{schema}".encode(), digest_size=8).digest(), "big", signed=True)


class Held(NamedTuple):
    """What a batch's transaction holds so far."""

    #: the schema lock held exclusively: every policy row is covered
    whole: bool = False
    #: row lock ids held exclusively (the schema lock is held shared when any are)
    ids: frozenset[int] = frozenset()

    def objects(self) -> int:
        """Lock-table entries used (a shared and an exclusive hold on the schema lock are one entry)."""
        return len(self.ids) + (1 if self.whole or self.ids else 0)


class Acquire(NamedTuple):
    """The locks to take next, in this order."""

    shared: bool = False
    exclusive: bool = False
    ids: tuple[int, ...] = ()


def plan(held: Held, wanted: Iterable[int], cap: int) -> tuple[Held, Acquire]:
    """What a batch holding `held` takes to cover the rows `wanted` as well,
    never more than `cap` lock-table entries in all (`cap` >= 2)."""
    if held.whole:
        return held, Acquire()
    new = tuple(sorted(set(wanted) - held.ids))
    if not new:
        return held, Acquire()
    if len(held.ids) + len(new) + 1 <= cap:
        return Held(False, held.ids.union(new)), Acquire(shared=not held.ids, ids=new)
    return Held(True, held.ids), Acquire(exclusive=True)


def take(cur: psycopg.Cursor[tuple[Any, ...]], schema: str, held: Held, wanted: Iterable[int], cap: int) -> Held:
    """Take what `plan` says, in its order; what the batch holds after."""
    after, step = plan(held, wanted, cap)
    if step.shared:
        cur.execute(_SHARED, (schema_lock_id(schema),))
    if step.exclusive:
        cur.execute(_EXCLUSIVE, (schema_lock_id(schema),))
    if step.ids:
        cur.execute(_ROWS, (list(step.ids),))
    return after
