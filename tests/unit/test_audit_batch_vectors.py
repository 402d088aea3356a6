"""tests/vectors/auditbatch/audit-batches.json, built by an independent
generator (docs/protocol.md 12.7), through the auditor's real reader
expansion, per-record checks, Ledger and judge; and busguard's writer packs
each well-formed record's value from its entries byte for byte."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from busguard.audit.checks import apply_audit, check_audit_record
from busguard.audit.lineage import Ledger, judge
from busguard.audit.reader import _raws
from busguard.protocol.auditbatch import Entry, is_batch, pack

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "auditbatch"
DOC = json.loads((VECTORS / "audit-batches.json").read_text(encoding="ascii"))
KEY = bytes.fromhex(DOC["guard"]["public_key_hex"])
AUDIT = DOC["audit_topic"]


def _headers(rec: Any) -> list[tuple[str, bytes]]:
    return [(k, base64.b64decode(v, validate=True)) for k, v in rec["headers"]]


class _Consumed:
    """A record as the Kafka client hands it to the reader."""

    def __init__(self, rec: Any) -> None:
        self.topic, self.partition, self.offset, self.key = AUDIT, rec["partition"], rec["offset"], None
        self.value = None if rec["value_b64"] is None else base64.b64decode(rec["value_b64"], validate=True)
        self.headers = _headers(rec)


def test_the_generator_reproduces_the_committed_vectors(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(VECTORS / "generate.py"), "--out", str(tmp_path)], check=True)
    assert (tmp_path / "audit-batches.json").read_bytes() == (VECTORS / "audit-batches.json").read_bytes()


def test_the_file_has_every_case() -> None:
    vs = DOC["vectors"]
    assert DOC["format"] == "busguard.audit-batches.v1" and len(vs) >= 20
    assert {c for v in vs for c in v["expect"]["violations"]} == {"forged_record", "leaf_missing", "bad_inclusion", "offsets_undecided"}
    assert sum(v["expect"]["ok"] for v in vs) == 5
    assert any(len(r.get("entries", ())) >= 16 for v in vs for r in v["log"])  # msgpack's array 16 framing


@pytest.mark.parametrize("vec", DOC["vectors"], ids=[v["name"] for v in DOC["vectors"]])
def test_audit_batch_vector(vec: Any) -> None:
    led = Ledger()
    for rec in vec["log"]:
        raws = _raws(AUDIT, _Consumed(rec), AUDIT)
        if "entries" in rec:  # well-formed: the reader yields exactly the per-record audit records it stands for
            assert [(r.value, r.headers) for r in raws] == [(base64.b64decode(e["value_b64"]), _headers(e)) for e in rec["entries"]]
            assert all(r.at == (rec["partition"], rec["offset"]) for r in raws)
        for raw in raws:
            apply_audit(led, check_audit_record(raw.value, raw.headers, KEY, undecodable=raw.undecodable), raw.at)
    report = judge(led)
    assert sorted({v.invariant for v in report.violations}) == vec["expect"]["violations"], [v.detail for v in report.violations]
    assert report.ok is vec["expect"]["ok"]
    assert report.summary.decisions == vec["expect"]["decisions"]


@pytest.mark.parametrize("vec", [v for v in DOC["vectors"] if v["expect"]["ok"]], ids=lambda v: v["name"])
def test_busguard_packs_exactly_the_vectors(vec: Any) -> None:
    for rec in vec["log"]:
        if not is_batch(_headers(rec)):
            continue
        entries = [
            Entry(base64.b64decode(e["value_b64"]), *(dict(_headers(e))[k] for k in ("busguard-attestation", "busguard-inclusion")))
            for e in rec["entries"]
        ]
        assert pack(entries) == base64.b64decode(rec["value_b64"])
