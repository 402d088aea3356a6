"""Regenerate the example traces here and the JSON schemas in docs/schemas/ (all committed).

This also shows how a recorder fills the hashes.

    .venv/bin/python examples/taint/make_examples.py

Output hashes stand for the SHA-256 of each step's output bytes; here they
are hashes of short descriptive strings. Input hashes follow the rule in
docs/taint.md ("Deriving a node's input hash"), except where an example
breaks it on purpose.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from busguard.policies.taint.hashing import derive_input_hash
from busguard.policies.taint.model import Ledger, Trace, schema_document

HERE = Path(__file__).parent
SCHEMAS = HERE.parent.parent / "docs" / "schemas"


def h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def trace(nodes: list[dict[str, Any]], tainted_output: str | None, trace_id: str) -> dict[str, Any]:
    outs = {n["id"]: n["output_hash"] for n in nodes}
    for n in nodes:
        if "input_hash" not in n:
            n["input_hash"] = derive_input_hash(n.get("external_input_hash"), [outs[p] for p in n.get("predecessors", [])])
    doc: dict[str, Any] = {"format": "busguard.taint-trace.v1", "trace_id": trace_id}
    if tainted_output is not None:
        doc["tainted_output"] = tainted_output
    doc["nodes"] = nodes
    return doc


def node(
    id: str,
    op: str,
    *,
    preds: list[str] | None = None,
    side_effects: bool = False,
    outcome: str = "success",
    token: str | None = None,
    external: str | None = None,
    output: str | None = "",
    sinks: list[str] | None = None,
) -> dict[str, Any]:
    n: dict[str, Any] = {"id": id, "predecessors": preds or [], "operation": op, "side_effects": side_effects, "outcome": outcome}
    if token is not None:
        n["token"] = token
    if external is not None:
        n["external_input_hash"] = h(external)
    n["output_hash"] = None if output is None else h(output or f"output of {id}")
    if sinks:
        n["sinks"] = sinks
    return n


def write(name: str, doc: dict[str, Any]) -> None:
    (HERE / name).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def main() -> None:
    SCHEMAS.mkdir(exist_ok=True)
    for name, typ in (("taint-trace.schema.json", Trace), ("taint-ledger.schema.json", Ledger)):
        (SCHEMAS / name).write_text(json.dumps(schema_document(typ), indent=2) + "\n", encoding="utf-8")
    # Seed 003's incident: the process died between the outbound write and its acknowledgment.
    write(
        "incident.trace.json",
        trace(
            [
                node("read_secret", "read_secret", external="vault path kv/prod/payments-api", output="the API key"),
                node("summarize", "summarize", preds=["read_secret"], external="prompt: summarize the config for the channel"),
                node(
                    "post_message",
                    "post_message",
                    preds=["summarize"],
                    side_effects=True,
                    outcome="pending",
                    token="tok-post-7",
                    output=None,
                    sinks=["chat:#ops"],
                ),
            ],
            "post_message",
            "incident-2026-11-08",
        ),
    )
    # The gateway's ledger: the first attempt reached one sink, the retry under the same token another.
    write(
        "incident.ledger.json",
        {
            "format": "busguard.taint-ledger.v1",
            "entries": [
                {
                    "token": "tok-post-7",
                    "effects": [
                        {"id": "delivery-1", "status": "success", "sinks": ["chat:#ops"]},
                        {"id": "delivery-2", "status": "success", "sinks": ["webhook:partner-archive"]},
                    ],
                },
            ],
        },
    )
    # A diamond (fetch -> two summaries -> merge) with a fan-out (fetch -> metrics) outside the cone of publish.
    write(
        "diamond.trace.json",
        trace(
            [
                node("fetch", "retrieval_read", external="query: quarterly numbers"),
                node("sum_a", "summarize", preds=["fetch"], external="prompt: section A"),
                node("sum_b", "summarize", preds=["fetch"], external="prompt: section B"),
                node("merge", "merge", preds=["sum_a", "sum_b"]),
                node("publish", "post_message", preds=["merge"], side_effects=True, token="tok-pub-1", sinks=["chat:#finance"]),
                node(
                    "metrics",
                    "emit_metrics",
                    preds=["fetch"],
                    side_effects=True,
                    outcome="unknown",
                    token="tok-met-1",
                    output=None,
                    sinks=["metrics:prod"],
                ),
            ],
            "publish",
            "diamond-example",
        ),
    )
    # An advisory abort: the approval step aborted, the execution ran anyway.
    write(
        "causal-violation.trace.json",
        trace(
            [
                node("plan", "plan", external="task: rotate credentials"),
                node("approve", "human_approval", preds=["plan"], outcome="abort", output="advisory abort: not approved"),
                node("execute", "rotate_credentials", preds=["approve"], side_effects=True, token="tok-rot-1", sinks=["vault:prod"]),
            ],
            "execute",
            "causal-violation-example",
        ),
    )
    # An input hash that does not follow from the recorded edges: summarize read something the trace does not show.
    mismatch = trace(
        [
            node("read_doc", "retrieval_read", external="doc 17"),
            node("summarize", "summarize", preds=["read_doc"], external="prompt: summarize"),
            node("send", "send_email", preds=["summarize"], side_effects=True, token="tok-mail-3", sinks=["email:board@example.com"]),
        ],
        "send",
        "input-mismatch-example",
    )
    mismatch["nodes"][1]["input_hash"] = derive_input_hash(h("prompt: summarize"), [h("output of read_doc"), h("output of read_secret")])
    write("input-mismatch.trace.json", mismatch)


if __name__ == "__main__":
    main()
