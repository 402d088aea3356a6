"""Records written by clients other than aiokafka are decided as aiokafka's are.

On Apache Kafka (the session fixture ``kafka``), one ``busguard run`` guard
decides the same signed workload (test_guard_crash.workload: admitted, exact
duplicates, retransmissions, forged signatures, ambiguous legacy retries)
written to its own partition of the input topic by each of:

- aiokafka (the twin every other producer is compared with);
- the Java client (kafka-clients, the broker's own jars) with each codec:
  none, gzip, snappy, lz4, zstd (tests/integration/java/ForeignProducer.java,
  compiled here with javac);
- librdkafka (the confluent-kafka package) with the same five codecs.

Each producer signs with its own agents, so no producer's records replay
another's. The broker's own log segments say which codec and how many records
each batch really had, so a client that silently fell back to no compression
or to one record per batch would fail here. What was measured is in
docs/notes-broker.md, "Apache Kafka", "Foreign producers".
"""

from __future__ import annotations

import asyncio
import base64
import shutil
import struct
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import KafkaError, Message, Producer

from busguard.devtools.guardkit import Collected, GuardProcess, Setup, audit_entries, collect, make_setup
from busguard.devtools.kafka import ApacheKafka, ensure_libs, require_java
from busguard.protocol.records import Decision
from busguard.sdk.sender import SignedRecord

from .test_apache_kafka import ON_KAFKA
from .test_guard_crash import check_exactly_once, workload

pytestmark = pytest.mark.integration

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
# Record batch v2 attributes, bits 0-2 (docs: Kafka protocol, "Record Batch").
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
LINGER_MS = 50  # long enough that consecutive records share a batch
N = 30  # signed handoffs per producer; the workload adds its duplicates, retries and forgeries
XERIAL = b"\x82SNAPPY\x00"  # snappy-java's stream header (the xerial framing)
JAVA_SOURCE = Path(__file__).parent / "java" / "ForeignProducer.java"


@dataclass(frozen=True)
class Writer:
    label: str  # "aiokafka", "java-<codec>", "rdkafka-<codec>"
    client: str
    codec: str
    partition: int


WRITERS = [Writer("aiokafka", "aiokafka", "none", 0)] + [
    Writer(f"{client}-{codec}", client, codec, 1 + i + 5 * j)
    for j, client in enumerate(["java", "rdkafka"])
    for i, codec in enumerate(CODECS)
]


@dataclass(frozen=True)
class Batch:
    """One record batch as the broker stored it (its on-disk log segment)."""

    base_offset: int
    magic: int
    codec: int
    records: int
    producer_id: int
    head: bytes  # the first bytes of the (compressed) records section


def _batches(segment: Path) -> list[Batch]:
    """The v2 record batches of a log segment: the wire format, stored as received."""
    data = segment.read_bytes()
    out: list[Batch] = []
    at = 0
    while at + 61 <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, at)
        magic = data[at + 16]
        (attributes,) = struct.unpack_from(">h", data, at + 21)
        (producer_id,) = struct.unpack_from(">q", data, at + 43)
        (records,) = struct.unpack_from(">i", data, at + 57)
        out.append(Batch(base_offset, magic, attributes & 0x7, records, producer_id, data[at + 61 : at + 61 + 8]))
        at += 12 + length
    return out


def stored_batches(kafka: ApacheKafka, topic: str, partition: int) -> list[Batch]:
    assert kafka.log_dir is not None
    (segment,) = sorted((kafka.log_dir / "node-0" / "data" / f"{topic}-{partition}").glob("*.log"))
    return _batches(segment)


@pytest.fixture(scope="module")
def java_producer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The command that runs ForeignProducer, compiled now against the broker's jars."""
    java, libs = require_java(), ensure_libs()
    javac = shutil.which("javac")
    assert javac is not None, "javac (a JDK 17+) is needed to build tests/integration/java/ForeignProducer.java"
    out = tmp_path_factory.mktemp("java")
    subprocess.run([javac, "-d", str(out), "-cp", f"{libs}/*", str(JAVA_SOURCE)], check=True, capture_output=True, timeout=120)
    yield [java, "-Xmx128m", "-cp", f"{out}:{libs}/*", "ForeignProducer"]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _line(rec: SignedRecord, key: bytes) -> str:
    return " ".join([_b64(key), _b64(rec.value), *(f"{_b64(k.encode())}:{_b64(v)}" for k, v in rec.headers)])


def _java(
    cmd: list[str], bootstrap: str, topic: str, jobs: dict[Writer, list[SignedRecord]], key: bytes, tmp: Path
) -> dict[Writer, list[tuple[int, int]]]:
    args = []
    for w, records in jobs.items():
        file = tmp / f"{w.label}.lines"
        file.write_text("".join(_line(r, key) + "\n" for r in records), encoding="ascii")
        args.append(f"{w.codec}:{w.partition}:{file}")
    done = subprocess.run([*cmd, bootstrap, topic, str(LINGER_MS), *args], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = [line.split() for line in done.stdout.splitlines()]
    return {w: [(int(p), int(o)) for codec, p, o in printed if codec == w.codec] for w in jobs}


def _rdkafka(bootstrap: str, topic: str, w: Writer, records: Sequence[SignedRecord], key: bytes) -> list[tuple[int, int]]:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": w.codec,
            "linger.ms": LINGER_MS,
            "acks": "all",
            "enable.idempotence": True,
        }
    )
    coords: list[tuple[int, int]] = []
    failures: list[str] = []

    def delivered(err: KafkaError | None, msg: Message[bytes, bytes]) -> None:
        partition, offset = msg.partition(), msg.offset()
        if err is not None or partition is None or offset is None:
            failures.append(f"{w.label}: record {len(coords) + len(failures)}: {err}, partition {partition}, offset {offset}")
        else:
            coords.append((partition, offset))

    for rec in records:  # one partition, one producer: delivery reports come in send order
        producer.produce(topic, value=rec.value, key=key, partition=w.partition, headers=list(rec.headers), on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0, f"{w.label}: records still undelivered"
    assert not failures, failures
    return coords


async def _aiokafka(bootstrap: str, topic: str, w: Writer, records: Sequence[SignedRecord], key: bytes) -> list[tuple[int, int]]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=LINGER_MS)
    await producer.start()
    try:
        futures = [await producer.send(topic, r.value, key=key, partition=w.partition, headers=list(r.headers)) for r in records]
        metas = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return [(m.partition, m.offset) for m in metas]


def _settled(s: Setup, got: Collected, total: int) -> bool:
    """Every input offset read back and decided, a span decision (`undecodable_batch`,
    docs/protocol.md 2.1) covering each offset of its span, and every admitted
    decision's forward read: a batch the guard could not read then fails the checks
    after the wait, with its reason, instead of the wait."""
    covered: set[tuple[int, int]] = set()
    admitted: set[str] = set()
    for value, _ in audit_entries(s, got):
        d = msgspec.json.decode(value, type=Decision)
        last = d.source.offset if d.last_offset is None else d.last_offset
        covered.update((d.source.partition, o) for o in range(d.source.offset, last + 1))
        if d.reason == "admitted":
            admitted.add(d.decision_id)
    return len(covered) == total and len(got[s.handoffs]) == total and len(got[s.downstream_handoffs]) >= len(admitted)


def _decisions(s: Setup, got: Collected, partition: int) -> list[Decision]:
    """The partition's decisions in input order, one per input (re-emissions are byte-identical)."""
    unique = {v: msgspec.json.decode(v, type=Decision) for v, _ in audit_entries(s, got)}
    mine = [d for d in unique.values() if d.source.topic == s.handoffs and d.source.partition == partition]
    return sorted(mine, key=lambda d: d.source.offset)


async def test_java_and_librdkafka_records_with_every_codec_are_decided_as_aiokafkas(
    kafka: ApacheKafka, tmp_path: Path, java_producer: list[str]
) -> None:
    agents = ["executor", *(f"{role}-{w.label}" for w in WRITERS for role in ("planner", "legacy"))]
    s = await make_setup(tmp_path, kafka.bootstrap, agents=agents, partitions=len(WRITERS))
    guard = GuardProcess(s, env=ON_KAFKA)
    try:
        guard.wait_ready()
        loads = {w: workload(tmp_path, name=f"planner-{w.label}", legacy_name=f"legacy-{w.label}", n=N) for w in WRITERS}
        key = b"planner"
        java_jobs = {w: loads[w][0] for w in WRITERS if w.client == "java"}
        rdkafka = [w for w in WRITERS if w.client == "rdkafka"]
        by_aiokafka, by_java, by_rdkafka = await asyncio.gather(
            _aiokafka(s.bootstrap, s.handoffs, WRITERS[0], loads[WRITERS[0]][0], key),
            asyncio.to_thread(_java, java_producer, s.bootstrap, s.handoffs, java_jobs, key, tmp_path),
            asyncio.gather(*(asyncio.to_thread(_rdkafka, s.bootstrap, s.handoffs, w, loads[w][0], key) for w in rdkafka)),
        )
        coords = {WRITERS[0]: by_aiokafka, **by_java, **dict(zip(rdkafka, by_rdkafka, strict=True))}
        for w in WRITERS:  # each producer's records, in order, on its own partition from offset 0
            assert coords[w] == [(w.partition, o) for o in range(len(loads[w][0]))], w.label

        total = sum(len(records) for records, _ in loads.values())
        got = await collect(
            s.bootstrap,
            [*s.outputs, s.handoffs],
            lambda c: _settled(s, c, total),
            timeout=120,
        )
    finally:
        assert guard.terminate() == 0, guard.tail()

    twin = _decisions(s, got, WRITERS[0].partition)
    for w in WRITERS:
        records, expected = loads[w]
        decided = _decisions(s, got, w.partition)
        # the same record decided the same way as its aiokafka twin, matched by receipt (not by offset)
        assert [d.reason for d in decided] == expected, w.label
        assert [d.receipt for d in decided] == [r.receipt_bytes for r in records], w.label
        assert [(d.reason, d.outcome) for d in decided] == [(d.reason, d.outcome) for d in twin], w.label
        # the input as the guard's consumer read it: key, value and headers byte for byte as sent
        read = sorted((r for r in got[s.handoffs] if r.partition == w.partition), key=lambda r: r.offset)
        assert [(r.key, r.value, list(r.headers)) for r in read] == [(key, r.value, list(r.headers)) for r in records], w.label
        # the broker stored what the client was asked for: its codec, several records per batch
        batches = stored_batches(kafka, s.handoffs, w.partition)
        assert sum(b.records for b in batches) == len(records), (w.label, batches)
        assert {(b.magic, b.codec) for b in batches} == {(2, CODEC_IDS[w.codec])}, (w.label, batches)
        assert max(b.records for b in batches) > 1, (w.label, batches)
        assert all(b.producer_id >= 0 for b in batches), (w.label, batches)  # every client was idempotent
        if w.codec == "snappy":  # both framings reach the guard: the Java client's xerial stream, librdkafka's raw block
            assert all(b.head.startswith(XERIAL) == (w.client == "java") for b in batches), (w.label, batches)

    # over all of them: one decision per input, each its reason; every forward verifies under the guard's key
    check_exactly_once(s, got, [c for w in WRITERS for c in coords[w]], [reason for w in WRITERS for reason in loads[w][1]])
