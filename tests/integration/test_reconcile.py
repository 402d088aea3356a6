"""The reconciliation worker against the real broker: automatic and operator
resolutions, exactly once, including across a kill -9 mid-batch."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import msgspec
import pytest

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, collect, collect_all, header, identity, make_setup, produce, sender
from busguard.protocol.attestation import verify_decision_record
from busguard.protocol.records import Decision, Reply, Resolution, audit_decoder

from .paths import REPO

# also on the embedded broker, which the demo runs on
pytestmark = pytest.mark.brokers("kafka", "tansu")


def escalating_workload(tmp: Path, n: int) -> list:  # type: ignore[type-arg]
    """n legacy retransmissions (auto-resolvable) and n//3 payload conflicts (held)."""
    planner = sender("planner")
    receiver = identity("executor").agent_id
    records = []
    for i in range(n):
        first = planner.sign(kind="handoff", task_id=f"t-{i}", receiver=receiver, payload=b"work")
        retry = planner.sign(kind="handoff", task_id=f"t-{i}", receiver=receiver, payload=b"work")
        records += [first, retry]
        if i % 3 == 0:
            records.append(planner.sign(kind="handoff", task_id=f"t-{i}", receiver=receiver, payload=b"other work"))
    return records


def resolutions(s: Setup, got) -> list[Resolution]:  # type: ignore[no-untyped-def]
    out = []
    for r in got[s.audit]:
        rec = audit_decoder.decode(r.value)
        if isinstance(rec, Resolution):
            verify_decision_record(r.value, list(r.headers), s.reconciler.public_key)  # the reconciler's own key, not the guard's
            out.append(rec)
    return out


def check_each_escalation_resolved_once(s: Setup, got, n: int) -> dict[str, Resolution]:  # type: ignore[no-untyped-def]
    escalations = [msgspec.json.decode(r.value, type=Decision) for r in got[s.reconciliation] if not header(r, "busguard-command")]
    ids = {d.decision_id for d in escalations}
    assert len(ids) == n + len(range(0, n, 3))
    by_stage: dict[tuple[str, str], set[bytes]] = defaultdict(set)
    for r in got[s.audit]:
        rec = audit_decoder.decode(r.value)
        if isinstance(rec, Resolution):
            by_stage[(rec.escalation_id, rec.stage)].add(r.value)
    # exactly one record content per (escalation, stage): re-emissions are identical, never a new id
    assert all(len(v) == 1 for v in by_stage.values())
    finals = {e: audit_decoder.decode(next(iter(v))) for (e, stage), v in by_stage.items() if stage == "final"}
    helds = {e for (e, stage) in by_stage if stage == "held"}
    auto = {d.decision_id for d in escalations if d.reason == "ambiguous_retransmission"}
    assert set(finals) >= auto and helds == ids - auto
    return finals  # type: ignore[return-value]


async def test_automatic_and_operator_resolutions(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap)
    guard, worker = GuardProcess(s), GuardProcess(s, command="reconcile")
    try:
        guard.wait_ready()
        worker.wait_ready()
        records = escalating_workload(tmp_path, 6)
        await produce(s.bootstrap, s.handoffs, records, key=b"planner")
        got = await collect(
            s.bootstrap, [s.audit, s.reconciliation, s.replies], lambda c: len(resolutions(s, c)) >= 8 and len(c[s.replies]) >= 6
        )
        finals = check_each_escalation_resolved_once(s, got, 6)
        assert {f.resolved_as for f in finals.values()} == {"retransmission"}
        # replies carry the first admission back to the sender
        for r in got[s.replies]:
            verify_decision_record(r.value, list(r.headers), s.reconciler.public_key)
            reply = msgspec.json.decode(r.value, type=Reply)
            assert reply.to == identity("planner").agent_id and reply.admission.task_id == reply.task_id
        held = [res for res in resolutions(s, got) if res.stage == "held"]
        target = held[0].escalation_id
        # an operator settles one held conflict through the CLI; a second attempt is refused
        cli = [
            sys.executable,
            "-m",
            "busguard.cli",
            "escalations",
            "resolve",
            target,
            "--as",
            "reject",
            "--note",
            "payload differs",
            "--operator",
            "ana",
            "--config",
            str(s.config),
        ]
        first = subprocess.run(cli, capture_output=True, text=True, timeout=60, cwd=REPO)
        assert first.returncode == 0, first.stderr
        assert '"by": "operator:ana"' in first.stdout or '"by":"operator:ana"' in first.stdout
        second = subprocess.run([*cli[:-2], "--wait", "0", "--config", str(s.config)], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert second.returncode == 0, second.stderr  # sent; the reconciler refuses it
        dlq = await collect(
            s.bootstrap, [s.dead_letter], lambda c: any(header(r, "busguard-reason") == b"already_resolved" for r in c[s.dead_letter])
        )
        assert dlq[s.dead_letter]
    finally:
        assert worker.terminate() == 0, worker.tail()
        assert guard.terminate() == 0, guard.tail()
    settled = await collect_all(s.bootstrap, [s.audit, s.reconciliation])
    finals = check_each_escalation_resolved_once(s, settled, 6)
    assert finals[target].by == "operator:ana" and finals[target].resolved_as == "reject"


def _state(backend: str, request: pytest.FixtureRequest) -> dict[str, object] | None:
    """[state] for `backend`: the default SQLite files, or the session PostgreSQL
    (tests/conftest.py) in a schema of the test's own, guard and reconciler both."""
    if backend == "sqlite":
        return None
    return {"backend": "postgres", "dsn": request.getfixturevalue("postgres").dsn, "schema": request.getfixturevalue("pg_schema")}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize("point", ["persisted", "produced"])
async def test_kill_9_mid_batch_resolves_every_escalation_exactly_once(
    broker: EmbeddedBroker, tmp_path: Path, point: str, backend: str, request: pytest.FixtureRequest
) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, max_records=5, state=_state(backend, request))
    guard = GuardProcess(s)
    try:
        guard.wait_ready()
        records = escalating_workload(tmp_path, 30)
        await produce(s.bootstrap, s.handoffs, records, key=b"planner")
        await collect(s.bootstrap, [s.reconciliation], lambda c: len(c[s.reconciliation]) >= 40)
    finally:
        assert guard.terminate() == 0
    victim = GuardProcess(s, command="reconcile", fault=f"{point}:3")
    assert victim.wait(60) == -9, victim.tail()
    survivor = GuardProcess(s, command="reconcile")
    try:
        survivor.wait_ready()
        got = await collect(s.bootstrap, [s.audit, s.reconciliation], lambda c: len(resolutions(s, c)) >= 40, timeout=90)
    finally:
        assert survivor.terminate() == 0, survivor.tail()
    settled = await collect_all(s.bootstrap, [s.audit, s.reconciliation, s.replies])
    finals = check_each_escalation_resolved_once(s, settled, 30)
    assert len(finals) == 30
    # one reply per automatic resolution, re-emissions identical
    assert len({r.value for r in settled[s.replies]}) == 30
    del got


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_two_workers_share_the_load_and_resolve_each_escalation_once(
    broker: EmbeddedBroker, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, max_records=5, state=_state(backend, request))
    guard = GuardProcess(s)
    a = GuardProcess(s, command="reconcile")
    b: GuardProcess | None = None
    try:
        guard.wait_ready()
        a.wait_ready()
        planner = sender("planner")
        receiver = identity("executor").agent_id
        records = []
        for i in range(40):  # 40 tasks with different keys spread over the partitions
            first = planner.sign(kind="handoff", task_id=f"spread-{i}", receiver=receiver, payload=b"w")
            records += [first, planner.sign(kind="handoff", task_id=f"spread-{i}", receiver=receiver, payload=b"w")]
        await produce(s.bootstrap, s.handoffs, records[:40], key=b"planner")
        b = GuardProcess(s, command="reconcile")  # joins mid-stream: the group splits the partitions
        b.wait_ready()
        await produce(s.bootstrap, s.handoffs, records[40:], key=b"planner")
        got = await collect(s.bootstrap, [s.audit, s.reconciliation], lambda c: len(resolutions(s, c)) >= 40, timeout=90)
    finally:
        for p in (b, a, guard):
            if p is not None:
                assert p.terminate() == 0, p.tail()
    settled = await collect_all(s.bootstrap, [s.audit, s.reconciliation, s.replies])
    by_escalation: dict[str, set[bytes]] = defaultdict(set)
    for r in settled[s.audit]:
        rec = audit_decoder.decode(r.value)
        if isinstance(rec, Resolution):
            by_escalation[rec.escalation_id].add(r.value)
    assert len(by_escalation) == 40 and all(len(v) == 1 for v in by_escalation.values())
    assert len({r.value for r in settled[s.replies]}) == 40
    # both workers resolved some of them
    assert '"event": "resolution"' in a.log.read_text() and '"event": "resolution"' in b.log.read_text()  # type: ignore[union-attr]
    if backend == "postgres":  # both workers kept their state in the shared database
        from busguard.reconcile.policy import EscalationState
        from busguard.runtime.outputs import Output
        from busguard.state.postgres.reconcile import PostgresReconcileStore

        shared = PostgresReconcileStore(
            request.getfixturevalue("postgres").dsn, output=Output, state=EscalationState, schema=request.getfixturevalue("pg_schema")
        )
        assert len(list(shared.escalations())) == 40
        shared.close()
    del got
