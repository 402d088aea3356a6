"""The executor of seed 000: receive a handoff, do the work, acknowledge it.

For each handoff it journals `received`, "executes" the task, journals
`executed` (with the ack payload it will send), signs an `ack` receipt,
produces it, and journals `ack_committed`. The journal is fsynced per entry,
so the executor never executes a task twice. What seed 000 is about is the
gap between producing the ack and journaling `ack_committed`:

    --crash-after-signing-ack TASK   (or --crash-at N: the N-th ack)
        after the ack for TASK is signed and SENT, SIGKILL ourselves before
        journaling `ack_committed`.

On restart the journal shows the task executed but its ack not committed, so
the executor re-derives the ack from the journal and sends it again:

* `--receipts legacy` (nonce-only receipts): nonces come from a counter that
  is written to disk only every `--flush-every` acks, exactly seed 000's bug.
  On restart the counter is what was last flushed, fast-forwarded past the
  nonces the journal shows as committed; the lost ack is in neither place,
  so the counter hands out the SAME nonce again. Nobody confirms acks to the
  executor, so, like the executor in seed 000, it then retries once more
  with a fresh nonce. Two valid signed acks for one task now exist.
* `--receipts session`: the SDK's session file (`Sender(..., session_path=)`)
  reserves sequence numbers durably in blocks and jumps past the reserved
  block on restart, so the re-signed ack carries the same session and a
  greater sequence: provably a retransmission, not a second witness.

    python examples/seed000/executor.py --pipeline DIR --tasks 5 --crash-at 3
    python examples/seed000/executor.py --pipeline DIR --tasks 5     # the restart
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import signal
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from common import Pipeline, Receipts, Refused, check, headers_of, identity, load_pipeline, say, short, start_producer, start_reader

from busguard.protocol.keyfile import Identity
from busguard.sdk.sender import Sender, SignedRecord

NAME = "executor"


class Journal:
    """Append-only JSON lines, fsynced per entry: what this executor has done."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[dict[str, Any]] = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def append(self, event: str, task_id: str, **facts: Any) -> None:
        entry = {"event": event, "task_id": task_id, **facts}
        with open(self.path, "a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.entries.append(entry)

    def has(self, event: str, task_id: str) -> bool:
        return any(e["event"] == event and e["task_id"] == task_id for e in self.entries)

    def executed_not_acked(self) -> list[dict[str, Any]]:
        return [e for e in self.entries if e["event"] == "executed" and not self.has("ack_committed", e["task_id"])]

    def acked(self) -> int:
        return sum(1 for e in self.entries if e["event"] == "ack_committed")

    def last_committed_counter(self) -> int:
        return max((e["counter"] for e in self.entries if e["event"] == "ack_committed" and "counter" in e), default=-1)


class LazyNonceCounter:
    """Seed 000's bug, on purpose: the counter reaches the disk only every `flush_every` acks."""

    def __init__(self, path: Path, flush_every: int, committed: int) -> None:
        self.path = path
        self.flush_every = flush_every
        flushed = json.loads(path.read_text())["next"] if path.exists() else 0
        self.next = max(flushed, committed + 1)  # what the journal proves was used is never handed out again
        self.unflushed = 0

    def take(self) -> int:
        n = self.next
        self.next += 1
        return n

    def committed(self) -> None:
        self.unflushed += 1
        if self.unflushed >= self.flush_every:
            self.path.write_text(json.dumps({"next": self.next}))
            self.unflushed = 0


class Acks:
    """Signs acks: legacy (counter nonces, no session) or with the SDK's session."""

    def __init__(self, me: Identity, receipts: Receipts, directory: Path, journal: Journal, flush_every: int) -> None:
        if receipts == "session":
            self.sender = Sender(me.seed, session_path=directory / "executor.session.json")
            self.counter = None
        else:
            self.sender = Sender(me.seed)
            self.counter = LazyNonceCounter(directory / "executor.counter", flush_every, journal.last_committed_counter())

    def sign(self, task_id: str, receiver: str, payload: bytes) -> tuple[SignedRecord, dict[str, Any]]:
        """The signed ack and what the journal should remember about it."""
        if self.counter is None:
            rec = self.sender.sign(kind="ack", task_id=task_id, receiver=receiver, payload=payload)
            return rec, {"nonce": rec.receipt.nonce, "sequence": rec.receipt.sequence}
        n = self.counter.take()
        rec = self.sender.sign(kind="ack", task_id=task_id, receiver=receiver, payload=payload, nonce=f"executor-ack-{n:012d}")
        return rec, {"nonce": rec.receipt.nonce, "counter": n}

    def committed(self) -> None:
        if self.counter is not None:
            self.counter.committed()


def execute(task_id: str, work: bytes) -> bytes:
    """The "work": deterministic, so a re-derived ack has the same payload."""
    result = hashlib.sha256(work).hexdigest()[:16]
    return json.dumps({"task_id": task_id, "status": "done", "result": result}, separators=(",", ":"), sort_keys=True).encode()


def describe(rec: SignedRecord) -> str:
    r = rec.receipt
    where = f"session {short(r.session_id, 8)} seq {r.sequence}" if r.session_id else f"nonce {r.nonce}"
    return f"{where}, receipt {short(rec.receipt_id)}"


async def send(producer: AIOKafkaProducer, pipeline: Pipeline, rec: SignedRecord) -> None:
    await producer.send_and_wait(pipeline.acks, value=rec.value, key=pipeline.executor.encode(), headers=rec.headers)


async def recover(pipeline: Pipeline, journal: Journal, acks: Acks, receipts: Receipts, producer: AIOKafkaProducer) -> None:
    """Executed but not acknowledged: re-derive the ack from the journal and send it again."""
    for entry in journal.executed_not_acked():
        task, to, payload = entry["task_id"], entry["reply_to"], entry["ack"].encode()
        say(NAME, f"recovery: {task} was executed but its ack was never committed; re-deriving the ack from the journal")
        rec, facts = acks.sign(task, to, payload)
        await send(producer, pipeline, rec)
        if receipts == "legacy":
            say(NAME, f"re-sent ack for {task} with the rolled-back counter ({describe(rec)})")
            rec, facts = acks.sign(task, to, payload)
            await send(producer, pipeline, rec)
            say(NAME, f"no confirmation (nobody confirms acks): retried ack for {task} with a fresh nonce ({describe(rec)})")
        else:
            say(NAME, f"re-sent ack for {task}, re-signed in the same session ({describe(rec)})")
        journal.append("ack_committed", task, receipt_id=rec.receipt_id, **facts)
        acks.committed()


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipeline", required=True, help="pipeline.json (or its directory), from run.py")
    ap.add_argument("--receipts", choices=["legacy", "session"], default="legacy")
    ap.add_argument("--tasks", type=int, default=0, help="exit once this many tasks are acknowledged (0: run until killed)")
    ap.add_argument("--flush-every", type=int, default=8, help="legacy: write the nonce counter to disk every K acks")
    ap.add_argument("--crash-after-signing-ack", metavar="TASK_ID", help="SIGKILL after sending this task's ack, before committing it")
    ap.add_argument("--crash-at", type=int, metavar="N", help="the same, for the N-th ack this process sends")
    args = ap.parse_args()
    pipeline = load_pipeline(args.pipeline)
    receipts: Receipts = args.receipts
    journal = Journal(pipeline.path / "executor.journal")
    acks = Acks(identity(pipeline, NAME), receipts, pipeline.path, journal, args.flush_every)
    producer = await start_producer(pipeline.bootstrap)
    consumer = await start_reader(pipeline.bootstrap, pipeline.executor_inbox)
    sent = 0
    try:
        await recover(pipeline, journal, acks, receipts, producer)
        # No consumer group: the journal is this executor's memory, so it reads
        # its inbox from the start and skips what the journal says is done.
        async for msg in consumer:
            if args.tasks and journal.acked() >= args.tasks:
                break  # recovery finished the last task
            try:
                handoff = check(pipeline, msg.value, headers_of(msg), pipeline.executor)
            except Refused as exc:
                say(NAME, f"refused a record at offset {msg.offset}: {exc}")
                continue
            task, planner = handoff.receipt.task_id, handoff.receipt.sender
            if handoff.receipt.kind != "handoff" or handoff.receipt.receiver != pipeline.executor:
                say(NAME, f"refused {task}: not a handoff to me")
                continue
            if journal.has("ack_committed", task):
                continue  # done before (a re-read after restart, or a re-emitted forward)
            if not journal.has("received", task):
                journal.append("received", task, handoff=handoff.receipt_id, sender=planner)
            ack_payload = execute(task, handoff.payload)
            journal.append("executed", task, ack=ack_payload.decode(), reply_to=planner)
            say(NAME, f"executed {task}")
            rec, facts = acks.sign(task, planner, ack_payload)
            await send(producer, pipeline, rec)
            sent += 1
            say(NAME, f"sent ack for {task} ({describe(rec)})")
            if task == args.crash_after_signing_ack or sent == args.crash_at:
                say(NAME, f"CRASH: killed after sending the ack for {task}, before committing it")
                os.kill(os.getpid(), signal.SIGKILL)
            journal.append("ack_committed", task, receipt_id=rec.receipt_id, **facts)
            acks.committed()
            if args.tasks and journal.acked() >= args.tasks:
                break
    finally:
        await consumer.stop()
        await producer.stop()
    say(NAME, f"done: {journal.acked()} tasks acknowledged")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
