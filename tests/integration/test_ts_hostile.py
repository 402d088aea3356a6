"""The TypeScript receiver on a real topic holding hostile records (test_sdk_hostile.py's twin).

A real `busguard run` forwards genuine tasks; between them the topic gets a
record with a non-UTF-8 header name, a null `busguard-attestation`, a copy
of a genuine forward with its receipt nulled, a CRC-broken batch and a zstd
batch inflating to 64 MiB. The TypeScript receiver (ts/test/receiver-cli.ts:
`AdmittingConsumer.open` as a group member, `ActOnce` on a SQLite done-set)
acts on every task once and refuses each bad record or batch once, with the
Python SDK's reasons, across a restart; it never crashes on one.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, make_setup
from busguard.protocol.identity import multikey_encode

from .paths import REPO
from .test_sdk_hostile import EXECUTOR, hostile_inbox_first, hostile_inbox_second

CLI = REPO / "ts" / "dist" / "test" / "receiver-cli.js"

# Apache Kafka refuses to store a CRC-broken batch (CorruptRecordException), as for test_sdk_hostile.py
pytestmark = pytest.mark.brokers("tansu")


def receive(s: Setup, group: str, db: Path, acted: int, refused: int) -> dict[str, Any]:
    assert CLI.is_file(), f"{CLI} is missing: build the TypeScript package first (`make ts`; `make test` does it)"
    args = ["--topic", s.downstream_handoffs, "--bootstrap", s.bootstrap, "--group", group, "--db", str(db)]
    args += ["--guard", multikey_encode(s.guard.public_key), "--agent", EXECUTOR, "--acted", str(acted), "--refused", str(refused)]
    done = subprocess.run(["node", str(CLI), *args], capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return out


async def test_the_typescript_receiver_refuses_each_hostile_record_once_and_acts_on_every_task_once(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1)
    guard = GuardProcess(s)
    guard.wait_ready()
    group, db = f"{s.group}.ts-executor", tmp_path / "executor.db"
    try:
        await hostile_inbox_first(s)
        first = receive(s, group, db, acted=9, refused=4)
        assert first == {"acted": 9, "skipped": 0, "refused": 4, "reasons": {"undecodable": 2, "unattested": 2}}

        await hostile_inbox_second(s)
        second = receive(s, group, db, acted=5, refused=3)
        assert second == {"acted": 5, "skipped": 0, "refused": 3, "reasons": {"undecodable": 2, "unattested": 1}}
    finally:
        assert guard.terminate() == 0, guard.tail()
    conn = sqlite3.connect(db)
    work = sorted(t for (t,) in conn.execute("SELECT task_id FROM work"))
    conn.close()
    assert work == sorted(f"t-{i}" for i in range(14))  # each task once
