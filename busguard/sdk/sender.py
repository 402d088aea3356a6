"""Build and sign receipts the way docs/protocol.md specifies.

`Sender.sign()` returns the Kafka value and headers to produce; the payload
bytes are never touched, and the receipt is signed over the exact bytes put
in the header. With a `session_path` the sender stamps `session_id` and
`sequence` from a SessionAllocator, so a crash-recovery resend is
distinguishable from a replay; without one it emits legacy nonce-only
receipts (which busguard escalates when ambiguous).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from busguard.protocol.envelope import HEADER_RECEIPT, HEADER_SIGNATURE, b64url_encode
from busguard.protocol.identity import agent_id_for_key
from busguard.protocol.receipt import RECEIPT_VERSION, Receipt, encode_receipt, payload_hash, receipt_id, signing_input
from busguard.protocol.signing import Signer
from busguard.protocol.timestamps import format_timestamp
from busguard.sdk.session import SessionAllocator


class SignedRecord(msgspec.Struct, frozen=True, kw_only=True):
    value: bytes
    headers: list[tuple[str, bytes]]
    receipt: Receipt
    receipt_bytes: bytes
    receipt_id: str


def new_nonce() -> str:
    """128 random bits, base64url: INK's recommended minimum."""
    return secrets.token_urlsafe(16)


class Sender:
    def __init__(
        self,
        seed: bytes,
        *,
        agent_id: str | None = None,
        key_id: str | None = None,
        session_path: str | Path | None = None,
        reserve_block: int = 64,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self._signer = Signer(seed)
        self.public_key = self._signer.public_key
        self.agent_id = agent_id if agent_id is not None else agent_id_for_key(self.public_key)
        self.key_id = key_id
        self.session = SessionAllocator(session_path, reserve_block) if session_path is not None else None
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)

    def sign(
        self,
        *,
        kind: str,
        task_id: str,
        receiver: str,
        payload: bytes,
        nonce: str | None = None,
        issued_at_ms: int | None = None,
        extra_headers: list[tuple[str, bytes]] | None = None,
    ) -> SignedRecord:
        session_id = sequence = None
        if self.session is not None:
            session_id, sequence = self.session.session_id, self.session.next()
        receipt = Receipt(
            v=RECEIPT_VERSION,
            kind=kind,
            task_id=task_id,
            sender=self.agent_id,
            receiver=receiver,
            payload_hash=payload_hash(payload),
            nonce=nonce if nonce is not None else new_nonce(),
            issued_at=format_timestamp(issued_at_ms if issued_at_ms is not None else self._clock_ms()),
            session_id=session_id,
            sequence=sequence,
            key_id=self.key_id,
        )
        return self.sign_receipt(receipt, payload, extra_headers)

    def sign_receipt(self, receipt: Receipt, payload: bytes, extra_headers: list[tuple[str, bytes]] | None = None) -> SignedRecord:
        """Sign an already-built receipt (e.g. one re-derived from a journal)."""
        raw = encode_receipt(receipt)
        signature = self._signer.sign(signing_input(raw))
        headers = [(HEADER_RECEIPT, raw), (HEADER_SIGNATURE, b64url_encode(signature).encode("ascii"))]
        return SignedRecord(
            value=payload,
            headers=headers + list(extra_headers or []),
            receipt=receipt,
            receipt_bytes=raw,
            receipt_id=receipt_id(raw),
        )
