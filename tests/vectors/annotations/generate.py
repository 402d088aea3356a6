#!/usr/bin/env python3
"""Generate the sealed-annotation vectors (docs/protocol.md 12.1,
`annotations_sha256`): annotations.json.

Deterministic: re-running this script reproduces the committed file byte for
byte (tests/unit/test_annotation_vectors.py checks that, and that busguard's
receiver and auditor judge every forward as the file says).

Independent of busguard: each forward is written out here as the exact
bytes a guard emits (the receipt and the attestation as compact JSON in the
field order of docs/protocol.md 3.1 and 12.1, the headers in 12.1's order),
the annotation encoding is built from the byte layout the doc gives, the
seal is libsodium's Ed25519 signature, agent ids use a hand-written
base58btc multikey, and every expected verdict is written down by hand from
the doc. Only PyNaCl is used beside the standard library.

    python tests/vectors/annotations/generate.py [--out DIR]   (default: this directory)

The seeds are TEST KEYS, published so an implementer can reproduce every
seal. Never use them for anything else.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import nacl.bindings

FORMAT = "busguard.annotations.v1"
ATTESTATION_CONTEXT = b"busguard/attestation/v1\x00"
RECEIPT_CONTEXT = b"busguard/receipt/v1\x00"
PREFIX = "busguard-annotation-"
B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
DECIDED_AT = 1_764_417_600_000
ISSUED_AT = "2025-11-29T12:00:00.000Z"


def seed(name: str) -> bytes:
    return hashlib.sha256(b"busguard-vectors/annotations/v1/key:" + name.encode()).digest()


def base58(data: bytes) -> str:
    n = int.from_bytes(data, "big")
    out = ""
    while n:
        n, r = divmod(n, 58)
        out = B58[r] + out
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + out


def keypair(name: str) -> tuple[bytes, bytes]:
    pk, sk = nacl.bindings.crypto_sign_seed_keypair(seed(name))
    return bytes(pk), bytes(sk)


def agent(name: str) -> str:
    return "tulpa:z" + base58(b"\xed\x01" + keypair(name)[0])


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64url(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def u32(n: int) -> bytes:
    return n.to_bytes(4, "big")


def annotation_encoding(headers: list[tuple[str, bytes]]) -> bytes:
    """docs/protocol.md 12.1: u32 count, then per header u32 name length,
    name, 0x01, u32 value length, value (busguard never writes a null value)."""
    out = u32(len(headers))
    for name, value in headers:
        raw = name.encode("utf-8")
        out += u32(len(raw)) + raw + b"\x01" + u32(len(value)) + value
    return out


GUARD = "guard"
SENDER = "bidder"
RECEIVER = "awarder"


def receipt(kind: str, task: str, value: bytes, n: int) -> bytes:
    return (
        f'{{"v":1,"kind":"{kind}","task_id":"{task}","sender":"{agent(SENDER)}","receiver":"{agent(RECEIVER)}",'
        f'"payload_hash":"{hashlib.sha256(value).hexdigest()}","nonce":"annotation-vector-{n:04d}","issued_at":"{ISSUED_AT}"}}'
    ).encode()


def decision_id(n: int) -> str:
    return hashlib.sha256(f"annotation vector {n}".encode()).hexdigest()[:16] + n.to_bytes(8, "big").hex()


def forward(n: int, kind: str, task: str, value: bytes, annotations: list[tuple[str, bytes]] | None) -> dict[str, Any]:
    """A sealed forward: `annotations` None is a forward whose attestation
    binds none (no annotations_sha256); a list, even empty, is bound."""
    r = receipt(kind, task, value, n)
    _, sender_sk = keypair(SENDER)
    signature = b64url(nacl.bindings.crypto_sign(RECEIPT_CONTEXT + r, sender_sk)[:64])
    rid = hashlib.sha256(RECEIPT_CONTEXT + r).hexdigest()
    did = decision_id(n)
    record = (
        f'{{"type":"decision","decision_id":"{did}","outcome":"forward","reason":"admitted",'
        f'"source":{{"topic":"agents.in","partition":0,"offset":{n}}},"decided_at":{DECIDED_AT},"receipt_id":"{rid}"}}'
    ).encode()  # an example audit record; the receiver does not read it, the auditor ties it by this hash
    bound = ""
    encoding = None
    if annotations is not None:
        encoding = annotation_encoding(annotations)
        bound = f',"annotations_sha256":"{hashlib.sha256(encoding).hexdigest()}"'
    attestation = (
        f'{{"v":1,"guard":"{agent(GUARD)}","decision_id":"{did}","outcome":"forward","reason":"admitted","receipt_id":"{rid}",'
        f'"source":{{"topic":"agents.in","partition":0,"offset":{n}}},"decided_at":{DECIDED_AT},'
        f'"decision_sha256":"{hashlib.sha256(record).hexdigest()}"{bound}}}'
    ).encode()
    _, guard_sk = keypair(GUARD)
    seal = b64url(nacl.bindings.crypto_sign(ATTESTATION_CONTEXT + attestation, guard_sk)[:64])
    headers = [
        ("busguard-receipt", r),
        ("busguard-signature", signature),
        *(annotations or []),
        ("busguard-decision-id", did.encode()),
        ("busguard-attestation", attestation),
        ("busguard-seal", seal),
    ]
    out: dict[str, Any] = {"value": value, "headers": headers, "decision_record": record.decode()}
    if annotations is not None:
        out["bound"] = annotations
        out["annotation_encoding_hex"] = (encoding or b"").hex()
        out["annotations_sha256"] = hashlib.sha256(encoding or b"").hexdigest()
    return out


def vector(
    name: str, note: str, f: dict[str, Any], headers: list[tuple[str, bytes]], receiver_ok: bool, auditor_ok: bool
) -> dict[str, Any]:
    v: dict[str, Any] = {
        "name": name,
        "note": note,
        "value_b64": b64(f["value"]),
        "headers": [[k, b64(x)] for k, x in headers],
    }
    if "bound" in f:
        v["bound_annotations"] = [[k, x.decode()] for k, x in f["bound"]]
        v["annotation_encoding_hex"] = f["annotation_encoding_hex"]
        v["annotations_sha256"] = f["annotations_sha256"]
    v["decision_record"] = f["decision_record"]
    v["expect"] = {"receiver": "admitted" if receiver_ok else "refused", "auditor": "ok" if auditor_ok else "bad"}
    return v


def replaced(headers: list[tuple[str, bytes]], name: str, value: bytes) -> list[tuple[str, bytes]]:
    return [(k, value if k == name else x) for k, x in headers]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent))
    out = Path(ap.parse_args().out)
    result = b'{"call":"c-1","state_root":"ab"}'
    verification = PREFIX + "verification"
    one = forward(1, "cnet.result", "c-1", result, [(verification, b"recomputed")])
    two = forward(
        2,
        "session-handoff",
        "h-1",
        b'{"v":1}',
        [(PREFIX + "verdict", b"double_compromise_caution"), (PREFIX + "caution", b"double_compromise")],
    )
    none = forward(3, "taint-replay", "t-1", b'{"format":"x"}', [])
    old = forward(4, "cnet.result", "c-2", result, None)
    plain = forward(5, "handoff", "p-1", b"work", None)
    h1, h2, h0, hold, hplain = one["headers"], two["headers"], none["headers"], old["headers"], plain["headers"]
    old_headers = [*hold[:2], (verification, b"recomputed"), *hold[2:]]
    vectors = [
        vector("bound-one", "a result's verification, as the guard forwards it", one, h1, True, True),
        vector("bound-two", "two annotations, in the order the decision's surfaced names them", two, h2, True, True),
        vector(
            "bound-none", "a kind that surfaces annotations, a decision with none of them: the empty list is bound", none, h0, True, True
        ),
        vector("changed-value", "bound-one with verification rewritten", one, replaced(h1, verification, b"unverified"), False, False),
        vector("removed", "bound-one without its annotation header", one, [h for h in h1 if h[0] != verification], False, False),
        vector("duplicated", "bound-one with its annotation header twice", one, [*h1[:3], h1[2], *h1[3:]], False, False),
        vector(
            "added",
            "bound-none with an annotation header added",
            none,
            [*h0[:2], (PREFIX + "caution", b"double_compromise"), *h0[2:]],
            False,
            False,
        ),
        vector("reordered", "bound-two with its two annotation headers swapped", two, [h2[0], h2[1], h2[3], h2[2], *h2[4:]], False, False),
        vector(
            "added-other-case",
            "bound-one with a header whose name is the prefix in another letter case: still an annotation header",
            one,
            [*h1, ("Busguard-Annotation-Verification", b"unverified")],
            False,
            False,
        ),
        vector(
            "moved-among-other-headers",
            "bound-one with its annotation header moved before the receipt: only the annotation headers' own order is bound",
            one,
            [h1[2], h1[0], h1[1], *h1[3:]],
            True,
            True,
        ),
        vector(
            "unbound",
            "an attestation without annotations_sha256 (a forward from before it existed, or a copy with headers added) and an annotation header: "
            "a receiver refuses it, the auditor lets it through",
            old,
            old_headers,
            False,
            True,
        ),
        vector(
            "unbound-without-annotations",
            "no annotations_sha256 and no annotation header (any kind that surfaces none)",
            plain,
            hplain,
            True,
            True,
        ),
    ]
    pk, _ = keypair(GUARD)
    doc = {
        "format": FORMAT,
        "description": "busguard forwards whose busguard-annotation-* headers the attestation binds (annotations_sha256, docs/protocol.md 12.1)",
        "encoding": {
            "value_b64": "the record value, standard base64 with padding",
            "headers": "[[name, value]] in record order; value standard base64 with padding",
            "annotation_encoding_hex": "the annotation encoding of bound_annotations (docs/protocol.md 12.1), lowercase hex",
            "expect.receiver": "admitted: verify_admitted for `receiver` passes, the SDK delivers it; refused: it raises, the SDK refuses it `unattested`",
            "expect.auditor": "ok: busguard audit counts it a verified forward of its decision; bad: it does not",
        },
        "guard": {"seed_hex": seed(GUARD).hex(), "public_key_hex": pk.hex(), "agent_id": agent(GUARD)},
        "sender": {"seed_hex": seed(SENDER).hex(), "agent_id": agent(SENDER)},
        "receiver": agent(RECEIVER),
        "vectors": vectors,
    }
    (out / "annotations.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
