"""tests/vectors/receipts/: reproducible from its independent generator, and
busguard's strict receipt decoder gives every reason the file names (the
TypeScript package judges the same file: tests/unit/test_ts_vectors.py)."""

from __future__ import annotations

import ast
import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from busguard.protocol.receipt import ReceiptError, decode_receipt, receipt_id

DIR = Path(__file__).resolve().parents[1] / "vectors" / "receipts"
DOC: dict[str, Any] = json.loads((DIR / "receipts.json").read_text(encoding="ascii"))


def test_the_file_is_what_the_generator_writes(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(DIR / "generate.py"), "--out", str(tmp_path)], check=True)
    assert (tmp_path / "receipts.json").read_bytes() == (DIR / "receipts.json").read_bytes()


def test_the_generator_imports_no_busguard() -> None:
    tree = ast.parse((DIR / "generate.py").read_text(encoding="utf-8"))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_every_reason_of_the_receipt_checks_is_earned() -> None:
    reasons = {v["expect"]["reason"] for v in DOC["vectors"]}
    assert reasons == {
        "ok",
        "oversized",
        "not_json",
        "wrong_type",
        "unknown_field",
        "missing_field",
        "duplicate_key",
        "unsupported_version",
        "malformed_field",
        "malformed_agent_id",
        "malformed_session",
    }


@pytest.mark.parametrize("v", DOC["vectors"], ids=lambda v: v["name"])
def test_vector(v: dict[str, Any]) -> None:
    raw = base64.b64decode(v["receipt_b64"], validate=True)
    try:
        decode_receipt(raw)
        got = "ok"
    except ReceiptError as exc:
        got = exc.reason
    assert got == v["expect"]["reason"]
    if got == "ok":
        assert receipt_id(raw) == v["expect"]["receipt_id"]
