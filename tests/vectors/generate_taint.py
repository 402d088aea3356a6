#!/usr/bin/env python3
"""Generate taint_replay.json: `taint-replay` request payloads and the verdict each must get.

Deliberately independent of busguard: the traces are built here as plain
JSON, every input hash derived with hashlib by the rule in docs/taint.md
("Deriving a node's input hash"), and every expected reason, refusal detail
and plan summary written down by hand from docs/protocol.md section 13. The
test (tests/unit/test_taint_replay_vectors.py) signs each payload as a
`taint-replay` receipt, runs it through busguard's real admission path and
compares; a vector that echoed busguard's output could not catch a
regression. Re-running reproduces the committed file byte for byte.

    python tests/vectors/generate_taint.py [--out DIR]     (default: this directory)
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

FORMAT = "busguard.taint-replay-vectors.v1"
REQUEST = "busguard.taint-replay.v1"
TRACE = "busguard.taint-trace.v1"
LEDGER = "busguard.taint-ledger.v1"
INPUT_TAG = "busguard.taint.input.v1"


def h(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def derive(ext: str | None, preds: list[str]) -> str:
    lines = [INPUT_TAG, "-" if ext is None else ext, *preds]
    return hashlib.sha256(("\n".join(lines) + "\n").encode("ascii")).hexdigest()


def trace(nodes: list[dict[str, Any]], tainted_output: str | None = None) -> dict[str, Any]:
    """Nodes in execution order; `out` and `ext` labels become hashes, `input_hash` derived unless given."""
    outs: dict[str, str | None] = {}
    built = []
    for n in nodes:
        ext = h(n["ext"]) if n.get("ext") else None
        preds = n.get("preds", [])
        inp = n["input_hash"] if "input_hash" in n else derive(ext, [outs[p] or "" for p in preds])
        out = None if n.get("no_output") else h("out:" + n["id"])
        outs[n["id"]] = out
        node = {
            "id": n["id"],
            "predecessors": preds,
            "operation": n.get("op", n["id"]),
            "side_effects": bool(n.get("fx")),
            "outcome": n.get("outcome", "success"),
            "token": n.get("token"),
            "external_input_hash": ext,
            "input_hash": inp,
            "output_hash": out,
            "sinks": n.get("sinks", []),
        }
        built.append(node)
    doc: dict[str, Any] = {"format": TRACE, "nodes": built}
    if tainted_output is not None:
        doc["tainted_output"] = tainted_output
    return doc


def request(tr: Any, ledger: Any = None, outputs: list[str] | None = None, action: str = "contain") -> str:
    doc: dict[str, Any] = {"format": REQUEST, "action": action, "trace": tr}
    if ledger is not None:
        doc["ledger"] = ledger
    if outputs:
        doc["outputs"] = outputs
    return json.dumps(doc, separators=(",", ":"))


def refusal(condition: int, conditions: list[int], outputs: list[str], nodes: list[str], suspect: int) -> str:
    """docs/protocol.md section 13, "The refusal detail": compact JSON, keys in this order."""
    return json.dumps(
        {
            "verdict": "refused",
            "condition": condition,
            "conditions": conditions,
            "outputs": outputs,
            "nodes": nodes,
            "nodes_total": len(nodes),
            "suspect_total": suspect,
        },
        separators=(",", ":"),
    )


INCIDENT = [
    {"id": "read_secret", "ext": "kv/prod/api-key"},
    {"id": "summarize", "preds": ["read_secret"], "ext": "prompt: summarize"},
    {
        "id": "post_message",
        "preds": ["summarize"],
        "fx": True,
        "outcome": "pending",
        "token": "tok-post-7",
        "no_output": True,
        "sinks": ["chat:#ops"],
    },
]
INCIDENT_LEDGER = {
    "format": LEDGER,
    "entries": [
        {
            "token": "tok-post-7",
            "effects": [
                {"id": "delivery-1", "status": "success", "sinks": ["chat:#ops"]},
                {"id": "delivery-2", "status": "success", "sinks": ["webhook:partner-archive"]},
            ],
        }
    ],
}


def vectors() -> list[dict[str, Any]]:
    v: list[dict[str, Any]] = []

    def add(name: str, note: str, payload: str, expect: dict[str, Any]) -> None:
        raw = payload.encode()
        v.append({"name": name, "note": note, "payload": payload, "payload_sha256": hashlib.sha256(raw).hexdigest(), "expect": expect})

    incident = trace(INCIDENT, tainted_output="post_message")
    add(
        "incident-refused",
        "seed 003: post_message has no terminal outcome and no ledger: refused, post_message in the node set",
        request(incident),
        {"outcome": "reject", "reason": "taint_replay_refused", "detail": refusal(1, [1], ["post_message"], ["post_message"], 3)},
    )
    add(
        "incident-ledger",
        "with the gateway's ledger: the pending node resolves and the token reached a second sink: token level, both sinks",
        request(incident, INCIDENT_LEDGER),
        {
            "outcome": "forward",
            "reason": "admitted",
            "unit": "token",
            "forced_by": [1, 2],
            "nodes": ["read_secret", "summarize", "post_message"],
            "sinks": {"chat:#ops": ["post_message"], "webhook:partner-archive": ["post_message"]},
        },
    )
    add(
        "incident-summarize",
        "outputs narrows the cone to summarize and its ancestors: span level, no sinks",
        request(incident, outputs=["summarize"]),
        {"outcome": "forward", "reason": "admitted", "unit": "span", "forced_by": [], "nodes": ["read_secret", "summarize"], "sinks": {}},
    )
    bad_hash = [
        dict(INCIDENT[0]),
        {**INCIDENT[1], "input_hash": h("not the derived input")},
        {**INCIDENT[2], "outcome": "success", "no_output": False},
    ]
    add(
        "input-mismatch",
        "condition 4: summarize's recorded input hash is not the derived one",
        request(trace(bad_hash)),
        {"outcome": "reject", "reason": "taint_replay_refused", "detail": refusal(4, [4], ["post_message"], ["summarize"], 3)},
    )
    causal = [
        {"id": "plan", "ext": "goal", "outcome": "abort"},
        {"id": "act", "preds": ["plan"], "fx": True, "token": "tok-act", "sinks": ["db:orders"]},
    ]
    add(
        "causal-violation",
        "condition 3: act executed although its predecessor plan aborted; both ends reported",
        request(trace(causal)),
        {"outcome": "reject", "reason": "taint_replay_refused", "detail": refusal(3, [3], ["act"], ["act", "plan"], 2)},
    )
    collide = [
        {"id": "fetch", "ext": "q"},
        {"id": "send-1", "preds": ["fetch"], "fx": True, "token": "tok-x", "sinks": ["mail:a"]},
        {"id": "send-2", "preds": ["fetch"], "fx": True, "token": "tok-x", "sinks": ["mail:b"]},
        {"id": "join", "preds": ["send-1", "send-2"]},
    ]
    add(
        "token-collision-no-ledger",
        "condition 2: two cone nodes share tok-x and no ledger can rebuild it",
        request(trace(collide)),
        {"outcome": "reject", "reason": "taint_replay_refused", "detail": refusal(2, [2], ["join"], ["send-1", "send-2"], 4)},
    )
    diamond = [
        {"id": "src", "ext": "doc"},
        {"id": "left", "preds": ["src"]},
        {"id": "right", "preds": ["src"]},
        {"id": "merge", "preds": ["left", "right"], "fx": True, "token": "tok-m", "sinks": ["s3:out"]},
        {"id": "side", "preds": ["src"], "outcome": "pending"},
    ]
    add(
        "diamond-fanout",
        "a diamond plus a fan-out branch outside the cone (pending there does not matter): span level",
        request(trace(diamond), outputs=["merge"]),
        {
            "outcome": "forward",
            "reason": "admitted",
            "unit": "span",
            "forced_by": [],
            "nodes": ["src", "left", "right", "merge"],
            "sinks": {"s3:out": ["merge"]},
        },
    )
    cycle = {
        "format": TRACE,
        "nodes": [
            {
                "id": "a",
                "predecessors": ["b"],
                "operation": "x",
                "side_effects": False,
                "outcome": "success",
                "input_hash": None,
                "output_hash": None,
            },
            {
                "id": "b",
                "predecessors": ["a"],
                "operation": "x",
                "side_effects": False,
                "outcome": "success",
                "input_hash": None,
                "output_hash": None,
            },
        ],
    }
    add(
        "malformed-cycle",
        "a trace with a cycle is malformed, not refused",
        request(cycle),
        {"outcome": "reject", "reason": "taint_request_malformed", "detail_contains": "cycle (a -> b -> a)"},
    )
    add(
        "malformed-unknown-field",
        "an unknown field at the top of the request",
        request(incident)[:-1] + ',"priority":1}',
        {"outcome": "reject", "reason": "taint_request_malformed", "detail_contains": "priority"},
    )
    add(
        "malformed-duplicate-key",
        "the same key twice in one object (here: action)",
        request(incident)[:-1] + ',"action":"replay"}',
        {"outcome": "reject", "reason": "taint_request_malformed", "detail_contains": "appears twice"},
    )
    add(
        "malformed-not-json",
        "not JSON",
        '{"format": ',
        {"outcome": "reject", "reason": "taint_request_malformed", "detail_contains": "not JSON"},
    )
    return v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).parent))
    args = ap.parse_args()
    doc = {
        "format": FORMAT,
        "kind": "taint-replay",
        "notes": {
            "payload": "the record value, UTF-8; sign it as a taint-replay receipt of any valid sender",
            "expect": "outcome and reason of the decision; detail exact (refusals) or a fragment (detail_contains); "
            "forwards: the plan's unit, forced_by, node ids in order and sink -> attributed node ids",
        },
        "vectors": vectors(),
    }
    Path(args.out, "taint_replay.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
