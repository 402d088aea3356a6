"""Poison-proof (docs/operations.md, section 2.1): records a real client produces in every codec, and
records no client library will produce (non-UTF-8 header names, corrupt
batches), into running guard, reconciler and auditor processes on the real
broker. Every offset gets exactly one decision; nothing dies, not after a
restart either.

Hostile batches are encoded byte by byte (tests/fuzz/batches.py) and handed
to aiokafka's producer as a finished batch buffer, so the broker stores
exactly those bytes (tansu assigns the base offset and does not check CRCs;
it refuses a codec id above 4, so an unknown codec only reaches busguard in
the unit and fuzz tests).
"""

from __future__ import annotations

import asyncio
import base64
import struct
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import confluent_kafka
import msgspec
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.consumer import fetcher

from busguard.audit.run import run_audit
from busguard.config import load_config
from busguard.devtools.broker import EmbeddedBroker
from busguard.devtools.guardkit import GuardProcess, Setup, all_decided, collect, header, identity, make_setup, produce, sender
from busguard.protocol.records import Decision
from busguard.runtime.tolerant_fetch import consumer_options
from busguard.sdk.sender import SignedRecord
from tests.fuzz.batches import CODECS, batch, record

from .test_reconcile import resolutions

WORK = b'{"op":"summarize","doc":"' + b"quarterly figures " * 40 + b'"}'  # compressible, so librdkafka really compresses


def _raw(rec: SignedRecord) -> tuple[bytes, bytes, list[tuple[bytes, bytes | None]]]:
    return b"planner", rec.value, [(k.encode(), v) for k, v in rec.headers]


async def produce_batches(bootstrap: str, topic: str, batches: Sequence[tuple[bytes, int]], partition: int = 0) -> list[range]:
    """Send finished batch buffers as they are; the offsets each was given."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, acks="all")
    await producer.start()
    spans = []
    try:
        for raw, n in batches:
            b = producer.create_batch()
            b._buffer, b._relative_offset = raw, n  # a built batch: aiokafka sends _buffer untouched
            b.close()
            meta = await (await producer.send_batch(b, topic, partition=partition))
            spans.append(range(meta.offset, meta.offset + n))
    finally:
        await producer.stop()
    return spans


def valid_needed(n: int) -> int:
    return sum(2 if i % 6 == 0 else 1 if i % 6 == 1 else 0 for i in range(n))


def hostile_batches(n: int, valid: list[SignedRecord]) -> list[tuple[bytes, int]]:
    """n batches (bytes, record count) of hostile records with `valid_needed(n)`
    valid records among them."""
    out: list[tuple[bytes, int]] = []
    v = iter(valid)
    for i in range(n):
        kind = i % 6
        if kind == 0:  # non-UTF-8 header names between valid records
            good = [_raw(next(v)), _raw(next(v))]
            recs = [
                record(0, *good[0]),
                record(1, b"k", b"v", [(b"\xff\xfename", b"x"), (b"ok", None)]),
                record(2, b"k", b"w", [(b"\xc0\xaf", b"")]),
                record(3, *good[1]),
            ]
            out.append((batch(recs, codec=i % 5), 4))
        elif kind == 1:  # a record whose fields do not parse, between valid ones
            broken = b"\x16\x00\x00\x02\x7ekk" + b"\x00" * 5
            out.append((batch([record(0, *_raw(next(v))), broken, record(2, None, b"z", [(b"\x80", b"1")])], codec=CODECS["zstd"]), 3))
        elif kind == 2:  # a CRC mismatch
            out.append((batch([record(j, None, b"x%d" % j, []) for j in range(8)], crc=12345), 8))
        elif kind == 3:  # a corrupt compressed frame
            out.append((batch([], payload=b"\x00not-" + bytes([i % 256]) * 20, count=6, last_offset_delta=5, attributes=(i % 4) + 1), 6))
        elif kind == 4:  # offsets out of order
            out.append((batch([record(1, None, b"a", []), record(0, None, b"b", []), record(2, None, b"c", [])]), 3))
        else:  # random-looking header bytes, many records
            recs = [record(j, bytes([j]), bytes(range(j % 50)), [(bytes([0x80 + (j % 60), j % 256]), bytes([j]))]) for j in range(10)]
            out.append((batch(recs, codec=CODECS["lz4"]), 10))
    return out


def _decisions(got: Any, s: Setup) -> dict[int, set[str]]:
    """Each input offset -> the decision ids covering it (a span decision
    covers every offset of its undecodable batch, docs/protocol.md 2.1)."""
    by_offset: dict[int, set[str]] = defaultdict(set)
    for r in got[s.audit]:
        d = msgspec.json.decode(r.value, type=Decision)
        for o in range(d.source.offset, d.covers_to + 1):
            by_offset[o].add(d.decision_id)
    return by_offset


def _audit_facts(got: Any, s: Setup) -> dict[int, Decision]:
    return {d.source.offset: d for d in (msgspec.json.decode(r.value, type=Decision) for r in got[s.audit])}


# also on the embedded broker, which the demo runs on
@pytest.mark.brokers("kafka", "tansu")
async def test_librdkafka_in_every_codec_into_a_running_guard(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1, max_records=500)
    first = GuardProcess(s)  # creates the store, so the records below are not refused as store_warming
    first.wait_ready()
    assert first.terminate() == 0, first.tail()
    planner, to = sender("planner"), identity("executor").agent_id
    per_codec = 30
    for codec in CODECS:  # all of it waits in one partition, so one fetch holds every codec
        p = confluent_kafka.Producer(
            {"bootstrap.servers": s.bootstrap, "compression.type": codec, "enable.idempotence": False, "acks": "all", "linger.ms": 50}
        )
        for i in range(per_codec):
            r = planner.sign(kind="handoff", task_id=f"{codec}-{i}", receiver=to, payload=WORK)
            p.produce(s.handoffs, key=b"planner", value=r.value, headers=r.headers)
        assert p.flush(30) == 0
    total = per_codec * len(CODECS)

    # the batches on the wire really are in each codec
    seen: set[int] = set()
    consumer_options()  # the hook first: the spy wraps it, and putting it back must not undo it
    original = fetcher.MemoryRecords

    class Spy(fetcher.MemoryRecords):  # type: ignore[misc, name-defined]
        def __init__(self, raw: bytes) -> None:
            super().__init__(raw)
            pos = 0
            while pos + 23 <= len(raw):
                length = struct.unpack_from(">i", raw, pos + 8)[0]
                seen.add(struct.unpack_from(">h", raw, pos + 21)[0] & 7)
                pos += 12 + length

    fetcher.MemoryRecords = Spy
    try:
        await collect(s.bootstrap, [s.handoffs], lambda c: len(c[s.handoffs]) >= total)
    finally:
        fetcher.MemoryRecords = original
    assert seen == set(CODECS.values())

    guard = GuardProcess(s)
    try:
        got = await collect(s.bootstrap, s.outputs, lambda c: all_decided(s, c, total))
        assert guard.proc.poll() is None, guard.tail()
    finally:
        assert guard.terminate() == 0, guard.tail()
    facts = _audit_facts(got, s)
    assert sorted(facts) == list(range(total)) and {d.reason for d in facts.values()} == {"admitted"}
    assert len(got[s.downstream_handoffs]) == total and all(r.value == WORK for r in got[s.downstream_handoffs])


# Apache Kafka refuses these batches at produce (docs/notes-broker.md): only tansu stores them
@pytest.mark.brokers("tansu")
async def test_hostile_records_between_valid_ones_each_get_one_decision_across_a_crash(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1, max_records=200)
    guard = GuardProcess(s)
    guard.wait_ready()
    planner, to = sender("planner"), identity("executor").agent_id
    n_batches = 480
    valid = [planner.sign(kind="handoff", task_id=f"v-{i}", receiver=to, payload=WORK) for i in range(n_batches)]
    need = valid_needed(n_batches)
    batches = hostile_batches(n_batches, valid[:need])
    plain = valid[need:]
    spans: list[range] = []
    plain_offsets: list[int] = []
    killed = False
    try:
        for part in range(4):  # hostile batches and plain valid records, interleaved
            chunk = batches[part * len(batches) // 4 : (part + 1) * len(batches) // 4]
            spans += await produce_batches(s.bootstrap, s.handoffs, chunk)
            plain_offsets += [o for _, o in await produce(s.bootstrap, s.handoffs, plain[part::4], key=b"planner")]
            if part == 1:  # kill -9 mid-stream; the restarted guard re-reads uncommitted hostile records
                await collect(s.bootstrap, [s.audit], lambda c: len(c[s.audit]) >= 200)
                guard.kill9()
                killed = True
                guard = GuardProcess(s)
                guard.wait_ready()
        expected = {o for span in spans for o in span} | set(plain_offsets)
        hostile_total = sum(n for _, n in batches)
        assert hostile_total >= 2500
        got = await collect(
            s.bootstrap, [s.audit, s.dead_letter, s.downstream_handoffs], lambda c: len(_decisions(c, s)) >= len(expected), timeout=180
        )
        assert guard.proc.poll() is None, guard.tail()
    finally:
        assert guard.terminate() == 0, guard.tail()
    assert killed
    by_offset = _decisions(got, s)
    assert set(by_offset) == expected and all(len(ids) == 1 for ids in by_offset.values())  # exactly one decision each
    facts = _audit_facts(got, s)
    # every valid record (plain, or inside a hostile batch) is admitted
    valid_receipts = {r.receipt_id for r in valid}
    admitted = {d.receipt_id for d in facts.values() if d.reason == "admitted"}
    assert admitted == valid_receipts
    reasons = {d.reason for d in facts.values()}
    assert {"undecodable_header", "undecodable_record", "undecodable_batch"} <= reasons
    # the dead letter keeps the original bytes, recoverably
    dl = [r for r in got[s.dead_letter] if header(r, "busguard-reason") == b"undecodable_header"]
    pairs = msgspec.json.decode(header(dl[0], "busguard-original-headers") or b"")
    assert [base64.b64decode(k) for k, _ in pairs][0] in (b"\xff\xfename", b"\xc0\xaf", *(bytes([0x80 + j % 60, j]) for j in range(10)))
    carriers = [r for r in got[s.dead_letter] if header(r, "busguard-original-form") == b"batch"]
    assert carriers and all(r.value[:8] == struct.pack(">q", int(header(r, "busguard-batch-offset") or b"-1")) for r in carriers)

    # and a restart reading nothing new comes up and drains cleanly
    again = GuardProcess(s)
    again.wait_ready()
    await asyncio.sleep(1)
    assert again.terminate() == 0, again.tail()


#: The hostile batches of `hostile_batches` Apache Kafka 4.4.0 stores (measured,
#: docs/notes-broker.md): non-UTF-8 header names, offsets out of order, random
#: header bytes. It refuses the rest at produce.
KAFKA_STORES = (0, 4, 5)


async def test_hostile_batches_apache_kafka_stores_each_get_one_decision_across_a_crash(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1, max_records=200)
    guard = GuardProcess(s)
    guard.wait_ready()
    planner, to = sender("planner"), identity("executor").agent_id
    n_batches = 120
    valid = [planner.sign(kind="handoff", task_id=f"v-{i}", receiver=to, payload=WORK) for i in range(valid_needed(n_batches))]
    batches = [b for i, b in enumerate(hostile_batches(n_batches, valid)) if i % 6 in KAFKA_STORES]
    in_batches = {valid[k].receipt_id for k in range(0, len(valid), 3)} | {valid[k].receipt_id for k in range(1, len(valid), 3)}
    try:
        spans = await produce_batches(s.bootstrap, s.handoffs, batches[: len(batches) // 2])
        await collect(s.bootstrap, [s.audit], lambda c: len(c[s.audit]) >= 20)
        guard.kill9()  # the restarted guard re-reads what was not committed
        guard = GuardProcess(s)
        guard.wait_ready()
        spans += await produce_batches(s.bootstrap, s.handoffs, batches[len(batches) // 2 :])
        expected = {o for span in spans for o in span}
        got = await collect(s.bootstrap, [s.audit, s.dead_letter], lambda c: len(_decisions(c, s)) >= len(expected), timeout=120)
        assert guard.proc.poll() is None, guard.tail()
    finally:
        assert guard.terminate() == 0, guard.tail()
    by_offset = _decisions(got, s)
    assert set(by_offset) == expected and all(len(ids) == 1 for ids in by_offset.values())  # exactly one decision each
    facts = _audit_facts(got, s)
    assert {d.receipt_id for d in facts.values() if d.reason == "admitted"} == in_batches  # the valid records among them
    assert "undecodable_header" in {d.reason for d in facts.values()}


# Apache Kafka refuses these batches at produce (docs/notes-broker.md): only tansu stores them
@pytest.mark.brokers("tansu")
async def test_the_reconciler_and_the_auditor_survive_foreign_records_on_their_topics(broker: EmbeddedBroker, tmp_path: Path) -> None:
    s = await make_setup(tmp_path, broker.bootstrap, partitions=1)
    guard, worker = GuardProcess(s), GuardProcess(s, command="reconcile")
    guard.wait_ready()
    worker.wait_ready()
    planner, to = sender("planner"), identity("executor").agent_id
    poison = [
        (
            batch(
                [record(0, b"k", b"v", [(b"\xff", b"x")]), record(1, None, b"w", [(b"busguard-command\xff", b"1")])], codec=CODECS["snappy"]
            ),
            2,
        ),
        (batch([record(j, None, b"x", []) for j in range(3)], crc=1), 3),
    ]
    try:
        spans = await produce_batches(s.bootstrap, s.reconciliation, poison)
        # then an escalation the reconciler must still resolve
        first = planner.sign(kind="handoff", task_id="t-esc", receiver=to, payload=b"work")
        retry = planner.sign(kind="handoff", task_id="t-esc", receiver=to, payload=b"work")
        await produce(s.bootstrap, s.handoffs, [first, retry], key=b"planner")
        got = await collect(s.bootstrap, [s.audit, s.dead_letter], lambda c: len(resolutions(s, c)) >= 1 and len(c[s.dead_letter]) >= 3)
        assert worker.proc.poll() is None, worker.tail()
        worker.kill9()
        worker = GuardProcess(s, command="reconcile")  # re-reads whatever was not committed; must not die on it
        worker.wait_ready()
        await asyncio.sleep(2)
        assert worker.proc.poll() is None, worker.tail()
    finally:
        assert worker.terminate() == 0, worker.tail()
    dead: dict[int, bytes | None] = {}
    for r in got[s.dead_letter]:
        source = header(r, "busguard-source") or b""
        if source.startswith(f"{s.reconciliation}/0/".encode()):
            first = int(source.rsplit(b"/", 1)[1])
            for o in range(first, int(header(r, "busguard-last-offset") or first) + 1):  # a span dead letter covers its batch
                dead[o] = header(r, "busguard-reason")
    for span in spans:
        for o in span:
            assert dead[o] in (b"undecodable_header", b"undecodable_batch")

    # foreign records on the audit and downstream topics: reported, not fatal
    await produce_batches(s.bootstrap, s.audit, poison)
    await produce_batches(s.bootstrap, s.downstream_handoffs, poison[:1])
    try:
        # each role's key, as a deployment with a reconciler key is audited: the
        # resolution of t-esc is sealed by the reconciler, not the guard
        report = await asyncio.to_thread(
            run_audit,
            load_config(s.config),
            guard_public_key=s.guard.public_key,
            reconciler_public_key=s.reconciler.public_key,
            idle_ms=2000,
        )
    finally:
        assert guard.terminate() == 0, guard.tail()
    forged = [v for v in report.violations if v.invariant == "forged_record"]
    assert len(forged) == 3 and all("cannot be decoded" in v.detail for v in forged)  # two bad headers, one CRC-broken batch
    assert any(v.invariant == "forwarded_unattested" for v in report.violations)
    assert not report.ok and report.summary.decisions >= 2
