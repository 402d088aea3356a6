#!/usr/bin/env python3
"""Generate the batch-seal vectors: tree-heads.json (docs/protocol.md, 12.6).

Deterministic: re-running this script reproduces the committed file byte for
byte (tests/unit/test_treehead.py checks that, and that busguard seals,
proves and verifies exactly these bytes).

Deliberately independent of busguard: the tree is built top-down from RFC
9162 §2.1.1's recursive definition and the audit paths from §2.1.3.1's
(busguard builds levels bottom-up), the head's JSON is written out field by
field, and the signature comes straight from libsodium. Two heads of one
chain (sizes 5 and 1) over attestation-shaped leaves, with every leaf's
`busguard-inclusion` header.

    python tests/vectors/treehead/generate.py [--out DIR]   (default: this directory)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
from pathlib import Path

import nacl.bindings

FORMAT = "busguard.tree-head.v1"
CONTEXT = b"busguard/tree-head/v1\x00"
SEED = bytes(range(32))
GUARD = "tulpa:vector-guard"
CHAIN = "0123456789abcdef"
SEALED_AT = 1_700_000_000_000


def leaf(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def mth(leaves: list[bytes]) -> bytes:
    if len(leaves) == 1:
        return leaf(leaves[0])
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + mth(leaves[:k]) + mth(leaves[k:])).digest()


def path(m: int, leaves: list[bytes]) -> list[bytes]:
    if len(leaves) == 1:
        return []
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    if m < k:
        return path(m, leaves[:k]) + [mth(leaves[k:])]
    return path(m - k, leaves[k:]) + [mth(leaves[:k])]


def attestation(i: int) -> bytes:
    body = hashlib.sha256(f"decision {i}".encode()).hexdigest()
    return (
        '{"v":1,"guard":"%s","decision_id":"%032x","outcome":"forward","reason":"ok","receipt_id":null,'  # noqa: UP031 (JSON: literal braces)
        '"source":{"topic":"in","partition":0,"offset":%d},"decided_at":%d,"decision_sha256":"%s"}' % (GUARD, i, i, SEALED_AT, body)
    ).encode()


def head_json(seq: int, prev: str | None, size: int, root: bytes) -> bytes:
    prev_text = "null" if prev is None else f'"{prev}"'
    return (
        f'{{"v":1,"guard":"{GUARD}","chain":"{CHAIN}","seq":{seq},"prev":{prev_text},"size":{size},'
        f'"root":"{root.hex()}","sealed_at":{SEALED_AT + seq}}}'
    ).encode()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent))
    out = Path(ap.parse_args().out)
    pk, sk = nacl.bindings.crypto_sign_seed_keypair(SEED)
    heads = []
    prev: str | None = None
    start = 0
    for seq, size in enumerate((5, 1)):
        leaves = [attestation(start + i) for i in range(size)]
        start += size
        root = mth(leaves)
        head = head_json(seq, prev, size, root)
        signature = nacl.bindings.crypto_sign(CONTEXT + head, sk)[:64]
        heads.append(
            {
                "attestations": [a.decode() for a in leaves],
                "head": head.decode(),
                "head_sha256": hashlib.sha256(head).hexdigest(),
                "head_seal": base64.urlsafe_b64encode(signature).rstrip(b"=").decode(),
                "inclusion_hex": [(i.to_bytes(4, "big") + b"".join(path(i, leaves))).hex() for i in range(size)],
            }
        )
        prev = hashlib.sha256(head).hexdigest()
    doc = {
        "format": FORMAT,
        "description": "busguard batch seals: RFC 9162 trees over attestations, signed chained tree heads, inclusion headers",
        "seed_hex": SEED.hex(),
        "public_key_hex": pk.hex(),
        "guard": GUARD,
        "chain": CHAIN,
        "heads": heads,
    }
    (out / "tree-heads.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
