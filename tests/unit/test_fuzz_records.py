"""The record-level fuzz campaign, bounded for CI (the full run is
`python -m tests.fuzz.fuzz_records --records 1000000`): Hypothesis-built
fetches of arbitrary records and mutated batches through aiokafka's fetcher
with the tolerant hook and the guard's whole decide step, plus a short run of
the campaign's own generator."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.batches import batch, fix_crc, record
from tests.fuzz.campaign import Campaign, Stats
from tests.fuzz.generator import Batch, Generator

_names = st.one_of(st.binary(max_size=12), st.sampled_from([b"busguard-receipt", b"busguard-signature", b"\xff", b"\xc3\x28", b"ok"]))
_headers = st.lists(st.tuples(_names, st.one_of(st.none(), st.binary(max_size=40))), max_size=5)
_record = st.tuples(st.one_of(st.none(), st.binary(max_size=8)), st.one_of(st.none(), st.binary(max_size=64)), _headers)
_mutation = st.lists(st.tuples(st.integers(min_value=12, max_value=4096), st.integers(min_value=1, max_value=255)), max_size=6)


@pytest.fixture(scope="module")
def campaign() -> Iterator[Campaign]:
    camp = Campaign()
    camp.next_base = 0  # every example reads new offsets: a store keeps decisions by position
    yield camp
    camp.close()


def _clean(camp: Campaign) -> None:
    s = camp.stats
    assert (s.crashes, s.missing, s.duplicates, s.valid_not_admitted, s.crash_samples) == (0, 0, 0, 0, []), s


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    spec=st.lists(
        st.tuples(
            st.lists(st.one_of(st.just("valid"), _record), min_size=1, max_size=6),
            st.sampled_from([0, 1, 2, 3, 4]),
            _mutation,
            st.booleans(),
        ),
        min_size=1,
        max_size=3,
    ),
    skip=st.integers(min_value=0, max_value=3),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_any_fetch_gets_exactly_one_decision_per_offset(
    campaign: Campaign, spec: list[tuple[list[object], int, list[tuple[int, int]], bool]], skip: int, seed: int
) -> None:
    gen = Generator(campaign, random.Random(seed))
    campaign.stats = Stats()
    base = campaign.next_base
    campaign.next_base += 100
    batches = []
    for recs, codec, flips, crc in spec:
        encoded, valid = [], set()
        for i, r in enumerate(recs):
            key, value, headers = gen.valid() if r == "valid" else r  # type: ignore[misc]
            if r == "valid":
                valid.add(base + i)
            encoded.append(record(i, key, value, headers))
        raw = bytearray(batch(encoded, base_offset=base, codec=codec))
        for pos, xor in flips:
            if pos < len(raw):
                raw[pos] ^= xor
        mutated = any(pos < len(raw) for pos, _ in flips)
        batches.append(Batch(fix_crc(raw) if crc else bytes(raw), base, len(recs), not mutated, valid if not mutated else set()))
        base += len(recs)
    fetch_offset = batches[0].base + min(skip, batches[0].span - 1)
    campaign.next_base = max(campaign.next_base, campaign.decide_fetch(batches, fetch_offset))
    _clean(campaign)


def test_a_short_run_of_the_campaign_generator(campaign: Campaign) -> None:
    gen = Generator(campaign, random.Random(8))
    campaign.stats = Stats()
    base = campaign.next_base
    while campaign.stats.decided < 1500:
        batches, fetch_offset, base = gen.fetch(base)
        base = max(base, campaign.decide_fetch(batches, fetch_offset))
    campaign.next_base = base
    _clean(campaign)
    assert {"admitted", "undecodable_batch", "undecodable_header"} <= set(campaign.stats.reasons)


def test_claimed_spans_cost_one_decision_and_bounded_output_whatever_they_claim(campaign: Campaign) -> None:
    gen = Generator(campaign, random.Random(19))
    campaign.stats = Stats()
    base = campaign.next_base
    for _ in range(40):
        b = gen.claimed_span(base)
        end = campaign.decide_fetch([b], base)
        assert end == base + b.span  # the position moves past the whole claim
        base = end
    campaign.next_base = base
    s = campaign.stats
    _clean(campaign)
    # one span item per batch (with the CRC fixed, its one record may decode before it), never the per-fetch cap
    assert 40 <= s.decided <= 80 and s.truncated == 0
    assert s.spans >= 20 and s.span_offsets > 2**31  # most claims are spans, some of 2^31 offsets
    assert 0 < s.max_output_bytes < 8192  # one reject and its audit record, whatever the claim
