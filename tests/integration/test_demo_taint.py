"""`busguard demo taint` end to end, as a user runs it: one subprocess, its own broker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from .paths import REPO

EXPECTED = {
    "contain: the incident trace alone": ("busguard.dead-letter", "taint_replay_refused"),
    "retried: the same request, new nonce": ("busguard.dead-letter", "taint_replay_refused"),
    "contain: the trace with the gateway's ledger": ("agents.taint-plans", "admitted"),
    "malformed: a trace with a cycle": ("busguard.dead-letter", "taint_request_malformed"),
}


def test_demo_taint_runs_the_seed_incident_through_the_guard(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUSGUARD_")}
    env["PYTHONPATH"] = str(REPO)
    env["TMPDIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "busguard.cli", "demo", "taint"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180
    )
    out = done.stdout
    assert done.returncode == 0, f"stdout:\n{out}\nstderr:\n{done.stderr}"
    for label, (topic, reason) in EXPECTED.items():
        (line,) = [x for x in out.splitlines() if label in x]
        assert re.search(rf"^\s*ok\s+\d\. .*->\s+{re.escape(topic)}\s+{reason}$", line), line
    assert out.count("unknowable nodes ['post_message'], 3 nodes still suspect") == 2
    assert "token-level plan" in out and "post_message attributed to chat:#ops, webhook:partner-archive" in out
    assert "forwarded_sha256 checked" in out and "cycle (a -> b -> a)" in out
    assert "busguard audit: OK" in out and "PROBLEM" not in out
    assert re.search(r"records 4\s+decisions 4\s+resolutions 0\s+tasks 3\s+forwarded 1", out), out
    assert out.rstrip().splitlines()[-1].startswith("demo OK") and done.stderr.strip() == ""
