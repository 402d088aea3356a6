"""The duplicate-key check has a fast path; prove it agrees with a plain
parser on arbitrary spellings of a receipt."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.protocol.reasons import Reason
from busguard.protocol.receipt import ReceiptError, decode_receipt

BASE = {
    "v": 1,
    "kind": "handoff",
    "task_id": 't:1 ":" x',
    "sender": "tulpa:z6MkgosDnsjFCTf73Ms7S4Nzwe78GD7Bzn94hTU462M4GirX",
    "receiver": "did:web:example.com",
    "payload_hash": "a" * 64,
    "nonce": "n" * 22,
    "issued_at": "2026-11-29T12:00:00.000Z",
    "session_id": "s1",
    "sequence": 4,
    "key_id": "k",
}
WS = st.sampled_from(["", " ", "\n", "\t", "\r\n  "])


def _key(name: str, escape: bool) -> str:
    return "".join(f"\\u{ord(ch):04x}" for ch in name) if escape else name


@st.composite
def spellings(draw: st.DrawFn) -> tuple[bytes, bool]:
    names = draw(st.lists(st.sampled_from(sorted(BASE)), min_size=1, max_size=16))
    names = list(dict.fromkeys(["v", "kind", "task_id", "sender", "receiver", "payload_hash", "nonce", "issued_at"])) + names
    names = draw(st.permutations(names))
    parts = []
    for name in names:
        value = BASE[name] if not draw(st.booleans()) or name not in ("session_id", "sequence", "key_id") else None
        k = _key(name, draw(st.booleans()) and draw(st.booleans()))
        parts.append(f'{draw(WS)}"{k}"{draw(WS)}:{draw(WS)}{json.dumps(value)}{draw(WS)}')
    text = "{" + ",".join(parts) + "}"
    return text.encode(), len(names) != len(set(names))


def _reference_has_duplicates(raw: bytes) -> bool:
    keys: list[str] = []
    json.loads(raw, object_pairs_hook=lambda pairs: keys.extend(k for k, _ in pairs))
    return len(keys) != len(set(keys))


@settings(max_examples=600, deadline=None)
@given(spellings())
def test_duplicate_detection_matches_a_plain_parser(case: tuple[bytes, bool]) -> None:
    raw, has_dup = case
    assert _reference_has_duplicates(raw) == has_dup
    try:
        decode_receipt(raw)
        refused = None
    except ReceiptError as exc:
        refused = exc.reason
    if has_dup:
        assert refused is Reason.DUPLICATE_KEY
    else:
        assert refused in (None, Reason.MALFORMED_SESSION)  # session_id/sequence may be half-null here
