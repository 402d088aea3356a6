"""Partitions whose position the broker will not move: what to do next. Pure.

A broker that stores record batches as it receives them (tansu) answers a
fetch AT an offset inside a batch that holds no record (a 61-byte batch with
a record count of 0) with nothing, for ever, while its log end lies past it:
the consumer's position never moves, every record behind it waits for good,
and a restart stalls at the same offset. A fetch from an EARLIER offset does
return that batch, and the decoder (busguard.runtime.decoding) then decides
every offset it claims as one span. So, per partition:

1. the position has not moved for `after_s` while the broker's high
   watermark says there is more: `Refetch` from the offset before it, with a
   floor at the position (the decoder drops what lies below the floor: it
   was decided already);
2. still there `after_s` after that (no earlier offset to fetch from, as at
   the start of the log, or the broker answers nothing even so): `Skip` the
   one offset, decided as a span of one with nothing fetched, and go on from
   the next. Each skip is one decision, so the guard says exactly which
   offsets it could not read and why; an empty batch at the very start of a
   partition's log costs `2 * after_s` per offset it claims (the one case
   step 1 cannot resolve, docs/notes-broker.md).

A partition whose position moves, or that has caught up with the high
watermark, is forgotten. A high watermark BELOW the position is said once
(`Rewound`): tansu hands offsets out again after a batch with a negative
lastOffsetDelta, and the records it stores there get no decision; the
guard names them and does not go back. Nothing here reads a clock or a broker: the loop
passes what it saw and when.
"""

from __future__ import annotations

import hashlib
from typing import Final, NamedTuple

from busguard.protocol.reasons import Reason
from busguard.runtime.undecodable import Undecodable

__all__ = ["Refetch", "Rewound", "Skip", "StuckPartitions", "unfetchable"]

_NOTHING_SHA256: Final = hashlib.sha256(b"").hexdigest()


class Refetch(NamedTuple):
    """Fetch from `start` again, keeping nothing below `floor`."""

    topic: str
    partition: int
    start: int
    floor: int


class Skip(NamedTuple):
    """Decide `offset` as holding nothing the broker will return, and move on."""

    topic: str
    partition: int
    offset: int
    high_watermark: int


class Rewound(NamedTuple):
    """The broker's log end fell below what this reader has decided: a broker
    that hands offsets out again (tansu, after a batch with a negative
    lastOffsetDelta) will store records at `high_watermark` … `position - 1`,
    offsets already decided, so no decision of their own will cover them.
    Said once per (position, high watermark)."""

    topic: str
    partition: int
    position: int
    high_watermark: int


class _Seen(NamedTuple):
    position: int
    since: float
    refetched: bool
    fetched: int | None  # the broker's last answer for the partition when this phase began
    in_flight: bool = False  # a Refetch from position - 1 was asked for


class StuckPartitions:
    def __init__(self, after_s: float) -> None:
        if after_s <= 0:
            raise ValueError(f"after_s: {after_s}; must be positive")
        self.after_s = after_s
        self._seen: dict[tuple[str, int], _Seen] = {}
        self._skipped: dict[tuple[str, int], int] = {}  # the last offset skipped, per partition
        self._rewound: dict[tuple[str, int], tuple[int, int]] = {}  # the last Rewound said, per partition

    def observe(
        self, topic: str, partition: int, position: int, high_watermark: int | None, fetched: int | None, now: float
    ) -> Refetch | Skip | Rewound | None:
        """The action for one partition after a poll that saw `position` and
        `high_watermark` at `now`; `fetched` identifies the broker's last
        answer for the partition (aiokafka's `last_poll_timestamp`). A skip
        needs an answer that came after the refetch: a partition whose broker
        is away (leader election, outage) answers nothing new, and waits."""
        key = (topic, partition)
        if high_watermark is None or position >= high_watermark:
            self._seen.pop(key, None)
            self._skipped.pop(key, None)
            if high_watermark is not None and position > high_watermark:
                said = self._rewound.get(key)
                self._rewound[key] = (position, high_watermark)
                if said != (position, high_watermark):
                    return Rewound(topic, partition, position, high_watermark)
            return None
        seen = self._seen.get(key)
        refetching = seen is not None and seen.in_flight and position == seen.position - 1
        if refetching and seen is not None and seen.position >= high_watermark:
            del self._seen[key]  # the log ends where the refetch started: nothing to skip
            return None
        if seen is None or (seen.position != position and not refetching):
            # after a skip, the offset before answers nothing either: no refetch from it
            self._seen[key] = _Seen(position, now, position == 0 or self._skipped.get(key) == position - 1, fetched)
            return None
        if now - seen.since < self.after_s:
            return None
        if not seen.refetched:
            self._seen[key] = _Seen(position, now, True, fetched, in_flight=True)
            return Refetch(topic, partition, position - 1, position)
        if fetched is None or (seen.fetched is not None and fetched <= seen.fetched):
            return None
        del self._seen[key]
        self._skipped[key] = seen.position
        return Skip(topic, partition, seen.position, high_watermark)

    def forget(self, topic: str, partition: int) -> None:
        """A partition revoked: its history means nothing to the next owner."""
        self._seen.pop((topic, partition), None)
        self._skipped.pop((topic, partition), None)
        self._rewound.pop((topic, partition), None)

    def __len__(self) -> int:
        return len(self._seen)


def unfetchable(skip: Skip) -> Undecodable:
    """The decision's input for a skipped offset: a span of one, as for an
    undecodable batch, carrying nothing (nothing was fetched). The detail
    names no broker reading, so a re-decision after a crash says the same."""
    return Undecodable(
        skip.topic,
        skip.partition,
        skip.offset,
        Reason.UNDECODABLE_BATCH,
        f"the broker returns no record at offset {skip.offset} though its log goes on: fetched at it and from the offset before it",
        b"",
        skip.offset,
        _NOTHING_SHA256,
        carrier=True,
    )
