"""A tiny admission harness: a registry, a store and a clock, no Kafka."""

from __future__ import annotations

import hashlib
import itertools
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from busguard.admission.batch import Input, admit_batch
from busguard.admission.types import AdmissionPolicy
from busguard.protocol.envelope import HEADER_SIGNATURE
from busguard.protocol.records import Coordinates, Decision
from busguard.protocol.identity import agent_id_for_key
from busguard.protocol.keys import KeyRegistry, KeyWindow
from busguard.protocol.signing import public_key_from_seed
from busguard.protocol.timestamps import parse_timestamp
from busguard.sdk.sender import Sender, SignedRecord
from busguard.state.store import StateStore
from busguard.state.memory import MemoryStore

NOW = parse_timestamp("2026-11-29T12:00:00.000Z")


def seed(name: str) -> bytes:
    return hashlib.sha256(b"busguard-test-key:" + name.encode()).digest()


def agent(name: str) -> str:
    return agent_id_for_key(public_key_from_seed(seed(name)))


def registry(*names: str, named: dict[str, tuple[KeyWindow, ...]] | None = None) -> KeyRegistry:
    from busguard.protocol.identity import canonical_principal

    agents = {canonical_principal(agent(n)): (KeyWindow(key_id=agent(n)[6:], public_key=public_key_from_seed(seed(n))),) for n in names}
    agents.update(named or {})
    return KeyRegistry(agents)


class Rec(NamedTuple):
    """What the guard's `prepare` reads of a consumer record (aiokafka's ConsumerRecord, in part)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]


class Harness:
    def __init__(
        self,
        *names: str,
        policy: AdmissionPolicy | None = None,
        store: StateStore | None = None,
        reg: KeyRegistry | None = None,
        now: int = NOW,
        store_created: int = NOW - 3_600_000,
    ) -> None:
        self.policy = policy or AdmissionPolicy()
        self.store: StateStore = store if store is not None else MemoryStore(created_at=store_created)
        self.registry = reg or registry(*(names or ("planner", "executor")))
        self.now = now
        self.offsets = itertools.count()
        self.topic = "agents.in"

    def feed_raw(self, items: Sequence[tuple[bytes | None, list[tuple[str, bytes]]]], offsets: Sequence[int] | None = None) -> list[Decision]:
        offs = list(offsets) if offsets is not None else [next(self.offsets) for _ in items]
        inputs = [Input(Coordinates(topic=self.topic, partition=0, offset=o), v, h) for (v, h), o in zip(items, offs, strict=True)]
        return admit_batch(inputs, store=self.store, registry=self.registry, now_ms=self.now, policy=self.policy)

    def feed(self, *records: SignedRecord, offset: int | None = None) -> list[Decision]:
        return self.feed_raw([(r.value, r.headers) for r in records], None if offset is None else [offset])

    def one(self, record: SignedRecord, offset: int | None = None) -> Decision:
        return self.feed(record, offset=offset)[0]


def forged(record: SignedRecord, donor: SignedRecord) -> tuple[bytes, list[tuple[str, bytes]]]:
    """`record` under `donor`'s signature: a valid signature by the same
    sender over another receipt, what a writer without the key can send."""
    sig = dict(donor.headers)[HEADER_SIGNATURE]
    return record.value, [(n, sig if n == HEADER_SIGNATURE else v) for n, v in record.headers]


def sender(name: str, now: int = NOW, **kwargs: object) -> Sender:
    return Sender(seed(name), clock_ms=lambda: now, **kwargs)  # type: ignore[arg-type]


def schema_1_file(path: Path, created_at_ms: int, decisions: Sequence[tuple[str, bytes, int]]) -> None:
    """A SQLite file as busguard's schema 1 wrote it: meta and one row per
    decision (key, body, expiry), for the upgrade tests."""
    con = sqlite3.connect(path)
    con.executescript(
        "CREATE TABLE meta(k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID;"
        "CREATE TABLE decisions(k TEXT PRIMARY KEY, body BLOB NOT NULL, exp INTEGER NOT NULL);"
        f"INSERT INTO meta VALUES('created_at_ms', '{created_at_ms}'), ('schema', '1');"
    )
    con.executemany("INSERT INTO decisions VALUES (?, ?, ?)", decisions)
    con.commit()
    con.close()
