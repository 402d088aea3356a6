"""A guard started behind its input, on Apache Kafka: every record decided as itself.

aiokafka fetches a partition's worth of records (up to 1 MiB) for every
assigned partition at once and hands them out `max_records` at a time,
partition by partition. The stuck-partition watch (busguard.runtime.unstick)
took the partitions queued last, whose position had not moved for its stuck
time while the broker said there was more, for partitions the broker would
not serve: it refetched them and then decided one real record of each as
`undecodable_batch` ("the broker returns no record at offset ..."). Found by
benchmarks/compare.py on Apache Kafka (20 000 records over 8 partitions).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from busguard.devtools.guardkit import GuardProcess, collect, identity, make_setup, produce, sender
from busguard.devtools.kafka import ApacheKafka
from busguard.protocol.records import Decision

pytestmark = pytest.mark.integration

ON_KAFKA = {"BUSGUARD_KAFKA__SESSION_TIMEOUT_MS": "6000", "BUSGUARD_KAFKA__IDEMPOTENCE": "true"}
PARTITIONS = 8
PER_KEY = 1250
KEYS = 16  # spread over the partitions by the Java partitioner


async def test_a_backlog_held_in_the_client_is_not_taken_for_stuck_partitions(kafka: ApacheKafka, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, kafka.bootstrap, partitions=PARTITIONS, max_records=500)
    planner, to = sender("planner"), identity("executor").agent_id
    work = [
        ([planner.sign(kind="handoff", task_id=f"k{k}-{i}", receiver=to, payload=b"w") for i in range(PER_KEY)], b"key-%d" % k)
        for k in range(KEYS)
    ]
    total = KEYS * PER_KEY
    guard = GuardProcess(s, env=ON_KAFKA)
    try:
        guard.wait_ready(timeout=60)
        # A burst faster than the guard decides: the client keeps fetching
        # every partition and hands the records out partition by partition,
        # so the partitions queued last wait longer than the stuck time.
        await asyncio.gather(*(produce(s.bootstrap, s.handoffs, records, key=key) for records, key in work))
        got = await collect(s.bootstrap, [s.audit], lambda c: len(c[s.audit]) >= total, timeout=240)
        await asyncio.sleep(1)
        assert guard.proc.poll() is None, guard.tail()
    finally:
        assert guard.terminate() == 0, guard.tail()
    decisions = {
        d.source.offset + 10**9 * d.source.partition: d for d in (msgspec.json.decode(r.value, type=Decision) for r in got[s.audit])
    }
    reasons = sorted({d.reason or d.outcome for d in decisions.values()})
    assert len(decisions) == total and reasons == ["admitted"], (len(decisions), reasons)
    log = guard.log.read_text()
    assert "stuck" not in log and "unfetchable" not in log, log[-3000:]
