"""`benchmarks/interceptors.py` runs end to end on a tiny workload (issue 22).

Nothing here asserts a time: every contender must move every record (the
benchmark asserts each forward is admitted and counts every record) and the
JSON line must carry each side's figures and ratios."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .paths import REPO

pytestmark = pytest.mark.integration


def test_the_interceptor_benchmark_reports_every_contender_and_ratio() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "interceptors.py"), "--records", "600", "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for side in ("produce", "consume"):
        for who in ("bare", "hand", "sdk"):
            assert result[f"{side}_{who}_us"] > 0
        for base in ("hand", "bare"):
            assert result[f"{side}_sdk_over_{base}"] > 0
