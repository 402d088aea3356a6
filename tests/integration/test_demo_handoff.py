"""`busguard demo handoff` end to end, as a user runs it: one subprocess, its own broker."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from .paths import REPO

# step label -> (destination, reason or verdict) the summary must show
EXPECTED = {
    "notice: operator marks session s-2 compromised": ("downstream", "admitted"),
    "FAILURE: s-2 hands off its plan, undeclared": ("dead-letter", "undeclared_operational_state"),
    "prevented: s-2 moves only its logs": ("downstream", "scoped"),
    "prevented: declared, scoped plan + forged memory": ("downstream", "scoped"),
    "successor compromised, rule partial_transfer": ("downstream", "double_compromise_caution"),
    "successor compromised, rule quarantined_state_only": ("quarantine", "double_compromise_quarantine"),
    "successor compromised, rule escalate": ("reconciliation", "double_compromise_escalate"),
    "FAILURE: nothing verified, nothing can move": ("dead-letter", "nothing_transferable"),
    "prevented: successor unverifiable, scoped plan moves": ("downstream", "double_compromise_caution"),
    "clearance: operator lifts its notice on s-2": ("downstream", "admitted"),
    "after the clearance: s-2 hands off its plan": ("downstream", "clean"),
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    tmp = tmp_path_factory.mktemp("demo-handoff")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUSGUARD_")}
    env["PYTHONPATH"] = str(REPO)
    env["TMPDIR"] = str(tmp)
    env["BUSGUARD_KAFKA__BOOTSTRAP_SERVERS"] = "192.0.2.1:9092"  # must not redirect the demo's own config
    return subprocess.run(
        [sys.executable, "-m", "busguard.cli", "demo", "handoff"], capture_output=True, text=True, env=env, cwd=tmp, timeout=180
    )


def test_demo_handoff_exits_zero(demo: subprocess.CompletedProcess[str]) -> None:
    assert demo.returncode == 0, f"stdout:\n{demo.stdout}\nstderr:\n{demo.stderr}"
    assert "demo handoff OK" in demo.stdout and "busguard audit: OK" in demo.stdout


@pytest.mark.parametrize("label", list(EXPECTED))
def test_each_failure_mode_and_its_prevention_lands_where_it_should(demo: subprocess.CompletedProcess[str], label: str) -> None:
    dest, reason = EXPECTED[label]
    lines = [line for line in demo.stdout.splitlines() if label in line]
    assert len(lines) == 1, f"{label!r} not in the summary:\n{demo.stdout}"
    assert re.search(rf"^\s*ok\s+\d+\. .*->\s+{re.escape(dest)}\s+{re.escape(reason)}\b", lines[0]), lines[0]


def test_the_successor_verifies_every_scoped_forward_and_the_forgery_is_stripped(demo: subprocess.CompletedProcess[str]) -> None:
    assert demo.stdout.count("all components match the signed scope: [plan]") == 3
    assert "memory (scope_hash_mismatch" in demo.stdout and "caution=double_compromise" in demo.stdout
