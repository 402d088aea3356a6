"""What a batch read: the unexpired rows a store found for a KeySet."""

from __future__ import annotations

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


class Snapshot(msgspec.Struct, kw_only=True):
    """Unexpired rows found for a KeySet; a key absent here is absent in the store."""

    trusted_from: int | None  # the store's fence time (admission/fence.py); None: genesis, no fence
    decisions: dict[SourceKey, Decision] = msgspec.field(default_factory=dict)
    nonces: set[NonceKey] = msgspec.field(default_factory=set)
    windows: dict[WindowKey, WindowState] = msgspec.field(default_factory=dict)
    tasks: dict[TaskKey, TaskEntry] = msgspec.field(default_factory=dict)
    policy: dict[PolicyKey, bytes] = msgspec.field(default_factory=dict)
