"""Seed 003 end to end: a containment agent asks busguard for a replay plan and acts on it once.

Starts an embedded broker (or uses `--bootstrap`), a new deployment on new
topics (`busguard state init`, then `busguard run` as its own process), and
the containment agent (agent.py) twice: first it asks about
examples/taint/incident.trace.json with its ledger and acts on the plan;
then a second run with a new consumer group reads the same plan again from
the beginning (a re-delivery) and must skip it. Then `busguard audit`.
Writes DIR/result.json; exit 0 when the plan was acted on exactly once and
the audit is clean.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, identity, make_setup
from busguard.protocol.identity import multikey_encode
from busguard.protocol.keyfile import write_key

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TRACE = REPO / "examples" / "taint" / "incident.trace.json"
LEDGER = REPO / "examples" / "taint" / "incident.ledger.json"
TASK = "incident-2026-11-08"


async def agent(work: Path, common: list[str], *extra: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(HERE / "agent.py"), *common, *extra, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    sys.stderr.write(err.decode(errors="replace"))
    if proc.returncode != 0:
        raise SystemExit(f"agent.py {' '.join(extra)} exited {proc.returncode}:\n{out.decode()}{err.decode()}")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


async def scenario(bootstrap: str, work: Path) -> int:
    s = await make_setup(work, bootstrap, agents=("containment",), partitions=1)
    me = identity("containment")
    write_key(work / "containment.key", me)
    guard = GuardProcess(s)
    try:
        guard.wait_ready()
        common = [
            "--bootstrap", bootstrap, "--requests", s.handoffs, "--plans", s.downstream_handoffs,
            "--key", str(work / "containment.key"), "--session", str(work / "containment.session"),
            "--guard-public-key", multikey_encode(s.guard.public_key), "--db", str(work / "containment.db"), "--task-id", TASK,
        ]  # fmt: skip
        first = await agent(work, common, "--group", f"{s.group}.containment", "--trace", str(TRACE), "--ledger", str(LEDGER))
        again = await agent(work, common, "--group", f"{s.group}.containment-again")
    finally:
        guard_exit = guard.terminate()
    audit = subprocess.run(
        [sys.executable, "-m", "busguard.cli", "audit", "--config", str(s.config), "--json"], capture_output=True, text=True, timeout=120
    )
    db = sqlite3.connect(work / "containment.db")
    rows = db.execute("SELECT decision_id, unit_key FROM replay_units ORDER BY rowid").fetchall()
    result = {
        "first": first,
        "again": again,
        "rows": rows,
        "guard_exit": guard_exit,
        "audit_exit": audit.returncode,
        "audit": json.loads(audit.stdout) if audit.stdout.startswith("{") else audit.stdout,
        "config": str(s.config),
        "plans": s.downstream_handoffs,
    }
    (work / "result.json").write_text(json.dumps(result, indent=2))
    once = first["acted"] == 1 and again["acted"] == 0 and again["skipped"] >= 1 and len({d for d, _ in rows}) == 1
    for (key,) in ((k,) for _, k in rows):
        print(f"  replay unit {key}")
    print(
        f"plan acted on {'exactly once' if once else 'NOT exactly once'}; busguard audit exit {audit.returncode}; guard exit {guard_exit}"
    )
    return 0 if once and audit.returncode == 0 and guard_exit == 0 else 1


async def main(a: argparse.Namespace) -> int:
    work = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="busguard-containment-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"containment example in {work}")
    if a.bootstrap:
        return await scenario(a.bootstrap, work)
    broker = EmbeddedBroker(log_dir=work)
    await broker.astart()
    try:
        return await scenario(broker.bootstrap, work)
    finally:
        await broker.astop()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--bootstrap", help="a running broker (default: start the embedded one)")
    p.add_argument("--dir", help="keep everything here (default: a new temporary directory)")
    sys.exit(asyncio.run(main(p.parse_args())))
