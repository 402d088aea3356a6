#!/usr/bin/env python3
"""Generate busguard's wire-protocol vectors: valid.json, invalid.json, sequences.json, resolutions.json.

Deterministic: every key seed, nonce and session id is a SHA-256 of a fixed
string, the receiver clock is fixed, and Ed25519 signing is deterministic, so
re-running this script reproduces the committed files byte for byte
(tests/unit/test_vectors.py checks that).

Deliberately independent of busguard: receipts are built as explicit bytes,
signed with PyNaCl, ids and hashes are computed with hashlib, and every
expected outcome is written down here by hand from docs/protocol.md. The test
then runs each vector through busguard's real admission path; a vector that
merely echoed busguard's own output could not catch a regression.

    python tests/vectors/generate.py [--out DIR]     (default: this directory)

The seeds below are TEST KEYS, published on purpose so that an implementer of
a sender in another language can reproduce every signature exactly. Never use
them for anything else.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import base58
import nacl.bindings

FORMAT = "busguard.vectors.v1"
SIGNING_CONTEXT = b"busguard/receipt/v1\x00"
DECISION_CONTEXT = b"busguard/decision/v1\x00"
HEADER_RECEIPT = "busguard-receipt"
HEADER_SIGNATURE = "busguard-signature"

NOW = "2026-11-29T12:00:00.000Z"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NOW_MS = int((datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC) - EPOCH) / timedelta(milliseconds=1))
STORE_CREATED_MS = NOW_MS - 3_600_000
TOPIC = "agents.in"

POLICY: dict[str, Any] = {
    "namespace": "busguard",
    "max_age_ms": 300_000,
    "max_future_ms": 30_000,
    "nonce_retention_ms": 600_000,
    "nonce_scope": "global",
    "window_size": 1024,
    "session_retention_ms": 604_800_000,
    "task_retention_ms": 604_800_000,
    "decision_retention_ms": 604_800_000,
}
MAX_PAYLOAD_BYTES = 1_048_576

ENCODING_NOTES = {
    "value_b64": "the Kafka record value, standard base64 with padding (RFC 4648 section 4); null = a null value",
    "headers": "[[name, value]] in record order; value is standard base64 with padding, null = a null header value",
    "hex": "lowercase hex",
    "timestamps": "RFC 3339; *_ms fields are milliseconds since 1970-01-01T00:00:00Z",
    "source": "the coordinates the record is read from; they feed the decision id",
    "run": "valid.json and invalid.json: each vector alone, in one batch, against a fresh store; "
    "sequences.json: each scenario against one fresh store, steps in order, steps sharing a `batch` number in one batch",
}


# --------------------------------------------------------------------- helpers


def ts(ms: int) -> str:
    """The SDK's spelling: YYYY-MM-DDTHH:MM:SS.mmmZ."""
    dt = EPOCH + timedelta(milliseconds=ms)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def nonce(label: str) -> str:
    """128 bits as 22 characters of unpadded base64url, as the SDK emits."""
    return b64url(sha256(b"busguard-vectors/v1/nonce:" + label.encode())[:16])


def session(label: str) -> str:
    return b64url(sha256(b"busguard-vectors/v1/session:" + label.encode())[:16])


class Signer:
    def __init__(self, name: str) -> None:
        self.name = name
        self.seed = sha256(b"busguard-vectors/v1/key:" + name.encode())
        pk, self._sk = nacl.bindings.crypto_sign_seed_keypair(self.seed)
        self.public_key = bytes(pk)
        self.multikey = "z" + base58.b58encode(b"\xed\x01" + self.public_key).decode("ascii")

    def sign(self, message: bytes) -> bytes:
        return bytes(nacl.bindings.crypto_sign(message, self._sk)[:64])

    def sig_header(self, receipt: bytes) -> bytes:
        return b64url(self.sign(SIGNING_CONTEXT + receipt)).encode("ascii")

    @property
    def tulpa(self) -> str:
        return "tulpa:" + self.multikey

    @property
    def ink(self) -> str:
        return "ink:" + self.multikey

    @property
    def principal(self) -> str:
        return "key:" + self.multikey

    def describe(self) -> dict[str, str]:
        return {
            "seed_hex": self.seed.hex(),
            "public_key_hex": self.public_key.hex(),
            "multikey": self.multikey,
        }


SIGNERS = {
    name: Signer(name) for name in ("planner-2026-q3", "planner-2026-q4", "planner-leaked", "executor", "auditor", "router", "mallory")
}
Q3, Q4, LEAKED = SIGNERS["planner-2026-q3"], SIGNERS["planner-2026-q4"], SIGNERS["planner-leaked"]
EXECUTOR, AUDITOR, ROUTER, MALLORY = SIGNERS["executor"], SIGNERS["auditor"], SIGNERS["router"], SIGNERS["mallory"]
ROUTER_ID = "did:web:agents.example.com:router"

# Same shape as configs/keys.toml (busguard.protocol.registry), as JSON.
REGISTRY: dict[str, Any] = {
    "open_enrollment": False,
    "agent": [
        {
            "id": "planner",
            "key": [
                {"key_id": "2026-q3", "public_key": Q3.multikey, "not_before": "2026-07-01T00:00:00Z", "not_after": "2026-10-01T00:00:00Z"},
                {"key_id": "2026-q4", "public_key": Q4.multikey, "not_before": "2026-10-01T00:00:00Z", "not_after": "2027-01-01T00:00:00Z"},
                {
                    "key_id": "leaked",
                    "public_key": LEAKED.multikey,
                    "not_before": "2026-10-01T00:00:00Z",
                    "revoked_at": "2026-11-15T00:00:00Z",
                },
            ],
        },
        {"id": EXECUTOR.tulpa},
        {"id": AUDITOR.ink},
        {"id": ROUTER_ID, "key": [{"key_id": "router-1", "public_key": ROUTER.multikey}]},
    ],
}

# Key each signer signs for, and the principal / key id busguard reports.
PLANNER = ("planner", "planner", "2026-q4")

HANDOFF_PAYLOAD = b'{"op":"transform","input":"s3://bucket/in.parquet"}'
ACK_PAYLOAD = b'{"status":"accepted"}'
ISSUED = ts(NOW_MS - 1_750)

FIELD_ORDER = ("v", "kind", "task_id", "sender", "receiver", "payload_hash", "nonce", "issued_at", "session_id", "sequence", "key_id")


def receipt_fields(
    *,
    kind: str = "handoff",
    task_id: str = "task-0001",
    sender: str | None = None,
    receiver: str | None = None,
    payload: bytes = HANDOFF_PAYLOAD,
    nonce_label: str,
    issued_at: str = ISSUED,
    session_id: str | None = None,
    sequence: int | None = None,
    key_id: str | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "v": 1,
        "kind": kind,
        "task_id": task_id,
        "sender": sender if sender is not None else EXECUTOR.tulpa,
        "receiver": receiver if receiver is not None else "planner",
        "payload_hash": hashlib.sha256(payload).hexdigest(),
        "nonce": nonce(nonce_label),
        "issued_at": issued_at,
        "session_id": session_id,
        "sequence": sequence,
        "key_id": key_id,
    }
    fields.update(overrides)
    return fields


def compact(fields: dict[str, Any], drop_none: bool = True) -> bytes:
    """The SDK's emit form: compact JSON, field order above, absent fields omitted."""
    ordered = {k: fields[k] for k in FIELD_ORDER if k in fields and not (drop_none and fields[k] is None)}
    ordered.update({k: v for k, v in fields.items() if k not in FIELD_ORDER})
    return json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decision_id(offset: int, namespace: str = "busguard", topic: str = TOPIC, partition: int = 0) -> str:
    data = DECISION_CONTEXT + f"{namespace}\x00{topic}\x00{partition}".encode()
    return hashlib.sha256(data).hexdigest()[:16] + f"{offset:016x}"


def receipt_id(receipt: bytes) -> str:
    return hashlib.sha256(SIGNING_CONTEXT + receipt).hexdigest()


def headers_for(
    receipt: bytes | None, sig: bytes | None, extra: list[tuple[str, bytes | None]] | None = None
) -> list[tuple[str, bytes | None]]:
    out: list[tuple[str, bytes | None]] = []
    if receipt is not None:
        out.append((HEADER_RECEIPT, receipt))
    if sig is not None:
        out.append((HEADER_SIGNATURE, sig))
    return out + list(extra or [])


def record(
    name: str,
    description: str,
    offset: int,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]],
    outcome: str,
    reason: str,
    **extra: Any,
) -> dict[str, Any]:
    vec: dict[str, Any] = {
        "name": name,
        "description": description,
        "source": {"topic": TOPIC, "partition": 0, "offset": offset},
        "value_b64": b64(value),
        "headers": [[k, b64(v)] for k, v in headers],
    }
    expect = {"outcome": outcome, "reason": reason, "decision_id": decision_id(offset)}
    for key in ("principal", "key_id", "supersedes", "prior_receipt_id", "receipt_id"):
        if key in extra:
            expect[key] = extra.pop(key)
    vec.update(extra)
    vec["expect"] = expect
    return vec


# ----------------------------------------------------------------- valid.json


def valid_vector(
    offset: int,
    name: str,
    description: str,
    receipt: bytes,
    signer: Signer,
    principal: str,
    key_id: str,
    payload: bytes = HANDOFF_PAYLOAD,
    extra_headers: list[tuple[str, bytes | None]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    sig = signer.sig_header(receipt)
    vec = record(
        name,
        description,
        offset,
        payload,
        headers_for(receipt, sig, extra_headers),
        "forward",
        "admitted",
        principal=principal,
        key_id=key_id,
        receipt_id=receipt_id(receipt),
        **extra,
    )
    vec["signer"] = signer.name
    vec["receipt_text"] = receipt.decode("utf-8")
    vec["public_key_hex"] = signer.public_key.hex()
    vec["signing_input_hex"] = (SIGNING_CONTEXT + receipt).hex()
    vec["signature_b64url"] = sig.decode("ascii")
    vec["receipt_id"] = receipt_id(receipt)
    vec["expect"] = vec.pop("expect")
    return vec


def build_valid() -> list[dict[str, Any]]:
    vs: list[dict[str, Any]] = []

    def add(name: str, description: str, receipt: bytes, signer: Signer, principal: str, key_id: str, **kw: Any) -> None:
        vs.append(valid_vector(len(vs), name, description, receipt, signer, principal, key_id, **kw))

    ex = (EXECUTOR, EXECUTOR.principal, EXECUTOR.multikey)
    add(
        "named_agent_handoff_with_session_and_key_id",
        "The worked example of docs/protocol.md: a named agent (key registry entry 'planner') signs a handoff "
        "with its current key '2026-q4', naming it in key_id, and carries session_id + sequence.",
        compact(
            receipt_fields(
                sender="planner",
                receiver=EXECUTOR.tulpa,
                nonce_label="example",
                session_id=session("planner-boot-1"),
                sequence=17,
                key_id="2026-q4",
            )
        ),
        Q4,
        "planner",
        "2026-q4",
    )
    add(
        "self_certifying_tulpa_legacy_handoff",
        "A self-certifying tulpa: sender (its id carries its key), no session (legacy nonce-only receipt), no key_id.",
        compact(receipt_fields(nonce_label="tulpa-legacy")),
        *ex,
    )
    add(
        "self_certifying_ink_ack",
        "An ack from an agent listed in the registry by its ink: id, sent under that ink: spelling.",
        compact(receipt_fields(kind="ack", sender=AUDITOR.ink, receiver=EXECUTOR.tulpa, payload=ACK_PAYLOAD, nonce_label="ink-ack")),
        AUDITOR,
        AUDITOR.principal,
        AUDITOR.multikey,
        payload=ACK_PAYLOAD,
    )
    add(
        "tulpa_spelling_of_an_ink_listed_agent",
        "tulpa:zKEY and ink:zKEY are one principal (key:zKEY): an agent listed as ink: may send as tulpa:.",
        compact(receipt_fields(kind="ack", sender=AUDITOR.tulpa, receiver=EXECUTOR.tulpa, payload=ACK_PAYLOAD, nonce_label="tulpa-of-ink")),
        AUDITOR,
        AUDITOR.principal,
        AUDITOR.multikey,
        payload=ACK_PAYLOAD,
    )
    add(
        "named_agent_without_key_id",
        "Without key_id busguard tries every key of the agent that is valid at its clock (here only 2026-q4: "
        "2026-q3 has expired, 'leaked' is revoked) and reports the one that verified.",
        compact(receipt_fields(sender="planner", receiver=EXECUTOR.tulpa, nonce_label="planner-no-key-id")),
        Q4,
        "planner",
        "2026-q4",
    )
    add(
        "did_named_agent",
        "A DID is a named agent: its principal is the DID itself, its key comes from the registry.",
        compact(receipt_fields(sender=ROUTER_ID, receiver="planner", nonce_label="did", key_id="router-1")),
        ROUTER,
        ROUTER_ID,
        "router-1",
    )
    add(
        "self_certifying_with_own_multikey_as_key_id",
        "A self-certifying sender may name its key: its only key id is its own multikey.",
        compact(receipt_fields(nonce_label="tulpa-key-id", key_id=EXECUTOR.multikey)),
        *ex,
    )
    add(
        "session_sequence_zero",
        "Sequences start at 0 (the SDK's first number in a new session).",
        compact(receipt_fields(nonce_label="seq-zero", session_id=session("executor-boot-1"), sequence=0)),
        *ex,
    )
    add(
        "session_sequence_max",
        "The largest sequence: 2^63-1, a JSON integer.",
        compact(receipt_fields(nonce_label="seq-max", session_id=session("executor-boot-2"), sequence=2**63 - 1)),
        *ex,
    )
    f = receipt_fields(nonce_label="pretty", session_id=session("executor-boot-3"), sequence=3)
    pretty = (
        "{\n"
        f'  "sequence" : {f["sequence"]},\n'
        f'  "session_id" : "{f["session_id"]}",\n'
        f'  "issued_at" : "{f["issued_at"]}",\n'
        f'  "nonce" : "{f["nonce"]}",\n'
        f'  "payload_hash" : "{f["payload_hash"]}",\n'
        f'  "receiver" : "{f["receiver"]}",\n'
        f'  "sender" : "{f["sender"]}",\n'
        f'  "task_id" : "{f["task_id"]}",\n'
        f'  "kind" : "{f["kind"]}",\n'
        '  "v" : 1\n'
        "}\n"
    ).encode()
    add(
        "pretty_printed_reversed_key_order",
        "Any JSON formatting is accepted because the signature covers the exact bytes: indentation, spaces around "
        "':', reversed key order, trailing newline.",
        pretty,
        *ex,
    )
    add(
        "explicit_nulls_for_optional_fields",
        "An explicit null for session_id, sequence and key_id means the same as leaving them out.",
        compact(receipt_fields(nonce_label="nulls"), drop_none=False),
        *ex,
    )
    escaped = (
        b'{"v":1,"kind":"handoff","task_id":"r\\u00e9sum\\u00e9 \\"q3\\"\\/caf\xc3\xa9 \\ud83d\\ude00",'
        + b'"sender":"'
        + EXECUTOR.tulpa.encode()
        + b'","receiver":"planner","payload_hash":"'
        + hashlib.sha256(HANDOFF_PAYLOAD).hexdigest().encode()
        + b'","nonce":"'
        + nonce("escapes").encode()
        + b'","issued_at":"'
        + ISSUED.encode()
        + b'"}'
    )
    add(
        "string_escapes_and_raw_utf8",
        'JSON string escapes (\\u00e9, \\", \\/, a surrogate pair) and raw UTF-8 in a value; busguard never '
        "re-serialises, so the receipt id is over these exact bytes.",
        escaped,
        *ex,
    )
    add(
        "empty_payload",
        "The value may be empty (never null): payload_hash is the SHA-256 of zero bytes.",
        compact(receipt_fields(kind="ack", payload=b"", nonce_label="empty-payload")),
        *ex,
        payload=b"",
    )
    binary = bytes(range(256))
    add(
        "binary_payload",
        "The value is opaque bytes; only its SHA-256 matters.",
        compact(receipt_fields(payload=binary, nonce_label="binary-payload", task_id="task-binary")),
        *ex,
        payload=binary,
    )
    add(
        "foreign_headers_pass_through",
        "Headers other than busguard's are carried along untouched, before or after ours, including a null value.",
        compact(receipt_fields(nonce_label="foreign-headers")),
        *ex,
        extra_headers=[("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), ("x-empty", None)],
    )
    add(
        "freshness_boundary_age_exactly_300000_ms",
        "issued_at exactly 300 000 ms before the receiver clock is still fresh (inclusive bound).",
        compact(receipt_fields(nonce_label="age-boundary", issued_at=ts(NOW_MS - 300_000))),
        *ex,
    )
    add(
        "freshness_boundary_future_exactly_30000_ms",
        "issued_at exactly 30 000 ms after the receiver clock is still accepted (inclusive bound).",
        compact(receipt_fields(nonce_label="future-boundary", issued_at=ts(NOW_MS + 30_000))),
        *ex,
    )
    add(
        "timestamp_with_offset_and_microseconds",
        "RFC 3339 offsets and long fractions are accepted: 2026-11-29T12:59:58.250999+01:00 is "
        "2026-11-29T11:59:58.250Z (sub-millisecond digits are truncated).",
        compact(receipt_fields(nonce_label="offset-ts", issued_at="2026-11-29T12:59:58.250999+01:00")),
        *ex,
    )
    add(
        "timestamp_without_fraction",
        "The fraction is optional.",
        compact(receipt_fields(nonce_label="no-fraction", issued_at="2026-11-29T11:59:30Z")),
        *ex,
    )
    add(
        "nonce_16_chars_minimum",
        "The shortest allowed nonce: 16 characters of [A-Za-z0-9_-].",
        compact(receipt_fields(nonce_label="n16", nonce="Ab3_-Ab3_-Ab3_-A")),
        *ex,
    )
    add(
        "nonce_256_chars_maximum",
        "The longest allowed nonce: 256 characters.",
        compact(receipt_fields(nonce_label="n256", nonce=(b64url(sha256(b"n256")) * 6)[:256])),
        *ex,
    )
    add(
        "field_length_maxima",
        "task_id of 256 characters (code points; here 2-byte UTF-8 'é'), session_id of 128 characters.",
        compact(receipt_fields(nonce_label="maxima", task_id="é" * 256, session_id="s" * 128, sequence=1)),
        *ex,
    )
    f = receipt_fields(nonce_label="4096")
    base = compact(f)
    padded = base[:-1] + b" " * (4096 - len(base)) + b"}"
    assert len(padded) == 4096
    add(
        "receipt_exactly_4096_bytes",
        "The receipt header may be up to 4096 bytes (here padded with insignificant whitespace).",
        padded,
        *ex,
    )
    add(
        "receiver_served_under_its_other_spelling",
        "The record's route declares receivers (the vector's receivers field); the receipt names the auditor as "
        "tulpa:z..., the route lists it as ink:z...: one key, one canonical principal, so the route serves it.",
        compact(receipt_fields(nonce_label="served-alias", receiver=AUDITOR.tulpa)),
        *ex,
        receivers=["planner", AUDITOR.ink],
    )
    return vs


# --------------------------------------------------------------- invalid.json


def build_invalid() -> list[dict[str, Any]]:
    vs: list[dict[str, Any]] = []

    def add(name: str, description: str, value: bytes | None, headers: list[tuple[str, bytes | None]], reason: str, **extra: Any) -> None:
        vs.append(record(name, description, len(vs), value, headers, "reject", reason, **extra))

    def signed(
        name: str, description: str, receipt: bytes, reason: str, signer: Signer = EXECUTOR, payload: bytes = HANDOFF_PAYLOAD, **extra: Any
    ) -> None:
        add(name, description, payload, headers_for(receipt, signer.sig_header(receipt)), reason, **extra)

    def fields(label: str, **kw: Any) -> dict[str, Any]:
        return receipt_fields(nonce_label="invalid-" + label, **kw)

    good = compact(fields("good"))
    good_sig = EXECUTOR.sig_header(good)

    # --- the record: headers, value, signature encoding
    add("missing_receipt_header", "No busguard-receipt header.", HANDOFF_PAYLOAD, headers_for(None, good_sig), "missing_header")
    add("missing_signature_header", "No busguard-signature header.", HANDOFF_PAYLOAD, headers_for(good, None), "missing_header")
    add(
        "header_names_are_case_sensitive",
        "'Busguard-Receipt' is not 'busguard-receipt' (names are matched exactly), but it does carry the reserved "
        "prefix in another case, which is refused before anything else.",
        HANDOFF_PAYLOAD,
        [("Busguard-Receipt", good), (HEADER_SIGNATURE, good_sig)],
        "reserved_header",
    )
    add(
        "duplicate_receipt_header",
        "busguard-receipt twice (even with identical values).",
        HANDOFF_PAYLOAD,
        headers_for(good, good_sig, [(HEADER_RECEIPT, good)]),
        "duplicate_header",
    )
    add(
        "duplicate_signature_header",
        "busguard-signature twice.",
        HANDOFF_PAYLOAD,
        headers_for(good, good_sig, [(HEADER_SIGNATURE, good_sig)]),
        "duplicate_header",
    )
    add(
        "reserved_header",
        "Any other header whose name starts with 'busguard-' is reserved for busguard's own output.",
        HANDOFF_PAYLOAD,
        headers_for(good, good_sig, [("busguard-attestation", b"{}")]),
        "reserved_header",
    )
    add(
        "reserved_header_any_case",
        "The reserved prefix is matched case-insensitively: some clients fold header names.",
        HANDOFF_PAYLOAD,
        headers_for(good, good_sig, [("Busguard-Trace", b"t")]),
        "reserved_header",
    )
    add(
        "null_value",
        "A null record value (a tombstone); the payload is required, though it may be empty.",
        None,
        headers_for(good, good_sig),
        "missing_field",
    )
    small = compact(fields("oversized-payload", payload=b"x" * 17))
    add(
        "oversized_payload",
        "17-byte value with max_payload_bytes = 16 (the default limit is 1 048 576 bytes).",
        b"x" * 17,
        headers_for(small, EXECUTOR.sig_header(small)),
        "oversized",
        max_payload_bytes=16,
    )
    sig_text = good_sig.decode()
    std = ("+" + sig_text[1:]).encode()
    add(
        "signature_standard_base64_alphabet",
        "'+' (standard base64) instead of the base64url alphabet.",
        HANDOFF_PAYLOAD,
        headers_for(good, std),
        "bad_base64",
    )
    add(
        "signature_padded",
        "Padding '==' is not allowed (exactly 86 characters).",
        HANDOFF_PAYLOAD,
        headers_for(good, good_sig + b"=="),
        "bad_base64",
    )
    add("signature_85_chars", "One character short.", HANDOFF_PAYLOAD, headers_for(good, good_sig[:85]), "bad_base64")
    noncanon = good_sig[:85] + {b"A": b"B", b"Q": b"R", b"g": b"h", b"w": b"x"}[good_sig[85:]]
    add(
        "signature_non_canonical_last_char",
        "The 86th character carries 2 data bits and 4 zero bits, so it must be one of A, Q, g, w; any other decodes "
        "to the same 64 bytes and is refused so one signature has one spelling.",
        HANDOFF_PAYLOAD,
        headers_for(good, noncanon),
        "bad_base64",
    )
    add("signature_trailing_newline", "No whitespace anywhere.", HANDOFF_PAYLOAD, headers_for(good, good_sig[:85] + b"\n"), "bad_base64")

    # --- the receipt: JSON structure
    add("receipt_not_json", "Not JSON.", HANDOFF_PAYLOAD, headers_for(b"not json", good_sig), "not_json")
    arr = b'["v",1]'
    add("receipt_json_array", "JSON, but not an object.", HANDOFF_PAYLOAD, headers_for(arr, EXECUTOR.sig_header(arr)), "not_json")
    add("receipt_empty", "Empty receipt header value.", HANDOFF_PAYLOAD, headers_for(b"", good_sig), "not_json")
    add(
        "receipt_null_header_value",
        "A null header value reads as empty.",
        HANDOFF_PAYLOAD,
        headers_for(None, good_sig, [(HEADER_RECEIPT, None)]),
        "not_json",
    )
    bad_utf8 = good.replace(b'"task-0001"', b'"task-\xff"')
    signed("receipt_invalid_utf8", "Receipt bytes must be UTF-8.", bad_utf8, "not_json")
    signed("receipt_utf8_bom", "No byte order mark.", b"\xef\xbb\xbf" + good, "not_json")
    signed("receipt_trailing_data", "One JSON value and nothing after it but whitespace.", good + b"{}", "not_json")
    lone = good.replace(b'"task-0001"', b'"task-\\ud800"')
    signed("receipt_lone_surrogate_escape", "A \\u escape of an unpaired surrogate is not a character.", lone, "not_json")
    signed("wrong_type_v_string", '"v":"1"', compact(fields("v-string", v="1")), "wrong_type")
    signed("wrong_type_v_float", '"v":1.0 is a float, not an integer.', good.replace(b'"v":1,', b'"v":1.0,'), "wrong_type")
    signed(
        "wrong_type_sequence_string",
        "sequence must be a JSON integer.",
        compact(fields("seq-string", session_id=session("x"), sequence="5")),
        "wrong_type",
    )
    signed(
        "wrong_type_required_null",
        "null for a required field is a wrong type, not a missing field.",
        compact(fields("nonce-null", nonce=None), drop_none=False),
        "wrong_type",
    )
    signed("wrong_type_task_id_number", "task_id must be a string.", compact(fields("task-number", task_id=7)), "wrong_type")
    no_kind = {k: v for k, v in fields("no-kind").items() if k != "kind"}
    signed("missing_field_kind", "kind is required.", compact(no_kind), "missing_field")
    no_hash = {k: v for k, v in fields("no-hash").items() if k != "payload_hash"}
    signed("missing_field_payload_hash", "payload_hash is required.", compact(no_hash), "missing_field")
    signed(
        "unknown_field",
        "Fields outside the schema are refused (they would be signed but unread).",
        compact(fields("unknown", note="hello")),
        "unknown_field",
    )
    dup = good[:-1] + b',"nonce":"' + nonce("other").encode() + b'"}'
    signed("duplicate_key", "A key twice: two parsers could read different values from one signed string.", dup, "duplicate_key")
    esc = good[:-1] + b',"\\u006eonce":"' + nonce("other").encode() + b'"}'
    signed("duplicate_key_escaped_spelling", '"\\u006eonce" is the key "nonce".', esc, "duplicate_key")
    same = good[:-1] + b',"kind":"handoff"}'
    signed("duplicate_key_same_value", "Even a repeated key with the same value.", same, "duplicate_key")
    over = good[:-1] + b" " * (4097 - len(good)) + b"}"
    assert len(over) == 4097
    signed("oversized_receipt", "The receipt header is 4097 bytes; at most 4096.", over, "oversized")

    # --- the receipt: values
    signed("unsupported_version_2", "v must be 1.", compact(fields("v2", v=2)), "unsupported_version")
    signed("unsupported_version_0", "v must be 1.", compact(fields("v0", v=0)), "unsupported_version")
    signed("unknown_kind", "Only the kinds busguard guards (handoff, ack).", compact(fields("kind", kind="bid-xyz")), "unknown_kind")
    signed("unknown_kind_case", "Kinds are case-sensitive.", compact(fields("kind-case", kind="Handoff")), "unknown_kind")
    signed("task_id_empty", "task_id is 1-256 characters.", compact(fields("task-empty", task_id="")), "malformed_field")
    signed("task_id_257_chars", "task_id is 1-256 characters.", compact(fields("task-long", task_id="t" * 257)), "malformed_field")
    signed(
        "payload_hash_uppercase",
        "payload_hash is 64 lowercase hex digits.",
        compact(fields("hash-upper", payload_hash=hashlib.sha256(HANDOFF_PAYLOAD).hexdigest().upper())),
        "malformed_field",
    )
    signed(
        "payload_hash_short",
        "payload_hash is 64 lowercase hex digits.",
        compact(fields("hash-short", payload_hash=hashlib.sha256(HANDOFF_PAYLOAD).hexdigest()[:63])),
        "malformed_field",
    )
    signed("key_id_empty", "key_id, when present, is 1-128 characters.", compact(fields("keyid-empty", key_id="")), "malformed_field")
    signed("sender_empty", "Agent ids are never empty.", compact(fields("sender-empty", sender="")), "malformed_agent_id")
    signed(
        "sender_513_chars",
        "Agent ids are at most 512 UTF-16 code units.",
        compact(fields("sender-long", sender="a" * 513)),
        "malformed_agent_id",
    )
    signed(
        "receiver_514_utf16_units",
        "257 astral characters are 257 code points but 514 UTF-16 code units: over the 512 cap.",
        compact(fields("receiver-astral", receiver="\U0001f600" * 257)),
        "malformed_agent_id",
    )
    signed("nonce_15_chars", "Nonces are 16-256 characters.", compact(fields("n15", nonce="Ab3_-Ab3_-Ab3_-")), "malformed_nonce")
    signed("nonce_257_chars", "Nonces are 16-256 characters.", compact(fields("n257", nonce="N" * 257)), "malformed_nonce")
    signed("nonce_padding_char", "'=' is not in [A-Za-z0-9_-].", compact(fields("n-pad", nonce=nonce("pad") + "==")), "malformed_nonce")
    signed(
        "nonce_standard_base64_chars",
        "'+' and '/' are not in [A-Za-z0-9_-].",
        compact(fields("n-std", nonce="abc+def/ghi+jkl/mno")),
        "malformed_nonce",
    )
    signed("nonce_non_ascii", "Only ASCII letters and digits.", compact(fields("n-utf", nonce="é" * 22)), "malformed_nonce")
    for label, value, why in [
        ("lowercase_t", "2026-11-29t11:59:58.250Z", "The T must be uppercase."),
        ("lowercase_z", "2026-11-29T11:59:58.250z", "The Z must be uppercase."),
        ("space_separator", "2026-11-29 11:59:58.250Z", "A space is not T."),
        ("no_zone", "2026-11-29T11:59:58.250", "A zone (Z or an offset) is required."),
        ("leap_second", "2026-11-29T11:59:60Z", "Seconds are 00-59: leap seconds are not accepted."),
        ("comma_fraction", "2026-11-29T11:59:58,250Z", "The fraction separator is '.'."),
        ("offset_hour_24", "2026-11-29T11:59:58.250+24:00", "Offset hours are 00-23."),
        ("offset_without_colon", "2026-11-29T11:59:58.250+0100", "Offsets are +HH:MM."),
        ("invalid_date", "2026-02-29T11:59:58.250Z", "2026 is not a leap year."),
        ("two_digit_year", "26-11-29T11:59:58.250Z", "Four-digit years."),
        ("epoch_number", "1796040000000", "Not a number of milliseconds."),
        ("65_chars", "2026-11-29T11:59:58." + "0" * 44 + "Z", "At most 64 characters."),
    ]:
        signed(f"timestamp_{label}", why, compact(fields("ts-" + label, issued_at=value)), "malformed_timestamp")
    signed(
        "session_without_sequence",
        "session_id and sequence come together.",
        compact(fields("s-noseq", session_id=session("a"))),
        "malformed_session",
    )
    signed(
        "sequence_without_session", "session_id and sequence come together.", compact(fields("seq-nosess", sequence=4)), "malformed_session"
    )
    signed(
        "sequence_negative", "sequence is 0..2^63-1.", compact(fields("seq-neg", session_id=session("a"), sequence=-1)), "malformed_session"
    )
    signed(
        "sequence_2_pow_63",
        "sequence is 0..2^63-1.",
        compact(fields("seq-big", session_id=session("a"), sequence=2**63)),
        "malformed_session",
    )
    signed(
        "session_id_empty", "session_id is 1-128 characters.", compact(fields("sess-empty", session_id="", sequence=0)), "malformed_session"
    )
    signed(
        "session_id_129_chars",
        "session_id is 1-128 characters.",
        compact(fields("sess-long", session_id="s" * 129, sequence=0)),
        "malformed_session",
    )

    # --- freshness
    signed(
        "timestamp_expired",
        "issued_at 300 001 ms before the receiver clock.",
        compact(fields("expired", issued_at=ts(NOW_MS - 300_001))),
        "timestamp_expired",
    )
    signed(
        "timestamp_too_far_future",
        "issued_at 30 001 ms after the receiver clock.",
        compact(fields("future", issued_at=ts(NOW_MS + 30_001))),
        "timestamp_too_far_future",
    )

    # --- authenticity
    tampered = compact(fields("hash-mismatch"))
    add(
        "payload_hash_mismatch",
        "The value is not the one the receipt's payload_hash commits to (one byte appended).",
        HANDOFF_PAYLOAD + b" ",
        headers_for(tampered, EXECUTOR.sig_header(tampered)),
        "payload_hash_mismatch",
    )
    signed(
        "unknown_sender_self_certifying",
        "A well-formed tulpa: id that is not in the registry (open_enrollment is false).",
        compact(fields("mallory", sender=MALLORY.tulpa)),
        "unknown_sender",
        signer=MALLORY,
    )
    bogus = "tulpa:z6MkNotAKey" + "1" * 31
    signed(
        "unknown_sender_malformed_multikey",
        "A tulpa: id whose body is not a canonical Ed25519 multikey is not a key; it becomes the principal "
        "raw:tulpa:..., which nobody registered.",
        compact(fields("bogus-mk", sender=bogus)),
        "unknown_sender",
        signer=MALLORY,
    )
    signed(
        "unknown_sender_uppercase_prefix",
        "Prefixes are case-sensitive: 'TULPA:' is a plain name, not a key-bearing id.",
        compact(fields("upper-prefix", sender="TULPA:" + EXECUTOR.multikey)),
        "unknown_sender",
    )
    signed(
        "unknown_key_id",
        "The agent has no key with this id.",
        compact(fields("k9", sender="planner", key_id="2027-q1")),
        "unknown_key",
        signer=Q4,
    )
    signed(
        "unknown_key_id_self_certifying",
        "A self-certifying agent's only key id is its own multikey.",
        compact(fields("tulpa-k1", key_id="k1")),
        "unknown_key",
    )
    signed(
        "expired_key",
        "Key 2026-q3's validity ended 2026-10-01 (judged at the receiver's clock).",
        compact(fields("q3", sender="planner", key_id="2026-q3")),
        "expired_key",
        signer=Q3,
    )
    signed(
        "revoked_key",
        "Key 'leaked' was revoked at 2026-11-15 (judged at the receiver's clock, whatever issued_at says).",
        compact(fields("leaked", sender="planner", key_id="leaked", issued_at=ts(NOW_MS - 1000))),
        "revoked_key",
        signer=LEAKED,
    )
    signed(
        "revoked_key_not_named",
        "Without key_id only currently valid keys are tried, so a receipt signed by the revoked key fails as a bad signature.",
        compact(fields("leaked-no-id", sender="planner")),
        "bad_signature",
        signer=LEAKED,
    )
    r = compact(fields("bad-sig"))
    sig = bytearray(EXECUTOR.sign(SIGNING_CONTEXT + r))
    sig[10] ^= 0x01
    add(
        "bad_signature_bit_flip",
        "One bit of the signature flipped (still canonical base64url).",
        HANDOFF_PAYLOAD,
        headers_for(r, b64url(bytes(sig)).encode()),
        "bad_signature",
    )
    signed(
        "bad_signature_wrong_key",
        "The receipt names the executor as sender but Mallory signed it.",
        compact(fields("wrong-key")),
        "bad_signature",
        signer=MALLORY,
    )
    r = compact(fields("no-context"))
    add(
        "bad_signature_no_domain_separation",
        "Signed over the receipt bytes alone, without 'busguard/receipt/v1' 0x00 in front.",
        HANDOFF_PAYLOAD,
        headers_for(r, b64url(EXECUTOR.sign(r)).encode()),
        "bad_signature",
    )
    f = fields("reserialised")
    pretty = json.dumps({k: v for k, v in f.items() if v is not None}, indent=1).encode()
    add(
        "bad_signature_over_other_serialisation",
        "Signed over the compact JSON but sent pretty-printed: the signature covers bytes, not the parsed object.",
        HANDOFF_PAYLOAD,
        headers_for(pretty, EXECUTOR.sig_header(compact(f))),
        "bad_signature",
    )
    r = compact(fields("all-zero-sig"))
    add("bad_signature_all_zero", "64 zero bytes.", HANDOFF_PAYLOAD, headers_for(r, b"A" * 86), "bad_signature")

    # --- routing (a vector's receivers: the receivers its route declares)
    signed(
        "wrong_receiver",
        "The receipt is for 'planner'; the record's route serves only the auditor.",
        compact(fields("wrong-receiver")),
        "wrong_receiver",
        receivers=[AUDITOR.ink],
    )
    add(
        "wrong_receiver_before_signature",
        "Checked before the signature: a record for another receiver is wrong_receiver even with a bad signature "
        "(and, like every reject, uses up nothing).",
        HANDOFF_PAYLOAD,
        headers_for(compact(fields("wrong-receiver-forged")), b"A" * 86),
        "wrong_receiver",
        receivers=["auditor"],
    )
    return vs


# ------------------------------------------------------------- sequences.json


class Scenario:
    def __init__(self, name: str, description: str, *, policy: dict[str, Any] | None = None, store_created_ms: int | None = None) -> None:
        self.name = name
        self.description = description
        self.policy = policy
        self.store_created_ms = store_created_ms
        self.steps: list[dict[str, Any]] = []
        self._batch = -1

    def step(
        self,
        description: str,
        receipt: bytes,
        signer: Signer,
        outcome: str,
        reason: str,
        *,
        payload: bytes = HANDOFF_PAYLOAD,
        sig: bytes | None = None,
        same_batch: bool = False,
        offset: int | None = None,
        now_ms: int | None = None,
        **expect: Any,
    ) -> str:
        if not same_batch:
            self._batch += 1
        off = len(self.steps) if offset is None else offset
        rid = receipt_id(receipt)
        vec = record(
            f"step-{len(self.steps)}",
            description,
            off,
            payload,
            headers_for(receipt, sig if sig is not None else signer.sig_header(receipt)),
            outcome,
            reason,
            receipt_id=rid,
            **expect,
        )
        del vec["name"]
        if self.policy and "namespace" in self.policy:
            vec["expect"]["decision_id"] = decision_id(off, self.policy["namespace"])
        vec = {"batch": self._batch, **vec}
        if now_ms is not None:
            vec["now"] = ts(now_ms)
        self.steps.append(vec)
        return rid

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "description": self.description}
        if self.policy:
            out["policy"] = self.policy
        if self.store_created_ms is not None:
            out["store_created_at"] = ts(self.store_created_ms)
        out["steps"] = self.steps
        return out


def build_sequences() -> list[dict[str, Any]]:
    out: list[Scenario] = []
    ex_tulpa = EXECUTOR.tulpa

    def r(label: str, **kw: Any) -> bytes:
        return compact(receipt_fields(nonce_label="seq-" + label, **kw))

    s = Scenario(
        "exact_duplicate", "The same signed statement again: not forwarded again; the prior admission is returned (idempotent ack)."
    )
    a = r("dup-a")
    first = s.step("first copy", a, EXECUTOR, "forward", "admitted")
    s.step("the same record again", a, EXECUTOR, "duplicate", "exact_duplicate", prior_receipt_id=first)
    s.step(
        "same nonce, task and payload, re-stamped issued_at (different bytes, same statement)",
        r("dup-a", issued_at=ts(NOW_MS - 500)),
        EXECUTOR,
        "duplicate",
        "exact_duplicate",
        prior_receipt_id=first,
    )
    s.step(
        "re-delivery of step 0 at its original coordinates (after a crash before the offset commit): "
        "the stored decision comes back unchanged, decision id included",
        a,
        EXECUTOR,
        "forward",
        "admitted",
        offset=0,
    )
    out.append(s)

    s = Scenario("two_copies_in_one_batch", "Two copies of one receipt in one poll: the second sees the first's effects.")
    a = r("batch-a")
    first = s.step("first copy", a, EXECUTOR, "forward", "admitted")
    s.step("second copy, same batch", a, EXECUTOR, "duplicate", "exact_duplicate", same_batch=True, prior_receipt_id=first)
    out.append(s)

    sess = session("planner-boot-7")
    s = Scenario(
        "retransmission_with_supersedes",
        "Seed 000's corrective pattern: after a crash the sender resends the task with a fresh nonce, the same "
        "session and a strictly greater sequence (it jumped past its reserved block). Recorded, not forwarded, "
        "linked to the first admission.",
    )
    first = s.step(
        "original handoff, sequence 17",
        r("rt-a", sender="planner", receiver=ex_tulpa, session_id=sess, sequence=17, key_id="2026-q4"),
        Q4,
        "forward",
        "admitted",
    )
    retry = r("rt-b", sender="planner", receiver=ex_tulpa, session_id=sess, sequence=128, key_id="2026-q4")
    s.step(
        "restart: same task and payload, fresh nonce, sequence 128",
        retry,
        Q4,
        "duplicate",
        "retransmission",
        supersedes=first,
        prior_receipt_id=first,
    )
    s.step("the retransmission record replayed", retry, Q4, "reject", "nonce_replay")
    s.step(
        "a second restart, sequence 192: supersedes still points at the first admission (the task's witness)",
        r("rt-c", sender="planner", receiver=ex_tulpa, session_id=sess, sequence=192, key_id="2026-q4"),
        Q4,
        "duplicate",
        "retransmission",
        supersedes=first,
        prior_receipt_id=first,
    )
    out.append(s)

    s = Scenario(
        "ambiguous_retransmission_legacy",
        "Nonce-only receipts: same task and payload under a new nonce cannot be told apart from a second "
        "witness, so it is escalated to reconciliation with a supersedes link, never forwarded.",
    )
    first = s.step("original", r("amb-a"), EXECUTOR, "forward", "admitted")
    b = r("amb-b")
    s.step(
        "same task and payload, new nonce, no session",
        b,
        EXECUTOR,
        "escalate",
        "ambiguous_retransmission",
        supersedes=first,
        prior_receipt_id=first,
    )
    s.step("the escalated record replayed: its nonce was recorded", b, EXECUTOR, "reject", "nonce_replay")
    out.append(s)

    s = Scenario("ambiguous_retransmission_other_session", "A different session is not a crash recovery of the first.")
    first = s.step("original in session A", r("os-a", session_id=session("A"), sequence=0), EXECUTOR, "forward", "admitted")
    s.step(
        "same task and payload from session B",
        r("os-b", session_id=session("B"), sequence=0),
        EXECUTOR,
        "escalate",
        "ambiguous_retransmission",
        supersedes=first,
        prior_receipt_id=first,
    )
    out.append(s)

    s = Scenario(
        "ambiguous_retransmission_lower_sequence",
        "Same session but a smaller sequence than the admitted one: signed before it, so not a recovery resend.",
    )
    first = s.step("original, sequence 10", r("low-a", session_id=session("L"), sequence=10), EXECUTOR, "forward", "admitted")
    s.step(
        "same task and payload, fresh nonce, sequence 5 (inside the window, unseen)",
        r("low-b", session_id=session("L"), sequence=5),
        EXECUTOR,
        "escalate",
        "ambiguous_retransmission",
        supersedes=first,
        prior_receipt_id=first,
    )
    out.append(s)

    s = Scenario("task_conflict", "Same task, different payload: escalated (conflict), no supersedes link, even within a session.")
    first = s.step("original", r("tc-a", session_id=session("T"), sequence=1), EXECUTOR, "forward", "admitted")
    other = b'{"op":"transform","input":"s3://bucket/OTHER.parquet"}'
    s.step(
        "same task, other payload, next sequence",
        r("tc-b", session_id=session("T"), sequence=2, payload=other),
        EXECUTOR,
        "escalate",
        "task_conflict",
        payload=other,
        prior_receipt_id=first,
    )
    out.append(s)

    s = Scenario("nonce_replay", "A nonce is single-use for the retention window (global scope: across all senders).")
    s.step("task t1 with nonce N", r("nr", task_id="t1"), EXECUTOR, "forward", "admitted")
    s.step("task t2, same sender, same nonce N", r("nr", task_id="t2"), EXECUTOR, "reject", "nonce_replay")
    s.step(
        "another sender's ack reusing nonce N",
        r("nr", kind="ack", task_id="t1", sender=AUDITOR.ink, receiver=ex_tulpa, payload=ACK_PAYLOAD),
        AUDITOR,
        "reject",
        "nonce_replay",
        payload=ACK_PAYLOAD,
    )
    out.append(s)

    s = Scenario(
        "nonce_scope_principal",
        "With nonce_scope = principal, nonces are per canonical principal; tulpa: and ink: spellings of one key share one scope.",
        policy={"nonce_scope": "principal"},
    )
    s.step("executor, nonce N", r("ns", task_id="t1"), EXECUTOR, "forward", "admitted")
    s.step(
        "auditor (ink:), same nonce N: another principal",
        r("ns", kind="ack", task_id="t1", sender=AUDITOR.ink, receiver=ex_tulpa, payload=ACK_PAYLOAD),
        AUDITOR,
        "forward",
        "admitted",
        payload=ACK_PAYLOAD,
    )
    s.step(
        "auditor under its tulpa: spelling, nonce N again: same principal key:z...",
        r("ns", kind="ack", task_id="t2", sender=AUDITOR.tulpa, receiver=ex_tulpa, payload=ACK_PAYLOAD),
        AUDITOR,
        "reject",
        "nonce_replay",
        payload=ACK_PAYLOAD,
    )
    out.append(s)

    s = Scenario(
        "sequence_replay",
        "A (principal, session, sequence) is single-use, whatever the nonce; the window is keyed on the canonical principal.",
    )
    sq = session("R")
    s.step("task a, sequence 3", r("sr-a", task_id="a", session_id=sq, sequence=3), EXECUTOR, "forward", "admitted")
    s.step(
        "task b, fresh nonce, sequence 3 again", r("sr-b", task_id="b", session_id=sq, sequence=3), EXECUTOR, "reject", "sequence_replay"
    )
    s.step(
        "task c under the ink: spelling of the same key, sequence 3",
        r("sr-c", task_id="c", sender=EXECUTOR.ink, session_id=sq, sequence=3),
        EXECUTOR,
        "reject",
        "sequence_replay",
    )
    s.step(
        "task d, sequence 2: below the top but inside the window and unseen",
        r("sr-d", task_id="d", session_id=sq, sequence=2),
        EXECUTOR,
        "forward",
        "admitted",
    )
    out.append(s)

    s = Scenario(
        "sequence_too_old",
        "Sliding window of 8: with top T, sequences T-7..T are judged by the bitmap, T-8 and below are too old.",
        policy={"window_size": 8},
    )
    sw = session("W")
    for i, (seq, outcome, reason, why) in enumerate(
        [
            (0, "forward", "admitted", "sequence 0"),
            (20, "forward", "admitted", "sequence 20 slides the window to 13..20"),
            (12, "reject", "sequence_too_old", "sequence 12 = top - 8: left of the window"),
            (13, "forward", "admitted", "sequence 13 = top - 7: inside the window, unseen"),
            (13, "reject", "sequence_replay", "sequence 13 again (fresh nonce, other task)"),
            (0, "reject", "sequence_too_old", "sequence 0 again: long forgotten, too old"),
            (21, "forward", "admitted", "sequence 21 slides the window to 14..21"),
            (13, "reject", "sequence_too_old", "sequence 13 is now left of the window"),
        ]
    ):
        s.step(why, r(f"sw-{i}", task_id=f"w{i}", session_id=sw, sequence=seq), EXECUTOR, outcome, reason)
    out.append(s)

    created = NOW_MS - 10_000
    s = Scenario(
        "store_warming",
        "A store that may replace a lost one (created, or re-armed, 10 s before the clock: its trusted-from time T) "
        "refuses every record issued at most max_future_ms after T (a store deciding at or before T could have "
        "admitted it) while such a record can still be fresh: until T + max_future_ms + max_age_ms, inclusive.",
        store_created_ms=created,
    )
    s.step(
        "issued 20 s ago, before the store existed",
        r("sw-a", task_id="wa", issued_at=ts(NOW_MS - 20_000)),
        EXECUTOR,
        "reject",
        "store_warming",
    )
    s.step("issued exactly at T", r("sw-b", task_id="wb", issued_at=ts(created)), EXECUTOR, "reject", "store_warming")
    s.step("issued 5 s ago, after T", r("sw-c", task_id="wc", issued_at=ts(NOW_MS - 5_000)), EXECUTOR, "reject", "store_warming")
    s.step(
        "issued exactly T + max_future_ms (20 s ahead of the clock)",
        r("sw-d", task_id="wd", issued_at=ts(created + 30_000)),
        EXECUTOR,
        "reject",
        "store_warming",
    )
    s.step(
        "issued T + max_future_ms + 1: no store deciding at or before T could admit it",
        r("sw-e", task_id="we", issued_at=ts(created + 30_001)),
        EXECUTOR,
        "forward",
        "admitted",
    )
    late = created + 330_000
    s.step(
        "the window's last millisecond, issued T + max_future_ms (300 000 ms old: fresh)",
        r("sw-f", task_id="wf", issued_at=ts(created + 30_000)),
        EXECUTOR,
        "reject",
        "store_warming",
        now_ms=late,
    )
    s.step(
        "window over: issued 1 s ago",
        r("sw-g", task_id="wg", issued_at=ts(late + 1 - 1_000)),
        EXECUTOR,
        "forward",
        "admitted",
        now_ms=late + 1,
    )
    s.step(
        "window over: issued T + max_future_ms is now 300 001 ms old",
        r("sw-h", task_id="wh", issued_at=ts(created + 30_000)),
        EXECUTOR,
        "reject",
        "timestamp_expired",
        now_ms=late + 1,
    )
    out.append(s)

    s = Scenario(
        "rejects_record_nothing",
        "Nothing is recorded for a record whose signature does not verify: a forger "
        "cannot burn the nonce, sequence or task of the genuine record.",
    )
    a = r("forged", session_id=session("F"), sequence=0)
    s.step("Mallory's signature over the executor's receipt", a, EXECUTOR, "reject", "bad_signature", sig=MALLORY.sig_header(a))
    s.step("the genuine record", a, EXECUTOR, "forward", "admitted")
    out.append(s)

    s = Scenario("kinds_are_separate_task_spaces", "The task index is keyed on (kind, task_id).")
    s.step("handoff task-k", r("kind-h", task_id="task-k"), EXECUTOR, "forward", "admitted")
    s.step(
        "ack task-k",
        r("kind-a", kind="ack", task_id="task-k", sender=AUDITOR.ink, receiver=ex_tulpa, payload=ACK_PAYLOAD),
        AUDITOR,
        "forward",
        "admitted",
        payload=ACK_PAYLOAD,
    )
    out.append(s)

    s = Scenario(
        "task_ids_are_shared_across_senders",
        "The task index is keyed on (kind, task_id) only, not on the sender: a second sender using an admitted "
        "task id is escalated (same payload: ambiguous, different payload: conflict).",
    )
    first = s.step(
        "planner admits task-shared", r("sh-a", task_id="task-shared", sender="planner", receiver=ex_tulpa), Q4, "forward", "admitted"
    )
    s.step(
        "router, same task id and payload",
        r("sh-b", task_id="task-shared", sender=ROUTER_ID),
        ROUTER,
        "escalate",
        "ambiguous_retransmission",
        supersedes=first,
        prior_receipt_id=first,
    )
    other = b"other"
    s.step(
        "executor, same task id, other payload",
        r("sh-c", task_id="task-shared", payload=other),
        EXECUTOR,
        "escalate",
        "task_conflict",
        payload=other,
        prior_receipt_id=first,
    )
    out.append(s)

    return [sc.to_json() for sc in out]


# ---------------------------------------------------------------------- files


# ------------------------------------------------------------- resolutions.json
#
# What the auditor checks about who resolved what (docs/protocol.md 12.1,
# 12.3, 12.4): decisions sealed with the guard key, resolutions with the
# reconciler key, and an operator's name proven by the operator's own
# signature over the resolve command the resolution carries.

ATTESTATION_CONTEXT = b"busguard/attestation/v1\x00"
COMMAND_CONTEXT = b"busguard/command/v1\x00"
RESOLUTION_ID_CONTEXT = b"busguard/resolution/v1\x00"
ROLE_SIGNERS = {name: Signer(name) for name in ("guard", "reconciler", "operator-alice", "operator-bob")}
GUARD, RECONCILER, ALICE, BOB = (ROLE_SIGNERS[n] for n in ("guard", "reconciler", "operator-alice", "operator-bob"))
ESC_TASK = "t-conflict"
WITNESS_ID, ESCALATION_ID = decision_id(10), decision_id(11)
RESOLVED_AT = NOW_MS + 60_000
RECONCILE_SOURCE = {"topic": "busguard.reconciliation", "partition": 0, "offset": 4}


def _json(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sealed(
    value: bytes, sealer: Signer, record_id: str, outcome: str, reason: str, receipt: str | None, source: dict[str, Any], at: int
) -> list[list[str]]:
    """The three headers every busguard record carries, built by hand."""
    att = _json({"v": 1, "guard": "tulpa:" + sealer.multikey, "decision_id": record_id, "outcome": outcome, "reason": reason,
                 "receipt_id": receipt, "source": source, "decided_at": at, "decision_sha256": hashlib.sha256(value).hexdigest()})  # fmt: skip
    seal = b64url(sealer.sign(ATTESTATION_CONTEXT + att)).encode("ascii")
    return [
        [k, b64(v) or ""] for k, v in (("busguard-decision-id", record_id.encode()), ("busguard-attestation", att), ("busguard-seal", seal))
    ]


def resolution_log() -> list[dict[str, Any]]:
    """The guard's two decisions about the task: its admission and the conflicting re-send."""
    witness_rid, conflict_rid = hashlib.sha256(b"vectors-witness").hexdigest(), hashlib.sha256(b"vectors-conflict").hexdigest()
    out = []
    for did, outcome, reason, rid, offset in (
        (WITNESS_ID, "forward", "admitted", witness_rid, 10),
        (ESCALATION_ID, "escalate", "task_conflict", conflict_rid, 11),
    ):
        src = {"topic": TOPIC, "partition": 0, "offset": offset}
        fields = {"type": "decision", "decision_id": did, "outcome": outcome, "reason": reason, "source": src, "decided_at": NOW_MS,
                  "receipt_id": rid, "kind": "handoff", "task_id": ESC_TASK}  # fmt: skip
        value = _json(fields)
        out.append({"description": f"the guard's {outcome} decision", "value_b64": b64(value),
                    "headers": sealed(value, GUARD, did, outcome, reason, rid, src, NOW_MS)})  # fmt: skip
    return out


def resolve_command(operator: str, resolve_as: str = "reject", note: str = "payload differs; planner asked to re-issue") -> bytes:
    return _json(
        {"v": 1, "escalation_id": ESCALATION_ID, "resolve_as": resolve_as, "operator": operator, "note": note, "issued_at": NOW_MS + 30_000}
    )


def resolution_vector(description: str, stage: str, expect: list[str], *, by: str = "policy", resolved_as: str | None = "reject",
                      note: str = "payload differs; planner asked to re-issue", command: dict[str, Any] | None = None,
                      sealer: Signer = RECONCILER) -> dict[str, Any]:  # fmt: skip
    rid = hashlib.sha256(RESOLUTION_ID_CONTEXT + f"{ESCALATION_ID}\x00{stage}".encode()).hexdigest()[:32]
    fields: dict[str, Any] = {"type": "resolution", "resolution_id": rid, "escalation_id": ESCALATION_ID, "stage": stage}
    if stage == "final":
        fields["resolved_as"] = resolved_as
    fields.update({"by": by, "note": note, "kind": "handoff", "task_id": ESC_TASK, "source": RECONCILE_SOURCE, "resolved_at": RESOLVED_AT})
    if command is not None:
        fields["command"] = command
    value = _json(fields)
    outcome = "resolved" if stage == "final" else "held"
    return {"description": description, "value_b64": b64(value),
            "headers": sealed(value, sealer, rid, outcome, resolved_as or "held", None, RECONCILE_SOURCE, RESOLVED_AT),
            "expect": {"ok": not expect, "violations": expect}}  # fmt: skip


def signed(body: bytes, key: Signer | None, signer: Signer | None) -> dict[str, Any]:
    """A resolution's `command`: the exact bytes, the seal by `key` (None: the guard key), the claimed signer."""
    out: dict[str, Any] = {"body": b64(body), "seal": b64url((key or GUARD).sign(COMMAND_CONTEXT + body))}
    if signer is not None:
        out["signer"] = signer.multikey
    return out


def build_resolutions() -> list[dict[str, Any]]:
    alice_says = resolve_command("alice")
    return [
        resolution_vector(
            "held for an operator by the policy, sealed with the reconciler key", "held", [], resolved_as=None, note="task_conflict: held"
        ),
        resolution_vector(
            "alice's resolution, carrying the command she signed with her key",
            "final",
            [],
            by="operator:alice",
            command=signed(alice_says, ALICE, ALICE),
        ),
        resolution_vector(
            "alice's genuine resolution, but sealed with the guard key",
            "final",
            ["guard_sealed_resolution"],
            by="operator:alice",
            command=signed(alice_says, ALICE, ALICE),
            sealer=GUARD,
        ),  # fmt: skip
        resolution_vector("names alice, no command", "final", ["unproven_operator"], by="operator:alice"),
        resolution_vector(
            "names alice, command signed with the guard key (no signer)",
            "final",
            ["unproven_operator"],
            by="operator:alice",
            command=signed(alice_says, None, None),
        ),  # fmt: skip
        resolution_vector(
            "names alice, command claims alice's key but mallory signed it",
            "final",
            ["unproven_operator"],
            by="operator:alice",
            command=signed(alice_says, SIGNERS["mallory"], ALICE),
        ),  # fmt: skip
        resolution_vector(
            "names alice, command genuinely signed by bob (naming alice)",
            "final",
            ["unproven_operator"],
            by="operator:alice",
            command=signed(alice_says, BOB, BOB),
        ),  # fmt: skip
        resolution_vector(
            "alice signed resolve_as replay; the resolution says reject",
            "final",
            ["unproven_operator"],
            by="operator:alice",
            command=signed(resolve_command("alice", "replay"), ALICE, ALICE),
        ),  # fmt: skip
        resolution_vector(
            "names carol, who is not in the operators file",
            "final",
            ["unproven_operator"],
            by="operator:carol",
            command=signed(resolve_command("carol"), SIGNERS["mallory"], SIGNERS["mallory"]),
        ),  # fmt: skip
        resolution_vector(
            "a policy resolution carrying an operator's command", "final", ["unproven_operator"], command=signed(alice_says, ALICE, ALICE)
        ),
        resolution_vector(
            "sealed with neither the guard's nor the reconciler's key", "final", ["forged_record"], sealer=SIGNERS["mallory"]
        ),
    ]


def resolutions_document() -> dict[str, Any]:
    return {
        "format": FORMAT,
        "description": "Resolutions on the audit topic and what `busguard audit` concludes. Judge each vector alone: the "
        "log records (the guard's decisions) plus that one resolution, with guard_public_key, reconciler_public_key and "
        "operators; expect.violations lists the violation codes (sorted), empty when the audit passes. The auditor is "
        "not in single-key mode.",
        "generator": "tests/vectors/generate.py",
        "encoding": {k: ENCODING_NOTES[k] for k in ("value_b64", "headers", "hex")},
        "signers_note": "TEST KEYS ONLY: seed_hex is the RFC 8032 private key, published so other implementations can reproduce every signature",
        "signers": {name: s.describe() for name, s in {**ROLE_SIGNERS, "mallory": SIGNERS["mallory"]}.items()},
        "guard_public_key": GUARD.multikey,
        "reconciler_public_key": RECONCILER.multikey,
        "operators": [{"name": "alice", "public_key": ALICE.multikey}, {"name": "bob", "public_key": BOB.multikey}],
        "log": resolution_log(),
        "vectors": build_resolutions(),
    }


def header(description: str) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "description": description,
        "generator": "tests/vectors/generate.py",
        "encoding": ENCODING_NOTES,
        "now": NOW,
        "now_ms": NOW_MS,
        "store_created_at": ts(STORE_CREATED_MS),
        "policy": POLICY,
        "max_payload_bytes": MAX_PAYLOAD_BYTES,
        "signers_note": "TEST KEYS ONLY: seed_hex is the RFC 8032 private key, published so other implementations can reproduce every signature",
        "signers": {name: s.describe() for name, s in SIGNERS.items()},
        "registry": REGISTRY,
    }


def documents() -> dict[str, dict[str, Any]]:
    return {
        "valid.json": {
            **header(
                "Records busguard must admit (forward/admitted), each alone against a fresh store. A vector may set "
                "receivers: the agent ids its route declares (absent: any receiver)."
            ),
            "vectors": build_valid(),
        },
        "invalid.json": {
            **header(
                "Records busguard must reject, each alone against a fresh store, with the expected reason code. "
                "A vector may set max_payload_bytes (else the file's value applies), and receivers: the agent ids "
                "its route declares (absent: any receiver)."
            ),
            "vectors": build_invalid(),
        },
        "sequences.json": {
            **header(
                "Multi-record scenarios, each against one fresh store (created at store_created_at unless the "
                "scenario says otherwise), steps in order. A scenario's policy overrides the file's policy field by "
                "field; a step's now overrides the file's now."
            ),
            "scenarios": build_sequences(),
        },
        "resolutions.json": resolutions_document(),
    }


def render(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc, indent=2, ensure_ascii=True) + "\n").encode("ascii")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent, help="directory to write the JSON files to")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, doc in documents().items():
        (args.out / name).write_bytes(render(doc))


if __name__ == "__main__":
    main()
