#!/usr/bin/env python3
"""Generate tests/vectors/readers/taint-plan.json: what the taint-replay
kind's reader (busguard.sdk.taint.read_plan; docs/protocol.md 13) makes of
an admitted delivery, for the Python and the TypeScript SDK alike.

A case is what the reader reads of a delivery (the forwarded value, the
receipt's `payload_hash` and `task_id`, the sealed annotations) and what it
must make of it: `{"units": [[key, unit, nodes, sinks], ...], "action",
"unit", "task_id"}` or `"unreadable"` (the reader's ValueError, which the
consumer reports as the refusal `unreadable`). The genuine forwards are
the ones busguard's policy builds (busguard.testing.Harness, the seed-003
incident); the others are each one change to a genuine one. The consumer
has already checked the attestation over the value, so a case is about the
reader's own checks only. `expect` is what busguard's reader says; every
language's reader must say the same.

    python tests/vectors/readers/generate.py [--out DIR]   (default: this directory)

Deterministic: re-running it reproduces the committed file byte for byte
(tests/unit/test_reader_vectors.py checks that).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from busguard.demo.taint import INCIDENT_LEDGER, INCIDENT_TRACE  # noqa: E402
from busguard.policies.taint.replay import KIND, encode_request  # noqa: E402
from busguard.testing import Harness, agent, sender  # noqa: E402

FORMAT = "busguard.readers.taint-plan.v1"


def genuine(action: str) -> dict[str, Any]:
    ask = sender("planner").sign(
        kind=KIND,
        task_id=f"incident-{action}",
        receiver=agent("executor"),
        payload=encode_request(INCIDENT_TRACE, INCIDENT_LEDGER, action=action),
    )
    value, headers = Harness().forward(ask)
    annotations = {k[len("busguard-annotation-") :]: v.decode() for k, v in headers if k.startswith("busguard-annotation-")}
    return {"value": value, "payload_hash": ask.receipt.payload_hash, "task_id": ask.receipt.task_id, "annotations": annotations}


def edit(case: dict[str, Any], change: Any) -> dict[str, Any]:
    doc = json.loads(case["value"])
    change(doc)
    return {**case, "value": json.dumps(doc, separators=(",", ":")).encode()}


def cases() -> list[tuple[str, str, dict[str, Any]]]:
    contain, replay = genuine("contain"), genuine("replay")
    other = hashlib.sha256(b"another request").hexdigest()
    return [
        ("contain", "a genuine plan for a contain request", contain),
        ("replay", "a genuine plan for a replay request", replay),
        (
            "request_sha256_not_of_request",
            "request_sha256 is not the SHA-256 of the request carried",
            edit(contain, lambda d: d.update(request_sha256=other)),
        ),
        ("plan_for_another_request", "the receipt's payload_hash is another request's", {**contain, "payload_hash": other}),
        ("annotation_missing", "no taint.unit annotation", {**contain, "annotations": {}}),
        ("annotation_differs", "taint.unit says span, the plan says token", {**contain, "annotations": {"taint.unit": "span"}}),
        (
            "wrong_format",
            "format is not busguard.taint-replay-plan.v1",
            edit(contain, lambda d: d.update(format="busguard.taint-replay-plan.v0")),
        ),
        ("wrong_action", "action is neither replay nor contain", edit(contain, lambda d: d.update(action="destroy"))),
        ("not_json", "the value is not JSON", {**contain, "value": b"{not json"}),
        ("refused_plan", "the plan's verdict is refused, not valid", edit(contain, lambda d: d["plan"].update(verdict="refused"))),
        ("plan_missing", "no plan at all", edit(contain, lambda d: d.pop("plan"))),
        ("unit_not_allowed", "the plan's unit is neither span nor token", edit(contain, lambda d: d["plan"].update(unit="batch"))),
    ]


def verdict(case: dict[str, Any]) -> Any:
    """busguard's reader on the case (the delivery's other fields do not matter to it)."""
    import msgspec

    from busguard.sdk.consumer import Delivery
    from busguard.sdk.taint import read_plan

    receipt = msgspec.structs.replace(
        sender("planner").sign(kind=KIND, task_id=case["task_id"], receiver="x", payload=b"").receipt, payload_hash=case["payload_hash"]
    )
    d = Delivery(
        topic="t",
        partition=0,
        offset=0,
        decision_id="d",
        receipt=receipt,
        payload=case["value"],
        annotations=case["annotations"],
        attestation=None,
    )  # type: ignore[arg-type]
    try:
        v = read_plan(d)
    except ValueError:
        return "unreadable"
    return {
        "task_id": v.task_id,
        "action": v.action,
        "unit": v.unit,
        "units": [[u.key, u.unit, list(u.nodes), list(u.sinks)] for u in v.units],
    }


def build() -> dict[str, Any]:
    out = []
    for name, description, case in cases():
        out.append(
            {
                "name": name,
                "description": description,
                "value_b64": base64.b64encode(case["value"]).decode(),
                "payload_hash": case["payload_hash"],
                "task_id": case["task_id"],
                "annotations": case["annotations"],
                "expect": verdict(case),
            }
        )
    return {"format": FORMAT, "vectors": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent)
    args = ap.parse_args()
    (args.out / "taint-plan.json").write_text(json.dumps(build(), indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
