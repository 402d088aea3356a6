"""Compression bombs (docs/operations.md 2.1): librdkafka batches of a few KB
to a few hundred KB that inflate to 64 MiB, in gzip, snappy, lz4 and zstd,
into a running guard, onto the reconciler's topic and onto the audit topic
(then `busguard audit`). Every record gets exactly one decision, every
process stays up, and its peak resident memory grows by a small multiple of
`batch.max_inflated_bytes`, not by what the batch would inflate to (before
the bound: about twice that, so each process was killed under any memory
limit and crash-looped on the same uncommitted record). A guard restarted
with bombs waiting for it comes up and decides them the same way.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import confluent_kafka
import msgspec

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, collect, decisions_by_source, header, identity, make_setup, produce, sender
from busguard.protocol.records import Decision

from .paths import REPO

LIMIT = 2 * 1024 * 1024
ENV = {"BUSGUARD_BATCH__MAX_INFLATED_BYTES": str(LIMIT)}
#: What each bomb inflates to; snappy compresses at most about 21 times, so
#: its bomb is smaller to fit a fetch (~0.8 MB on the wire).
INFLATED = {"gzip": 64 << 20, "snappy": 16 << 20, "lz4": 64 << 20, "zstd": 64 << 20}
#: Peak RSS growth allowed per process: the bound's own small multiple
#: (inflated records, the uncompressed batch, its parsed records) plus the
#: Python heap of one fetch's decisions and outputs.
GROWTH_BOUND = 4 * LIMIT + (24 << 20)


def peak_rss(pid: int) -> int:
    """The process's resident high-water mark (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def send_bombs(bootstrap: str, topic: str, codecs: Sequence[str] = tuple(INFLATED)) -> None:
    """One record per codec, its value zeros, through librdkafka: each is a
    batch of one record that the producer compresses itself."""
    for codec in codecs:
        p = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "compression.type": codec,
                "message.max.bytes": 1_000_000_000,
                "enable.idempotence": False,
                "acks": "all",
            }
        )
        p.produce(topic, key=b"bomb-" + codec.encode(), value=bytes(INFLATED[codec]))
        assert p.flush(60) == 0
        del p


def _bomb_decisions(s: Setup, got: object) -> dict[int, Decision]:
    facts = [msgspec.json.decode(r.value, type=Decision) for r in got[s.audit]]  # type: ignore[index]
    return {d.source.offset: d for d in facts if d.reason == "undecodable_batch"}


async def warm_guard(s: Setup) -> GuardProcess:
    """A running guard (bounded as ENV says) that has decided one valid record."""
    planner, to = sender("planner"), identity("executor").agent_id
    guard = GuardProcess(s, env=ENV)
    guard.wait_ready()
    await produce(s.bootstrap, s.handoffs, [planner.sign(kind="handoff", task_id="warm", receiver=to, payload=b"w")], key=b"planner")
    await collect(s.bootstrap, [s.audit], lambda c: len(c[s.audit]) >= 1)
    return guard


async def test_bombs_in_every_codec_into_a_running_guard_and_a_restarted_one(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1)
    planner, to = sender("planner"), identity("executor").agent_id
    guard = await warm_guard(s)
    try:
        base = peak_rss(guard.proc.pid)
        await asyncio.to_thread(send_bombs, s.bootstrap, s.handoffs)
        await produce(s.bootstrap, s.handoffs, [planner.sign(kind="handoff", task_id="after", receiver=to, payload=b"a")], key=b"planner")
        got = await collect(s.bootstrap, [s.audit], lambda c: len(c[s.audit]) >= 6, timeout=120)
        assert guard.proc.poll() is None, guard.tail()
        first_growth = peak_rss(guard.proc.pid) - base
    finally:
        assert guard.terminate() == 0, guard.tail()

    # bombs waiting for a guard that starts: it must not die on them
    await asyncio.to_thread(send_bombs, s.bootstrap, s.handoffs)
    await produce(s.bootstrap, s.handoffs, [planner.sign(kind="handoff", task_id="later", receiver=to, payload=b"l")], key=b"planner")
    again = GuardProcess(s, env=ENV)
    try:
        again.wait_ready()
        got = await collect(s.bootstrap, [s.audit, s.dead_letter, s.downstream_handoffs], lambda c: len(c[s.audit]) >= 11, timeout=120)
        await asyncio.sleep(1)
        assert again.proc.poll() is None, again.tail()
        restart_peak = peak_rss(again.proc.pid)
    finally:
        assert again.terminate() == 0, again.tail()

    print(
        f"guard peak RSS growth: {first_growth / 2**20:.1f} MiB; restarted guard's peak {restart_peak / 2**20:.1f} MiB vs {base / 2**20:.1f} MiB"
    )
    assert first_growth <= GROWTH_BOUND, f"{first_growth / 2**20:.1f} MiB"
    assert restart_peak - base <= GROWTH_BOUND, f"{(restart_peak - base) / 2**20:.1f} MiB"
    decided = decisions_by_source(s, got)
    assert sorted(decided) == [(0, o) for o in range(11)] and all(len(v) == 1 for v in decided.values())  # one decision each
    bombs = _bomb_decisions(s, got)
    assert sorted(bombs) == [1, 2, 3, 4, 6, 7, 8, 9]
    for d in bombs.values():
        assert f"records inflate to more than {LIMIT} bytes (batch.max_inflated_bytes)" in d.detail, d.detail
    assert {c.split()[0] for c in (d.detail for d in bombs.values())} == set(INFLATED)
    assert len(got[s.downstream_handoffs]) == 3  # warm, after, later: the partition moved on
    # the dead letter keeps each bomb as fetched (or, past max_payload_bytes, its length and hash)
    carriers = [r for r in got[s.dead_letter] if header(r, "busguard-original-form") == b"batch"]
    assert len(carriers) == 8
    assert all(r.value is not None or header(r, "busguard-original-sha256") for r in carriers)


async def test_bombs_on_the_reconcilers_topic(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1)
    worker = GuardProcess(s, command="reconcile", env=ENV)
    worker.wait_ready()
    try:
        await asyncio.sleep(1)
        base = peak_rss(worker.proc.pid)
        await asyncio.to_thread(send_bombs, s.bootstrap, s.reconciliation)
        got = await collect(s.bootstrap, [s.dead_letter], lambda c: len(c[s.dead_letter]) >= 4, timeout=120)
        assert worker.proc.poll() is None, worker.tail()
        growth = peak_rss(worker.proc.pid) - base
    finally:
        assert worker.terminate() == 0, worker.tail()
    # and a reconciler started with bombs waiting
    await asyncio.to_thread(send_bombs, s.bootstrap, s.reconciliation)
    again = GuardProcess(s, command="reconcile", env=ENV)
    try:
        again.wait_ready()
        got = await collect(s.bootstrap, [s.dead_letter], lambda c: len(c[s.dead_letter]) >= 8, timeout=120)
        await asyncio.sleep(1)
        assert again.proc.poll() is None, again.tail()
        restart_peak = peak_rss(again.proc.pid)
    finally:
        assert again.terminate() == 0, again.tail()
    print(f"reconciler peak RSS growth: {growth / 2**20:.1f} MiB; restarted {restart_peak / 2**20:.1f} MiB vs {base / 2**20:.1f} MiB")
    assert growth <= GROWTH_BOUND and restart_peak - base <= GROWTH_BOUND
    sources = [header(r, "busguard-source") for r in got[s.dead_letter]]
    assert sorted(sources) == sorted(f"{s.reconciliation}/0/{o}".encode() for o in range(8))  # one each
    assert {header(r, "busguard-reason") for r in got[s.dead_letter]} == {b"undecodable_batch"}


async def test_bombs_on_the_audit_topic_are_reported_by_busguard_audit(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1)
    guard = await warm_guard(s)
    assert guard.terminate() == 0, guard.tail()

    async def audit_peak() -> tuple[int, str]:
        """`busguard audit`'s VmHWM, read until it exits (its last 1.5 s are idle)."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "busguard.cli", "audit", "--json", "--idle-ms", "1500", "--config", str(s.config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(REPO), **ENV},
        )
        peak = 0
        reading = asyncio.create_task(asyncio.to_thread(proc.stdout.read))  # type: ignore[union-attr]
        while proc.poll() is None:
            try:
                peak = max(peak, peak_rss(proc.pid))
            except (FileNotFoundError, ProcessLookupError, AssertionError):
                break  # exited between poll() and the read
            await asyncio.sleep(0.02)
        out = await reading
        assert proc.wait() in (0, 1), out  # 1: violations found, as they should be
        return peak, out.decode()

    quiet_peak, _ = await audit_peak()
    await asyncio.to_thread(send_bombs, s.bootstrap, s.audit)
    bombed_peak, report = await audit_peak()
    print(f"audit peak RSS: {bombed_peak / 2**20:.1f} MiB with bombs, {quiet_peak / 2**20:.1f} MiB without")
    assert bombed_peak - quiet_peak <= GROWTH_BOUND
    found = msgspec.json.decode(report.encode()[report.index("{") :])
    forged = [v for v in found["violations"] if v["invariant"] == "forged_record"]
    assert len(forged) == 4 and all("inflate to more than" in v["detail"] for v in forged), forged
