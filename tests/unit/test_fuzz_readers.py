"""The readers' fuzz campaign, bounded for CI (the full run is
`python -m tests.fuzz.fuzz_readers --records 1000000`): the shared hostile
generator and hostile variants of genuine sealed records on the downstream,
reconciliation and audit topics, through the tolerant fetcher and each
reader's own step (tests/fuzz/readers.py)."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from tests.fuzz.readers import Readers


@pytest.fixture(scope="module")
def readers() -> Iterator[Readers]:
    camp = Readers(random.Random(35))
    while camp.stats.total < 4000:
        camp.round()
    camp.finish()
    yield camp
    camp.close()


def test_no_reader_crashes_or_stalls_and_every_item_has_one_outcome(readers: Readers) -> None:
    s = readers.stats
    assert (s.crashes, s.stalls, s.outcome_violations, s.samples) == (0, 0, 0, []), s
    assert min(s.put.values()) > 500 and all(s.items[t] > 0 for t in ("downstream", "reconciliation", "audit"))


def test_every_genuine_task_is_acted_on_exactly_once_and_nothing_else(readers: Readers) -> None:
    s = readers.stats
    assert s.genuine_tasks > 100 and s.acted >= s.genuine_tasks
    assert (s.acted_twice, s.acted_not_genuine, s.genuine_missed) == (0, 0, 0)
    assert all(n == 1 for n in readers.acted.values())
    # copies were delivered and skipped, hostile records refused for each reason
    assert s.outcomes["downstream:delivered"] > s.acted
    assert {"downstream:unattested", "downstream:undecodable", "downstream:not_for_me"} <= set(s.outcomes)


def test_genuine_escalations_are_judged_and_genuine_audit_records_verify(readers: Readers) -> None:
    s = readers.stats
    assert s.genuine_escalations > 10 and s.escalations_dead_lettered == 0
    assert {"reconciliation:held", "reconciliation:bad_seal", "reconciliation:undecodable_batch"} <= set(s.outcomes)
    assert s.genuine_audit > 100 and s.genuine_audit_unverified == 0
    assert {"audit:verified", "audit:unreadable", "audit:batch record of n entries"} <= set(s.outcomes)
    assert s.findings["forged_record"] > 0  # the audit's judgement ran over what it read
