"""The seed-000 executor on the SDK: each admitted handoff acted on once, across kill -9.

Where `executor.py` keeps a hand-written journal, this one is the SDK's
loop (`busguard.sdk.ActOnce`): it reads what busguard admitted for it
through an `AdmittingConsumer`, and for each new decision id it writes its
effect, a row in `effects` of its OWN SQLite database (`DIR/executor.db`,
the done-set's database), and stages a signed `ack` in the same
transaction. The ack is sent after the commit, the offsets are committed
after that. Killed at any instant, the restarted executor re-reads what was
not committed, skips what its done-set holds and re-sends staged acks byte
for byte (busguard records those as `exact_duplicate`).

    python examples/seed000/sdk_executor.py --pipeline DIR            # until SIGTERM
    BUSGUARD_AGENT_CRASH_AT=after_effect_commit:0.05 python examples/seed000/sdk_executor.py --pipeline DIR

The consumer commits its offsets in the group `<handoffs topic>.sdk-executor`
and is assigned the inbox's partitions directly (one executor owns them), so
a restart resumes at once, with no rebalance to wait for.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import signal
import sqlite3
from typing import Any

from aiokafka import TopicPartition
from common import load_pipeline, say, start_producer

from busguard.protocol.keyfile import read_key
from busguard.sdk import ActOnce, AdmittingConsumer, Claim, Delivery, Reply, Sender, SigningProducer, SqliteDoneSet

NAME = "sdk-executor"
EFFECTS = "CREATE TABLE IF NOT EXISTS effects (decision_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, handoff_receipt TEXT NOT NULL, result TEXT NOT NULL)"


def result_of(task_id: str, work: bytes) -> bytes:
    """The "work": deterministic, so the ack's payload depends only on the handoff."""
    digest = hashlib.sha256(work).hexdigest()[:16]
    return json.dumps({"task_id": task_id, "status": "done", "result": digest}, separators=(",", ":"), sort_keys=True).encode()


def effect_for(acks_topic: str) -> Any:
    def effect(d: Delivery, tx: Claim[sqlite3.Connection]) -> list[Reply]:
        """Runs inside the done-set's transaction: the row, the mark and the staged ack commit together."""
        r = d.receipt
        result = result_of(r.task_id, d.payload)
        tx.connection.execute(
            "INSERT INTO effects (decision_id, task_id, handoff_receipt, result) VALUES (?, ?, ?, ?)",
            (d.decision_id, r.task_id, d.attestation.receipt_id or "", result.decode()),
        )
        return [Reply(acks_topic, "ack", r.task_id, r.sender, result)]

    return effect


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipeline", required=True, help="pipeline.json (or its directory), from run.py --setup-only")
    args = ap.parse_args()
    p = load_pipeline(args.pipeline)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)

    done = SqliteDoneSet(p.path / "executor.db")
    done.connection.execute(EFFECTS)
    sender = Sender(read_key(p.key_file("executor")).seed, session_path=p.path / "sdk-executor.session.json")
    producer = await start_producer(p.bootstrap)
    inbox = await AdmittingConsumer.open(
        (), bootstrap_servers=p.bootstrap, group_id=f"{p.handoffs}.sdk-executor", guard_public_key=p.guard_key(), agent_id=p.executor
    )
    try:
        inbox.consumer.assign([TopicPartition(p.executor_inbox, 0)])
        loop = ActOnce(inbox, done, effect=effect_for(p.acks), producer=SigningProducer(producer, sender))
        say(NAME, f"acting on {p.executor_inbox}; effects in {p.path / 'executor.db'}")
        while not stop.is_set():
            step = await loop.step(timeout_ms=300)
            if step.acted or step.skipped or step.refused:
                say(
                    NAME, f"acted {step.acted}, skipped {step.skipped} (done before), refused {step.refused}, acks sent {step.replies_sent}"
                )
    finally:
        await inbox.close()
        await producer.stop()
        done.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
