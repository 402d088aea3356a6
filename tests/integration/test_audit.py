"""`busguard audit` against real guard processes and the real broker: a crash
and restart still prove exactly-once from the log alone; forgeries in the log
are caught, also incrementally from a checkpoint and through the CLI."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import time
from base64 import b64decode
from pathlib import Path

import msgspec
import pytest

from busguard.audit.lineage import AuditReport
from busguard.audit.reader import read_log
from busguard.audit.run import load_checkpoint, run_audit
from busguard.config import Config, load_config
from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, all_decided, collect, collect_all, identity, make_setup, produce, sender
from busguard.protocol.attestation import attest, decision_bytes, seal
from busguard.protocol.identity import multikey_encode
from busguard.protocol.receipt import receipt_id
from busguard.protocol.records import Coordinates, Decision
from busguard.protocol.signing import Signer, public_key_from_seed
from busguard.sdk.sender import SignedRecord

from .paths import REPO

# also on the embedded broker, which the demo runs on
pytestmark = pytest.mark.brokers("kafka", "tansu")

IMPOSTOR_SEED = hashlib.sha256(b"busguard-it:impostor").digest()


def workload(tmp: Path, n: int = 120) -> tuple[list[SignedRecord], list[SignedRecord], dict[str, int]]:
    """Handoffs on one partition (with exact duplicates, proven retransmissions,
    legacy re-sends that escalate and a forgery) and one ack per handoff."""
    planner = sender("planner", session=tmp / "planner.session")
    legacy = sender("executor")
    executor = sender("executor", session=tmp / "executor.session")
    to_exec, to_planner = identity("executor").agent_id, identity("planner").agent_id
    handoffs: list[SignedRecord] = []
    acks: list[SignedRecord] = []
    counts = {"tasks": 0, "duplicates": 0, "escalations": 0}
    for i in range(n):
        rec = planner.sign(kind="handoff", task_id=f"task-{i}", receiver=to_exec, payload=f'{{"n":{i}}}'.encode())
        handoffs.append(rec)
        acks.append(executor.sign(kind="ack", task_id=f"task-{i}", receiver=to_planner, payload=b'{"ok":true}'))
        counts["tasks"] += 2
        if i % 10 == 3:
            handoffs.append(rec)
            counts["duplicates"] += 1
        if i % 25 == 7:
            handoffs.append(planner.sign(kind="handoff", task_id=f"task-{i}", receiver=to_exec, payload=f'{{"n":{i}}}'.encode()))
            counts["duplicates"] += 1
        if i % 30 == 11:
            handoffs.append(legacy.sign_receipt(rec.receipt, rec.value))  # bad_signature: a reject for task-i
        if i % 20 == 13:
            first = legacy.sign(kind="handoff", task_id=f"legacy-{i}", receiver=to_exec, payload=b"{}")
            again = legacy.sign(kind="handoff", task_id=f"legacy-{i}", receiver=to_exec, payload=b"{}")
            handoffs += [first, again]
            counts["tasks"] += 1
            counts["escalations"] += 1
    return handoffs, acks, counts


def _cfg(s: Setup) -> Config:
    return load_config(s.config)


async def _audit(s: Setup, **kw: object) -> tuple[AuditReport, float]:
    started = time.perf_counter()
    report = await asyncio.to_thread(
        run_audit, _cfg(s), guard_public_key=s.guard.public_key, reconciler_public_key=s.reconciler.public_key, **kw
    )  # type: ignore[arg-type]
    return report, time.perf_counter() - started


def _distinct_sources(s: Setup, got) -> int:  # type: ignore[no-untyped-def]
    return len({msgspec.json.decode(r.value, type=Decision).source.offset for r in got[s.audit] if r.value})


async def test_audit_after_a_crash_and_restart_proves_exactly_once(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, max_records=20)
    victim = GuardProcess(s, fault="produced:2")  # dies after producing its 2nd batch, before committing it
    victim.wait_ready()  # first: records signed before its store existed would be store_warming
    handoffs, acks, counts = workload(tmp_path)
    await produce(s.bootstrap, s.handoffs, handoffs, key=b"planner")
    await produce(s.bootstrap, s.acks, acks, key=b"executor")
    total = len(handoffs) + len(acks)
    assert victim.wait(60) == -9, victim.tail()
    survivor = GuardProcess(s)
    try:
        survivor.wait_ready()
        await collect(s.bootstrap, s.outputs, lambda c: all_decided(s, c, total) and len({(r.topic, r.value) for r in c[s.audit]}) >= total)
    finally:
        assert survivor.terminate() == 0, survivor.tail()
    raw = await collect_all(s.bootstrap, [s.audit])
    assert len(raw[s.audit]) > total  # the crashed batch was re-emitted: more audit records than decisions

    report, seconds = await _audit(s, idle_ms=1000)
    assert report.ok, report.violations
    sm = report.summary
    assert sm.decisions == total and sm.records == total  # identical re-emissions count once
    assert (sm.tasks, sm.duplicates, sm.escalations, sm.pending) == (
        counts["tasks"],
        counts["duplicates"],
        counts["escalations"],
        counts["escalations"],
    )
    for t in report.tasks:  # every task exactly once, and delivered
        assert t.forwards == 1 and t.delivered and t.witness is not None, t
    assert {p.task_id for p in report.pending} == {t.task_id for t in report.tasks if t.escalations}
    assert all(p.reason == "ambiguous_retransmission" and p.supersedes == p.prior_receipt_id for p in report.pending)
    assert sm.forwarded == len(report.tasks)
    read = len(raw[s.audit]) + sm.forwarded
    print(f"\naudit read {read} records ({len(raw[s.audit])} audit + downstream) in {seconds:.2f}s incl. 1.0s idle wait")


def _forged_audit_record(s: Setup) -> tuple[bytes, list[tuple[str, bytes]]]:
    """A second 'admission' of task-0, sealed with a key that is not the guard's."""
    d = Decision(
        decision_id="f" * 32,
        outcome="forward",
        reason="admitted",
        source=Coordinates(topic=s.handoffs, partition=0, offset=999_999),
        decided_at=int(time.time() * 1000),
        kind="handoff",
        task_id="task-0",
        nonce="forged-nonce-000000000",
    )
    body = decision_bytes(d)
    att = attest(d, body, "tulpa:" + multikey_encode(public_key_from_seed(IMPOSTOR_SEED)))
    return body, [
        ("busguard-decision-id", d.decision_id.encode()),
        ("busguard-attestation", att),
        ("busguard-seal", seal(Signer(IMPOSTOR_SEED), att)),
    ]


def _cli(s: Setup, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "busguard.cli", *args, "--config", str(s.config)], capture_output=True, env=env, timeout=120
    )


async def test_forgeries_are_caught_incrementally_and_by_the_cli(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap)
    guard = GuardProcess(s)
    guard.wait_ready()
    handoffs, acks, counts = workload(tmp_path, n=40)
    await produce(s.bootstrap, s.handoffs, handoffs, key=b"planner")
    await produce(s.bootstrap, s.acks, acks, key=b"executor")
    try:
        await collect(s.bootstrap, s.outputs, lambda c: all_decided(s, c, len(handoffs) + len(acks)))
    finally:
        assert guard.terminate() == 0, guard.tail()

    # 1. the real CLI, a clean log: exit 0, JSON report
    done = _cli(s, "audit", "--json", "--idle-ms", "800")
    assert done.returncode == 0, done.stderr.decode()
    clean = json.loads(done.stdout)
    assert clean["ok"] is True and clean["summary"]["pending"] == counts["escalations"] == 2
    # escalations list / show, also with only the public key (an auditor without the private key file)
    listed = _cli(s, "escalations", "list", "--json", "--idle-ms", "800", "--guard-public-key", multikey_encode(s.guard.public_key))
    assert listed.returncode == 0, listed.stderr.decode()
    pending = json.loads(listed.stdout)
    assert [p["escalation_id"] for p in pending] == [p["escalation_id"] for p in clean["pending"]]
    shown = _cli(s, "escalations", "show", pending[0]["escalation_id"], "--idle-ms", "800")
    assert shown.returncode == 0, shown.stderr.decode()
    facts = json.loads(shown.stdout)
    assert facts["status"] == "pending" and facts["verified"] is True
    assert facts["escalation"]["supersedes"] == pending[0]["supersedes"] == facts["escalation"]["prior"]["receipt_id"]
    assert receipt_id(b64decode(facts["receipt"])) == pending[0]["receipt_id"]
    assert receipt_id(b64decode(facts["prior_receipt"])) == pending[0]["prior_receipt_id"]
    assert _cli(s, "escalations", "show", "0" * 32, "--idle-ms", "500").returncode == 1

    # 2. in process, with a checkpoint: the first pass reads everything
    ckpt = tmp_path / "audit.ckpt"
    first, _ = await _audit(s, idle_ms=800, checkpoint=ckpt)
    assert first.ok and ckpt.exists()
    assert msgspec.json.encode(first) == msgspec.json.encode(msgspec.json.decode(done.stdout, type=AuditReport))

    # 3. forge: a fake audit record (bad seal) and an unattested record downstream
    value, headers = _forged_audit_record(s)
    await produce(s.bootstrap, s.audit, [(value, headers)], key=b"task-0")
    await produce(s.bootstrap, s.downstream_handoffs, [(b"{}", [("busguard-decision-id", b"f" * 32)])], key=b"x")

    # the resumed pass reads only the two new records ...
    cp = load_checkpoint(ckpt, _cfg(s), s.guard.public_key, s.reconciler.public_key)
    assert cp is not None
    seen: list[int] = []
    await read_log(_cfg(s), s.guard.public_key, cp.ledger, cp.offsets, 800, seen.append)
    assert sum(seen) == 2
    # ... and the incremental audit reports both forgeries, excluding the fake admission
    second, _ = await _audit(s, idle_ms=800, checkpoint=ckpt)
    assert not second.ok
    assert sorted(v.invariant for v in second.violations) == ["forged_record", "forwarded_unattested"]
    forged = next(v for v in second.violations if v.invariant == "forged_record")
    assert forged.decision_id == "f" * 32
    assert next(t for t in second.tasks if (t.kind, t.task_id) == ("handoff", "task-0")).forwards == 1
    # a from-scratch audit agrees with the incremental one (called straight
    # from this running event loop: run_audit then runs its own loop in a thread)
    scratch = run_audit(_cfg(s), guard_public_key=s.guard.public_key, reconciler_public_key=s.reconciler.public_key, idle_ms=800)
    assert msgspec.json.encode(scratch) == msgspec.json.encode(second)

    # 4. and the CLI exits 1, in JSON and as a table
    done = _cli(s, "audit", "--json", "--idle-ms", "800", "--since", str(tmp_path / "cli.ckpt"))
    assert done.returncode == 1, done.stderr.decode()
    assert {v["invariant"] for v in json.loads(done.stdout)["violations"]} == {"forged_record", "forwarded_unattested"}
    table = _cli(s, "audit", "--idle-ms", "800", "--progress")
    assert table.returncode == 1 and b"[forged_record]" in table.stdout and b"records" in table.stderr


async def test_resolutions_from_the_reconciler_are_audited(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap)
    guard, worker = GuardProcess(s), GuardProcess(s, command="reconcile")
    try:
        guard.wait_ready()
        worker.wait_ready()
        planner = sender("planner")
        to = identity("executor").agent_id
        records = []
        for i in range(4):
            first = planner.sign(kind="handoff", task_id=f"t-{i}", receiver=to, payload=b"work")
            records += [first, planner.sign(kind="handoff", task_id=f"t-{i}", receiver=to, payload=b"work")]  # auto-resolved
        records.append(planner.sign(kind="handoff", task_id="t-0", receiver=to, payload=b"other work"))  # conflict: held
        await produce(s.bootstrap, s.handoffs, records, key=b"planner")

        def settled(report: AuditReport) -> bool:
            return report.summary.escalations == 5 and report.summary.resolutions >= 5

        deadline = time.monotonic() + 60
        while True:
            report, _ = await _audit(s, idle_ms=600)
            if settled(report) or time.monotonic() > deadline:
                break
    finally:
        assert worker.terminate() == 0, worker.tail()
        assert guard.terminate() == 0, guard.tail()
    assert report.ok, report.violations
    statuses = sorted((e.reason, e.status, e.resolved_as) for t in report.tasks for e in t.escalations)
    assert statuses == [("ambiguous_retransmission", "resolved", "retransmission")] * 4 + [("task_conflict", "held", None)]
    (p,) = report.pending
    assert p.reason == "task_conflict" and p.held is not None
