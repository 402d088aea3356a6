"""busguard.audit.reach: when a partition counts as read to its end, and
what a read that could not prove it leaves as findings."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.audit.reach import EMPTY_ANSWERS, MAX_UNSERVED, PartitionRead, Reach, Step, findings, merge, ranges


def _reach(start: int = 0, end: int = 10) -> Reach:
    return Reach("audit", 1, start, end)


def test_a_partition_is_done_when_its_position_reaches_the_end_not_when_it_goes_quiet() -> None:
    r = _reach(end=10)
    assert r.observe(4, 4, True, 10) is Step.READ
    for _ in range(EMPTY_ANSWERS - 1):  # answers without records below the end are not the end
        assert r.observe(4, 0, True, 10) is Step.READ
    assert r.observe(4, 0, False, 10) is Step.READ  # nothing was answered: nothing is counted
    assert r.observe(10, 6, True, 10) is Step.DONE
    assert r.result() == PartitionRead(topic="audit", partition=1, start=0, position=10, end=10, records=10)
    assert findings([r.result()]) == []


def test_the_first_answers_high_watermark_raises_a_low_end_and_a_checkpoint_position_is_already_read() -> None:
    r = _reach(end=32)  # tansu's ListOffsets after batches of 10,10,10,1,5: the last batch's base + 1
    assert r.observe(10, 10, True, 36) is Step.READ and r.end == 36
    assert r.observe(20, 10, True, 99) is Step.READ and r.end == 36  # only the first answer's
    assert r.observe(36, 36, True, 36) is Step.DONE
    resumed = Reach("audit", 1, 40, 31)  # a checkpoint's position, past tansu's ListOffsets
    assert resumed.end == 40 and not resumed.settled  # settled only once an answer confirms it
    assert resumed.observe(40, 0, True, 40) is Step.DONE and findings([resumed.result()]) == []


def test_a_high_watermark_below_what_was_read_is_a_rewound_partition_and_stays_one() -> None:
    resumed = Reach("down", 3, 10, 4)  # tansu after a batch with last offset delta -9: offsets 2, 3 given out again
    assert resumed.observe(10, 0, True, 4) is Step.STOP and resumed.settled
    got = resumed.result()
    assert got.rewound == (4, 10) and got.position == 10
    assert findings([got]) == [
        (
            "offsets_rewound",
            "down/3: the broker's high watermark 4 is below offset 10, which the audit had read to: it gave out offsets again "
            "(or lost the log), and what it holds below 10 now was not read; audit without the checkpoint",
        )
    ]
    later = Reach("down", 3, 10, 12)
    later.observe(12, 2, True, 12)
    assert later.result().rewound is None and merge(got, later.result()).rewound == (4, 10)
    live = _reach(end=10)
    live.observe(8, 8, True, 10)
    assert live.observe(8, 0, True, 3) is Step.STOP and live.result().rewound == (3, 8)


def test_an_offset_the_broker_answers_nothing_at_is_stepped_over_and_named() -> None:
    r = _reach(end=3)
    steps = [r.observe(0, 0, True, 3) for _ in range(EMPTY_ANSWERS)]
    assert steps[-1] is Step.SKIP and set(steps[:-1]) <= {Step.READ} and r.position == 1
    assert r.observe(3, 2, True, 3) is Step.DONE
    got = r.result()
    assert got.unserved == [(0, 0)] and got.unfinished is None and got.records == 2
    assert findings([got]) == [
        (
            "offsets_unserved",
            "audit/1: the broker answered every fetch at 1 offset(s) below the partition's end with nothing (0); "
            "they were stepped over, so whatever they hold was not read",
        )
    ]


def test_progress_resets_the_count_of_empty_answers() -> None:
    r = _reach(end=10)
    for _ in range(EMPTY_ANSWERS - 1):
        r.observe(0, 0, True, 10)
    assert r.observe(5, 5, True, 10) is Step.READ
    for _ in range(EMPTY_ANSWERS - 1):
        assert r.observe(5, 0, True, 10) is Step.READ
    assert r.observe(5, 0, True, 10) is Step.SKIP and r.unserved == [5]


def test_a_high_watermark_at_the_position_below_the_end_stops_the_partition_unfinished() -> None:
    r = _reach(end=10)
    r.observe(4, 4, True, 10)
    steps = [r.observe(4, 0, True, 4) for _ in range(EMPTY_ANSWERS)]
    assert steps[-1] is Step.STOP and r.settled and r.unserved == []
    got = r.result()
    assert got.unfinished is not None and "high watermark 4" in got.unfinished
    ((code, detail),) = findings([got])
    assert code == "partition_unfinished"
    assert detail == f"audit/1: read from 0 to 4, not proven to the end offset 10: {got.unfinished}"
    assert r.observe(10, 6, True, 10) is Step.STOP  # stopped stays stopped


def test_at_most_max_unserved_offsets_are_stepped_over_in_one_read() -> None:
    end = MAX_UNSERVED + 50
    r = _reach(end=end)
    skips = 0
    while not r.settled:
        skips += r.observe(r.position, 0, True, end) is Step.SKIP
    assert skips == MAX_UNSERVED and r.position == MAX_UNSERVED
    got = r.result()
    assert got.unserved == [(0, MAX_UNSERVED - 1)]
    assert [f.code for f in findings([got])] == ["offsets_unserved", "partition_unfinished"]


def test_stopping_a_partition_at_its_end_is_no_finding() -> None:
    r = _reach(end=3)
    r.observe(3, 3, True, 3)
    assert r.stop("fetch error: KafkaError") is Step.DONE and r.result().unfinished is None
    cut = _reach(end=3)
    assert cut.stop("fetch error: KafkaError") is Step.STOP
    assert cut.result().unfinished == "fetch error: KafkaError"


def test_merge_keeps_the_first_start_sums_records_and_unions_unserved_offsets() -> None:
    before = PartitionRead(topic="d", partition=0, start=0, position=5, end=5, records=4, unserved=[(2, 2)])
    now = PartitionRead(topic="d", partition=0, start=5, position=9, end=9, records=3, unserved=[(3, 3), (6, 7)])
    assert merge(before, now) == PartitionRead(topic="d", partition=0, start=0, position=9, end=9, records=7, unserved=[(2, 3), (6, 7)])
    assert merge(None, now) is now
    unfinished = PartitionRead(topic="d", partition=0, start=9, position=9, end=12, records=0, unfinished="x")
    assert merge(now, unfinished).unfinished == "x"
    assert ranges([5, 1, 2, 3, 9, 5]) == [(1, 3), (5, 5), (9, 9)]


# -- a model broker ---------------------------------------------------------------------
#
# A partition of `end` offsets, each one a record, a hole (no record, but a
# fetch at it is served from the next record on, like the offsets a lying
# batch claims) or stuck (a fetch at it is answered with nothing, like
# tansu's empty batch). A served fetch at P hands out the records in
# [P, P + span) and moves the position there, as a size-limited fetch does.


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["record", "record", "hole", "stuck"]), max_size=60),
    st.integers(1, 8),
    st.integers(0, 3),
)
def test_a_read_without_findings_read_every_record_and_none_is_missed_silently(kinds: list[str], span: int, quiet: int) -> None:
    end = len(kinds)
    r = Reach("t", 0, 0, end)
    position, read = 0, set()
    for _ in range(10_000):
        if r.settled:
            break
        for _ in range(quiet):  # polls during which no answer came in
            r.observe(position, 0, False, None)
        if position >= end or kinds[position] == "stuck":
            got: list[int] = []
        else:
            got = [o for o in range(position, min(end, position + span)) if kinds[o] == "record"]
            position = min(end, position + span)
        read |= set(got)
        if r.observe(position, len(got), True, end) is Step.SKIP:
            position = r.position
    assert r.settled
    result = r.result()
    stepped = {o for lo, hi in result.unserved for o in range(lo, hi + 1)}
    records = {o for o, k in enumerate(kinds) if k == "record"}
    # every record was read, or stepped over (a finding), or lies past where an unfinished read stopped (a finding)
    assert records <= read | stepped | set(range(result.position, end))
    assert stepped <= {o for o, k in enumerate(kinds) if k == "stuck"}
    if not findings([result]):
        assert records <= read and result.position >= end
    assert result.records == len(read)
