"""Store loss and store rollback end to end (docs/operations.md, section 5): a lost store and a rolled-back store must not trust
themselves. Real guard processes, the real broker, real SQLite files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import msgspec

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import Collected, GuardProcess, Setup, collect, collect_all, identity, make_setup, produce, sender
from busguard.protocol.records import Decision
from busguard.sdk.sender import SignedRecord

from .paths import REPO

WORK = b'{"op":"summarize","doc":"q3"}'


def _handoff(task: str, **kw: object) -> SignedRecord:
    return sender("planner").sign(kind="handoff", task_id=task, receiver=identity("executor").agent_id, payload=WORK, **kw)  # type: ignore[arg-type]


def _decisions(s: Setup, got: Collected) -> list[Decision]:
    return sorted((msgspec.json.decode(r.value, type=Decision) for r in got[s.audit]), key=lambda d: (d.source.partition, d.source.offset))


async def _decided(s: Setup, n: int) -> list[Decision]:
    """The first n decisions by input (partition, offset), once n audit records exist."""
    got = await collect(s.bootstrap, [s.audit], lambda c: len(c[s.audit]) >= n)
    return _decisions(s, got)[:n]


async def _forwarded(s: Setup) -> list[bytes | None]:
    """Receipts on the downstream topic, once nothing new arrives."""
    got = await collect_all(s.bootstrap, [s.downstream_handoffs])
    return [dict(r.headers).get("busguard-receipt") for r in got[s.downstream_handoffs]]


def _metric(guard: GuardProcess, name: str) -> float:
    for line in guard.metrics().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exported")


async def test_item_2_a_replay_dated_ahead_is_refused_after_the_store_is_deleted(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap)
    first = GuardProcess(s)
    first.wait_ready()
    ahead = _handoff("ahead", issued_at_ms=int(time.time() * 1000) + 20_000)  # inside max_future_ms
    await produce(s.bootstrap, s.handoffs, [ahead])
    try:
        (d,) = await _decided(s, 1)
        assert (d.outcome, d.reason) == ("forward", "admitted")
    finally:
        assert first.terminate() == 0, first.tail()

    for suffix in ("", "-wal", "-shm"):  # the store is lost
        Path(f"{s.state_path}{suffix}").unlink(missing_ok=True)
    second = GuardProcess(s)
    try:
        second.wait_ready()
        assert "state store did not exist and was created fenced" in second.tail(200)
        await produce(s.bootstrap, s.handoffs, [ahead])  # its exact bytes, again
        _, replay = await _decided(s, 2)
        assert (replay.outcome, replay.reason, replay.receipt_id) == ("reject", "store_warming", ahead.receipt_id)
    finally:
        assert second.terminate() == 0, second.tail()
    assert await _forwarded(s) == [ahead.receipt_bytes]  # forwarded once, not under two decision ids


async def test_item_3_a_store_copied_back_from_before_the_last_batches_warms(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap)
    aside = tmp_path / "snapshot"
    aside.mkdir()
    guard = GuardProcess(s)
    guard.wait_ready()
    try:
        await produce(s.bootstrap, s.handoffs, [_handoff("a"), _handoff("b")])
        await _decided(s, 2)
        # a volume snapshot: the files as they are on disk, the guard idle between batches
        for suffix in ("", "-wal"):
            shutil.copy2(f"{s.state_path}{suffix}", aside / f"state.db{suffix}")
        later = [_handoff("c"), _handoff("d")]
        await produce(s.bootstrap, s.handoffs, later)
        assert [d.reason for d in await _decided(s, 4)] == ["admitted"] * 4
    finally:
        assert guard.terminate() == 0, guard.tail()

    # control: a restart on the intact store trusts itself, and knows the replay
    intact = GuardProcess(s)
    try:
        intact.wait_ready()
        await produce(s.bootstrap, s.handoffs, [later[0]])
        assert (await _decided(s, 5))[4].reason == "exact_duplicate"
        assert _metric(intact, "busguard_store_rearms_total") == 0
    finally:
        assert intact.terminate() == 0, intact.tail()

    Path(f"{s.state_path}-shm").unlink(missing_ok=True)
    for suffix in ("", "-wal"):  # the snapshot is restored over the store
        shutil.copy2(aside / f"state.db{suffix}", f"{s.state_path}{suffix}")
    restored = GuardProcess(s)
    try:
        restored.wait_ready()
        # admitted after the snapshot, so the restored store never saw it; replayed
        # on another partition, one the group never committed: only the check of
        # every assigned partition (not just the batch's) catches the rollback
        ((partition, _),) = await produce(s.bootstrap, s.handoffs, [later[1]], key=b"elsewhere")
        assert partition != 0
        replay = (await _decided(s, 6))[5]
        assert (replay.outcome, replay.reason, replay.receipt_id) == ("reject", "store_warming", later[1].receipt_id)
        assert _metric(restored, "busguard_store_rearms_total") == 1
        log = restored.tail(400)
        assert "state store is behind the consumer group" in log and '"committed": 5' in log and '"watermark": 1' in log
    finally:
        assert restored.terminate() == 0, restored.tail()
    forwarded = await _forwarded(s)
    assert len(forwarded) == 4 and forwarded.count(later[1].receipt_bytes) == 1  # a, b, c, d: d not forwarded twice


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUSGUARD_")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "busguard.cli", *args], capture_output=True, text=True, env=env, timeout=60)


async def test_state_init_declares_a_new_deployment_and_run_without_it_warms(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """Both ways a store comes to exist. The kit's store is genesis (`state
    init`): a record signed before the guard even starts is admitted. Deleted,
    `busguard run` creates one itself, which may replace a lost store: the
    same kind of record is refused (on a new group, so the creation fence
    alone, no re-arm)."""
    s = await make_setup(tmp_path, broker.bootstrap)
    shown = _cli("state", "show", "--config", str(s.config))
    assert shown.returncode == 0 and "origin genesis" in shown.stdout and "trusted_from_ms: None" in shown.stdout, shown
    again = _cli("state", "init", "--config", str(s.config))
    assert again.returncode == 2
    assert f"{s.config}: state.path = '{s.state_path}': a path with no state store yet" in again.stderr, again.stderr

    early = _handoff("signed-before-start")
    await produce(s.bootstrap, s.handoffs, [early])
    genesis = GuardProcess(s)
    try:
        genesis.wait_ready()
        (d,) = await _decided(s, 1)
        assert d.reason == "admitted" and _metric(genesis, "busguard_store_fence_end_ms") == 0
    finally:
        assert genesis.terminate() == 0, genesis.tail()

    other = await make_setup(tmp_path / "auto", broker.bootstrap)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{other.state_path}{suffix}").unlink(missing_ok=True)
    auto = GuardProcess(other)
    try:
        auto.wait_ready()
        await produce(other.bootstrap, other.handoffs, [_handoff("after-start")])
        (d,) = await _decided(other, 1)
        assert (d.outcome, d.reason) == ("reject", "store_warming")
        assert _metric(auto, "busguard_store_rearms_total") == 0 and _metric(auto, "busguard_store_fence_end_ms") > 0
    finally:
        assert auto.terminate() == 0, auto.tail()
    shown = _cli("state", "show", "--config", str(other.config))
    assert "origin created" in shown.stdout and f"decided up to {other.handoffs}:" in shown.stdout, shown


async def test_a_rearmed_fence_is_the_decided_at_of_the_batch_it_refuses(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """Issue 19 item 10, through `busguard run`. A genesis store put in place
    of one the group had committed past is found behind before its first
    batch and re-arms. Its T must be that batch's decided_at (docs/protocol.md
    6.4 and 12.1), not a later clock reading: then a record issued at
    decided_at + max_future_ms + 1 is judged normally and one issued at
    decided_at + max_future_ms is refused, as the audit record's own numbers say."""
    s = await make_setup(tmp_path, broker.bootstrap)
    first = GuardProcess(s)
    first.wait_ready()
    try:
        await produce(s.bootstrap, s.handoffs, [_handoff("before")])
        await _decided(s, 1)
    finally:
        assert first.terminate() == 0, first.tail()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{s.state_path}{suffix}").unlink(missing_ok=True)
    assert _cli("state", "init", "--config", str(s.config)).returncode == 0  # genesis: no fence of its own
    second = GuardProcess(s)
    try:
        second.wait_ready()
        await produce(s.bootstrap, s.handoffs, [_handoff("refused")])
        refused = (await _decided(s, 2))[1]
        assert (refused.reason, _metric(second, "busguard_store_rearms_total")) == ("store_warming", 1)
        d = refused.decided_at
        assert f"({d})" in (refused.detail or ""), refused.detail  # T = decided_at, named in the record itself
        await produce(s.bootstrap, s.handoffs, [_handoff("spared", issued_at_ms=d + 30_001), _handoff("fenced", issued_at_ms=d + 30_000)])
        later = {x.task_id: x.reason for x in (await _decided(s, 4))[2:]}
        assert later == {"spared": "admitted", "fenced": "store_warming"}, later
    finally:
        assert second.terminate() == 0, second.tail()
