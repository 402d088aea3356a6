"""How far the audit read each partition it reads, and whether that was to the end. Pure.

An audit proves nothing about records it did not read, so it must know
where each partition it reads (the audit topic, every route's downstream
topic) ends and show that it got there. When a read starts, each
partition's end offset is recorded (`end`: ListOffsets(latest), raised to
the position a checkpoint resumes from and to the high watermark of the
first fetch answer, because tansu's ListOffsets answers the base offset of
the last batch + 1, docs/notes-broker.md); the partition is finished when
the reader's position reaches it. Not when
nothing new arrives for a while: a broker that answers every fetch at some
offset with nothing (tansu after an empty record batch) looks exactly like
the end of the log to a reader that waits for silence.

`Reach` is one partition's progress, fed one observation per poll. A fetch
answer that brings nothing while the broker's high watermark is above the
position is an *empty answer*; after `EMPTY_ANSWERS` of them in a row at
one position the offset is *unserved*: the reader steps over it (to the
next offset) and the offset is a finding, so nothing behind it stays
unread and nothing in it is taken for read. A partition that cannot be
finished (more than `MAX_UNSERVED` unserved offsets in one read, the high
watermark at the position but under the end, a fetch error, no fetch
answer within the reader's time bound) is *unfinished*, a finding that
names where it stopped and why. A partition counts as done only once a
fetch answer has come in for it, even when it starts at its end: a high
watermark below what the audit already read (tansu gives offsets out again
after a batch with a negative last offset delta, docs/notes-broker.md) is
*rewound*, a finding, and a checkpoint's position is not trusted past it.

`PartitionRead` is what a read leaves in the ledger (and so in a
checkpoint): accumulated over runs by `merge`, judged by `findings`.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Final, NamedTuple

import msgspec

#: empty answers in a row at one position before the offset is stepped over
EMPTY_ANSWERS: Final = 2
#: unserved offsets one partition may step over in one read before it is unfinished
MAX_UNSERVED: Final = 16
#: how many unserved ranges of one partition a finding lists before "…"
SHOWN: Final = 8


class PartitionRead(msgspec.Struct, kw_only=True):
    """One partition as the audit read it (over every run of a checkpoint)."""

    topic: str
    partition: int
    start: int  # the offset the first run started reading at (0 on a first audit)
    position: int  # the next offset to read (where a checkpoint resumes)
    end: int  # the partition's end offset, recorded when the latest run started
    records: int = 0  # records (and undecodable placeholders) read, all runs
    #: offset ranges [first, last] the broker served nothing at below the end; stepped over, not read
    unserved: list[tuple[int, int]] = []
    unfinished: str | None = None  # why the latest run did not prove it reached `end` (None: it did)
    #: (high watermark, offset already read): the broker answered a high watermark below what had been read
    rewound: tuple[int, int] | None = None


class Finding(NamedTuple):
    code: str  # offsets_unserved, offsets_rewound or partition_unfinished
    detail: str


class Step(Enum):
    READ = "read"  # keep reading
    DONE = "done"  # the position reached the end
    SKIP = "skip"  # step over the offset at the position (seek to position + 1)
    STOP = "stop"  # unfinished: stop reading this partition (`Reach.why` says why)


class Reach:
    """One partition's way to its end offset during one read (see module doc)."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        self.topic = topic
        self.partition = partition
        self.start = start
        self.position = start
        self.end = max(end, start)  # a checkpoint's position was read: the end is at least there
        self.records = 0
        self.unserved: list[int] = []
        self.why: str | None = None
        self.rewound: tuple[int, int] | None = None
        self._empty = 0
        self._answered = False

    @property
    def done(self) -> bool:
        """Read to its end, as a fetch answer confirmed (one is needed even
        at the end: only an answer's high watermark shows offsets given out
        again below a checkpoint's position)."""
        return self._answered and self.position >= self.end and self.rewound is None

    @property
    def settled(self) -> bool:
        """Done or stopped: nothing more is read from it."""
        return self.done or self.why is not None or self.rewound is not None

    def observe(self, position: int, records: int, answered: bool, highwater: int | None) -> Step:
        """One poll: the reader's position after it, the records it returned,
        whether a fetch answer for this partition came in since the last
        poll (and every fetched record was handed out), and the high
        watermark that answer carried."""
        if self.why is not None or self.rewound is not None:
            return Step.STOP
        self.records += records
        self.position, moved = max(self.position, position), position > self.position
        if answered and highwater is not None:
            if not self._answered:
                self._answered = True
                self.end = max(self.end, highwater)  # tansu's ListOffsets is low: the first answer's high watermark
            if highwater < self.position:  # a high watermark never falls on a sound broker
                self.rewound = (highwater, self.position)
                return Step.STOP
        if moved:
            self._empty = 0
        elif answered:
            self._empty += 1
        if self.done:
            return Step.DONE
        if self._empty < EMPTY_ANSWERS or self.position >= self.end:
            return Step.READ
        if highwater is not None and highwater <= self.position:
            return self.stop(f"the broker's high watermark {highwater} is at the position, under the end {self.end} recorded at the start")
        if len(self.unserved) >= MAX_UNSERVED:
            return self.stop(f"more than {MAX_UNSERVED} offsets served nothing (at most {MAX_UNSERVED} are stepped over per read)")
        self.unserved.append(self.position)
        self.position, self._empty = self.position + 1, 0
        return Step.DONE if self.done else Step.SKIP

    def stop(self, why: str) -> Step:
        """Give up on this partition short of proving it read to its end, for `why`."""
        if not self.settled:
            self.why = why
        return Step.DONE if self.done else Step.STOP

    def result(self) -> PartitionRead:
        return PartitionRead(
            topic=self.topic,
            partition=self.partition,
            start=self.start,
            position=self.position,
            end=self.end,
            records=self.records,
            unserved=ranges(self.unserved),
            unfinished=self.why,
            rewound=self.rewound,
        )


def ranges(offsets: Iterable[int]) -> list[tuple[int, int]]:
    """Offsets as sorted, merged [first, last] runs."""
    out: list[tuple[int, int]] = []
    for o in sorted(set(offsets)):
        if out and out[-1][1] + 1 == o:
            out[-1] = (out[-1][0], o)
        else:
            out.append((o, o))
    return out


def merge(before: PartitionRead | None, now: PartitionRead) -> PartitionRead:
    """A checkpoint's record of a partition, updated with this run's read of it."""
    if before is None:
        return now
    unserved = ranges(o for lo, hi in (*before.unserved, *now.unserved) for o in range(lo, hi + 1))
    return PartitionRead(
        topic=now.topic,
        partition=now.partition,
        start=min(before.start, now.start),
        position=now.position,
        end=now.end,
        records=before.records + now.records,
        unserved=unserved,
        unfinished=now.unfinished,
        rewound=before.rewound if before.rewound is not None else now.rewound,
    )


def _shown(runs: list[tuple[int, int]]) -> str:
    text = ", ".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in runs[:SHOWN])
    return text + (", …" if len(runs) > SHOWN else "")


def findings(reads: Iterable[PartitionRead]) -> list[Finding]:
    """What the reads leave unproven: offsets stepped over, partitions not read to their end."""
    out: list[Finding] = []
    for r in sorted(reads, key=lambda r: (r.topic, r.partition)):
        where = f"{r.topic}/{r.partition}"
        if r.unserved:
            n = sum(hi - lo + 1 for lo, hi in r.unserved)
            out.append(
                Finding(
                    "offsets_unserved",
                    f"{where}: the broker answered every fetch at {n} offset(s) below the partition's end with nothing "
                    f"({_shown(r.unserved)}); they were stepped over, so whatever they hold was not read",
                )
            )
        if r.rewound is not None:
            hw, read = r.rewound
            out.append(
                Finding(
                    "offsets_rewound",
                    f"{where}: the broker's high watermark {hw} is below offset {read}, which the audit had read to: it gave out "
                    f"offsets again (or lost the log), and what it holds below {read} now was not read; audit without the checkpoint",
                )
            )
        elif r.unfinished is not None or r.position < r.end:
            out.append(
                Finding(
                    "partition_unfinished",
                    f"{where}: read from {r.start} to {r.position}, not proven to the end offset {r.end}: {r.unfinished or 'not read to the end'}",
                )
            )
    return out
