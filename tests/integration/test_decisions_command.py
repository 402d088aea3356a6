"""`busguard decisions` reads batch audit records too (`[batch] audit = "batch"`, docs/protocol.md 12.7)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, all_decided, collect, identity, make_setup, produce, sender
from busguard.devtools.kafka import ApacheKafka

from .paths import REPO


async def test_where_each_record_went_from_batch_audit_records(broker: EmbeddedBroker | ApacheKafka, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, batch={"audit": "batch"})
    planner, to = sender("planner"), identity("executor").agent_id
    first = planner.sign(kind="handoff", task_id="t-1", receiver=to, payload=b'{"op":"x"}')
    other = planner.sign(kind="handoff", task_id="t-2", receiver=to, payload=b'{"op":"y"}')
    guard = GuardProcess(s)
    try:
        guard.wait_ready()
        await produce(s.bootstrap, s.handoffs, [first, other, first], key=b"planner")
        await collect(s.bootstrap, s.outputs, lambda c: all_decided(s, c, 3))
    finally:
        assert guard.terminate() == 0, guard.tail()
    run = subprocess.run(
        [sys.executable, "-m", "busguard.cli", "decisions", "--config", str(s.config), "--idle-ms", "1000", "--json"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    rows = json.loads(run.stdout)
    assert [(r["task_id"], r["outcome"], r["reason"], r["went_to"], r["verified"]) for r in rows] == [
        ("t-1", "forward", "admitted", [s.downstream_handoffs], True),
        ("t-2", "forward", "admitted", [s.downstream_handoffs], True),
        ("t-1", "duplicate", "exact_duplicate", [s.dead_letter], True),
    ]
    assert rows[2]["prior_decision_id"] == rows[0]["decision_id"]  # the core's duplicate names its admission too
    only = subprocess.run(
        [sys.executable, "-m", "busguard.cli", "decisions", "--config", str(s.config), "--idle-ms", "1000", "--task", "t-2"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert only.returncode == 0 and len(only.stdout.strip().splitlines()) == 2 and "t-2" in only.stdout, only.stdout + only.stderr
