"""busguard's strict decoders and the TypeScript package's (ts/) read mutated
bytes the same way: a receipt gets the same reason code (docs/protocol.md
3.3), an attestation and a tree head are accepted or refused alike, a
timestamp is the same instant or refused (6.1), an agent id has the same
canonical principal or is refused (5.2).

The shared vectors (tests/vectors/receipts/, test_ts_vectors.py) pin the
edges on purpose; this throws thousands of deterministic mutations of real
receipts, attestations, heads, timestamps and agent ids (bytes replaced, deleted, repeated,
inserted, truncated) at both, through one `node ts/dist/test/decode-cli.js`
run, and fails on any difference, naming the bytes.

Needs the package built (`make ts`, which `make test` runs first).
"""

from __future__ import annotations

import base64
import json
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

from busguard.protocol.attestation import AttestationError, decode_attestation
from busguard.protocol.identity import canonical_principal
from busguard.protocol.receipt import Receipt, ReceiptError, decode_receipt, encode_receipt
from busguard.protocol.timestamps import parse_timestamp
from busguard.protocol.treehead import TreeHeadError, decode_head

from .mutation import mutate

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "tests" / "vectors"
CLI = REPO / "ts" / "dist" / "test" / "decode-cli.js"
COUNTS = {"receipt": 4000, "attestation": 1500, "head": 500, "timestamp": 1500, "principal": 1500}

#: Bytes and tokens that move a strict JSON reader between its branches.
BYTES = b'"{}[]:,\\ \t\n0123456789-+.eEtrufalsnx\x00\x1f\x7f\x80\xbf\xc3\xed\xf0\xff'
TOKENS = [
    b',"v":1',
    b',"nonce":"AAAAAAAAAAAAAAAAAAAAAA"',
    b',"session_id":"s","sequence":7',
    b',"sequence":null',
    b',"key_id":null',
    b',"forwarded_sha256":null',
    b',"extra":[1,{"a":2}]',
    b"null",
    b"true",
    b"1.5",
    b"1e5",
    b"-0",
    b"9" * 30,
    b"-" + b"9" * 20,
    b'"\\ud800"',
    b'"\\ud83d\\ude00"',
    b"\\u0000",
    b"\\u006e",
    b'""',
    b"{}",
    b"[]",
    b" ",
    b"\xf0\x9f\x98\x80",
    b"1e400",
    b"-1" + b"0" * 320,
    b'"\xff"',
    b'"\\x"',
    b'"\x01"',
    b'"topic":"t","extra":{"a":[1,"\xff",{"b":null}]},',
    b'"\xff\xfe":1,',
]


def _headers(rec: Any) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in rec["headers"] if v is not None}


def _seeds() -> dict[str, list[bytes]]:
    seeds: dict[str, list[bytes]] = {what: [] for what in COUNTS}
    for case in json.loads((VECTORS / "external" / "ink" / "timestamp-validity.json").read_text(encoding="utf-8"))["cases"]:
        seeds["timestamp"].append(case["input"]["timestamp"].encode())
    for case in json.loads((VECTORS / "external" / "ink" / "principal-normalization.json").read_text(encoding="utf-8"))["cases"]:
        seeds["principal"].append(case["input"]["agentId"].encode())
    for name in ("valid.json", "invalid.json"):
        for vec in json.loads((VECTORS / name).read_text(encoding="ascii"))["vectors"]:
            raw = _headers(vec).get("busguard-receipt")
            if raw is not None and len(raw) < 1024:
                seeds["receipt"].append(raw)
    consumer = json.loads((VECTORS / "consumer" / "consumer.json").read_text(encoding="ascii"))
    for rec in consumer["records"]:
        if "headers" in rec:
            h = _headers(rec)
            seeds["attestation"] += [h[k] for k in ("busguard-attestation",) if k in h]
            seeds["head"] += [h[k] for k in ("busguard-tree-head",) if k in h]
    for h in json.loads((VECTORS / "treehead" / "tree-heads.json").read_text(encoding="utf-8"))["heads"]:
        seeds["head"].append(h["head"].encode())
        seeds["attestation"] += [a.encode() for a in h["attestations"]]
    return seeds


def _mutate(rng: random.Random, raw: bytes) -> bytes:
    return mutate(rng, raw, alphabet=BYTES, tokens=TOKENS)


def _timestamp(rng: random.Random) -> bytes:
    """A timestamp from the grammar's parts, each now and then just out of range."""

    def part(good: list[str], bad: list[str]) -> str:
        return rng.choice(good if rng.random() < 0.85 else bad)

    year = part(["0000", "0001", "1969", "1970", "2000", "2024", "2100", "9999"], ["999", "10000", "20x6"])
    month = part(["01", "02", "06", "12"], ["00", "13", "1"])
    day = part(["01", "28", "29", "30", "31"], ["00", "32", "1"])
    clock = f"{part(['00', '12', '23'], ['24', '1'])}:{part(['00', '59'], ['60'])}:{part(['00', '59'], ['60', '5'])}"
    fraction = part(["", ".5", ".05", ".123", ".9999", ".1234567890123"], [".", ".12a", ",5"])
    zone = part(["Z", "+00:00", "-00:00", "+01:30", "-23:59", "+05:45"], ["z", "+24:00", "+01:60", "+0100", "", "-1:00"])
    return f"{year}-{month}-{day}{part(['T'], ['t', ' '])}{clock}{fraction}{zone}".encode()


def _agent_id(rng: random.Random) -> bytes:
    """An agent id near the families and bounds of 5.1-5.2."""
    key = "z6MkqVxFWKA54xK1g9unz29qhKtfJG2vvCUgyUJY1jUytT5M"
    body = rng.choice([key, key[:-1], key + "1", "z1" + key[1:], key.replace("q", "0"), "z" + "1" * 47, key.lower()])
    prefix = rng.choice(["tulpa:", "ink:", "key:", "raw:", "TULPA:", "tulp", "did:web:", ""])
    filler = rng.choice(["", "a" * rng.randint(500, 514), "\U0001f600" * rng.randint(250, 258), "\u00e9" * rng.randint(500, 514)])
    return (prefix + rng.choice([body, filler, body + filler])).encode()


def _python(what: str, raw: bytes) -> str:
    if what in ("timestamp", "principal"):
        try:
            text = raw.decode("utf-8")
            return str(parse_timestamp(text)) if what == "timestamp" else canonical_principal(text)
        except ValueError:  # UnicodeDecodeError included
            return "reject"
    try:
        if what == "receipt":
            decode_receipt(raw)
        elif what == "attestation":
            decode_attestation(raw)
        else:
            decode_head(raw)
    except ReceiptError as exc:
        return str(exc.reason)
    except (AttestationError, TreeHeadError):
        return "malformed"
    return "ok"


def test_typescript_and_python_decode_mutated_bytes_alike() -> None:
    node = shutil.which("node")
    assert node is not None, "node is not on PATH: the TypeScript package (ts/) needs Node.js 20"
    assert CLI.is_file(), f"{CLI} is missing: build the TypeScript package first (`make ts`; `make test` does it)"
    rng = random.Random(39)
    seeds = _seeds()
    cases: list[tuple[str, bytes]] = []
    for what, count in COUNTS.items():
        assert seeds[what], what
        cases += [(what, seeds[what][i % len(seeds[what])]) for i in range(len(seeds[what]))]  # each seed as it is
        cases += [(what, _mutate(rng, rng.choice(seeds[what]))) for _ in range(count)]
    cases += [("timestamp", _timestamp(rng)) for _ in range(3000)]
    cases += [("principal", _agent_id(rng)) for _ in range(2000)]
    lines = "".join(json.dumps({"what": w, "b64": base64.b64encode(r).decode()}) + "\n" for w, r in cases)
    done = subprocess.run([node, str(CLI)], input=lines.encode(), capture_output=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    theirs: list[str] = json.loads(done.stdout)
    ours = [_python(w, r) for w, r in cases]
    assert len(theirs) == len(ours)
    differ = [f"{w} {r!r}: ts {t}, python {p}" for (w, r), t, p in zip(cases, theirs, ours, strict=True) if t != p]
    assert not differ, f"{len(differ)} of {len(cases)} decodes differ:\n" + "\n".join(differ[:20])
    reasons = {p for (w, _), p in zip(cases, ours, strict=True) if w == "receipt"}
    assert {"ok", "not_json", "wrong_type", "unknown_field", "duplicate_key", "missing_field"} <= reasons, reasons


#: Characters whose JSON spelling differs between careless encoders: quotes,
#: backslashes, every control character, DEL, the line separators JavaScript
#: once escaped, a BOM, non-ASCII and astral characters.
CHARS = ['"', "\\", "/", "\x7f", "\u2028", "\u2029", "\ufeff", "é", "\U0001f600", "a", "0", " "] + [chr(c) for c in range(0x20)]


def _text(rng: random.Random, lo: int, hi: int) -> str:
    return "".join(rng.choice(CHARS) for _ in range(rng.randint(lo, hi)))


def test_typescript_encodes_receipts_as_busguard_does() -> None:
    """The SDK form (compact JSON, field order, absent fields omitted) is
    byte for byte msgspec's for any field text, so a receipt the TypeScript
    sender signs is the one a Python sender would."""
    node = shutil.which("node")
    assert node is not None and CLI.is_file(), f"node and {CLI} are needed (`make ts`)"
    rng = random.Random(39)
    receipts = []
    for _ in range(2000):
        r = Receipt(
            v=1,
            kind=_text(rng, 1, 12),
            task_id=_text(rng, 1, 20),
            sender=_text(rng, 1, 20),
            receiver=_text(rng, 1, 20),
            payload_hash="0" * 64,
            nonce=_text(rng, 0, 10),
            issued_at=_text(rng, 0, 10),
            session_id=_text(rng, 1, 10) if rng.random() < 0.5 else None,
            sequence=rng.choice([0, 1, 2**53 + 1, 2**63 - 1]) if rng.random() < 0.5 else None,
            key_id=_text(rng, 1, 10) if rng.random() < 0.5 else None,
        )
        receipts.append(r)
    lines = ""
    for r in receipts:
        fields = {k: getattr(r, k) for k in r.__struct_fields__ if k != "v" and getattr(r, k) is not None}
        if "sequence" in fields:
            fields["sequence"] = str(fields["sequence"])
        lines += json.dumps({"what": "encode", "fields": fields}) + "\n"
    done = subprocess.run([node, str(CLI)], input=lines.encode(), capture_output=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    theirs = [base64.b64decode(x) for x in json.loads(done.stdout)]
    differ = [f"{t!r} != {encode_receipt(r)!r}" for r, t in zip(receipts, theirs, strict=True) if t != encode_receipt(r)]
    assert not differ, f"{len(differ)} of {len(receipts)} encodings differ:\n" + "\n".join(differ[:10])
