"""Run one `examples/<seed>/run.py` end to end on the session's broker (the agents' integration tests)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from busguard.devconfig import DEV_BROKER_ENV, broker_name

from .paths import REPO


async def run_example(run: Path, bootstrap: str, work: Path) -> tuple[int | None, str, dict[str, Any]]:
    """The example's exit code, its output and its `result.json` (empty when it wrote none)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), DEV_BROKER_ENV: broker_name(bootstrap)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(run), "--bootstrap", bootstrap, "--dir", str(work),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env, cwd=REPO,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 300)
    result = work / "result.json"
    return proc.returncode, out.decode(errors="replace"), json.loads(result.read_text()) if result.exists() else {}
