"""Values that flow through admission: inputs, decisions, state entries.

Everything here is a frozen msgspec Struct so it can be persisted, put on the
audit topic and compared byte for byte after a crash without custom code.
The per-record ones are `gc=False`: frozen and holding only immutable values,
they cannot form a reference cycle, so the cyclic collector has no reason to
walk the thousands of them a batch keeps alive.
`bytes` fields encode as standard base64 in JSON (msgspec's convention).
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Sequence
from typing import Final, Literal

import msgspec

from busguard.admission.window import DEFAULT_WINDOW_SIZE, WindowState

NonceScope = Literal["global", "principal"]
#: State keys. Built once per record (on its Candidate) and used as they are
#: by the batch's key set, its overlay and the stores.
NonceKey = tuple[str, str]
"""(scope, nonce): scope is "" (global) or the canonical principal."""
WindowKey = tuple[str, str]
"""(principal, session_id)"""
TaskKey = tuple[str, str]
"""(kind, task_id)"""
DECISION_ID_CONTEXT: Final = b"busguard/decision/v1\x00"
RECORD_CONTEXT: Final = b"busguard/record/v1\x00"


class Coordinates(msgspec.Struct, frozen=True, kw_only=True):
    """Where a record was read from; the identity of an input record."""

    topic: str
    partition: int
    offset: int


@functools.lru_cache(maxsize=4096)
def _partition_prefix(namespace: str, topic: str, partition: int) -> str:
    return hashlib.sha256(DECISION_ID_CONTEXT + f"{namespace}\x00{topic}\x00{partition}".encode()).hexdigest()[:16]


def decision_id(namespace: str, source: Coordinates) -> str:
    """Deterministic in the input position alone, so re-processing after a crash
    re-derives the same id and downstream consumers can dedupe on it.

    First 16 hex of SHA-256(context || namespace NUL topic NUL partition),
    then the offset as 16 hex digits: one hash per partition, not per record.
    """
    return _partition_prefix(namespace, source.topic, source.partition) + source.offset.to_bytes(8).hex()


def _field(data: bytes | None) -> bytes:
    return b"\x00" if data is None else b"\x01" + len(data).to_bytes(4) + data


def headers_encoding(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """An unambiguous encoding of a record's headers, in order: u32 count,
    then per header u32 name length, UTF-8 name, and its value as a field
    (0x00 for null, else 0x01, u32 length, bytes). Lengths are big-endian."""
    parts = [len(headers).to_bytes(4)]
    for name, value in headers:
        raw = name.encode()
        parts += (len(raw).to_bytes(4), raw, _field(value))
    return b"".join(parts)


_RECORD_HASH: Final = hashlib.sha256(RECORD_CONTEXT)
_flag_len: Final = struct.Struct(">BI").pack
_u32: Final = struct.Struct(">I").pack


def record_sha256(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> str:
    """The identity of an input record's bytes (key, value and headers), for
    telling the record a decision was made for from another one later found
    at the same position: the receipt alone does not cover the headers, and
    the value only through a hash the guard may never have reached.

    SHA-256 of RECORD_CONTEXT, F(key), F(value) and `headers_encoding`.
    Spelled out (one join, one update) because it runs per record."""
    h = _RECORD_HASH.copy()
    parts = [b"\x00" if key is None else _flag_len(1, len(key)), key or b"", b"\x00" if value is None else _flag_len(1, len(value)), value or b""]
    parts.append(_u32(len(headers)))
    for name, v in headers:
        raw = name.encode()
        parts += (_u32(len(raw)), raw, b"\x00" if v is None else _flag_len(1, len(v)), v or b"")
    h.update(b"".join(parts))
    return h.hexdigest()


class AdmissionPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """The knobs of the pure core. Validated by busguard.config at load."""

    namespace: str = "busguard"
    max_age_ms: int = 300_000
    max_future_ms: int = 30_000
    nonce_retention_ms: int = 600_000
    nonce_scope: NonceScope = "global"
    window_size: int = DEFAULT_WINDOW_SIZE
    session_retention_ms: int = 7 * 24 * 3600 * 1000
    task_retention_ms: int = 7 * 24 * 3600 * 1000
    decision_retention_ms: int = 7 * 24 * 3600 * 1000


class TaskEntry(msgspec.Struct, frozen=True, gc=False):
    """The first admitted receipt for a (kind, task_id): the task's witness.

    Not kw_only, like `Decision`: msgspec builds a struct from positional
    arguments about seven times faster than from keywords, and these are
    built for every admitted record. Keyword construction still works."""

    kind: str
    task_id: str
    receipt_id: str
    decision_id: str
    principal: str
    nonce: str
    payload_hash: str
    session_id: str | None
    sequence: int | None
    source: Coordinates
    receipt: bytes
    signature: bytes
    admitted_at: int


class Decision(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, tag_field="type", tag="decision"):
    """One per input record. Everything reconciliation and audit need is here,
    so neither has to consult busguard's private state. Tagged (`"type":
    "decision"`) because the audit topic also carries resolutions. Built
    positionally on the hot path (decide._decision): keep the field order.
    `record_sha256` (set by admit_batch) names the exact input record, so a
    decided position re-emits its decision only for that record; None in
    decisions stored before it existed."""

    decision_id: str
    outcome: str
    reason: str
    source: Coordinates
    decided_at: int
    detail: str = ""
    receipt_id: str | None = None
    kind: str | None = None
    task_id: str | None = None
    sender: str | None = None
    principal: str | None = None
    receiver: str | None = None
    nonce: str | None = None
    session_id: str | None = None
    sequence: int | None = None
    payload_hash: str | None = None
    issued_at: str | None = None
    key_id: str | None = None
    public_key: bytes | None = None
    receipt: bytes | None = None
    signature: bytes | None = None
    supersedes: str | None = None
    prior: TaskEntry | None = None
    record_sha256: str | None = None


class NonceRecord(msgspec.Struct, frozen=True, gc=False):
    key: NonceKey
    expires_at: int


class WindowRecord(msgspec.Struct, frozen=True, gc=False):
    key: WindowKey
    state: WindowState
    expires_at: int


class Effects(msgspec.Struct, frozen=True, gc=False):  # positional on the hot path: keep the order
    """State changes one decision asks for; applied by the shell, atomically
    with the decision itself."""

    nonce: NonceRecord | None = None
    window: WindowRecord | None = None
    task: TaskEntry | None = None


NO_EFFECTS: Final = Effects()
