#!/usr/bin/env python3
"""Generate the merkle-sha256 canonicalizer vectors: merkle-sha256.json.

Deterministic: re-running this script reproduces the committed file byte for
byte (tests/unit/test_award_merkle.py checks that).

Deliberately independent of busguard and of the rfc8785 package that
busguard uses: the tree hash, inclusion paths and consistency proofs are
written here straight from the recursive definitions of RFC 9162 §2.1.1,
§2.1.3.1 and §2.1.4.1 (busguard builds roots bottom-up and checks proofs with
the iterative §2.1.3.2/§2.1.4.2 algorithms), and each record's canonical
(RFC 8785) bytes are either produced by the small serializer below, which
only handles what the generated records contain (strings, integers, booleans,
null, arrays, objects), or written out by hand next to the record for the
edge cases (numbers, escapes, key order). A vector that merely echoed
busguard's own output could not catch a regression.

    python tests/vectors/merkle/generate.py [--out DIR]   (default: this directory)
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

FORMAT = "busguard.merkle-sha256.v1"
SIZES = [0, 1, 2, 3, 4, 5, 7, 8, 9, 16, 17]
MAX_DEPTH = 128

CONSTRUCTION = [
    "Input: one JSON text (RFC 8259, UTF-8, no byte order mark) whose top-level value is an array of records.",
    "Leaf i: the RFC 8785 (JCS) serialization of record i, as UTF-8 bytes.",
    "Leaf hash: SHA-256(0x00 || leaf). Node hash: SHA-256(0x01 || left || right).",
    "Tree of n > 1 leaves: left = tree of leaves [0, k), right = tree of leaves [k, n), k the largest power of two smaller than n.",
    "Tree of 1 leaf: its leaf hash. Tree of 0 leaves: SHA-256 of the empty string.",
    "Root: the tree's hash as 64 lowercase hex characters (RFC 9162 section 2.1.1).",
    "Proofs: inclusion (RFC 9162 section 2.1.3) and consistency (section 2.1.4), hashes as 64 lowercase hex characters.",
]


# ------------------------------------------------------------------ RFC 9162


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def largest_power_of_two_below(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(leaves: list[bytes]) -> bytes:
    n = len(leaves)
    if n == 0:
        return sha256(b"")
    if n == 1:
        return sha256(b"\x00" + leaves[0])
    k = largest_power_of_two_below(n)
    return sha256(b"\x01" + mth(leaves[:k]) + mth(leaves[k:]))


def path(m: int, leaves: list[bytes]) -> list[bytes]:
    n = len(leaves)
    if n == 1:
        return []
    k = largest_power_of_two_below(n)
    if m < k:
        return path(m, leaves[:k]) + [mth(leaves[k:])]
    return path(m - k, leaves[k:]) + [mth(leaves[:k])]


def subproof(m: int, leaves: list[bytes], complete: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if complete else [mth(leaves)]
    k = largest_power_of_two_below(n)
    if m <= k:
        return subproof(m, leaves[:k], complete) + [mth(leaves[k:])]
    return subproof(m - k, leaves[k:], False) + [mth(leaves[:k])]


def consistency(m: int, leaves: list[bytes]) -> list[bytes]:
    if m == 0 or m == len(leaves):
        return []
    return subproof(m, leaves, True)


# ---------------------------------------------------------- minimal RFC 8785


def jcs_string(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in "\b\f\n\r\t":
            out.append({"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def jcs(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        assert abs(value) < 2**53
        return str(value)
    if isinstance(value, str):
        return jcs_string(value)
    if isinstance(value, list):
        return "[" + ",".join(jcs(v) for v in value) + "]"
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: k.encode("utf-16-be"))
        return "{" + ",".join(jcs_string(k) + ":" + jcs(value[k]) for k in keys) + "}"
    raise TypeError(f"the generator's serializer does not handle {type(value).__name__}")


# ------------------------------------------------------------------- records


def record(i: int) -> dict[str, Any]:
    """Record i of the one growing list every size-n tree is a prefix of.

    Written with keys out of order and non-ASCII escaped in the output text, so
    a canonicalizer that hashed the text as given would get a different root.
    """
    op = "delete" if i % 3 == 2 else "put"
    rec: dict[str, Any] = {
        "value": None if op == "delete" else {"n": i * i, "label": f"caf\u00e9 {i}"},
        "seq": i,
        "op": op,
        "key": f"k{i:02d}",
    }
    if i % 4 == 1:
        rec["tags"] = ["b", "a", "\u20ac"]
    return rec


def tree_case(case_id: str, description: str, output: bytes, leaves: list[bytes]) -> dict[str, Any]:
    return {
        "caseId": case_id,
        "description": description,
        "outputHex": output.hex(),
        "output": output.decode("utf-8"),
        "leaves": [leaf.decode("utf-8") for leaf in leaves],
        "leafHashes": [sha256(b"\x00" + leaf).hex() for leaf in leaves],
        "root": mth(leaves).hex(),
    }


#: (record as written in the output, its JCS form written out by hand).
EDGE_RECORDS: list[tuple[str, str]] = [
    ("{}", "{}"),
    ("[]", "[]"),
    ('""', '""'),
    ("null", "null"),
    ("true", "true"),
    ("false", "false"),
    ("-0", "0"),
    ("-0.0", "0"),
    ("1.0E2", "100"),
    ("4.50", "4.5"),
    ("2e-3", "0.002"),
    ("0.000001", "0.000001"),
    ("1e-7", "1e-7"),
    ("1e21", "1e+21"),
    ("1E30", "1e+30"),
    ("333333333.33333329", "333333333.3333333"),
    ("9007199254740991", "9007199254740991"),
    ("-9007199254740991", "-9007199254740991"),
    ("9007199254740992", "9007199254740992"),
    ("100000000000000000000", "100000000000000000000"),
    ("1000000000000000000000", "1e+21"),
    ('{ "b" : 1 , "a" : { "d" : [3, 2, 1], "c" : "x" } }', '{"a":{"c":"x","d":[3,2,1]},"b":1}'),
    (
        '{"\\u20ac": 1, "\\r": 2, "1": 3, "\\ud83d\\ude02": 4, "\\u00f6": 5}',
        '{"\\r":2,"1":3,"\u00f6":5,"\u20ac":1,"\U0001f602":4}',
    ),
    ('"\\u0000\\u001f\\u007f\\u2028\\/"', '"\\u0000\\u001f\u007f\u2028/"'),
    ('"tab\\there \\"quoted\\" back\\\\slash"', '"tab\\there \\"quoted\\" back\\\\slash"'),
    ('{"a": 1}', '{"a":1}'),
    ('{ "a" : 1 }', '{"a":1}'),
    ('[[[["deep"]]]]', '[[[["deep"]]]]'),
]


def edge_case() -> dict[str, Any]:
    output = ("[\n  " + ",\n  ".join(text for text, _ in EDGE_RECORDS) + "\n]\n").encode("utf-8")
    leaves = [canonical.encode("utf-8") for _, canonical in EDGE_RECORDS]
    return tree_case(
        "edge-records",
        "Records that are not objects, numbers that JCS rewrites (-0, exponents, trailing zeros, integers around 2**53 and 1e21), "
        "keys sorted by UTF-16 code units, escapes, and one record given twice in different spellings (equal leaves).",
        output,
        leaves,
    )


def depth_case() -> dict[str, Any]:
    inner = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    output = f"[{inner}]".encode()
    return tree_case(
        "depth-limit-accepted",
        f"Exactly {MAX_DEPTH} nested arrays counting the top-level one, the deepest accepted.",
        output,
        [inner.encode()],
    )


REJECTS: list[tuple[str, bytes, str, str]] = [
    ("empty-output", b"", "not-json", "No JSON value at all."),
    ("trailing-comma", b'[{"a":1},]', "not-json", "Not JSON: a trailing comma."),
    ("two-values", b"[] []", "not-json", "Two JSON texts, not one."),
    ("single-quotes", b"[{'a':1}]", "not-json", "Not JSON: single-quoted strings."),
    ("leading-zero", b"[01]", "not-json", "Not JSON: a number with a leading zero."),
    ("raw-control-character", b'["a\x01b"]', "not-json", "Not JSON: an unescaped control character in a string."),
    ("object-at-top", b'{"records": []}', "not-an-array", "The top-level value must be the array of records."),
    ("string-at-top", b'"[]"', "not-an-array", "A JSON string that looks like an array is still a string."),
    ("duplicate-key", b'[{"a":1,"a":2}]', "duplicate-key", "Two values for one key: readers would disagree on the record."),
    ("duplicate-key-same-value", b'[{"x":{"k":1,"k":1}}]', "duplicate-key", "Refused even when both values are equal."),
    ("duplicate-key-escaped", b'[{"a":1,"\\u0061":2}]', "duplicate-key", "The same key, spelled once with an escape."),
    ("integer-2-53-plus-1", b"[9007199254740993]", "inexact-integer", "2**53 + 1: the first integer no double holds."),
    ("integer-minus-2-53-minus-1", b"[-9007199254740993]", "inexact-integer", "-(2**53) - 1."),
    ("integer-huge", b"[123456789012345678901234567890]", "inexact-integer", "An integer a double would round."),
    ("integer-past-double-range", b"[1" + b"0" * 309 + b"]", "inexact-integer", "10**309: past the largest double."),
    ("float-overflow", b"[1e400]", "non-finite-number", "Parses to infinity."),
    ("nan", b"[NaN]", "non-finite-number", "NaN is not JSON (some parsers accept it)."),
    ("infinity", b"[Infinity]", "non-finite-number", "Infinity is not JSON."),
    ("minus-infinity", b"[-Infinity]", "non-finite-number", "-Infinity is not JSON."),
    ("invalid-utf8", b'["\xff"]', "invalid-utf8", "A byte that never occurs in UTF-8."),
    ("truncated-utf8", b'["\xc3"]', "invalid-utf8", "A UTF-8 sequence cut short."),
    ("overlong-utf8", b'["\xc0\xaf"]', "invalid-utf8", "An overlong encoding of '/'."),
    ("byte-order-mark", b"\xef\xbb\xbf[]", "byte-order-mark", "RFC 8259 section 8.1: no byte order mark."),
    ("lone-high-surrogate", b'["\\ud800"]', "lone-surrogate", "An unpaired surrogate escape in a value: not Unicode text."),
    ("lone-low-surrogate-key", b'[{"\\udc00":1}]', "lone-surrogate", "An unpaired surrogate escape in a key."),
    ("too-deep", b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "too-deep", f"{MAX_DEPTH + 1} nested arrays."),
    ("far-too-deep", b"[" * 5000 + b"]" * 5000, "too-deep", "5000 nested arrays."),
]


def documents() -> dict[str, Any]:
    full = [jcs(record(i)).encode("utf-8") for i in range(max(SIZES))]
    trees = []
    for n in SIZES:
        records = [record(i) for i in range(n)]
        output = (json.dumps(records, indent=2, ensure_ascii=True) + "\n").encode("ascii")
        trees.append(tree_case(f"n{n}", f"The first {n} records of the growing list.", output, full[:n]))
    trees.append(edge_case())
    trees.append(depth_case())

    inclusion = []
    for n in SIZES:
        for m in range(n):
            inclusion.append(
                {
                    "caseId": f"n{n}-leaf{m}",
                    "treeSize": n,
                    "leafIndex": m,
                    "leafHash": sha256(b"\x00" + full[m]).hex(),
                    "proof": [h.hex() for h in path(m, full[:n])],
                    "root": mth(full[:n]).hex(),
                    "expect": "accept",
                }
            )
    good = next(c for c in inclusion if c["caseId"] == "n9-leaf5")
    flipped = good["proof"][0][:-1] + ("0" if good["proof"][0][-1] != "0" else "1")
    inclusion += [
        {**good, "caseId": "n9-leaf5-wrong-index", "leafIndex": 4, "expect": "reject"},
        {**good, "caseId": "n9-leaf5-tampered-proof", "proof": [flipped, *good["proof"][1:]], "expect": "reject"},
        {**good, "caseId": "n9-leaf5-proof-too-short", "proof": good["proof"][:-1], "expect": "reject"},
        {**good, "caseId": "n9-leaf5-proof-extra-entry", "proof": [*good["proof"], good["leafHash"]], "expect": "reject"},
        {**good, "caseId": "n9-leaf5-wrong-size", "treeSize": 8, "expect": "reject"},
        {
            **good,
            "caseId": "n9-leaf5-other-size-same-shape",
            "treeSize": 16,
            "expect": "accept",
            "note": "An inclusion proof binds the tree size only through the shape of the path: leaf 5 has the same "
            "left/right path in trees of 9 and 16 leaves, so this verifies. The size must come from the signed "
            "commitment, never from the proof's sender.",
        },
        {**good, "caseId": "n9-index-past-end", "leafIndex": 9, "expect": "reject"},
    ]

    consist = []
    for n in SIZES:
        for m in SIZES:
            if m > n:
                continue
            consist.append(
                {
                    "caseId": f"n{m}-to-n{n}",
                    "first": m,
                    "firstRoot": mth(full[:m]).hex(),
                    "second": n,
                    "secondRoot": mth(full[:n]).hex(),
                    "proof": [h.hex() for h in consistency(m, full[:n])],
                    "expect": "accept",
                }
            )
    good = next(c for c in consist if c["caseId"] == "n5-to-n17")
    consist += [
        {**good, "caseId": "n5-to-n17-swapped-roots", "firstRoot": good["secondRoot"], "secondRoot": good["firstRoot"], "expect": "reject"},
        {**good, "caseId": "n5-to-n17-proof-reversed", "proof": good["proof"][::-1], "expect": "reject"},
        {**good, "caseId": "n5-to-n17-proof-too-short", "proof": good["proof"][:-1], "expect": "reject"},
        {**good, "caseId": "n5-to-n17-wrong-second-size", "second": 16, "expect": "reject"},
        {**good, "caseId": "n5-to-n17-edge-root", "secondRoot": edge_case()["root"], "expect": "reject"},
    ]

    rejects = [{"caseId": cid, "description": desc, "outputHex": raw.hex(), "problem": problem} for cid, raw, problem, desc in REJECTS]
    return {
        "merkle-sha256.json": {
            "format": FORMAT,
            "canonicalizer": "merkle-sha256",
            "construction": CONSTRUCTION,
            "trees": trees,
            "inclusion": inclusion,
            "consistency": consist,
            "rejects": rejects,
        }
    }


def render(doc: Any) -> bytes:
    return (json.dumps(doc, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent, help="directory to write the JSON file to")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, doc in documents().items():
        (args.out / name).write_bytes(render(doc))


if __name__ == "__main__":
    main()
