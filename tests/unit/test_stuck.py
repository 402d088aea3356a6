"""Partitions the broker will not move on (busguard/runtime/stuck.py): refetch
from the offset before, then skip one offset, never while the broker is
silent and never while the position moves. Pure: no clock, no broker."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.protocol.reasons import Reason
from busguard.runtime.stuck import Refetch, Rewound, Skip, StuckPartitions, unfetchable
from busguard.runtime.tolerant_fetch import FORM_BATCH, HEADER_ORIGINAL_FORM, preserved
from busguard.runtime.undecodable import next_offset


def test_a_position_that_does_not_move_below_the_end_is_refetched_then_skipped() -> None:
    s = StuckPartitions(after_s=2)
    assert s.observe("t", 0, 5, 9, 100, now=0) is None
    assert s.observe("t", 0, 5, 9, 101, now=1.9) is None
    assert s.observe("t", 0, 5, 9, 102, now=2) == Refetch("t", 0, 4, 5)
    assert s.observe("t", 0, 4, 9, 102, now=2.5) is None  # the refetch on its way
    assert s.observe("t", 0, 5, 9, 103, now=3.9) is None
    assert s.observe("t", 0, 5, 9, 104, now=4) == Skip("t", 0, 5, 9)
    assert len(s) == 0


def test_the_first_offset_of_a_log_is_skipped_without_a_refetch() -> None:
    s = StuckPartitions(after_s=2)
    s.observe("t", 0, 0, 3, 1, now=0)
    assert s.observe("t", 0, 0, 3, 2, now=2) == Skip("t", 0, 0, 3)


def test_no_skip_while_the_broker_has_not_answered_since_the_refetch() -> None:
    s = StuckPartitions(after_s=2)
    s.observe("t", 0, 5, 9, 100, now=0)
    assert isinstance(s.observe("t", 0, 5, 9, 100, now=2), Refetch)
    for t in (4, 40, 400):
        assert s.observe("t", 0, 5, 9, 100, now=t) is None  # leader away: nothing new from the broker
    assert s.observe("t", 0, 5, 9, 101, now=401) == Skip("t", 0, 5, 9)


@pytest.mark.parametrize("high", [None, 5, 4])
def test_a_partition_at_or_past_its_end_is_never_stuck(high: int | None) -> None:
    s = StuckPartitions(after_s=1)
    actions = [s.observe("t", 0, 5, high, t, now=t) for t in range(10)]
    assert actions == [Rewound("t", 0, 5, 4) if high == 4 and t == 0 else None for t in range(10)]
    assert len(s) == 0


def test_forget_drops_a_revoked_partition() -> None:
    s = StuckPartitions(after_s=1)
    s.observe("t", 0, 5, 9, 1, now=0)
    s.forget("t", 0)
    assert len(s) == 0 and s.observe("t", 0, 5, 9, 2, now=5) is None


def test_after_s_must_be_positive() -> None:
    with pytest.raises(ValueError, match="after_s"):
        StuckPartitions(after_s=0)


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.one_of(st.none(), st.integers(0, 8)), st.integers(0, 3)), max_size=40))
def test_no_action_unless_the_position_stood_still_below_the_end_for_after_s(steps: list[tuple[int, int | None, int]]) -> None:
    """Over any sequence of observations: a skip is always at the observed
    position, below the end, after at least after_s with that position (2 ×
    after_s when a refetch was possible); one entry at most per partition."""
    s = StuckPartitions(after_s=2)
    now, fetched, still_since, last_pos, floor = 0.0, 0, 0.0, -1, None
    for position, high, dt in steps:
        now += dt
        fetched += 1
        in_flight = floor is not None and position in (floor - 1, floor)  # the refetch's seek, and back
        if position != last_pos and not in_flight:
            still_since, last_pos, floor = now, position, None
        action = s.observe("t", 0, position, high, fetched, now)
        assert len(s) <= 1
        if action is None:
            continue
        if isinstance(action, Rewound):
            assert high is not None and (action.position, action.high_watermark) == (position, high) and position > high
            continue
        assert high is not None and position < high
        assert now - still_since >= 2
        if isinstance(action, Refetch):
            assert (action.start, action.floor) == (position - 1, position)
            floor = position
        else:
            assert action.offset == position or (floor is not None and (action.offset, position) == (floor, floor - 1))
            assert action.offset < high
            floor = None


def test_a_skipped_offset_is_one_span_of_one_that_carries_nothing() -> None:
    u = unfetchable(Skip("t", 2, 7, 99))
    assert (u.topic, u.partition, u.offset, u.reason, next_offset(u), u.last_offset) == ("t", 2, 7, Reason.UNDECODABLE_BATCH, 8, None)
    key, value, headers = preserved(u, 1 << 20)
    assert (key, value, dict(headers)[HEADER_ORIGINAL_FORM]) == (None, b"", FORM_BATCH.encode())
    assert "99" not in u.detail  # a re-decision after a crash says the same


def test_after_a_skip_the_next_offset_is_skipped_without_a_refetch() -> None:
    """An empty batch at the start of a log: no earlier offset answers, so each offset it claims costs after_s."""
    s = StuckPartitions(after_s=2)
    s.observe("t", 0, 0, 5, 1, now=0)
    assert s.observe("t", 0, 0, 5, 2, now=2) == Skip("t", 0, 0, 5)
    assert s.observe("t", 0, 1, 5, 3, now=2.1) is None
    assert s.observe("t", 0, 1, 5, 4, now=4.2) == Skip("t", 0, 1, 5)


def test_a_refetch_that_never_gets_back_to_the_position_skips_it() -> None:
    s = StuckPartitions(after_s=2)
    s.observe("t", 0, 5, 9, 1, now=0)
    assert s.observe("t", 0, 5, 9, 2, now=2) == Refetch("t", 0, 4, 5)
    assert s.observe("t", 0, 4, 9, 3, now=3) is None
    assert s.observe("t", 0, 4, 9, 4, now=4) == Skip("t", 0, 5, 9)


def test_a_log_end_below_the_position_is_said_once_per_reading() -> None:
    s = StuckPartitions(after_s=2)
    assert s.observe("t", 0, 17, 9, 1, now=0) == Rewound("t", 0, 17, 9)
    assert s.observe("t", 0, 17, 9, 2, now=5) is None
    assert s.observe("t", 0, 17, 10, 3, now=6) == Rewound("t", 0, 17, 10)
    assert s.observe("t", 0, 17, 17, 4, now=7) is None
