"""The session-handoff payload, its four signed statements, the compromise notice and its clearance.

A session handoff (seed 004) is an ordinary receipt of kind `session-handoff`
whose record value is a `SessionHandoff` JSON object; the receipt's
`payload_hash` covers those exact bytes, so the outer signature binds the
whole payload. Inside it, each of the seed's four recorded elements is its
own signed statement, because each has a different author (the handing-off
session, the successor or an attester it trusts) and must survive the
handoff being cut down to its verified scope, when the outer receipt no
longer covers what is forwarded.

A signed statement travels as two base64url strings::

    {"statement": b64url(statement_bytes), "signature": b64url(Ed25519(domain || statement_bytes))}

The signature covers the exact statement bytes behind a per-statement domain
separator (below); the bytes are parsed after decoding and never
re-serialised. Carrying them as base64url instead of nested JSON is what makes
"the exact bytes" well defined once they sit inside another JSON document.
Every statement names the handoff (`handoff_id` = the receipt's `task_id`),
so one cannot be lifted from one handoff into another.

All decoding is strict: unknown fields, duplicate keys (compared after
unescaping), wrong types and values out of bounds are refused with a
`MessageError` whose `code` is stable (docs/compromise-handoff.md). Field
order in each Struct is the order the SDK emits (compact JSON, absent
optional fields omitted); any valid JSON spelling is accepted on the way in.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from typing import Annotated, Final, TypeVar

import msgspec

from busguard.protocol.envelope import b64url_decode_strict
from busguard.protocol.receipt import MAX_AGENT_ID_CHARS, MAX_KEY_ID_CHARS

KIND_SESSION_HANDOFF: Final = "session-handoff"
VERSION: Final = 1

DECLARATION_CONTEXT: Final = b"busguard/compromise-declaration/v1\x00"
SCOPE_CONTEXT: Final = b"busguard/state-scope/v1\x00"
INTEGRITY_CONTEXT: Final = b"busguard/successor-integrity/v1\x00"
INTERACTION_CONTEXT: Final = b"busguard/compromise-interaction/v1\x00"
NOTICE_CONTEXT: Final = b"busguard/compromise-notice/v1\x00"

MAX_STATEMENT_BYTES: Final = 65_536
MAX_COMPONENTS: Final = 256
MAX_NAME_CHARS: Final = 128
MAX_ENCODING_CHARS: Final = 64
MAX_DETAIL_CHARS: Final = 1024
MAX_ID_CHARS: Final = 256
MAX_TIMESTAMP_CHARS: Final = 64
#: 64 signature bytes as unpadded base64url.
SIGNATURE_CHARS: Final = 86


class CompromiseKind(enum.StrEnum):
    """What a session detected in itself (or an operator found): the seed's three, plus other."""

    CORRUPTED_CONTEXT = "corrupted_context"
    DEGRADED_MODEL = "degraded_model"
    COMPROMISED_CREDENTIALS = "compromised_credentials"
    OTHER = "other"


class IntegrityStatus(enum.StrEnum):
    VERIFIED_CLEAN = "verified_clean"
    POTENTIALLY_COMPROMISED = "potentially_compromised"
    UNKNOWN = "unknown"


class InteractionRule(enum.StrEnum):
    PARTIAL_TRANSFER = "partial_transfer"
    QUARANTINED_STATE_ONLY = "quarantined_state_only"
    ESCALATE = "escalate"


_Name = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_CHARS)]
_Encoding = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ENCODING_CHARS)]
_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID_CHARS)]
_AgentId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_AGENT_ID_CHARS)]
_KeyId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_KEY_ID_CHARS)]
_Timestamp = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TIMESTAMP_CHARS)]
_Detail = Annotated[str, msgspec.Meta(max_length=MAX_DETAIL_CHARS)]
_Sha256Hex = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
_B64url = Annotated[str, msgspec.Meta(pattern="^[A-Za-z0-9_-]*$")]
_Signature = Annotated[str, msgspec.Meta(min_length=SIGNATURE_CHARS, max_length=SIGNATURE_CHARS, pattern="^[A-Za-z0-9_-]*$")]
_Kinds = Annotated[tuple[CompromiseKind, ...], msgspec.Meta(min_length=1, max_length=len(CompromiseKind))]


# ---------------------------------------------------------------- the payload


class SignedStatement(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    statement: _B64url
    signature: _Signature


class Component(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """One piece of the session's state. Exactly one of `content` (the bytes,
    base64url) and `sha256` (when the bytes travel elsewhere) is given."""

    name: _Name
    operational: bool
    encoding: _Encoding
    content: _B64url | None = None
    sha256: _Sha256Hex | None = None


class SessionHandoff(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """The record value of a `session-handoff` receipt."""

    v: int
    components: Annotated[tuple[Component, ...], msgspec.Meta(max_length=MAX_COMPONENTS)]
    declaration: SignedStatement | None = None
    scope: SignedStatement | None = None
    successor_integrity: SignedStatement | None = None
    interaction: SignedStatement | None = None


# ------------------------------------------------------------- the statements


class CompromiseDeclaration(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """`session-compromise-declaration-receipt`: what the session detected in itself."""

    v: int
    handoff_id: _Id
    signer: _AgentId
    detected: _Kinds
    detected_at: _Timestamp
    detail: _Detail = ""
    key_id: _KeyId | None = None


class ScopeEntry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    name: _Name
    sha256: _Sha256Hex
    operational: bool
    encoding: _Encoding


class StateScope(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """`transferable-state-scope-signature`: the components the session verified as uncompromised."""

    v: int
    handoff_id: _Id
    signer: _AgentId
    components: Annotated[tuple[ScopeEntry, ...], msgspec.Meta(max_length=MAX_COMPONENTS)]
    key_id: _KeyId | None = None


class SuccessorIntegrity(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """`successor-integrity-receipt`: the successor's integrity, by itself or an attester."""

    v: int
    handoff_id: _Id
    signer: _AgentId
    successor: _AgentId
    status: IntegrityStatus
    rederives_operational_state: bool
    key_id: _KeyId | None = None


class CompromiseInteraction(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """`compromise-interaction-signature`: how a compromised pair may interact."""

    v: int
    handoff_id: _Id
    signer: _AgentId
    rule: InteractionRule
    key_id: _KeyId | None = None


class CompromiseNotice(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """An operator's or detector's word that a session or key is compromised.

    Without `session_id` and `subject_key_id` it covers every session and key
    of `subject`; with one of them, only that session or that key. With
    `expires_at` it stops counting from that instant on (lifecycle.py says
    by which clock); without it, until its issuer clears it (a
    `compromise-clearance`) or its row's retention ends."""

    v: int
    notice_id: _Id
    issuer: _AgentId
    subject: _AgentId
    detected: _Kinds
    compromised_from: _Timestamp
    issued_at: _Timestamp
    expires_at: _Timestamp | None = None
    session_id: _Id | None = None
    subject_key_id: _KeyId | None = None
    detail: _Detail = ""
    key_id: _KeyId | None = None


class CompromiseClearance(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """An issuer's word that its notice no longer holds, from `cleared_at` on.
    It names the notice by its row (`subject`, narrowed as the notice is),
    its id and `notice_sha256`, the hash of its exact bytes, so it cannot
    lift another notice that shares the id (clearance.py says why each rule)."""

    v: int
    notice_id: _Id
    notice_sha256: _Sha256Hex
    issuer: _AgentId
    subject: _AgentId
    cleared_at: _Timestamp
    session_id: _Id | None = None
    subject_key_id: _KeyId | None = None
    detail: _Detail = ""


Statement = CompromiseDeclaration | StateScope | SuccessorIntegrity | CompromiseInteraction | CompromiseNotice
#: The four statements a session handoff carries (each has a `signer`).
S = TypeVar("S", CompromiseDeclaration, StateScope, SuccessorIntegrity, CompromiseInteraction)
#: Everything decoded strictly (each has a version `v`).
W = TypeVar(
    "W", SessionHandoff, CompromiseDeclaration, StateScope, SuccessorIntegrity, CompromiseInteraction, CompromiseNotice, CompromiseClearance
)

CONTEXTS: Final[dict[type[msgspec.Struct], bytes]] = {
    CompromiseDeclaration: DECLARATION_CONTEXT,
    StateScope: SCOPE_CONTEXT,
    SuccessorIntegrity: INTEGRITY_CONTEXT,
    CompromiseInteraction: INTERACTION_CONTEXT,
    CompromiseNotice: NOTICE_CONTEXT,
}


# ------------------------------------------------------------------ decoding


class MessageCode(enum.StrEnum):
    """Why a handoff payload, statement or notice cannot be used. Stable
    strings; the first group is about reading, the second (raised by
    `checks.py`) about authenticity and binding."""

    NOT_JSON = "not_json"
    WRONG_TYPE = "wrong_type"
    MISSING_FIELD = "missing_field"
    UNKNOWN_FIELD = "unknown_field"
    MALFORMED_FIELD = "malformed_field"
    DUPLICATE_KEY = "duplicate_key"
    UNSUPPORTED_VERSION = "unsupported_version"
    OVERSIZED = "oversized"
    BAD_BASE64 = "bad_base64"
    DUPLICATE_NAME = "duplicate_name"
    MALFORMED_TIMESTAMP = "malformed_timestamp"
    MALFORMED_AGENT_ID = "malformed_agent_id"
    UNKNOWN_SIGNER = "unknown_signer"
    BAD_SIGNATURE = "bad_signature"
    WRONG_HANDOFF = "wrong_handoff"
    WRONG_SIGNER = "wrong_signer"
    WRONG_SUCCESSOR = "wrong_successor"
    UNTRUSTED_ISSUER = "untrusted_issuer"
    WRONG_ISSUER = "wrong_issuer"
    WRONG_KEY = "wrong_key"


class MessageError(ValueError):
    def __init__(self, code: MessageCode, where: str, detail: str) -> None:
        super().__init__(f"{where}: {code}: {detail}")
        self.code = code
        self.where = where
        self.detail = detail


def _refuse_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    seen: dict[str, object] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _duplicate_key(raw: bytes) -> str | None:
    """The first key that repeats in any object of `raw` (already known to be
    valid JSON), compared after unescaping so `"\\u006eame"` repeats `"name"`.

    A repeated key is refused because parsers disagree on which value wins
    (msgspec keeps the last, others the first), so two readers of one signed
    statement could act on different values. msgspec does not report
    repeats; the standard library's parser hands over each object's pairs."""
    try:
        json.loads(raw, object_pairs_hook=_refuse_duplicates)
    except _DuplicateKey as dup:
        return dup.key
    return None


_TYPE_ERROR: Final = re.compile(r"Expected `[^`]+`, got `")


def _code_for(message: str) -> MessageCode:
    if message.startswith("Object contains unknown field"):
        return MessageCode.UNKNOWN_FIELD
    if message.startswith("Object missing required field"):
        return MessageCode.MISSING_FIELD
    if _TYPE_ERROR.match(message) is not None:
        return MessageCode.WRONG_TYPE
    return MessageCode.MALFORMED_FIELD  # right type, out of bounds (length, pattern, enum value)


_decoders: dict[type[msgspec.Struct], msgspec.json.Decoder[msgspec.Struct]] = {}


def decode_strict(raw: bytes, cls: type[W], where: str) -> W:
    """Parse `raw` as exactly one `cls` object, or raise MessageError."""
    decoder = _decoders.get(cls)
    if decoder is None:
        decoder = _decoders[cls] = msgspec.json.Decoder(cls)
    try:
        value = decoder.decode(raw)
    except msgspec.ValidationError as exc:
        message = str(exc)
        if message.startswith("Expected `object`") and " - at `" not in message:
            raise MessageError(MessageCode.NOT_JSON, where, f"must be a JSON object: {message}") from None
        raise MessageError(_code_for(message), where, message) from None
    except msgspec.DecodeError as exc:
        raise MessageError(MessageCode.NOT_JSON, where, f"not valid UTF-8 JSON: {exc}") from None
    try:
        dup = _duplicate_key(raw)
    except (ValueError, RecursionError) as exc:  # fail closed if the parsers ever disagree on validity
        raise MessageError(MessageCode.NOT_JSON, where, f"not readable by a second JSON parser: {exc}") from None
    if dup is not None:
        raise MessageError(MessageCode.DUPLICATE_KEY, where, f"key {dup!r} appears more than once in one object")
    assert isinstance(value, cls)
    if value.v != VERSION:
        raise MessageError(MessageCode.UNSUPPORTED_VERSION, where, f"v={value.v!r}; only {VERSION} is supported")
    return value


def decode_handoff(raw: bytes) -> SessionHandoff:
    """The record value of a session-handoff receipt, strictly.

    Beyond the schema: component names are unique (the scope is matched by
    name), and each component gives exactly one of `content` / `sha256`."""
    handoff = decode_strict(raw, SessionHandoff, "payload")
    names: set[str] = set()
    for i, component in enumerate(handoff.components):
        where = f"payload.components[{i}]"
        if component.name in names:
            raise MessageError(MessageCode.DUPLICATE_NAME, where, f"component name {component.name!r} is used twice")
        names.add(component.name)
        if (component.content is None) == (component.sha256 is None):
            raise MessageError(MessageCode.MALFORMED_FIELD, where, "exactly one of content and sha256 must be given")
        if component.content is not None:
            component_content(component, where)
    return handoff


def component_content(component: Component, where: str = "component") -> bytes | None:
    """The component's bytes (None when it travels by hash only)."""
    if component.content is None:
        return None
    try:
        return b64url_decode_strict(component.content)
    except ValueError as exc:
        raise MessageError(MessageCode.BAD_BASE64, f"{where}.content", str(exc)) from None


def component_sha256(component: Component) -> str:
    """What binds a component: SHA-256 of its bytes, or the hash it travels by."""
    if component.sha256 is not None:
        return component.sha256
    content = component_content(component)
    assert content is not None  # decode_handoff guarantees one of the two
    return hashlib.sha256(content).hexdigest()


def open_statement(signed: SignedStatement, where: str) -> tuple[bytes, bytes]:
    """The exact statement bytes and the 64 signature bytes of a signed statement."""
    try:
        raw = b64url_decode_strict(signed.statement)
    except ValueError as exc:
        raise MessageError(MessageCode.BAD_BASE64, f"{where}.statement", str(exc)) from None
    if len(raw) > MAX_STATEMENT_BYTES:
        raise MessageError(MessageCode.OVERSIZED, f"{where}.statement", f"{len(raw)} bytes; at most {MAX_STATEMENT_BYTES} allowed")
    try:
        signature = b64url_decode_strict(signed.signature, 64)
    except ValueError as exc:
        raise MessageError(MessageCode.BAD_BASE64, f"{where}.signature", str(exc)) from None
    return raw, signature


def signing_input(cls: type[msgspec.Struct], statement_bytes: bytes) -> bytes:
    return CONTEXTS[cls] + statement_bytes


def statement_id(cls: type[msgspec.Struct], statement_bytes: bytes) -> str:
    """Names the signed statement (not its signature, which is not unique)."""
    return hashlib.sha256(signing_input(cls, statement_bytes)).hexdigest()


# ------------------------------------------------------------------ encoding

_encoder: Final = msgspec.json.Encoder()


def encode(value: msgspec.Struct) -> bytes:
    """Compact JSON in field order, absent optionals omitted: the form this
    SDK emits. Any valid JSON spelling is accepted on the way in."""
    return _encoder.encode(value)
