"""The seed-000 planner on the SDK: signed handoffs out, admitted acks in.

It signs and sends `--tasks` handoffs with a `SigningProducer` (session
receipts, Kafka key = its agent id), then reads its inbox, the acks busguard
admitted, through an `AdmittingConsumer` until SIGTERM (or `--timeout`):
every admitted ack is counted once per decision id (a forward the guard
re-emits after a crash has the same id), and `DIR/sdk-planner.json` says,
per task, the distinct decision ids of its admitted acks (exactly one when
the executor acted once and its resent acks were exact duplicates).

    python examples/seed000/sdk_planner.py --pipeline DIR --tasks 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from collections import defaultdict

from aiokafka import TopicPartition
from common import load_pipeline, say, start_producer, write_json

from busguard.protocol.keyfile import read_key
from busguard.sdk import AdmittingConsumer, Sender, SigningProducer

NAME = "sdk-planner"


def work(i: int) -> bytes:
    return json.dumps({"op": "summarize", "doc": f"report-{i}"}, separators=(",", ":")).encode()


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipeline", required=True, help="pipeline.json (or its directory), from run.py --setup-only")
    ap.add_argument("--tasks", type=int, default=300)
    ap.add_argument("--pace", type=float, default=0.0, help="seconds between two handoffs (0: as fast as the broker acknowledges)")
    ap.add_argument("--quiet", type=float, default=2.0, help="once asked to stop, read until no ack came for this long")
    ap.add_argument("--timeout", type=float, default=600, help="stop on our own after this many seconds")
    args = ap.parse_args()
    p = load_pipeline(args.pipeline)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    sender = Sender(read_key(p.key_file("planner")).seed, session_path=p.path / "sdk-planner.session.json")
    producer = await start_producer(p.bootstrap)
    # acks are only counted, never committed: every start reads the inbox from its beginning
    inbox = await AdmittingConsumer.open(
        (), bootstrap_servers=p.bootstrap, group_id=f"{p.handoffs}.sdk-planner", guard_public_key=p.guard_key(), agent_id=p.planner
    )
    inbox.consumer.assign([TopicPartition(p.planner_inbox, 0)])
    acks: dict[str, set[str]] = defaultdict(set)
    refused: list[str] = []
    out = SigningProducer(producer, sender)

    async def collect() -> None:
        deadline = time.monotonic() + args.timeout
        last = time.monotonic()
        while time.monotonic() < deadline and not (stop.is_set() and time.monotonic() - last >= args.quiet):
            batch = await inbox.getmany(timeout_ms=300)
            if batch.deliveries:
                last = time.monotonic()
            for d in batch.deliveries:
                if d.receipt.kind == "ack":
                    acks[d.receipt.task_id].add(d.decision_id)
            refused.extend(r.reason for r in batch.refusals)

    reader = asyncio.create_task(collect())
    handed: list[str] = []
    try:
        for i in range(1, args.tasks + 1):
            rec = await out.send(p.handoffs, kind="handoff", task_id=f"task-{i}", receiver=p.executor, payload=work(i))
            handed.append(rec.receipt.task_id)
            if args.pace:
                await asyncio.sleep(args.pace)
        say(NAME, f"handed off {len(handed)} tasks")
        write_json(p.path / "sdk-planner.sent.json", handed)
        await reader
    finally:
        reader.cancel()
        await inbox.close()
        await producer.stop()
    summary = {
        "handed_off": handed,
        "acks": {t: sorted(acks.get(t, ())) for t in handed},
        "unacknowledged": [t for t in handed if not acks.get(t)],
        "acknowledged_more_than_once": [t for t in handed if len(acks.get(t, ())) > 1],
        "refused": refused,
    }
    write_json(p.path / "sdk-planner.json", summary)
    say(
        NAME,
        f"{sum(1 for t in handed if acks.get(t))}/{len(handed)} tasks acknowledged; more than once: {summary['acknowledged_more_than_once'] or 'none'}",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
