"""The batch audit record: many batch-sealed decisions in one audit record.

With `[batch] audit = "batch"` the guard writes, instead of one audit record
per decision, one record per (tree head, input topic, input partition),
split where the producer's batch size would overflow (docs/protocol.md
12.7). Why: the audit record was half of everything the guard produced,
and each one paid its own record framing, its own copy of the tree head
and head seal, and its own trip through the producer's batch builder.

The record's headers name the format (`busguard-audit-batch: 1`) and carry
the tree head and its seal once; its value is a msgpack array of entries,
each `[decision, attestation, inclusion]` (three msgpack bin values: the
decision's JSON bytes, its attestation, its `busguard-inclusion` proof),
in leaf-index order. An entry is exactly the per-record audit record it
replaces: `expand` turns each back into that record's value and headers,
so every check of a per-record audit record applies to it unchanged, and
an old log (per-record only) reads as it always did.

Pure: no I/O. `pack` is deterministic, so a group re-emitted after a crash
is byte-identical (runtime/auditgroups.py pins a group's members).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

import msgspec

from busguard.protocol.attestation import HEADER_ATTESTATION
from busguard.protocol.treehead import HEADER_HEAD_SEAL, HEADER_INCLUSION, HEADER_TREE_HEAD, MAX_LEAVES

HEADER_AUDIT_BATCH: Final = "busguard-audit-batch"
AUDIT_BATCH_VERSION: Final = b"1"


class Entry(NamedTuple):
    """One decision in a batch audit record."""

    decision: bytes
    attestation: bytes
    inclusion: bytes


class AuditBatchError(ValueError):
    """A record that says it is a batch audit record and is not a well-formed one."""


_encode: Final = msgspec.msgpack.Encoder().encode
_decode: Final = msgspec.msgpack.Decoder(list[tuple[bytes, bytes, bytes]]).decode


def batch_headers(head: bytes, head_seal: bytes) -> list[tuple[str, bytes]]:
    """The headers of a batch audit record, in the order every writer uses."""
    return [(HEADER_AUDIT_BATCH, AUDIT_BATCH_VERSION), (HEADER_TREE_HEAD, head), (HEADER_HEAD_SEAL, head_seal)]


def pack(entries: Sequence[Entry]) -> bytes:
    """The record's value."""
    return _encode(entries)


def entry_size(e: Entry) -> int:
    """An upper bound of `e`'s bytes in `pack`'s output: the three values,
    a 5-byte bin length prefix each (msgpack's longest) and the entry's
    1-byte array header."""
    return len(e.decision) + len(e.attestation) + len(e.inclusion) + 16


#: An upper bound of `pack`'s own framing: the outer array's longest header.
PACK_OVERHEAD: Final = 5


def is_batch(headers: Sequence[tuple[str, bytes | None]]) -> bool:
    """Whether a record claims to be a batch audit record (any value of the header)."""
    return any(k == HEADER_AUDIT_BATCH for k, _ in headers)


def expand(value: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    """Each entry as the per-record audit record it stands for: (value,
    headers) with `busguard-attestation`, `busguard-tree-head`,
    `busguard-head-seal` and `busguard-inclusion`. Checks only the form
    (the seal and the proofs are the per-record checks' job, run on what
    this returns); AuditBatchError names what is wrong.

    >>> v = pack([Entry(b'{"d":1}', b'{"a":1}', b"\\0\\0\\0\\0")])
    >>> [(d, [k for k, _ in h]) for d, h in expand(v, batch_headers(b"{}", b"sig"))]
    [(b'{"d":1}', ['busguard-attestation', 'busguard-tree-head', 'busguard-head-seal', 'busguard-inclusion'])]
    """
    found: dict[str, list[bytes | None]] = {}
    for k, v in headers:
        if k in _BATCH_HEADERS:
            found.setdefault(k, []).append(v)
    versions = found.get(HEADER_AUDIT_BATCH, [])
    if versions != [AUDIT_BATCH_VERSION]:
        shown = [v[:16] if v is not None else None for v in versions[:3]]
        raise AuditBatchError(f"{HEADER_AUDIT_BATCH} must appear once with value {AUDIT_BATCH_VERSION!r}, got {shown}")
    heads, seals = found.get(HEADER_TREE_HEAD, []), found.get(HEADER_HEAD_SEAL, [])
    if len(heads) != 1 or len(seals) != 1 or heads[0] is None or seals[0] is None:
        raise AuditBatchError(f"a batch audit record needs exactly one {HEADER_TREE_HEAD} and one {HEADER_HEAD_SEAL} header")
    if found.keys() & {HEADER_ATTESTATION, HEADER_INCLUSION}:
        raise AuditBatchError(f"a batch audit record carries no {HEADER_ATTESTATION} or {HEADER_INCLUSION} header of its own")
    if value is None:
        raise AuditBatchError("a batch audit record has no value")
    try:
        entries = _decode(value)
    except msgspec.MsgspecError as exc:
        raise AuditBatchError(f"the value is not a msgpack array of [decision, attestation, inclusion] bin triples: {exc}") from None
    if not 1 <= len(entries) <= MAX_LEAVES:
        raise AuditBatchError(f"a batch audit record holds 1 to {MAX_LEAVES} entries, this one {len(entries)}")
    head, seal = heads[0], seals[0]
    return [
        (decision, [(HEADER_ATTESTATION, att), (HEADER_TREE_HEAD, head), (HEADER_HEAD_SEAL, seal), (HEADER_INCLUSION, inclusion)])
        for decision, att, inclusion in entries
    ]


def audit_records_of(
    value: bytes | None, headers: Sequence[tuple[str, bytes | None]]
) -> list[tuple[bytes | None, list[tuple[str, bytes]]]]:
    """The per-record audit records one audit-topic record stands for: a
    batch audit record's entries, else the record itself (for readers that
    count or decode decisions and need not care which form the guard wrote).
    AuditBatchError for a malformed batch audit record."""
    if is_batch(headers):
        return list(expand(value, headers))
    return [(value, [(k, v if v is not None else b"") for k, v in headers])]


_BATCH_HEADERS: Final = frozenset({HEADER_AUDIT_BATCH, HEADER_TREE_HEAD, HEADER_HEAD_SEAL, HEADER_ATTESTATION, HEADER_INCLUSION})
