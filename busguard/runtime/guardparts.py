"""The values a batch passes between the guard's two halves (runtime/guard.py),
and the small helpers they need: apart, so the stage itself stays one
readable module."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from busguard.admission.batch import Checked, Input
from busguard.protocol.merkle import HASH_BYTES
from busguard.protocol.treehead import BatchTree, ChainTip
from busguard.runtime.outputs import Sealed
from busguard.state.snapshot import StoredHead


def chunks(items: Sequence[Any], n: int) -> list[Sequence[Any]]:
    size = max(1, -(-len(items) // n))
    return [items[i : i + size] for i in range(0, len(items), size)]


class Ready(NamedTuple):
    """A batch whose stateless half is done (`Guard.prepare`)."""

    records: Sequence[Any]
    inputs: list[Input]
    checked: Checked
    #: the clock reading the batch is judged at, prechecks and decisions alike
    now_ms: int


class BatchSeal(NamedTuple):
    """What a batch's transaction sealed (`Guard._seal_in_transaction`)."""

    #: the new decisions' (decision_json, attestation), by id(decision)
    attested: dict[int, tuple[bytes, bytes]]
    #: batch mode: the tree over them and each one's leaf index
    tree: BatchTree | None
    leaf_at: dict[int, int]
    #: re-emitted decisions found under a persisted head
    reused: dict[int, Sealed]
    tip: ChainTip | None
    #: the persisted heads the batch's decisions were looked up under
    heads: Sequence[StoredHead] = ()


def find_leaf(leaves: bytes, leaf: bytes) -> int | None:
    """The index of the 32-byte hash `leaf` in concatenated `leaves`."""
    at = leaves.find(leaf)
    while at != -1 and at % HASH_BYTES:
        at = leaves.find(leaf, at + 1)
    return None if at == -1 else at // HASH_BYTES
