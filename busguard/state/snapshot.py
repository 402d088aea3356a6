"""What a batch read: the unexpired rows a store found for a KeySet."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from busguard.protocol.records import Decision, TaskEntry
from busguard.state.keys import NonceKey, PolicyKey, SourceKey, TaskKey, WindowKey


class WindowState(msgspec.Struct, frozen=True):
    """A session's anti-replay window (busguard.admission.window): `top`, the
    highest sequence accepted, and `bitmap`, bit i set when `top - i` was.
    A Struct, not a NamedTuple: msgspec builds one in C, and one is built
    for every session-carrying record."""

    top: int
    bitmap: int


class StoredHead(msgspec.Struct, frozen=True, gc=False):
    """A batch seal as persisted with its batch (busguard.protocol.treehead):
    the signed head's bytes and seal, the concatenated 32-byte leaf hashes
    (the tree, and so every leaf's proof, is rebuilt from them), and the
    input positions its leaves were decided for, per partition as
    (topic, partition, lowest offset, highest offset): what finds a
    re-delivered record's head. It expires with its decisions."""

    chain: str
    seq: int
    head: bytes
    seal: bytes
    leaves: bytes
    spans: list[tuple[str, int, int, int]]
    sealed_at: int

    def covers(self, key: SourceKey) -> bool:
        topic, partition, offset = key
        return any(t == topic and p == partition and lo <= offset <= hi for t, p, lo, hi in self.spans)


def spans_of(positions: Iterable[SourceKey]) -> list[tuple[str, int, int, int]]:
    """`StoredHead.spans` of these positions: per (topic, partition), the
    lowest and highest offset."""
    found: dict[tuple[str, int], list[int]] = {}
    for topic, part, offset in positions:  # every batch's positions: no per-position tuples
        span = found.get((topic, part))
        if span is None:
            found[(topic, part)] = [offset, offset]
        elif offset < span[0]:
            span[0] = offset
        elif offset > span[1]:
            span[1] = offset
    return [(t, p, lo, hi) for (t, p), (lo, hi) in sorted(found.items())]


class Snapshot(msgspec.Struct, kw_only=True):
    """Unexpired rows found for a KeySet; a key absent here is absent in the store."""

    trusted_from: int | None  # the store's fence time (admission/fence.py); None: genesis, no fence
    decisions: dict[SourceKey, Decision] = msgspec.field(default_factory=dict)
    nonces: set[NonceKey] = msgspec.field(default_factory=set)
    windows: dict[WindowKey, WindowState] = msgspec.field(default_factory=dict)
    tasks: dict[TaskKey, TaskEntry] = msgspec.field(default_factory=dict)
    policy: dict[PolicyKey, bytes] = msgspec.field(default_factory=dict)
    #: the newest head of `KeySet.chain` as (seq, head bytes), expired or not; None: no head yet
    tip: tuple[int, bytes] | None = None
    #: unexpired heads whose spans cover a position in `decisions` (for re-emission)
    heads: list[StoredHead] = msgspec.field(default_factory=list)
