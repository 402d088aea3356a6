"""busguard's successor check (`verify_forwarded`, busguard.sdk.scope) and the
TypeScript package's (`verifyForwarded`, ts/src/readers/scope.ts) read
mutated session-handoff values the same way: the same component checks, or
the same `MessageCode` met at the same place (docs/compromise-handoff.md 2,
3.1, 11, 12).

The shared vectors (tests/vectors/readers/compromise-handoff.json) pin each
refusal on purpose; this throws thousands of deterministic mutations at both
through one `node ts/dist/test/decode-cli.js` run: of the values in those
vectors (bytes replaced, deleted, repeated, inserted, truncated), and of the
genuine scope's statement bytes put back into the handoff (so the scope's own
strict decoding is compared before its signature fails), and fails on any
difference, naming the bytes.

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

import msgspec

from busguard.policies.compromise.message import MessageError
from busguard.protocol.envelope import b64url_decode_strict, b64url_encode
from busguard.protocol.registry import KeyRegistry, _RegistryFile
from busguard.protocol.timestamps import parse_timestamp
from busguard.sdk.compromise import registry_keys
from busguard.sdk.scope import verify_forwarded

from .mutation import mutate

REPO = Path(__file__).resolve().parents[2]
VECTORS = json.loads((REPO / "tests" / "vectors" / "readers" / "compromise-handoff.json").read_text(encoding="utf-8"))
CLI = REPO / "ts" / "dist" / "test" / "decode-cli.js"

#: Bytes and tokens that move the strict JSON reader and the handoff's rules between their branches.
BYTES = b'"{}[]:,\\ \t\n0123456789-+.eEtrufalsnx=_AZaz\x00\x1f\x7f\x80\xbf\xc3\xed\xf0\xff'
TOKENS = [
    b',"v":1',
    b',"scope":null',
    b',"declaration":{"statement":"","signature":"' + b"A" * 86 + b'"}',
    b'{"name":"plan","operational":true,"encoding":"x","content":""},',
    b'{"name":"x","operational":false,"encoding":"x","sha256":"' + b"0" * 64 + b'"},',
    b',"content":null',
    b',"sha256":"' + b"a" * 64 + b'\\n"',
    b',"key_id":"k"',
    b',"extra":[1,{"a":2}]',
    b"null",
    b"true",
    b"1.5",
    b"1e400",
    b"9" * 30,
    b'"\\ud800"',
    b'"\\u006eame"',
    b'""',
    b"{}",
    b"[]",
    b" ",
    b"\xf0\x9f\x98\x80",
    b'"\xff"',
    b"\\n",
    b"=",
]


def _mutate(rng: random.Random, raw: bytes) -> bytes:
    return mutate(rng, raw, alphabet=BYTES, tokens=TOKENS)


def _python(case: dict[str, Any], keys: Any) -> str:
    try:
        r = verify_forwarded(base64.b64decode(case["b64"]), handoff_id=case["handoff_id"], session=case["session"], keys=keys)
    except MessageError as exc:
        return f"{exc.code}@{exc.where}"
    checks = [[c.name, c.sha256, c.operational, str(c.against_scope)] for c in r.checks]
    return json.dumps([r.scope_present, checks], separators=(",", ":"), ensure_ascii=False)


def _with_statement(value: bytes, statement: bytes) -> bytes:
    doc = json.loads(value)
    doc["scope"]["statement"] = b64url_encode(statement)
    return json.dumps(doc, separators=(",", ":")).encode()


def test_typescript_and_python_check_mutated_handoffs_alike() -> None:
    node = shutil.which("node")
    assert node is not None, "node is not on PATH: the TypeScript package (ts/) needs Node.js 20"
    assert CLI.is_file(), f"{CLI} is missing: build the TypeScript package first (`make ts`; `make test` does it)"
    rng = random.Random(39)
    genuine = next(v for v in VECTORS["vectors"] if v["name"] == "clean_with_unlisted_component")
    value = base64.b64decode(genuine["value_b64"])
    statement = b64url_decode_strict(json.loads(value)["scope"]["statement"])
    seeds = [base64.b64decode(v["value_b64"]) for v in VECTORS["vectors"] if len(v["value_b64"]) < 4096]
    values = [*seeds]
    values += [_mutate(rng, rng.choice(seeds)) for _ in range(3000)]
    values += [_with_statement(value, _mutate(rng, statement)) for _ in range(1500)]
    base = {"handoff_id": genuine["task_id"], "session": genuine["sender"], "registry": VECTORS["registry"], "now": VECTORS["now"]}
    cases = [{**base, "b64": base64.b64encode(v).decode()} for v in values]
    lines = "".join(json.dumps({"what": "handoff", **c}) + "\n" for c in cases)
    done = subprocess.run([node, str(CLI)], input=lines.encode(), capture_output=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    theirs: list[str] = json.loads(done.stdout)
    now = parse_timestamp(VECTORS["now"])
    keys = registry_keys(KeyRegistry.from_entries(msgspec.convert(VECTORS["registry"], _RegistryFile), "registry"), clock_ms=lambda: now)
    ours = [_python(c, keys) for c in cases]
    assert len(theirs) == len(ours)
    differ = [f"{v!r}: ts {t}, python {p}" for v, t, p in zip(values, theirs, ours, strict=True) if t != p]
    assert not differ, f"{len(differ)} of {len(cases)} checks differ:\n" + "\n".join(d[:600] for d in differ[:20])
    codes = {p.split("@")[0] for p in ours if "@" in p}
    assert {"not_json", "wrong_type", "unknown_field", "missing_field", "malformed_field", "duplicate_key", "bad_signature"} <= codes, codes
    assert any(p.startswith("[true,") for p in ours) and any("@scope" in p and p.startswith("not_json") for p in ours)
