"""Seed 000 end to end: planner -> executor -> auditor as real processes.

Each scenario runs `examples/seed000/run.py` against the session broker, as a
human would: real guard and reconciler processes (`busguard run` /
`busguard reconcile`), a real executor that SIGKILLs itself after sending
the ack for task-3 and before journaling it, a real restart from its
journal. The example's own report (run.json) is checked, and the key facts
are checked again independently of the example: the executor's journal, the
raw ack topic (signatures verified here), the audit topic, and a fresh
`busguard audit --json`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest

from busguard.config import load_config
from busguard.devconfig import DEV_BROKER_ENV, broker_name
from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import collect_all
from busguard.protocol.envelope import open_envelope
from busguard.protocol.identity import public_key_from_agent_id
from busguard.protocol.receipt import signing_input
from busguard.protocol.records import Decision, audit_decoder
from busguard.protocol.signing import verify_signature

from .paths import REPO

# also on the embedded broker, which the demo runs on
pytestmark = pytest.mark.brokers("kafka", "tansu")

RUN = REPO / "examples" / "seed000" / "run.py"
TASKS = 5
CRASH_AT = 3
CRASHED = f"task-{CRASH_AT}"
ALL_TASKS = [f"task-{i}" for i in range(1, TASKS + 1)]


class Scenario(msgspec.Struct, kw_only=True):
    exit_code: int
    output: str
    dir: Path
    run: dict[str, Any]  # run.json, the example's own summary
    pipeline: dict[str, Any]


async def run_example(bootstrap: str, directory: Path, *flags: str) -> Scenario:
    env = {**os.environ, "PYTHONPATH": str(REPO), DEV_BROKER_ENV: broker_name(bootstrap)}
    argv = [
        sys.executable,
        str(RUN),
        "--bootstrap",
        bootstrap,
        "--dir",
        str(directory),
        "--tasks",
        str(TASKS),
        "--crash-at",
        str(CRASH_AT),
        *flags,
    ]
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env, cwd=REPO)
    out, _ = await asyncio.wait_for(proc.communicate(), 300)
    output = out.decode(errors="replace")
    assert (directory / "run.json").exists(), f"run.py {' '.join(flags)} exited {proc.returncode} without run.json:\n{output}"
    return Scenario(
        exit_code=proc.returncode if proc.returncode is not None else -1,
        output=output,
        dir=directory,
        run=json.loads((directory / "run.json").read_text()),
        pipeline=json.loads((directory / "pipeline.json").read_text()),
    )


def check_executed_exactly_once(s: Scenario) -> None:
    """The executor crashed once (SIGKILL), recovered, and never ran a task twice."""
    assert s.run["executor_exits"] == [-signal.SIGKILL, 0], s.output
    assert s.run["busguard_exits"] == ({"run": 0, "reconcile": 0} if s.run["guarded"] else {}), s.output
    journal = s.run["journal"]
    for event in ("received", "executed", "ack_committed"):
        assert Counter(e["task_id"] for e in journal if e["event"] == event) == dict.fromkeys(ALL_TASKS, 1), (event, journal)
    assert f"CRASH: killed after sending the ack for {CRASHED}" in s.output
    assert f"recovery: {CRASHED} was executed but its ack was never committed" in s.output


async def raw_acks(bootstrap: str, s: Scenario) -> dict[str, list[tuple[str, str]]]:
    """The executor's ack topic as written, every signature verified here: task -> [(nonce, receipt id)]."""
    got = await collect_all(bootstrap, [s.pipeline["acks"]])
    acks: dict[str, list[tuple[str, str]]] = {}
    for rec in got[s.pipeline["acks"]]:
        env = open_envelope(rec.value, [(k, v) for k, v in rec.headers])
        key = public_key_from_agent_id(env.receipt.sender)
        assert env.receipt.sender == s.pipeline["executor"] and key is not None
        assert verify_signature(key, signing_input(env.receipt_bytes), env.signature)
        acks.setdefault(env.receipt.task_id, []).append((env.receipt.nonce, env.receipt_id))
    return acks


async def audit_decisions(bootstrap: str, s: Scenario) -> list[Decision]:
    cfg = load_config(s.pipeline["busguard_config"])
    got = await collect_all(bootstrap, [cfg.topics.audit])
    records = [audit_decoder.decode(r.value) for r in got[cfg.topics.audit]]
    return sorted({d.decision_id: d for d in records if isinstance(d, Decision)}.values(), key=lambda d: d.source.offset)


def busguard_audit(s: Scenario) -> tuple[int, dict[str, Any]]:
    """`busguard audit --json`, run here rather than through the example's auditor."""
    cmd = [sys.executable, "-m", "busguard.cli", "audit", "--config", s.pipeline["busguard_config"], "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def lineage(report: dict[str, Any], kind: str, task: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [t for t in report["tasks"] if t["kind"] == kind and t["task_id"] == task]
    assert len(found) == 1, found
    return found[0]


def check_one_witness_per_task(report: dict[str, Any]) -> None:
    """Every task: one admitted handoff and one admitted ack, each seen attested downstream."""
    assert report["ok"] is True and report["violations"] == [] and report["pending"] == []
    assert sorted((t["kind"], t["task_id"]) for t in report["tasks"]) == sorted((k, t) for k in ("ack", "handoff") for t in ALL_TASKS)
    for t in report["tasks"]:
        assert t["forwards"] == 1 and t["delivered"] is True and t["rejects"] == 0, t
        if (t["kind"], t["task_id"]) != ("ack", CRASHED):
            assert t["duplicates"] == 0 and t["escalations"] == [] and t["supersedes"] == [], t


def check_planner_saw_one_ack_per_task(s: Scenario) -> None:
    planner = s.run["planner"]
    assert planner["unacknowledged"] == [] and planner["acknowledged_more_than_once"] == [] and planner["refused"] == []
    for task in ALL_TASKS:
        (ack,) = planner["acknowledged"][task]
        assert ack["decision_id"]  # came through busguard, attestation verified (verify_admitted)


async def test_same_crash_with_and_without_busguard(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """Seed 000 twice, side by side, same workload and the same crash: with
    busguard (legacy receipts) the audit log proves each task ran once;
    without it the auditor finds two valid acks for the crashed task."""
    guarded, bare = await asyncio.gather(
        run_example(broker.bootstrap, tmp_path / "guarded", "--receipts", "legacy"),
        run_example(broker.bootstrap, tmp_path / "no-guard", "--receipts", "legacy", "--no-guard"),
    )
    for s in (guarded, bare):
        check_executed_exactly_once(s)

    # The executor did the same thing both times: the lost ack, its resend
    # under the rolled-back counter (same nonce), then a fresh nonce.
    sent = {s.dir.name: await raw_acks(broker.bootstrap, s) for s in (guarded, bare)}
    for acks in sent.values():
        nonces = {task: [n for n, _ in a] for task, a in acks.items()}
        assert nonces == {
            "task-1": ["executor-ack-000000000000"],
            "task-2": ["executor-ack-000000000001"],
            "task-3": ["executor-ack-000000000002", "executor-ack-000000000002", "executor-ack-000000000003"],
            "task-4": ["executor-ack-000000000004"],
            "task-5": ["executor-ack-000000000005"],
        }
        assert len({rid for _, rid in acks[CRASHED]}) == 3  # three signed statements, all valid

    # -- without busguard: the auditor cannot prove task-3 ran once ----------
    assert bare.exit_code == 1, bare.output
    report = bare.run["audit"]
    assert report["ok"] is False and bare.run["audit_exit"] == 1
    verdicts = {row["task_id"]: row for row in report["tasks"]}
    assert {t: v["verdict"] for t, v in verdicts.items()} == {t: "AMBIGUOUS" if t == CRASHED else "OK" for t in ALL_TASKS}
    two = verdicts[CRASHED]["acknowledgments"]
    assert [(a["nonce"], a["records"]) for a in two] == [("executor-ack-000000000002", 2), ("executor-ack-000000000003", 1)]
    assert report["violations"] == [{"task_id": CRASHED, "verdict": "AMBIGUOUS", "detail": "2 valid acknowledgments"}]
    assert f"AMBIGUOUS: {CRASHED} has 2 valid acknowledgments" in bare.output
    # ... and the planner, like seed 000's, refused the same-nonce resend and accepted the fresh one
    assert bare.run["planner"]["acknowledged_more_than_once"] == [CRASHED]
    assert [r["reason"] for r in bare.run["planner"]["refused"]] == ["nonce_replay"]

    # -- with busguard: one admitted ack per task, the rest explained ------
    assert guarded.exit_code == 0, guarded.output
    assert guarded.run["audit_exit"] == 0
    rc, fresh = busguard_audit(guarded)
    assert rc == 0 and fresh == guarded.run["audit"]
    check_one_witness_per_task(fresh)
    assert fresh["summary"] == {
        "records": 13,  # 12 decisions + 1 resolution
        "decisions": 12,  # 5 handoffs + 5 acks + the exact resend + the fresh-nonce retry
        "resolutions": 1,
        "tasks": 10,
        "forwarded": 10,
        "duplicates": 1,
        "escalations": 1,
        "pending": 0,
        "violations": 0,
        "single_key": 0,  # the resolution is sealed with the reconciler's own key
        "foreign": 0,  # every record is this deployment's (its namespace, inputs and reconciliation topic)
    }
    crashed = lineage(fresh, "ack", CRASHED)
    assert crashed["duplicates"] == 1  # the exact resend
    (esc,) = crashed["escalations"]
    assert esc["reason"] == "ambiguous_retransmission" and esc["status"] == "resolved"
    assert esc["resolved_as"] == "retransmission" and esc["by"] == "policy"
    assert esc["supersedes"] == crashed["witness_receipt_id"] == esc["prior_receipt_id"]
    assert crashed["supersedes"] == [
        {
            "decision_id": esc["escalation_id"],
            "reason": "ambiguous_retransmission",
            "receipt_id": esc["receipt_id"],
            "supersedes": crashed["witness_receipt_id"],
        }
    ]
    # the audit topic, read directly: which decision each of the three acks got
    first, resend, retry = (rid for _, rid in sent["guarded"][CRASHED])
    acks3 = [d for d in await audit_decisions(broker.bootstrap, guarded) if d.kind == "ack" and d.task_id == CRASHED]
    assert [(d.receipt_id, d.outcome, d.reason) for d in acks3] == [
        (first, "forward", "admitted"),
        (resend, "duplicate", "exact_duplicate"),
        (retry, "escalate", "ambiguous_retransmission"),
    ]
    assert acks3[1].prior is not None and acks3[1].prior.decision_id == acks3[0].decision_id
    assert acks3[2].supersedes == first and crashed["witness"] == acks3[0].decision_id
    check_planner_saw_one_ack_per_task(guarded)
    assert guarded.run["planner"]["acknowledged"][CRASHED][0]["receipt_id"] == first
    assert "ambiguous_retransmission, resolved as retransmission by policy" in guarded.output


async def test_session_receipts_make_the_resend_a_proven_retransmission(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await run_example(broker.bootstrap, tmp_path / "session", "--receipts", "session")
    check_executed_exactly_once(s)
    assert s.exit_code == 0 and s.run["audit_exit"] == 0, s.output
    acks = await raw_acks(broker.bootstrap, s)
    assert {t: len(a) for t, a in acks.items()} == {t: 2 if t == CRASHED else 1 for t in ALL_TASKS}
    (first, _), (resend, _) = acks[CRASHED]
    assert first != resend  # a fresh nonce ...

    rc, fresh = busguard_audit(s)
    assert rc == 0 and fresh == s.run["audit"]
    check_one_witness_per_task(fresh)
    summary = fresh["summary"]
    assert (summary["decisions"], summary["duplicates"], summary["escalations"], summary["resolutions"]) == (11, 1, 0, 0)
    crashed = lineage(fresh, "ack", CRASHED)
    assert crashed["duplicates"] == 1 and crashed["escalations"] == []  # no reconciliation needed
    (link,) = crashed["supersedes"]
    assert link["reason"] == "retransmission" and link["supersedes"] == crashed["witness_receipt_id"]

    acks3 = [d for d in await audit_decisions(broker.bootstrap, s) if d.kind == "ack" and d.task_id == CRASHED]
    assert [(d.outcome, d.reason) for d in acks3] == [("forward", "admitted"), ("duplicate", "retransmission")]
    original, retrans = acks3
    # ... in the same session, at a sequence past the block reserved before the crash
    assert retrans.session_id == original.session_id is not None
    assert original.sequence is not None and retrans.sequence is not None and retrans.sequence >= original.sequence + 1
    assert retrans.sequence >= 64  # the SDK reserves 64 at a time and jumps past the block on restart
    assert retrans.supersedes == original.receipt_id == crashed["witness_receipt_id"]
    assert link["decision_id"] == retrans.decision_id
    check_planner_saw_one_ack_per_task(s)
