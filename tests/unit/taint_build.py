"""Small builders for taint traces in tests: input hashes are derived unless a test says otherwise."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import msgspec

from busguard.policies.taint.hashing import derive_input_hash
from busguard.policies.taint.model import Ledger, Node, Trace

DERIVE = "derive"


def h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def node(
    id: str,
    preds: Sequence[str] = (),
    *,
    op: str | None = None,
    fx: bool = False,
    outcome: str = "success",
    token: str | None = None,
    ext: str | None = None,
    out: str | None = DERIVE,
    inp: str | None = DERIVE,
    sinks: Sequence[str] = (),
) -> dict[str, Any]:
    return {
        "id": id,
        "predecessors": list(preds),
        "operation": op or id,
        "side_effects": fx,
        "outcome": outcome,
        "token": token,
        "external_input_hash": None if ext is None else h(ext),
        "input_hash": inp,
        "output_hash": h(f"out:{id}") if out == DERIVE else out,
        "sinks": list(sinks),
    }


def trace(*nodes: dict[str, Any], tainted_output: str | None = None) -> Trace:
    """A Trace whose input hashes marked DERIVE follow the documented rule."""
    outs = {n["id"]: n["output_hash"] for n in nodes}
    fixed = []
    for n in nodes:
        n = dict(n)
        if n["input_hash"] == DERIVE:
            preds = [outs.get(p) for p in n["predecessors"]]
            n["input_hash"] = (
                None if any(p is None for p in preds) else derive_input_hash(n["external_input_hash"], [p for p in preds if p])
            )
        fixed.append(n)
    return msgspec.convert({"format": "busguard.taint-trace.v1", "tainted_output": tainted_output, "nodes": fixed}, Trace)


def ledger(entries: dict[str, Sequence[tuple[str, Sequence[str]]]]) -> Ledger:
    """token -> [(status, sinks), ...]"""
    return msgspec.convert(
        {
            "format": "busguard.taint-ledger.v1",
            "entries": [
                {"token": t, "effects": [{"id": f"{t}#{k}", "status": st, "sinks": list(sk)} for k, (st, sk) in enumerate(effects)]}
                for t, effects in entries.items()
            ],
        },
        Ledger,
    )


def incident(outcome: str = "pending") -> Trace:
    """Seed 003: read_secret -> summarize -> post_message, killed between the write and its acknowledgment."""
    return trace(
        node("read_secret", ext="kv/prod/api-key"),
        node("summarize", ["read_secret"], ext="prompt: summarize"),
        node("post_message", ["summarize"], fx=True, outcome=outcome, token="tok-post", out=None, sinks=["chat:#ops"]),
        tainted_output="post_message",
    )


def chain_trace(nodes: int, degree: int) -> bytes:
    """Trace JSON of `nodes` valid nodes, each consuming the outputs of the
    `degree` nodes before it (nodes * degree - degree * (degree + 1) / 2
    edges), every tenth one side-effecting: at 100 000 nodes and degree 4,
    the `taint-replay` policy's node and edge caps (399 990 edges, 30 MB)."""
    outs = [hashlib.sha256(b"out:%d" % i).hexdigest() for i in range(nodes)]
    built = []
    for i in range(nodes):
        preds = list(range(max(0, i - degree), i))
        fx = i % 10 == 9
        built.append(
            Node(
                id=f"n{i}",
                predecessors=[f"n{p}" for p in preds],
                operation="tool_call",
                side_effects=fx,
                outcome="success",
                token=f"tok-{i}" if fx else None,
                input_hash=derive_input_hash(None, [outs[p] for p in preds]),
                output_hash=outs[i],
                sinks=[f"sink-{i % 7}"] if fx else [],
            )
        )
    return msgspec.json.encode(Trace(format="busguard.taint-trace.v1", nodes=built))
