"""`busguard demo award` end to end, as a user runs it: one subprocess, its own broker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from .paths import REPO

STEPS = {
    "A calls for bids": ("downstream", "admitted"),
    "B bids 120 under jcs-sha256": ("downstream", "admitted"),
    "C bids 80 under a private canonicalizer": ("downstream", "admitted"),
    "A awards C on cost": ("dead-letter", "award_unrecomputable"),
    "A re-awards to B": ("downstream", "admitted"),
    "B delivers with a tampered root": ("reconciliation", "settlement_mismatch"),
    "B delivers its honest result": ("downstream", "admitted"),
}


def test_demo_award_runs_the_seed_net(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUSGUARD_")}
    env["PYTHONPATH"] = str(REPO)
    env["TMPDIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "busguard.cli", "demo", "award"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180
    )
    out = done.stdout
    assert done.returncode == 0 and "demo OK" in out, f"stdout:\n{out}\nstderr:\n{done.stderr}"
    for label, (dest, reason) in STEPS.items():
        (line,) = [x for x in out.splitlines() if f". {label} " in x]
        assert re.search(rf"^\s*ok\s+\d+\. .*->\s+{re.escape(dest)}\s+{re.escape(reason)}\b", line), line
    assert re.search(
        r"rebid notice on busguard\.rebid to awarder: award_unrecomputable; awardable: \S+/bid-b \(bidder-b, cost 120, verified\)$",
        out,
        re.M,
    )
    assert "(the reconciler holds it for an operator): settlement_mismatch, attributed to bidder-b: committed " in out
    assert "busguard-annotation-verification: recomputed" in out
    assert re.search(
        r"awarded to bidder-b \(\S+/bid-b\) mode verified; settled; escalations \['settlement_mismatch attributed to bidder-b'\]", out
    )
