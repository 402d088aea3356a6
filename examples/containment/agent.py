"""A containment agent (seed 003): ask busguard for a replay plan, receive it once, act on it once.

It signs a `taint-replay` request addressed to itself (the trace and, if it
has one, the gateway's idempotency ledger), sends it with the SDK's
`SigningProducer`, then reads the plans topic through `AdmittingConsumer`
with the taint reader (`busguard.sdk.taint.READERS`) and `ActOnce` over a
SQLite done-set: for the plan it writes one row per replayed unit into its
own database, in the same transaction as the done-mark, so a re-delivered
or re-emitted plan (same decision id) is never acted on twice, across
crashes. Prints a JSON summary on stdout; exit 0 once the plan is in the
database, 1 on timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from busguard.policies.taint.replay import encode_request
from busguard.protocol.identity import multikey_decode
from busguard.protocol.keyfile import read_key
from busguard.sdk import ActOnce, AdmittingConsumer, Claim, Delivery, SigningProducer, SqliteDoneSet
from busguard.sdk.sender import Sender
from busguard.sdk.taint import KIND, READERS, PlanView

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS replay_units (decision_id TEXT NOT NULL, task_id TEXT NOT NULL, action TEXT NOT NULL,"
    " unit_key TEXT NOT NULL, unit TEXT NOT NULL, nodes TEXT NOT NULL, sinks TEXT NOT NULL, PRIMARY KEY (decision_id, unit_key))"
)


def act(d: Delivery, tx: Claim[Any]) -> None:
    """The effect: one row per unit of the plan, in the done-set's transaction."""
    view = d.view
    if not isinstance(view, PlanView):  # another kind on the topic: marked done, nothing to contain
        return
    tx.connection.executemany(
        "INSERT INTO replay_units VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(d.decision_id, view.task_id, view.action, u.key, u.unit, json.dumps(u.nodes), json.dumps(u.sinks)) for u in view.units],
    )
    print(f"containment: plan for {view.task_id!r}: {view.unit}-level, {len(view.units)} units", file=sys.stderr)


def planned(db: sqlite3.Connection, task_id: str) -> int:
    return int(db.execute("SELECT count(*) FROM replay_units WHERE task_id = ?", (task_id,)).fetchone()[0])


async def main(a: argparse.Namespace) -> int:
    me = read_key(a.key)
    done = SqliteDoneSet(a.db)
    done.connection.execute(SCHEMA)
    done.connection.commit()
    summary: dict[str, Any] = {"agent": me.agent_id, "asked": None, "acted": 0, "skipped": 0, "refused": 0}
    if a.trace is not None:
        request = encode_request(Path(a.trace).read_bytes(), Path(a.ledger).read_bytes() if a.ledger else None, action="contain")
        raw = AIOKafkaProducer(bootstrap_servers=a.bootstrap, acks="all", enable_idempotence=False)
        await raw.start()
        try:
            out = SigningProducer(raw, Sender(me.seed, session_path=a.session))
            rec = await out.send(a.requests, kind=KIND, task_id=a.task_id, receiver=me.agent_id, payload=request)
            summary["asked"] = rec.receipt_id
        finally:
            await raw.stop()
    inbox = await AdmittingConsumer.open(
        a.plans,
        bootstrap_servers=a.bootstrap,
        group_id=a.group,
        guard_public_key=multikey_decode(a.guard_public_key),
        agent_id=me.agent_id,
        readers=READERS,
    )
    try:
        loop = ActOnce(inbox, done, effect=act)
        deadline = time.monotonic() + a.timeout
        while time.monotonic() < deadline:
            step = await loop.step(timeout_ms=500)
            summary["acted"] += step.acted
            summary["skipped"] += step.skipped
            summary["refused"] += step.refused
            if planned(done.connection, a.task_id) and summary["acted"] + summary["skipped"] >= 1:
                break
    finally:
        await inbox.close()
    rows = done.connection.execute("SELECT unit_key, unit, nodes, sinks FROM replay_units WHERE task_id = ?", (a.task_id,)).fetchall()
    summary["units"] = [{"key": k, "unit": u, "nodes": json.loads(n), "sinks": json.loads(s)} for k, u, n, s in rows]
    done.close()
    print(json.dumps(summary))
    return 0 if rows else 1


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--requests", required=True, help="a topic busguard reads (a route's input)")
    p.add_argument("--plans", required=True, help="that route's downstream topic")
    p.add_argument("--key", required=True, help="this agent's key file (busguard keygen)")
    p.add_argument("--session", required=True, help="this agent's session file (session/sequence receipts)")
    p.add_argument("--guard-public-key", required=True, help="the guard's public key, multikey (z6Mk...)")
    p.add_argument("--db", required=True, help="this agent's SQLite database: the done-set and the replay_units table")
    p.add_argument("--group", required=True, help="the consumer group")
    p.add_argument("--task-id", required=True, help="the request's task id (one incident)")
    p.add_argument("--trace", help="the trace to ask about; without it, only receive")
    p.add_argument("--ledger", help="the gateway's idempotency ledger for the trace")
    p.add_argument("--timeout", type=float, default=60.0)
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
