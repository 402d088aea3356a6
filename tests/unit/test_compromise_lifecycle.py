"""lifecycle.standing: no choice of the receipt's `issued_at` takes a handoff out from under a notice."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from busguard.policies.compromise.lifecycle import NoticeEntry, Standing, standing
from busguard.protocol.timestamps import format_timestamp
from tests.unit import compromise_kit as kit
from tests.unit.compromise_kit import NOW

START, END = NOW - 60_000, NOW + 60_000
ENTRY = NoticeEntry(notice=msgspec.structs.replace(kit.notice("n-1", compromised_from=START), expires_at=format_timestamp(END)))
times = st.integers(min_value=NOW - 10 * 86_400_000, max_value=NOW + 10 * 86_400_000)


@given(clock=st.integers(min_value=START, max_value=END - 1), receipt=times)
def test_while_the_guard_clock_is_inside_the_notice_any_issued_at_is_under_it(clock: int, receipt: int) -> None:
    assert standing(ENTRY, receipt, clock) is Standing.IN_FORCE


@given(receipt=st.integers(min_value=START, max_value=END - 1), clock=times)
def test_while_the_receipt_time_is_inside_the_notice_any_guard_clock_is_under_it(receipt: int, clock: int) -> None:
    assert standing(ENTRY, receipt, clock) is Standing.IN_FORCE


@given(a=st.integers(min_value=END, max_value=END + 86_400_000), b=st.integers(min_value=END, max_value=END + 86_400_000))
def test_only_with_both_instants_past_the_expiry_has_it_expired(a: int, b: int) -> None:
    assert standing(ENTRY, a, b) is Standing.EXPIRED
    cleared = msgspec.structs.replace(ENTRY, cleared_at=format_timestamp(START), cleared_by="r")
    assert standing(cleared, a, b) is Standing.CLEARED  # the issuer's word is reported over the expiry


def test_before_the_start_by_both_instants_it_has_not_begun() -> None:
    assert standing(ENTRY, START - 1, START - 2) is Standing.NOT_YET
