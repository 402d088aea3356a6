"""A signing producer: every record sent carries a receipt signed by the agent.

Why: each agent used to wrap its own producer, sign by hand and pick a key.
`SigningProducer` wraps an `AIOKafkaProducer` (anything with async
`send_and_wait(topic, value=, key=, headers=, partition=)` and, for
`submit`, `send` with the same arguments), signs with the
agent's `Sender`, and sets the record key to the sender's agent id
(docs/protocol.md 2: one sender, one partition, in order). It refuses a
`Sender` without a session unless `legacy_receipts=True`, because a
nonce-only resend after a crash is escalated (seed 000), while a session
resend is a provable retransmission.

    >>> import asyncio, hashlib
    >>> from busguard.sdk.sender import Sender
    >>> class Wire:
    ...     sent = []
    ...     async def send_and_wait(self, topic, *, value, key, headers, partition=None):
    ...         self.sent.append((topic, key))
    ...     async def send(self, topic, *, value, key, headers, partition=None):
    ...         self.sent.append((topic, key))
    ...         return asyncio.sleep(0)  # aiokafka returns the delivery future
    >>> p = SigningProducer(Wire(), Sender(hashlib.sha256(b"doc").digest()), legacy_receipts=True)
    >>> rec = asyncio.run(p.send("agents.handoffs", kind="handoff", task_id="t-1", receiver="executor", payload=b"{}"))
    >>> rec.receipt.task_id, p.last_sent is rec
    ('t-1', True)
    >>> async def burst():
    ...     acks = [(await p.submit("agents.handoffs", kind="handoff", task_id=t, receiver="executor", payload=b"{}"))[1] for t in ("t-2", "t-3")]
    ...     await asyncio.gather(*acks)
    >>> asyncio.run(burst()); len(Wire.sent)
    3
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, NotRequired, TypedDict, Unpack

from busguard.sdk.sender import Sender, SignedRecord


class Record(TypedDict):
    """What `send` and `submit` take besides the topic."""

    kind: str
    task_id: str
    receiver: str
    payload: bytes
    partition: NotRequired[int | None]
    extra_headers: NotRequired[list[tuple[str, bytes]] | None]


class SigningProducer:
    def __init__(self, producer: Any, sender: Sender, *, legacy_receipts: bool = False) -> None:
        if sender.session is None and not legacy_receipts:
            raise ValueError("sender: no session_path; a crash-safe session is required (or pass legacy_receipts=True)")
        self.producer = producer
        self.sender = sender
        self.key = sender.agent_id.encode()
        #: the receipt of the last record signed to send (its `receipt_id` is what the guard judges)
        self.last_sent: SignedRecord | None = None

    async def send(self, topic: str, **record: Unpack[Record]) -> SignedRecord:
        """Sign and send one record, waiting for the broker's acknowledgment;
        returns what was sent (value, headers, receipt, receipt id)."""
        rec, partition = self._sign(record)
        await self.producer.send_and_wait(topic, value=rec.value, key=self.key, headers=rec.headers, partition=partition)
        return rec

    async def submit(self, topic: str, **record: Unpack[Record]) -> tuple[SignedRecord, Awaitable[Any]]:
        """Sign one record and hand it to the producer's current batch
        without waiting: returns what was sent and the broker's
        acknowledgment to await (aiokafka's `send`), so a burst of handoffs
        shares produce requests."""
        rec, partition = self._sign(record)
        ack = await self.producer.send(topic, value=rec.value, key=self.key, headers=rec.headers, partition=partition)
        return rec, ack

    def _sign(self, record: Record) -> tuple[SignedRecord, int | None]:
        rec = self.sender.sign(
            kind=record["kind"],
            task_id=record["task_id"],
            receiver=record["receiver"],
            payload=record["payload"],
            extra_headers=record.get("extra_headers"),
        )
        self.last_sent = rec
        return rec, record.get("partition")
