"""tests/vectors/taint_replay.json through busguard's real admission path: each payload signed
as a `taint-replay` receipt, one batch each, against a fresh MemoryStore."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit.harness import Harness, agent, sender

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
DOC = json.loads((VECTORS / "taint_replay.json").read_text(encoding="utf-8"))


def test_the_generator_reproduces_the_committed_file(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(VECTORS / "generate_taint.py"), "--out", str(tmp_path)], check=True)
    assert (tmp_path / "taint_replay.json").read_bytes() == (VECTORS / "taint_replay.json").read_bytes()


def test_the_generator_does_not_import_busguard() -> None:
    text = (VECTORS / "generate_taint.py").read_text(encoding="utf-8")
    assert "import busguard" not in text and "from busguard" not in text


@pytest.mark.parametrize("vector", DOC["vectors"], ids=[v["name"] for v in DOC["vectors"]])
def test_vector(vector: dict[str, Any]) -> None:
    payload = vector["payload"].encode()
    rec = sender("planner").sign(kind=DOC["kind"], task_id=vector["name"], receiver=agent("executor"), payload=payload)
    assert rec.receipt.payload_hash == vector["payload_sha256"]
    d = Harness().one(rec)
    want = vector["expect"]
    assert (d.outcome, d.reason) == (want["outcome"], want["reason"]), d.detail
    if "detail" in want:
        assert d.detail == want["detail"]
    if "detail_contains" in want:
        assert want["detail_contains"] in d.detail
    if want["outcome"] == "forward":
        fwd = json.loads(d.replacement or b"")
        assert fwd["request_sha256"] == vector["payload_sha256"] and fwd["request"] == json.loads(payload)
        plan = fwd["plan"]
        assert (plan["unit"], plan["forced_by"]) == (want["unit"], want["forced_by"])
        assert [n["id"] for n in plan["nodes"]] == want["nodes"]
        assert {s["sink"]: s["nodes"] for s in plan["sinks"]} == want["sinks"]
    else:
        assert d.replacement is None
