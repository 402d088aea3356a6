"""The contract-net kinds on the wire (docs/protocol.md, "15. Contract-net awards").

Four receipt kinds, each an ordinary signed receipt whose record value is the
kind's payload, a JSON object decoded here strictly: unknown fields, missing
fields, wrong types and duplicate keys are refused with the protocol's
existing reason codes, because two readings of one signed payload (ours and
an awarder's) must never differ. The receipt's `task_id` names the record:
a call's and an award's and a result's task_id is the call id (so the task
index admits one award and one settlement per call); a bid's is the bid id.

Also here: the rebid notice busguard emits for a refused award and the
statement a delegated verifier signs (the policy's rows are in rows.py).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Final, Literal

import msgspec

from busguard.policies.award.canonicalizers import CANONICALIZER_ID
from busguard.policies.award.registry import TASK_CLASS
from busguard.policies.seam import Objection
from busguard.protocol.envelope import b64url_decode_strict
from busguard.protocol.reasons import Outcome, Reason

__all__ = [
    "ATTESTATION_CONTEXT",
    "AwardPayload",
    "BidPayload",
    "CallPayload",
    "KIND_AWARD",
    "KIND_BID",
    "KIND_CALL",
    "KIND_RESULT",
    "RebidNotice",
    "ReceiptTemplate",
    "ResultPayload",
    "attestation_input",
    "decode_payload",
]

KIND_CALL: Final = "cnet.call"
KIND_BID: Final = "cnet.bid"
KIND_AWARD: Final = "cnet.award"
KIND_RESULT: Final = "cnet.result"

#: Domain separation of a delegated verifier's signature (see attestation_input).
ATTESTATION_CONTEXT: Final = b"busguard/cnet-attestation/v1\x00"

_MAX_SAFE: Final = 2**53 - 1
_Amount = Annotated[int, msgspec.Meta(ge=0, le=_MAX_SAFE)]
_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
_Text = Annotated[str, msgspec.Meta(max_length=4096)]
_Manifest = Annotated[str, msgspec.Meta(pattern=r"^[\x21-\x7e]{1,256}$")]
_CanonId = Annotated[str, msgspec.Meta(pattern=f"^{CANONICALIZER_ID.pattern}$")]
_TaskClass = Annotated[str, msgspec.Meta(pattern=f"^{TASK_CLASS.pattern}$")]
_Root = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]
_B64 = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]*$")]
_Stamp = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]

Mode = Literal["verified", "delegated", "best_effort"]


class CallPayload(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """`cnet.call`: the awarder's call for bids. Sender: the awarder."""

    awarder: str  # an agent id (protocol.md 5.1): checked by canonical_principal, malformed_agent_id
    task_class: _TaskClass
    task: _Text
    requires_check: bool
    award_deadline: _Stamp


class ReceiptTemplate(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """How the bidder's execution receipt will be committed."""

    canonicalizer_id: _CanonId
    commits: Literal["output", "trace"]
    verifier_manifest: _Manifest | None = None


class BidPayload(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """`cnet.bid`. Sender: the bidder; task_id: the bid id."""

    call: _Id
    cost: _Amount
    deadline: _Stamp
    receipt: ReceiptTemplate


class AwardPayload(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """`cnet.award`. Sender: the call's awarder; task_id: the call id."""

    winner: _Id
    ranked: list[_Id]
    mode: Mode
    verifier: _Manifest | None = None
    risk_price: _Amount | None = None


class ResultPayload(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """`cnet.result`. Sender: the winning bidder; task_id: the call id."""

    state_root: _Root
    output: _B64 | None = None
    trace: _B64 | None = None
    attestation: _B64 | None = None


Payload = CallPayload | BidPayload | AwardPayload | ResultPayload

_DECODERS: Final[dict[str, msgspec.json.Decoder[Any]]] = {
    KIND_CALL: msgspec.json.Decoder(CallPayload),
    KIND_BID: msgspec.json.Decoder(BidPayload),
    KIND_AWARD: msgspec.json.Decoder(AwardPayload),
    KIND_RESULT: msgspec.json.Decoder(ResultPayload),
}


class _Duplicate(Exception):
    pass


def _pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def _reason(message: str) -> Reason:
    if message.startswith("Object contains unknown field"):
        return Reason.UNKNOWN_FIELD
    if message.startswith("Object missing required field"):
        return Reason.MISSING_FIELD
    if re.match(r"Expected `[^`]+`, got `", message):
        return Reason.WRONG_TYPE
    return Reason.MALFORMED_FIELD


def _refuse(kind: str, reason: Reason, detail: str) -> Objection:
    return Objection(Outcome.REJECT, reason, f"{kind} payload: {detail}")


def decode_payload(kind: str, raw: bytes) -> Payload | Objection:
    """The kind's payload, or the objection that refuses it (never raises)."""
    try:
        payload: Payload = _DECODERS[kind].decode(raw)
    except msgspec.ValidationError as exc:
        return _refuse(kind, _reason(str(exc)), str(exc))
    except msgspec.DecodeError as exc:
        return _refuse(kind, Reason.NOT_JSON, f"not one UTF-8 JSON object: {exc}")
    try:
        json.loads(raw, object_pairs_hook=_pairs)
    except _Duplicate as exc:
        return _refuse(kind, Reason.DUPLICATE_KEY, f"key {exc.args[0]!r} appears more than once in one object")
    return _shape(kind, payload)


def _shape(kind: str, p: Payload) -> Payload | Objection:
    """Cross-field rules a schema cannot say."""
    if isinstance(p, AwardPayload):
        if len(set(p.ranked)) != len(p.ranked):
            return _refuse(kind, Reason.MALFORMED_FIELD, "ranked lists a bid more than once")
        if len(p.ranked) > 64:
            return _refuse(kind, Reason.MALFORMED_FIELD, f"ranked lists {len(p.ranked)} bids; at most 64")
        for field, value, mode in (("verifier", p.verifier, "delegated"), ("risk_price", p.risk_price, "best_effort")):
            if value is None and p.mode == mode:
                return _refuse(kind, Reason.MISSING_FIELD, f"{field} is required for mode {mode}")
            if value is not None and p.mode != mode:
                return _refuse(kind, Reason.MALFORMED_FIELD, f"{field} is allowed only for mode {mode}, not {p.mode}")
    if isinstance(p, ResultPayload):
        if (p.output is None) == (p.trace is None):
            return _refuse(kind, Reason.MALFORMED_FIELD, "exactly one of output and trace")
        for name, text, size in (("output", p.output, None), ("trace", p.trace, None), ("attestation", p.attestation, 64)):
            if text is not None:
                try:
                    b64url_decode_strict(text, size)
                except ValueError as exc:
                    return _refuse(kind, Reason.MALFORMED_FIELD, f"{name}: {exc}")
    return p


def delivered(p: ResultPayload) -> bytes:
    """The delivered bytes (output or trace); decode_payload checked them."""
    text = p.output if p.output is not None else p.trace
    assert text is not None
    return b64url_decode_strict(text)


def attestation_input(
    *, verifier_manifest: str, call: str, bid: str, canonicalizer_id: str, state_root: str, output_sha256: str
) -> bytes | None:
    """What a delegated verifier signs with its registered key: the context,
    then each field in this order as UTF-8 followed by one NUL byte. None when
    a field holds a NUL itself (such an id cannot be attested unambiguously)."""
    fields = (verifier_manifest, call, bid, canonicalizer_id, state_root, output_sha256)
    if any("\x00" in f for f in fields):
        return None
    return ATTESTATION_CONTEXT + b"".join(f.encode() + b"\x00" for f in fields)


# ------------------------------------------------------------ rebid notice


class Awardable(msgspec.Struct, frozen=True, kw_only=True):
    bid: str
    bidder: str
    cost: int
    mode: str
    canonicalizer_id: str
    verifier_manifest: str | None = None


class RebidNotice(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="rebid"):
    """The value of a notice on the `rebid` route: why an award was refused
    and which admitted bids of the call could be awarded, in which mode."""

    call: str
    awarder: str
    winner: str
    reason: str
    detail: str
    awardable: tuple[Awardable, ...]


notice_encode: Final = msgspec.json.Encoder().encode
