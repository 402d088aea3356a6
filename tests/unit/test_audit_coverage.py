"""busguard.audit.coverage: the auditor accounts for every input offset. A
span decision (an undecodable batch, docs/protocol.md 2.1) covers its whole
range; logs with one decision per offset audit as before; two decisions on
one offset, or an offset between decided ones with none, are findings."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from busguard.audit.ledger import DecisionFact, Ledger
from busguard.audit.lineage import judge
from busguard.protocol.attestation import decision_bytes
from busguard.protocol.records import Coordinates, Decision, decision_id


def _d(offset: int, last: int | None = None, *, topic: str = "agents.in", partition: int = 0, namespace: str = "busguard") -> Decision:
    source = Coordinates(topic=topic, partition=partition, offset=offset)
    return Decision(decision_id(namespace, source), "reject", "undecodable_batch", source, 7, "CRC-32C mismatch", last_offset=last)


def _report(*decisions: Decision):  # type: ignore[no-untyped-def]
    led = Ledger()
    for d in decisions:
        led.add_decision(decision_bytes(d), d, True)
    return judge(led)


def _codes(report) -> list[str]:  # type: ignore[no-untyped-def]
    return [v.invariant for v in report.violations]


def test_a_span_decision_covers_its_whole_range_and_the_log_audits_clean() -> None:
    report = _report(_d(0), _d(1, 2**31 - 1), _d(2**31), _d(2**31 + 1))
    assert report.ok and _codes(report) == []
    (cov,) = report.inputs
    assert (cov.first, cov.last, cov.offsets, cov.decisions, cov.spans, cov.undecided, cov.overlapping) == (
        0,
        2**31 + 1,
        2**31 + 2,
        4,
        1,
        0,
        0,
    )


def test_an_old_log_with_one_decision_per_offset_audits_clean() -> None:
    report = _report(*(_d(o) for o in range(10, 30)))
    assert report.ok
    (cov,) = report.inputs
    assert (cov.first, cov.last, cov.offsets, cov.decisions, cov.spans) == (10, 29, 20, 20, 0)


def test_decisions_that_overlap_a_span_are_a_finding() -> None:
    span, inside = _d(5, 20), _d(9)
    report = _report(_d(4), span, inside, _d(21))
    assert _codes(report) == ["offsets_overlap"] and not report.ok
    assert report.violations[0].decision_id == inside.decision_id and "covers 9-9" in report.violations[0].detail
    assert report.inputs[0].overlapping == 1 and report.inputs[0].offsets == 18
    # two spans that overlap, whichever arrives first
    assert _codes(_report(_d(0, 10), _d(8, 12))) == ["offsets_overlap"] == _codes(_report(_d(8, 12), _d(0, 10)))


def test_an_undecided_offset_between_decided_ones_is_a_finding() -> None:
    report = _report(_d(0), _d(1, 9), _d(12), _d(20, 29))
    assert _codes(report) == ["offsets_undecided"]
    assert report.violations[0].detail == "agents.in/0: 9 offset(s) between decided ones have no decision: 10-11, 13-19"
    assert report.inputs[0].undecided == 9 and report.inputs[0].offsets == 21


def test_partitions_and_topics_are_accounted_separately_and_the_ends_prove_nothing() -> None:
    # each partition starts where its first decision is and ends at its last
    report = _report(_d(100, 199, partition=0), _d(200, partition=0), _d(3, partition=1), _d(0, 5, topic="other.in"))
    assert report.ok
    assert [(c.topic, c.partition, c.first, c.last, c.offsets) for c in report.inputs] == [
        ("agents.in", 0, 100, 200, 101),
        ("agents.in", 1, 3, 3, 1),
        ("other.in", 0, 0, 5, 6),
    ]


def test_a_re_emitted_span_counts_once() -> None:
    d = _d(0, 99)
    report = _report(d, d, _d(100))
    assert report.ok and report.summary.decisions == 2 and report.inputs[0].offsets == 101


def test_a_checkpoint_written_before_spans_reads_back() -> None:
    old = msgspec.msgpack.encode(
        [
            "id",
            "sha",
            "reject",
            "bad_signature",
            {"topic": "t", "partition": 0, "offset": 3},
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
        ]
    )
    fact = msgspec.msgpack.decode(old, type=DecisionFact)
    assert fact.last_offset is None and fact.source.offset == 3


@given(st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=40), st.randoms(use_true_random=False))
def test_any_tiling_of_a_partition_by_spans_audits_clean_in_any_order(lengths: list[int], rnd) -> None:  # type: ignore[no-untyped-def]
    decisions, at = [], 0
    for n in lengths:
        decisions.append(_d(at, at + n - 1 if n > 1 else None))
        at += n
    rnd.shuffle(decisions)
    report = _report(*decisions)
    assert report.ok and report.inputs[0].offsets == at == sum(lengths)
    # remove one decision from inside: its offsets are undecided
    if len(decisions) >= 3:
        ordered = sorted(decisions, key=lambda d: d.source.offset)
        gone = ordered[1]
        report = _report(*(d for d in decisions if d is not gone))
        assert _codes(report) == ["offsets_undecided"] and report.inputs[0].undecided == gone.covers_to - gone.source.offset + 1
