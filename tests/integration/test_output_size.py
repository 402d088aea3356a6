"""Inputs whose outputs would outgrow the broker's limit, between valid records,
through real guard processes: every record gets exactly one decision, the
valid ones are admitted, no output exceeds kafka.max_message_bytes (as Kafka
counts it, compressed as the guard's producer compresses), the guard stays
up, and a crash-restart over those records does not die.

The embedded tansu broker enforces no message size limit (it accepts 8 MB
records), so "the broker would refuse it" is checked by measuring every
output against Apache Kafka's default limit, the guard's default
`kafka.max_message_bytes`.
"""

from __future__ import annotations

import hashlib
import random
from collections import defaultdict
from pathlib import Path

import msgspec
import pytest
from aiokafka import AIOKafkaProducer

from busguard.audit.checks import check_audit_record
from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, all_decided, collect, header, identity, make_setup, produce, sender
from busguard.policies.taint.replay import encode_request
from busguard.protocol.attestation import verify_admitted, verify_decision_record
from busguard.protocol.records import Decision, headers_encoding
from busguard.runtime.batch_size import batch_size, compressed_batch_size
from busguard.runtime.outputs import Output
from busguard.runtime.topics import create_topics
from busguard.sdk.sender import SignedRecord

KAFKA_DEFAULT_LIMIT = 1_048_588
EXECUTOR = identity("executor").agent_id


def workload() -> tuple[list[tuple[bytes, list[tuple[str, bytes]]]], list[str]]:
    planner = sender("planner")
    rnd = random.Random(8)

    def handoff(task: str, payload: bytes) -> SignedRecord:
        return planner.sign(kind="handoff", task_id=task, receiver=EXECUTOR, payload=payload)

    small = [handoff(f"small-{i}", f'{{"n":{i}}}'.encode()) for i in range(4)]
    at_limit = handoff("incompressible-1mib", rnd.randbytes(1_048_576))  # the largest value admitted, plus its headers
    compressible = handoff("compressible", b'{"row":"abcdefgh"},' * 30_000)
    forged = handoff("forged", b"{}")
    junk = [(f"x-junk-{i}", rnd.randbytes(1000)) for i in range(3000)]  # 3 MB of headers the input carried compressed
    records = [
        (small[0].value, small[0].headers),
        (at_limit.value, at_limit.headers),
        (small[1].value, small[1].headers),
        (forged.value, [forged.headers[0], ("busguard-signature", b"A" * 86), *junk]),
        (small[2].value, small[2].headers),
        (compressible.value, [*compressible.headers, ("trace", b"span=1234;" * 200_000)]),  # 2 MB of headers, compressible
        (small[3].value, small[3].headers),
    ]
    expected = ["admitted", "output_too_large", "admitted", "bad_signature", "admitted", "admitted", "admitted"]
    return records, expected


async def produce_large(bootstrap: str, topic: str, records: list[tuple[bytes, list[tuple[str, bytes]]]]) -> list[tuple[int, int]]:
    """A compressing producer, as a sender whose broker takes large inputs would use."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", compression_type="gzip", max_request_size=32 << 20, max_batch_size=32 << 20, linger_ms=5
    )
    await producer.start()
    try:
        futures = [await producer.send(topic, value=v, key=b"planner", headers=h) for v, h in records]
        metas = [await f for f in futures]
    finally:
        await producer.stop()
    return [(m.partition, m.offset) for m in metas]


def _decisions(s: Setup, got) -> dict[int, set[bytes]]:  # type: ignore[no-untyped-def]
    by_offset: dict[int, set[bytes]] = defaultdict(set)
    for r in got[s.audit]:
        verify_decision_record(r.value, list(r.headers), s.guard.public_key)
        by_offset[msgspec.json.decode(r.value, type=Decision).source.offset].add(r.value)
    return by_offset


def _every_output_fits(s: Setup, got) -> None:  # type: ignore[no-untyped-def]
    for topic in s.outputs:
        for r in got[topic]:
            o = Output(topic, r.key, r.value, list(r.headers), r.timestamp)
            sent = compressed_batch_size(o, "gzip")
            assert sent <= KAFKA_DEFAULT_LIMIT, f"{topic} record of {sent} bytes (uncompressed {batch_size(o)})"


# its inputs are over Apache Kafka's message.max.bytes; on Kafka: test_kafka_topics.py's small-limit test
@pytest.mark.brokers("tansu")
async def test_oversized_outputs_between_valid_records(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, max_records=100)
    # dies after producing its first batch, before committing: the restart re-emits it
    victim = GuardProcess(s, fault="produced:1")
    victim.wait_ready()
    records, expected = workload()  # signed after the store exists
    coords = await produce_large(s.bootstrap, s.handoffs, records)
    assert len({p for p, _ in coords}) == 1
    assert victim.wait(120) == -9, victim.tail()

    survivor = GuardProcess(s)
    try:
        survivor.wait_ready()
        got = await collect(
            s.bootstrap, s.outputs, lambda c: all_decided(s, c, len(records)) and len(_decisions(s, c)) == len(records), timeout=120
        )
        assert survivor.healthy(), survivor.tail()
        # still serving: a valid record after the large ones is admitted
        after = sender("planner").sign(kind="handoff", task_id="after", receiver=EXECUTOR, payload=b"{}")
        await produce_large(s.bootstrap, s.handoffs, [(after.value, after.headers)])
        got = await collect(s.bootstrap, s.outputs, lambda c: len(_decisions(s, c)) == len(records) + 1, timeout=60)
        assert survivor.healthy(), survivor.tail()
    finally:
        assert survivor.terminate() == 0, survivor.tail()

    by_offset = _decisions(s, got)
    offsets = [o for _, o in coords]
    assert all(len(by_offset[o]) == 1 for o in offsets), "an input got two different decisions"
    decisions = [msgspec.json.decode(next(iter(by_offset[o])), type=Decision) for o in offsets]
    assert [d.reason for d in decisions] == expected
    _every_output_fits(s, got)

    every = [msgspec.json.decode(next(iter(v)), type=Decision) for v in by_offset.values()]
    assert len(every) == len(records) + 1
    assert msgspec.json.decode(next(iter(by_offset[max(by_offset)])), type=Decision).task_id == "after"
    admitted = {d.decision_id.encode() for d in every if d.reason == "admitted"}
    assert {header(r, "busguard-decision-id") for r in got[s.downstream_handoffs]} == admitted
    for r in got[s.downstream_handoffs]:
        verify_admitted(r.value, list(r.headers), s.guard.public_key, EXECUTOR)

    # the two that could not be carried are dead-lettered bounded, by hash
    dead = {header(r, "busguard-decision-id"): r for r in got[s.dead_letter]}
    too_large, forged = decisions[1], decisions[3]
    for d, (value, headers) in ((too_large, records[1]), (forged, records[3])):
        r = dead[d.decision_id.encode()]
        assert r.value is None and header(r, "busguard-reason") == d.reason.encode()
        assert header(r, "busguard-original-sha256") == hashlib.sha256(value).hexdigest().encode()
        assert header(r, "busguard-original-headers-sha256") == hashlib.sha256(headers_encoding(headers)).hexdigest().encode()
    assert "kafka.max_message_bytes" in too_large.detail

    # and a restart over all of it starts and stays up
    again = GuardProcess(s)
    try:
        again.wait_ready()
        assert again.healthy(), again.tail()
    finally:
        assert again.terminate() == 0, again.tail()


SMALL_LIMIT = 65_536
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "taint"
INCIDENT = encode_request((EXAMPLES / "incident.trace.json").read_bytes(), (EXAMPLES / "incident.ledger.json").read_bytes())
REFUSED = encode_request((EXAMPLES / "incident.trace.json").read_bytes())


def padded(request: bytes, total: int) -> bytes:
    """The request with JSON whitespace after its first brace: the same request, `total` bytes long."""
    return b"{" + b" " * (total - len(request)) + request[1:]


async def test_taint_replay_outputs_fit_a_64_kib_limit(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """Issue 35 finding 3 through `busguard run`: with `kafka.max_message_bytes
    = 65536` and no compression, a valid taint-replay request whose plan is a
    59 KB forward made a 79 KB audit record (the decision carried the forward
    again, base64-encoded), which Apache Kafka refuses. Every record the guard
    writes, of every kind (forward, dead letter, bounded dead letter,
    escalation, audit record), is measured here as Kafka counts it against
    the configured limit (tansu enforces none)."""
    s = await make_setup(tmp_path, broker.bootstrap)
    requests, plans = f"{s.handoffs}.taint", f"{s.handoffs}.taint-plans"
    await create_topics(s.bootstrap, [requests, plans], partitions=1)
    with s.config.open("a") as f:
        f.write(f'\n[[routes]]\nname = "taint"\ninputs = ["{requests}"]\ndownstream = "{plans}"\n')
    guard = GuardProcess(s, env={"BUSGUARD_KAFKA__MAX_MESSAGE_BYTES": str(SMALL_LIMIT), "BUSGUARD_KAFKA__COMPRESSION": "none"})
    guard.wait_ready()
    planner = sender("planner")

    def ask(task: str, payload: bytes) -> SignedRecord:
        return planner.sign(kind="taint-replay", task_id=task, receiver=EXECUTOR, payload=payload)

    plan, refused, rival, too_large = (
        ask("plan", padded(INCIDENT, 57_000)),
        ask("refused", padded(REFUSED, 60_000)),
        ask("plan", padded(INCIDENT, 50_001)),
        ask("too-large", padded(INCIDENT, 66_000)),
    )
    forged = ask("forged", padded(INCIDENT, 60_000))
    after = ask("after", INCIDENT)
    inputs = [plan, refused, rival, too_large, (forged.value, [*forged.headers[:1], ("busguard-signature", b"A" * 86)]), after]
    expected = ["admitted", "taint_replay_refused", "task_conflict", "output_too_large", "bad_signature", "admitted"]
    await produce(s.bootstrap, requests, inputs)
    topics = [plans, s.dead_letter, s.reconciliation, s.audit]
    try:
        got = await collect(s.bootstrap, topics, lambda c: len(c[s.audit]) >= len(inputs) and len(c[plans]) >= 2, timeout=120)
        assert guard.healthy(), guard.tail()
    finally:
        assert guard.terminate() == 0, guard.tail()

    sizes: dict[str, list[int]] = defaultdict(list)
    for topic in topics:
        for r in got[topic]:
            sent = compressed_batch_size(Output(topic, r.key, r.value, list(r.headers), r.timestamp), "none")
            sizes[topic].append(sent)
    print({t: sorted(v) for t, v in sizes.items()})  # the measured sizes, for the report
    for topic, measured in sizes.items():
        assert max(measured) <= SMALL_LIMIT, f"{topic}: a {max(measured)}-byte record batch over kafka.max_message_bytes {SMALL_LIMIT}"

    decisions: dict[str, Decision] = {}
    for r in got[s.audit]:
        checked = check_audit_record(r.value, list(r.headers), s.guard.public_key)
        assert checked.verified, checked.why
        assert isinstance(checked.record, Decision)
        decisions[checked.record.receipt_id or ""] = checked.record
    assert [decisions[ask.receipt_id].reason for ask in (plan, refused, rival, too_large, forged, after)] == expected
    # the plan: forwarded whole, its decision record carrying it by length and SHA-256
    fwd = next(r for r in got[plans] if header(r, "busguard-decision-id") == decisions[plan.receipt_id].decision_id.encode())
    assert len(fwd.value) > 57_000 and max(sizes[plans]) > 58_000
    att = verify_admitted(fwd.value, list(fwd.headers), s.guard.public_key, EXECUTOR)
    d = decisions[plan.receipt_id]
    assert d.replacement is None and d.replacement_sha256 == att.forwarded_sha256 == hashlib.sha256(fwd.value).hexdigest()
    assert d.replacement_length == len(fwd.value) and max(sizes[s.audit]) < 8_000
    # one escalation; the refused request dead-lettered whole, the too-large one bounded, by hash
    assert len(got[s.reconciliation]) == 1 and len(sizes[s.reconciliation]) == 1
    dead = {header(r, "busguard-reason"): r for r in got[s.dead_letter]}
    assert dead[b"taint_replay_refused"].value == refused.value
    assert dead[b"output_too_large"].value is None
    assert header(dead[b"output_too_large"], "busguard-original-sha256") == hashlib.sha256(too_large.value).hexdigest().encode()
