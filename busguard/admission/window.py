"""Sliding anti-replay window over sequence numbers (RFC 4303 §3.4.3 style).

State per (principal, session) is two integers: `top`, the highest sequence
accepted so far, and `bitmap`, where bit i set means `top - i` was accepted.
Bit 0 is always `top`. Memory per session is O(window size / 8) bytes,
independent of traffic, and both operations are a few integer ops: this runs
on the hot path for every session-carrying record.

A number above `top` slides the window; a number inside it is accepted once;
a number at or left of `top - size + 1`'s left edge is too old to judge and is
refused, because its bit has been forgotten.
"""

from __future__ import annotations

import enum
from typing import Final

from busguard.state.snapshot import WindowState

DEFAULT_WINDOW_SIZE: Final = 1024


class Verdict(enum.Enum):
    NEW = "new"
    REPLAY = "replay"
    TOO_OLD = "too_old"


def slide(state: WindowState | None, seq: int, size: int = DEFAULT_WINDOW_SIZE) -> WindowState | Verdict:
    """The window after accepting `seq`, or why it cannot be accepted
    (`Verdict.REPLAY` / `Verdict.TOO_OLD`): one call on the hot path."""
    if state is None:
        return WindowState(seq, 1)
    top = state.top
    if seq > top:
        shift = seq - top
        return WindowState(seq, 1 if shift >= size else ((state.bitmap << shift) | 1) & ((1 << size) - 1))
    offset = top - seq
    if offset >= size:
        return Verdict.TOO_OLD
    if (state.bitmap >> offset) & 1:
        return Verdict.REPLAY
    return WindowState(top, state.bitmap | (1 << offset))


def check(state: WindowState | None, seq: int, size: int = DEFAULT_WINDOW_SIZE) -> Verdict:
    after = slide(state, seq, size)
    return after if isinstance(after, Verdict) else Verdict.NEW


def record(state: WindowState | None, seq: int, size: int = DEFAULT_WINDOW_SIZE) -> WindowState:
    """Mark `seq` seen. Call only after `check` returned NEW."""
    after = slide(state, seq, size)
    if isinstance(after, Verdict):
        raise ValueError(f"sequence {seq} cannot be recorded: {after.value}")
    return after
