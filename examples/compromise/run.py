"""Seed 004 end to end: a compromised session hands off to a successor that uses only verified state, once.

Starts an embedded broker (or uses `--bootstrap`), a new deployment on new
topics (`busguard state init`, then `busguard run` as its own process), then
the processes: the successor signs its integrity receipts
(`successor.py attest`), the session sends its handoffs (`session.py`), the
successor receives them (`successor.py receive`), and a second successor run
with a new consumer group reads them again from the beginning (a
re-delivery) and must skip both. Then `busguard audit`. Writes
DIR/result.json; exit 0 when each handoff was acted on once, `memory` was
never used, and the audit is clean.
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
HANDOFF = "handoff-2026-12-02"


async def process(script: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(HERE / script), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    sys.stderr.write(err.decode(errors="replace"))
    if proc.returncode != 0:
        raise SystemExit(f"{script} {' '.join(args)} exited {proc.returncode}:\n{out.decode()}{err.decode()}")
    return out.decode().strip().splitlines()[-1] if out.strip() else ""


async def scenario(bootstrap: str, work: Path) -> int:
    s = await make_setup(work, bootstrap, agents=("session", "successor"), partitions=1)
    session, successor = identity("session"), identity("successor")
    write_key(work / "session.key", session)
    write_key(work / "successor.key", successor)
    guard = GuardProcess(s)
    handoffs = [HANDOFF, HANDOFF + "-unlisted"]
    try:
        guard.wait_ready()
        for hid in handoffs:
            await process(
                "successor.py", "attest", "--key", str(work / "successor.key"), "--handoff-id", hid, "--out", str(work / f"{hid}.json")
            )
        sent = json.loads(await process(
            "session.py", "--bootstrap", bootstrap, "--topic", s.handoffs, "--key", str(work / "session.key"),
            "--session", str(work / "session.session"), "--successor", successor.agent_id, "--handoff-id", HANDOFF,
            "--integrity-dir", str(work), "--also-unlisted",
        ))  # fmt: skip
        receive = [
            "receive", "--bootstrap", bootstrap, "--topic", s.downstream_handoffs, "--key", str(work / "successor.key"),
            "--registry", str(work / "keys.toml"), "--guard-public-key", multikey_encode(s.guard.public_key),
            "--db", str(work / "successor.db"), "--expect", str(len(handoffs)),
        ]  # fmt: skip
        first: dict[str, Any] = json.loads(await process("successor.py", *receive, "--group", f"{s.group}.successor"))
        again: dict[str, Any] = json.loads(await process("successor.py", *receive, "--group", f"{s.group}.successor-again"))
    finally:
        guard_exit = guard.terminate()
    audit = subprocess.run(
        [sys.executable, "-m", "busguard.cli", "audit", "--config", str(s.config), "--json"], capture_output=True, text=True, timeout=120
    )
    db = sqlite3.connect(work / "successor.db")
    used = db.execute("SELECT handoff_id, name FROM used_components ORDER BY rowid").fetchall()
    result = {
        "sent": sent,
        "first": first,
        "again": again,
        "used": used,
        "guard_exit": guard_exit,
        "audit_exit": audit.returncode,
        "audit": json.loads(audit.stdout) if audit.stdout.startswith("{") else audit.stdout,
        "config": str(s.config),
        "downstream": s.downstream_handoffs,
    }
    (work / "result.json").write_text(json.dumps(result, indent=2))
    once = first["acted"] == len(handoffs) and again["acted"] == 0 and again["skipped"] >= len(handoffs)
    memory_used = any(name == "memory" for _, name in used)
    for h in first["handoffs"]:
        print(f"  {h['handoff_id']}: {h['verdict']}, not used: {h['not_used']}")
    print(
        f"handoffs acted on {'exactly once' if once else 'NOT exactly once'}; memory {'USED' if memory_used else 'never used'};"
        f" busguard audit exit {audit.returncode}; guard exit {guard_exit}"
    )
    return 0 if once and not memory_used and audit.returncode == 0 and guard_exit == 0 else 1


async def main(a: argparse.Namespace) -> int:
    work = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="busguard-compromise-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"compromise example in {work}")
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
