"""What the taint replay guard answers: the plan of a replayable cone, or a refusal.

Kept apart from the four conditions (validate.py) because these Structs are
the wire form of the verdict (docs/taint.md, `busguard taint check --json`)
and its renderers (render.py) and the replay kind (replay.py) read them
without running a check.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from busguard.policies.taint.model import Effect, Graph, LedgerEntry, Outcome

Unit = Literal["span", "token"]
Source = Literal["span", "ledger"]
Role = Literal["output", "source", "carrier"]
Kind = Literal[
    "non_terminal",  # 1
    "token_collision",  # 2
    "missing_token",  # 2
    "causal_violation",  # 3
    "input_mismatch",  # 4
    "input_unverifiable",  # 4
]


class Finding(msgspec.Struct, kw_only=True):
    """One failed check. `resolved`: the ledger settles it (conditions 1 and 2 only)."""

    condition: int
    kind: Kind
    nodes: list[str]
    token: str | None = None
    resolved: bool
    detail: str


class NodeAttribution(msgspec.Struct, kw_only=True, gc=False):
    """A cone node in the taint graph. Every node of the cone is attributed; none is cleared."""

    id: str
    operation: str
    role: Role
    predecessors: list[str]
    side_effects: bool
    outcome: Outcome
    outcome_from: Source
    token: str | None
    sinks: list[str]
    sinks_from: Source


class SinkAttribution(msgspec.Struct, kw_only=True):
    """A sink the tainted cone reached, and the cone nodes (and tokens) that reached it."""

    sink: str
    nodes: list[str]
    tokens: list[str]


class TokenReplay(msgspec.Struct, kw_only=True):
    """A token rebuilt from the ledger: the unit of a token-level replay."""

    token: str
    nodes: list[str]
    effects: list[Effect]
    sinks: list[str]


class ReplayPlan(msgspec.Struct, kw_only=True, tag_field="verdict", tag="valid"):
    """The cone can be replayed: here is its taint graph, and the unit to replay it by."""

    unit: Unit
    forced_by: list[int]
    outputs: list[str]
    edges: int
    nodes: list[NodeAttribution]
    sinks: list[SinkAttribution]
    tokens: list[TokenReplay]
    findings: list[Finding]


class ReplayRefused(msgspec.Struct, kw_only=True, tag_field="verdict", tag="refused"):
    """The cone cannot be replayed end to end (the seed's TaintReplayRefused). No graph, on purpose.

    `nodes` are the nodes whose outcome or causal position is unknowable;
    `suspect` is the whole cone, every node of which stays under suspicion.
    """

    reason: str
    condition: int
    conditions: list[int]
    outputs: list[str]
    nodes: list[str]
    suspect: list[str]
    findings: list[Finding]


Result = ReplayPlan | ReplayRefused


def build_plan(
    graph: Graph,
    cone: list[int],
    out_idx: list[int],
    findings: list[Finding],
    resolved_outcome: dict[int, Outcome],
    rebuilt: set[str],
    by_token: dict[str, LedgerEntry],
) -> ReplayPlan:
    """The valid verdict: every cone node attributed, its sinks (rebuilt from the ledger where the token was), by token and by sink."""
    nodes, preds = graph.nodes, graph.preds
    outputs = set(out_idx)
    token_nodes: dict[str, list[int]] = {}
    for i in cone:
        t = nodes[i].token
        if t is not None and t in rebuilt:
            token_nodes.setdefault(t, []).append(i)
    token_sinks: dict[str, list[str]] = {}
    tokens: list[TokenReplay] = []
    for t, group in token_nodes.items():
        entry = by_token[t]
        union = {s for h in group for s in nodes[h].sinks} | {s for e in entry.effects for s in e.sinks}
        token_sinks[t] = sorted(union)
        tokens.append(TokenReplay(token=t, nodes=[nodes[h].id for h in group], effects=list(entry.effects), sinks=token_sinks[t]))
    attributed: list[NodeAttribution] = []
    by_sink: dict[str, tuple[list[str], dict[str, None]]] = {}  # sink -> (node ids, tokens as an ordered set)
    edges = 0
    for i in cone:
        node = nodes[i]
        t = node.token
        rebuilt_sinks = token_sinks.get(t) if t is not None else None
        from_ledger = rebuilt_sinks is not None
        sinks = rebuilt_sinks if rebuilt_sinks is not None else node.sinks
        role: Role = "output" if i in outputs else ("carrier" if preds[i] else "source")
        edges += len(preds[i])
        attributed.append(
            NodeAttribution(
                id=node.id,
                operation=node.operation,
                role=role,
                predecessors=node.predecessors,
                side_effects=node.side_effects,
                outcome=resolved_outcome.get(i, node.outcome),
                outcome_from="ledger" if i in resolved_outcome else "span",
                token=t,
                sinks=sinks,
                sinks_from="ledger" if from_ledger else "span",
            )
        )
        for s in sinks:
            ids, toks = by_sink.setdefault(s, ([], {}))
            ids.append(node.id)
            if t is not None:
                toks[t] = None
    forced = sorted({f.condition for f in findings if f.resolved})
    return ReplayPlan(
        unit="token" if forced else "span",
        forced_by=forced,
        outputs=[nodes[i].id for i in out_idx],
        edges=edges,
        nodes=attributed,
        sinks=[SinkAttribution(sink=s, nodes=ids, tokens=list(toks)) for s, (ids, toks) in sorted(by_sink.items())],
        tokens=tokens,
        findings=findings,
    )
