"""A batch's batch audit records (busguard.protocol.auditbatch): which
decisions share one, and in which order. Pure apart from `decision_at`,
which the caller passes in (the store's lookup, in the store's thread).

A group is every decision sealed under one tree head for one input topic
and partition, in leaf-index order, split greedily where the next entry
would overflow the producer's batch size. Membership depends only on the
head and the store, never on how the input was polled: a batch re-delivered
after a crash (or to another guard after a rebalance) may arrive split
differently across polls, so a group only partly in hand is completed from
the store over the head's persisted span for that partition. Then a
re-emitted group is byte-identical to the first emission, which is what
lets a reader of the audit topic drop duplicates by value.

Size: a record is split where the next entry would take it past the
producer's batch size, and an entry is no larger than its decision's own
audit record, which admission sized (or which is bounded by the receipt:
docs/protocol.md 12.5), so each batch audit record fits the limit.

Bound: completing a group looks up each offset of the head's span for that
partition not in hand, at most `hi - lo + 1` lookups per re-delivered group
(one batch's span: at most `[batch] max_records` decisions, and the offsets
between them); a group fully in hand, every group of a new batch, looks up
nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from busguard.protocol.auditbatch import PACK_OVERHEAD, Entry, batch_headers, entry_size, pack
from busguard.protocol.records import Coordinates, Decision
from busguard.runtime.batch_size import BATCH_OVERHEAD, record_size
from busguard.runtime.outputs import Output, Sealed
from busguard.state.snapshot import StoredHead

GroupKey = tuple[bytes, str, int]
"""(the head's bytes, input topic, input partition)."""


class Member(NamedTuple):
    leaf: int
    entry: Entry
    decided_at: int


def member(s: Sealed) -> Member:
    """A batch-sealed decision's entry (its leaf index is the proof's first 4 bytes)."""
    assert s.batch is not None
    inclusion = s.batch.inclusion
    return Member(int.from_bytes(inclusion[:4], "big"), Entry(s.decision_json, s.attestation, inclusion), s.decision.decided_at)


def group_key(s: Sealed) -> GroupKey:
    assert s.batch is not None
    src = s.decision.source
    return (s.batch.head, src.topic, src.partition)


def complete(
    key: GroupKey,
    members: dict[int, Member],
    offsets: set[int],
    head: StoredHead,
    seal_stored: Callable[[Decision], Sealed | None],
    decision_at: Callable[[Coordinates], Decision | None],
) -> None:
    """Add to `members` (by leaf index) the decisions of `head`'s span for
    the group's partition that are not at `offsets` (those in hand) and
    that `seal_stored` finds under `head`."""
    _, topic, partition = key
    for t, p, lo, hi in head.spans:
        if t != topic or p != partition:
            continue
        for offset in range(lo, hi + 1):
            if offset in offsets:
                continue
            d = decision_at(Coordinates(topic=topic, partition=partition, offset=offset))
            s = seal_stored(d) if d is not None else None
            if s is not None and s.batch is not None and s.batch.head == head.head:
                m = member(s)
                members.setdefault(m.leaf, m)


def audit_records(topic: str, groups: dict[GroupKey, dict[int, Member]], head_seals: dict[bytes, bytes], limit: int) -> list[Output]:
    """Each group's records: entries in leaf order, a new record whenever the
    next entry would take the record past `limit` bytes (its uncompressed
    batch, the producer's batch size); an entry larger than that alone."""
    out: list[Output] = []
    for key in sorted(groups, key=lambda k: (k[1], k[2], k[0])):
        head, _, partition = key
        headers = batch_headers(head, head_seals[head])
        room = limit - BATCH_OVERHEAD - record_size(None, b"", headers) - PACK_OVERHEAD - 5  # 5: the value length's varint
        members = [groups[key][i] for i in sorted(groups[key])]
        for part in _split(members, room):
            out.append(Output(topic, None, pack([m.entry for m in part]), headers, part[0].decided_at, partition))
    return out


def _split(members: Sequence[Member], room: int) -> Iterable[Sequence[Member]]:
    start, used = 0, 0
    for i, m in enumerate(members):
        size = entry_size(m.entry)
        if i > start and used + size > room:
            yield members[start:i]
            start, used = i, 0
        used += size
    if start < len(members):
        yield members[start:]
