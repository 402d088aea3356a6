"""Seed 003's containment agent as a process through a real `busguard run`: it asks for a replay
plan, the plan reaches it once and is acted on once (a row per replayed unit in its own SQLite
database), a second reading of the same plan (a re-delivery) is skipped, and `busguard audit` is clean.

Runs examples/containment/run.py as a user would, against the session broker, then checks the
facts again independently of the example: the agent's database, the raw plans topic (the guard's
attestation verified here), and the audit report."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from busguard.config import load_config
from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import collect_all, identity
from busguard.protocol.attestation import verify_admitted
from busguard.protocol.keyfile import read_key

from .example_runs import run_example
from .paths import REPO

RUN = REPO / "examples" / "containment" / "run.py"


async def test_the_plan_reaches_the_containment_agent_once_and_is_acted_on_once(broker: EmbeddedBroker, tmp_path: Path) -> None:
    returncode, output, result = await run_example(RUN, broker.bootstrap, tmp_path)
    assert returncode == 0, output
    assert result["audit_exit"] == 0 and result["audit"]["ok"] is True and result["audit"]["violations"] == [], output
    assert (result["first"]["acted"], result["again"]["acted"], result["again"]["skipped"]) == (1, 0, 1), output

    # The agent's own database: one plan (one decision id), one row per unit, each unit once.
    db = sqlite3.connect(tmp_path / "containment.db")
    rows = db.execute("SELECT decision_id, task_id, action, unit_key, unit, sinks FROM replay_units").fetchall()
    assert sorted(r[3] for r in rows) == ["span:read_secret", "span:summarize", "token:tok-post-7"]
    assert len({r[0] for r in rows}) == 1 and {(r[1], r[2]) for r in rows} == {("incident-2026-11-08", "contain")}
    token = next(r for r in rows if r[4] == "token")
    assert json.loads(token[5]) == ["chat:#ops", "webhook:partner-archive"]
    assert db.execute("SELECT count(*) FROM busguard_done").fetchone() == (1,)

    # The plans topic as busguard wrote it: one forward, attested for the agent, its decision id the one acted on.
    cfg = load_config(result["config"], env={})
    guard = read_key(Path(cfg.keys.guard_key))
    got = await collect_all(broker.bootstrap, [result["plans"]])
    (fwd,) = got[result["plans"]]
    att = verify_admitted(fwd.value, list(fwd.headers), guard.public_key, identity("containment").agent_id)
    assert att.forwarded_sha256 is not None and att.decision_id == rows[0][0]
