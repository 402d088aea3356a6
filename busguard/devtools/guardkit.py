"""The guard-process kit: a deployment on fresh topics and real `busguard` processes.

For the project's integration tests and for a kind's or an agent's own: no
mocks, the guard runs as `python -m busguard.cli run` in its own process, so
`kill -9` is a real crash and SIGTERM a real drain. It needs a running broker
(`busguard.devtools.broker.EmbeddedBroker`). The child process sees the
caller's `sys.path`, so a kind importable by the test is importable by the
guard it starts.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from busguard.config import load_config
from busguard.devconfig import Topics, embedded_config
from busguard.devtools.broker import free_port
from busguard.protocol.attestation import verify_decision_record
from busguard.protocol.auditbatch import audit_records_of
from busguard.protocol.identity import agent_id_for_key, multikey_encode
from busguard.protocol.keyfile import Identity, read_key, write_key
from busguard.protocol.records import Decision
from busguard.protocol.signing import public_key_from_seed
from busguard.runtime.topics import create_topics
from busguard.sdk.sender import Sender, SignedRecord
from busguard.wiring import init_state


def identity(name: str) -> Identity:
    seed = hashlib.sha256(b"busguard-it:" + name.encode()).digest()
    pk = public_key_from_seed(seed)
    return Identity(seed=seed, public_key=pk, agent_id=agent_id_for_key(pk))


def sender(name: str, session: Path | None = None) -> Sender:
    return Sender(identity(name).seed, session_path=session)


@dataclass
class Setup:
    dir: Path
    bootstrap: str
    config: Path
    handoffs: str
    acks: str
    downstream_handoffs: str
    downstream_acks: str
    reconciliation: str
    dead_letter: str
    audit: str
    replies: str
    group: str
    guard_key: Path
    state_path: Path
    reconciler_key: Path

    @property
    def guard(self) -> Identity:
        return read_key(self.guard_key)

    @property
    def reconciler(self) -> Identity:
        return read_key(self.reconciler_key)

    @property
    def outputs(self) -> list[str]:
        return [self.downstream_handoffs, self.downstream_acks, self.reconciliation, self.dead_letter, self.audit]


async def make_setup(
    tmp: Path,
    bootstrap: str,
    *,
    agents: Iterable[str] = ("planner", "executor"),
    partitions: int = 4,
    max_records: int = 100,
    max_payload_bytes: int = 1_048_576,
    operators: Sequence[tuple[str, Identity]] = (),
    state: dict[str, object] | None = None,
    batch: dict[str, object] | None = None,
) -> Setup:
    """`state` adds to the [state] table, e.g. a PostgreSQL backend and DSN;
    `batch` to the [batch] table, e.g. `audit = "batch"`."""
    state_extra = state
    tag = uuid.uuid4().hex[:8]
    t = Topics.under(f"it.{tag}")
    await create_topics(bootstrap, t.all(), partitions=partitions)
    guard_key = tmp / "guard.key"
    write_key(guard_key, identity(f"guard-{tag}"))
    reconciler_key = tmp / "reconciler.key"
    write_key(reconciler_key, identity(f"reconciler-{tag}"))
    registry = "\n".join(f'[[agent]]\nid = "{identity(a).agent_id}"\n' for a in agents)
    (tmp / "keys.toml").write_text(registry)
    operator_list = "".join(f'[[operator]]\nname = "{name}"\npublic_key = "{multikey_encode(op.public_key)}"\n' for name, op in operators)
    if operator_list:
        (tmp / "operators.toml").write_text(operator_list)
    state_db = tmp / "state.db"
    config = tmp / "busguard.toml"
    config.write_text(
        embedded_config(
            bootstrap,
            group_id=f"guard-{tag}",
            topics=t,
            comment="Written by busguard.devtools.guardkit.",
            state={"path": str(state_db), "synchronous": "normal", "expire_interval_s": 5, **(state_extra or {})},
            keys={
                "guard_key": str(guard_key),
                "reconciler_key": str(reconciler_key),
                "create_reconciler_key": False,
                **({"operators": "operators.toml"} if operators else {}),
            },
            batch={"max_records": max_records, "max_payload_bytes": max_payload_bytes, "linger_ms": 20, **(batch or {})},
            log={"format": "json", "level": "info"},
            ops={"port": 0},
            reconcile={"group_id": f"reconcile-{tag}", "state_path": str(tmp / "reconcile.db")},
        )
    )
    # A new deployment on new topics and a new group: nothing to forget, so a
    # genesis store (`busguard state init`) that admits from its first record.
    # Tests of store loss delete it; `busguard run` then creates a fenced one.
    init_state(load_config(config), int(time.time() * 1000))
    return Setup(
        dir=tmp,
        bootstrap=bootstrap,
        config=config,
        handoffs=t.handoffs,
        acks=t.acks,
        downstream_handoffs=t.handoffs_admitted,
        downstream_acks=t.acks_admitted,
        reconciliation=t.reconciliation,
        dead_letter=t.dead_letter,
        audit=t.audit,
        replies=t.replies,
        group=f"guard-{tag}",
        guard_key=guard_key,
        state_path=state_db,
        reconciler_key=reconciler_key,
    )


class GuardProcess:
    """One `busguard <command>` process with its log captured to a file."""

    count = 0
    #: every process started and not yet reaped (`reap`)
    started: ClassVar[list[GuardProcess]] = []

    def __init__(
        self, setup: Setup, *, fault: str | None = None, command: str = "run", port: int | None = None, env: dict[str, str] | None = None
    ) -> None:
        GuardProcess.count += 1
        self.setup = setup
        self.port = port or free_port()
        self.log = setup.dir / f"{command}-{GuardProcess.count}.log"
        environ = {
            **os.environ,
            "BUSGUARD_OPS__PORT": str(self.port),
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
            **(env or {}),
        }
        environ.pop("BUSGUARD_FAULT", None)
        if fault:
            environ["BUSGUARD_FAULT"] = fault
        self._out = open(self.log, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "busguard.cli", command, "--config", str(setup.config)],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=environ,
        )
        GuardProcess.started.append(self)

    @classmethod
    def reap(cls) -> list[str]:
        """SIGKILL every started process still running: a test that failed
        before its own cleanup must not leave a guard consuming the next
        test's topics or holding a group's partitions. Returns their logs' names."""
        left = [g for g in cls.started if g.proc.poll() is None]
        cls.started.clear()
        for g in left:
            g.kill9()
        return [g.log.name for g in left]

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"process exited early ({self.proc.returncode}):\n{self.tail()}")
            if self.healthy():
                return
            time.sleep(0.1)
        raise AssertionError(f"not ready in {timeout}s:\n{self.tail()}")

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._out.close()

    def kill9(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.wait()

    def terminate(self, timeout: float = 60) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def tail(self, n: int = 40) -> str:
        if not self._out.closed:
            self._out.flush()
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
            return str(r.read().decode())

    def decided(self) -> float:
        """busguard_decisions_total summed over its labels (0 while the ops port is not up)."""
        try:
            text = self.metrics()
        except OSError:
            return 0.0
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("busguard_decisions_total{"))


async def produce(
    bootstrap: str, topic: str, records: Sequence[SignedRecord | tuple[bytes | None, list[tuple[str, bytes]]]], key: bytes | None = b"k"
) -> list[tuple[int, int]]:
    """Produce in order; returns (partition, offset) per record. One key => one partition => order kept."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = []
        for rec in records:
            value, headers = (rec.value, rec.headers) if isinstance(rec, SignedRecord) else rec
            futures.append(await producer.send(topic, value=value, key=key, headers=list(headers)))
        metas = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return [(m.partition, m.offset) for m in metas]


@dataclass
class Collected:
    by_topic: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))

    def __getitem__(self, topic: str) -> list[Any]:
        return self.by_topic[topic]


async def collect(
    bootstrap: str,
    topics: Sequence[str],
    until: Callable[[Collected], bool],
    timeout: float = 60,
    *,
    read_committed: bool = False,
) -> Collected:
    """Read topics from the beginning (no group) until `until(collected)` or
    time out; `read_committed` reads only committed transactions' records."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed" if read_committed else "read_uncommitted",
    )
    await consumer.start()
    try:
        tps = [TopicPartition(t, p) for t in topics for p in (consumer.partitions_for_topic(t) or await _partitions(consumer, t))]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got = Collected()
        deadline = time.monotonic() + timeout
        while not until(got):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; have { {t: len(v) for t, v in got.by_topic.items()} }")
            batch = await consumer.getmany(timeout_ms=200)
            for tp, recs in batch.items():
                got.by_topic[tp.topic].extend(recs)
        return got
    finally:
        await consumer.stop()


async def collect_all(bootstrap: str, topics: Sequence[str], quiet_s: float = 2.0, *, read_committed: bool = False) -> Collected:
    """Everything in `topics` once nothing new has arrived for `quiet_s`.

    (tansu's ListOffsets answers are not reliable, so end offsets cannot be
    used to know when a topic has been read to its end.)
    """
    state = {"n": -1, "since": time.monotonic()}

    def quiet(c: Collected) -> bool:
        n = sum(len(v) for v in c.by_topic.values())
        if n != state["n"]:
            state["n"], state["since"] = n, time.monotonic()
        return time.monotonic() - state["since"] >= quiet_s

    return await collect(bootstrap, topics, quiet, read_committed=read_committed)


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    for _ in range(50):
        await consumer._client.force_metadata_update()
        parts = consumer.partitions_for_topic(topic)
        if parts:
            return set(parts)
        await asyncio.sleep(0.1)
    raise AssertionError(f"topic {topic} has no partitions")


def header(record: Any, name: str) -> bytes | None:
    values = [v for k, v in record.headers if k == name]
    return values[0] if values else None


def audit_entries(setup: Setup, got: Collected) -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    """Every per-record audit record collected so far, a batch audit record
    (docs/protocol.md 12.7) as its entries; value and headers each."""
    return [(v or b"", h) for r in got[setup.audit] for v, h in audit_records_of(r.value, r.headers)]


def all_decided(setup: Setup, got: Collected, total: int) -> bool:
    """Every input has its audit record and its primary output."""
    primary = sum(len(got[t]) for t in (setup.downstream_handoffs, setup.downstream_acks, setup.reconciliation, setup.dead_letter))
    return primary >= total and len(audit_entries(setup, got)) >= total


def distinct_sources(setup: Setup, got: Collected) -> int:
    """How many distinct inputs (topic, partition, offset) the audit records collected so far decide."""
    decided = (msgspec.json.decode(v, type=Decision) for v, _ in audit_entries(setup, got))
    return len({(d.source.topic, d.source.partition, d.source.offset) for d in decided})


def decisions_by_source(setup: Setup, got: Collected) -> dict[tuple[int, int], set[bytes]]:
    """Each input's (partition, offset) -> the distinct audit records decided
    for it, every one verified under the guard's key. Re-emissions are
    byte-identical, so one record per input is one decision per input."""
    decided: dict[tuple[int, int], set[bytes]] = defaultdict(set)
    for value, headers in audit_entries(setup, got):
        verify_decision_record(value, headers, setup.guard.public_key)
        d = msgspec.json.decode(value, type=Decision)
        decided[(d.source.partition, d.source.offset)].add(value)
    return decided


def assignment_events(p: GuardProcess) -> list[tuple[float, str, list[str]]]:
    """(unix time, "assigned"/"revoked", partitions) in the order the guard
    logged them (busguard.runtime.loop logs every assignment and revocation)."""
    p.tail(1)  # flush
    out = []
    for line in p.log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            e = json.loads(line)
            kind = "assigned" if e["event"] == "partitions assigned" else "revoked" if e["event"].startswith("partitions revoked") else None
            if kind is not None:
                out.append((datetime.fromisoformat(e["timestamp"]).timestamp(), kind, list(e["partitions"])))
    return out


def held(p: GuardProcess) -> list[str]:
    """The partitions of the guard's last assignment ([] while it has none)."""
    events = assignment_events(p)
    return events[-1][2] if events and events[-1][1] == "assigned" else []


async def until(pred: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)
