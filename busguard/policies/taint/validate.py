"""Whether a tainted output's causal cone can be replayed, and at which unit.

The cone of a tainted output is that node and every node it depends on
through `predecessors`: the only nodes that can have carried taint into it.
Four conditions are checked over every node of the cone (docs/taint.md):

1. a terminal outcome (success, failure, abort) -- or a ledger entry for the
   node's token whose every effect is terminal, which resolves it;
2. its token unique within the cone: no two distinct effects share it (two
   cone nodes carrying it, two effects under it in the ledger, or a ledger
   sink the trace never shows); a side-effecting node without a token fails
   too, since nothing can tell its effects apart;
3. no successor of an aborted node that is not itself aborted (a causal
   violation);
4. its recorded input hash equal to the one derived from its predecessors'
   output hashes (hashing.py).

Every condition is evaluated over the whole cone and every finding reported;
nothing stops at the first. A finding the ledger resolves (1 and 2 only)
moves the plan to token level; any other makes the verdict a refusal, which
names the nodes it could not settle and the whole cone as still suspect, and
never carries a graph: a degraded graph is worse than none because it looks
authoritative. Everything here is iterative (million-node chains) and linear
in nodes plus edges, apart from sorting what is reported.
"""

from __future__ import annotations

from collections.abc import Sequence

from busguard.policies.taint.hashing import derive_input_hash
from busguard.policies.taint.model import (
    EXECUTED,
    TERMINAL,
    Graph,
    Ledger,
    LedgerEntry,
    Outcome,
    Trace,
    TraceError,
    build_graph,
    check_ledger,
)
from busguard.policies.taint.plan import Finding, Kind, ReplayRefused, Result, build_plan


def resolves(entry: LedgerEntry | None) -> bool:
    """A ledger entry settles its token when it exists and every effect under it has a terminal status."""
    return entry is not None and all(e.status in TERMINAL for e in entry.effects)


def ledger_outcome(entry: LedgerEntry) -> Outcome:
    """A resolved token's outcome: success if any effect succeeded, else failure if any failed, else abort."""
    statuses = {e.status for e in entry.effects}
    if "success" in statuses:
        return "success"
    if "failure" in statuses:
        return "failure"
    return "abort"


def cone_of(graph: Graph, outputs: Sequence[int]) -> bytearray:
    """Membership flags of the outputs and all their ancestors (iterative walk)."""
    in_cone = bytearray(len(graph.nodes))
    preds = graph.preds
    stack = list(outputs)
    for i in stack:
        in_cone[i] = 1
    while stack:
        for j in preds[stack.pop()]:
            if not in_cone[j]:
                in_cone[j] = 1
                stack.append(j)
    return in_cone


def leaves(graph: Graph) -> list[int]:
    has_succ = bytearray(len(graph.nodes))
    for row in graph.preds:
        for j in row:
            has_succ[j] = 1
    return [i for i in range(len(has_succ)) if not has_succ[i]]  # in the order of the nodes array


def validate(
    trace: Trace | Graph,
    ledger: Ledger | None = None,
    outputs: Sequence[str] | None = None,
    *,
    source: str = "trace",
    ledger_source: str = "ledger",
) -> Result:
    """Judge the cone of `outputs` (default: the trace's `tainted_output`, else every leaf, i.e. the whole trace).

    Raises TraceError for malformed input (not a DAG, duplicate ids, an
    output that is not a node); every well-formed input gets a verdict.
    """
    graph = trace if isinstance(trace, Graph) else build_graph(trace, source)
    by_token = check_ledger(ledger, ledger_source) if ledger is not None else {}
    nodes, preds = graph.nodes, graph.preds
    if outputs:
        chosen: dict[int, None] = {}
        for oid in outputs:
            i = graph.index.get(oid)
            if i is None:
                raise TraceError(source, "output", oid, "must name a node of this trace")
            chosen[i] = None
        out_idx = list(chosen)
    elif graph.trace.tainted_output is not None:
        out_idx = [graph.index[graph.trace.tainted_output]]
    else:
        out_idx = leaves(graph)
    in_cone = cone_of(graph, out_idx)
    cone = [i for i in graph.order if in_cone[i]]

    # Condition 1 (with ledger resolution): the effective outcome of every cone node.
    c1: list[Finding] = []
    resolved_outcome: dict[int, Outcome] = {}
    for i in cone:
        node = nodes[i]
        if node.outcome in TERMINAL:
            continue
        entry = by_token.get(node.token) if node.token is not None else None
        if resolves(entry):
            assert entry is not None
            resolved_outcome[i] = got = ledger_outcome(entry)
            detail = f"outcome {node.outcome} in the trace; the ledger's {len(entry.effects)} terminal effect(s) under token {node.token} resolve it to {got}"
        elif node.token is None:
            detail = f"outcome {node.outcome} and no idempotency token, so no ledger entry can resolve it"
        elif entry is None:
            detail = f"outcome {node.outcome} and the ledger has no entry for token {node.token}"
        else:
            open_ = sorted({e.status for e in entry.effects} - TERMINAL)
            detail = f"outcome {node.outcome}; the ledger entry for token {node.token} has effects still {'/'.join(open_)}"
        c1.append(
            Finding(condition=1, kind="non_terminal", nodes=[node.id], token=node.token, resolved=i in resolved_outcome, detail=detail)
        )

    def outcome(i: int) -> Outcome:
        return resolved_outcome.get(i, nodes[i].outcome)

    # Condition 2: tokens unique within the cone, ledger included.
    c2_at: list[tuple[int, Finding]] = []  # (node index, finding)
    first_holder: dict[str, int] = {}
    holders: dict[str, list[int]] = {}  # only tokens carried by two or more cone nodes
    for i in cone:
        node = nodes[i]
        t = node.token
        if t is None:
            if node.side_effects:
                c2_at.append(
                    (
                        i,
                        _unresolved(
                            2,
                            "missing_token",
                            [node.id],
                            "side-effecting node without an idempotency token: its effects cannot be told apart or looked up in the ledger",
                        ),
                    )
                )
            continue
        k = first_holder.setdefault(t, i)
        if k != i:
            holders.setdefault(t, [k]).append(i)
    collisions: list[tuple[int, str, list[str]]] = []  # (first holder, token, reasons)
    reasons_of: dict[str, list[str]] = {}
    for t, group in holders.items():
        reasons_of[t] = [f"carried by {len(group)} cone nodes"]
        collisions.append((first_holder[t], t, reasons_of[t]))
    for t, entry in by_token.items():
        k = first_holder.get(t, -1)
        if k < 0:
            continue
        reasons = []
        if len(entry.effects) > 1:
            reasons.append(f"the ledger records {len(entry.effects)} effects under it")
        seen_sinks = {s for h in holders.get(t, [k]) for s in nodes[h].sinks}
        unseen = sorted({s for e in entry.effects for s in e.sinks} - seen_sinks)
        if unseen:
            reasons.append(f"the ledger shows it reaching {', '.join(unseen)}, which no cone node carrying it records")
        if reasons:
            if t in reasons_of:
                reasons_of[t].extend(reasons)
            else:
                collisions.append((k, t, reasons))
    rebuilt: set[str] = set()
    for k, t, reasons in collisions:
        entry = by_token.get(t)
        ok = resolves(entry)
        if ok:
            rebuilt.add(t)
            tail = "; rebuilt from the ledger, taint goes to every sink the token touched"
        elif entry is None:
            tail = "; the ledger has no entry for it, so the effects cannot be rebuilt"
        else:
            tail = "; its ledger entry still has non-terminal effects, so the effects cannot be rebuilt"
        group = holders.get(t, [k])
        c2_at.append(
            (
                k,
                Finding(
                    condition=2,
                    kind="token_collision",
                    nodes=[nodes[h].id for h in group],
                    token=t,
                    resolved=ok,
                    detail=f"token {t} is shared by distinct effects: {'; '.join(reasons)}{tail}",
                ),
            )
        )
    if c2_at:  # collisions join the missing tokens in cone order, by each token's first holder
        position = {i: p for p, i in enumerate(cone)}
        c2_at.sort(key=lambda pair: position[pair[0]])
    c2 = [f for _, f in c2_at]
    for i in resolved_outcome:
        t = nodes[i].token
        assert t is not None
        rebuilt.add(t)

    # Condition 3: no successor of an aborted predecessor that is not itself aborted.
    c3: list[Finding] = []
    aborted = bytearray(len(nodes))
    for i in cone:
        if outcome(i) == "abort":
            aborted[i] = 1
    for i in cone if any(aborted) else ():
        if aborted[i]:
            continue
        mine = outcome(i)
        for j in preds[i]:
            if aborted[j]:
                what = "executed" if mine in EXECUTED else f"has outcome {mine} (may have executed)"
                c3.append(
                    Finding(
                        condition=3,
                        kind="causal_violation",
                        nodes=[nodes[j].id, nodes[i].id],
                        resolved=False,
                        detail=f"{nodes[i].id} {what} although its predecessor {nodes[j].id} aborted: the recorded order is not the execution order",
                    )
                )

    # Condition 4: recorded input hash == derived from the predecessors' output hashes.
    c4: list[Finding] = []
    for i in cone:
        node = nodes[i]
        rec = node.input_hash
        if rec is None:
            if outcome(i) != "abort":
                c4.append(
                    _unresolved(
                        4,
                        "input_unverifiable",
                        [node.id],
                        f"no input_hash recorded for a node with outcome {outcome(i)}: its edges cannot be verified",
                    )
                )
            continue
        outs: list[str] = []
        missing = None
        for j in preds[i]:
            h = nodes[j].output_hash
            if h is None:
                missing = nodes[j].id
                break
            outs.append(h)
        if missing is not None:
            c4.append(
                _unresolved(
                    4,
                    "input_unverifiable",
                    [node.id],
                    f"predecessor {missing} recorded no output_hash, so the input of {node.id} cannot be derived",
                )
            )
            continue
        derived = derive_input_hash(node.external_input_hash, outs)
        if derived != rec:
            c4.append(
                _unresolved(4, "input_mismatch", [node.id], f"recorded input_hash {rec} but its predecessors' outputs derive {derived}")
            )

    findings = c1 + c2 + c3 + c4
    out_ids = [nodes[i].id for i in out_idx]
    blocking = [f for f in findings if not f.resolved]
    if blocking:
        conditions = sorted({f.condition for f in blocking})
        unknowable = sorted({n for f in blocking for n in f.nodes})
        return ReplayRefused(
            reason=_refusal_reason(conditions[0], blocking),
            condition=conditions[0],
            conditions=conditions,
            outputs=out_ids,
            nodes=unknowable,
            suspect=sorted(nodes[i].id for i in cone),
            findings=findings,
        )
    return build_plan(graph, cone, out_idx, findings, resolved_outcome, rebuilt, by_token)


def _unresolved(condition: int, kind: Kind, nodes: list[str], detail: str) -> Finding:
    """A finding the ledger cannot settle (conditions 3 and 4 always; 2 for a missing token): it refuses the replay."""
    return Finding(condition=condition, kind=kind, nodes=nodes, resolved=False, detail=detail)


_WHY = {
    1: "a node in the cone has no terminal outcome and no ledger entry resolves it",
    2: "an idempotency token in the cone cannot be rebuilt from the ledger",
    3: "an aborted node has a successor that did not abort (causal violation): the replay stops there",
    4: "a recorded input hash differs from, or cannot be checked against, its predecessors' outputs",
}


def _refusal_reason(condition: int, blocking: Sequence[Finding]) -> str:
    first = next(f for f in blocking if f.condition == condition)
    more = len(blocking) - 1
    also = f" (and {more} more finding{'s' if more != 1 else ''})" if more else ""
    return f"condition {condition}: {_WHY[condition]}; {first.detail}{also}"
