"""busguard's `AdmittingConsumer.admit` and the TypeScript package's
`Admitter.admit` decide mutated fetches alike: the same deliveries, the
same refusal reasons, the same positions.

The consumer vectors (tests/vectors/consumer/) hold one fetch with a record
for each way to be refused; this mutates its records' headers and values
deterministically (a header dropped, repeated, nulled, renamed in another
letter case, moved, or one byte of its value changed; the value changed or
nulled), runs every mutated fetch through one `node ts/dist/test/admit-cli.js`
call, and fails on any difference, naming the fetch and what differs.

Needs the package built (`make ts`, which `make test` runs first).
"""

from __future__ import annotations

import base64
import copy
import json
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.unit.test_consumer_vectors import admit, decided

REPO = Path(__file__).resolve().parents[2]
DOC: dict[str, Any] = json.loads((REPO / "tests" / "vectors" / "consumer" / "consumer.json").read_text(encoding="ascii"))
CLI = REPO / "ts" / "dist" / "test" / "admit-cli.js"
FETCHES = 300


def _flip(rng: random.Random, b64: str) -> str:
    raw = bytearray(base64.b64decode(b64))
    if raw:
        raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
    return base64.b64encode(bytes(raw)).decode()


def _mutate(rng: random.Random, rec: dict[str, Any]) -> None:
    headers: list[list[Any]] = rec["headers"]
    op = rng.randrange(8)
    at = rng.randrange(len(headers)) if headers else 0
    if op == 0 and headers:
        del headers[at]
    elif op == 1 and headers:
        headers.insert(rng.randrange(len(headers) + 1), list(headers[at]))
    elif op == 2 and headers:
        headers[at][1] = None
    elif op == 3 and headers:
        headers[at][0] = headers[at][0].upper() if rng.random() < 0.5 else headers[at][0].title()
    elif op == 4 and headers:
        headers.insert(rng.randrange(len(headers) + 1), headers.pop(at))
    elif op == 5 and headers and headers[at][1] is not None:
        headers[at][1] = _flip(rng, headers[at][1])
    elif op == 6:
        rec["value_b64"] = None if rec["value_b64"] is None or rng.random() < 0.3 else _flip(rng, rec["value_b64"])
    else:
        rec["value_b64"] = base64.b64encode(b"").decode()


def test_typescript_and_python_admit_mutated_fetches_alike() -> None:
    node = shutil.which("node")
    assert node is not None, "node is not on PATH: the TypeScript package (ts/) needs Node.js 20"
    assert CLI.is_file(), f"{CLI} is missing: build the TypeScript package first (`make ts`; `make test` does it)"
    rng = random.Random(39)
    docs = []
    for _ in range(FETCHES):
        doc = copy.deepcopy(DOC)
        for rec in doc["records"]:
            if "headers" in rec and rng.random() < 0.6:
                for _ in range(rng.randint(1, 2)):
                    _mutate(rng, rec)
        docs.append(doc)
    done = subprocess.run([node, str(CLI)], input=json.dumps(docs).encode(), capture_output=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    theirs: list[Any] = json.loads(done.stdout)
    ours = [decided(admit(doc)) for doc in docs]
    differ = [f"fetch {i}: ts {t!r}\n  python {p!r}" for i, (t, p) in enumerate(zip(theirs, ours, strict=True)) if t != p]
    assert not differ, f"{len(differ)} of {FETCHES} fetches differ:\n" + "\n".join(differ[:3])
    delivered = sum(len(p["deliveries"]) for p in ours)
    assert 0 < delivered < sum(len(d["records"]) for d in docs), "the mutations leave some records admitted and refuse others"
