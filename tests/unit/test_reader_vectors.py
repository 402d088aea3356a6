"""tests/vectors/readers/: busguard's kind readers say what each case expects,
and the generator reproduces the committed file byte for byte (the
TypeScript SDK's readers are judged on the same file: test_ts_vectors.py)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.vectors.readers.generate import verdict

HERE = Path(__file__).resolve().parents[1] / "vectors" / "readers"
DOC = json.loads((HERE / "taint-plan.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("vec", DOC["vectors"], ids=lambda v: v["name"])
def test_the_taint_plan_reader_says_what_the_vector_expects(vec: Any) -> None:
    case = {
        "value": base64.b64decode(vec["value_b64"]),
        "payload_hash": vec["payload_hash"],
        "task_id": vec["task_id"],
        "annotations": vec["annotations"],
    }
    assert verdict(case) == vec["expect"]


def test_the_vectors_hold_genuine_plans_and_every_refusal() -> None:
    expects = [v["expect"] for v in DOC["vectors"]]
    assert sum(e != "unreadable" for e in expects) == 2 and expects.count("unreadable") == len(expects) - 2


def test_generator_reproduces_the_file(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(HERE / "generate.py"), "--out", str(tmp_path)], check=True, timeout=120)
    assert (tmp_path / "taint-plan.json").read_bytes() == (HERE / "taint-plan.json").read_bytes()
