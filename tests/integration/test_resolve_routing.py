"""`busguard escalations resolve` sends the command under the key of the
escalation the guard sealed, whatever else on the reconciliation topic names
that escalation.

A writer without any key plants a record carrying the escalation's
`busguard-decision-id` with another key, in the escalation's own partition
ahead of it. The command used to take the first such record's key, so it
went to another partition, where the reconciler does not apply it after
its escalation. Through the CLI on the embedded broker: the command lands in
the escalation's partition under its key, and is applied."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from busguard.config import load_config
from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, collect, header, identity, make_setup, produce, sender
from busguard.protocol.keyfile import write_key
from busguard.protocol.records import Coordinates, Resolution, audit_decoder, decision_id

from .paths import REPO

PARTITIONS = 4


def _partition(key: bytes) -> int:
    """Where the producer's default partitioner puts `key` (the guard's and the CLI's)."""
    every = list(range(PARTITIONS))
    return int(DefaultPartitioner()(key, every, every))


async def test_a_forged_record_ahead_of_the_escalation_does_not_misroute_the_command(broker: EmbeddedBroker, tmp_path: Path) -> None:
    alice = identity("operator-alice")
    s = await make_setup(tmp_path, broker.bootstrap, partitions=PARTITIONS, operators=[("alice", alice)])
    alice_key = tmp_path / "alice.key"
    write_key(alice_key, alice)
    planner = sender("planner")
    conflict = [planner.sign(kind="handoff", task_id="t", receiver="x", payload=b"work"),
                planner.sign(kind="handoff", task_id="t", receiver="x", payload=b"other work")]  # fmt: skip
    (_, (part, offset)) = await produce(s.bootstrap, s.handoffs, conflict, key=b"planner")
    # the escalation the guard will write: its id, and its partition (keyed by task id)
    cfg = load_config(s.config)
    escalation = decision_id(cfg.policy().namespace, Coordinates(topic=s.handoffs, partition=part, offset=offset))
    home = _partition(b"t")
    elsewhere = next(k for k in (f"forged-{i}".encode() for i in range(100)) if _partition(k) != home)
    producer = AIOKafkaProducer(bootstrap_servers=s.bootstrap, acks="all")
    await producer.start()
    try:  # planted before the guard runs: ahead of the escalation in its partition
        await producer.send_and_wait(
            s.reconciliation, value=b"{}", key=elsewhere, partition=home, headers=[("busguard-decision-id", escalation.encode())]
        )
    finally:
        await producer.stop()

    guard, worker = GuardProcess(s), GuardProcess(s, command="reconcile")
    try:
        guard.wait_ready()
        worker.wait_ready()
        got = await collect(
            s.bootstrap, [s.audit], lambda c: any(isinstance(r, Resolution) for r in (audit_decoder.decode(x.value) for x in c[s.audit]))
        )
        cli = [sys.executable, "-m", "busguard.cli", "escalations", "resolve", escalation, "--as", "reject", "--note", "conflict",
               "--operator", "alice", "--key", str(alice_key), "--wait", "60", "--config", str(s.config)]  # fmt: skip
        done = subprocess.run(cli, capture_output=True, text=True, timeout=120, cwd=REPO)
        assert done.returncode == 0, done.stdout + done.stderr
        got = await collect(s.bootstrap, [s.reconciliation], lambda c: any(header(r, "busguard-command") for r in c[s.reconciliation]))
    finally:
        assert worker.terminate() == 0, worker.tail()
        assert guard.terminate() == 0, guard.tail()
    genuine = [r for r in got[s.reconciliation] if header(r, "busguard-attestation") is not None]
    assert [(r.partition, r.key, r.offset) for r in genuine] == [(home, b"t", 1)]  # behind the forged record
    (command,) = [r for r in got[s.reconciliation] if header(r, "busguard-command") is not None]
    assert (command.partition, command.key) == (home, b"t")
    assert f"passed over {s.reconciliation}/{home}/0" in done.stderr, done.stderr
