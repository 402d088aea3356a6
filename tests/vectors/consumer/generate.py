#!/usr/bin/env python3
"""Generate the admitting-consumer vectors (docs/sdk.md, `AdmittingConsumer`;
docs/protocol.md 12.1, 12.6): consumer.json.

One fetch, in order, as an agent's consumer hands it over: forwards sealed
per record and per batch, forwards that fail one check each, a receipt for
another agent, a kind whose reader refuses, and offsets the Kafka client
could not decode (one, and a batch's span). `expect` is the decision of an
admitting consumer: each delivery, each refusal with its reason
(`unattested`, `not_for_me`, `unreadable`, `undecodable`), and the position
to commit per partition. Every SDK (busguard.sdk in Python, ts/ in
TypeScript) must decide exactly this.

Deterministic; independent of busguard: receipts, attestations and tree
heads are written out here as the exact bytes a guard emits (compact JSON in
the field order of docs/protocol.md 3.1, 12.1, 12.6), the Merkle tree is
RFC 9162's, seals are libsodium's Ed25519, agent ids use a hand-written
base58btc multikey, and every expected decision is written down by hand
from the docs. Only PyNaCl is used beside the standard library.

    python tests/vectors/consumer/generate.py [--out DIR]   (default: this directory)

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

FORMAT = "busguard.consumer.v1"
RECEIPT_CONTEXT = b"busguard/receipt/v1\x00"
ATTESTATION_CONTEXT = b"busguard/attestation/v1\x00"
HEAD_CONTEXT = b"busguard/tree-head/v1\x00"
DECISION_CONTEXT = b"busguard/decision/v1\x00"
B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
DECIDED_AT = 1_764_417_600_000
ISSUED_AT = "2025-11-29T11:59:59.000Z"
TOPIC = "agents.out"
PREFIX = "busguard-annotation-"


def seed(name: str) -> bytes:
    return hashlib.sha256(b"busguard-vectors/consumer/v1/key:" + name.encode()).digest()


def keypair(name: str) -> tuple[bytes, bytes]:
    pk, sk = nacl.bindings.crypto_sign_seed_keypair(seed(name))
    return bytes(pk), bytes(sk)


def base58(data: bytes) -> str:
    n = int.from_bytes(data, "big")
    out = ""
    while n:
        n, r = divmod(n, 58)
        out = B58[r] + out
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + out


def multikey(name: str) -> str:
    return "z" + base58(b"\xed\x01" + keypair(name)[0])


def agent(name: str) -> str:
    return "tulpa:" + multikey(name)


def sign(name: str, message: bytes) -> bytes:
    return bytes(nacl.bindings.crypto_sign(message, keypair(name)[1])[:64])


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64url(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def decision_id(offset: int) -> str:
    """docs/protocol.md 4.4, namespace busguard, input agents.in partition 0."""
    return sha(DECISION_CONTEXT + b"busguard\x00agents.in\x000")[:16] + offset.to_bytes(8, "big").hex()


# RFC 9162 section 2.1 over SHA-256
def leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def mth(hashes: list[bytes]) -> bytes:
    if len(hashes) == 1:
        return hashes[0]
    k = 1
    while k * 2 < len(hashes):
        k *= 2
    return node_hash(mth(hashes[:k]), mth(hashes[k:]))


def path(index: int, hashes: list[bytes]) -> list[bytes]:
    """PATH(m, D[n]) of RFC 9162 section 2.1.3.1, leaf level first."""
    if len(hashes) == 1:
        return []
    k = 1
    while k * 2 < len(hashes):
        k *= 2
    if index < k:
        return path(index, hashes[:k]) + [mth(hashes[k:])]
    return path(index - k, hashes[k:]) + [mth(hashes[:k])]


def receipt(kind: str, task: str, payload: bytes, n: int, receiver: str) -> bytes:
    return (
        f'{{"v":1,"kind":"{kind}","task_id":"{task}","sender":"{agent("planner")}","receiver":"{receiver}",'
        f'"payload_hash":"{sha(payload)}","nonce":"consumer-vector-{n:06d}","issued_at":"{ISSUED_AT}"}}'
    ).encode()


def attestation(n: int, *, outcome: str = "forward", forwarded: str | None = None, annotations: str | None = None) -> bytes:
    reason = "admitted" if outcome == "forward" else "nonce_replay"
    record = f'{{"type":"decision","decision_id":"{decision_id(n)}","outcome":"{outcome}"}}'.encode()  # what decision_sha256 names
    extra = ("" if forwarded is None else f',"forwarded_sha256":"{forwarded}"') + (
        "" if annotations is None else f',"annotations_sha256":"{annotations}"'
    )
    return (
        f'{{"v":1,"guard":"{agent("guard")}","decision_id":"{decision_id(n)}","outcome":"{outcome}","reason":"{reason}",'
        f'"receipt_id":"{sha(RECEIPT_CONTEXT + receipt_of[n])}","source":{{"topic":"agents.in","partition":0,"offset":{n}}},'
        f'"decided_at":{DECIDED_AT},"decision_sha256":"{sha(record)}"{extra}}}'
    ).encode()


receipt_of: dict[int, bytes] = {}


def forward(
    n: int,
    *,
    kind: str = "handoff",
    payload: bytes = b'{"op":"transform"}',
    receiver: str | None = None,
    outcome: str = "forward",
    replacement: bytes | None = None,
    annotations: list[tuple[str, bytes]] | None = None,
) -> tuple[bytes, list[tuple[str, bytes]], bytes]:
    """(value, headers before the proof headers, attestation) of a forward judged at input offset n."""
    r = receipt(kind, f"task-{n}", payload, n, receiver or agent("executor"))
    receipt_of[n] = r
    bound = None
    if annotations is not None:
        enc = len(annotations).to_bytes(4, "big")
        for name, value in annotations:
            enc += len(name.encode()).to_bytes(4, "big") + name.encode() + b"\x01" + len(value).to_bytes(4, "big") + value
        bound = sha(enc)
    att = attestation(n, outcome=outcome, forwarded=None if replacement is None else sha(replacement), annotations=bound)
    headers = [("busguard-receipt", r), ("busguard-signature", b64url(sign("planner", RECEIPT_CONTEXT + r)))]
    if replacement is not None:
        headers.append(("busguard-replaced", b"1"))
    headers += annotations or []
    return (payload if replacement is None else replacement), headers, att


def sealed(n: int, value: bytes, headers: list[tuple[str, bytes]], att: bytes, key: str = "guard") -> tuple[bytes, list[tuple[str, bytes]]]:
    seal = b64url(sign(key, ATTESTATION_CONTEXT + att))
    return value, [*headers, ("busguard-decision-id", decision_id(n).encode()), ("busguard-attestation", att), ("busguard-seal", seal)]


def head(atts: list[bytes], key: str = "guard") -> tuple[bytes, bytes, list[bytes]]:
    hashes = [leaf_hash(a) for a in atts]
    raw = (
        f'{{"v":1,"guard":"{agent("guard")}","chain":"00c0ffee00c0ffee","seq":0,"prev":null,"size":{len(atts)},'
        f'"root":"{mth(hashes).hex()}","sealed_at":{DECIDED_AT}}}'
    ).encode()
    proofs = [i.to_bytes(4, "big") + b"".join(path(i, hashes)) for i in range(len(atts))]
    return raw, b64url(sign(key, HEAD_CONTEXT + raw)), proofs


def batch_sealed(
    n: int, value: bytes, headers: list[tuple[str, bytes]], att: bytes, h: tuple[bytes, bytes, list[bytes]], leaf: int
) -> tuple[bytes, list[tuple[str, bytes]]]:
    raw, seal, proofs = h
    proof = [
        ("busguard-decision-id", decision_id(n).encode()),
        ("busguard-attestation", att),
        ("busguard-tree-head", raw),
        ("busguard-head-seal", seal),
        ("busguard-inclusion", proofs[leaf]),
    ]
    return value, [*headers, *proof]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent))
    out = Path(ap.parse_args().out)
    records: list[dict[str, Any]] = []
    deliveries: list[dict[str, Any]] = []
    refusals: list[dict[str, Any]] = []

    def put(
        name: str,
        offset: int,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]],
        verdict: str,
        partition: int = 0,
        note: str = "",
    ) -> None:
        records.append(
            {
                "name": name,
                "note": note,
                "topic": TOPIC,
                "partition": partition,
                "offset": offset,
                "value_b64": None if value is None else b64(value),
                "headers": [[k, None if x is None else b64(x)] for k, x in headers],
            }
        )
        if verdict == "delivered":
            receipt_text = next(x for k, x in headers if k == "busguard-receipt")
            assert receipt_text is not None
            notes = {k[len(PREFIX) :]: (x or b"").decode() for k, x in headers if k.startswith(PREFIX)}
            did = next(x for k, x in headers if k == "busguard-decision-id")
            assert did is not None
            deliveries.append(
                {
                    "partition": partition,
                    "offset": offset,
                    "decision_id": did.decode(),
                    "task_id": json.loads(receipt_text)["task_id"],
                    "payload_b64": b64(value or b""),
                    "annotations": notes,
                }
            )
        else:
            refusals.append({"partition": partition, "offset": offset, "reason": verdict})

    def undecodable(name: str, offset: int, last: int | None, reason: str, detail: str, note: str) -> None:
        records.append(
            {
                "name": name,
                "note": note,
                "topic": TOPIC,
                "partition": 0,
                "offset": offset,
                "undecodable": reason,
                "last_offset": last,
                "detail": detail,
            }
        )
        span = None if last is None or last == offset else last
        where = "" if span is None else f" (offsets {offset}..{span})"
        refusal: dict[str, Any] = {"partition": 0, "offset": offset, "reason": "undecodable", "detail": f"{reason}{where}: {detail}"[:300]}
        if span is not None:
            refusal["last_offset"] = span
        refusals.append(refusal)

    def simple(n: int, **kw: Any) -> tuple[bytes, list[tuple[str, bytes]]]:
        v, h, a = forward(n, **kw)
        return sealed(n, v, h, a)

    put("record-seal", 0, *simple(0), "delivered", note="a forward sealed per record (busguard-seal), addressed to the agent")
    batch = [forward(n) for n in (1, 2, 3)]
    tree = head([a for _, _, a in batch])
    for leaf, (n, (v, h, a)) in enumerate(zip((1, 2, 3), batch, strict=True)):
        put(f"batch-seal-leaf-{leaf}", n, *batch_sealed(n, v, h, a, tree, leaf), "delivered", note="three forwards under one tree head")
    put(
        "receiver-other-spelling",
        4,
        *simple(4, receiver="ink:" + multikey("executor")),
        "delivered",
        note="ink: and tulpa: of one key are one receiver",
    )
    put("not-for-me", 5, *simple(5, receiver=agent("auditor")), "not_for_me", note="admitted for another agent")
    v, h, a = forward(6)
    put("sealed-by-another-key", 6, *sealed(6, v, h, a, key="mallory"), "unattested")
    put("outcome-reject", 7, *simple(7, outcome="reject"), "unattested", note="a dead letter's attestation: not a forward")
    v, hs = simple(8)
    put(
        "decision-id-header-mismatch",
        8,
        v,
        [(k, decision_id(99).encode() if k == "busguard-decision-id" else x) for k, x in hs],
        "unattested",
    )
    v, hs = simple(9)
    put("payload-altered", 9, v + b" ", hs, "unattested", note="the value is not the one the receipt hashed")
    put("replaced-forward", 10, *simple(10, replacement=b'{"op":"stripped"}'), "delivered", note="forwarded_sha256 names the value")
    v, hs = simple(11, replacement=b'{"op":"stripped"}')
    put("replaced-forward-altered", 11, b'{"op":"other"}', hs, "unattested")
    v, h, a = forward(12)
    v, hs = batch_sealed(12, v, h, a, head([a]), 0)
    put("both-seals", 12, v, [*hs, ("busguard-seal", b64url(sign("guard", ATTESTATION_CONTEXT + a)))], "unattested")
    v, hs = simple(13)
    put("null-attestation", 13, v, [(k, None if k == "busguard-attestation" else x) for k, x in hs], "unattested")
    v, hs = simple(14)
    put("no-seal", 14, v, [(k, x) for k, x in hs if k != "busguard-seal"], "unattested")
    v, hs = simple(15)
    put("duplicated-receipt", 15, v, [hs[0], *hs], "unattested")
    v, h, a = batch[0]
    put(
        "inclusion-of-another-leaf",
        16,
        *batch_sealed(1, v, h, a, (tree[0], tree[1], [tree[2][1]]), 0),
        "unattested",
        note="leaf 1's proof for leaf 0's attestation",
    )
    v, h, a = forward(17)
    put("head-sealed-by-another-key", 17, *batch_sealed(17, v, h, a, head([a], key="mallory"), 0), "unattested")
    v, h, a = forward(18)
    put("unbound-annotation", 18, *sealed(18, v, [*h, (PREFIX + "verdict", b"clean")], a), "unattested", note="no annotations_sha256")
    put("bound-annotation", 19, *simple(19, annotations=[(PREFIX + "verdict", b"clean")]), "delivered")
    put("reader-refuses", 20, *simple(20, kind="ack"), "unreadable", note="the `ack` reader of this fetch refuses every payload")
    put("null-value-empty-payload", 21, None, simple(21, payload=b"")[1], "delivered", note="a null value is the empty payload")
    undecodable(
        "undecodable-header", 22, None, "undecodable_header", "header 1's name is not UTF-8", "one offset the client could not decode"
    )
    undecodable("undecodable-span", 23, 32, "undecodable_batch", "CRC-32C mismatch", "a batch's ten offsets, one refusal")
    undecodable(
        "undecodable-span-of-one", 33, 33, "undecodable_batch", "unknown compression codec 7", "last_offset equal to offset: no span"
    )
    put("other-partition", 5, *simple(34), "delivered", partition=1)

    pk, _ = keypair("guard")
    doc = {
        "format": FORMAT,
        "description": "one fetch as an agent's consumer hands it over, and what an admitting consumer (docs/sdk.md) decides about each record",
        "encoding": {
            "records": "in fetch order; a record: value_b64 (null for a null value) and headers ([[name, value_b64 or null]], record order); "
            "an offset the client could not decode: `undecodable` (busguard's reason), `last_offset` (null: this offset only) and `detail`",
            "readers": "kind -> `refuse`: that kind's reader refuses every payload (raises ValueError / throws)",
            "expect.deliveries": "in order; payload_b64 the delivered payload, annotations the busguard-annotation-* headers without the prefix",
            "expect.refusals": "in order; detail only where it is fixed by docs/sdk.md (undecodable: `<reason>[ (offsets a..b)]: <detail>`)",
            "expect.positions": "[topic, partition, next offset to read] per partition",
        },
        "guard": {"seed_hex": seed("guard").hex(), "public_key_hex": pk.hex(), "agent_id": agent("guard")},
        "mallory": {"seed_hex": seed("mallory").hex(), "agent_id": agent("mallory")},
        "sender": {"seed_hex": seed("planner").hex(), "agent_id": agent("planner")},
        "agent_id": agent("executor"),
        "readers": {"ack": "refuse"},
        "records": records,
        "expect": {"deliveries": deliveries, "refusals": refusals, "positions": [[TOPIC, 0, 34], [TOPIC, 1, 6]]},
    }
    (out / "consumer.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="ascii")


if __name__ == "__main__":
    main()
