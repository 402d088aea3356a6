"""The validator against a brute-force reference on small random DAGs.

The reference is written from docs/taint.md and shares no code with the
validator: the cone is a fixed point over all nodes, every condition a
nested loop, the input hash rebuilt from the documented preimage text.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from busguard.policies.taint.model import Ledger, Node, Trace
from busguard.policies.taint.plan import ReplayRefused, Result
from busguard.policies.taint.validate import validate

TERMINAL = {"success", "failure", "abort"}
OUTCOMES = ["success", "failure", "abort", "pending", "unknown"]
SINKS = ["s0", "s1", "s2"]
TOKENS = [None, "t0", "t1", "t2", "t0", "t1", "t2"]
LIKELY = ["success"] * 4 + ["failure", "abort", "abort", "pending", "unknown"]  # enough plans, and aborts with successors


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def reference_input_hash(ext: str | None, outs: list[str]) -> str:
    text = "busguard.taint.input.v1\n" + (ext if ext is not None else "-") + "\n"
    for o in outs:
        text += o + "\n"
    return sha(text)


def reference(trace: Trace, ledger: Ledger | None, outputs: list[str] | None) -> dict[str, Any]:
    by_id = {n.id: n for n in trace.nodes}
    entries = {e.token: e for e in ledger.entries} if ledger else {}
    if outputs:
        outs = list(dict.fromkeys(outputs))
    elif trace.tainted_output is not None:
        outs = [trace.tainted_output]
    else:
        outs = [n.id for n in trace.nodes if not any(n.id in m.predecessors for m in trace.nodes)]
    cone = set(outs)
    while True:
        grown = cone | {p for nid in cone for p in by_id[nid].predecessors}
        if grown == cone:
            break
        cone = grown

    def settles(token: str | None) -> bool:
        e = entries.get(token) if token is not None else None
        return e is not None and all(x.status in TERMINAL for x in e.effects)

    findings: list[tuple[int, str, frozenset[str], str | None, bool]] = []
    outcome: dict[str, str] = {}
    for nid in cone:
        n = by_id[nid]
        outcome[nid] = n.outcome
        if n.outcome not in TERMINAL:
            ok = settles(n.token)
            if ok:
                statuses = [x.status for x in entries[n.token].effects]  # type: ignore[index]
                outcome[nid] = "success" if "success" in statuses else ("failure" if "failure" in statuses else "abort")
            findings.append((1, "non_terminal", frozenset([nid]), n.token, ok))
    for nid in cone:
        if by_id[nid].side_effects and by_id[nid].token is None:
            findings.append((2, "missing_token", frozenset([nid]), None, False))
    for t in {by_id[nid].token for nid in cone} - {None}:
        holders = [nid for nid in cone if by_id[nid].token == t]
        e = entries.get(t)  # type: ignore[arg-type]
        trace_sinks = {s for nid in holders for s in by_id[nid].sinks}
        ledger_sinks = {s for x in e.effects for s in x.sinks} if e else set()
        if len(holders) > 1 or (e is not None and (len(e.effects) > 1 or not ledger_sinks <= trace_sinks)):
            findings.append((2, "token_collision", frozenset(holders), t, settles(t)))
    for nid in cone:
        for p in by_id[nid].predecessors:
            if outcome[p] == "abort" and outcome[nid] != "abort":
                findings.append((3, "causal_violation", frozenset([p, nid]), None, False))
    for nid in cone:
        n = by_id[nid]
        pred_outs = [by_id[p].output_hash for p in n.predecessors]
        if n.input_hash is None:
            if outcome[nid] != "abort":
                findings.append((4, "input_unverifiable", frozenset([nid]), None, False))
        elif None in pred_outs:
            findings.append((4, "input_unverifiable", frozenset([nid]), None, False))
        elif reference_input_hash(n.external_input_hash, pred_outs) != n.input_hash:  # type: ignore[arg-type]
            findings.append((4, "input_mismatch", frozenset([nid]), None, False))
    blocking = [f for f in findings if not f[4]]
    if blocking:
        return {
            "verdict": "refused",
            "condition": min(f[0] for f in blocking),
            "conditions": sorted({f[0] for f in blocking}),
            "nodes": sorted({x for f in blocking for x in f[2]}),
            "suspect": sorted(cone),
            "outputs": outs,
            "findings": Counter(findings),
        }
    rebuilt = {f[3] for f in findings if f[4]}
    sinks: dict[str, set[str]] = {}
    per_node = {}
    for nid in cone:
        n = by_id[nid]
        if n.token in rebuilt:
            e = entries[n.token]  # type: ignore[index]
            mine = {s for m in cone if by_id[m].token == n.token for s in by_id[m].sinks} | {s for x in e.effects for s in x.sinks}
        else:
            mine = set(n.sinks)
        per_node[nid] = (outcome[nid], frozenset(mine))
        for s in mine:
            sinks.setdefault(s, set()).add(nid)
    forced = sorted({f[0] for f in findings if f[4]})
    return {
        "verdict": "valid",
        "unit": "token" if forced else "span",
        "forced_by": forced,
        "outputs": outs,
        "nodes": per_node,
        "sinks": {s: sorted(v) for s, v in sinks.items()},
        "findings": Counter(findings),
    }


def normalize(result: Result) -> dict[str, Any]:
    findings = Counter((f.condition, f.kind, frozenset(f.nodes), f.token, f.resolved) for f in result.findings)
    if isinstance(result, ReplayRefused):
        return {
            "verdict": "refused",
            "condition": result.condition,
            "conditions": result.conditions,
            "nodes": result.nodes,
            "suspect": result.suspect,
            "outputs": result.outputs,
            "findings": findings,
        }
    return {
        "verdict": "valid",
        "unit": result.unit,
        "forced_by": result.forced_by,
        "outputs": result.outputs,
        "nodes": {n.id: (n.outcome, frozenset(n.sinks)) for n in result.nodes},
        "sinks": {s.sink: sorted(s.nodes) for s in result.sinks},
        "findings": findings,
    }


@st.composite
def cases(draw: st.DrawFn) -> tuple[Trace, Ledger | None, list[str] | None]:
    count = draw(st.integers(1, 7))
    ids = [f"n{k}" for k in range(count)]
    outs = [draw(st.sampled_from([None, sha("shared"), sha(f"o{k}"), sha(f"o{k}"), sha(f"o{k}")])) for k in range(count)]
    nodes = []
    for k, nid in enumerate(ids):
        preds = draw(st.lists(st.sampled_from(ids[:k]), unique=True, max_size=3)) if k else []
        fx = draw(st.booleans())
        ext = draw(st.sampled_from([None, sha("prompt")]))
        pred_outs = [outs[int(p[1:])] for p in preds]
        derivable = None not in pred_outs
        mode = draw(st.sampled_from(["derived"] * 6 + ["wrong", "null"]))
        if mode == "derived" and derivable:
            inp: str | None = reference_input_hash(ext, pred_outs)  # type: ignore[arg-type]
        elif mode == "null":
            inp = None
        else:
            inp = sha(f"wrong{k}")
        nodes.append(
            Node(
                id=nid,
                predecessors=preds,
                operation="op",
                side_effects=fx,
                outcome=draw(st.sampled_from(LIKELY)),
                token=draw(st.sampled_from(TOKENS)),
                external_input_hash=ext,
                input_hash=inp,
                output_hash=outs[k],
                sinks=draw(st.lists(st.sampled_from(SINKS), unique=True, max_size=2)) if fx else [],
            )
        )
    order = draw(st.permutations(range(count)))
    tainted = draw(st.sampled_from([None, *ids]))
    trace = Trace(format="busguard.taint-trace.v1", tainted_output=tainted, nodes=[nodes[k] for k in order])
    ledger = None
    if draw(st.integers(0, 2)):
        entries = []
        for t in draw(st.lists(st.sampled_from(["t0", "t1", "t2"]), unique=True)):
            effects = draw(
                st.lists(
                    st.tuples(st.sampled_from(LIKELY), st.lists(st.sampled_from(SINKS), unique=True, max_size=2)), min_size=1, max_size=3
                )
            )
            entries.append({"token": t, "effects": [{"status": s, "sinks": sk} for s, sk in effects]})
        ledger = msgspec.convert({"format": "busguard.taint-ledger.v1", "entries": entries}, Ledger)
    outputs = draw(st.one_of(st.none(), st.lists(st.sampled_from(ids), min_size=1, max_size=2)))
    return trace, ledger, outputs


@settings(max_examples=600, deadline=None)
@given(cases())
def test_validator_matches_the_brute_force_reference(case: tuple[Trace, Ledger | None, list[str] | None]) -> None:
    trace, ledger, outputs = case
    result = validate(trace, ledger, outputs)
    assert normalize(result) == reference(trace, ledger, outputs)


@settings(max_examples=300, deadline=None)
@given(cases(), st.data())
def test_nodes_outside_the_cone_do_not_affect_the_verdict(case: tuple[Trace, Ledger | None, list[str] | None], data: st.DataObject) -> None:
    trace, ledger, outputs = case
    before = validate(trace, ledger, outputs)
    ids = [n.id for n in trace.nodes]
    # Extra nodes may hang off anything (they are descendants, never ancestors, of the output), with any faults.
    extra: list[Node] = []
    for k in range(data.draw(st.integers(1, 4))):
        preds = data.draw(st.lists(st.sampled_from(ids + [e.id for e in extra]), unique=True, max_size=3))
        extra.append(
            Node(
                id=f"x{k}",
                predecessors=preds,
                operation="op",
                side_effects=True,
                outcome=data.draw(st.sampled_from(OUTCOMES)),
                token=data.draw(st.sampled_from(TOKENS)),
                input_hash=sha(f"nonsense{k}"),
                output_hash=None,
                sinks=["s9"],
            )
        )
    chosen = outputs or ([trace.tainted_output] if trace.tainted_output else [r for r in before.outputs])
    grown = msgspec.structs.replace(trace, nodes=trace.nodes + extra)
    after = validate(grown, ledger, chosen)
    assert normalize(after) == normalize(before)


@settings(max_examples=300, deadline=None)
@given(cases())
def test_a_refusal_carries_no_graph_and_a_plan_attributes_the_whole_cone(case: tuple[Trace, Ledger | None, list[str] | None]) -> None:
    trace, ledger, outputs = case
    result = validate(trace, ledger, outputs)
    encoded = msgspec.json.decode(msgspec.json.encode(result))
    if isinstance(result, ReplayRefused):
        assert set(encoded) == {"verdict", "reason", "condition", "conditions", "outputs", "nodes", "suspect", "findings"}
        assert set(result.nodes) <= set(result.suspect) and result.nodes
        assert result.condition == min(result.conditions)
    else:
        assert all(n.outcome in TERMINAL for n in result.nodes)  # never a graph through an unverified outcome
        ids = [n.id for n in result.nodes]
        assert len(set(ids)) == len(ids) and set(result.outputs) <= set(ids)
        pos = {nid: k for k, nid in enumerate(ids)}
        assert all(p in pos and pos[p] < pos[n.id] for n in result.nodes for p in n.predecessors)
        assert (result.unit == "token") == bool(result.forced_by) == bool(result.findings)


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 7).flatmap(lambda n: st.lists(st.lists(st.integers(0, n - 1), unique=True, max_size=3), min_size=n, max_size=n)))
def test_cycles_are_refused_exactly_when_a_node_reaches_itself(pred_lists: list[list[int]]) -> None:
    from busguard.policies.taint.model import TraceError, build_graph

    nodes = [
        Node(
            id=f"n{k}",
            predecessors=[f"n{p}" for p in ps],
            operation="op",
            side_effects=False,
            outcome="success",
            input_hash=None,
            output_hash=None,
        )
        for k, ps in enumerate(pred_lists)
    ]
    trace = Trace(format="busguard.taint-trace.v1", nodes=nodes)
    reach = {k: set(ps) for k, ps in enumerate(pred_lists)}  # ancestors, by fixed point
    while True:
        grown = {k: r | {a for p in r for a in reach[p]} for k, r in reach.items()}
        if grown == reach:
            break
        reach = grown
    cyclic = any(k in r for k, r in reach.items())
    try:
        graph = build_graph(trace)
    except TraceError as exc:
        assert cyclic and "cycle" in str(exc)
        shown = str(exc).split("cycle (")[1].split(")")[0].split(" -> ")
        assert shown[0] == shown[-1]
        for a, b in itertools.pairwise(shown):  # each step of the reported cycle is a real edge a -> b
            assert a in nodes[int(b[1:])].predecessors
    else:
        assert not cyclic
        pos = {i: k for k, i in enumerate(graph.order)}
        assert sorted(graph.order) == list(range(len(nodes)))
        assert all(pos[p] < pos[i] for i, row in enumerate(graph.preds) for p in row)
