"""The keys of the state contract: what a batch asks a store to read.

Built once per record (on admission's Candidate) and used as they are by the
batch's key set, its overlay and the stores, so they are plain tuples: cheap
to hash, and a backend can turn each into one text key (state/sqlite/db.py, key).
"""

from __future__ import annotations

import msgspec

from busguard.protocol.records import Coordinates

SourceKey = tuple[str, int, int]
"""(topic, partition, offset): the input position a decision was made for."""
NonceKey = tuple[str, str]
"""(scope, nonce): scope is "" (global) or the canonical principal."""
WindowKey = tuple[str, str]
"""(principal, session_id)"""
TaskKey = tuple[str, str]
"""(kind, task_id)"""
PolicyKey = tuple[str, str]
"""(namespace, key): a policy's own row. The namespace is the kind's name (or
a name the kind's spec declares), so two kinds' policies cannot read or
overwrite each other's rows (busguard.policies.KindSpec.namespaces)."""
Partition = tuple[str, int]
"""(topic, partition)"""


def source_key(c: Coordinates) -> SourceKey:
    return (c.topic, c.partition, c.offset)


class KeySet(msgspec.Struct, kw_only=True):
    """Every state key a batch may read, loaded in one round trip."""

    sources: list[SourceKey] = msgspec.field(default_factory=list)
    nonces: set[NonceKey] = msgspec.field(default_factory=set)
    windows: set[WindowKey] = msgspec.field(default_factory=set)
    tasks: set[TaskKey] = msgspec.field(default_factory=set)
    policy: set[PolicyKey] = msgspec.field(default_factory=set)
    #: the batch-seal chain whose tip the batch reads (Snapshot.tip); None: no batch seal
    chain: str | None = None
