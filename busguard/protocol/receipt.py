"""The signed receipt: its fields, its exact signing bytes, strict decoding.

Byte layout of what is signed (see docs/protocol.md, "Signing input")::

    SIGNING_CONTEXT (b"busguard/receipt/v1" + b"\\x00")  ||  receipt JSON bytes, exactly as sent

The receipt travels as those JSON bytes in the `busguard-receipt` header and is
never re-serialised: the verifier checks the signature over the bytes it
received, then parses the same bytes. That is why duplicate keys must be
refused: two parsers (a sender's, an auditor's, ours) could otherwise read
different values out of one signed byte string.

The receipt id is the SHA-256 of the signing input. It identifies the signed
statement, not the signature, because a signer can produce many valid
signatures for one statement (docs/design.md, "Principles", 2: sign bytes, not objects).
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Final

import msgspec

from busguard.protocol.reasons import Reason

SIGNING_CONTEXT: Final = b"busguard/receipt/v1\x00"
RECEIPT_VERSION: Final = 1
MAX_RECEIPT_BYTES: Final = 4096
MAX_TASK_ID_CHARS: Final = 256
MAX_SESSION_ID_CHARS: Final = 128
MAX_KEY_ID_CHARS: Final = 128
MAX_AGENT_ID_CHARS: Final = 512
MAX_SEQUENCE: Final = 2**63 - 1

# Every JSON string, keys and values alike. Scanning all strings (not just
# keys) keeps the scan aligned on real string boundaries whatever the values
# contain; the second group is ":" for the ones that are keys.
_JSON_STRING = re.compile(rb'"([^"\\]*(?:\\.[^"\\]*)*)"\s*(:?)', re.DOTALL)
_REQUIRED_FIELDS = 8
_JSON_WHITESPACE = b" \t\n\r"


_TaskId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TASK_ID_CHARS)]
_AgentId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_AGENT_ID_CHARS)]
# Length only: a regex here costs more than the rest of the parse. Whether it
# is lowercase hex only matters once it fails to equal the computed hash
# (see `payload_hash_problem`).
_Sha256Hex = Annotated[str, msgspec.Meta(min_length=64, max_length=64)]
_SessionId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_SESSION_ID_CHARS)]
_Sequence = Annotated[int, msgspec.Meta(ge=0, le=MAX_SEQUENCE)]
_KeyId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_KEY_ID_CHARS)]


class Receipt(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """What a sender attests to. Field order here is the canonical emit order,
    and absent optional fields are omitted, so encoding one gives the SDK's form.

    Shape constraints live in the type so msgspec checks them while parsing
    (in C, on the hot path); `_CONSTRAINT_REASONS` maps a violation of each
    to its reason code. Nonce and timestamp grammar are checked by admission.
    """

    v: int
    kind: str
    task_id: _TaskId
    sender: _AgentId
    receiver: _AgentId
    payload_hash: _Sha256Hex
    nonce: str
    issued_at: str
    session_id: _SessionId | None = None
    sequence: _Sequence | None = None
    key_id: _KeyId | None = None


_CONSTRAINT_REASONS: Final = {
    "$.task_id": Reason.MALFORMED_FIELD,
    "$.payload_hash": Reason.MALFORMED_FIELD,
    "$.key_id": Reason.MALFORMED_FIELD,
    "$.sender": Reason.MALFORMED_AGENT_ID,
    "$.receiver": Reason.MALFORMED_AGENT_ID,
    "$.session_id": Reason.MALFORMED_SESSION,
    "$.sequence": Reason.MALFORMED_SESSION,
}
_TYPE_ERROR = re.compile(r"Expected `[^`]+`, got `")


_decoder: Final = msgspec.json.Decoder(Receipt)
_encoder: Final = msgspec.json.Encoder()


class ReceiptError(ValueError):
    """A receipt that cannot be used; `reason` is the stable code."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def signing_input(receipt_bytes: bytes) -> bytes:
    return SIGNING_CONTEXT + receipt_bytes


_CONTEXT_HASH: Final = hashlib.sha256(SIGNING_CONTEXT)  # copied per receipt: the prefix is hashed once


def receipt_id(receipt_bytes: bytes) -> str:
    h = _CONTEXT_HASH.copy()
    h.update(receipt_bytes)
    return h.hexdigest()


def payload_hash(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


_HEX64 = re.compile(r"[0-9a-f]{64}")


def payload_hash_problem(claimed: str) -> str | None:
    """Why a `payload_hash` that did not match is malformed, if it is."""
    if _HEX64.fullmatch(claimed) is None:
        return f"payload_hash {claimed[:80]!r} is not 64 lowercase hex digits (SHA-256)"
    return None


def encode_receipt(receipt: Receipt) -> bytes:
    """Compact JSON in field order, omitting absent optional fields.

    Senders may emit any valid JSON; this is just the form our SDK emits.
    """
    return _encoder.encode(receipt)


def _duplicate_key(raw: bytes, receipt: Receipt) -> str | None:
    """The first key that appears twice, or None.

    Fast path: `present` distinct keys decoded to non-null values, so there
    are at least that many keys. In JSON without whitespace (what senders
    normally emit) every key is spelled `"…":`, so the count of `":` bounds
    the number of keys from above; if that bound is `present`, there is no
    room for a duplicate. Anything else (a duplicate, an explicit null,
    whitespace anywhere, `":` inside a value) takes the exact scan.
    (decode_receipt skips this for bytes that are the canonical encoding.)
    """
    present = _REQUIRED_FIELDS + (receipt.session_id is not None) + (receipt.sequence is not None) + (receipt.key_id is not None)
    if raw.count(b'":') <= present and len(raw.translate(None, _JSON_WHITESPACE)) == len(raw):
        return None
    seen: set[str] = set()
    match: tuple[bytes, bytes]
    for match in _JSON_STRING.findall(raw):
        if not match[1]:
            continue
        key = msgspec.json.decode(b'"' + match[0] + b'"', type=str)  # "\u006eonce" is "nonce"
        if key in seen:
            return key
        seen.add(key)
    return None


def _validation_reason(message: str) -> Reason:
    if message.startswith("Object contains unknown field"):
        return Reason.UNKNOWN_FIELD
    if message.startswith("Object missing required field"):
        return Reason.MISSING_FIELD
    if _TYPE_ERROR.match(message) is None:  # a value of the right type breaking a constraint
        path = message.rpartition(" - at `")[2].rstrip("`")
        return _CONSTRAINT_REASONS.get(path, Reason.WRONG_TYPE)
    return Reason.WRONG_TYPE


def decode_receipt(raw: bytes) -> Receipt:
    """Parse the received bytes strictly, or raise ReceiptError with a reason.

    Only structure is checked here; grammar of individual values (nonce,
    timestamp, agent ids) is checked by admission so each gets its own code.
    """
    if len(raw) > MAX_RECEIPT_BYTES:
        raise ReceiptError(Reason.OVERSIZED, f"receipt is {len(raw)} bytes; at most {MAX_RECEIPT_BYTES} allowed")
    try:
        receipt = _decoder.decode(raw)
    except msgspec.ValidationError as exc:
        message = str(exc)
        if message.startswith("Expected `object`"):
            raise ReceiptError(Reason.NOT_JSON, f"receipt must be a JSON object: {message}") from None
        if message.startswith("Number out of range"):
            # a number literal past the double range (1e400): never an integer
            # of a field's type, so the wrong type there, and no object at the top (3.2, 3.3)
            raise ReceiptError(Reason.WRONG_TYPE if " - at `" in message else Reason.NOT_JSON, message) from None
        raise ReceiptError(_validation_reason(message), message) from None
    except msgspec.DecodeError as exc:
        raise ReceiptError(Reason.NOT_JSON, f"receipt is not valid UTF-8 JSON: {exc}") from None
    # Bytes equal to the receipt's canonical encoding (what the SDK sends)
    # hold each key once; anything else takes the full check.
    dup = None if _encoder.encode(receipt) == raw else _duplicate_key(raw, receipt)
    if dup is not None:
        raise ReceiptError(Reason.DUPLICATE_KEY, f"key {dup!r} appears more than once in the signed receipt")
    if receipt.v != RECEIPT_VERSION:
        raise ReceiptError(Reason.UNSUPPORTED_VERSION, f"v={receipt.v!r}; only {RECEIPT_VERSION} is supported")
    if (receipt.session_id is None) != (receipt.sequence is None):
        raise ReceiptError(Reason.MALFORMED_SESSION, "session_id and sequence must be given together or not at all")
    return receipt
