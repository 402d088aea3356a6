"""docs/protocol.md stays true: every reason code is documented (and only real
ones), and the worked example verifies with busguard's own functions."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from busguard.admission.types import AdmissionPolicy
from busguard.admission.window import DEFAULT_WINDOW_SIZE
from busguard.protocol.envelope import DEFAULT_MAX_PAYLOAD_BYTES, HEADER_RECEIPT, HEADER_SIGNATURE, b64url_decode_strict
from busguard.protocol.identity import multikey_encode
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.receipt import MAX_RECEIPT_BYTES, SIGNING_CONTEXT, decode_receipt, payload_hash, receipt_id, signing_input
from busguard.protocol.records import DECISION_ID_CONTEXT, Coordinates, decision_id
from busguard.protocol.signing import public_key_from_seed, sign, verify_signature

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
EXAMPLE_VECTOR = "named_agent_handoff_with_session_and_key_id"


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}[ \t]*\n(.*?)(?=^## |\Z)", DOC, re.M | re.S)
    assert match is not None, f"docs/protocol.md has no '## {title}' section"
    return match.group(1)


def _reason_table() -> list[tuple[str, str]]:
    rows = []
    for line in _section("Reason codes").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`"):
            assert re.fullmatch(r"`[a-z0-9_]+`", cells[0]), f"one code per row: {line!r}"
            rows.append((cells[0].strip("`"), cells[1]))
    return rows


def _blocks() -> dict[str, str]:
    found: dict[str, str] = {}
    for label, body in re.findall(r"^```([a-z0-9-]+)\n(.*?)\n```$", DOC, re.M | re.S):
        assert label not in found, f"two ```{label} blocks"
        found[label] = body
    return found


def _hex(text: str) -> bytes:
    return bytes.fromhex("".join(text.split()))


# --------------------------------------------------------------- reason codes


def test_every_reason_is_documented_in_the_reason_codes_section() -> None:
    documented = [code for code, _ in _reason_table()]
    missing = {r.value for r in Reason} - set(documented)
    assert not missing, f"undocumented reason codes: {sorted(missing)}"


def test_every_documented_code_is_a_real_reason_listed_once() -> None:
    documented = [code for code, _ in _reason_table()]
    assert len(documented) == len(set(documented)), "a code is listed twice"
    unknown = set(documented) - {r.value for r in Reason}
    assert not unknown, f"documented codes that are not Reason members: {sorted(unknown)}"


def test_documented_outcomes_are_real_and_agree_with_the_vectors() -> None:
    table = dict(_reason_table())
    assert set(table.values()) <= {o.value for o in Outcome}
    pairs: set[tuple[str, str]] = set()
    for name in ("valid.json", "invalid.json"):
        pairs |= {(v["expect"]["reason"], v["expect"]["outcome"]) for v in _vectors(name)["vectors"]}
    for scenario in _vectors("sequences.json")["scenarios"]:
        pairs |= {(s["expect"]["reason"], s["expect"]["outcome"]) for s in scenario["steps"]}
    for reason, outcome in sorted(pairs):
        assert table[reason] == outcome, f"{reason}: doc says {table[reason]}, vectors say {outcome}"


# ------------------------------------------------------------ worked example


def _vectors(name: str) -> Any:
    return json.loads((ROOT / "tests" / "vectors" / name).read_text(encoding="ascii"))


@pytest.fixture(scope="module")
def ex() -> dict[str, str]:
    blocks = _blocks()
    wanted = {
        "payload",
        "payload-sha256",
        "receipt",
        "signing-input-hex",
        "seed-hex",
        "public-key-hex",
        "public-key-multikey",
        "signature-b64url",
        "receipt-id",
        "decision-id-input-hex",
        "decision-id",
    }
    assert wanted <= set(blocks), f"worked example lacks blocks {sorted(wanted - set(blocks))}"
    return blocks


def test_worked_example_payload_and_receipt(ex: dict[str, str]) -> None:
    payload = ex["payload"].encode()
    raw = ex["receipt"].encode()
    assert payload_hash(payload) == ex["payload-sha256"]
    receipt = decode_receipt(raw)
    assert receipt.payload_hash == ex["payload-sha256"]
    assert signing_input(raw) == _hex(ex["signing-input-hex"])
    assert _hex(ex["signing-input-hex"]).startswith(SIGNING_CONTEXT)
    assert receipt_id(raw) == ex["receipt-id"] == hashlib.sha256(_hex(ex["signing-input-hex"])).hexdigest()


def test_worked_example_signature(ex: dict[str, str]) -> None:
    seed = _hex(ex["seed-hex"])
    public_key = _hex(ex["public-key-hex"])
    message = _hex(ex["signing-input-hex"])
    signature = b64url_decode_strict(ex["signature-b64url"], 64)
    assert public_key_from_seed(seed) == public_key
    assert multikey_encode(public_key) == ex["public-key-multikey"]
    assert verify_signature(public_key, message, signature)
    assert sign(seed, message) == signature  # Ed25519 is deterministic
    assert not verify_signature(public_key, ex["receipt"].encode(), signature)  # the domain prefix matters


def test_worked_example_decision_id(ex: dict[str, str]) -> None:
    data = _hex(ex["decision-id-input-hex"])
    assert data == DECISION_ID_CONTEXT + b"busguard\x00agents.in\x000"
    assert hashlib.sha256(data).hexdigest()[:16] + "0" * 16 == ex["decision-id"]
    assert decision_id("busguard", Coordinates(topic="agents.in", partition=0, offset=0)) == ex["decision-id"]


def test_worked_example_is_the_named_vector(ex: dict[str, str]) -> None:
    doc = _vectors("valid.json")
    (vec,) = [v for v in doc["vectors"] if v["name"] == EXAMPLE_VECTOR]
    headers = {name: base64.b64decode(value) for name, value in vec["headers"]}
    assert base64.b64decode(vec["value_b64"]) == ex["payload"].encode()
    assert headers[HEADER_RECEIPT] == ex["receipt"].encode()
    assert headers[HEADER_SIGNATURE] == ex["signature-b64url"].encode()
    assert vec["signing_input_hex"] == _hex(ex["signing-input-hex"]).hex()
    assert vec["public_key_hex"] == ex["public-key-hex"]
    assert doc["signers"][vec["signer"]]["seed_hex"] == ex["seed-hex"]
    assert vec["receipt_id"] == ex["receipt-id"]
    assert vec["source"] == {"topic": "agents.in", "partition": 0, "offset": 0}
    assert vec["expect"]["decision_id"] == ex["decision-id"]
    keys = [k for a in doc["registry"]["agent"] for k in a.get("key", [])]
    assert any(k["public_key"] == ex["public-key-multikey"] for k in keys)


# -------------------------------------------------------------------- limits


def _spaced(n: int) -> str:
    return f"{n:,}".replace(",", " ")


def test_documented_defaults_match_the_code() -> None:
    limits = _section("10. Limits and defaults")
    p = AdmissionPolicy()
    for value in (DEFAULT_MAX_PAYLOAD_BYTES, p.max_age_ms, p.max_future_ms, p.nonce_retention_ms):
        assert _spaced(value) in limits, value
    assert str(MAX_RECEIPT_BYTES) in limits
    assert str(DEFAULT_WINDOW_SIZE) in limits and p.window_size == DEFAULT_WINDOW_SIZE
    assert p.session_retention_ms == p.task_retention_ms == p.decision_retention_ms == 7 * 86_400_000
    assert "7 days" in limits
    assert f"`{HEADER_RECEIPT}`" in DOC and f"`{HEADER_SIGNATURE}`" in DOC
    assert SIGNING_CONTEXT == b"busguard/receipt/v1\x00" and DECISION_ID_CONTEXT == b"busguard/decision/v1\x00"


# --------------------------------------------------- attestation and prior (12.1, 7.2)


def _table(after: str) -> list[list[str]]:
    """The rows (cells, backticks stripped) of the first table after `after`."""
    start = DOC.index(after)
    rows: list[list[str]] = []
    for line in DOC[start:].splitlines()[1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0].startswith("`"):
            rows.append([c.strip("`") for c in cells])
    return rows


def test_the_attestation_table_names_every_field_in_wire_order() -> None:
    from busguard.protocol.attestation import Attestation

    assert [r[0] for r in _table("The attestation object")] == list(Attestation.__struct_fields__)


def test_the_prior_table_names_every_key_in_wire_order_with_its_encoding() -> None:
    from busguard.protocol.records import TaskEntry

    rows = _table("`prior` is a JSON object")
    assert [r[0] for r in rows] == list(TaskEntry.__struct_fields__)
    source = Coordinates(topic="t", partition=0, offset=5)
    entry = TaskEntry("handoff", "t1", "a" * 64, "b" * 32, "tulpa:x", "n" * 16, "h", None, None, source, b"{}", bytes(64), 1)
    wire = json.loads(msgspec.json.encode(entry))
    assert list(wire) == [r[0] for r in rows]  # every key present, nulls included
    assert wire["receipt"] == base64.b64encode(b"{}").decode() and len(wire["signature"]) == 88
    assert wire["session_id"] is None and wire["sequence"] is None


def test_decision_sha256_is_the_audit_records_hash_on_every_guard_output() -> None:
    from busguard.config import TopicsConfig
    from busguard.protocol.attestation import HEADER_ATTESTATION, attest, decision_bytes, decode_attestation, seal
    from busguard.protocol.keyfile import new_identity
    from busguard.protocol.signing import Signer
    from busguard.runtime.outputs import Sealed, outputs_for

    from .harness import Harness, agent, sender

    guard = new_identity()
    s = sender("planner")
    first = s.sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"work")
    h = Harness()
    decisions = [h.one(first, offset=0), h.one(first, offset=1)]  # forward, then exact_duplicate (dead-letter)
    assert [d.outcome for d in decisions] == ["forward", "duplicate"]
    for d in decisions:
        body = decision_bytes(d)
        att = attest(d, body, guard.agent_id)
        primary, audit = outputs_for(
            Sealed(d, body, att, seal(Signer(guard.seed), att)), b"k", first.value, first.headers, "down", TopicsConfig(), 1 << 20
        )
        for out in (primary, audit):
            a = decode_attestation(dict(out.headers)[HEADER_ATTESTATION])
            assert a.decision_sha256 == hashlib.sha256(audit.value or b"").hexdigest()
            assert a.decided_at == d.decided_at and a.receipt_id == d.receipt_id
        assert hashlib.sha256(primary.value or b"").hexdigest() != hashlib.sha256(audit.value or b"").hexdigest()


def test_receipt_id_is_null_exactly_when_no_receipt_was_opened() -> None:
    from .harness import Harness, agent, sender

    rec = sender("planner").sign(kind="handoff", task_id="t", receiver=agent("executor"), payload=b"work")
    signature = dict(rec.headers)[HEADER_SIGNATURE]
    bad_sig = [(HEADER_RECEIPT, dict(rec.headers)[HEADER_RECEIPT]), (HEADER_SIGNATURE, b"A" * 85 + b"A")]
    row1, row2, row10 = Harness().feed_raw(
        [(None, list(rec.headers)), (rec.value, [(HEADER_RECEIPT, b"not json"), (HEADER_SIGNATURE, signature)]), (rec.value, bad_sig)]
    )
    assert (row1.reason, row1.receipt_id) == (Reason.MISSING_FIELD, None)
    assert (row2.reason, row2.receipt_id) == (Reason.NOT_JSON, None)
    assert row10.reason == Reason.BAD_SIGNATURE and row10.receipt_id == rec.receipt_id


def test_the_tree_head_table_names_every_field_in_wire_order() -> None:
    from busguard.protocol.treehead import TreeHead

    assert [r[0] for r in _table("**The tree head**")] == list(TreeHead.__struct_fields__)
