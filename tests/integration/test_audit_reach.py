"""`busguard audit` proves it read every partition it reads to its end
(docs/operations.md section 9, busguard.audit.reach), on the real broker.

tansu answers every fetch at the offset of an empty record batch (count 0,
valid CRC) with nothing, for good. An audit that stopped at the first idle
gap took that for the end of the log: with one such batch at the head of
each partition of the audit and downstream topics, a forged record behind
it went unread and the audit printed OK (issue 35, finding 4).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, all_decided, collect, identity, make_setup, produce, sender
from busguard.runtime.clients import partitions_at
from tests.fuzz.batches import batch, record

from .paths import REPO
from .test_hostile_records import produce_batches

EMPTY = batch([], count=0, last_offset_delta=0)  # 61 bytes: no records, one offset, a valid CRC
FORGED = batch([record(0, b"x", b"{}", [(b"busguard-decision-id", b"f" * 32)])])  # unsealed, "forwarded"


def _cli(s: Setup, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "busguard.cli", "audit", "--config", str(s.config), *args], capture_output=True, env=env, timeout=180
    )


async def _guarded_log(tmp: Path, bootstrap: str) -> Setup:
    """A small real log: a guard decides four handoffs and their acks."""
    s = await make_setup(tmp, bootstrap)
    guard = GuardProcess(s)
    try:
        guard.wait_ready()
        planner, executor = sender("planner"), sender("executor")
        to_exec, to_planner = identity("executor").agent_id, identity("planner").agent_id
        await produce(
            s.bootstrap, s.handoffs, [planner.sign(kind="handoff", task_id=f"t-{i}", receiver=to_exec, payload=b"{}") for i in range(4)]
        )
        await produce(
            s.bootstrap, s.acks, [executor.sign(kind="ack", task_id=f"t-{i}", receiver=to_planner, payload=b"{}") for i in range(4)]
        )
        await collect(s.bootstrap, s.outputs, lambda c: all_decided(s, c, 8))
    finally:
        assert guard.terminate() == 0, guard.tail()
    return s


async def _ends(bootstrap: str, topics: list[str]) -> dict[tuple[str, int], int]:
    """Each partition's high watermark, from a fetch answer (tansu's ListOffsets is low after a multi-record batch)."""
    parts = await partitions_at(bootstrap, topics, client_id="test-ends", request_timeout_ms=10_000)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, fetch_max_wait_ms=50)
    await consumer.start()
    try:
        tps = [TopicPartition(t, p) for t, ps in parts.items() for p in ps]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        while any(consumer.highwater(tp) is None for tp in tps):
            await consumer.getmany(timeout_ms=100)
        return {(tp.topic, tp.partition): consumer.highwater(tp) for tp in tps}
    finally:
        await consumer.stop()


def _reads(report: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["topic"], r["partition"]): r for r in report["reads"]}


async def test_the_report_shows_every_partition_read_to_its_end(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await _guarded_log(tmp_path, broker.bootstrap)
    ends = await _ends(s.bootstrap, [s.audit, s.downstream_handoffs, s.downstream_acks])
    clean = _cli(s, "--json")
    assert clean.returncode == 0, clean.stderr.decode()
    report = json.loads(clean.stdout)
    assert report["ok"] is True
    assert {k: (r["start"], r["position"], r["end"]) for k, r in _reads(report).items()} == {k: (0, e, e) for k, e in ends.items()}
    assert sum(r["records"] for k, r in _reads(report).items() if k[0] == s.audit) == sum(e for (t, _), e in ends.items() if t == s.audit)
    table = _cli(s)
    assert table.returncode == 0, table.stderr.decode()
    lines = table.stdout.decode().splitlines()
    assert lines[0] == "busguard audit: OK"
    head = lines.index(next(x for x in lines if x.startswith("partitions read (12;")))
    assert lines[head + 1].split() == ["TOPIC", "PARTITION", "FROM", "TO", "END", "RECORDS", "UNSERVED", "STATUS"]
    rows = {(c[0], int(c[1])): c for c in (x.split() for x in lines[head + 2 : head + 14])}
    assert {k: (c[2], c[3], c[4], " ".join(c[7:])) for k, c in rows.items()} == {
        k: ("0", str(e), str(e), "read to the end") for k, e in ends.items()
    }


# Apache Kafka refuses these batches at produce (docs/notes-broker.md): only tansu stores them
@pytest.mark.brokers("tansu")
async def test_an_empty_batch_ahead_of_a_forged_record_does_not_blind_the_audit(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await _guarded_log(tmp_path, broker.bootstrap)
    read = [s.audit, s.downstream_handoffs, s.downstream_acks]
    # an empty batch on every partition of the audit and downstream topics ...
    heads: list[tuple[str, int]] = []
    for topic in read:
        for p in range(4):
            (span,) = await produce_batches(s.bootstrap, topic, [(EMPTY, 1)], partition=p)
            if span.start == 0:
                heads.append((topic, p))
    # ... and a forged record behind one that heads its partition
    victim = next((t, p) for t, p in heads if t == s.downstream_handoffs)
    (forged,) = await produce_batches(s.bootstrap, victim[0], [(FORGED, 1)], partition=victim[1])
    assert forged.start == 1

    done = _cli(s, "--json")
    assert done.returncode == 1, done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["ok"] is False
    found = {v["invariant"] for v in report["violations"]}
    assert found - {"forged_record"} == {"forwarded_unattested", "offsets_unserved"}, report["violations"]
    # an empty batch a fetch from an earlier offset returns is read: its offset is one unsealed placeholder
    placed = [v["detail"] for v in report["violations"] if v["invariant"] == "forged_record"]
    assert all("holds no record" in d for d in placed), placed
    unserved = sorted(v["detail"] for v in report["violations"] if v["invariant"] == "offsets_unserved")
    assert unserved == sorted(
        f"{t}/{p}: the broker answered every fetch at 1 offset(s) below the partition's end with nothing (0); "
        "they were stepped over, so whatever they hold was not read"
        for t, p in heads
    )
    reads = _reads(report)
    assert all(r["position"] >= r["end"] for r in reads.values())
    assert reads[victim]["end"] == 2 and reads[victim]["records"] == 1 and reads[victim]["unserved"] == [[0, 0]]

    # incrementally: a checkpoint keeps the offsets stepped over, so every later run still fails for them
    ckpt = str(tmp_path / "audit.ckpt")
    first, again = _cli(s, "--json", "--checkpoint", ckpt), _cli(s, "--json", "--checkpoint", ckpt)
    assert (first.returncode, again.returncode) == (1, 1), again.stderr.decode()
    assert json.loads(again.stdout)["violations"] == report["violations"]
    assert _reads(json.loads(again.stdout)) == reads


# Apache Kafka refuses these batches at produce (docs/notes-broker.md): only tansu stores them
@pytest.mark.brokers("tansu")
async def test_a_partition_that_cannot_be_finished_fails_the_audit(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap)
    # an empty batch claiming 200 offsets heads partition 2 of the audit topic:
    # the broker answers nothing at any of them, more than the reader steps over
    await produce_batches(s.bootstrap, s.audit, [(batch([], count=0, last_offset_delta=199), 200)], partition=2)
    (after,) = await produce_batches(s.bootstrap, s.audit, [(FORGED, 1)], partition=2)
    assert after.start == 200

    done = _cli(s, "--json")
    assert done.returncode == 1, done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["ok"] is False
    unfinished = [v["detail"] for v in report["violations"] if v["invariant"] == "partition_unfinished"]
    reads = _reads(report)
    stuck = reads[(s.audit, 2)]
    assert stuck["end"] == 201 and stuck["position"] < 200 and stuck["unfinished"]
    assert unfinished == [f"{s.audit}/2: read from 0 to {stuck['position']}, not proven to the end offset 201: {stuck['unfinished']}"]
    assert all(r["position"] >= r["end"] for k, r in reads.items() if k != (s.audit, 2))
    table = _cli(s)
    assert table.returncode == 1 and b"[partition_unfinished]" in table.stdout and b"UNFINISHED" in table.stdout
    # `escalations show` cannot say an escalation is absent (or pending) from a log it did not read to the end
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    shown = subprocess.run(
        [sys.executable, "-m", "busguard.cli", "escalations", "show", "0" * 32, "--config", str(s.config)],
        capture_output=True,
        env=env,
        timeout=180,
    )
    assert shown.returncode == 2
    assert f"the audit topic was not read to its end: {s.audit}/2: read from 0 to {stuck['position']}".encode() in shown.stderr


# Apache Kafka refuses these batches at produce (docs/notes-broker.md): only tansu stores them
@pytest.mark.brokers("tansu")
async def test_offsets_given_out_again_below_a_checkpoint_are_a_finding(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await _guarded_log(tmp_path, broker.bootstrap)
    ends = await _ends(s.bootstrap, [s.downstream_handoffs])
    victim, end = next((k, e) for k, e in sorted(ends.items()) if e >= 3)
    ckpt = str(tmp_path / "audit.ckpt")
    clean = _cli(s, "--json", "--checkpoint", ckpt)
    assert clean.returncode == 0, clean.stderr.decode()

    # a batch whose last offset delta is -3 makes tansu give out offsets again:
    # the next record lands below the offset the checkpoint resumes from
    (span,) = await produce_batches(s.bootstrap, victim[0], [(batch([], count=0, last_offset_delta=-3), 1)], partition=victim[1])
    assert span.start == end
    (forged,) = await produce_batches(s.bootstrap, victim[0], [(FORGED, 1)], partition=victim[1])
    assert forged.start == end - 2

    done = _cli(s, "--json", "--checkpoint", ckpt)
    assert done.returncode == 1, done.stderr.decode()
    report = json.loads(done.stdout)
    assert [v["detail"] for v in report["violations"]] == [
        f"{victim[0]}/{victim[1]}: the broker's high watermark {end - 1} is below offset {end}, which the audit had read to: it gave "
        f"out offsets again (or lost the log), and what it holds below {end} now was not read; audit without the checkpoint"
    ]
    assert _reads(report)[victim]["rewound"] == [end - 1, end]
    # read from the beginning, the forged record is found
    scratch = json.loads(_cli(s, "--json").stdout)
    assert "forwarded_unattested" in {v["invariant"] for v in scratch["violations"]}
