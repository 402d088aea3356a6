"""busguard's own wire-protocol vectors (tests/vectors/*.json), every case,
through the real admission path: `admit_batch` over a fresh `MemoryStore`, with
a `KeyRegistry` built from the file's registry the way configs/keys.toml is
loaded. Counts are asserted so a truncated file fails, and the generator must
reproduce the committed files byte for byte.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from itertools import groupby
from pathlib import Path
from typing import Any

import msgspec
import pytest

import busguard
from busguard.admission.batch import Input, admit_batch
from busguard.admission.types import AdmissionPolicy
from busguard.policies import KINDS
from busguard.protocol.envelope import HEADER_RECEIPT, HEADER_SIGNATURE
from busguard.protocol.identity import canonical_principal
from busguard.protocol.reasons import Outcome, Reason
from busguard.protocol.receipt import receipt_id, signing_input
from busguard.protocol.records import Coordinates, Decision
from busguard.protocol.registry import KeyRegistry, _RegistryFile
from busguard.protocol.timestamps import parse_timestamp
from busguard.state.memory.store import MemoryStore

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
FILES = ("valid.json", "invalid.json", "sequences.json")
MIN_COUNTS = {"valid.json": 20, "invalid.json": 80, "sequences.json": 15}
MIN_SEQUENCE_STEPS = 50


def _load(name: str) -> Any:
    return json.loads((VECTORS / name).read_text(encoding="ascii"))


DOCS = {name: _load(name) for name in FILES}


def _b64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text, validate=True)


def _registry(doc: Any) -> KeyRegistry:
    # Exactly what KeyRegistry.load does after tomllib has parsed keys.toml.
    return KeyRegistry.from_entries(msgspec.convert(doc["registry"], _RegistryFile), "vectors")


def _policy(doc: Any, override: dict[str, Any] | None = None) -> AdmissionPolicy:
    return msgspec.convert({**doc["policy"], **(override or {})}, AdmissionPolicy)


def _input(vec: Any) -> Input:
    src = vec["source"]
    return Input(
        Coordinates(topic=src["topic"], partition=src["partition"], offset=src["offset"]),
        _b64(vec["value_b64"]),
        [(name, _b64(value)) for name, value in vec["headers"]],
    )


def _check(decision: Decision, expect: Any) -> None:
    got = {"outcome": decision.outcome, "reason": decision.reason, "decision_id": decision.decision_id}
    for key in ("principal", "key_id", "supersedes", "receipt_id"):
        if key in expect:
            got[key] = getattr(decision, key)
    if "prior_receipt_id" in expect:
        got["prior_receipt_id"] = decision.prior.receipt_id if decision.prior is not None else None
    assert got == expect, decision.detail
    if decision.outcome == "reject":
        assert decision.detail, "every reject explains itself"


def _run_single(doc: Any, vec: Any) -> Decision:
    store = MemoryStore(created_at=parse_timestamp(doc["store_created_at"]))
    decisions = admit_batch(
        [_input(vec)],
        store=store,
        registry=_registry(doc),
        now_ms=parse_timestamp(doc["now"]),
        policy=_policy(doc),
        max_payload_bytes=vec.get("max_payload_bytes", doc["max_payload_bytes"]),
        receivers={} if "receivers" not in vec else {vec["source"]["topic"]: frozenset(map(canonical_principal, vec["receivers"]))},
    )
    assert len(decisions) == 1
    return decisions[0]


def _params(name: str, key: str = "vectors") -> list[Any]:
    return [pytest.param(v, id=v["name"]) for v in DOCS[name][key]]


# ----------------------------------------------------------------- file shape


@pytest.mark.parametrize("name", FILES)
def test_file_is_complete_and_well_formed(name: str) -> None:
    doc = DOCS[name]
    assert doc["format"] == "busguard.vectors.v1"
    assert parse_timestamp(doc["now"]) == doc["now_ms"]
    _registry(doc)  # loads with busguard's own rules (key checks, windows)
    _policy(doc)
    items = doc["scenarios"] if name == "sequences.json" else doc["vectors"]
    assert len(items) >= MIN_COUNTS[name], f"{name} looks truncated"
    names = [i["name"] for i in items]
    assert len(set(names)) == len(names), "duplicate vector names"
    for signer in doc["signers"].values():
        assert busguard.protocol.signing.public_key_from_seed(bytes.fromhex(signer["seed_hex"])).hex() == signer["public_key_hex"]
        assert busguard.protocol.identity.multikey_encode(bytes.fromhex(signer["public_key_hex"])) == signer["multikey"]


def test_sequences_have_enough_steps() -> None:
    steps = sum(len(s["steps"]) for s in DOCS["sequences.json"]["scenarios"])
    assert steps >= MIN_SEQUENCE_STEPS


def test_every_reason_code_in_the_vectors_is_real() -> None:
    reasons = {v["expect"]["reason"] for n in ("valid.json", "invalid.json") for v in DOCS[n]["vectors"]}
    reasons |= {st["expect"]["reason"] for s in DOCS["sequences.json"]["scenarios"] for st in s["steps"]}
    assert reasons <= {r.value for r in Reason}


#: Earned from the deployment's output limits, not from the record alone:
#: tested with the output budget (tests/unit/test_output_size.py).
#: taint_trace_too_large needs a trace of 100 000+ nodes (megabytes): tested
#: with the bound lowered (tests/unit/test_taint_replay.py).
NOT_A_WIRE_VECTOR = {Reason.OUTPUT_TOO_LARGE.value, Reason.TAINT_TRACE_TOO_LARGE.value}
#: Seed 004's session-handoff verdict codes have no wire vectors yet: covered
#: by tests/unit/test_compromise_admission.py. The notice and clearance codes
#: are in compromise/compromise.json (tests/unit/test_compromise_vectors.py).
COMPROMISE_REASONS = {r.value for r in KINDS["session-handoff"].reasons}


def test_vectors_cover_every_reason_a_record_can_earn() -> None:
    """Every code decide() can emit today appears in at least one vector
    (the Kafka decode layer's codes in batches.json, test_batch_vectors.py)."""
    reasons = {v["expect"]["reason"] for n in ("valid.json", "invalid.json") for v in DOCS[n]["vectors"]}
    reasons |= {st["expect"]["reason"] for s in DOCS["sequences.json"]["scenarios"] for st in s["steps"]}
    reasons |= {what for v in _load("batches.json")["vectors"] for *_, what in v["expect"]}
    reasons |= {
        st["expect"]["reason"] for s in _load("cnet/cnet.json")["scenarios"] for st in s["steps"]
    }  # the cnet.* kinds (protocol.md 15)
    reasons |= {v["expect"]["reason"] for v in _load("taint_replay.json")["vectors"]}  # kind payloads (protocol.md 13)
    reasons |= {st["expect"]["reason"] for s in _load("compromise/compromise.json")["scenarios"] for st in s["steps"]}  # protocol.md 14
    assert {r.value for r in Reason} - reasons - COMPROMISE_REASONS == NOT_A_WIRE_VECTOR


# ----------------------------------------------------------------- valid.json


@pytest.mark.parametrize("vec", _params("valid.json"))
def test_valid_vector(vec: Any) -> None:
    doc = DOCS["valid.json"]
    headers = dict(_input(vec).headers)
    raw = headers[HEADER_RECEIPT]
    assert raw is not None
    assert raw.decode("utf-8") == vec["receipt_text"]
    assert signing_input(raw).hex() == vec["signing_input_hex"]
    assert receipt_id(raw) == vec["receipt_id"]
    assert headers[HEADER_SIGNATURE] == vec["signature_b64url"].encode()
    signature = base64.urlsafe_b64decode(vec["signature_b64url"] + "==")
    public_key = bytes.fromhex(vec["public_key_hex"])
    assert busguard.verify_signature(public_key, bytes.fromhex(vec["signing_input_hex"]), signature)
    assert doc["signers"][vec["signer"]]["public_key_hex"] == vec["public_key_hex"]
    assert vec["expect"]["outcome"] == Outcome.FORWARD and vec["expect"]["reason"] == Reason.ADMITTED

    d = _run_single(doc, vec)
    _check(d, vec["expect"])
    assert d.public_key == public_key and d.receipt == raw and d.signature == signature


def test_valid_vector_signatures_are_reproducible_from_the_published_seeds() -> None:
    doc = DOCS["valid.json"]
    for vec in doc["vectors"]:
        seed = bytes.fromhex(doc["signers"][vec["signer"]]["seed_hex"])
        sig = busguard.protocol.signing.sign(seed, bytes.fromhex(vec["signing_input_hex"]))
        assert base64.urlsafe_b64encode(sig).rstrip(b"=").decode() == vec["signature_b64url"], vec["name"]


# --------------------------------------------------------------- invalid.json


@pytest.mark.parametrize("vec", _params("invalid.json"))
def test_invalid_vector(vec: Any) -> None:
    assert vec["expect"]["outcome"] == Outcome.REJECT
    _check(_run_single(DOCS["invalid.json"], vec), vec["expect"])


# ------------------------------------------------------------- sequences.json


@pytest.mark.parametrize("scenario", _params("sequences.json", "scenarios"))
def test_sequence_scenario(scenario: Any) -> None:
    doc = DOCS["sequences.json"]
    store = MemoryStore(created_at=parse_timestamp(scenario.get("store_created_at", doc["store_created_at"])))
    registry = _registry(doc)
    policy = _policy(doc, scenario.get("policy"))
    for _, group in groupby(scenario["steps"], key=lambda s: s["batch"]):
        steps = list(group)
        nows = {s.get("now", doc["now"]) for s in steps}
        assert len(nows) == 1, "one clock per batch"
        decisions = admit_batch(
            [_input(s) for s in steps],
            store=store,
            registry=registry,
            now_ms=parse_timestamp(nows.pop()),
            policy=policy,
            max_payload_bytes=doc["max_payload_bytes"],
        )
        for step, decision in zip(steps, decisions, strict=True):
            _check(decision, step["expect"])


# ------------------------------------------------------------------ generator


def test_generator_reproduces_the_files_byte_for_byte(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(VECTORS / "generate.py"), "--out", str(tmp_path)], check=True)
    produced = sorted(p.name for p in tmp_path.iterdir())
    assert produced == sorted((*FILES, "resolutions.json"))  # resolutions.json: tests/unit/test_resolution_vectors.py
    for name in produced:
        assert (tmp_path / name).read_bytes() == (VECTORS / name).read_bytes(), f"{name} differs from a fresh generation"
