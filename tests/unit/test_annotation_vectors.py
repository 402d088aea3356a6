"""tests/vectors/annotations/: reproducible from its independent generator,
and busguard's receiver (`verify_admitted`, the SDK's consumer) and auditor
(`check_forwarded`) judge every forward as the file says."""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from busguard.audit.checks import check_forwarded
from busguard.protocol.attestation import AttestationError, annotations_sha256, verify_admitted
from busguard.protocol.records import headers_encoding
from busguard.sdk.consumer import UNATTESTED, AdmittingConsumer, Fetched

DIR = Path(__file__).resolve().parents[1] / "vectors" / "annotations"
DOC: dict[str, Any] = json.loads((DIR / "annotations.json").read_text(encoding="utf-8"))
KEY = bytes.fromhex(DOC["guard"]["public_key_hex"])


def test_the_file_is_what_the_generator_writes(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(DIR / "generate.py"), "--out", str(tmp_path)], check=True)
    assert (tmp_path / "annotations.json").read_bytes() == (DIR / "annotations.json").read_bytes()


def test_the_generator_imports_no_busguard() -> None:
    tree = ast.parse((DIR / "generate.py").read_text(encoding="utf-8"))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"__future__", "nacl"}, imported


def test_every_verdict_of_the_doc_is_earned() -> None:
    seen = {(v["expect"]["receiver"], v["expect"]["auditor"]) for v in DOC["vectors"]}
    assert seen == {("admitted", "ok"), ("refused", "bad"), ("refused", "ok")}


@pytest.mark.parametrize("v", DOC["vectors"], ids=lambda v: v["name"])
def test_vector(v: dict[str, Any]) -> None:
    value = base64.b64decode(v["value_b64"])
    headers = [(k, base64.b64decode(x)) for k, x in v["headers"]]
    if "bound_annotations" in v:
        bound = [(k, x.encode()) for k, x in v["bound_annotations"]]
        assert headers_encoding(bound).hex() == v["annotation_encoding_hex"]
        assert (
            annotations_sha256(bound) == v["annotations_sha256"] == hashlib.sha256(bytes.fromhex(v["annotation_encoding_hex"])).hexdigest()
        )
    batch = AdmittingConsumer(None, guard_public_key=KEY, agent_id=DOC["receiver"]).admit([Fetched("out", 0, 0, value, headers)])
    if v["expect"]["receiver"] == "admitted":
        verify_admitted(value, headers, KEY, DOC["receiver"])
        (d,) = batch.deliveries
        assert d.annotations == {k.removeprefix("busguard-annotation-"): x for k, x in v.get("bound_annotations", [])}
    else:
        with pytest.raises(AttestationError):
            verify_admitted(value, headers, KEY, DOC["receiver"])
        assert [r.reason for r in batch.refusals] == [UNATTESTED]
    assert check_forwarded("out", value, headers, KEY).ok == (v["expect"]["auditor"] == "ok")
