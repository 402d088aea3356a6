"""Two real deployments on the embedded broker that seal with one guard key
and one reconciler key (a cloned staging stack), each with its own
namespace (consumer group) and topics. B's audit records and forwards,
copied unchanged into A's topics, are findings of A's audit, which counts
none of B's tasks, while B's own audit stays clean."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, all_decided, collect, collect_all, identity, make_setup, produce, sender
from busguard.protocol.records import Decision, audit_decoder
from busguard.sdk.sender import SignedRecord

from .paths import REPO

FOREIGN = {"foreign_decision", "foreign_resolution", "foreign_forward", "foreign_chain"}


def _workload(tmp: Path, prefix: str, n: int = 12) -> tuple[list[SignedRecord], list[SignedRecord], int]:
    """Handoffs with duplicates and two legacy re-sends that escalate (the
    reconciler resolves them), and an ack per handoff; task ids of their own."""
    planner, legacy, executor = (
        sender("planner", session=tmp / "planner.session"),
        sender("executor"),
        sender("executor", session=tmp / "executor.session"),
    )
    to_exec, to_planner = identity("executor").agent_id, identity("planner").agent_id
    handoffs: list[SignedRecord] = []
    acks: list[SignedRecord] = []
    for i in range(n):
        rec = planner.sign(kind="handoff", task_id=f"{prefix}task-{i}", receiver=to_exec, payload=f'{{"n":{i}}}'.encode())
        handoffs += [rec, rec] if i % 4 == 1 else [rec]
        acks.append(executor.sign(kind="ack", task_id=f"{prefix}task-{i}", receiver=to_planner, payload=b'{"ok":true}'))
    escalations = 0
    for i in range(2):
        old = legacy.sign(kind="handoff", task_id=f"{prefix}legacy-{i}", receiver=to_exec, payload=b"{}")
        handoffs += [old, legacy.sign(kind="handoff", task_id=f"{prefix}legacy-{i}", receiver=to_exec, payload=b"{}")]
        escalations += 1
    return handoffs, acks, escalations


def _cli(s: Setup, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "busguard.cli", *args, "--config", str(s.config), "--idle-ms", "800"],
        capture_output=True,
        env=env,
        timeout=180,
    )


def _audit(s: Setup) -> tuple[int, dict]:  # type: ignore[type-arg]
    done = _cli(s, "audit", "--json")
    assert done.returncode in (0, 1), done.stderr.decode()
    return done.returncode, json.loads(done.stdout)


def _resolutions(got) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for v in {r.value for r in got} if v and b'"type":"resolution"' in v)


async def _run(s: Setup, prefix: str, reconcile: bool) -> None:
    """Start the deployment's guard (and reconciler), feed it, wait until every
    input is decided (and every escalation resolved), and stop."""
    procs = [GuardProcess(s)] + ([GuardProcess(s, command="reconcile")] if reconcile else [])
    try:
        for p in procs:
            p.wait_ready()
        handoffs, acks, escalations = _workload(s.dir, prefix)
        await produce(s.bootstrap, s.handoffs, handoffs, key=b"planner")
        await produce(s.bootstrap, s.acks, acks, key=b"executor")
        total = len(handoffs) + len(acks)
        await collect(
            s.bootstrap,
            s.outputs,
            lambda c: all_decided(s, c, total) and (not reconcile or _resolutions(c[s.audit]) >= escalations),
            timeout=120,
        )
    finally:
        for p in procs:
            assert p.terminate() == 0, p.tail()


async def test_a_cloned_deployments_records_copied_into_the_audit_log_are_findings(broker: EmbeddedBroker, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = await make_setup(tmp_path / "a", broker.bootstrap), await make_setup(tmp_path / "b", broker.bootstrap)
    for key in ("guard_key", "reconciler_key"):  # the clone: B seals with A's keys
        shutil.copyfile(getattr(a, key), getattr(b, key))
        os.chmod(getattr(b, key), 0o600)
    assert a.guard.public_key == b.guard.public_key and a.group != b.group and a.audit != b.audit
    await _run(a, "", reconcile=False)
    await _run(b, "b-", reconcile=True)

    code, before = _audit(a)
    assert code == 0 and before["ok"], before["violations"]
    assert _audit(b)[0] == 0

    # copy B's audit records and forwards, unchanged, into A's topics
    got = await collect_all(b.bootstrap, [b.audit, b.downstream_handoffs, b.downstream_acks])
    copied = {t: [(r.value, list(r.headers)) for r in got[t]] for t in (b.audit, b.downstream_handoffs, b.downstream_acks)}
    await produce(a.bootstrap, a.audit, copied[b.audit], key=b"copied")
    await produce(a.bootstrap, a.downstream_handoffs, copied[b.downstream_handoffs], key=b"copied")
    await produce(a.bootstrap, a.downstream_acks, copied[b.downstream_acks], key=b"copied")
    b_records = {v for v, _ in copied[b.audit]}
    b_decisions = [d for d in (audit_decoder.decode(v) for v in b_records if v) if isinstance(d, Decision)]
    assert b_decisions and _resolutions(got[b.audit]) == 2

    code, after = _audit(a)
    assert code == 1 and not after["ok"]
    found = {v["invariant"] for v in after["violations"]}
    assert found == FOREIGN, after["violations"]
    unchanged = ("decisions", "resolutions", "tasks", "forwarded", "duplicates", "escalations", "pending")
    assert {k: after["summary"][k] for k in unchanged} == {k: before["summary"][k] for k in unchanged}  # none of B's counted
    assert after["tasks"] == before["tasks"] and after["pending"] == before["pending"] and after["chains"] == before["chains"]
    assert after["summary"]["foreign"] == len(b_records) == after["summary"]["records"] - before["summary"]["records"]
    by_id = {v["decision_id"]: v["detail"] for v in after["violations"] if v["invariant"] == "foreign_decision"}
    assert set(by_id) == {d.decision_id for d in b_decisions}
    d = b_decisions[0]
    detail = by_id[d.decision_id]
    assert f"audit record {a.audit}/" in detail and f"read from {d.source.topic}/{d.source.partition}/{d.source.offset}" in detail
    assert f"source topic '{b.handoffs if d.source.topic == b.handoffs else b.acks}' is not an input topic" in detail
    assert f"(namespace '{a.group}')" in detail
    table = _cli(a, "audit")
    assert table.returncode == 1 and b"[foreign_decision]" in table.stdout and b"of another deployment excluded" in table.stdout

    # an operator of A asking about B's escalation is told it is not A's
    esc = next(x for x in b_decisions if x.outcome == "escalate")
    shown = _cli(a, "escalations", "show", esc.decision_id)
    assert shown.returncode == 1 and json.loads(shown.stdout)["status"] == "foreign"

    # B's own audit, of the same records, is unchanged and clean
    code, b_after = _audit(b)
    assert code == 0 and b_after["ok"] and b_after["summary"]["foreign"] == 0
    assert b_after["tasks"] and all(t["task_id"].startswith("b-") for t in b_after["tasks"])
    assert not any(t["task_id"].startswith("b-") for t in after["tasks"])
    print(f"\nA's audit: {len(after['violations'])} foreign findings for {len(b_records)} copied audit records")
