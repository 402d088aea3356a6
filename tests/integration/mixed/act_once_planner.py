"""The seed-000 planner acting once on both ends, in Python: the twin of
ts/examples/seed000/sdk_planner.ts, for the mixed pipeline's kill test.

Each handoff is planned once (`claim("plan:<task>")` stages the signed
handoff in the done-set's outbox; `ActOnce.flush` sends it, a kill before
the send re-sends the same bytes), and each admitted ack is acted on once
(a row in `acks` of `DIR/planner.db`).

    python tests/integration/mixed/act_once_planner.py --pipeline DIR --tasks 150 --pace 0.1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "seed000"))

from aiokafka import TopicPartition  # noqa: E402
from common import load_pipeline, say, start_producer  # noqa: E402

from busguard.protocol.keyfile import read_key  # noqa: E402
from busguard.sdk import ActOnce, AdmittingConsumer, Claim, Delivery, Sender, SigningProducer, SqliteDoneSet  # noqa: E402

NAME = "py-planner"
ACKS = "CREATE TABLE IF NOT EXISTS acks (decision_id TEXT PRIMARY KEY, task_id TEXT NOT NULL)"


def work(i: int) -> bytes:
    return json.dumps({"op": "summarize", "doc": f"report-{i}"}, separators=(",", ":")).encode()


def effect(d: Delivery, tx: Claim[sqlite3.Connection]) -> None:
    if d.receipt.kind == "ack":
        tx.connection.execute("INSERT INTO acks (decision_id, task_id) VALUES (?, ?)", (d.decision_id, d.receipt.task_id))


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--tasks", type=int, default=150)
    ap.add_argument("--pace", type=float, default=0.0)
    args = ap.parse_args()
    p = load_pipeline(args.pipeline)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    done = SqliteDoneSet(p.path / "planner.db")
    done.connection.execute(ACKS)
    sender = Sender(read_key(p.key_file("planner")).seed, session_path=p.path / "sdk-planner.session.json")
    producer = await start_producer(p.bootstrap)
    inbox = await AdmittingConsumer.open(
        (), bootstrap_servers=p.bootstrap, group_id=f"{p.handoffs}.sdk-planner", guard_public_key=p.guard_key(), agent_id=p.planner
    )
    out = SigningProducer(producer, sender)
    try:
        inbox.consumer.assign([TopicPartition(p.planner_inbox, 0)])
        loop = ActOnce(inbox, done, effect=effect, producer=out)
        say(NAME, f"acting on {p.planner_inbox}; acks in {p.path / 'planner.db'}")
        i, due = 1, time.monotonic()
        while not stop.is_set():
            if i <= args.tasks and time.monotonic() >= due:
                task = f"task-{i}"
                with done.claim(f"plan:{task}") as tx:
                    if tx.claimed:
                        rec = sender.sign(kind="handoff", task_id=task, receiver=p.executor, payload=work(i))
                        tx.stage(p.handoffs, out.key, rec.value, rec.headers)
                i += 1
                if tx.claimed:
                    due = time.monotonic() + args.pace
                    await loop.flush()
                continue
            if i > args.tasks and not (p.path / "sdk-planner.sent.json").exists():
                tmp = p.path / "sdk-planner.sent.json.tmp"
                tmp.write_text(json.dumps([f"task-{n}" for n in range(1, args.tasks + 1)]))
                os.replace(tmp, p.path / "sdk-planner.sent.json")
                say(NAME, f"handed off {args.tasks} tasks")
            await loop.step(timeout_ms=max(10, min(100, int((due - time.monotonic()) * 1000))) if i <= args.tasks else 300)
    finally:
        await inbox.close()
        await producer.stop()
        done.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
