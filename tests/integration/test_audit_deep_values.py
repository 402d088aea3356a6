"""A record nested too deeply to decode must not stop the audit topic's readers.

Found by the readers' fuzz campaign (`python -m tests.fuzz.fuzz_readers`):
anyone who can write the audit topic puts there a 6 KB JSON value
`{"a":{"a":…}}` 1000 levels deep. msgspec refuses it with a
`RecursionError`, not a `msgspec.DecodeError`, and the readers caught only
the latter: `busguard audit` and `busguard escalations show` died with a
traceback at every run, so the log could no longer be audited. Now the
record is what it is, a forged (unsealed) record in the audit's report,
and `escalations show` finds the escalation written before it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, collect, identity, make_setup, produce, sender

from .paths import REPO

DEEP = b'{"a":' * 1000 + b"1" + b"}" * 1000


def _cli(s: Setup, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "busguard.cli", *args, "--config", str(s.config)], capture_output=True, env=env, timeout=120
    )


async def test_a_deeply_nested_record_on_the_audit_topic_is_a_finding_not_a_crash(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1)
    guard = GuardProcess(s)
    guard.wait_ready()
    planner, executor = sender("planner"), identity("executor").agent_id
    try:
        # one task, then a conflicting copy of it: the guard escalates the second
        first = planner.sign(kind="handoff", task_id="t-1", receiver=executor, payload=b"{}")
        conflict = planner.sign(kind="handoff", task_id="t-1", receiver=executor, payload=b'{"other":1}')
        await produce(s.bootstrap, s.handoffs, [first, conflict])
        got = await collect(s.bootstrap, [s.reconciliation, s.audit], lambda c: len(c[s.reconciliation]) >= 1 and len(c[s.audit]) >= 2)
        escalation_id = dict(got[s.reconciliation][0].headers)["busguard-decision-id"].decode()
    finally:
        assert guard.terminate() == 0, guard.tail()
    await produce(s.bootstrap, s.audit, [(DEEP, [])])

    audit = _cli(s, "audit", "--json", "--idle-ms", "800")
    assert b"Traceback" not in audit.stderr, audit.stderr.decode()[-2000:]
    assert audit.returncode == 1, audit.stderr.decode()[-2000:]  # violations found
    report = json.loads(audit.stdout)
    forged = [v for v in report["violations"] if v["invariant"] == "forged_record"]
    assert len(forged) == 1 and "nested too deeply" in forged[0]["detail"], report["violations"]

    shown = _cli(s, "escalations", "show", escalation_id, "--idle-ms", "800")
    assert shown.returncode == 0, shown.stderr.decode()[-2000:]
    assert json.loads(shown.stdout)["escalation"]["decision_id"] == escalation_id
