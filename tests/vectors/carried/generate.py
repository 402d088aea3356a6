#!/usr/bin/env python3
"""Generate the carried-by-hash vectors: carried.json (docs/protocol.md 12.3, 12.5).

A decision record carries a kind policy's `replacement` and each notice's
`value` by length and SHA-256 (`replacement_sha256` / `replacement_length`,
`value_sha256` / `value_length`); a decision written before that rule
carried them by value, and still verifies. Each vector is one decision
record (the audit topic's value and headers) and the record that delivers
the carried bytes (the forward, or the notice), with what an auditor
concludes of each.

Deterministic: re-running this script reproduces the committed file byte for
byte (tests/unit/test_carried_vectors.py checks that, runs busguard's
auditor checks on every record and requires busguard's writer to produce
each well-formed decision record byte for byte).

Deliberately independent of busguard: decisions and attestations are JSON
written out field by field in the order docs/protocol.md gives, hashes and
base64 from the standard library, signatures straight from libsodium.

    python tests/vectors/carried/generate.py [--out DIR]   (default: this directory)

The seed below is a TEST KEY, published so that another implementation can
reproduce every signature. Never use it for anything else.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import nacl.bindings

FORMAT = "busguard.carried-by-hash.v1"
ATTESTATION_CONTEXT = b"busguard/attestation/v1\x00"
RECEIPT_CONTEXT = b"busguard/receipt/v1\x00"
DECISION_CONTEXT = b"busguard/decision/v1\x00"
GUARD_SEED = hashlib.sha256(b"busguard-vectors/v1/key:carried-guard").digest()
NAMESPACE = "busguard"
TOPIC = "agents.in"
DECIDED_AT = 1_796_000_000_000
B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def multikey(public_key: bytes) -> str:
    """z-base58btc of the ed25519-pub multicodec prefix and the key."""
    data = b"\xed\x01" + public_key
    n, out = int.from_bytes(data, "big"), ""
    while n:
        n, r = divmod(n, 58)
        out = B58[r] + out
    return "z" + "1" * (len(data) - len(data.lstrip(b"\0"))) + out


GUARD_PK, GUARD_SK = nacl.bindings.crypto_sign_seed_keypair(GUARD_SEED)
GUARD = "tulpa:" + multikey(GUARD_PK)


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def dumps(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decision_id(offset: int) -> str:
    return hashlib.sha256(DECISION_CONTEXT + f"{NAMESPACE}\x00{TOPIC}\x000".encode()).hexdigest()[:16] + f"{offset:016x}"


def receipt(offset: int, kind: str, task: str) -> bytes:
    """A receipt header's bytes; only its receipt id (4.3) is checked here."""
    return dumps({"v": 1, "kind": kind, "task_id": task, "nonce": f"n-{offset}", "payload_hash": "0" * 64})


def seal(attestation: bytes) -> bytes:
    signed = nacl.bindings.crypto_sign(ATTESTATION_CONTEXT + attestation, GUARD_SK)
    return base64.urlsafe_b64encode(signed[:64]).rstrip(b"=")


def attestation(did: str, outcome: str, reason: str, rid: str, offset: int, decision: bytes, forwarded: str | None) -> bytes:
    att: dict[str, Any] = {
        "v": 1,
        "guard": GUARD,
        "decision_id": did,
        "outcome": outcome,
        "reason": reason,
        "receipt_id": rid,
        "source": {"topic": TOPIC, "partition": 0, "offset": offset},
        "decided_at": DECIDED_AT,
        "decision_sha256": sha(decision),
    }
    if forwarded is not None:
        att["forwarded_sha256"] = forwarded
    return dumps(att)


def record(value: bytes | None, headers: list[tuple[str, bytes]]) -> dict[str, Any]:
    return {"value_b64": None if value is None else b64(value), "headers": [[k, b64(v)] for k, v in headers]}


def case(
    name: str,
    what: str,
    offset: int,
    *,
    outcome: str,
    reason: str,
    kind: str,
    carried: dict[str, Any],
    delivered: tuple[str, bytes, list[tuple[str, bytes]]],
    forwarded: str | None,
    audit_ok: bool,
    delivered_ok: bool,
    writer: bool,
) -> dict[str, Any]:
    """One decision record, sealed per record, with `carried` (the policy
    fields, in Decision field order) and the record that delivers them."""
    did, task = decision_id(offset), f"task-{offset}"
    raw_receipt = receipt(offset, kind, task)
    rid = sha(RECEIPT_CONTEXT + raw_receipt)
    fields: dict[str, Any] = {
        "type": "decision",
        "decision_id": did,
        "outcome": outcome,
        "reason": reason,
        "source": {"topic": TOPIC, "partition": 0, "offset": offset},
        "decided_at": DECIDED_AT,
        "receipt_id": rid,
        "kind": kind,
        "task_id": task,
        "receipt": b64(raw_receipt),
    }
    # `replacement` and `notices` come before `replacement_sha256` and `replacement_length` (12.3)
    for name_ in ("annotations", "replacement", "notices", "replacement_sha256", "replacement_length"):
        if name_ in carried:
            fields[name_] = carried[name_]
    decision = dumps(fields)
    att = attestation(did, outcome, reason, rid, offset, decision, forwarded)
    proof = [("busguard-decision-id", did.encode()), ("busguard-attestation", att), ("busguard-seal", seal(att))]
    audit = record(decision, [*proof, ("busguard-outcome", outcome.encode()), ("busguard-reason", reason.encode())])
    role, value, extra = delivered
    headers = (
        [("busguard-receipt", raw_receipt), ("busguard-signature", b"A" * 86), *extra, *proof]
        if role == "forward"
        else [*proof, ("busguard-outcome", outcome.encode()), ("busguard-reason", reason.encode()), *extra]
    )
    return {
        "name": name,
        "what": what,
        "decision_record": audit,
        "delivered": {"role": role, **record(value, headers)},
        "expect": {"audit_record": "verified" if audit_ok else "refused", "delivered": "ok" if delivered_ok else "bad", "writer": writer},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent))
    out = Path(ap.parse_args().out)
    plan = dumps({"format": "busguard.taint-replay-plan.v1", "action": "contain", "request_sha256": "0" * 64, "request": {}, "plan": {}})
    notice = b"contested by bob"
    replaced = [("busguard-replaced", b"1")]
    by_hash = {"replacement_sha256": sha(plan), "replacement_length": len(plan)}
    vectors = [
        case(
            "replacement-by-hash",
            "a replaced forward's decision record carries the replacement by length and SHA-256; the attestation's forwarded_sha256 names the same bytes",
            1,
            outcome="forward",
            reason="admitted",
            kind="taint-replay",
            carried={"annotations": {"taint.verdict": "valid"}, **by_hash},
            delivered=("forward", plan, replaced),
            forwarded=sha(plan),
            audit_ok=True,
            delivered_ok=True,
            writer=True,
        ),
        case(
            "replacement-by-value",
            "a decision record written before the rule: the replacement by value (standard base64); it still verifies",
            2,
            outcome="forward",
            reason="admitted",
            kind="taint-replay",
            carried={"replacement": b64(plan)},
            delivered=("forward", plan, replaced),
            forwarded=sha(plan),
            audit_ok=True,
            delivered_ok=True,
            writer=True,
        ),
        case(
            "notice-by-hash",
            "an escalation with a notice: the decision record carries the notice's route, key and value by length and SHA-256",
            3,
            outcome="escalate",
            reason="task_conflict",
            kind="probe",
            carried={
                "annotations": {"slot": "s1"},
                "notices": [{"route": "probe-notices", "key": b64(b"s1"), "value_sha256": sha(notice), "value_length": len(notice)}],
            },
            delivered=("notice", notice, [("busguard-route", b"probe-notices")]),
            forwarded=None,
            audit_ok=True,
            delivered_ok=True,
            writer=True,
        ),
        case(
            "notice-by-value",
            "a decision record written before the rule: the notice's value by value, its key null",
            4,
            outcome="escalate",
            reason="task_conflict",
            kind="probe",
            carried={"notices": [{"route": "probe-notices", "key": None, "value": b64(notice)}]},
            delivered=("notice", notice, [("busguard-route", b"probe-notices")]),
            forwarded=None,
            audit_ok=True,
            delivered_ok=True,
            writer=True,
        ),
        case(
            "replacement-hash-not-attested",
            "replacement_sha256 names other bytes than the attestation's forwarded_sha256: the auditor refuses the decision record",
            5,
            outcome="forward",
            reason="admitted",
            kind="taint-replay",
            carried={"replacement_sha256": sha(plan + b" "), "replacement_length": len(plan) + 1},
            delivered=("forward", plan, replaced),
            forwarded=sha(plan),
            audit_ok=False,
            delivered_ok=True,
            writer=False,
        ),
        case(
            "replacement-hash-without-length",
            "replacement_sha256 without replacement_length: refused",
            6,
            outcome="forward",
            reason="admitted",
            kind="taint-replay",
            carried={"replacement_sha256": sha(plan)},
            delivered=("forward", plan, replaced),
            forwarded=sha(plan),
            audit_ok=False,
            delivered_ok=True,
            writer=False,
        ),
        case(
            "forward-altered",
            "the decision record is sound; the forward's value is not the one forwarded_sha256 names",
            7,
            outcome="forward",
            reason="admitted",
            kind="taint-replay",
            carried=by_hash,
            delivered=("forward", plan + b" ", replaced),
            forwarded=sha(plan),
            audit_ok=True,
            delivered_ok=False,
            writer=False,
        ),
    ]
    doc = {
        "format": FORMAT,
        "description": "decision records carrying a policy's replacement and notice values by length and SHA-256 (docs/protocol.md 12.3, 12.5)",
        "encoding": {
            "value_b64": "the record value, standard base64 with padding (null: no value)",
            "headers": "[[name, value]] in record order; value standard base64 with padding",
            "expect.audit_record": (
                "verified: the seal verifies, decision_sha256 is the record's, "
                "and its carried replacement names the attested forwarded_sha256; refused: not"
            ),
            "expect.delivered": (
                "ok: the forward verifies against the attestation (forwarded_sha256), "
                "or the notice's value has the SHA-256 and length the decision record names; bad: not"
            ),
            "expect.writer": "busguard's writer produces exactly this decision record from the decision it stands for",
        },
        "guard": {"seed_hex": GUARD_SEED.hex(), "public_key_hex": GUARD_PK.hex(), "agent_id": GUARD},
        "vectors": vectors,
    }
    (out / "carried.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
