"""busguard's topics on Apache Kafka (auto-creation off): created with the
configs busguard needs, checked at start, and held to the broker's size limit.

Through `busguard run` processes on the session's Apache Kafka node; the
checks' measurements are in docs/notes-broker.md and docs/operations.md
("Topics busguard needs", "Output size").
"""

from __future__ import annotations

import hashlib
import random
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from aiokafka.admin import NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from busguard.audit.checks import check_audit_record
from busguard.config import load_config
from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, collect, header, make_setup, produce, sender
from busguard.devtools.kafka import ApacheKafka
from busguard.protocol.records import Decision
from busguard.runtime.batch_size import compressed_batch_size
from busguard.runtime.outputs import Output
from busguard.runtime.topics import create_topics
from busguard.sdk.sender import SignedRecord

from .test_apache_kafka import ON_KAFKA, _admin
from .test_output_size import EXECUTOR, INCIDENT, SMALL_LIMIT, padded

pytestmark = pytest.mark.integration


async def _set(bootstrap: str, topic: str, **configs: str) -> None:
    """Replace `topic`'s topic-level configs (AlterConfigs: the ones not named go back to the broker's)."""
    async with _admin(bootstrap) as admin:
        (response,) = await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, {k.replace("_", "."): v for k, v in configs.items()})]
        )
    assert all(r[0] == 0 for r in response.resources), response


async def _configs(bootstrap: str, topic: str) -> dict[str, str]:
    async with _admin(bootstrap) as admin:
        (response,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    return {e[0]: e[1] for e in response.resources[0][4]}


def refused(s: Setup, env: dict[str, str], command: str = "run") -> str:
    """Run `busguard <command>` expecting it to refuse at start: exit 2 and one line on stderr, which is returned."""
    done = subprocess.run(
        [sys.executable, "-m", "busguard.cli", command, "--config", str(s.config)],
        env={**_environ(), **ON_KAFKA, "BUSGUARD_OPS__PORT": "0", **env},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 2, (done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    errors = [line for line in done.stderr.splitlines() if line.startswith("busguard: ")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    return errors[0]


def _environ() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


async def test_a_mismatched_topic_is_one_line_at_start(kafka: ApacheKafka, tmp_path: Path) -> None:
    """Each thing busguard needs of an existing topic, broken one at a time
    (`kafka.create_topics` off): the guard exits 2 before consuming anything,
    with one line naming the topic, the setting, its value and what is allowed."""
    s = await make_setup(tmp_path, kafka.bootstrap)
    where = f"busguard: config error: broker {kafka.bootstrap}"

    line = refused(s, {"BUSGUARD_TOPICS__REPLIES": f"{s.replies}.missing"})
    assert line == (
        f"{where}: topic {s.replies}.missing: does not exist; create it or set kafka.create_topics = true (docs/operations.md section 2)"
    )

    await _set(kafka.bootstrap, s.audit, cleanup_policy="compact")
    line = refused(s, {})
    assert line.startswith(f"{where}: topic {s.audit} cleanup.policy = 'compact': 'delete': compaction keeps one record per key"), line
    await _set(kafka.bootstrap, s.reconciliation, cleanup_policy="compact,delete")
    await _set(kafka.bootstrap, s.audit)  # back to the broker's: delete
    line = refused(s, {})
    assert line.startswith(f"{where}: topic {s.reconciliation} cleanup.policy = 'compact,delete': 'delete'"), line
    assert refused(s, {}, command="reconcile") == line  # the reconciler checks its own topics the same way
    await _set(kafka.bootstrap, s.reconciliation)

    await _set(kafka.bootstrap, s.audit, retention_ms="3600000")
    line = refused(s, {})
    assert line == (
        f"{where}: topic {s.audit} retention.ms = 3600000: -1 (kept forever) or at least 604800000 (kafka.audit_min_retention_ms):"
        " the audit topic is the proof of every decision"
    )
    line = refused(s, {"BUSGUARD_KAFKA__AUDIT_MIN_RETENTION_MS": "-1"})
    assert "retention.ms = 3600000: -1 (kept forever): the audit topic" in line, line
    await _set(kafka.bootstrap, s.audit, retention_bytes="1073741824")
    line = refused(s, {})
    assert line.startswith(f"{where}: topic {s.audit} retention.bytes = 1073741824: -1: a size limit deletes"), line
    await _set(kafka.bootstrap, s.audit, retention_ms="-1")

    # and with every topic as busguard needs it, the same config starts and serves
    guard = GuardProcess(s, env=ON_KAFKA)
    try:
        guard.wait_ready(60)
        assert guard.healthy(), guard.tail()
    finally:
        assert guard.terminate() == 0, guard.tail()


async def test_create_topics_gives_busguards_topics_their_configs(kafka: ApacheKafka, tmp_path: Path) -> None:
    """With `kafka.create_topics` on a broker that never auto-creates: every
    topic created, the audit topic kept forever, no output topic compacted,
    every output topic's max.message.bytes the guard's kafka.max_message_bytes."""
    s = await make_setup(tmp_path, kafka.bootstrap)
    fresh = {"audit": f"{s.audit}.new", "reconciliation": f"{s.reconciliation}.new", "dead_letter": f"{s.dead_letter}.new"}
    env = {
        **ON_KAFKA,
        "BUSGUARD_KAFKA__CREATE_TOPICS": "true",
        "BUSGUARD_KAFKA__TOPIC_PARTITIONS": "2",
        "BUSGUARD_KAFKA__MAX_MESSAGE_BYTES": "524288",  # under the existing topics' 1048588: they pass
        **{f"BUSGUARD_TOPICS__{k.upper()}": v for k, v in fresh.items()},
    }
    guard = GuardProcess(s, env=env)
    try:
        guard.wait_ready(60)
    finally:
        assert guard.terminate() == 0, guard.tail()
    audit = await _configs(kafka.bootstrap, fresh["audit"])
    assert (audit["retention.ms"], audit["cleanup.policy"], audit["max.message.bytes"]) == ("-1", "delete", "524288")
    for topic in (fresh["reconciliation"], fresh["dead_letter"]):
        c = await _configs(kafka.bootstrap, topic)
        assert (c["cleanup.policy"], c["max.message.bytes"]) == ("delete", "524288")
    assert (await _configs(kafka.bootstrap, s.handoffs))["max.message.bytes"] == "1048588"  # an input: left as it was


async def test_outputs_on_a_64_kib_topic_limit(kafka: ApacheKafka, tmp_path: Path) -> None:
    """Output topics created with max.message.bytes = 65536 on Apache Kafka,
    which (unlike tansu) refuses a larger record batch. A guard whose
    kafka.max_message_bytes is above it would have its produce refused and
    stop at the same record at every restart: it is refused at start instead.
    At 65536, every input whose forward, dead letter or audit record would be
    larger gets one decision, every record written fits (the broker took
    them all), and the guard keeps serving."""
    s = await make_setup(tmp_path, kafka.bootstrap, partitions=1)
    requests, plans = f"{s.handoffs}.taint", f"{s.handoffs}.taint-plans"
    await create_topics(s.bootstrap, [requests, plans], partitions=1)
    with s.config.open("a") as f:
        f.write(f'\n[[routes]]\nname = "taint"\ninputs = ["{requests}"]\ndownstream = "{plans}"\n')
    for topic in load_config(s.config).output_topics:  # every topic the guard writes
        await _set(kafka.bootstrap, topic, max_message_bytes=str(SMALL_LIMIT))

    line = refused(s, {})  # kafka.max_message_bytes left at its default, Apache Kafka's 1048588
    assert line.startswith(
        f"busguard: config error: {s.config}: kafka.max_message_bytes = 1048588: at most 65536, the max.message.bytes of topic "
    ), line
    assert "the brokers' message.max.bytes is 1048588" in line, line

    guard = GuardProcess(s, env={**ON_KAFKA, "BUSGUARD_KAFKA__MAX_MESSAGE_BYTES": str(SMALL_LIMIT), "BUSGUARD_KAFKA__COMPRESSION": "none"})
    guard.wait_ready(60)
    planner = sender("planner")
    rnd = random.Random(36)

    def ask(task: str, payload: bytes) -> SignedRecord:
        return planner.sign(kind="taint-replay", task_id=task, receiver=EXECUTOR, payload=payload)

    def handoff(task: str, payload: bytes) -> SignedRecord:
        return planner.sign(kind="handoff", task_id=task, receiver=EXECUTOR, payload=payload)

    plan, too_large = ask("plan", padded(INCIDENT, 57_000)), ask("too-large", padded(INCIDENT, 66_000))
    big, forged, small = handoff("big", rnd.randbytes(70_000)), handoff("forged", rnd.randbytes(70_000)), handoff("small", b"{}")
    forged_rec = (forged.value, [forged.headers[0], ("busguard-signature", b"A" * 86)])
    taint_coords = await produce(s.bootstrap, requests, [plan, too_large], key=b"planner")
    handoff_coords = await produce(s.bootstrap, s.handoffs, [big, forged_rec, small], key=b"planner")
    topics = [plans, s.downstream_handoffs, s.dead_letter, s.reconciliation, s.audit]
    try:
        got = await collect(s.bootstrap, topics, lambda c: len(c[s.audit]) >= 5 and len(c[s.downstream_handoffs]) >= 1, timeout=120)
        assert guard.healthy(), guard.tail()
    finally:
        assert guard.terminate() == 0, guard.tail()

    sizes: dict[str, list[int]] = defaultdict(list)
    for topic in topics:
        for r in got[topic]:
            sizes[topic].append(compressed_batch_size(Output(topic, r.key, r.value, list(r.headers), r.timestamp), "none"))
    print({t: sorted(v) for t, v in sizes.items()})  # the measured sizes, for the report
    assert all(max(v) <= SMALL_LIMIT for v in sizes.values()), sizes

    by_source: dict[tuple[str, int], set[str]] = defaultdict(set)
    decisions: dict[str, Decision] = {}
    for r in got[s.audit]:
        checked = check_audit_record(r.value, list(r.headers), s.guard.public_key)
        assert checked.verified, checked.why
        assert isinstance(checked.record, Decision)
        d = checked.record
        by_source[(d.source.topic, d.source.offset)].add(d.decision_id)
        decisions[d.task_id or ""] = d
    assert all(len(ids) == 1 for ids in by_source.values()), "an input got two decisions"
    assert {(requests, o) for _, o in taint_coords} | {(s.handoffs, o) for _, o in handoff_coords} == set(by_source)
    reasons = {task: decisions[task].reason for task in ("plan", "too-large", "big", "forged", "small")}
    assert reasons == {
        "plan": "admitted",
        "too-large": "output_too_large",
        "big": "output_too_large",
        "forged": "bad_signature",
        "small": "admitted",
    }
    assert max(sizes[plans]) > 58_000  # the plan forwarded whole, near the limit
    dead = {header(r, "busguard-decision-id"): r for r in got[s.dead_letter]}
    for task, value in (("too-large", too_large.value), ("big", big.value), ("forged", forged.value)):
        r = dead[decisions[task].decision_id.encode()]  # none fits by value: each is the bounded dead letter
        assert r.value is None and header(r, "busguard-original-sha256") == hashlib.sha256(value).hexdigest().encode()


async def test_on_tansu_the_configs_it_describes_are_checked(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """tansu 0.6 describes a topic's configs only as given at its creation
    (docs/notes-broker.md): a reconciliation topic created compacted there
    is refused at start as on Apache Kafka."""
    s = await make_setup(tmp_path, broker.bootstrap)
    compacted = f"{s.reconciliation}.compacted"
    async with _admin(broker.bootstrap) as admin:
        await admin.create_topics([NewTopic(compacted, 1, 1, topic_configs={"cleanup.policy": "compact"})])
    done = subprocess.run(
        [sys.executable, "-m", "busguard.cli", "run", "--config", str(s.config)],
        env={**_environ(), "BUSGUARD_OPS__PORT": "0", "BUSGUARD_TOPICS__RECONCILIATION": compacted},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(f"busguard: config error: broker {broker.bootstrap}: topic {compacted} cleanup.policy = 'compact': 'delete'")
    ), done.stderr
