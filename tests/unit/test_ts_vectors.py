"""The TypeScript package (ts/) and busguard give the same verdict on every
case of every shared vector file (issue 39: one set of vectors for both
languages).

`node ts/dist/test/verdicts-cli.js` prints the TypeScript verdict of each
case (ts/test/verdicts.ts says what each verdict is); this computes the same
verdict with busguard's own functions and fails on any difference, naming
every differing case. The TypeScript side's own tests (`npm test`) compare
the same verdicts with what each file expects. Every vector file under
tests/vectors/ is either judged by both or listed by the TypeScript side as
not judged yet, with why; a new vector file fails here until it is one or the
other.

Needs the package built (`make ts`, which `make test` runs first): a missing
build or a missing `node` fails, never skips.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from busguard.admission.decide import Candidate, precheck, verify
from busguard.admission.freshness import check_replay
from busguard.admission.types import AdmissionPolicy
from busguard.audit.checks import check_audit_record, check_forwarded
from busguard.policies.award.canonicalizers import MerkleSha256, jcs_canonical
from busguard.protocol.attestation import AttestationError, annotations_sha256, open_attestation, open_sealed
from busguard.protocol.auditbatch import AuditBatchError, Entry, expand, is_batch, pack
from busguard.protocol.envelope import b64url_decode_strict, b64url_encode
from busguard.protocol.identity import canonical_principal, multikey_decode
from busguard.protocol.merkle import ProofError, parse_hash, verify_consistency, verify_inclusion
from busguard.protocol.receipt import ReceiptError, decode_receipt, receipt_id, signing_input
from busguard.protocol.records import Coordinates, headers_encoding
from busguard.protocol.registry import KeyRegistry, _RegistryFile
from busguard.protocol.signing import sign, verify_signature
from busguard.protocol.timestamps import parse_timestamp
from busguard.protocol.treehead import TreeHeadError, decode_head, head_digest, head_message, included
from busguard.sdk.consumer import AdmittingConsumer, Fetched
from tests.unit.test_consumer_vectors import admit, decided

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "tests" / "vectors"
CLI = REPO / "ts" / "dist" / "test" / "verdicts-cli.js"

Verdicts = dict[str, Any]


def _load(relative: str) -> Any:
    return json.loads((VECTORS / relative).read_text(encoding="utf-8"))


def _b64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text, validate=True)


def _headers(pairs: list[list[Any]]) -> list[tuple[str, Any]]:
    return [(k, _b64(v)) for k, v in pairs]  # a null header value stays None, as Kafka hands it over


@pytest.fixture(scope="module")
def ts() -> dict[str, Any]:
    node = shutil.which("node")
    assert node is not None, "node is not on PATH: the TypeScript package (ts/) needs Node.js 20"
    assert CLI.is_file(), f"{CLI} is missing: build the TypeScript package first (`make ts`; `make test` does it)"
    done = subprocess.run([node, str(CLI)], cwd=REPO / "ts", capture_output=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    out: dict[str, Any] = json.loads(done.stdout)
    return out


# ------------------------------------------------------- busguard's verdicts


def _wycheproof() -> Verdicts:
    out: Verdicts = {}
    for group in _load("external/wycheproof/ed25519_test.json")["testGroups"]:
        pk = bytes.fromhex(group["publicKey"]["pk"])
        for t in group["tests"]:
            ok = verify_signature(pk, bytes.fromhex(t["msg"]), bytes.fromhex(t["sig"]))
            out[f"tcId{t['tcId']}"] = "valid" if ok else "invalid"
    return out


def _or_reject(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except ValueError:
        return "reject"


def _ink_principal() -> Verdicts:
    cases = _load("external/ink/principal-normalization.json")["cases"]
    return {c["caseId"]: _or_reject(lambda c=c: canonical_principal(c["input"]["agentId"])) for c in cases}


def _ink_timestamp() -> Verdicts:
    cases = _load("external/ink/timestamp-validity.json")["cases"]
    return {c["caseId"]: _or_reject(lambda c=c: parse_timestamp(c["input"]["timestamp"])) for c in cases}


def _ink_replay() -> Verdicts:
    out: Verdicts = {}
    for c in _load("external/ink/replay-freshness.json")["cases"]:
        r = c["input"]["replay"]
        verdict = check_replay(r["messageTimestamp"], r["nonce"], frozenset(r["previouslySeenNonces"]), r["receiverClock"])
        out[c["caseId"]] = "accept" if verdict.ok else verdict.reason
    return out


def _consistency(first: Any, second: Any, first_root: Any, second_root: Any, proof: list[Any]) -> str:
    try:
        path = [parse_hash(p, f"proof[{n}]") for n, p in enumerate(proof)]
        ok = verify_consistency(first, second, parse_hash(first_root, "firstRoot"), parse_hash(second_root, "secondRoot"), path)
    except ProofError:
        return "reject"
    return "accept" if ok else "reject"


def _ink_merkle() -> Verdicts:
    cases = _load("external/ink/merkle-consistency.json")["cases"]
    return {
        c["caseId"]: _consistency(
            c["input"]["first"], c["input"]["second"], c["input"]["firstRoot"], c["input"]["secondRoot"], c["input"]["proof"]
        )
        for c in cases
    }


def _jcs() -> Verdicts:
    inputs = sorted((VECTORS / "external" / "jcs" / "input").iterdir())
    return {p.name: jcs_canonical(p.read_bytes()).hex() for p in inputs}


def _merkle_sha256() -> Verdicts:
    doc = _load("merkle/merkle-sha256.json")
    out: Verdicts = {f"trees/{t['caseId']}": MerkleSha256().root(bytes.fromhex(t["outputHex"])) for t in doc["trees"]}
    for t in doc["inclusion"]:
        try:
            path = [bytes.fromhex(p) for p in t["proof"]]
            ok = verify_inclusion(t["leafIndex"], t["treeSize"], bytes.fromhex(t["leafHash"]), path, bytes.fromhex(t["root"]))
        except ProofError:
            ok = False
        out[f"inclusion/{t['caseId']}"] = "accept" if ok else "reject"
    for t in doc["consistency"]:
        out[f"consistency/{t['caseId']}"] = _consistency(t["first"], t["second"], t["firstRoot"], t["secondRoot"], t["proof"])
    return out


def _precheck(doc: Any, vec: Any, registry: KeyRegistry, now: str, policy: AdmissionPolicy) -> str:
    src = vec["source"]
    receivers = None if "receivers" not in vec else frozenset(map(canonical_principal, vec["receivers"]))
    checked = precheck(
        Coordinates(topic=src["topic"], partition=src["partition"], offset=src["offset"]),
        _b64(vec["value_b64"]),
        _headers(vec["headers"]),
        registry,
        parse_timestamp(now),
        policy,
        vec.get("max_payload_bytes", doc["max_payload_bytes"]),
        receivers,
    )
    if not isinstance(checked, Candidate):
        return str(checked.reason)
    key = verify(checked)
    return "bad_signature" if key is None else f"verified {checked.principal} {key.key_id}"


def _admission(name: str) -> Verdicts:
    doc = _load(name)
    registry = KeyRegistry.from_entries(msgspec.convert(doc["registry"], _RegistryFile), name)
    out: Verdicts = {}
    if name == "sequences.json":
        for s in doc["scenarios"]:
            policy = msgspec.convert({**doc["policy"], **(s.get("policy") or {})}, AdmissionPolicy)
            for i, step in enumerate(s["steps"]):
                out[f"{s['name']}#{i}"] = _precheck(doc, step, registry, step.get("now", doc["now"]), policy)
        return out
    policy = msgspec.convert(doc["policy"], AdmissionPolicy)
    for vec in doc["vectors"]:
        verdict = _precheck(doc, vec, registry, doc["now"], policy)
        if name == "invalid.json":
            out[vec["name"]] = verdict
            continue
        raw = dict(_headers(vec["headers"]))["busguard-receipt"]
        seed = bytes.fromhex(doc["signers"][vec["signer"]]["seed_hex"])
        out[vec["name"]] = {
            "receipt_id": receipt_id(raw),
            "signing_input_hex": signing_input(raw).hex(),
            "signature_b64url": b64url_encode(sign(seed, signing_input(raw))),
            "precheck": verdict,
        }
    return out


def _receipts() -> Verdicts:
    out: Verdicts = {}
    for v in _load("receipts/receipts.json")["vectors"]:
        raw = base64.b64decode(v["receipt_b64"], validate=True)
        try:
            decode_receipt(raw)
        except ReceiptError as exc:
            out[v["name"]] = {"reason": str(exc.reason)}
        else:
            out[v["name"]] = {"reason": "ok", "receipt_id": receipt_id(raw)}
    return out


def _consumer() -> Verdicts:
    return {"fetch": decided(admit(_load("consumer/consumer.json")))}


def _tree_heads() -> Verdicts:
    doc = _load("treehead/tree-heads.json")
    key = bytes.fromhex(doc["public_key_hex"])
    out: Verdicts = {}
    for i, h in enumerate(doc["heads"]):
        raw = h["head"].encode()
        head = decode_head(raw)
        seal = verify_signature(key, head_message(raw), b64url_decode_strict(h["head_seal"], 64))
        leaves: list[Any] = []
        for j, att in enumerate(h["attestations"]):
            try:
                leaves.append(included(att.encode(), head, bytes.fromhex(h["inclusion_hex"][j])))
            except TreeHeadError:
                leaves.append("refused")
        out[f"head{i}"] = {"head_sha256": head_digest(raw), "seal": seal, "leaves": leaves}
    return out


def _annotations() -> Verdicts:
    doc = _load("annotations/annotations.json")
    inbox = AdmittingConsumer(None, guard_public_key=bytes.fromhex(doc["guard"]["public_key_hex"]), agent_id=doc["receiver"])
    out: Verdicts = {}
    for v in doc["vectors"]:
        batch = inbox.admit([Fetched("out", 0, 0, _b64(v["value_b64"]), _headers(v["headers"]))])
        got: dict[str, Any] = (
            {"receiver": "admitted", "annotations": batch.deliveries[0].annotations}
            if batch.deliveries
            else {"receiver": ",".join(r.reason for r in batch.refusals)}
        )
        if "bound_annotations" in v:
            bound = [(k, x.encode()) for k, x in v["bound_annotations"]]
            got["annotation_encoding_hex"] = headers_encoding(bound).hex()
            got["annotations_sha256"] = annotations_sha256(bound)
        out[v["name"]] = got
    return out


def _audit_verdict(value: bytes | None, headers: list[tuple[str, bytes]], key: bytes) -> str:
    checked = check_audit_record(value, headers, key)
    if checked.bad_inclusion is not None:
        return "bad_inclusion"
    return "verified" if checked.verified else "refused"


def _audit_batches() -> Verdicts:
    doc = _load("auditbatch/audit-batches.json")
    key = bytes.fromhex(doc["guard"]["public_key_hex"])
    out: Verdicts = {}
    for v in doc["vectors"]:
        got: list[Any] = []
        for rec in v["log"]:
            headers, value = _headers(rec["headers"]), _b64(rec["value_b64"])
            if not is_batch(headers):
                got.append(_audit_verdict(value, headers, key))
                continue
            try:
                entries = expand(value, headers)
            except AuditBatchError:
                got.append("malformed")
                continue
            as_file = "entries" in rec and [
                {"value_b64": base64.b64encode(d).decode(), "headers": [[k, base64.b64encode(x).decode()] for k, x in h]}
                for d, h in entries
            ] == [{"value_b64": e["value_b64"], "headers": e["headers"]} for e in rec["entries"]]
            packed = pack([Entry(d, h[0][1], h[3][1]) for d, h in entries]) == value
            got.append({"entries": [_audit_verdict(d, h, key) for d, h in entries], "as_file": as_file, "packs_as_file": packed})
        out[v["name"]] = got
    return out


def _carried() -> Verdicts:
    doc = _load("carried/carried.json")
    key = bytes.fromhex(doc["guard"]["public_key_hex"])
    out: Verdicts = {}
    for v in doc["vectors"]:
        value = _b64(v["decision_record"]["value_b64"]) or b""
        audit = _audit_verdict(value, _headers(v["decision_record"]["headers"]), key)
        body = _b64(v["delivered"]["value_b64"]) or b""
        dh = _headers(v["delivered"]["headers"])
        if v["delivered"]["role"] == "forward":
            delivered = check_forwarded("out", body, dh, key).ok
        else:
            try:
                att = open_attestation(dh, key)
            except AttestationError:
                delivered = False
            else:
                (notice,) = json.loads(value)["notices"]
                if "value" in notice:
                    same = notice["value"] == base64.b64encode(body).decode()
                else:
                    same = (notice["value_sha256"], notice["value_length"]) == (hashlib.sha256(body).hexdigest(), len(body))
                delivered = att.decision_sha256 == hashlib.sha256(value).hexdigest() and same
        out[v["name"]] = {"audit_record": audit, "delivered": "ok" if delivered else "bad"}
    return out


def _batches() -> Verdicts:
    """busguard's tolerant decoder (aiokafka's fetcher with busguard's hook) on each fetch."""
    from aiokafka.consumer import fetcher
    from aiokafka.structs import TopicPartition

    from busguard.runtime.tolerant_fetch import RAW_KEYS, consumer_options
    from busguard.runtime.undecodable import Undecodable

    consumer_options()
    doc = _load("batches.json")
    out: Verdicts = {}
    for v in doc["vectors"]:
        raw = bytes.fromhex(v["fetch_hex"])
        tp = TopicPartition(doc["topic"], doc["partition"])
        isolation = fetcher.READ_COMMITTED if "aborted" in v else 0
        records = fetcher.PartitionRecords(
            tp, fetcher.MemoryRecords(raw), v.get("aborted"), v["fetch_offset"], RAW_KEYS, None, True, isolation
        )
        items = [[i.offset, i.next_offset - 1, i.reason] if type(i) is Undecodable else [i.offset, i.offset, "record"] for i in records]
        out[v["name"]] = {"items": items, "next": records.next_fetch_offset}
    return out


def _taint_plan_reader() -> Verdicts:
    from tests.vectors.readers.generate import verdict

    doc = _load("readers/taint-plan.json")
    return {
        v["name"]: verdict(
            {"value": _b64(v["value_b64"]), "payload_hash": v["payload_hash"], "task_id": v["task_id"], "annotations": v["annotations"]}
        )
        for v in doc["vectors"]
    }


def _award_readers() -> Verdicts:
    from tests.vectors.readers.generate_award import verdict

    doc = _load("readers/award.json")
    return {v["name"]: verdict(v["kind"], _b64(v["payload_b64"]) or b"", v["annotations"]) for v in doc["vectors"]}


def _compromise_handoff_reader() -> Verdicts:
    from tests.vectors.readers.generate_compromise import admitted, verdict

    doc = _load("readers/compromise-handoff.json")
    out: Verdicts = {}
    for v in doc["vectors"]:
        case = {k: v[k] for k in ("task_id", "sender", "annotations", "replaced")} | {"value": _b64(v["value_b64"])}
        if "registry" in v:
            case["registry"] = v["registry"]
        out[v["name"]] = verdict(case, doc["registry"])
    for f in doc["forwards"]:
        out[f"forward:{f['name']}"] = admitted(_b64(f["value_b64"]) or b"", _headers(f["headers"]), f.get("registry", doc["registry"]))
    return out


def _resolutions() -> Verdicts:
    doc = _load("resolutions.json")
    keys = {"guard": multikey_decode(doc["guard_public_key"]), "reconciler": multikey_decode(doc["reconciler_public_key"])}

    def opens(rec: Any) -> dict[str, bool]:
        out = {}
        for who, key in keys.items():
            try:
                open_sealed(_headers(rec["headers"]), key)
                out[who] = True
            except AttestationError:
                out[who] = False
        return out

    log = {f"log{i}": opens(r) for i, r in enumerate(doc["log"])}
    return log | {f"vector{i}": opens(r) for i, r in enumerate(doc["vectors"])}


PYTHON: dict[str, Callable[[], Verdicts]] = {
    "external/wycheproof/ed25519_test.json": _wycheproof,
    "external/ink/principal-normalization.json": _ink_principal,
    "external/ink/timestamp-validity.json": _ink_timestamp,
    "external/ink/replay-freshness.json": _ink_replay,
    "external/ink/merkle-consistency.json": _ink_merkle,
    "external/jcs": _jcs,
    "merkle/merkle-sha256.json": _merkle_sha256,
    "valid.json": lambda: _admission("valid.json"),
    "invalid.json": lambda: _admission("invalid.json"),
    "sequences.json": lambda: _admission("sequences.json"),
    "receipts/receipts.json": _receipts,
    "consumer/consumer.json": _consumer,
    "treehead/tree-heads.json": _tree_heads,
    "annotations/annotations.json": _annotations,
    "auditbatch/audit-batches.json": _audit_batches,
    "carried/carried.json": _carried,
    "batches.json": _batches,
    "readers/taint-plan.json": _taint_plan_reader,
    "readers/award.json": _award_readers,
    "readers/compromise-handoff.json": _compromise_handoff_reader,
    "resolutions.json": _resolutions,
}


def _vector_files() -> set[str]:
    """Every vector file, the RFC 8785 reference data as one set."""
    names = set()
    for p in VECTORS.rglob("*.json"):
        rel = p.relative_to(VECTORS).as_posix()
        names.add("external/jcs" if rel.startswith("external/jcs/") else rel)
    return names


# --------------------------------------------------------------------- tests


def test_every_vector_file_is_judged_by_both_or_named_as_not_yet(ts: dict[str, Any]) -> None:
    judged, not_yet = set(ts["verdicts"]), set(ts["not_yet"])
    assert judged == set(PYTHON), "the TypeScript side judges other files than this test compares"
    assert not judged & not_yet
    assert judged | not_yet == _vector_files(), "a vector file is neither judged by ts/ nor listed in its NOT_YET"
    assert all(ts["not_yet"][name] for name in not_yet), "each file not judged yet says why"


@pytest.mark.parametrize("name", sorted(PYTHON))
def test_typescript_and_python_agree_on_every_case(ts: dict[str, Any], name: str) -> None:
    theirs: Verdicts = ts["verdicts"][name]
    ours = json.loads(json.dumps(PYTHON[name]()))  # tuples and the like as JSON has them
    assert sorted(theirs) == sorted(ours), f"{name}: the two sides judged different cases"
    differ = [f"{case}: ts {theirs[case]!r}, python {ours[case]!r}" for case in ours if theirs[case] != ours[case]]
    assert not differ, f"{name}: {len(differ)} of {len(ours)} cases differ:\n" + "\n".join(differ[:20])
