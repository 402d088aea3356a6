"""`benchmarks/compare.py` runs end to end on a tiny workload (issue 13).

Nothing here asserts a time: the run must finish, every contender must
have moved every record (compare.py raises when an output count is off),
and the JSON line must carry the stable keys with usable values, so the
figures `make bench` prints can be trusted to come from complete runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
KEYS = ("verify_1t_per_s", "verify_nt_per_s", "relay_per_s", "naive_per_s", "busguard_per_s", "ratio_naive", "ratio_relay", "p50_ms", "p99_ms", "rss_mb")


def test_compare_smoke(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "compare.py"), "--records", "200", "--rounds", "1", "--keep", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for k in KEYS:
        assert isinstance(result[k], (int, float)) and result[k] > 0, (k, result.get(k))
    assert result["records"] == 200 and result["duplicates"] > 0
    # The ratio is the per-round one, and with one round it is exactly the quotient.
    runs = result["runs"]
    assert result["ratio_naive"] == round(runs["busguard"][0]["per_s"] / runs["naive"][0]["per_s"], 3)
    # busguard ran as its own process from a config, with SQLite state and audit output.
    run_dirs = sorted((tmp_path / "runs").glob("run*-busguard"))
    assert len(run_dirs) == 1 and (run_dirs[0] / "busguard.toml").is_file()
    assert 'audit = "' in (run_dirs[0] / "busguard.toml").read_text()
    # The table for people precedes the JSON line and names every contender.
    for name in ("verify_1t", "verify_nt", "relay", "naive", "busguard", "ratio_naive"):
        assert name in proc.stdout
