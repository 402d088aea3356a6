"""The planner of seed 000: hand tasks to the executor, collect its acks.

It signs a `handoff` receipt for each of `--tasks` tasks and produces it
(Kafka key = its agent id), then reads acknowledgments until it is told to
stop (SIGTERM/SIGINT, or `--timeout`), and writes what it learned to
`planner.json` in the pipeline directory.

* Behind busguard it reads the guard's admitted-acks topic and trusts a
  record only if `verify_admitted` accepts the guard's sealed attestation
  (a re-emitted copy of one decision counts once).
* Without busguard it reads the executor's acks directly and does what the
  planner in seed 000 did: verify the signature, keep a replay window of
  nonces, refuse a nonce it has seen (`nonce_replay`), accept the rest.

    python examples/seed000/planner.py --pipeline DIR --tasks 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from collections import defaultdict
from typing import Any

from common import Refused, check, headers_of, identity, load_pipeline, say, short, start_producer, start_reader, write_json

from busguard.sdk.sender import Sender

NAME = "planner"


def work(i: int) -> bytes:
    return json.dumps({"op": "summarize", "doc": f"report-{i}"}, separators=(",", ":")).encode()


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipeline", required=True, help="pipeline.json (or its directory), from run.py")
    ap.add_argument("--tasks", type=int, default=5)
    ap.add_argument("--receipts", choices=["legacy", "session"], default="legacy")
    ap.add_argument("--timeout", type=float, default=300, help="stop on our own after this many seconds")
    ap.add_argument("--quiet", type=float, default=1.5, help="once asked to stop, read until no ack came for this long")
    args = ap.parse_args()
    pipeline = load_pipeline(args.pipeline)
    me = identity(pipeline, NAME)
    session = pipeline.path / "planner.session.json" if args.receipts == "session" else None
    sender = Sender(me.seed, session_path=session)

    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)

    # 1. hand off the tasks
    handed: list[dict[str, str]] = []
    producer = await start_producer(pipeline.bootstrap)
    try:
        for i in range(1, args.tasks + 1):
            rec = sender.sign(kind="handoff", task_id=f"task-{i}", receiver=pipeline.executor, payload=work(i))
            await producer.send_and_wait(pipeline.handoffs, value=rec.value, key=pipeline.planner.encode(), headers=rec.headers)
            handed.append({"task_id": rec.receipt.task_id, "receipt_id": rec.receipt_id})
            say(NAME, f"handed off {rec.receipt.task_id} (receipt {short(rec.receipt_id)})")
    finally:
        await producer.stop()

    # 2. collect acknowledgments
    accepted: dict[str, list[dict[str, Any]]] = defaultdict(list)
    refused: list[dict[str, Any]] = []
    seen_nonces: set[tuple[str, str]] = set()  # the replay window (no busguard)
    seen_decisions: set[str] = set()  # busguard decision ids (a re-emitted forward counts once)
    consumer = await start_reader(pipeline.bootstrap, pipeline.planner_inbox)
    deadline = time.monotonic() + args.timeout
    last = time.monotonic()

    def finished() -> bool:  # asked to stop, nothing new for a while, and every task acknowledged (or we gave up)
        all_acked = all(accepted.get(h["task_id"]) for h in handed)
        return stop.is_set() and time.monotonic() - last >= args.quiet and (all_acked or time.monotonic() - last >= 10 * args.quiet)

    try:
        while time.monotonic() < deadline and not finished():
            batch = await consumer.getmany(timeout_ms=200)
            for msg in (m for recs in batch.values() for m in recs):
                last = time.monotonic()
                try:
                    ack = check(pipeline, msg.value, headers_of(msg), pipeline.planner)
                except Refused as exc:
                    refused.append({"offset": msg.offset, "reason": exc.reason})
                    say(NAME, f"refused a record at offset {msg.offset}: {exc}")
                    continue
                r = ack.receipt
                fact = {"nonce": r.nonce, "receipt_id": ack.receipt_id, "sequence": r.sequence, "decision_id": ack.decision_id}
                if ack.decision_id is not None:
                    if ack.decision_id in seen_decisions:
                        continue
                    seen_decisions.add(ack.decision_id)
                elif (r.sender, r.nonce) in seen_nonces:
                    refused.append({"task_id": r.task_id, "reason": "nonce_replay", **fact})
                    say(NAME, f"REFUSED ack for {r.task_id}: nonce_replay (nonce {r.nonce})")
                    continue
                seen_nonces.add((r.sender, r.nonce))
                accepted[r.task_id].append(fact)
                how = f"admitted by busguard (decision {short(ack.decision_id)})" if ack.decision_id else "signature verified"
                extra = f"  <-- acknowledgment #{len(accepted[r.task_id])} for this task!" if len(accepted[r.task_id]) > 1 else ""
                say(NAME, f"accepted ack for {r.task_id}, {how}, nonce {r.nonce}{extra}")
    finally:
        await consumer.stop()

    tasks = [h["task_id"] for h in handed]
    summary = {
        "guarded": pipeline.guarded,
        "handed_off": handed,
        "acknowledged": {t: accepted.get(t, []) for t in tasks},
        "refused": refused,
        "unacknowledged": [t for t in tasks if not accepted.get(t)],
        "acknowledged_more_than_once": [t for t in tasks if len(accepted.get(t, [])) > 1],
    }
    write_json(pipeline.path / "planner.json", summary)
    say(
        NAME,
        f"{sum(1 for t in tasks if accepted.get(t))}/{len(tasks)} tasks acknowledged; "
        f"acknowledged more than once: {summary['acknowledged_more_than_once'] or 'none'}",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
