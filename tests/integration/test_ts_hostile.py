"""The TypeScript receiver on a real topic holding hostile records (test_sdk_hostile.py's twin).

A real `busguard run` forwards genuine tasks; between them the topic gets a
record with a non-UTF-8 header name, a null `busguard-attestation`, a copy
of a genuine forward with its receipt nulled, a CRC-broken batch and a zstd
batch inflating to 64 MiB. The TypeScript receiver (ts/test/receiver-cli.ts:
`AdmittingConsumer.open` as a group member, `ActOnce` on a SQLite done-set)
acts on every task once and refuses each bad record or batch once, with the
Python SDK's reasons, across a restart; it never crashes on one.

And the batches tansu will not move a reader past (test_stuck_offsets.py's
SDK case): an empty batch at the very start of the downstream log (no
offset before it answers: each offset is one refusal) and one right at the
receivers' committed position (fetched again from the offset before: one
refusal for its span). The TypeScript and the Python receiver read the same
log and must refuse and act alike.
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
from tests.fuzz.batches import batch

from .paths import REPO
from .test_hostile_records import produce_batches
from .test_sdk_hostile import EXECUTOR, forward_tasks, hostile_inbox_first, hostile_inbox_second, open_receiver, run_until

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


async def receive_python(s: Setup, group: str, db: Path, acted: int, refused: int) -> dict[str, Any]:
    """The Python SDK's receiver on the same log, once, in receive()'s shape."""
    loop, done = await open_receiver(s, group, db)
    try:
        total, reasons = await run_until(loop, acted=acted, refused=refused, timeout=120)
    finally:
        await loop.inbox.close()
        done.connection.close()
    return {"acted": total.acted, "skipped": total.skipped, "refused": total.refused, "reasons": dict(reasons)}


async def test_the_typescript_receiver_moves_past_empty_batches_as_the_python_one_does(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1)
    # offsets 0-1: an empty batch where the log starts, so no offset before it answers either
    (head,) = await produce_batches(s.bootstrap, s.downstream_handoffs, [(batch([], count=0, last_offset_delta=1), 2)])
    guard = GuardProcess(s)
    guard.wait_ready()
    ts, py = (f"{s.group}.ts-executor", tmp_path / "ts.db"), (f"{s.group}.py-executor", tmp_path / "py.db")
    try:
        await forward_tasks(s, ["first"], 1)
        first = {"acted": 1, "skipped": 0, "refused": 2, "reasons": {"undecodable": 2}}
        assert receive(s, *ts, acted=1, refused=2) == first
        assert await receive_python(s, *py, acted=1, refused=2) == first

        # offsets 3-6: an empty batch at both receivers' committed position (3); tansu answers a fetch there with nothing
        (mid,) = await produce_batches(s.bootstrap, s.downstream_handoffs, [(batch([], count=0, last_offset_delta=3), 4)])
        await forward_tasks(s, ["second", "third"], 3)
        second = {"acted": 2, "skipped": 0, "refused": 1, "reasons": {"undecodable": 1}}
        assert receive(s, *ts, acted=2, refused=1) == second
        assert await receive_python(s, *py, acted=2, refused=1) == second
    finally:
        assert guard.terminate() == 0, guard.tail()
    assert (head, mid) == (range(0, 2), range(3, 7))
    for _, db in (ts, py):
        conn = sqlite3.connect(db)
        assert [t for (t,) in conn.execute("SELECT task_id FROM work ORDER BY rowid")] == ["first", "second", "third"]
        conn.close()
