"""Seed 000 on the SDK, end to end: broker, `busguard run` and `reconcile`, sdk_executor, sdk_planner.

    python examples/seed000/sdk_run.py                   # 50 tasks, the executor killed -9 3 times
    python examples/seed000/sdk_run.py --tasks 300 --kills 20

The executor is killed with SIGKILL at random instants (`--kills`) and
restarted each time; then it finishes the work, the planner reports, and
`busguard audit` checks the log. Exit code: 0 when the audit passes and
every task has exactly one effect row in `DIR/executor.db` and exactly one
admitted ack at the planner; 1 when not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from common import create_pipeline
from run import agent, busguard

from busguard.devtools.broker import EmbeddedBroker


def effects(directory: Path) -> Counter[str]:
    try:
        with sqlite3.connect(directory / "executor.db") as conn:
            return Counter(str(t) for (t,) in conn.execute("SELECT task_id FROM effects"))
    except sqlite3.OperationalError:  # not created yet
        return Counter()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=50)
    ap.add_argument("--kills", type=int, default=3, help="kill -9 the executor this many times, at random instants")
    ap.add_argument("--dir", help="where to keep everything (default: a new temporary directory)")
    args = ap.parse_args()
    directory = Path(args.dir).resolve() if args.dir else Path(tempfile.mkdtemp(prefix="seed000-sdk-"))
    with EmbeddedBroker(log_dir=directory) as broker:
        p = asyncio.run(create_pipeline(directory, broker.bootstrap, guarded=True))
        assert p.guard_port is not None and p.reconcile_port is not None
        print(f"working directory: {directory}", flush=True)
        guard = busguard("run", p, None)
        guard.wait_healthy(p.guard_port)
        reconciler = busguard("reconcile", p, p.reconcile_port)  # seals resolutions; its key is the audit's too
        reconciler.wait_healthy(p.reconcile_port)
        planner = agent("sdk_planner", p, "--tasks", str(args.tasks), "--pace", "0.05")
        for run in range(1, args.kills + 1):
            executor = agent("sdk_executor", p, run=run)
            time.sleep(random.uniform(1.0, 3.0))
            executor.proc.send_signal(signal.SIGKILL)
            print(f"=== executor killed -9 ({run}/{args.kills}); {sum(effects(directory).values())} effects so far", flush=True)
            executor.wait(30)
        executor = agent("sdk_executor", p, run=args.kills + 1)
        deadline = time.monotonic() + 300
        while (not (directory / "sdk-planner.sent.json").exists() or len(effects(directory)) < args.tasks) and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(3)  # the last acks reach the planner
        planner.stop(60)
        executor.stop(30)
        reconciler.stop()
        guard.stop()
        audit = subprocess.run([sys.executable, "-m", "busguard.cli", "audit", "--config", str(p.busguard_config)], text=True)
    done = effects(directory)
    summary = json.loads((directory / "sdk-planner.json").read_text())
    ok = (
        audit.returncode == 0
        and len(done) == args.tasks
        and set(done.values()) == {1}
        and not summary["unacknowledged"]
        and not summary["acknowledged_more_than_once"]
    )
    acked = len(summary["handed_off"]) - len(summary["unacknowledged"])
    print(f"effects: {len(done)} tasks, {sum(done.values())} rows; planner: {acked} acked; audit exit {audit.returncode}")
    print("ok: every task acted on once" if ok else "NOT ok", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
