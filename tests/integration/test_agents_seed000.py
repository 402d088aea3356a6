"""Seed 000 on the SDK: the executor killed -9 at random instants, and the guard once, still acts once per task.

Real processes only: the session broker, `busguard run` (via guardkit, on a
store made as `busguard state init` makes one), the planner and executor
of examples/seed000/sdk_*.py. The executor is restarted after every kill;
some runs die at an ActOnce crash point (BUSGUARD_AGENT_CRASH_AT), the
others at a random instant chosen here. The guard dies by its own fault
hook after producing a batch and before committing its offsets, so its
successor re-emits those forwards byte for byte with the same decision ids.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import msgspec
import pytest

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, collect_all, identity, make_setup
from busguard.protocol.attestation import verify_decision_record
from busguard.protocol.identity import multikey_encode
from busguard.protocol.keyfile import write_key
from busguard.protocol.records import Decision
from busguard.sdk.once import CRASH_ENV, CRASH_POINTS

from .paths import REPO

EXAMPLES = REPO / "examples" / "seed000"
TASKS = 300
MIN_KILLS = 20


def _pipeline(s: Setup) -> Path:
    """pipeline.json and the agents' keys for examples/seed000 (common.Pipeline's fields)."""
    for name in ("planner", "executor"):
        write_key(s.dir / f"{name}.key", identity(name))
    doc = {
        "dir": str(s.dir),
        "bootstrap": s.bootstrap,
        "guarded": True,
        "planner": identity("planner").agent_id,
        "executor": identity("executor").agent_id,
        "handoffs": s.handoffs,
        "acks": s.acks,
        "executor_inbox": s.downstream_handoffs,
        "planner_inbox": s.downstream_acks,
        "guard_public_key": multikey_encode(s.guard.public_key),
        "busguard_config": str(s.config),
    }
    (s.dir / "pipeline.json").write_text(json.dumps(doc))
    return s.dir


def _agent(name: str, d: Path, run: int, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], Path]:
    log = d / f"{name}-{run}.log"
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "PYTHONUNBUFFERED": "1", **(env or {})}
    environ.pop(CRASH_ENV, None)
    environ.update(env or {})
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(EXAMPLES / f"{name}.py"), "--pipeline", str(d), *args], stdout=out, stderr=subprocess.STDOUT, env=environ
        )
    return proc, log


def _effects(d: Path) -> list[tuple[str, str]]:
    db = d / "executor.db"
    if not db.exists():
        return []
    conn = sqlite3.connect(db)
    try:
        return [(str(t), str(i)) for t, i in conn.execute("SELECT task_id, decision_id FROM effects").fetchall()]
    except sqlite3.OperationalError:  # the table is not there yet
        return []
    finally:
        conn.close()


def _crash_point(log: Path) -> str | None:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.startswith("busguard-agent-crash ")]
    return lines[-1].split()[1] if lines else None


@pytest.mark.parametrize("commits", ["offsets", "transactions"])
async def test_executor_killed_at_random_instants_acts_once_per_admitted_task(
    broker: EmbeddedBroker, tmp_path: Path, commits: str, request: pytest.FixtureRequest
) -> None:
    """`commits`: the guard's commit mode; with transactions (Apache Kafka
    only), its kill leaves an aborted copy of the batch on the executor's
    inbox, which the SDK's consumer reads (read_uncommitted) and ActOnce
    skips as done before."""
    bootstrap = request.getfixturevalue("kafka").bootstrap if commits == "transactions" else broker.bootstrap
    s = await make_setup(tmp_path, bootstrap, partitions=1, max_records=20)
    d = _pipeline(s)
    rng = random.Random()
    env = {"BUSGUARD_KAFKA__TRANSACTIONAL_ID": "guard-{hostname}"} if commits == "transactions" else {}
    guards = [GuardProcess(s, fault="produced:15", env=env)]  # dies after a produced batch, before its offset commit
    guards[0].wait_ready()
    planner, planner_log = _agent("sdk_planner", d, 0, "--tasks", str(TASKS), "--pace", "0.08")
    kills: Counter[str] = Counter()
    guard_kills = run = 0
    try:
        # until 20 kills, every point hit at least once (each run arms one point, or none), and every task handed off
        while (
            kills.total() < MIN_KILLS or not all(kills[p] for p in (*CRASH_POINTS, "random")) or not (d / "sdk-planner.sent.json").exists()
        ):
            assert planner.poll() is None, planner_log.read_text()
            assert run < 80, f"kills so far: {dict(kills)}"
            if guards[-1].proc.poll() is not None:  # the guard's fault hook fired: kill -9 by itself
                assert guards[-1].wait() == -signal.SIGKILL, guards[-1].tail()
                guard_kills += 1
                guards.append(GuardProcess(s, env=env))
                guards[-1].wait_ready()
            run += 1
            # every other run arms the point hit least so far (a run under load may reach few
            # claims before it is killed), more likely to fire while that point has no kill yet
            point = min(CRASH_POINTS, key=kills.__getitem__) if run % 2 else None
            env = {CRASH_ENV: f"{point}:{0.3 if point == 'before_offset_commit' or not kills[point] else 0.05}"} if point else {}
            executor, log = _agent("sdk_executor", d, run, env=env)
            try:
                executor.wait(rng.uniform(0.8, 3.5))  # ~1 s of it is the interpreter starting
            except subprocess.TimeoutExpired:
                executor.send_signal(signal.SIGKILL)
            rc = executor.wait(30)
            assert rc == -signal.SIGKILL, log.read_text()
            kills[_crash_point(log) or "random"] += 1
        assert guard_kills >= 1, "the guard's fault hook never fired"
        # a clean executor finishes the work: every handed-off task gets its effect
        final, log = _agent("sdk_executor", d, run + 1)
        deadline = time.monotonic() + 90
        while len({t for t, _ in _effects(d)}) < TASKS:
            assert final.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        time.sleep(3)  # its last acks reach the guard and the planner
        planner.send_signal(signal.SIGTERM)
        assert planner.wait(60) == 0, planner_log.read_text()
        final.send_signal(signal.SIGTERM)
        assert final.wait(30) == 0, log.read_text()
    finally:
        for p in (planner,):
            if p.poll() is None:
                p.kill()
        for g in guards:
            if g.proc.poll() is None:
                g.terminate()
    print(f"executor kills per point: {dict(kills)}; guard kills: {guard_kills}")
    assert all(kills[p] >= 1 for p in (*CRASH_POINTS, "random")), kills

    audit = subprocess.run(
        [sys.executable, "-m", "busguard.cli", "audit", "--config", str(s.config), "--json"], capture_output=True, text=True, timeout=180
    )
    assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-3000:]
    report = json.loads(audit.stdout)
    witness = {(t["kind"], t["task_id"]): t["witness"] for t in report["tasks"] if t["forwards"] == 1}
    assert all(t["forwards"] == 1 for t in report["tasks"])
    admitted = {task for kind, task in witness if kind == "handoff"}
    assert admitted == {f"task-{i}" for i in range(1, TASKS + 1)}

    effects = _effects(d)
    per_task = Counter(t for t, _ in effects)
    assert set(per_task) == admitted and set(per_task.values()) == {1}, [t for t, n in per_task.items() if n > 1]
    assert all(witness[("handoff", t)] == decision for t, decision in effects)  # the effect is the admitted decision's

    summary = json.loads((d / "sdk-planner.json").read_text())
    assert summary["unacknowledged"] == [] and summary["acknowledged_more_than_once"] == []
    assert {t: ids for t, ids in summary["acks"].items()} == {t: [witness[("ack", t)]] for t in admitted}

    # the guard's re-emissions happened (more audit records than decisions), and none became a second effect
    got = await collect_all(s.bootstrap, [s.audit])
    by_source: dict[tuple[str, int, int], set[bytes]] = defaultdict(set)
    for r in got[s.audit]:
        verify_decision_record(r.value, list(r.headers), s.guard.public_key)
        decision = msgspec.json.decode(r.value, type=Decision)
        by_source[(decision.source.topic, decision.source.partition, decision.source.offset)].add(r.value)
    assert all(len(v) == 1 for v in by_source.values()), "an input got two different decisions"
    assert len(got[s.audit]) > len(by_source)
    reasons = Counter(msgspec.json.decode(next(iter(v)), type=Decision).reason for v in by_source.values())
    assert reasons["exact_duplicate"] >= 1, reasons  # staged acks resent byte for byte after an after_reply_sent kill
