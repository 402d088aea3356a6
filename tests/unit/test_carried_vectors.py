"""tests/vectors/carried/: reproducible from its independent generator;
busguard's auditor verifies each decision record (either form) as the file
says and ties the record that delivers the carried bytes to it; busguard's
writer produces each well-formed decision record byte for byte."""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from busguard.audit.checks import check_audit_record, check_forwarded
from busguard.protocol.attestation import decision_bytes, open_attestation
from busguard.protocol.records import Decision

DIR = Path(__file__).resolve().parents[1] / "vectors" / "carried"
DOC: dict[str, Any] = json.loads((DIR / "carried.json").read_text(encoding="utf-8"))
KEY = bytes.fromhex(DOC["guard"]["public_key_hex"])


def _record(r: dict[str, Any]) -> tuple[bytes | None, list[tuple[str, bytes]]]:
    value = None if r["value_b64"] is None else base64.b64decode(r["value_b64"])
    return value, [(k, base64.b64decode(v)) for k, v in r["headers"]]


def test_the_file_is_what_the_generator_writes(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(DIR / "generate.py"), "--out", str(tmp_path)], check=True)
    assert (tmp_path / "carried.json").read_bytes() == (DIR / "carried.json").read_bytes()


def test_the_generator_imports_no_busguard() -> None:
    tree = ast.parse((DIR / "generate.py").read_text(encoding="utf-8"))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"__future__", "nacl"}, imported


@pytest.mark.parametrize("v", DOC["vectors"], ids=lambda v: v["name"])
def test_vector(v: dict[str, Any]) -> None:
    value, headers = _record(v["decision_record"])
    assert value is not None
    checked = check_audit_record(value, headers, KEY)
    assert checked.verified == (v["expect"]["audit_record"] == "verified"), checked.why
    d = msgspec.json.decode(value, type=Decision)
    delivered_value, delivered_headers = _record(v["delivered"])
    body = delivered_value or b""
    if v["delivered"]["role"] == "forward":
        ok = check_forwarded("out", body, delivered_headers, KEY).ok
        persisted = msgspec.structs.replace(d, replacement=body) if d.replacement is None else d
    else:
        # a notice carries the decision's proof: its decision record is the one its attestation names
        att = open_attestation(delivered_headers, KEY)
        assert att.decision_sha256 == hashlib.sha256(value).hexdigest()
        (n,) = d.notices or ()
        if isinstance(n.value, bytes):
            ok = n.value == body
        else:
            ok = (n.value_sha256, n.value_length) == (hashlib.sha256(body).hexdigest(), len(body))
        persisted = msgspec.structs.replace(d, notices=(msgspec.structs.replace(n, value=body),))
    assert ok == (v["expect"]["delivered"] == "ok")
    if v["expect"]["writer"]:
        # the decision as the guard persists it (the bytes kept) is written as exactly this record
        assert decision_bytes(persisted) == value


def test_every_outcome_of_the_doc_is_earned() -> None:
    seen = {(v["expect"]["audit_record"], v["expect"]["delivered"]) for v in DOC["vectors"]}
    assert seen == {("verified", "ok"), ("refused", "ok"), ("verified", "bad")}
