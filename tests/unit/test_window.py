"""The sequence window against a plain set-based reference model."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.admission import window as win


class Reference:
    """Remembers every accepted number; judges exactly what the window promises."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.seen: set[int] = set()

    def offer(self, seq: int) -> win.Verdict:
        top = max(self.seen, default=None)
        if top is not None and seq <= top - self.size:
            return win.Verdict.TOO_OLD
        if seq in self.seen:
            return win.Verdict.REPLAY
        self.seen.add(seq)
        return win.Verdict.NEW


@settings(max_examples=400, deadline=None)
@given(size=st.integers(1, 70), seqs=st.lists(st.integers(0, 300), max_size=200))
def test_window_matches_reference(size: int, seqs: list[int]) -> None:
    ref = Reference(size)
    state: win.WindowState | None = None
    for seq in seqs:
        verdict = win.check(state, seq, size)
        assert verdict == ref.offer(seq)
        if verdict is win.Verdict.NEW:
            state = win.record(state, seq, size)
        assert state is None or state.bitmap < (1 << size)  # O(1) memory


@given(st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=50))
def test_huge_sequence_numbers_keep_bitmap_bounded(seqs: list[int]) -> None:
    state: win.WindowState | None = None
    for seq in seqs:
        if win.check(state, seq) is win.Verdict.NEW:
            state = win.record(state, seq)
    assert state is not None and state.bitmap.bit_length() <= win.DEFAULT_WINDOW_SIZE


def test_each_number_accepted_once_in_any_order() -> None:
    state = None
    for seq in [5, 3, 4, 1, 2, 0]:
        assert win.check(state, seq, 8) is win.Verdict.NEW
        state = win.record(state, seq, 8)
    assert all(win.check(state, s, 8) is win.Verdict.REPLAY for s in range(6))
