"""Which input offsets the audit log says were decided. Pure.

The guard promises one decision per input offset. A decision covers its
`source.offset`, or, a span decision (an undecodable batch, docs/protocol.md
2.1), every offset from there to its `last_offset`. Per input partition the
auditor lays the verified decisions' ranges end to end, lowest first: from
the lowest decided offset to the highest, every offset must be covered by
exactly one decision id. Two ids covering one offset (`offsets_overlap`) or an
offset no decision covers between two that are (`offsets_undecided`) is a
finding. Offsets before the lowest and after the highest decided one prove
nothing (the guard may have started later, or not caught up yet).

Old logs, with one `undecodable_batch` decision per offset, are ranges of one
each and lay end to end the same way.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final, NamedTuple

import msgspec

if TYPE_CHECKING:  # the report's types (findings) import this module, and the ledger imports them
    from busguard.audit.ledger import DecisionFact

#: how many gaps or overlaps of one partition a finding lists before "…"
SHOWN: Final = 8


class InputCoverage(msgspec.Struct, kw_only=True):
    """One input partition as the audit log accounts for it."""

    topic: str
    partition: int
    first: int  # lowest decided offset
    last: int  # highest decided offset
    offsets: int  # distinct offsets covered
    decisions: int  # decision ids covering them
    spans: int  # of which span decisions (more than one offset)
    undecided: int = 0  # offsets between first and last no decision covers
    overlapping: int = 0  # decision ids whose range overlaps an earlier one's


class Finding(NamedTuple):
    code: str  # offsets_overlap or offsets_undecided
    detail: str
    decision_id: str | None


def _last(f: DecisionFact) -> int:
    return f.source.offset if f.last_offset is None else f.last_offset


def _ranges(runs: list[tuple[int, int]]) -> str:
    shown = ", ".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in runs[:SHOWN])
    return shown + (", …" if len(runs) > SHOWN else "")


def coverage(facts: Iterable[DecisionFact]) -> tuple[list[InputCoverage], list[Finding]]:
    """Per input partition (sorted), its coverage, and the findings."""
    by_partition: dict[tuple[str, int], list[DecisionFact]] = defaultdict(list)
    for f in facts:
        by_partition[(f.source.topic, f.source.partition)].append(f)
    report: list[InputCoverage] = []
    findings: list[Finding] = []
    for (topic, partition), fs in sorted(by_partition.items()):
        fs.sort(key=lambda f: (f.source.offset, _last(f), f.decision_id))
        gaps: list[tuple[int, int]] = []
        overlaps = 0
        covered = 0
        reach = fs[0].source.offset - 1  # highest offset covered so far
        for f in fs:
            lo, hi = f.source.offset, _last(f)
            if lo > reach + 1:
                gaps.append((reach + 1, lo - 1))
            elif lo <= reach:
                overlaps += 1
                findings.append(
                    Finding(
                        "offsets_overlap",
                        f"{topic}/{partition}: decision {f.decision_id} covers {lo}-{hi}, offsets at or below {reach} of which another decision covers",
                        f.decision_id,
                    )
                )
            covered += max(0, hi - max(lo, reach + 1) + 1)
            reach = max(reach, hi)
        undecided = sum(hi - lo + 1 for lo, hi in gaps)
        if gaps:
            findings.append(
                Finding(
                    "offsets_undecided",
                    f"{topic}/{partition}: {undecided} offset(s) between decided ones have no decision: {_ranges(gaps)}",
                    None,
                )
            )
        report.append(
            InputCoverage(
                topic=topic,
                partition=partition,
                first=fs[0].source.offset,
                last=reach,
                offsets=covered,
                decisions=len(fs),
                spans=sum(1 for f in fs if f.last_offset is not None and f.last_offset > f.source.offset),
                undecided=undecided,
                overlapping=overlaps,
            )
        )
    return report, findings
