"""For agents downstream of busguard: accept only what busguard admitted.

    heads = HeadCache()                               # once per consumer
    admitted = open_admitted(record.value, record.headers, guard_public_key, my_agent_id, heads=heads)
    if admitted.decision_id in already_done: skip   # re-emissions share the id
    work(admitted.receipt.task_id, admitted.payload)

Both seals are accepted: a per-record `busguard-seal`, and a batch seal (a
signed tree head and this record's inclusion proof, docs/protocol.md 12.6).
With a `HeadCache` the head's signature is checked once per batch and each
record costs only its proof (a few SHA-256 hashes); without one, every
record checks the head's signature.

The guard's public key comes from the operator (e.g. `busguard keygen`'s
output for the guard key); never from the record itself. `my_agent_id` is the
opener's own id: a receipt addressed to anyone else is refused, so a handoff
admitted for one agent cannot be redirected to another.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from busguard.protocol.attestation import Attestation, HeadCache, verify_admitted
from busguard.protocol.envelope import HEADER_RECEIPT
from busguard.protocol.receipt import Receipt, decode_receipt

__all__ = ["Admitted", "HeadCache", "open_admitted"]


class Admitted(msgspec.Struct, frozen=True, kw_only=True):
    decision_id: str
    attestation: Attestation
    receipt: Receipt
    payload: bytes


def open_admitted(
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]],
    guard_public_key: bytes,
    receiver: str | None,
    *,
    any_receiver: bool = False,
    heads: HeadCache | None = None,
) -> Admitted:
    """Verify busguard's attestation on a forwarded record, and that its
    receipt is addressed to `receiver` (your agent id; `tulpa:`/`ink:`
    spellings of one key are the same receiver), and return the receipt it
    admitted. Raises AttestationError (a ValueError) otherwise.
    `receiver=None, any_receiver=True` opts out of the receiver check.
    `heads`: verified tree heads to reuse (see the module docstring)."""
    payload = value if value is not None else b""
    att = verify_admitted(payload, list(headers), guard_public_key, receiver, any_receiver=any_receiver, heads=heads)
    raw = next(v for k, v in headers if k == HEADER_RECEIPT)
    return Admitted(decision_id=att.decision_id, attestation=att, receipt=decode_receipt(raw), payload=payload)
