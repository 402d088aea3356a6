#!/usr/bin/env python3
"""Generate the receipt-decoding vectors (docs/protocol.md 3.2-3.3): receipts.json.

One vector per way a `busguard-receipt` header's bytes can be read: the
reason a strict reader gives (`not_json`, `wrong_type`, `unknown_field`,
`missing_field`, `duplicate_key`, `unsupported_version`, `malformed_field`,
`malformed_agent_id`, `malformed_session`, `oversized`) or, for a receipt it
accepts, its receipt id. They pin the "first problem decides" order of 3.3 at
its edges (a type error before a syntax error, an unknown field before its
value, lengths in code points, integers of any size), where a second
implementation (the TypeScript one, ts/) could otherwise read a receipt
differently from busguard.

Deterministic; independent of busguard: every byte string is written out
here, every expected reason by hand from the doc (standard library only).
tests/unit/test_receipt_vectors.py checks the file is reproduced byte for
byte and that busguard's decoder gives every reason.

    python tests/vectors/receipts/generate.py [--out DIR]   (default: this directory)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
from pathlib import Path
from typing import Any

FORMAT = "busguard.receipts.v1"
CONTEXT = b"busguard/receipt/v1\x00"
HASH = "a" * 64
REST = (
    '"kind":"handoff","task_id":"t-1","sender":"planner","receiver":"executor",'
    f'"payload_hash":"{HASH}","nonce":"AAAAAAAAAAAAAAAAAAAAAA","issued_at":"2026-11-29T12:00:00.000Z"'
)


def body(v: str = "1", rest: str = REST, extra: str = "") -> bytes:
    return ("{" + f'"v":{v},' + rest + extra + "}").encode()


def with_field(name: str, value: str) -> bytes:
    """The base receipt with one field's JSON value replaced."""
    fields = {
        "kind": '"handoff"',
        "task_id": '"t-1"',
        "sender": '"planner"',
        "receiver": '"executor"',
        "payload_hash": f'"{HASH}"',
        "nonce": '"AAAAAAAAAAAAAAAAAAAAAA"',
        "issued_at": '"2026-11-29T12:00:00.000Z"',
    }
    fields[name] = value
    return body(rest=",".join(f'"{k}":{v}' for k, v in fields.items()))


ASTRAL = "\U0001f600"  # one code point, two UTF-16 code units, four UTF-8 bytes

CASES: list[tuple[str, bytes, str]] = [
    # accepted: the reason is "ok"
    ("sdk-form", body(), "ok"),
    ("whitespace-everywhere", b' \t\n{ "v" : 1 ,' + REST.replace(",", " , ").encode() + b" }\r\n", "ok"),
    ("keys-in-another-order", ("{" + REST + ',"v":1}').encode(), "ok"),
    ("escaped-key", body().replace(b'"nonce"', b'"\\u006eonce"'), "ok"),
    ("null-optionals", body(extra=',"session_id":null,"sequence":null,"key_id":null'), "ok"),
    ("session-and-largest-sequence", body(extra=',"session_id":"s","sequence":9223372036854775807'), "ok"),
    ("minus-zero-sequence", body(extra=',"session_id":"s","sequence":-0'), "ok"),
    ("task-id-256-astral-code-points", with_field("task_id", json.dumps(ASTRAL * 256, ensure_ascii=False)), "ok"),
    ("task-id-256-escaped-pairs", with_field("task_id", '"' + "\\ud83d\\ude00" * 256 + '"'), "ok"),
    ("sender-512-code-points", with_field("sender", '"' + "s" * 512 + '"'), "ok"),
    ("unicode-escapes-in-values", with_field("kind", '"\\u0068andoff"'), "ok"),
    ("raw-delete-character", with_field("task_id", '"t\x7f1"'), "ok"),
    # oversized
    ("oversized-4097-bytes", body(extra=" " * (4097 - len(body()))), "oversized"),
    ("whitespace-to-4096-bytes", body(extra=" " * (4096 - len(body()))), "ok"),
    # not_json
    ("empty", b"", "not_json"),
    ("only-whitespace", b" \n", "not_json"),
    ("byte-order-mark", b"\xef\xbb\xbf" + body(), "not_json"),
    ("top-level-array", b"[" + body() + b"]", "not_json"),
    ("top-level-string", b'"v"', "not_json"),
    ("trailing-data", body() + b"x", "not_json"),
    ("two-objects", body() + body(), "not_json"),
    ("truncated", body()[:-1], "not_json"),
    ("invalid-utf8-in-string", with_field("task_id", '"t-X"').replace(b"t-X", b"t-\xff"), "not_json"),
    ("utf8-encoded-surrogate-in-string", with_field("task_id", '"t-X"').replace(b"t-X", b"t-\xed\xa0\x80"), "not_json"),
    ("overlong-utf8-in-string", with_field("task_id", '"t-X"').replace(b"t-X", b"t-\xc0\xaf"), "not_json"),
    ("escaped-lone-high-surrogate", with_field("task_id", '"\\ud800"'), "not_json"),
    ("escaped-lone-low-surrogate", with_field("task_id", '"\\udc00x"'), "not_json"),
    ("control-character-in-string", with_field("task_id", '"t\x011"'), "not_json"),
    ("invalid-escape", with_field("task_id", '"t\\x"'), "not_json"),
    ("short-unicode-escape", with_field("task_id", '"\\u12"'), "not_json"),
    ("leading-zero", body(v="01"), "not_json"),
    ("bare-minus", body(v="-"), "not_json"),
    ("fraction-without-digits", body(v="1."), "not_json"),
    ("misspelt-null", body(extra=',"key_id":nul'), "not_json"),
    ("trailing-comma", body(extra=","), "not_json"),
    ("unquoted-key", b"{v:1}", "not_json"),
    ("single-quotes", b"{'v':1}", "not_json"),
    ("unterminated-string-for-an-int", b'{"v":"abc', "not_json"),
    ("invalid-number-for-a-string", with_field("kind", "-a"), "not_json"),
    # wrong_type: the first problem met, before any later syntax error
    ("v-string", body(v='"1"'), "wrong_type"),
    ("v-string-then-garbage", b'{"v":"1", garbage', "wrong_type"),
    ("v-array-truncated", b'{"v":[1,', "wrong_type"),
    ("v-object", body(v="{}"), "wrong_type"),
    ("v-float", body(v="1.0"), "wrong_type"),
    ("v-exponent", body(v="1e0"), "wrong_type"),
    ("v-true", body(v="true"), "wrong_type"),
    ("v-null", body(v="null"), "wrong_type"),
    # a number literal past the double range: never an integer, never a string
    ("sequence-past-the-double-range", body(extra=',"session_id":"s","sequence":1e400'), "wrong_type"),
    ("task-id-number-of-310-digits", with_field("task_id", "9" * 310), "wrong_type"),
    ("top-level-number-past-the-double-range", b"1e400", "not_json"),
    ("task-id-null", with_field("task_id", "null"), "wrong_type"),
    ("task-id-number", with_field("task_id", "7"), "wrong_type"),
    ("sequence-float", body(extra=',"session_id":"s","sequence":1.5'), "wrong_type"),
    ("key-id-number", body(extra=',"key_id":7'), "wrong_type"),
    ("duplicate-v-second-mistyped", body(extra=',"v":"x"'), "wrong_type"),
    ("mistyped-before-invalid-utf8", b'{"v":"1","task_id":"\xff"}', "wrong_type"),
    ("mistyped-string-of-invalid-utf8", b'{"v":"\xff"}', "wrong_type"),
    # unknown_field: at the key, before its value is read
    ("extra-field", body(extra=',"extra":1'), "unknown_field"),
    ("unknown-key-with-garbage-value", b'{"zz":[', "unknown_field"),
    ("unknown-key-without-colon", body(extra=',":"x"'), "not_json"),
    ("unknown-key-of-invalid-utf8", b'{"\xff":1}', "not_json"),
    ("field-in-another-case", body(extra=',"Nonce":"x"'), "unknown_field"),
    ("extra-field-v2", body(v="2", extra=',"new":1'), "unknown_field"),
    # missing_field: at the closing brace, before trailing data
    ("empty-object", b"{}", "missing_field"),
    ("only-v-then-trailing-data", b'{"v":1}x', "missing_field"),
    ("no-issued-at", body().replace(b',"issued_at":"2026-11-29T12:00:00.000Z"', b""), "missing_field"),
    # duplicate_key, compared after unescaping
    ("duplicate-nonce-equal", body(extra=',"nonce":"AAAAAAAAAAAAAAAAAAAAAA"'), "duplicate_key"),
    ("duplicate-escaped-nonce", body(extra=',"\\u006eonce":"BBBBBBBBBBBBBBBBBBBBBB"'), "duplicate_key"),
    ("duplicate-null-optional", body(extra=',"key_id":null,"key_id":null'), "duplicate_key"),
    # unsupported_version
    ("v-2", body(v="2"), "unsupported_version"),
    ("v-minus-zero", body(v="-0"), "unsupported_version"),
    ("v-huge", body(v="100000000000000000000000000"), "unsupported_version"),
    ("v-huge-negative", body(v="-100000000000000000000000"), "unsupported_version"),
    # malformed_field
    ("task-id-empty", with_field("task_id", '""'), "malformed_field"),
    ("task-id-257-code-points", with_field("task_id", '"' + "t" * 257 + '"'), "malformed_field"),
    ("task-id-257-astral-code-points", with_field("task_id", json.dumps(ASTRAL * 257, ensure_ascii=False)), "malformed_field"),
    ("payload-hash-63", with_field("payload_hash", '"' + "a" * 63 + '"'), "malformed_field"),
    ("payload-hash-65", with_field("payload_hash", '"' + "a" * 65 + '"'), "malformed_field"),
    ("key-id-empty", body(extra=',"key_id":""'), "malformed_field"),
    ("key-id-129", body(extra=',"key_id":"' + "k" * 129 + '"'), "malformed_field"),
    # malformed_agent_id (code points here; 5.1's UTF-16 count is admission's)
    ("sender-empty", with_field("sender", '""'), "malformed_agent_id"),
    ("receiver-513-code-points", with_field("receiver", '"' + "r" * 513 + '"'), "malformed_agent_id"),
    # malformed_session
    ("session-id-empty", body(extra=',"session_id":"","sequence":1'), "malformed_session"),
    ("session-id-129", body(extra=',"session_id":"' + "s" * 129 + '","sequence":1'), "malformed_session"),
    ("sequence-negative", body(extra=',"session_id":"s","sequence":-1'), "malformed_session"),
    ("sequence-2-to-the-63", body(extra=',"session_id":"s","sequence":9223372036854775808'), "malformed_session"),
    ("sequence-beyond-64-bits", body(extra=',"session_id":"s","sequence":18446744073709551616'), "malformed_session"),
    ("sequence-without-session", body(extra=',"sequence":1'), "malformed_session"),
    ("session-without-sequence", body(extra=',"session_id":"s"'), "malformed_session"),
    ("session-with-null-sequence", body(extra=',"session_id":"s","sequence":null'), "malformed_session"),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent))
    out = Path(ap.parse_args().out)
    vectors: list[dict[str, Any]] = []
    for name, raw, reason in CASES:
        expect: dict[str, Any] = {"reason": reason}
        if reason == "ok":
            expect["receipt_id"] = hashlib.sha256(CONTEXT + raw).hexdigest()
        vectors.append({"name": name, "receipt_b64": base64.b64encode(raw).decode("ascii"), "expect": expect})
    doc = {
        "format": FORMAT,
        "description": "busguard-receipt header bytes and what a strict reader makes of them (docs/protocol.md 3.2-3.3)",
        "encoding": {
            "receipt_b64": "the header value, standard base64 with padding",
            "expect.reason": "ok (accepted) or the reason code of docs/protocol.md 3.3",
            "expect.receipt_id": "for an accepted receipt: lowercase hex SHA-256 of 'busguard/receipt/v1' 0x00 || the bytes (4.3)",
        },
        "vectors": vectors,
    }
    (out / "receipts.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="ascii")


if __name__ == "__main__":
    main()
