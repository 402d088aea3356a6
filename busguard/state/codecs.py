"""Encodings shared by the backends, so two backends of one deployment store
the same bytes for the same value (and a later backend can read an export of
an earlier one)."""

from __future__ import annotations

from typing import Final

import msgspec

from busguard.protocol.records import Decision, TaskEntry

decision_decoder: Final = msgspec.msgpack.Decoder(Decision)
#: A run of decisions (SQLite's `decision_runs.body`): a msgpack array whose
#: elements are exactly the bytes `encode(decision)` gives each one.
run_decoder: Final = msgspec.msgpack.Decoder(list[Decision])
task_decoder: Final = msgspec.msgpack.Decoder(TaskEntry)
encode: Final = msgspec.msgpack.Encoder().encode


def bitmap_bytes(bitmap: int) -> bytes:
    """A window bitmap as big-endian bytes (at least one)."""
    return bitmap.to_bytes((bitmap.bit_length() + 7) // 8 or 1, "big")


def bitmap_int(raw: bytes) -> int:
    return int.from_bytes(raw, "big")
