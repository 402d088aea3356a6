"""Issue 35, finding 1: one record on a downstream topic must not stop an SDK receiver.

A real `busguard run` forwards genuine tasks to the downstream topic; between
them, anyone who can write that topic puts a record with a non-UTF-8 header
name (a batch built byte by byte: no client library writes one), a record
with a null `busguard-attestation`, an exact copy of a genuine forward with
its `busguard-receipt` nulled, a batch whose CRC is broken and a zstd batch
that inflates to 64 MiB. A receiver
(`ActOnce` over `AdmittingConsumer.open`, on a SQLite done-set) acts on
every genuine task exactly once and refuses each bad record (each bad batch)
exactly once, across a restart of the receiver. Before the SDK read through
busguard's tolerant reader, aiokafka raised `UnicodeDecodeError` out of
`getmany` at every start and nothing behind the record was ever acted on.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import structlog

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, audit_entries, collect, identity, make_setup, produce, sender
from busguard.protocol.attestation import HEADER_ATTESTATION, HEADER_SEAL
from busguard.protocol.envelope import HEADER_RECEIPT
from busguard.sdk import ActOnce, AdmittingConsumer, Claim, Delivery, SqliteDoneSet, Step
from tests.fuzz.batches import CODECS, batch, bomb_batch, record

from .test_hostile_records import produce_batches

# Apache Kafka refuses these batches at produce (docs/notes-broker.md): only tansu stores them
pytestmark = pytest.mark.brokers("tansu")

EXECUTOR = identity("executor").agent_id


async def open_receiver(s: Setup, group: str, db: Path) -> tuple[ActOnce, SqliteDoneSet]:
    """The receiver an agent writes from docs/sdk.md: the SDK's own consumer,
    a SQLite done-set, an effect that writes one row per task."""
    done = SqliteDoneSet(db)
    done.connection.execute("CREATE TABLE IF NOT EXISTS work (task_id TEXT, decision_id TEXT)")
    inbox = await AdmittingConsumer.open(
        s.downstream_handoffs, bootstrap_servers=s.bootstrap, group_id=group, guard_public_key=s.guard.public_key, agent_id=EXECUTOR
    )

    def effect(d: Delivery, tx: Claim[Any]) -> None:
        tx.connection.execute("INSERT INTO work VALUES (?, ?)", (d.receipt.task_id, d.decision_id))

    return ActOnce(inbox, done, effect=effect), done


async def run_until(loop: ActOnce, acted: int, refused: int, timeout: float = 90) -> tuple[Step, Counter[str]]:
    """Step until at least `acted` deliveries were acted on and `refused`
    records refused, then two more steps (nothing else must come); the totals
    and the refusals' reasons (from the SDK's `record_refused` log lines)."""
    total, reasons = Step(0, 0, 0, 0), Counter[str]()
    deadline, extra = time.monotonic() + timeout, 2
    with structlog.testing.capture_logs() as logs:
        while extra:
            assert time.monotonic() < deadline, f"so far {total}, reasons {dict(reasons)}"
            step = await loop.step(timeout_ms=300)
            total = Step(*(a + b for a, b in zip(total, step, strict=True)))
            if total.acted >= acted and total.refused >= refused:
                extra -= 1
    reasons.update(e["reason"] for e in logs if e["event"] == "record_refused")
    return total, reasons


async def forward_tasks(s: Setup, names: list[str], decided: int) -> None:
    """Hand the tasks to the guard; wait until it has decided `decided`
    inputs in all (read on the audit topic: the test's own reader is not
    tolerant, and the downstream topic holds hostile records)."""
    planner = sender("planner")
    await produce(s.bootstrap, s.handoffs, [planner.sign(kind="handoff", task_id=t, receiver=EXECUTOR, payload=b"{}") for t in names])
    await collect(s.bootstrap, [s.audit], lambda c: len(audit_entries(s, c)) >= decided)


async def first_forward(s: Setup) -> Any:
    """The guard's first forward, read while the topic holds nothing else."""
    got = await collect(s.bootstrap, [s.downstream_handoffs], lambda c: len(c[s.downstream_handoffs]) >= 1)
    return got[s.downstream_handoffs][0]


def non_utf8_header_name() -> tuple[bytes, int]:
    return batch([record(0, b"k", b"{}", [(b"\xff\xfebusguard-seal", b"x"), (b"ok", b"1")])]), 1


def null_attestation() -> tuple[bytes, list[tuple[str, Any]]]:
    return b"{}", [(HEADER_SEAL, b"A" * 86), (HEADER_ATTESTATION, None)]


def nulled_receipt(forward: Any) -> tuple[bytes, list[tuple[str, Any]]]:
    return forward.value, [(k, None if k == HEADER_RECEIPT else v) for k, v in forward.headers]


def crc_broken(n: int) -> tuple[bytes, int]:
    return batch([record(j, None, b"x%d" % j, []) for j in range(n)], crc=12345), n


async def hostile_inbox_first(s: Setup) -> None:
    """Tasks t-0..t-8 forwarded by the guard with 4 hostile items among them
    on its downstream topic: a non-UTF-8 header name, a null attestation, a
    genuine forward with its receipt nulled and a CRC-broken batch (2
    `undecodable`, 2 `unattested` for a receiver)."""
    await forward_tasks(s, [f"t-{i}" for i in range(3)], 3)
    forward = await first_forward(s)
    await produce_batches(s.bootstrap, s.downstream_handoffs, [non_utf8_header_name()])
    await produce(s.bootstrap, s.downstream_handoffs, [null_attestation()])
    await forward_tasks(s, [f"t-{i}" for i in range(3, 6)], 6)
    await produce(s.bootstrap, s.downstream_handoffs, [nulled_receipt(forward)])
    await produce_batches(s.bootstrap, s.downstream_handoffs, [crc_broken(5)])
    await forward_tasks(s, [f"t-{i}" for i in range(6, 9)], 9)


async def hostile_inbox_second(s: Setup) -> None:
    """Then t-9..t-13 with 3 more: a non-UTF-8 header name, a null
    attestation and a 64 MiB zstd bomb, past the 16 MiB inflation bound (2
    `undecodable`, 1 `unattested`)."""
    await produce_batches(s.bootstrap, s.downstream_handoffs, [non_utf8_header_name()])
    await forward_tasks(s, [f"t-{i}" for i in range(9, 12)], 12)
    await produce(s.bootstrap, s.downstream_handoffs, [null_attestation()])
    await produce_batches(s.bootstrap, s.downstream_handoffs, [(bomb_batch(CODECS["zstd"], 64 << 20), 1)])
    await forward_tasks(s, [f"t-{i}" for i in range(12, 14)], 14)


async def test_a_receiver_refuses_each_hostile_record_once_and_acts_on_every_task_once_across_a_restart(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1)
    guard = GuardProcess(s)
    guard.wait_ready()
    group, db = f"{s.group}.executor", tmp_path / "executor.db"
    try:
        await hostile_inbox_first(s)

        loop, done = await open_receiver(s, group, db)
        try:
            first, reasons = await run_until(loop, acted=9, refused=4)
        finally:
            await loop.inbox.close()
            done.close()
        assert (first.acted, first.skipped, first.refused) == (9, 0, 4)
        assert reasons == {"undecodable": 2, "unattested": 2}

        # more of each behind the committed position, then a new receiver process's worth of state
        await hostile_inbox_second(s)

        loop, done = await open_receiver(s, group, db)
        try:
            second, reasons = await run_until(loop, acted=5, refused=3)
            work = done.connection.execute("SELECT task_id FROM work").fetchall()
        finally:
            await loop.inbox.close()
            done.close()
        assert (second.acted, second.skipped, second.refused) == (5, 0, 3)
        assert reasons == {"undecodable": 2, "unattested": 1}
        assert sorted(t for (t,) in work) == sorted(f"t-{i}" for i in range(14))  # each task once
    finally:
        assert guard.terminate() == 0, guard.tail()
