"""The successor of a compromised session (seed 004): receive the handoff once, use only verified state.

Two commands:

- `attest --handoff-id H --out FILE`: sign this successor's integrity
  receipt for handoff H (`successor-integrity-receipt`, status
  `verified_clean`), for the session to carry in its handoff;
- `receive ...`: read the handoffs topic through `AdmittingConsumer` with
  the session-handoff reader (`busguard.sdk.compromise`, scopes verified
  with the session's keys from this successor's own registry file, never
  from the record) and `ActOnce` over a SQLite done-set. For each handoff it
  writes one row per *usable* component (its bytes, in the done-set's
  transaction) and one row saying what it did not use. Prints a JSON
  summary; exit 0 once `--expect` handoffs are in the database.
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

import msgspec

from busguard.policies.compromise.build import sign_statement
from busguard.policies.compromise.message import IntegrityStatus, SuccessorIntegrity
from busguard.protocol.identity import multikey_decode
from busguard.protocol.keyfile import read_key
from busguard.protocol.registry import KeyRegistry
from busguard.protocol.signing import Signer
from busguard.sdk import ActOnce, AdmittingConsumer, Claim, Delivery, SqliteDoneSet
from busguard.sdk.compromise import HandoffView, readers, registry_keys

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS used_components (decision_id TEXT NOT NULL, handoff_id TEXT NOT NULL, name TEXT NOT NULL,"
    " sha256 TEXT NOT NULL, operational INTEGER NOT NULL, content BLOB, PRIMARY KEY (decision_id, name))",
    "CREATE TABLE IF NOT EXISTS handoffs (decision_id TEXT PRIMARY KEY, handoff_id TEXT NOT NULL, session TEXT NOT NULL,"
    " verdict TEXT NOT NULL, caution INTEGER NOT NULL, replaced INTEGER NOT NULL, not_used TEXT NOT NULL)",
)


def act(d: Delivery, tx: Claim[Any]) -> None:
    """The effect: take over only the components verified against the signed scope."""
    view = d.view
    if not isinstance(view, HandoffView):
        return
    for c in view.usable:
        content = view.content(c.name) if c.content is not None else None
        sha = next(k.sha256 for k in view.report.checks if k.name == c.name)
        tx.connection.execute(
            "INSERT INTO used_components VALUES (?, ?, ?, ?, ?, ?)", (d.decision_id, view.handoff_id, c.name, sha, c.operational, content)
        )
    tx.connection.execute(
        "INSERT INTO handoffs VALUES (?, ?, ?, ?, ?, ?, ?)",
        (d.decision_id, view.handoff_id, view.session, view.verdict, view.caution, view.replaced, json.dumps(view.not_usable)),
    )
    used = [c.name for c in view.usable]
    print(f"successor: {view.handoff_id} ({view.verdict}): using {used}, not using {list(view.not_usable)}", file=sys.stderr)


def attest(a: argparse.Namespace) -> int:
    me = read_key(a.key)
    statement = SuccessorIntegrity(
        v=1,
        handoff_id=a.handoff_id,
        signer=me.agent_id,
        successor=me.agent_id,
        status=IntegrityStatus.VERIFIED_CLEAN,
        rederives_operational_state=False,
    )
    Path(a.out).write_bytes(msgspec.json.encode(sign_statement(Signer(me.seed), statement)))
    return 0


async def receive(a: argparse.Namespace) -> int:
    me = read_key(a.key)
    done = SqliteDoneSet(a.db)
    for ddl in SCHEMA:
        done.connection.execute(ddl)
    done.connection.commit()
    keys = registry_keys(KeyRegistry.load(a.registry))
    summary: dict[str, Any] = {"agent": me.agent_id, "acted": 0, "skipped": 0, "refused": 0}
    inbox = await AdmittingConsumer.open(
        a.topic,
        bootstrap_servers=a.bootstrap,
        group_id=a.group,
        guard_public_key=multikey_decode(a.guard_public_key),
        agent_id=me.agent_id,
        readers=readers(keys),
    )
    try:
        loop = ActOnce(inbox, done, effect=act)
        deadline = time.monotonic() + a.timeout
        while time.monotonic() < deadline:
            step = await loop.step(timeout_ms=500)
            for k, v in zip(("acted", "skipped", "refused"), step[:3], strict=True):
                summary[k] += v
            if handled(done.connection) >= a.expect and summary["acted"] + summary["skipped"] >= a.expect:
                break
    finally:
        await inbox.close()
    summary["handoffs"] = [
        {"handoff_id": h, "verdict": v, "not_used": json.loads(n)}
        for h, v, n in done.connection.execute("SELECT handoff_id, verdict, not_used FROM handoffs ORDER BY rowid")
    ]
    summary["used"] = [list(r) for r in done.connection.execute("SELECT handoff_id, name FROM used_components ORDER BY rowid")]
    done.close()
    print(json.dumps(summary))
    return 0 if handled_count(a.db) >= a.expect else 1


def handled(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT count(*) FROM handoffs").fetchone()[0])


def handled_count(path: str) -> int:
    with sqlite3.connect(path) as db:
        return handled(db)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = p.add_subparsers(dest="command", required=True)
    at = sub.add_parser("attest", help="sign this successor's integrity receipt for one handoff")
    at.add_argument("--key", required=True)
    at.add_argument("--handoff-id", required=True)
    at.add_argument("--out", required=True)
    rc = sub.add_parser("receive", help="receive handoffs and take over their verified components, once")
    rc.add_argument("--bootstrap", required=True)
    rc.add_argument("--topic", required=True, help="the route's downstream topic")
    rc.add_argument("--key", required=True, help="this successor's key file")
    rc.add_argument("--registry", required=True, help="this successor's own key registry (keys.toml)")
    rc.add_argument("--guard-public-key", required=True, help="the guard's public key, multikey (z6Mk...)")
    rc.add_argument("--db", required=True)
    rc.add_argument("--group", required=True)
    rc.add_argument("--expect", type=int, default=1, help="stop once this many handoffs are handled")
    rc.add_argument("--timeout", type=float, default=60.0)
    return p.parse_args(argv)


if __name__ == "__main__":
    args = parse()
    sys.exit(attest(args) if args.command == "attest" else asyncio.run(receive(args)))
