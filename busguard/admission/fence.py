"""The store-warming fence and the store-behind check: pure rules, no I/O.

Why a fence. A state store remembers nonces and tasks so that a replay is
recognised. A store that is new, was lost, or was rolled back to an older
copy may have forgotten admissions made before it became trustworthy again.
Call that moment T, the store's *trusted-from* time: its creation for a store
`busguard run` had to create, or the moment it re-armed (below).

Which receipts could it have forgotten? One the old store admitted at some
clock reading a <= T. Admission requires `issued - a <= max_future_ms`
(decide.py: `issued - now > max_future` is refused, equality is accepted),
so `issued <= T + max_future_ms`. Such a receipt stays fresh while
`now - issued <= max_age_ms` (equality is fresh), i.e. at most until
`now = T + max_future_ms + max_age_ms`. Hence the rule, both sides inclusive:

    issued_ms - T <= max_future_ms  and  now_ms - T <= max_future_ms + max_age_ms
        -> store_warming

`a <= T` (not `a < T`) because T is itself a clock reading in milliseconds:
the old store may have decided in the very millisecond the new one read as T.
Counting that millisecond costs one millisecond of fence; not counting it
could let one receipt through. The second condition is implied by freshness
(a record it would spare is already `timestamp_expired`); it is kept so the
check reads as the window it is and costs nothing once the window is over.

A store an operator created with `busguard state init` (genesis: "this
deployment has no history") has no trusted-from time and no fence, until the
check below finds that it has a history after all.

Why a store-behind check. A lost store comes back empty and is fenced from
its creation; a *rolled back* one (a restored backup, a volume snapshot)
comes back with its old creation time and would trust itself. The store
therefore keeps, per input (topic, partition), the highest offset it has
decided, in the same transaction as the decisions, and never expires it.
The consumer group's committed offset C says the group has processed every
record before C, each of them decided by some store first (the batch
protocol persists before it commits). If `C - 1 > watermark`, or the store
has no watermark for a partition the group has committed past 0, this store
has not seen decisions the group acted on: it is behind, and re-arms its
fence (T = now) instead of trusting itself.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from busguard.state.keys import Partition


def fenced(issued_ms: int, now_ms: int, trusted_from: int | None, max_age_ms: int, max_future_ms: int) -> bool:
    """True if a store trusted from `trusted_from` must refuse a receipt issued at `issued_ms`."""
    return trusted_from is not None and issued_ms - trusted_from <= max_future_ms and now_ms - trusted_from <= max_future_ms + max_age_ms


def fence_ends(trusted_from: int | None, max_age_ms: int, max_future_ms: int) -> int | None:
    """The first millisecond at which the fence no longer refuses anything."""
    return None if trusted_from is None else trusted_from + max_future_ms + max_age_ms + 1


class Behind(msgspec.Struct, frozen=True, kw_only=True):
    """One partition the consumer group has committed past what the store knows."""

    topic: str
    partition: int
    committed: int
    watermark: int | None  # the highest offset the store decided there; None: never


def behind(watermarks: Mapping[Partition, int], committed: Mapping[Partition, int | None]) -> list[Behind]:
    """Partitions where the group's committed offset C says records up to C - 1
    were processed, and this store has not decided them all.

    A partition the group never committed (None), or committed at 0, proves
    nothing. A store at or ahead of the group (`watermark >= C - 1`; ahead
    after a crash between persisting and committing) is trusted."""
    found = []
    for (topic, partition), c in sorted(committed.items()):
        if c is None or c <= 0:
            continue
        w = watermarks.get((topic, partition))
        if w is None or c - 1 > w:
            found.append(Behind(topic=topic, partition=partition, committed=c, watermark=w))
    return found
