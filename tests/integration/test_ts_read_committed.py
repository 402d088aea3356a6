"""The TypeScript consumer with `readCommitted` on Apache Kafka (issue 39).

A transactional aiokafka producer writes one committed transaction, one
aborted one and another committed one to a topic; the TypeScript
`AdmittingConsumer` (ts/test/committed-cli.ts) reading it with
`readCommitted` decides exactly the committed records, each once (none is
the guard's, so each is refused `unattested`: a decision all the same), and
moves past the aborted range and the transaction markers. Read uncommitted,
the aborted records are decided too: the broker does return them to a
read_committed fetch, and only the reader's skip keeps them out.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from busguard.devtools.kafka import ApacheKafka
from busguard.runtime.topics import create_topics

from .paths import REPO

pytestmark = pytest.mark.integration

CLI = REPO / "ts" / "dist" / "test" / "committed-cli.js"


def read(bootstrap: str, topic: str, decisions: int, *, committed: bool) -> dict[str, Any]:
    assert CLI.is_file(), f"{CLI} is missing: build the TypeScript package first (`make ts`; `make test` does it)"
    args = ["--topic", topic, "--bootstrap", bootstrap, "--group", f"rc.{uuid.uuid4().hex[:8]}", "--decisions", str(decisions)]
    done = subprocess.run(
        ["node", str(CLI), *args, *([] if committed else ["--uncommitted"])], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return out


async def test_the_typescript_reader_read_committed_decides_only_committed_records_each_once(kafka: ApacheKafka) -> None:
    topic = f"ts-rc.{uuid.uuid4().hex[:8]}"
    await create_topics(kafka.bootstrap, [topic], partitions=1)
    tx = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all", enable_idempotence=True, transactional_id=f"ts-rc.{topic}")
    await tx.start()
    offsets: dict[str, list[int]] = {"committed": [], "aborted": []}
    try:
        for outcome, values in (("committed", [b"c0", b"c1", b"c2"]), ("aborted", [b"a0", b"a1", b"a2"]), ("committed", [b"c3", b"c4"])):
            await tx.begin_transaction()
            sent = [await tx.send(topic, v, partition=0) for v in values]
            offsets[outcome] += [(await s).offset for s in sent]
            if outcome == "committed":
                await tx.commit_transaction()
            else:
                await tx.abort_transaction()
    finally:
        await tx.stop()
    assert offsets == {"committed": [0, 1, 2, 8, 9], "aborted": [4, 5, 6]}  # markers at 3, 7 and 10

    got = read(kafka.bootstrap, topic, len(offsets["committed"]), committed=True)
    assert got["decided"] == [[str(o), "unattested"] for o in offsets["committed"]]
    # the position to commit: after the last record decided (the marker at 10 is no record, and is skipped again on a restart)
    assert got["next"] == "10"

    everything = read(kafka.bootstrap, topic, 8, committed=False)
    assert [int(o) for o, _ in everything["decided"]] == [0, 1, 2, 4, 5, 6, 8, 9]
