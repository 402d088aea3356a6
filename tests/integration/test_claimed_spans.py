"""Issue 19 item 2: an undecodable batch whose header claims N offsets.

tansu stores a produced batch as it is (no CRC check) and advances the
partition by the batch header's lastOffsetDelta + 1, so a 69-byte batch can
claim 2^31 - 1 offsets. Through `busguard run` on the embedded broker, each
such batch must cost one decision, one audit record and one dead letter (a
span decision, docs/protocol.md 2.1), the partition must move on past the
whole span (committed offset included), the good records after it must be
decided, a crash between producing and committing must re-emit the span's
records byte for byte, and `busguard audit` must account for every offset.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from busguard.audit.run import run_audit
from busguard.config import load_config
from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, collect, collect_all, header, identity, make_setup, produce, sender
from busguard.protocol.records import Decision
from tests.fuzz.batches import claimed_span

from .test_hostile_records import produce_batches

# Apache Kafka refuses these batches at produce (docs/notes-broker.md): only tansu stores them
pytestmark = pytest.mark.brokers("tansu")

CLAIMS = (1, 20_000, 2**31 - 1)


async def _committed(s: Setup) -> int | None:
    consumer = AIOKafkaConsumer(bootstrap_servers=s.bootstrap, group_id=s.group, enable_auto_commit=False)
    await consumer.start()
    try:
        return await consumer.committed(TopicPartition(s.handoffs, 0))
    finally:
        await consumer.stop()


def _decisions(records: list[object]) -> list[Decision]:
    return [msgspec.json.decode(r.value, type=Decision) for r in records]  # type: ignore[attr-defined]


async def test_claimed_spans_cost_one_decision_each_and_the_partition_moves_on(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1, max_records=500)
    planner, to = sender("planner"), identity("executor").agent_id
    good = [planner.sign(kind="handoff", task_id=f"after-{n}", receiver=to, payload=b"work") for n in CLAIMS]
    spans: list[range] = []
    good_offsets: list[int] = []
    for n, rec in zip(CLAIMS, good, strict=True):
        (span,) = await produce_batches(s.bootstrap, s.handoffs, [(claimed_span(n), n)])
        ((_, offset),) = await produce(s.bootstrap, s.handoffs, [rec], key=b"planner")
        spans.append(span)
        good_offsets.append(offset)
    # the broker advanced the partition by each claim: the claim is real
    assert [o - sp.start for sp, o in zip(spans, good_offsets, strict=True)] == list(CLAIMS)

    # the first guard dies after producing its first batch's outputs, before committing
    victim = GuardProcess(s, fault="produced:1")
    assert victim.wait(120) != 0, victim.tail()
    started = time.monotonic()
    guard = GuardProcess(s)
    try:
        # the restarted guard (once the dead member's session is gone) re-reads
        # the uncommitted batch and re-emits its decisions: every audit record twice
        got = await collect(
            s.bootstrap, [s.audit, s.dead_letter, s.downstream_handoffs], lambda c: len(c[s.audit]) >= 4 * len(CLAIMS), timeout=180
        )
        decided_s = time.monotonic() - started
        assert guard.proc.poll() is None, guard.tail()
        got = await collect_all(s.bootstrap, [s.audit, s.dead_letter, s.downstream_handoffs])
        committed = await _committed(s)
    finally:
        assert guard.terminate() == 0, guard.tail()

    # one span decision per claimed batch, covering exactly its claimed offsets
    audit = got[s.audit]
    distinct = {r.value for r in audit}
    decisions = sorted({d.decision_id: d for d in _decisions(audit)}.values(), key=lambda d: d.source.offset)
    assert len(audit) == 4 * len(CLAIMS) and len(distinct) == len(decisions) == 2 * len(
        CLAIMS
    )  # re-emitted after the crash, byte-identical
    spans_decided = [d for d in decisions if d.reason == "undecodable_batch"]
    assert [(d.source.offset, d.covers_to, d.outcome) for d in spans_decided] == [(sp.start, sp.stop - 1, "reject") for sp in spans]
    assert [d.last_offset is None for d in spans_decided] == [n == 1 for n in CLAIMS]
    # the good record after each span is decided, at the offset after the span
    assert sorted(d.source.offset for d in decisions if d.reason == "admitted") == good_offsets
    # one dead letter per span (re-emitted identically), carrying the batch's 69 bytes
    dead = {(r.value, tuple(r.headers)) for r in got[s.dead_letter]}
    assert len(got[s.dead_letter]) == 2 * len(CLAIMS) and len(dead) == len(CLAIMS)
    for (value, headers), span in zip(
        sorted(dead, key=lambda v: int(header(_Rec(v[1]), "busguard-batch-offset") or b"0")), spans, strict=True
    ):
        rec = _Rec(headers)
        assert len(value) == 69 and header(rec, "busguard-original-form") == b"batch"
        assert header(rec, "busguard-source") == f"{s.handoffs}/0/{span.start}".encode()
        assert header(rec, "busguard-last-offset") == (None if len(span) == 1 else str(span.stop - 1).encode())
    # the group committed past every span and the good record after the last
    assert committed == good_offsets[-1] + 1

    def size(r: object) -> int:
        return len(r.value or b"") + sum(len(k) + len(v or b"") for k, v in r.headers)  # type: ignore[attr-defined]

    span_ids = {d.decision_id.encode() for d in spans_decided}
    span_out = [size(r) for t in (s.audit, s.dead_letter) for r in got[t] if header(r, "busguard-decision-id") in span_ids]
    print(
        f"claims {CLAIMS}: {len(span_out)} span outputs (audit + dead letter, each emitted twice across the crash), "
        f"{sum(span_out)} bytes, at most {max(span_out)} per record; all decided {decided_s:.1f}s after the restart"
    )

    # the auditor accounts for every offset: the spans, and nothing undecided
    report = await asyncio.to_thread(run_audit, load_config(s.config), guard_public_key=s.guard.public_key, idle_ms=2000)
    assert report.ok, report.violations
    (cov,) = report.inputs
    assert (cov.topic, cov.first, cov.last, cov.offsets, cov.spans, cov.undecided, cov.overlapping) == (
        s.handoffs,
        spans[0].start,
        good_offsets[-1],
        good_offsets[-1] - spans[0].start + 1,
        2,
        0,
        0,
    )

    # a restart finds the store level with the group (its watermark covers the
    # spans), so it does not re-arm its fence, and reads nothing again
    again = GuardProcess(s)
    again.wait_ready()
    await asyncio.sleep(2)
    assert again.terminate() == 0, again.tail()
    log = again.log.read_text(errors="replace")
    assert "state store is behind the consumer group" not in log and "fence re-armed" not in log
    after = await collect_all(s.bootstrap, [s.audit])
    assert len(after[s.audit]) == len(audit)


class _Rec:
    """Headers in the shape guardkit.header reads."""

    def __init__(self, headers: tuple[tuple[str, bytes], ...]) -> None:
        self.headers = headers
