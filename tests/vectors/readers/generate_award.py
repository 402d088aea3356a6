#!/usr/bin/env python3
"""Generate tests/vectors/readers/award.json: what the contract-net kinds'
readers (busguard.sdk.award READERS, TypeScript CNET_READERS;
docs/protocol.md 15) make of an admitted delivery's payload.

A case is a kind, the payload's bytes (base64) and the annotations; the
receipt's `task_id` and `sender` are fixed (`TASK_ID`, `SENDER`). `expect` is
the view as canonical JSON (sorted keys, no spaces; the payload as its
fields, a result's delivered bytes as base64) or `"unreadable"` (the reader's
ValueError). Each refusal is one change to a genuine payload, covering every
rule of busguard.policies.award.wire: unknown, missing, repeated and
mistyped fields, every bound and pattern, the cross-field rules, and the
result's verification annotation. `expect` is busguard's readers' answer.

    python tests/vectors/readers/generate_award.py [--out DIR]

Deterministic (tests/unit/test_reader_vectors.py checks the file is reproduced).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

FORMAT = "busguard.readers.award.v1"
TASK_ID = "call-1"
SENDER = "tulpa:z6MkpTHR8VNsBxYAAWHut2Geadd9jSwuBV8xRoAnwWsdvktH"
ROOT = "a" * 64
OUT = base64.urlsafe_b64encode(b'{"sorted":[1,2]}').rstrip(b"=").decode()

CALL = {
    "awarder": SENDER,
    "task_class": "transform.table",
    "task": "sort",
    "requires_check": True,
    "award_deadline": "2026-11-29T13:00:00.000Z",
}
BID = {
    "call": "call-1",
    "cost": 5,
    "deadline": "2026-11-29T13:00:00.000Z",
    "receipt": {"canonicalizer_id": "jcs-sha256", "commits": "output"},
}
AWARD = {"winner": "call-1/b", "ranked": ["call-1/b", "call-1/c"], "mode": "verified"}
RESULT = {"state_root": ROOT, "output": OUT}


def raw(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def with_(doc: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = {**doc, **changes}
    return {k: v for k, v in out.items() if v is not DROP}


DROP = object()


def cases() -> list[tuple[str, str, bytes, dict[str, str]]]:
    verified = {"verification": "recomputed"}
    c: list[tuple[str, str, bytes, dict[str, str]]] = [
        ("call", "cnet.call", raw(CALL), {}),
        ("call_unknown_field", "cnet.call", raw(with_(CALL, extra=1)), {}),
        ("call_missing_field", "cnet.call", raw(with_(CALL, task=DROP)), {}),
        ("call_bool_as_int", "cnet.call", raw(with_(CALL, requires_check=1)), {}),
        ("call_task_class_pattern", "cnet.call", raw(with_(CALL, task_class=".table")), {}),
        ("call_task_class_trailing_newline", "cnet.call", raw(with_(CALL, task_class="transform.table\n")), {}),
        ("call_task_4096", "cnet.call", raw(with_(CALL, task="é" * 4096)), {}),
        ("call_task_4097", "cnet.call", raw(with_(CALL, task="é" * 4097)), {}),
        ("call_deadline_empty", "cnet.call", raw(with_(CALL, award_deadline="")), {}),
        ("call_null_required", "cnet.call", raw(with_(CALL, awarder=None)), {}),
        ("call_duplicate_key", "cnet.call", raw(CALL)[:-1] + b',"task":"again"}', {}),
        ("call_not_json", "cnet.call", b"{not json", {}),
        ("call_array", "cnet.call", b"[]", {}),
        ("call_as_bid", "cnet.bid", raw(CALL), {}),
        ("bid", "cnet.bid", raw(BID), {}),
        ("bid_manifest", "cnet.bid", raw(with_(BID, receipt={**BID["receipt"], "verifier_manifest": "sha256:abc"})), {}),
        ("bid_manifest_null", "cnet.bid", raw(with_(BID, receipt={**BID["receipt"], "verifier_manifest": None})), {}),
        ("bid_manifest_space", "cnet.bid", raw(with_(BID, receipt={**BID["receipt"], "verifier_manifest": "a b"})), {}),
        ("bid_nested_unknown", "cnet.bid", raw(with_(BID, receipt={**BID["receipt"], "x": 1})), {}),
        ("bid_nested_duplicate", "cnet.bid", raw(BID).replace(b'"commits":"output"', b'"commits":"output","commits":"trace"'), {}),
        ("bid_commits_other", "cnet.bid", raw(with_(BID, receipt={**BID["receipt"], "commits": "state"})), {}),
        ("bid_canonicalizer_upper", "cnet.bid", raw(with_(BID, receipt={**BID["receipt"], "canonicalizer_id": "JCS"})), {}),
        ("bid_cost_negative", "cnet.bid", raw(with_(BID, cost=-1)), {}),
        ("bid_cost_max_safe", "cnet.bid", raw(with_(BID, cost=2**53 - 1)), {}),
        ("bid_cost_past_safe", "cnet.bid", raw(with_(BID, cost=2**53)), {}),
        ("bid_cost_float", "cnet.bid", raw(BID).replace(b'"cost":5', b'"cost":5.0'), {}),
        ("bid_cost_exponent", "cnet.bid", raw(BID).replace(b'"cost":5', b'"cost":5e0'), {}),
        ("bid_call_empty", "cnet.bid", raw(with_(BID, call="")), {}),
        ("bid_call_257", "cnet.bid", raw(with_(BID, call="c" * 257)), {}),
        ("award", "cnet.award", raw(AWARD), {}),
        ("award_delegated", "cnet.award", raw(with_(AWARD, mode="delegated", verifier="sha256:v")), {}),
        ("award_delegated_no_verifier", "cnet.award", raw(with_(AWARD, mode="delegated")), {}),
        ("award_verifier_not_delegated", "cnet.award", raw(with_(AWARD, verifier="sha256:v")), {}),
        ("award_best_effort", "cnet.award", raw(with_(AWARD, mode="best_effort", risk_price=3)), {}),
        ("award_best_effort_no_price", "cnet.award", raw(with_(AWARD, mode="best_effort")), {}),
        ("award_price_not_best_effort", "cnet.award", raw(with_(AWARD, risk_price=3)), {}),
        ("award_ranked_twice", "cnet.award", raw(with_(AWARD, ranked=["a", "a"])), {}),
        ("award_ranked_64", "cnet.award", raw(with_(AWARD, ranked=[f"b{i}" for i in range(64)])), {}),
        ("award_ranked_65", "cnet.award", raw(with_(AWARD, ranked=[f"b{i}" for i in range(65)])), {}),
        ("award_mode_other", "cnet.award", raw(with_(AWARD, mode="trusted")), {}),
        ("result", "cnet.result", raw(RESULT), verified),
        ("result_trace", "cnet.result", raw(with_(RESULT, output=DROP, trace=OUT)), {"verification": "unverified"}),
        (
            "result_attested",
            "cnet.result",
            raw(with_(RESULT, attestation=base64.urlsafe_b64encode(b"s" * 64).rstrip(b"=").decode())),
            verified,
        ),
        (
            "result_attestation_63",
            "cnet.result",
            raw(with_(RESULT, attestation=base64.urlsafe_b64encode(b"s" * 63).rstrip(b"=").decode())),
            verified,
        ),
        ("result_both", "cnet.result", raw(with_(RESULT, trace=OUT)), verified),
        ("result_neither", "cnet.result", raw(with_(RESULT, output=DROP)), verified),
        ("result_output_padded", "cnet.result", raw(with_(RESULT, output=OUT + "=")), verified),
        ("result_output_noncanonical", "cnet.result", raw(with_(RESULT, output="AB")), verified),
        ("result_root_upper", "cnet.result", raw(with_(RESULT, state_root="A" * 64)), verified),
        ("result_root_trailing_newline", "cnet.result", raw(with_(RESULT, state_root=ROOT + "\n")), verified),
        ("result_no_verification", "cnet.result", raw(RESULT), {}),
        ("result_verification_other", "cnet.result", raw(RESULT), {"verification": "trusted"}),
    ]
    return c


def verdict(kind: str, payload: bytes, annotations: dict[str, str]) -> str:
    """busguard's reader for `kind`: the view as canonical JSON, or "unreadable"."""
    import msgspec

    from busguard.sdk.award import READERS
    from busguard.sdk.consumer import Delivery
    from busguard.testing import sender

    receipt = msgspec.structs.replace(sender("planner").sign(kind=kind, task_id=TASK_ID, receiver="x", payload=b"").receipt, sender=SENDER)
    d = Delivery(
        topic="t", partition=0, offset=0, decision_id="d", receipt=receipt, payload=payload, annotations=annotations, attestation=None
    )  # type: ignore[arg-type]
    try:
        view = READERS[kind](d)
    except ValueError:
        return "unreadable"
    doc = msgspec.to_builtins(view)
    if "delivered" in doc:
        doc["delivered"] = base64.b64encode(view.delivered).decode()
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def build() -> dict[str, Any]:
    vectors = []
    for name, kind, payload, notes in cases():
        vectors.append(
            {
                "name": name,
                "kind": kind,
                "payload_b64": base64.b64encode(payload).decode(),
                "annotations": notes,
                "expect": verdict(kind, payload, notes),
            }
        )
    return {"format": FORMAT, "task_id": TASK_ID, "sender": SENDER, "vectors": vectors}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent)
    args = ap.parse_args()
    (args.out / "award.json").write_text(json.dumps(build(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
