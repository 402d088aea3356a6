#!/usr/bin/env python3
"""Generate the batch audit record vectors: audit-batches.json (docs/protocol.md 12.7).

Deterministic: re-running this script reproduces the committed file byte for
byte (tests/unit/test_audit_batch_vectors.py checks that, that busguard's
writer packs exactly these values, and what `busguard audit` concludes of
each log).

Deliberately independent of busguard: decisions, attestations and tree heads
are JSON written out field by field, trees and audit paths follow RFC 9162
§2.1's recursive definitions, msgpack framing (array and bin headers) is
written byte by byte from the msgpack spec, and signatures come straight
from libsodium. Every expected verdict is written here by hand from
docs/protocol.md 12.6-12.7 and the violation table of `busguard audit`.

    python tests/vectors/auditbatch/generate.py [--out DIR]   (default: this directory)

The seed below is a TEST KEY, published so that another implementation can
reproduce every signature. Never use it for anything else.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import nacl.bindings

FORMAT = "busguard.audit-batches.v1"
HEAD_CONTEXT = b"busguard/tree-head/v1\x00"
DECISION_CONTEXT = b"busguard/decision/v1\x00"
GUARD_SEED = hashlib.sha256(b"busguard-vectors/v1/key:audit-batch-guard").digest()
MALLORY_SEED = hashlib.sha256(b"busguard-vectors/v1/key:mallory").digest()
CHAIN = "00000000000000ab"
NAMESPACE = "busguard"
TOPIC = "agents.in"
AUDIT_TOPIC = "busguard.audit"
DECIDED_AT = 1_796_000_000_000

B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def multikey(public_key: bytes) -> str:
    """z-base58btc of the ed25519-pub multicodec prefix and the key."""
    data = b"\xed\x01" + public_key
    n, out = int.from_bytes(data, "big"), ""
    while n:
        n, r = divmod(n, 58)
        out = B58[r] + out
    return "z" + "1" * (len(data) - len(data.lstrip(b"\0"))) + out


GUARD_PK, GUARD_SK = nacl.bindings.crypto_sign_seed_keypair(GUARD_SEED)
MALLORY_PK, MALLORY_SK = nacl.bindings.crypto_sign_seed_keypair(MALLORY_SEED)
GUARD = "tulpa:" + multikey(GUARD_PK)


# -- msgpack, the two framings 12.7 uses (smallest form, as the spec requires of an encoder)


def mp_array(n: int) -> bytes:
    if n < 16:
        return bytes([0x90 | n])
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def mp_bin(b: bytes) -> bytes:
    if len(b) < 1 << 8:
        return b"\xc4" + bytes([len(b)]) + b
    if len(b) < 1 << 16:
        return b"\xc5" + len(b).to_bytes(2, "big") + b
    return b"\xc6" + len(b).to_bytes(4, "big") + b


def mp_str(b: bytes) -> bytes:
    assert len(b) < 32
    return bytes([0xA0 | len(b)]) + b


def pack(entries: list[tuple[bytes, bytes, bytes]]) -> bytes:
    return mp_array(len(entries)) + b"".join(mp_array(3) + b"".join(mp_bin(x) for x in e) for e in entries)


# -- RFC 9162 §2.1


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def split(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(leaves: list[bytes]) -> bytes:
    if len(leaves) == 1:
        return leaf_hash(leaves[0])
    k = split(len(leaves))
    return hashlib.sha256(b"\x01" + mth(leaves[:k]) + mth(leaves[k:])).digest()


def path(m: int, leaves: list[bytes]) -> list[bytes]:
    if len(leaves) == 1:
        return []
    k = split(len(leaves))
    if m < k:
        return path(m, leaves[:k]) + [mth(leaves[k:])]
    return path(m - k, leaves[k:]) + [mth(leaves[:k])]


# -- the records


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def b64url(b: bytes) -> bytes:
    return base64.urlsafe_b64encode(b).rstrip(b"=")


def decision_id(offset: int, partition: int) -> str:
    return hashlib.sha256(DECISION_CONTEXT + f"{NAMESPACE}\x00{TOPIC}\x00{partition}".encode()).hexdigest()[:16] + f"{offset:016x}"


def dumps(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decision(offset: int, partition: int) -> tuple[bytes, bytes]:
    """A forward decision (12.3) for its own task, and its attestation (12.1)."""
    did = decision_id(offset, partition)
    rid = hashlib.sha256(f"receipt {partition}/{offset}".encode()).hexdigest()
    src = {"topic": TOPIC, "partition": partition, "offset": offset}
    value = dumps({"type": "decision", "decision_id": did, "outcome": "forward", "reason": "admitted", "source": src,
                   "decided_at": DECIDED_AT, "receipt_id": rid, "kind": "handoff", "task_id": f"task-{partition}-{offset}"})  # fmt: skip
    att = dumps({"v": 1, "guard": GUARD, "decision_id": did, "outcome": "forward", "reason": "admitted", "receipt_id": rid,
                 "source": src, "decided_at": DECIDED_AT, "decision_sha256": hashlib.sha256(value).hexdigest()})  # fmt: skip
    return value, att


class Head:
    """One sealed tree head over the decisions of `offsets` (one input partition)."""

    def __init__(self, seq: int, prev: Head | None, partition: int, offsets: range, sk: bytes = GUARD_SK) -> None:
        self.decisions = [decision(o, partition) for o in offsets]
        leaves = [att for _, att in self.decisions]
        prev_text = "null" if prev is None else f'"{prev.sha256}"'
        self.bytes = (
            f'{{"v":1,"guard":"{GUARD}","chain":"{CHAIN}","seq":{seq},"prev":{prev_text},"size":{len(leaves)},'
            f'"root":"{mth(leaves).hex()}","sealed_at":{DECIDED_AT}}}'
        ).encode()
        self.sha256 = hashlib.sha256(self.bytes).hexdigest()
        self.seal = b64url(nacl.bindings.crypto_sign(HEAD_CONTEXT + self.bytes, sk)[:64])
        self.entries = [(v, att, i.to_bytes(4, "big") + b"".join(path(i, leaves))) for i, (v, att) in enumerate(self.decisions)]

    def headers(self) -> list[tuple[str, bytes]]:
        return [("busguard-audit-batch", b"1"), ("busguard-tree-head", self.bytes), ("busguard-head-seal", self.seal)]

    def per_record(self, i: int) -> dict[str, Any]:
        """Entry i as the per-record audit record it stands for (12.7, "Reading one")."""
        v, att, inclusion = self.entries[i]
        hs = [
            ("busguard-attestation", att),
            ("busguard-tree-head", self.bytes),
            ("busguard-head-seal", self.seal),
            ("busguard-inclusion", inclusion),
        ]
        return {"value_b64": b64(v), "headers": [[k, b64(x)] for k, x in hs]}


def record(
    value: bytes | None, headers: list[tuple[str, bytes]], partition: int, offset: int, stands_for: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"partition": partition, "offset": offset, "value_b64": None if value is None else b64(value),
                           "headers": [[k, b64(v)] for k, v in headers]}  # fmt: skip
    if stands_for is not None:
        out["entries"] = stands_for
    return out


def batch(head: Head, idx: list[int], partition: int, offset: int) -> dict[str, Any]:
    """A well-formed batch audit record holding entries `idx` of `head`."""
    return record(pack([head.entries[i] for i in idx]), head.headers(), partition, offset, [head.per_record(i) for i in idx])


def per_record(head: Head, i: int, partition: int, offset: int) -> dict[str, Any]:
    r = head.per_record(i)
    return {"partition": partition, "offset": offset, **r}


def vectors() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(name: str, description: str, log: list[dict[str, Any]], violations: list[str], decisions: int) -> None:
        out.append({"name": name, "description": description, "log": log,
                    "expect": {"ok": not violations, "violations": sorted(set(violations)), "decisions": decisions}})  # fmt: skip

    h0 = Head(0, None, 0, range(0, 5))
    h1 = Head(1, h0, 0, range(5, 7))
    add("one_record", "One head of 5 decisions, all in one batch audit record.", [batch(h0, [0, 1, 2, 3, 4], 0, 0)], [], 5)
    add(
        "one_head_two_records",
        "The same head split over two batch audit records (as the producer's batch size splits one), 3 + 2 entries.",
        [batch(h0, [0, 1, 2], 0, 0), batch(h0, [3, 4], 0, 1)],
        [],
        5,
    )
    add(
        "mixed_forms",
        "A chain of two heads: seq 0 as a batch audit record, seq 1 as per-record audit records (a restart switched "
        "[batch] audit); old and new forms in one log.",
        [batch(h0, [0, 1, 2, 3, 4], 0, 0), per_record(h1, 0, 0, 1), per_record(h1, 1, 0, 2)],
        [],
        7,
    )
    add(
        "both_forms_of_one_decision",
        "The same decisions in both forms (re-emitted across a switch): each decision counts once.",
        [batch(h0, [0, 1, 2, 3, 4], 0, 0), *(per_record(h0, i, 0, 1 + i) for i in range(5))],
        [],
        5,
    )
    big = Head(0, None, 1, range(0, 17))
    add(
        "seventeen_entries",
        "17 entries of input partition 1: the outer array header is msgpack's array 16 (0xdc 0x00 0x11), each "
        "decision a bin 16, each proof (4 + 32·k bytes, k 4 or 5) a bin 8.",
        [batch(big, list(range(17)), 1, 0)],
        [],
        17,
    )
    add(
        "entry_missing",
        "A head of 5 leaves whose log proves only 4 (entry 2 removed): the leaf no record proves is reported, and "
        "so is input offset 2, between decided ones and decided by nothing in the log.",
        [batch(h0, [0, 1, 3, 4], 0, 0)],
        ["leaf_missing", "offsets_undecided"],
        4,
    )
    e = list(h0.entries)
    e[2] = (e[2][0], e[2][1], e[3][2])  # entry 2 carries entry 3's proof
    add(
        "entry_bad_inclusion",
        "Entry 2 carries entry 3's inclusion proof: it is excluded as bad_inclusion, so its leaf is unproven and input offset 2 undecided.",
        [record(pack(e), h0.headers(), 0, 0)],
        ["bad_inclusion", "leaf_missing", "offsets_undecided"],
        4,
    )
    e = list(h0.entries)
    e[1] = (e[1][0].replace(b'"admitted"', b'"admitted" '), e[1][1], e[1][2])
    add(
        "entry_decision_altered",
        "Entry 1's decision bytes differ from what its attestation's decision_sha256 names: that entry is an "
        "unsealed record (excluded), so its leaf is unproven and input offset 1 undecided.",
        [record(pack(e), h0.headers(), 0, 0)],
        ["forged_record", "leaf_missing", "offsets_undecided"],
        4,
    )
    forged = Head(0, None, 0, range(0, 5), sk=MALLORY_SK)
    add(
        "head_sealed_by_another_key",
        "A well-formed record whose head seal is by a key that is not the guard's: every entry is unsealed.",
        [record(pack(forged.entries), forged.headers(), 0, 0)],
        ["forged_record"],
        0,
    )
    value = pack(h0.entries)
    malformed: list[tuple[str, str, bytes | None, list[tuple[str, bytes]]]] = [
        ("version_2", "busguard-audit-batch is 2: not a format this reader knows.", value,
         [("busguard-audit-batch", b"2"), *h0.headers()[1:]]),
        ("version_twice", "busguard-audit-batch twice.", value, [*h0.headers(), ("busguard-audit-batch", b"1")]),
        ("no_head_seal", "No busguard-head-seal header.", value, h0.headers()[:2]),
        ("tree_head_twice", "busguard-tree-head twice.", value, [*h0.headers(), ("busguard-tree-head", h0.bytes)]),
        ("own_attestation_header", "A batch audit record carries no busguard-attestation of its own.", value,
         [*h0.headers(), ("busguard-attestation", h0.entries[0][1])]),
        ("own_inclusion_header", "A batch audit record carries no busguard-inclusion of its own.", value,
         [*h0.headers(), ("busguard-inclusion", h0.entries[0][2])]),
        ("null_value", "No value.", None, h0.headers()),
        ("empty_array", "An array of no entries.", mp_array(0), h0.headers()),
        ("not_msgpack", "0xc1 is never used in msgpack.", b"\xc1", h0.headers()),
        ("cut_short", "The value ends inside the first entry.", value[:40], h0.headers()),
        ("trailing_bytes", "One byte after the array.", value + b"\x00", h0.headers()),
        ("entry_of_two", "An entry of two values.", mp_array(1) + mp_array(2) + mp_bin(b"d") + mp_bin(b"a"), h0.headers()),
        ("entry_of_strings", "Entries must be bin, not str.", mp_array(1) + mp_array(3) + mp_str(b"d") + mp_str(b"a") + mp_str(b"i"), h0.headers()),
    ]  # fmt: skip
    for name, why, v, hs in malformed:
        add(name, f"Not a well-formed batch audit record ({why}): one unsealed record; nothing inside it is judged.", [record(v, hs, 0, 0)],
            ["forged_record"], 0)  # fmt: skip
    return out


def document() -> dict[str, Any]:
    return {
        "format": FORMAT,
        "description": "Batch audit records (docs/protocol.md 12.7) and what `busguard audit` concludes of each log. Judge "
        "each vector alone: its `log` is the audit topic's records, read at (partition, offset); a well-formed batch "
        "record's `entries` are the per-record audit records (12.3, 12.6) it stands for, in order. expect.violations "
        "lists the violation codes (sorted), empty when the audit passes; expect.decisions counts distinct verified "
        "decision ids.",
        "generator": "tests/vectors/auditbatch/generate.py",
        "encoding": {
            "value_b64": "the Kafka record value, standard base64 with padding; null = no value",
            "headers": "[[name, value]] in record order; value standard base64 with padding",
        },
        "signers_note": "TEST KEYS ONLY: seed_hex is the RFC 8032 private key",
        "guard": {"seed_hex": GUARD_SEED.hex(), "public_key_hex": GUARD_PK.hex(), "multikey": multikey(GUARD_PK)},
        "mallory": {"seed_hex": MALLORY_SEED.hex(), "public_key_hex": MALLORY_PK.hex()},
        "input_topic": TOPIC,
        "audit_topic": AUDIT_TOPIC,
        "namespace": NAMESPACE,
        "vectors": vectors(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent))
    out = Path(ap.parse_args().out)
    (out / "audit-batches.json").write_text(json.dumps(document(), indent=1) + "\n", encoding="ascii")


if __name__ == "__main__":
    main()
