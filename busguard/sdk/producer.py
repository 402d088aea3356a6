"""A signing producer: every record sent carries a receipt signed by the agent.

Why: each agent used to wrap its own producer, sign by hand and pick a key.
`SigningProducer` wraps an `AIOKafkaProducer` (anything with an async
`send_and_wait(topic, value=, key=, headers=, partition=)`), signs with the
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
    >>> p = SigningProducer(Wire(), Sender(hashlib.sha256(b"doc").digest()), legacy_receipts=True)
    >>> rec = asyncio.run(p.send("agents.handoffs", kind="handoff", task_id="t-1", receiver="executor", payload=b"{}"))
    >>> rec.receipt.task_id, p.last_sent is rec
    ('t-1', True)
"""

from __future__ import annotations

from typing import Any

from busguard.sdk.sender import Sender, SignedRecord


class SigningProducer:
    def __init__(self, producer: Any, sender: Sender, *, legacy_receipts: bool = False) -> None:
        if sender.session is None and not legacy_receipts:
            raise ValueError("sender: no session_path; a crash-safe session is required (or pass legacy_receipts=True)")
        self.producer = producer
        self.sender = sender
        self.key = sender.agent_id.encode()
        #: the receipt of the last record sent (its `receipt_id` is what the guard judges)
        self.last_sent: SignedRecord | None = None

    async def send(
        self,
        topic: str,
        *,
        kind: str,
        task_id: str,
        receiver: str,
        payload: bytes,
        partition: int | None = None,
        extra_headers: list[tuple[str, bytes]] | None = None,
    ) -> SignedRecord:
        """Sign and send one record, waiting for the broker's acknowledgment;
        returns what was sent (value, headers, receipt, receipt id)."""
        rec = self.sender.sign(kind=kind, task_id=task_id, receiver=receiver, payload=payload, extra_headers=extra_headers)
        await self.producer.send_and_wait(topic, value=rec.value, key=self.key, headers=rec.headers, partition=partition)
        self.last_sent = rec
        return rec
