"""The taint replay guard (seed 003): scenarios, the four conditions, the unit of replay, malformed input."""

from __future__ import annotations

import hashlib
import random
import re

import msgspec
import pytest

from busguard.policies.taint.hashing import derive_input_hash, input_preimage
from busguard.policies.taint.model import Trace, TraceError, build_graph, decode_ledger, decode_trace
from busguard.policies.taint.plan import ReplayPlan, ReplayRefused
from busguard.policies.taint.validate import validate

from .taint_build import h, incident, ledger, node, trace

# -- the seed's incident ---------------------------------------------------------


def test_incident_without_a_ledger_is_refused_at_post_message_and_clears_nobody() -> None:
    result = validate(incident())
    assert isinstance(result, ReplayRefused)
    assert (result.condition, result.conditions, result.nodes) == (1, [1], ["post_message"])
    assert result.outputs == ["post_message"]
    # summarize is never cleared: it stays in the suspect set, and a refusal has nowhere to say "clean".
    assert result.suspect == ["post_message", "read_secret", "summarize"]
    assert set(ReplayRefused.__struct_fields__) == {"reason", "condition", "conditions", "outputs", "nodes", "suspect", "findings"}
    assert "clean" not in msgspec.json.encode(result).decode()
    [finding] = result.findings
    assert (finding.condition, finding.kind, finding.nodes, finding.resolved) == (1, "non_terminal", ["post_message"], False)


def test_unknown_outcome_is_refused_like_pending() -> None:
    result = validate(incident("unknown"))
    assert isinstance(result, ReplayRefused) and result.nodes == ["post_message"]


def test_incident_with_the_ledger_is_a_token_level_plan_tainting_both_sinks() -> None:
    led = ledger({"tok-post": [("success", ["chat:#ops"]), ("success", ["webhook:partner-archive"])]})
    result = validate(incident(), led)
    assert isinstance(result, ReplayPlan)
    assert (result.unit, result.forced_by) == ("token", [1, 2])
    assert {s.sink: s.nodes for s in result.sinks} == {"chat:#ops": ["post_message"], "webhook:partner-archive": ["post_message"]}
    by_id = {n.id: n for n in result.nodes}
    assert [n.id for n in result.nodes] == ["read_secret", "summarize", "post_message"]
    post = by_id["post_message"]
    assert (post.outcome, post.outcome_from, post.sinks, post.sinks_from) == (
        "success",
        "ledger",
        ["chat:#ops", "webhook:partner-archive"],
        "ledger",
    )
    assert (by_id["summarize"].role, by_id["summarize"].predecessors) == ("carrier", ["read_secret"])
    assert by_id["read_secret"].role == "source"
    [tok] = result.tokens
    assert (tok.token, tok.nodes, len(tok.effects)) == ("tok-post", ["post_message"], 2)
    assert all(f.resolved for f in result.findings) and {f.kind for f in result.findings} == {"non_terminal", "token_collision"}


def test_a_second_sink_alone_in_the_ledger_is_a_collision() -> None:
    """One ledger effect, but reaching a sink the trace never shows: the span log dropped an effect."""
    t = incident("success")
    result = validate(t, ledger({"tok-post": [("success", ["chat:#ops", "webhook:partner-archive"])]}))
    assert isinstance(result, ReplayPlan) and (result.unit, result.forced_by) == ("token", [2])
    assert [s.sink for s in result.sinks] == ["chat:#ops", "webhook:partner-archive"]


def test_a_ledger_entry_with_an_open_effect_resolves_nothing() -> None:
    led = ledger({"tok-post": [("success", ["chat:#ops"]), ("pending", ["webhook:partner-archive"])]})
    result = validate(incident(), led)
    assert isinstance(result, ReplayRefused)
    assert (result.condition, result.conditions, result.nodes) == (1, [1, 2], ["post_message"])
    assert "still pending" in result.findings[0].detail


def test_a_ledger_entry_that_matches_the_span_resolves_the_outcome_at_token_level() -> None:
    result = validate(incident(), ledger({"tok-post": [("failure", ["chat:#ops"])]}))
    assert isinstance(result, ReplayPlan) and (result.unit, result.forced_by) == ("token", [1])
    assert result.nodes[-1].outcome == "failure" and result.nodes[-1].sinks == ["chat:#ops"]


def test_a_ledger_that_agrees_with_a_terminal_trace_leaves_the_plan_at_span_level() -> None:
    result = validate(incident("success"), ledger({"tok-post": [("success", ["chat:#ops"])], "elsewhere": [("pending", ["x"])]}))
    assert isinstance(result, ReplayPlan) and (result.unit, result.forced_by, result.findings, result.tokens) == ("span", [], [], [])


def test_the_ledger_does_not_overrule_a_terminal_outcome() -> None:
    result = validate(incident("success"), ledger({"tok-post": [("pending", ["chat:#ops"])]}))
    assert isinstance(result, ReplayPlan) and result.unit == "span" and result.nodes[-1].outcome == "success"


# -- condition 2 -----------------------------------------------------------------


def retried() -> Trace:
    return trace(
        node("read", ext="q"),
        node("post1", ["read"], fx=True, outcome="failure", token="tok", sinks=["a"]),
        node("post2", ["read"], fx=True, token="tok", sinks=["b"]),
        node("report", ["post1", "post2"]),
        tainted_output="report",
    )


def test_two_cone_nodes_sharing_a_token_without_a_ledger_are_refused() -> None:
    result = validate(retried())
    assert isinstance(result, ReplayRefused)
    assert (result.condition, result.nodes) == (2, ["post1", "post2"])
    assert result.findings[0].kind == "token_collision" and result.findings[0].token == "tok"


def test_two_cone_nodes_sharing_a_token_are_rebuilt_from_the_ledger() -> None:
    result = validate(retried(), ledger({"tok": [("failure", ["a"]), ("success", ["b", "c"])]}))
    assert isinstance(result, ReplayPlan) and (result.unit, result.forced_by) == ("token", [2])
    by_id = {n.id: n for n in result.nodes}
    assert by_id["post1"].sinks == by_id["post2"].sinks == ["a", "b", "c"]
    assert {s.sink: s.nodes for s in result.sinks} == {"a": ["post1", "post2"], "b": ["post1", "post2"], "c": ["post1", "post2"]}


def test_a_side_effecting_node_without_a_token_is_refused() -> None:
    t = trace(node("read", ext="q"), node("post", ["read"], fx=True, sinks=["a"]))
    result = validate(t, ledger({}))
    assert isinstance(result, ReplayRefused) and (result.condition, result.nodes) == (2, ["post"])
    assert result.findings[0].kind == "missing_token"


def test_a_token_shared_with_a_node_outside_the_cone_is_not_a_collision() -> None:
    t = trace(
        node("read", ext="q"),
        node("post", ["read"], fx=True, token="tok", sinks=["a"]),
        node("other", ["read"], fx=True, token="tok", sinks=["b"], outcome="unknown"),
        tainted_output="post",
    )
    result = validate(t)
    assert isinstance(result, ReplayPlan) and result.unit == "span"
    assert [n.id for n in result.nodes] == ["read", "post"]


# -- condition 3 -----------------------------------------------------------------


def test_an_executed_successor_of_an_aborted_node_is_a_causal_violation() -> None:
    t = trace(
        node("plan", ext="task"),
        node("approve", ["plan"], outcome="abort"),
        node("execute", ["approve"], fx=True, token="t", sinks=["vault"]),
        tainted_output="execute",
    )
    result = validate(t)
    assert isinstance(result, ReplayRefused)
    assert (result.condition, result.conditions, result.nodes) == (3, [3], ["approve", "execute"])
    assert "executed although its predecessor approve aborted" in result.findings[0].detail


def test_aborts_that_cascade_are_consistent() -> None:
    t = trace(
        node("plan", ext="task"),
        node("approve", ["plan"], outcome="abort", out=None),
        node("execute", ["approve"], fx=True, token="t", outcome="abort", inp=None, out=None),
        tainted_output="execute",
    )
    result = validate(t)
    assert isinstance(result, ReplayPlan) and [n.outcome for n in result.nodes] == ["success", "abort", "abort"]


def test_a_ledger_resolved_abort_counts_for_condition_3() -> None:
    t = trace(
        node("send", fx=True, token="t", outcome="pending", ext="x", sinks=["a"]),
        node("after", ["send"]),
        tainted_output="after",
    )
    result = validate(t, ledger({"t": [("abort", [])]}))
    assert isinstance(result, ReplayRefused) and result.condition == 3 and result.nodes == ["after", "send"]


def test_an_executed_successor_of_an_aborted_node_outside_the_cone_does_not_matter() -> None:
    t = trace(
        node("a", ext="x", outcome="abort"),
        node("b", ["a"]),  # a violation, but b is not an ancestor of c
        node("c", ["a"], outcome="abort"),
        tainted_output="c",
    )
    assert isinstance(validate(t), ReplayPlan)
    assert isinstance(validate(t, outputs=["b"]), ReplayRefused)


# -- condition 4 -----------------------------------------------------------------


def test_an_input_hash_mismatch_is_caught() -> None:
    wrong = derive_input_hash(h("prompt"), [h("out:read"), h("out:something-else")])
    t = trace(
        node("read", ext="doc"),
        node("summarize", ["read"], ext="prompt", inp=wrong),
        node("post", ["summarize"], fx=True, token="t", sinks=["a"]),
        tainted_output="post",
    )
    result = validate(t)
    assert isinstance(result, ReplayRefused)
    assert (result.condition, result.nodes, result.findings[0].kind) == (4, ["summarize"], "input_mismatch")
    assert wrong in result.findings[0].detail


def test_predecessor_order_is_part_of_the_input_hash() -> None:
    nodes = [node("a", ext="1"), node("b", ext="2"), node("m", ["a", "b"])]
    good = trace(*nodes)
    swapped = dict(nodes[2], predecessors=["b", "a"], input_hash=good.nodes[2].input_hash)
    assert isinstance(validate(good), ReplayPlan)
    result = validate(trace(nodes[0], nodes[1], swapped))
    assert isinstance(result, ReplayRefused) and result.findings[0].kind == "input_mismatch"


def test_an_input_that_cannot_be_derived_is_refused() -> None:
    t = trace(node("a", ext="1", out=None), node("b", ["a"], inp=h("anything")))
    result = validate(t)
    assert isinstance(result, ReplayRefused) and result.findings[0].kind == "input_unverifiable"
    assert "predecessor a recorded no output_hash" in result.findings[0].detail
    t = trace(node("a", ext="1"), node("b", ["a"], inp=None))
    result = validate(t)
    assert isinstance(result, ReplayRefused) and result.findings[0].kind == "input_unverifiable" and result.nodes == ["b"]


def test_the_derivation_rule_is_the_documented_text() -> None:
    a, b = h("out:a"), h("out:b")
    assert input_preimage(None, []) == b"busguard.taint.input.v1\n-\n"
    assert input_preimage(h("x"), [a, b]) == f"busguard.taint.input.v1\n{h('x')}\n{a}\n{b}\n".encode()
    assert derive_input_hash(None, [a]) == hashlib.sha256(f"busguard.taint.input.v1\n-\n{a}\n".encode()).hexdigest()
    # The vector docs/taint.md quotes (printf ... | sha256sum).
    assert derive_input_hash(None, []) == hashlib.sha256(b"busguard.taint.input.v1\n-\n").hexdigest()


# -- DAGs, cones, several findings ------------------------------------------------


def diamond() -> Trace:
    return trace(
        node("fetch", ext="q"),
        node("sum_a", ["fetch"], ext="A"),
        node("sum_b", ["fetch"], ext="B"),
        node("merge", ["sum_a", "sum_b"]),
        node("publish", ["merge"], fx=True, token="tp", sinks=["chat:#finance"]),
        node("metrics", ["fetch"], fx=True, token="tm", outcome="unknown", out=None, sinks=["metrics"]),
        node("audit", ["sum_b", "metrics"], fx=True, token="tp", sinks=["log"]),
        tainted_output="publish",
    )


def test_a_diamond_with_a_fan_out_is_validated_over_its_cone_only() -> None:
    result = validate(diamond())
    assert isinstance(result, ReplayPlan) and result.unit == "span"
    ids = [n.id for n in result.nodes]
    assert sorted(ids) == ["fetch", "merge", "publish", "sum_a", "sum_b"] and result.edges == 5
    pos = {nid: k for k, nid in enumerate(ids)}
    assert all(pos[p] < pos[n.id] for n in result.nodes for p in n.predecessors)
    assert {n.id: n.role for n in result.nodes}["merge"] == "carrier"
    assert [s.sink for s in result.sinks] == ["chat:#finance"]


def test_the_same_diamond_from_the_fan_out_side_is_refused() -> None:
    # metrics has no terminal outcome; audit shares publish's token
    result = validate(diamond(), outputs=["audit"])
    assert isinstance(result, ReplayRefused)
    assert result.suspect == ["audit", "fetch", "metrics", "sum_b"]
    # metrics recorded no output, so audit's input cannot be checked either
    assert set(result.nodes) == {"metrics", "audit"} and (result.condition, result.conditions) == (1, [1, 4])
    both = validate(diamond(), outputs=["publish", "audit"])
    assert isinstance(both, ReplayRefused) and both.conditions == [1, 2, 4]
    assert set(both.nodes) == {"metrics", "publish", "audit"}


def test_without_an_output_the_whole_trace_is_the_cone() -> None:
    t = trace(node("a", ext="1"), node("b", ["a"]), node("c", ["a"]))
    result = validate(t)
    assert isinstance(result, ReplayPlan) and result.outputs == ["b", "c"] and len(result.nodes) == 3


def test_every_failing_condition_is_reported_and_the_lowest_forces_the_refusal() -> None:
    t = trace(
        node("a", ext="1", outcome="abort"),
        node("b", ["a"], inp=h("wrong"), fx=True, sinks=["s"]),
        node("c", ["b"], fx=True, token="t", outcome="pending", sinks=["s"]),
        tainted_output="c",
    )
    result = validate(t, ledger({"t": [("success", ["s"]), ("success", ["s2"])]}))
    assert isinstance(result, ReplayRefused)
    assert (result.condition, result.conditions) == (2, [2, 3, 4])
    assert [(f.condition, f.kind, f.resolved) for f in result.findings] == [
        (1, "non_terminal", True),
        (2, "missing_token", False),
        (2, "token_collision", True),
        (3, "causal_violation", False),
        (4, "input_mismatch", False),
    ]
    assert result.nodes == ["a", "b"] and result.reason.startswith("condition 2:") and "2 more findings" in result.reason


def test_list_order_does_not_change_the_verdict() -> None:
    t = diamond()
    shuffled = msgspec.structs.replace(t, nodes=random.Random(7).sample(t.nodes, len(t.nodes)))
    for outputs in (["publish"], ["audit"], None):
        a, b = validate(t, outputs=outputs), validate(shuffled, outputs=outputs)
        assert type(a) is type(b)
        if isinstance(a, ReplayPlan) and isinstance(b, ReplayPlan):
            assert sorted(n.id for n in a.nodes) == sorted(n.id for n in b.nodes) and a.sinks == b.sinks
        else:
            assert msgspec.structs.asdict(a) == msgspec.structs.asdict(b)


def test_long_chains_need_no_recursion() -> None:
    n = 60_000
    nodes = [node("n0", ext="x")] + [node(f"n{i}", [f"n{i - 1}"]) for i in range(1, n)]
    t = trace(*nodes)
    for order in (t.nodes, t.nodes[::-1]):  # in order (fast path) and reversed (Kahn)
        result = validate(msgspec.structs.replace(t, nodes=list(order)))
        assert isinstance(result, ReplayPlan) and len(result.nodes) == n and result.outputs == [f"n{n - 1}"]
    cyclic = msgspec.structs.replace(t, nodes=[msgspec.structs.replace(t.nodes[0], predecessors=[f"n{n - 1}"]), *t.nodes[1:]])
    with pytest.raises(TraceError, match="cycle"):
        build_graph(cyclic)


# -- malformed input ---------------------------------------------------------------


def raw(*nodes: dict[str, object], **extra: object) -> bytes:
    return msgspec.json.encode({"format": "busguard.taint-trace.v1", "nodes": list(nodes), **extra})


def n(id: str, preds: list[str] | None = None, **extra: object) -> dict[str, object]:
    return {
        "id": id,
        "predecessors": preds or [],
        "operation": "op",
        "side_effects": False,
        "outcome": "success",
        "input_hash": None,
        "output_hash": None,
        **extra,
    }


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        (raw(n("a", ["c"]), n("b", ["a"]), n("c", ["b"])), "nodes[0].predecessors", r"cycle \(a -> b -> c -> a\)"),
        (raw(n("a", ["a"])), "nodes[0].predecessors", r"cycle \(a -> a\)"),
        (raw(n("a"), n("b", ["ghost"])), "nodes[1].predecessors[0]", "no such node id"),
        (raw(n("a"), n("a")), "nodes[1].id", r"unique; nodes\[0\] already has this id"),
        (raw(n("a"), n("b", ["a", "a"])), "nodes[1].predecessors[1]", "listed once"),
        (raw(n("a", sinks=["s"])), "nodes[0].sinks", "side_effects: true"),
        (raw(n("a", side_effects=True, sinks=["s", "s"])), "nodes[0].sinks[1]", "listed once"),
        (raw(n("a", colour="red")), "nodes[0].colour", "not a known key"),
        (raw(n("a", outcome="done")), "nodes[0].outcome", "one of success, failure, abort"),
        (raw(n("a", input_hash="ABC")), "nodes[0].input_hash", "64 lowercase hex digits"),
        (raw(n("a"), tainted_output="zzz"), "tainted_output", "must name a node"),
        (raw(n("a"), version=2), "version", "not a known key"),
        (b'{"format": "busguard.taint-trace.v1", "nodes": [', "", "not valid JSON"),
        (
            b'{"format": "busguard.taint-trace.v1", "nodes": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "nodes[0]",
            "Expected `object`, got `array`",
        ),
        (msgspec.json.encode({"format": "v0", "nodes": [n("a")]}), "format", "'busguard.taint-trace.v1' for a trace"),
        (raw(), "nodes", "length >= 1"),
        (
            raw(n("a")).replace(b'"outcome":"success"', b'"outcome":"pending","outcome":"success"'),
            "outcome",
            "appears twice in one object \\(in the object with id/token 'a'\\)",
        ),
    ],
)
def test_malformed_traces_are_refused_with_a_clear_error(data: bytes, field: str, message: str) -> None:
    with pytest.raises(TraceError) as exc:
        build_graph(decode_trace(data, "t.json"), "t.json")
    assert (exc.value.file, exc.value.field) == ("t.json", field)
    assert re.search(message, str(exc.value)), str(exc.value)


def test_a_ledger_with_a_key_twice_is_malformed() -> None:
    data = b'{"format": "busguard.taint-ledger.v1", "entries": [{"token": "t", "effects": [{"status": "pending", "status": "success"}]}]}'
    with pytest.raises(TraceError, match="l.json: status: the key appears twice in one object"):
        decode_ledger(data, "l.json")


@pytest.mark.parametrize(
    ("doc", "field", "message"),
    [
        (
            {"entries": [{"token": "t", "effects": [{"status": "success"}]}, {"token": "t", "effects": [{"status": "success"}]}]},
            "entries[1].token",
            "at most one",
        ),
        ({"entries": [{"token": "t", "effects": []}]}, "entries[0].effects", "length >= 1"),
        (
            {"entries": [{"token": "t", "effects": [{"status": "success", "sinks": ["a", "a"]}]}]},
            "entries[0].effects[0].sinks[1]",
            "listed once",
        ),
        ({"entries": [{"token": "t", "effects": [{"status": "success", "node": "x"}]}]}, "entries[0].effects[0].node", "not a known key"),
    ],
)
def test_malformed_ledgers_are_refused(doc: dict[str, object], field: str, message: str) -> None:
    with pytest.raises(TraceError) as exc:
        decode_ledger(msgspec.json.encode({"format": "busguard.taint-ledger.v1", **doc}), "l.json")
    assert exc.value.field == field and message in str(exc.value), str(exc.value)


def test_an_output_that_is_not_a_node_is_malformed() -> None:
    with pytest.raises(TraceError, match="output = 'nope': must name a node"):
        validate(incident(), outputs=["nope"])


def test_condition_2_findings_follow_the_cone_order() -> None:
    t = trace(
        node("a", ext="1", fx=True, token="t", sinks=["s"]),
        node("b", ["a"], fx=True, sinks=["s"]),
        node("c", ["b"], fx=True, token="t", sinks=["s"]),
    )
    result = validate(t)
    assert isinstance(result, ReplayRefused)
    assert [(f.kind, f.nodes) for f in result.findings] == [("token_collision", ["a", "c"]), ("missing_token", ["b"])]


def test_long_lists_are_cut_in_text_but_not_in_json() -> None:
    from busguard.policies.taint.render import render

    t = trace(node("root", ext="1", outcome="pending"), *[node(f"leaf{k}", ["root"]) for k in range(60)])
    result = validate(t)
    assert isinstance(result, ReplayRefused) and len(result.outputs) == 60 and len(result.suspect) == 61
    text = render(result, "text")
    assert "... and 40 more (--json lists all)" in text and "... and 11 more (--json lists all)" in text
    assert len(msgspec.json.decode(render(result, "json"))["suspect"]) == 61
