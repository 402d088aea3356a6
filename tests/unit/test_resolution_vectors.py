"""tests/vectors/resolutions.json, built by the independent generator, through
the auditor's real per-record checks and Ledger: whose key seals a
resolution, and whether an operator's name is proven by their signature."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from busguard.audit.checks import apply_audit, check_audit_record
from busguard.audit.lineage import Ledger, judge
from busguard.protocol.identity import multikey_decode

DOC = json.loads((Path(__file__).resolve().parents[1] / "vectors" / "resolutions.json").read_text(encoding="ascii"))


def _record(rec: Any) -> tuple[bytes, list[tuple[str, bytes]]]:
    return base64.b64decode(rec["value_b64"], validate=True), [(k, base64.b64decode(v, validate=True)) for k, v in rec["headers"]]


def test_the_file_has_every_case() -> None:
    assert DOC["format"] == "busguard.vectors.v1" and len(DOC["vectors"]) >= 11
    assert {c for v in DOC["vectors"] for c in v["expect"]["violations"]} == {
        "guard_sealed_resolution",
        "unproven_operator",
        "forged_record",
    }
    assert sum(v["expect"]["ok"] for v in DOC["vectors"]) == 2


@pytest.mark.parametrize("vec", DOC["vectors"], ids=[v["description"] for v in DOC["vectors"]])
def test_resolution_vector(vec: Any) -> None:
    guard, reconciler = multikey_decode(DOC["guard_public_key"]), multikey_decode(DOC["reconciler_public_key"])
    led = Ledger(operators={o["name"]: o["public_key"] for o in DOC["operators"]})
    for rec in [*DOC["log"], vec]:
        apply_audit(led, check_audit_record(*_record(rec), guard, reconciler))
    report = judge(led)
    assert sorted(v.invariant for v in report.violations) == vec["expect"]["violations"], [v.detail for v in report.violations]
    assert report.ok is vec["expect"]["ok"]
