"""What the three agents of the seed 000 example share.

* `Pipeline`: everything an agent needs to know about its deployment, kept in
  one JSON file (`pipeline.json`) that `create_pipeline` writes: the broker,
  the agents' ids, which topic each agent reads and writes, and - when
  busguard sits in the middle - the guard's public key and config.
* Receipt checks, the two ways a receiving agent can trust a record:
  `check_direct` (no busguard: verify the sender's signature yourself) and
  `check_admitted` (behind busguard: verify the guard's attestation with
  `verify_admitted`).
* Small Kafka helpers (one producer, a reader from the beginning of a topic).

Topics, with busguard::

    planner --handoffs--> busguard --handoffs.admitted--> executor
    planner <--acks.admitted-- busguard <--acks-------- executor
                               + reconciliation, dead-letter, audit, replies

and without it (`guarded=False`), a plain pass-through: the executor reads
`handoffs` and the planner reads `acks` directly.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

try:
    import busguard  # noqa: F401
except ModuleNotFoundError:  # a checkout without `pip install -e .`: use the repository's copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from busguard.config import load_config
from busguard.devconfig import Topics, embedded_config
from busguard.devtools.broker import free_port
from busguard.protocol.attestation import HEADER_DECISION_ID, AttestationError, verify_admitted
from busguard.protocol.envelope import HEADER_RECEIPT, open_envelope
from busguard.protocol.identity import multikey_decode, multikey_encode, public_key_from_agent_id
from busguard.protocol.keyfile import Identity, new_identity, read_key, write_key
from busguard.protocol.receipt import Receipt, ReceiptError, decode_receipt, payload_hash, receipt_id, signing_input
from busguard.protocol.signing import verify_signature
from busguard.runtime.topics import create_topics
from busguard.wiring import init_state

Receipts = Literal["legacy", "session"]
PIPELINE_FILE = "pipeline.json"


class Pipeline(msgspec.Struct, frozen=True, kw_only=True):
    dir: str
    bootstrap: str
    guarded: bool
    planner: str  # agent ids (self-certifying tulpa: ids: the id carries the public key)
    executor: str
    handoffs: str  # the planner produces here
    acks: str  # the executor produces here
    executor_inbox: str  # `handoffs` itself, or busguard's admitted handoffs
    planner_inbox: str  # `acks` itself, or busguard's admitted acks
    guard_public_key: str | None = None  # multikey z6Mk...; None without busguard
    busguard_config: str | None = None
    guard_port: int | None = None  # the guard's [ops] port: GET /healthz is 200 once it is ready
    reconcile_port: int | None = None

    @property
    def path(self) -> Path:
        return Path(self.dir)

    def key_file(self, agent: str) -> Path:
        return self.path / f"{agent}.key"

    def guard_key(self) -> bytes:
        if self.guard_public_key is None:
            raise ValueError("this pipeline has no busguard")
        return multikey_decode(self.guard_public_key)


def load_pipeline(path: str | Path) -> Pipeline:
    p = Path(path)
    if p.is_dir():
        p = p / PIPELINE_FILE
    return msgspec.json.decode(p.read_bytes(), type=Pipeline)


async def create_pipeline(directory: Path, bootstrap: str, *, guarded: bool) -> Pipeline:
    """Keys, topics, and (guarded) busguard's config and key registry, in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    tag = f"seed000.{uuid.uuid4().hex[:8]}"
    t = Topics.under(tag)
    ids = {}
    for agent in ("planner", "executor", *(("guard",) if guarded else ())):
        ident = new_identity()
        write_key(directory / f"{agent}.key", ident)
        ids[agent] = ident
    pipeline = Pipeline(
        dir=str(directory),
        bootstrap=bootstrap,
        guarded=guarded,
        planner=ids["planner"].agent_id,
        executor=ids["executor"].agent_id,
        handoffs=t.handoffs,
        acks=t.acks,
        executor_inbox=t.handoffs,  # unguarded: agents read each other's topics directly
        planner_inbox=t.acks,
    )
    if not guarded:
        await create_topics(bootstrap, [t.handoffs, t.acks], partitions=1)
    else:
        await create_topics(bootstrap, t.all(), partitions=1)
        guard_port, reconcile_port = free_port(), free_port()
        (directory / "keys.toml").write_text("".join(f'[[agent]]\nid = "{ids[a].agent_id}"\n\n' for a in ("planner", "executor")))
        config = directory / "busguard.toml"
        config.write_text(_busguard_toml(bootstrap, tag, t, guard_port))
        # `busguard state init`: new topics, a new group, no history, so the
        # guard admits from its first record instead of warming.
        init_state(load_config(config), time.time_ns() // 1_000_000)
        pipeline = msgspec.structs.replace(
            pipeline,
            executor_inbox=t.handoffs_admitted,
            planner_inbox=t.acks_admitted,
            guard_public_key=multikey_encode(ids["guard"].public_key),
            busguard_config=str(config),
            guard_port=guard_port,
            reconcile_port=reconcile_port,
        )
    (directory / PIPELINE_FILE).write_bytes(msgspec.json.format(msgspec.json.encode(pipeline), indent=2) + b"\n")
    return pipeline


def _busguard_toml(bootstrap: str, tag: str, t: Topics, port: int) -> str:
    return embedded_config(
        bootstrap,
        group_id=f"{tag}.guard",
        topics=t,
        comment="busguard for the seed 000 example (written by examples/seed000/common.py); GET :<ops.port>/healthz is 200 once the guard is ready.",
        batch={"linger_ms": 20},
        log={"format": "json"},
        ops={"port": port},
        reconcile={"group_id": f"{tag}.reconcile", "state_path": "reconcile.db"},
    )


def identity(pipeline: Pipeline, agent: str) -> Identity:
    return read_key(pipeline.key_file(agent))


# -- what a receiving agent checks ---------------------------------------------


class Refused(Exception):
    """A record this agent will not act on, with a reason code."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}{': ' + detail if detail else ''}")
        self.reason = reason


class Inbound(msgspec.Struct, frozen=True, kw_only=True):
    receipt: Receipt
    receipt_id: str
    payload: bytes
    decision_id: str | None  # busguard's decision id (None without busguard)


def check_direct(value: bytes | None, headers: Sequence[tuple[str, bytes]]) -> Inbound:
    """No busguard: parse the receipt and verify the sender's own signature."""
    try:
        env = open_envelope(value, headers)
    except ReceiptError as exc:
        raise Refused(exc.reason, str(exc)) from None
    key = public_key_from_agent_id(env.receipt.sender)
    if key is None:
        raise Refused("unknown_sender", env.receipt.sender)
    if not verify_signature(key, signing_input(env.receipt_bytes), env.signature):
        raise Refused("bad_signature")
    if payload_hash(env.payload) != env.receipt.payload_hash:
        raise Refused("payload_hash_mismatch")
    return Inbound(receipt=env.receipt, receipt_id=env.receipt_id, payload=env.payload, decision_id=None)


def check_admitted(value: bytes | None, headers: Sequence[tuple[str, bytes]], guard_public_key: bytes, receiver: str) -> Inbound:
    """Behind busguard: the guard's sealed attestation says it admitted exactly
    this record, and its receipt is addressed to `receiver` (the reader)."""
    payload = value if value is not None else b""
    try:
        att = verify_admitted(payload, headers, guard_public_key, receiver)
    except AttestationError as exc:
        raise Refused("not_admitted", str(exc)) from None
    raw = next(v for k, v in headers if k == HEADER_RECEIPT)  # verify_admitted checked there is exactly one
    try:
        receipt = decode_receipt(raw)
    except ReceiptError as exc:
        raise Refused(exc.reason, str(exc)) from None
    return Inbound(receipt=receipt, receipt_id=receipt_id(raw), payload=payload, decision_id=att.decision_id)


def check(pipeline: Pipeline, value: bytes | None, headers: Sequence[tuple[str, bytes]], receiver: str) -> Inbound:
    """The check that fits this deployment, for the agent `receiver`."""
    return check_admitted(value, headers, pipeline.guard_key(), receiver) if pipeline.guarded else check_direct(value, headers)


# -- Kafka ---------------------------------------------------------------------


def headers_of(record: Any) -> list[tuple[str, bytes]]:
    return [(k, v if v is not None else b"") for k, v in record.headers]


def decision_id_of(record: Any) -> str | None:
    ids = [v for k, v in record.headers if k == HEADER_DECISION_ID]
    return ids[0].decode() if ids else None


async def start_producer(bootstrap: str) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, acks="all")
    await producer.start()
    return producer


async def start_reader(bootstrap: str, *topics: str) -> AIOKafkaConsumer:
    """Reads `topics` from their beginning; no consumer group, nothing committed."""
    consumer = AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    return consumer


async def read_all(bootstrap: str, topics: Sequence[str], quiet_s: float = 2.0) -> list[Any]:
    """Every record in `topics` once nothing new has arrived for `quiet_s`.

    (The end of a topic is found by silence: the embedded broker's ListOffsets
    answers are not reliable.)
    """
    consumer = await start_reader(bootstrap, *topics)
    records: list[Any] = []
    try:
        last = time.monotonic()
        while time.monotonic() - last < quiet_s:
            batch = await consumer.getmany(timeout_ms=200)
            for recs in batch.values():
                records.extend(recs)
                last = time.monotonic()
    finally:
        await consumer.stop()
    return records


# -- output --------------------------------------------------------------------


def say(agent: str, message: str) -> None:
    print(f"{agent}: {message}", flush=True)


def short(text: str | None, n: int = 12) -> str:
    return text[:n] if text else "-"


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def die(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(2)
