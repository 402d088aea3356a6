"""From a raw Kafka record to a parsed, not yet verified, signed receipt.

A sender's record is: value = the task payload (opaque bytes), plus exactly
one `busguard-receipt` header (the receipt JSON bytes that were signed) and
exactly one `busguard-signature` header (the 64-byte Ed25519 signature,
unpadded base64url, 86 characters). Anything else in the headers is carried
along untouched. Every way this can be wrong maps to one reason code, so a bad
record is dead-lettered with an explanation instead of stopping the loop.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from typing import Final

import msgspec

from busguard.protocol.reasons import Reason
from busguard.protocol.receipt import Receipt, ReceiptError, decode_receipt, receipt_id

HEADER_RECEIPT: Final = "busguard-receipt"
HEADER_SIGNATURE: Final = "busguard-signature"
#: Only busguard writes headers with this prefix (besides the two above); an
#: input carrying one could smuggle a fake attestation downstream.
RESERVED_PREFIX: Final = "busguard-"
DEFAULT_MAX_PAYLOAD_BYTES: Final = 1_048_576

_SIG_LAST_CHARS = frozenset(b"AQgw")
_URLSAFE_TO_STD = bytes.maketrans(b"-_", b"+/")
_SIG_SHAPE = f"{HEADER_SIGNATURE} must be 86 characters of canonical unpadded base64url (64 bytes)"
_NOT_BASE64URL = b"+/="  # in the standard alphabet, not in ours: deleted, so the length check catches them
_B64URL_ANY = re.compile(rb"[A-Za-z0-9_-]*")


class Envelope(msgspec.Struct, frozen=True, gc=False):  # positional on the hot path: keep the order
    receipt: Receipt
    receipt_bytes: bytes
    signature: bytes
    receipt_id: str
    payload: bytes


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode_strict(text: bytes | str, expected_len: int | None = None) -> bytes:
    """Unpadded base64url with canonical trailing bits; ValueError otherwise.

    Lenient decoders silently skip junk characters, which would let two
    different header values carry one signature; we accept one spelling only.
    """
    raw = text.encode("ascii") if isinstance(text, str) else text
    if _B64URL_ANY.fullmatch(raw) is None or len(raw) % 4 == 1:
        raise ValueError("not unpadded base64url")
    try:
        data = base64.urlsafe_b64decode(raw + b"=" * (-len(raw) % 4))
    except binascii.Error as exc:
        raise ValueError(f"not base64url: {exc}") from None
    if base64.urlsafe_b64encode(data).rstrip(b"=") != raw:
        raise ValueError("non-canonical base64url (stray trailing bits)")
    if expected_len is not None and len(data) != expected_len:
        raise ValueError(f"decodes to {len(data)} bytes, expected {expected_len}")
    return data


def _our_headers(headers: Sequence[tuple[str, bytes]]) -> tuple[bytes, bytes]:
    """Exactly one receipt and one signature header; a second copy of either is
    refused, since a reader could pick a different one than we verified."""
    receipt = signature = None
    for key, value in headers:
        if key == HEADER_RECEIPT:
            if receipt is not None:
                raise ReceiptError(Reason.DUPLICATE_HEADER, f"header {HEADER_RECEIPT!r} appears more than once")
            receipt = value or b""
        elif key == HEADER_SIGNATURE:
            if signature is not None:
                raise ReceiptError(Reason.DUPLICATE_HEADER, f"header {HEADER_SIGNATURE!r} appears more than once")
            signature = value or b""
        elif key[:9].lower() == RESERVED_PREFIX:  # any case: some clients fold header names
            # the name is the sender's and unbounded: cut, so the decision stays bounded by the receipt
            raise ReceiptError(Reason.RESERVED_HEADER, f"header {key[:128]!r} is reserved for busguard's own output")
    if receipt is None:
        raise ReceiptError(Reason.MISSING_HEADER, f"header {HEADER_RECEIPT!r} is required")
    if signature is None:
        raise ReceiptError(Reason.MISSING_HEADER, f"header {HEADER_SIGNATURE!r} is required")
    return receipt, signature


def open_envelope(
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]],
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> Envelope:
    """Parse a record's receipt and signature; raise ReceiptError with a reason."""
    if value is None:
        raise ReceiptError(Reason.MISSING_FIELD, "record has a null value; the payload is required (it may be empty)")
    if len(value) > max_payload_bytes:
        raise ReceiptError(Reason.OVERSIZED, f"payload is {len(value)} bytes; at most {max_payload_bytes} allowed")
    if len(headers) == 2 and headers[0][0] == HEADER_RECEIPT and headers[1][0] == HEADER_SIGNATURE:
        raw_receipt, raw_sig = headers[0][1] or b"", headers[1][1] or b""  # what the SDK sends: no call
    else:
        raw_receipt, raw_sig = _our_headers(headers)
    # 86 characters carry 516 bits for 512: the last one's low 4 bits must be zero.
    # Mapped to the standard alphabet, strict decoding refuses anything else.
    std = raw_sig.translate(_URLSAFE_TO_STD, _NOT_BASE64URL)
    if len(raw_sig) != 86 or len(std) != 86 or raw_sig[85] not in _SIG_LAST_CHARS:
        raise ReceiptError(Reason.BAD_BASE64, _SIG_SHAPE)
    try:
        signature = binascii.a2b_base64(std + b"==", strict_mode=True)
    except binascii.Error:
        raise ReceiptError(Reason.BAD_BASE64, _SIG_SHAPE) from None
    receipt = decode_receipt(raw_receipt)
    return Envelope(receipt, raw_receipt, signature, receipt_id(raw_receipt), value)
