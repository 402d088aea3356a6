"""Issue 36 item 4: exactly-once outputs on Kafka transactions (Apache Kafka).

With `kafka.transactional_id` set, each batch's outputs and its input
offsets commit in one Kafka transaction, after the batch's decisions are
persisted. Through `busguard run` processes on the real broker: a guard
killed with SIGKILL at every point of the commit protocol (inside the open
transaction, after the offsets joined it, after it committed) and
restarted leaves every decision's outputs exactly once for a
`read_committed` reader, while a `read_uncommitted` reader may see the
aborted copies (byte-identical re-emissions); a second guard started with
the same transactional id fences the first, which exits, and nothing is
admitted twice.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from busguard.devtools.guardkit import (
    GuardProcess,
    Setup,
    collect,
    collect_all,
    distinct_sources,
    header,
    identity,
    make_setup,
    produce,
    sender,
)
from busguard.devtools.kafka import ApacheKafka
from busguard.sdk import AdmittingConsumer

from .test_apache_kafka import ON_KAFKA
from .test_guard_crash import check_exactly_once, committed_offsets, workload
from .test_reconcile import check_each_escalation_resolved_once, escalating_workload, resolutions

TXN = {**ON_KAFKA, "BUSGUARD_KAFKA__TRANSACTIONAL_ID": "guard-t"}


def _settled(s: Setup, total: int, admitted: int) -> Any:
    def settled(c: Any) -> bool:
        ids = {header(r, "busguard-decision-id") for r in c[s.downstream_handoffs]}
        return distinct_sources(s, c) == total and len(ids) == admitted

    return settled


def _once_each(s: Setup, got: Any) -> None:
    """A read_committed reader sees no output twice: one audit record per
    decision, one forward per admitted decision."""
    for topic in (s.audit, s.downstream_handoffs):
        counts = Counter(header(r, "busguard-decision-id") for r in got[topic])
        assert max(counts.values()) == 1, f"{topic}: {[k for k, n in counts.items() if n > 1][:3]} twice"


@pytest.mark.parametrize("point", ["persisted", "produced", "offsets", "committed"])
async def test_kill_9_at_each_point_leaves_each_output_once_for_a_read_committed_reader(
    kafka: ApacheKafka, tmp_path: Path, point: str
) -> None:
    s = await make_setup(tmp_path, kafka.bootstrap, max_records=20)
    victim = GuardProcess(s, fault=f"{point}:3", env=TXN)
    victim.wait_ready()
    records, expected = workload(tmp_path)
    coords = await produce(s.bootstrap, s.handoffs, records, key=b"planner")
    assert victim.wait(90) == -9, victim.tail()
    survivor = GuardProcess(s, env=TXN)
    try:
        survivor.wait_ready()
        got = await collect(s.bootstrap, s.outputs, _settled(s, len(records), expected.count("admitted")), timeout=150, read_committed=True)
        await asyncio.sleep(1)
    finally:
        assert survivor.terminate() == 0, survivor.tail()
    committed = await collect_all(s.bootstrap, s.outputs, read_committed=True)
    check_exactly_once(s, committed, coords, expected)
    _once_each(s, committed)
    assert await committed_offsets(s, s.handoffs) == len(records)
    everything = await collect_all(s.bootstrap, s.outputs)
    aborted = len(everything[s.audit]) - len(committed[s.audit])
    # the batch the kill cut inside its transaction is on the log twice, the first copy aborted
    assert (aborted > 0) == (point in ("produced", "offsets")), aborted
    assert got is not None


async def test_a_stalled_guard_whose_transactional_id_was_taken_over_is_fenced(kafka: ApacheKafka, tmp_path: Path) -> None:
    """The zombie: a guard stops (SIGSTOP: a long GC pause, a frozen VM), the
    group moves its partitions to a guard started with the same
    transactional id, whose start fences it; when the first wakes and
    tries its next transaction it is refused (ProducerFenced) and exits, and
    nothing is decided or emitted twice."""
    s = await make_setup(tmp_path, kafka.bootstrap, max_records=20)
    first = GuardProcess(s, env=TXN)
    first.wait_ready()
    records, expected = workload(tmp_path, n=60)
    half = len(records) // 2
    coords = await produce(s.bootstrap, s.handoffs, records[:half], key=b"planner")
    await collect(s.bootstrap, s.outputs, lambda c: distinct_sources(s, c) == half, timeout=90, read_committed=True)
    os.kill(first.proc.pid, signal.SIGSTOP)
    second = GuardProcess(s, env=TXN)  # same config, same transactional id
    try:
        second.wait_ready()
        coords += await produce(s.bootstrap, s.handoffs, records[half:], key=b"planner")
        await collect(s.bootstrap, s.outputs, lambda c: distinct_sources(s, c) == len(records), timeout=150, read_committed=True)
        os.kill(first.proc.pid, signal.SIGCONT)
        # records on every partition until the woken guard has had a batch to commit: the
        # survivor may take a round of them before the woken one has rejoined the group,
        # and a fenced guard given no records has no transaction to be refused
        extra = sender("planner", session=tmp_path / "fence.session")
        to = identity("executor").agent_id
        deadline = time.monotonic() + 120
        i = 0
        while first.proc.poll() is None and time.monotonic() < deadline:
            for _ in range(16):
                rec = extra.sign(kind="handoff", task_id=f"fence-{i}", receiver=to, payload=b"{}")
                coords += await produce(s.bootstrap, s.handoffs, [rec], key=f"k{i % 16}".encode())
                expected.append("admitted")
                i += 1
            await asyncio.sleep(2)
        assert first.proc.poll() not in (None, 0), first.tail()
        assert "fenced: another process started with this transactional id" in first.log.read_text(errors="replace")
        await collect(s.bootstrap, s.outputs, _settled(s, len(coords), expected.count("admitted")), timeout=150, read_committed=True)
        await asyncio.sleep(1)
    finally:
        if first.proc.poll() is None:
            os.kill(first.proc.pid, signal.SIGKILL)
        assert second.terminate() == 0, second.tail()
    committed = await collect_all(s.bootstrap, s.outputs, read_committed=True)
    assert len({p for p, _ in coords}) == 4
    check_exactly_once(s, committed, coords, expected)
    _once_each(s, committed)


async def test_twenty_kills_under_load_leave_no_duplicate_for_a_read_committed_reader(kafka: ApacheKafka, tmp_path: Path) -> None:
    """20 guards in a row, each killed with SIGKILL at a random point of the
    commit protocol after a random number of batches (a static member, so a
    restart takes its partitions back at once), over one workload of small
    batches; then one that finishes. A read_committed reader sees every
    decision's outputs exactly once."""
    s = await make_setup(tmp_path, kafka.bootstrap, max_records=5)
    env = {**TXN, "BUSGUARD_KAFKA__GROUP_INSTANCE_ID": "guard-1"}
    records, expected = workload(tmp_path, n=120)
    coords = await produce(s.bootstrap, s.handoffs, records, key=b"planner")
    rng = random.Random(36)
    kills = 0
    while kills < 20:
        point = rng.choice(["decided", "persisted", "produced", "offsets", "committed"])
        guard = GuardProcess(s, fault=f"{point}:{rng.randint(1, 3)}", env=env)
        rc = guard.wait(90)
        assert rc == -9, guard.tail()
        kills += 1
    survivor = GuardProcess(s, env=env)
    try:
        survivor.wait_ready()
        await collect(s.bootstrap, s.outputs, _settled(s, len(records), expected.count("admitted")), timeout=150, read_committed=True)
        await asyncio.sleep(1)
    finally:
        assert survivor.terminate() == 0, survivor.tail()
    committed = await collect_all(s.bootstrap, s.outputs, read_committed=True)
    check_exactly_once(s, committed, coords, expected)
    _once_each(s, committed)
    everything = await collect_all(s.bootstrap, s.outputs)
    print(f"20 kills: {len(everything[s.audit]) - len(committed[s.audit])} aborted audit records on the log, none read committed")


async def test_the_sdks_read_committed_consumer_gets_each_forward_once_after_a_kill_inside_a_transaction(
    kafka: ApacheKafka, tmp_path: Path
) -> None:
    """An agent's AdmittingConsumer.open(client_options={"isolation_level":
    "read_committed"}) reads tolerantly (busguard's decoder skips aborted
    transactions as aiokafka does) and gets every admitted forward exactly
    once, though the aborted copies are on the log."""
    s = await make_setup(tmp_path, kafka.bootstrap, max_records=20)
    victim = GuardProcess(s, fault="produced:2", env=TXN)
    victim.wait_ready()
    records, expected = workload(tmp_path, n=60)
    await produce(s.bootstrap, s.handoffs, records, key=b"planner")
    assert victim.wait(90) == -9, victim.tail()
    survivor = GuardProcess(s, env=TXN)
    try:
        survivor.wait_ready()
        await collect(s.bootstrap, s.outputs, _settled(s, len(records), expected.count("admitted")), timeout=150, read_committed=True)
    finally:
        assert survivor.terminate() == 0, survivor.tail()
    everything = await collect_all(s.bootstrap, [s.downstream_handoffs])
    assert len(everything[s.downstream_handoffs]) > expected.count("admitted")  # aborted copies are on the log
    inbox = await AdmittingConsumer.open(
        s.downstream_handoffs,
        bootstrap_servers=s.bootstrap,
        group_id="agent",
        guard_public_key=s.guard.public_key,
        agent_id=identity("executor").agent_id,
        client_options={"isolation_level": "read_committed"},
    )
    delivered: list[str] = []
    try:
        for _ in range(40):
            batch = await inbox.getmany(timeout_ms=300)
            assert batch.refusals == []
            delivered += [d.decision_id for d in batch.deliveries]
            await inbox.commit(batch)
            if len(delivered) >= expected.count("admitted"):
                break
        await asyncio.sleep(1)
        delivered += [d.decision_id for d in (await inbox.getmany(timeout_ms=1000)).deliveries]
    finally:
        await inbox.close()
    assert len(delivered) == len(set(delivered)) == expected.count("admitted")


@pytest.mark.parametrize("point", ["persisted", "produced", "offsets"])
async def test_a_reconciler_killed_inside_its_transaction_resolves_each_escalation_once_for_a_read_committed_reader(
    kafka: ApacheKafka, tmp_path: Path, point: str
) -> None:
    """The reconciler commits in transactions too (its transactional id is
    the guard's with its own role, so the two never fence each other)."""
    s = await make_setup(tmp_path, kafka.bootstrap, max_records=5)
    guard = GuardProcess(s, env=TXN)
    try:
        guard.wait_ready()
        await produce(s.bootstrap, s.handoffs, escalating_workload(tmp_path, 30), key=b"planner")
        await collect(s.bootstrap, [s.reconciliation], lambda c: len(c[s.reconciliation]) >= 40, read_committed=True)
        victim = GuardProcess(s, command="reconcile", fault=f"{point}:3", env=TXN)
        assert victim.wait(60) == -9, victim.tail()
        survivor = GuardProcess(s, command="reconcile", env=TXN)
        try:
            survivor.wait_ready()
            await collect(s.bootstrap, [s.audit], lambda c: len(resolutions(s, c)) >= 40, timeout=90, read_committed=True)
            await asyncio.sleep(1)
        finally:
            assert survivor.terminate() == 0, survivor.tail()
    finally:
        assert guard.terminate() == 0, guard.tail()
    committed = await collect_all(s.bootstrap, [s.audit, s.reconciliation, s.replies], read_committed=True)
    assert len(check_each_escalation_resolved_once(s, committed, 30)) == 30
    stages = Counter((r.escalation_id, r.stage) for r in resolutions(s, committed))
    assert max(stages.values()) == 1  # a read_committed reader sees each resolution record once
    assert len(committed[s.replies]) == len({r.value for r in committed[s.replies]}) == 30
