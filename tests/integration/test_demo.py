"""`busguard demo` end to end, as a user runs it: one subprocess, its own broker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .paths import REPO

# step label (a fragment of it) -> (destination, reason) the summary must show
EXPECTED = {
    "clean handoff planner -> executor (task-1)": ("downstream", "admitted"),
    "replay: the exact same record again": ("dead-letter", "exact_duplicate"),
    "replay: task-1's nonce under a new task-3": ("dead-letter", "nonce_replay"),
    "executor acks task-1 (legacy": ("downstream", "admitted"),
    "executor crashes, re-sends the ack with a new nonce": ("reconciliation", "ambiguous_retransmission"),
    "executor acks task-2 (session, sequence 0)": ("downstream", "admitted"),
    "executor crashes, restarts, re-sends (sequence 64)": ("dead-letter", "retransmission"),
    "forged: 'planner' handoff signed by another key": ("dead-letter", "bad_signature"),
    "stale: handoff issued 10 minutes ago": ("dead-letter", "timestamp_expired"),
    "malformed: the receipt header is not JSON": ("dead-letter", "not_json"),
    "conflict: task-1 again, with a different payload": ("reconciliation", "task_conflict"),
}


def _run_demo(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUSGUARD_")}
    env["PYTHONPATH"] = str(REPO)
    env["TMPDIR"] = str(tmp_path)  # the demo's throwaway directory lands here
    # A stray override must not redirect the demo's own config.
    env["BUSGUARD_KAFKA__BOOTSTRAP_SERVERS"] = "192.0.2.1:9092"
    return subprocess.run(
        [sys.executable, "-m", "busguard.cli", "demo", *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180
    )


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    return _run_demo(tmp_path_factory.mktemp("demo"))


def test_demo_exits_zero(demo: subprocess.CompletedProcess[str]) -> None:
    assert demo.returncode == 0, f"stdout:\n{demo.stdout}\nstderr:\n{demo.stderr}"
    assert "demo OK" in demo.stdout


@pytest.mark.parametrize("label", list(EXPECTED))
def test_summary_names_each_step_destination_and_reason(demo: subprocess.CompletedProcess[str], label: str) -> None:
    dest, reason = EXPECTED[label]
    lines = [line for line in demo.stdout.splitlines() if label in line]
    assert len(lines) == 1, f"{label!r} not in the summary:\n{demo.stdout}"
    assert re.search(rf"^\s*ok\s+\d+\. .*->\s+{re.escape(dest)}\s+{re.escape(reason)}\b", lines[0]), lines[0]


def test_summary_shows_links_and_resolutions(demo: subprocess.CompletedProcess[str]) -> None:
    out = demo.stdout
    assert "PROBLEM" not in out
    assert out.count("supersedes receipt") == 2  # the legacy and the session retransmission
    assert "resolved as retransmission by policy" in out
    assert "re-sent to executor on busguard.replies" in out
    assert "held for an operator" in out
    assert re.search(r"busguard escalations resolve [0-9a-f]{32} --as reject", out)
    assert "resolved as reject by operator:demo" in out


def test_audit_summary_ends_the_output(demo: subprocess.CompletedProcess[str]) -> None:
    out = demo.stdout
    assert "busguard audit: OK" in out
    m = re.search(
        r"records (\d+)\s+decisions (\d+)\s+resolutions (\d+)\s+tasks (\d+)\s+forwarded (\d+)\s+duplicates (\d+)\s+escalations (\d+)\s+pending (\d+)",
        out,
    )
    assert m is not None, out
    records, decisions, resolutions, tasks, forwarded, duplicates, escalations, pending = map(int, m.groups())
    assert decisions == len(EXPECTED) and forwarded == 3 and duplicates == 2 and escalations == 2
    assert resolutions == 3 and pending == 0  # retransmission (final), conflict (held + final)
    assert out.rstrip().splitlines()[-1].startswith("demo OK")


def test_no_log_noise(demo: subprocess.CompletedProcess[str]) -> None:
    """Plain stdout for people; nothing on stderr when all goes well."""
    assert demo.stderr.strip() == "", demo.stderr


def test_demo_dir_is_kept_and_reusable(tmp_path: Path) -> None:
    work = tmp_path / "kept"
    for _ in range(2):  # a second run over the same --dir starts clean
        result = _run_demo(tmp_path, "--dir", str(work))
        assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    for name in ("busguard.toml", "keys.toml", "guard.key", "state.db", "reconcile.db"):
        assert (work / name).exists(), name
    assert (work / "guard.key").stat().st_mode & 0o777 == 0o600
